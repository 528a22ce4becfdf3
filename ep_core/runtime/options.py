"""Session options, run options and provider config files: one pydantic model each.

Every session config key the EPContext design names is known here with its allowed values;
``ep.<ProviderName>.<key>`` entries carry provider options. Unknown keys and bad values are
rejected naming the key and what is allowed."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ep_core.sdk.config import toml_loads
from ep_core.sdk.errors import ConfigError, NotImplementedByAnyEp

if TYPE_CHECKING:
    from ep_core.sdk.devices import EpDevice

CONFIG_ENV = "EP_CORE_CONFIG"
_BOOL = ("0", "1")

# key -> allowed values (None: any string), and what it is for
SESSION_CONFIG_KEYS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "ep.context_enable": (_BOOL, "1 dumps an EPContext model after compiling"),
    "ep.context_file_path": (
        None,
        "output path of the EPContext model; folder for context binaries of a model loaded from bytes",
    ),
    "ep.context_embed_mode": (_BOOL, "1 embeds context payloads in the model, 0 writes them beside it"),
    "ep.context_node_name_prefix": (None, "prefix for EPContext node names, partition names and EP graph names"),
    "ep.context_model_external_initializers_file_name": (
        None,
        "put every initializer of the EPContext model in this file",
    ),
    "ep.context_overwrite": (_BOOL, "1 lets EPContext generation replace an existing output file"),
    "ep.share_ep_contexts": (_BOOL, "1 makes sessions share EP contexts (weight sharing)"),
    "ep.stop_share_ep_contexts": (_BOOL, "1 marks the last session of a sharing group"),
    "ep.context_require_signature": (
        _BOOL,
        "1 refuses context native code not signed by a trusted key, instead of rebuilding it from its spec",
    ),
    "session.model_external_initializers_file_folder_path": (
        None,
        "folder of external data for a model loaded from bytes",
    ),
    "session.disable_cpu_ep_fallback": (_BOOL, "1 stops the CPU fallback EP being appended"),
    "session.fail_on_suboptimal_compiled_model": (_BOOL, "1 fails on SUPPORTED_PREFER_RECOMPILATION"),
    "session.disable_compile": (_BOOL, "1 refuses to compile: only precompiled EPContext nodes may be fused"),
    "session.enable_gqa_fusion": (_BOOL, "1 fuses GroupQueryAttention (assumes no padding, consecutive position_ids)"),
    "session.optimizer_cache": (_BOOL, "0 runs the graph optimizer instead of reusing its per-machine cache"),
}


@functools.cache
def onnxruntime_config_keys() -> dict[str, tuple[tuple[str, ...] | None, str, str | None]]:
    """onnxruntime's own session config keys: key -> (values honoured or None for any, why, the
    ep-core key it also sets). Data in ``onnxruntime_config_keys.toml``, read once."""
    data = toml_loads(Path(__file__).with_name("onnxruntime_config_keys.toml").read_text(encoding="utf-8"))
    return {k: (tuple(v["values"]) if "values" in v else None, v["why"], v.get("same_as")) for k, v in data.items()}


def validate_config_entry(key: str, value: Any) -> str:
    """Check one session config entry; returns the value as the string the session stores."""
    if isinstance(value, bool):
        value = "1" if value else "0"
    if not isinstance(value, (str, int, float)):
        raise ConfigError(f"session config entry {key!r} must be a string, got {type(value).__name__} {value!r}")
    text = str(value)
    if key.startswith("ep.") and key.count(".") >= 2 and key.split(".")[1].endswith("ExecutionProvider"):
        return text  # provider option: checked by the provider's create_ep
    ort_keys = onnxruntime_config_keys()
    known = SESSION_CONFIG_KEYS.get(key) or ort_keys.get(key)
    if known is None:
        raise ConfigError(
            f"unknown session config entry {key!r}. Known keys: {sorted(SESSION_CONFIG_KEYS)} and onnxruntime's "
            f"{sorted(ort_keys)}; provider options are written 'ep.<ProviderName>.<option>'"
        )
    allowed, why = known[:2]
    if allowed is not None and text not in allowed:
        raise ConfigError(f"session config entry {key!r} = {text!r} is not allowed ({why}); use one of {list(allowed)}")
    return text


class GraphOptimizationLevel(int, Enum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(int, Enum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(int, Enum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class EpSelectionPolicy(str, Enum):
    """Device policies, as ORT's ``OrtExecutionProviderDevicePolicy``."""

    DEFAULT = "DEFAULT"
    PREFER_CPU = "PREFER_CPU"
    PREFER_GPU = "PREFER_GPU"
    PREFER_NPU = "PREFER_NPU"
    MAX_PERFORMANCE = "MAX_PERFORMANCE"
    MAX_EFFICIENCY = "MAX_EFFICIENCY"
    MIN_OVERALL_POWER = "MIN_OVERALL_POWER"


