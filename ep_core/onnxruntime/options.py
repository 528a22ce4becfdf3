"""``onnxruntime.SessionOptions`` and ``RunOptions``: ep-core's own option classes (every
onnxruntime attribute, each with its effect or refused) with onnxruntime's ways where they differ:
``add_provider``/``has_providers`` (which select an EP by name through ep-core's device selection,
so an ep-core session given these options honours them too), a negative thread count meaning the
default, profiles named ``onnxruntime_profile_...json``, ``AttributeError`` for an attribute
onnxruntime does not have, ``RuntimeError`` for a run config key that is not set, and the rest of
onnxruntime 1.31's session config keys, each accepted or refused with its reason (``ORT_KEYS``).
``SessionOptions.get_session_config_entry`` of a key not set gives None (onnxruntime raises
``RuntimeError``): ep-core's engine reads its options through it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import field_validator

from ep_core.runtime import options as _options
from ep_core.runtime.discover import get_registry
from ep_core.runtime.select import get_ep_devices
from ep_core.sdk.errors import ConfigError, InvalidArgument

_BOOL = ("0", "1")
_SPIN = "ep-core keeps no thread pool of its own that could spin or split work into blocks"
_NO_QDQ = "ep-core's optimizer makes no QDQ rewrites"
_NO_MLAS = "ep-core's kernels do not use onnxruntime's MLAS library"

# onnxruntime 1.31's session config keys (onnxruntime_session_options_config_keys.h) that ep-core's
# engine does not list (its own and onnxruntime's most used ones are in ep_core.runtime.options):
# (values accepted, None for any; why). A key tuning what ep-core does not have takes any value,
# since what it asks holds either way; a value asking for what ep-core cannot do is refused.
ORT_KEYS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "session.inter_op.spin_backoff_max": (None, _SPIN),
    "session.intra_op.spin_backoff_max": (None, _SPIN),
    "session.inter_op.spin_duration_us": (None, _SPIN),
    "session.intra_op.spin_duration_us": (None, _SPIN),
    "session.force_spinning_stop": (_BOOL, _SPIN),
    "session.dynamic_block_base": (None, _SPIN),
    "session.prepack.enable_parallel": (_BOOL, "ep-core's kernels prepack no weights either way"),
    "session.save_external_prepacked_constant_initializers": (
        ("0",),
        "ep-core's kernels prepack no weights, so there are none to save",
    ),
    "session.record_ep_graph_assignment_info": (
        _BOOL,
        "ep-core records every session's assignment (get_provider_graph_assignment_info) either way",
    ),
    "session.graph_optimizations_loop_level": (
        None,
        "ep-core's optimizer folds constants in one pass; it has no loop of graph transformers to repeat",
    ),
    "session.disable_qdq_constant_folding": (("0",), "ep-core's constant folding folds DequantizeLinear nodes too"),
    "session.enable_dq_matmulnbits_fusion": (("0",), _NO_QDQ + " (no DequantizeLinear+MatMul to MatMulNBits fusion)"),
    "session.qdq_matmulnbits_accuracy_level": (None, _NO_QDQ + ": there is no MatMulNBits rewrite for it to tune"),
    "session.qdq_matmulnbits_block_size": (None, _NO_QDQ + ": there is no MatMulNBits rewrite for it to tune"),
    "optimization.enable_gelu_approximation": (("0",), "ep-core's optimizer makes no Gelu approximation rewrite"),
    "optimization.enable_cast_chain_elimination": (("0",), "ep-core's optimizer removes no Cast chains"),
    "optimization.disable_specified_optimizers": (
        ("",),
        "it names onnxruntime's C++ graph transformers, which ep-core does not have; lower "
        "SessionOptions.graph_optimization_level to turn optimizations off",
    ),
    "optimization.minimal_build_optimizations": (
        ("",),
        "it belongs to onnxruntime's minimal build (ORT-format models)",
    ),
    "session.use_ort_model_bytes_for_initializers": (("0",), "ep-core reads ONNX models, not onnxruntime's ORT format"),
    "session.disable_model_compile": (_BOOL, "ep-core's session.disable_compile, which it sets too"),
    "mlas.disable_kleidiai": (_BOOL, _NO_MLAS + " (nor KleidiAI)"),
    "mlas.use_lut_gemm": (_BOOL, _NO_MLAS),
    "mlas.enable_gemm_fastmath_arm64_bfloat16": (("0",), _NO_MLAS + ": no GEMM computes in bfloat16 for speed"),
}
_ALIASES = {"session.disable_model_compile": "session.disable_compile"}  # onnxruntime's key -> ep-core's


def validate_config_entry(key: str, value: Any) -> str:
    """A session config entry checked against onnxruntime's keys listed here, then ep-core's."""
    known = ORT_KEYS.get(key)
    if known is None:
        return _options.validate_config_entry(key, value)
    text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    allowed, why = known
    if allowed is not None and text not in allowed:
        raise ConfigError(f"session config entry {key!r} = {text!r} is not allowed ({why}); use one of {list(allowed)}")
    return text


class SessionOptions(_options.SessionOptions):
    __doc__ = _options.SessionOptions.__doc__

    # onnxruntime takes any int: 0 or less lets it choose the size (a negative one is kept as set)
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    profile_file_prefix: str = "onnxruntime_profile_"  # files onnxruntime_profile__<date>.json, as onnxruntime's

    @field_validator("config_entries")
    @classmethod
    def _check_entries(cls, entries: dict[str, str]) -> dict[str, str]:
        return {k: validate_config_entry(k, v) for k, v in entries.items()}

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name not in type(self).model_fields and not hasattr(type(self), name):
            raise AttributeError(f"'SessionOptions' object has no attribute '{name}' (onnxruntime's have none either)")
        super().__setattr__(name, value)

    def add_session_config_entry(self, key: str, value: Any) -> None:
        text = validate_config_entry(key, value)
        entries = {**self.config_entries, key: text}
        if key in _ALIASES:
            entries[_ALIASES[key]] = text
        self.config_entries = entries

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any] | None = None) -> None:
        """Use the EP named (or an EP answering to that onnxruntime name) on its first device, with
        these options, as onnxruntime's ``add_provider`` (used by ``ModelCompiler``)."""
        name = get_registry().handle(provider_name).name
        devices = [d for d in get_ep_devices() if d.ep_name == name]
        if not devices:
            raise ConfigError(f"execution provider {provider_name!r} has no device here (see `ep-core providers`)")
        self.add_provider_for_devices(devices[:1], provider_options)

    def has_providers(self) -> bool:
        """Whether EPs were added (``add_provider``, ``add_provider_for_devices``)."""
        return bool(self.provider_devices)


class RunOptions(_options.RunOptions):
    __doc__ = _options.RunOptions.__doc__

    def get_run_config_entry(self, key: str) -> str:
        """The value set for ``key``; one not set is a ``RuntimeError``, as in onnxruntime."""
        if key not in self.config_entries:
            raise _ConfigKeyError(f"RunOptions does not have configuration with key: {key}")
        return self.config_entries[key]


class _ConfigKeyError(InvalidArgument, RuntimeError):
    """A config key that is not set: onnxruntime raises ``RuntimeError``."""


__all__ = ["ORT_KEYS", "RunOptions", "SessionOptions", "validate_config_entry"]