SelectionDelegate = Callable[[Sequence["EpDevice"], Mapping[str, str], Mapping[str, str], int], Sequence["EpDevice"]]


class _Checked(BaseModel):
    """An options model whose bad values raise ``ConfigError`` (INVALID_ARGUMENT) naming the
    option and what is allowed, at construction and at assignment, not pydantic's error."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_describe_validation_error(type(self).__name__, exc, type(self))) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise ConfigError(_describe_validation_error(type(self).__name__, exc, type(self))) from None


class SessionOptions(_Checked):
    """Options of one ``InferenceSession``: ``onnxruntime.SessionOptions``'s attributes, names and
    defaults (docs/onnxruntime-compat.md says what each does here)."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid", arbitrary_types_allowed=True)

    enable_profiling: bool = False
    profile_file_prefix: str = "ep_core_profile"
    log_severity_level: int = Field(default=-1, ge=-1, le=4)  # -1: the default logger's severity
    log_verbosity_level: int = Field(default=0, ge=0)
    logid: str = ""
    intra_op_num_threads: int = Field(default=0, ge=0)  # 0: the CPUs this process may use
    # used by ORT_PARALLEL only, as in onnxruntime; ep-core refuses that mode, so it sizes nothing here
    inter_op_num_threads: int = Field(default=0, ge=0)
    use_per_session_threads: bool = True
    # ep-core runs nodes one at a time in topological order: ORT_PARALLEL and other orders are refused
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    execution_order: ExecutionOrder = ExecutionOrder.DEFAULT
    # DISABLE_ALL: no constant folding; BASIC and above fold (fusions come with the graph optimizer)
    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    optimized_model_filepath: str = ""  # the folded, pruned model is written there at creation
    # glibc malloc keeps freed memory for reuse while an arena session lives (ep_core/host/memory.py)
    enable_cpu_mem_arena: bool = True
    # no pattern planner to turn off (outputs are NumPy's): accepted with nothing to change
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True  # slots are freed after their last reader either way
    use_deterministic_compute: bool = False  # the reference EP is deterministic already
    config_entries: dict[str, str] = Field(default_factory=dict)
    free_dimension_overrides: dict[str, int] = Field(default_factory=dict)  # dim_param name -> value
    free_dimension_overrides_by_denotation: dict[str, int] = Field(default_factory=dict)
    initializers: dict[str, Any] = Field(default_factory=dict)  # name -> array: add_initializer & co.
    external_initializer_files: dict[str, Any] = Field(default_factory=dict)  # file name -> uint8 view
    load_cancelled: bool = False
    ep_selection_policy: EpSelectionPolicy | None = None
    ep_selection_delegate: Any = None
    provider_devices: list[tuple[tuple[Any, ...], dict[str, str]]] = Field(default_factory=list)

    @field_validator("config_entries")
    @classmethod
    def _check_entries(cls, entries: dict[str, str]) -> dict[str, str]:
        return {k: validate_config_entry(k, v) for k, v in entries.items()}

    def add_session_config_entry(self, key: str, value: Any) -> None:
        text = validate_config_entry(key, value)
        same_as = onnxruntime_config_keys().get(key, (None, "", None))[2]  # an onnxruntime key for one of ep-core's
        self.config_entries = {**self.config_entries, key: text, **({same_as: text} if same_as else {})}

    def get_session_config_entry(self, key: str, default: str | None = None) -> str | None:
        return self.config_entries.get(key, default)

    def has_session_config_entry(self, key: str) -> bool:
        return key in self.config_entries

    def flag(self, key: str) -> bool:
        return self.config_entries.get(key, "0") == "1"

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        self.free_dimension_overrides = {dim_name: dim_value, **self.free_dimension_overrides}  # first wins, as ORT

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        d = self.free_dimension_overrides_by_denotation
        self.free_dimension_overrides_by_denotation = {dim_denotation: dim_value, **d}

    def add_initializer(self, name: str, value: Any) -> None:  # an ndarray or anything with numpy()
        self.add_external_initializers([name], [value])

    def add_external_initializers(self, names: Sequence[str], values: Sequence[Any]) -> None:
        self.initializers = {**self.initializers, **dict(zip(names, values, strict=True))}

    def add_external_initializers_from_files_in_memory(
        self, names: Sequence[str], buffers: Sequence[Any], lengths: Sequence[int]
    ) -> None:
        import numpy as np  # not at import: ``import ep_core`` stays light

        files = {n: np.frombuffer(b, np.uint8)[: int(k)] for n, b, k in zip(names, buffers, lengths, strict=True)}
        self.external_initializer_files = {**self.external_initializer_files, **files}

    def set_load_cancellation_flag(self, value: bool) -> None:  # read at creation's steps, from any thread
        self.load_cancelled = value

    def register_custom_ops_library(self, library_path: str) -> None:
        raise NotImplementedByAnyEp(
            f"register_custom_ops_library({library_path!r}): ep-core cannot load a native custom-op library; "
            "write an EP plugin with those kernels instead (docs/writing-an-ep.md)"
        )

    def add_provider_for_devices(
        self, ep_devices: Sequence["EpDevice"], options: Mapping[str, Any] | None = None
    ) -> None:
        """Select an EP on specific devices (all from one EP), like ORT's
        ``SessionOptions.add_provider_for_devices``."""
        devs = tuple(ep_devices)
        if not devs:
            raise ConfigError("add_provider_for_devices needs at least one EpDevice (see ep_core.get_ep_devices())")
        names = {d.ep_name for d in devs}
        if len(names) != 1:
            raise ConfigError(f"add_provider_for_devices takes devices of one EP, got {sorted(names)}")
        self.provider_devices = [*self.provider_devices, (devs, {k: str(v) for k, v in (options or {}).items()})]

    def set_provider_selection_policy(self, policy: EpSelectionPolicy | str) -> None:
        self.ep_selection_policy = policy  # type: ignore[assignment]  # a policy's name: checked as any field

    def set_provider_selection_policy_delegate(self, delegate: SelectionDelegate) -> None:
        self.ep_selection_delegate = delegate


class RunOptions(_Checked):
    """``onnxruntime.RunOptions``: per-run logging, tag, terminate flag and config entries."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    run_tag: str = ""  # onnxruntime's ``logid`` of a run is this tag
    log_severity_level: int = Field(default=-1, ge=-1, le=4)
    log_verbosity_level: int = Field(default=0, ge=0)
    terminate: bool = False
    only_execute_path_to_fetches: bool = False
    config_entries: dict[str, str] = Field(default_factory=dict)

    @property
    def logid(self) -> str:
        return self.run_tag

    @logid.setter
    def logid(self, value: str) -> None:
        self.run_tag = value

    def add_run_config_entry(self, key: str, value: str) -> None:
        self.config_entries = {**self.config_entries, key: str(value)}

    def get_run_config_entry(self, key: str) -> str:
        return self.config_entries[key]


# ------------------------------------------------------------------------ provider config file
OptionValue = Union[str, int, float, bool]


class ProviderEntry(BaseModel):
    """One provider in priority order: its name, which device (``gpu``, ``gpu:1``, ``cpu``) and
    options."""

    model_config = ConfigDict(extra="forbid")

    name: str
    device: str | None = Field(default=None, pattern=r"^(cpu|gpu|npu)(:\d+)?$")
    options: dict[str, OptionValue] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _ep_suffix(cls, name: str) -> str:
        if not name.endswith("ExecutionProvider"):
            raise ValueError(f"provider names end in 'ExecutionProvider', got {name!r}")
        return name


class SessionOptionsEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enable_profiling: bool = False
    profile_file_prefix: str = "ep_core_profile"
    log_severity_level: int = Field(default=-1, ge=-1, le=4)
    intra_op_num_threads: int = Field(default=0, ge=0)
    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL


class ProviderConfig(BaseModel):
    """A provider config file (TOML or JSON): providers in priority order, or a device policy,
    plus session options and session config entries."""

    model_config = ConfigDict(extra="forbid")

    providers: list[ProviderEntry] = Field(default_factory=list)
    policy: EpSelectionPolicy | None = None
    session_options: SessionOptionsEntry = Field(default_factory=SessionOptionsEntry)
    config_entries: dict[str, OptionValue] = Field(default_factory=dict)
    source: str = Field(default="<memory>", exclude=True)

    def apply_to(self, options: SessionOptions) -> SessionOptions:
        """Session options with this file's settings layered over ``options``."""
        merged = options.model_copy(deep=True)
        for key, value in self.session_options.model_dump(exclude_unset=True).items():
            setattr(merged, key, value)
        for key, value in self.config_entries.items():
            try:
                merged.add_session_config_entry(key, value)
            except ConfigError as exc:
                raise ConfigError(f"{self.source}: config_entries.{key}: {exc.message}") from None
        if self.policy is not None and merged.ep_selection_policy is None:
            merged.ep_selection_policy = self.policy
        return merged


_SECTIONS: dict[tuple[Any, ...], type[BaseModel]] = {
    ("providers",): ProviderEntry,
    ("session_options",): SessionOptionsEntry,
}


def _describe_validation_error(source: str, err: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line per error: where, what is wrong, the value; an unknown key lists the keys allowed there."""
    lines = []
    for e in err.errors():
        msg, section = e["msg"], tuple(p for p in e["loc"][:-1] if not isinstance(p, int))
        if e["type"] == "extra_forbidden":
            allowed = {(): root or ProviderConfig, **_SECTIONS}.get(section)
            msg = "unknown key" + (f"; allowed keys here: {sorted(allowed.model_fields)}" if allowed else "")
        lines.append(f"{source}: {'.'.join(str(p) for p in e['loc'])}: {msg} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_provider_config(path: str | os.PathLike[str]) -> ProviderConfig:
    """Read and validate a TOML or JSON provider config file; errors name the file, the key path,
    the bad value and what is allowed."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"provider config file {str(p)!r} does not exist")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        elif p.suffix.lower() == ".toml":
            data = toml_loads(text)
        else:
            raise ConfigError(f"provider config file {str(p)!r} must end in .toml or .json")
    except ValueError as exc:  # json.JSONDecodeError and TOMLDecodeError are ValueErrors
        raise ConfigError(f"{p}: not valid {p.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a table/object")
    try:
        config = ProviderConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe_validation_error(str(p), exc)) from None
    config.source = str(p)
    for key, value in config.config_entries.items():
        try:
            validate_config_entry(key, value)
        except ConfigError as exc:
            raise ConfigError(f"{p}: config_entries.{key}: {exc.message}") from None
    return config
