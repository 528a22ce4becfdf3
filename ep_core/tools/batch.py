"""Batch inference over Ray Data: ``Dataset.map_batches`` with one ep-core session per actor.

``EpCoreBatchPredictor`` is a plain class (``map_batches`` turns a class into an actor pool, so
nothing here imports ray at import time); ``predict_dataset`` wires it and imports ray when
called. Sessions are configured with ep-core's own provider config model (``ProviderConfig``, a
provider config file, ``SessionOptions`` fields, session config entries), never another format.
``compile_context_model`` compiles once on the driver, so actors load an EPContext model instead
of compiling (Numba CPU on magika: a session in about 0.7 s instead of 5 s; docs/scale-out.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from ep_core.sdk.errors import ConfigError, EpCoreError, InvalidArgument, RuntimeException

if TYPE_CHECKING:
    from ep_core.runtime.options import ProviderConfig, SessionOptions

RAY_HINT = "pip install 'ep-core[ray]'"
ModelSource = Union[str, "os.PathLike[str]", bytes]
ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any], "ProviderConfig", None]
OptionsSource = Union[Mapping[str, Any], "SessionOptions", None]


def require_ray() -> Any:
    """``ray.data``, or ``RayNotInstalled`` (the sweeps' error too) saying how to install it: Ray is
    the optional ``ray`` extra."""
    try:
        import ray.data
    except ImportError as exc:
        from ep_core.tools.sweep.ray_executor import RayNotInstalled

        raise RayNotInstalled(
            f"batch inference on Ray needs ray[data], which cannot be imported ({exc}): {RAY_HINT}"
        ) from None
    return ray.data


def _pydantic_problems(exc: Any) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors())


def resolve_config(config: ConfigSource) -> ProviderConfig | None:
    """A provider config file (TOML/JSON), a dict shaped like one, or a ``ProviderConfig``,
    validated: on the driver, so a bad config fails before any actor starts."""
    from pydantic import ValidationError

    from ep_core.runtime.options import ProviderConfig, load_provider_config, validate_config_entry

    if config is None or isinstance(config, ProviderConfig):
        return config
    if not isinstance(config, Mapping):
        return load_provider_config(config)
    try:
        parsed = ProviderConfig.model_validate(dict(config))
    except ValidationError as exc:
        raise ConfigError(f"provider config dict: {_pydantic_problems(exc)}") from None
    for key, value in parsed.config_entries.items():
        validate_config_entry(key, value)
    return parsed


def build_session_options(fields: OptionsSource = None, entries: Mapping[str, Any] | None = None) -> SessionOptions:
    """``SessionOptions`` from its field values (or a copy of one), plus session config entries."""
    from pydantic import ValidationError

    from ep_core.runtime.options import SessionOptions

    if isinstance(fields, SessionOptions):
        options = fields.model_copy(deep=True)
    else:
        try:
            options = SessionOptions(**dict(fields or {}))
        except ValidationError as exc:
            raise ConfigError(f"session_options: {_pydantic_problems(exc)}") from None
    for key, value in (entries or {}).items():
        options.add_session_config_entry(key, value)
    return options


def compile_context_model(
    model: ModelSource,
    output: str | os.PathLike[str] | None = None,
    *,
    providers: Sequence[Any] | None = None,
    config: ConfigSource = None,
    session_options: OptionsSource = None,
    config_entries: Mapping[str, Any] | None = None,
) -> bytes | str:
    """Compile ``model`` once with ``ModelCompiler``: the EPContext model's bytes (payloads embedded,
    so they travel to remote actors through the object store), or its path when ``output`` is given
    (then every worker must be able to read it). FAIL when no EP compiled anything."""
    from ep_core.runtime.compile_api import ModelCompiler

    options = build_session_options(session_options, config_entries)
    compiler = ModelCompiler(
        options,
        model,
        embed_compiled_data_into_model=output is None,
        providers=providers,
        config=resolve_config(config),
    )
    return compiler.compile_to_bytes() if output is None else compiler.compile_to_file(output)


def _retyped(exc: EpCoreError, where: str) -> EpCoreError:
    """The same error class with ``where`` (model, EPs) in front, so it reads right after Ray wraps it."""
    return type(exc)(f"{where}: {exc.message}")


class EpCoreBatchPredictor:
    """One ep-core session, built once (per Ray actor), mapping a batch of columns to output columns.

    ``model``: a path (readable where the actor runs) or model bytes, an EPContext model included.
    ``providers`` (ORT-style names or ``(name, options)``), ``config`` (a provider config file, a
    dict in its shape, or a ``ProviderConfig``: providers with devices and options, a policy),
    ``session_options`` (``SessionOptions`` field values) and ``config_entries`` (session config
    entries) configure the session as ``InferenceSession`` does. Each model input reads the column
    of its own name unless ``input_columns`` maps it (``{input: column}``); outputs become columns
    named as the outputs (``output_names`` picks a subset); ``keep_columns`` pass through (ids).

    A Ray batch is one run when the model's batch dimension is free; a model with a fixed batch
    size ``k`` runs the batch ``k`` rows at a time and the outputs are stacked."""

    def __init__(
        self,
        model: ModelSource,
        *,
        providers: Sequence[Any] | None = None,
        config: ConfigSource = None,
        session_options: OptionsSource = None,
        config_entries: Mapping[str, Any] | None = None,
        input_columns: Mapping[str, str] | None = None,
        output_names: Sequence[str] | None = None,
        keep_columns: Sequence[str] = (),
        name: str | None = None,
    ) -> None:
        t0 = time.perf_counter()
        from ep_core.runtime.options import RunOptions
        from ep_core.runtime.session import InferenceSession

        self.name = name or (
            f"model <{len(model)} bytes>" if isinstance(model, bytes) else f"model {os.fspath(model)!r}"
        )
        cfg = resolve_config(config)
        options = build_session_options(session_options, config_entries)
        asked = [p if isinstance(p, str) else p[0] for p in providers or ()]
        asked = asked or ([e.name for e in cfg.providers] if cfg is not None else [])
        try:
            self.session = InferenceSession(model, options, providers=providers, config=cfg)
        except EpCoreError as exc:
            raise _retyped(exc, f"{self.name} on {asked or 'the default providers'}") from exc
        self.where = f"{self.name} on {self.session.get_providers()}"
        inputs, outputs = self.session.graph.inputs, [o.name for o in self.session.get_outputs()]
        mapping = dict(input_columns or {})
        self._check_names("input_columns", mapping, [i.name for i in inputs])
        self.columns = {i.name: mapping.get(i.name, i.name) for i in inputs}
        self.outputs = list(output_names) if output_names is not None else outputs
        self._check_names("output_names", self.outputs, outputs)
        # a subset of the outputs: only the nodes they need run
        self.run_options = RunOptions(only_execute_path_to_fetches=True) if output_names is not None else None
        self.keep = tuple(keep_columns)
        if clash := sorted(set(self.keep) & set(self.outputs)):
            raise InvalidArgument(f"{self.where}: keep_columns {clash} are also output names; rename or drop them")
        self.step = self._batch_step(inputs)
        self.startup_seconds = time.perf_counter() - t0

    def _check_names(self, what: str, given: Any, known: list[str]) -> None:
        if unknown := [n for n in given if n not in known]:
            raise InvalidArgument(
                f"{self.where}: {what} names {unknown}, which the model does not have; it has {known}"
            )

    def _batch_step(self, inputs: Sequence[Any]) -> int | None:
        """Rows per run: the model's fixed batch size, or None when its batch dimension is free."""
        fixed = set()
        for v in inputs:
            if v.shape is not None and len(v.shape) == 0:
                raise InvalidArgument(
                    f"{self.where}: input {v.name!r} is a scalar, so no dataset column (one value per row) can feed it"
                )
            if v.shape and isinstance(v.shape[0], int) and v.shape[0] > 0:
                fixed.add(v.shape[0])
        if len(fixed) > 1:
            raise InvalidArgument(f"{self.where}: the inputs' batch dimensions disagree ({sorted(fixed)})")
        return fixed.pop() if fixed else None

    def describe(self) -> dict[str, Any]:
        """What this actor built: its providers, start-up time, EPContext nodes loaded, rows per run."""
        nodes = sum(n.op_type == "EPContext" for n in self.session.model.graph.node)
        return {
            "model": self.name,
            "providers": self.session.get_providers(),
            "startup_seconds": self.startup_seconds,
            "epcontext_nodes": nodes,
            "rows_per_run": self.step,
        }

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        wanted = [*self.columns.values(), *self.keep]
        if missing := [c for c in wanted if c not in batch]:
            raise InvalidArgument(
                f"{self.where}: the batch has no column {missing} (it has {sorted(batch)}); map model inputs to "
                "columns with input_columns={input: column}"
            )
        feed = {i: np.asarray(batch[c]) for i, c in self.columns.items()}
        rows = len(np.asarray(batch[wanted[0]])) if wanted else 0
        step = self.step or rows
        if step and rows % step:
            raise InvalidArgument(
                f"{self.where}: the model takes batches of exactly {step} rows and this batch has {rows}; "
                f"use a batch_size that is a multiple of {step}"
            )
        parts = [self._run({k: v[s : s + step] for k, v in feed.items()}, step) for s in range(0, rows, step or 1)]
        if not parts:  # an empty batch: a free batch dimension runs it as it is
            parts = [self._run(feed, 0)]
        out = {
            n: parts[0][j] if len(parts) == 1 else np.concatenate([p[j] for p in parts])
            for j, n in enumerate(self.outputs)
        }
        out.update({c: np.asarray(batch[c]) for c in self.keep})
        return out

    def _run(self, feed: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        try:
            values = self.session.run(self.outputs, feed, self.run_options)
        except EpCoreError as exc:
            raise _retyped(exc, f"{self.where}, batch of {rows} rows") from exc
        except Exception as exc:  # not an ep-core error: still typed, still naming the model and EPs
            raise RuntimeException(f"{self.where}, batch of {rows} rows: {type(exc).__name__}: {exc}") from exc
        for name, value in zip(self.outputs, values):
            if np.ndim(value) == 0 or len(value) != rows:
                raise InvalidArgument(
                    f"{self.where}: output {name!r} has shape {list(np.shape(value))}, not one row per input row "
                    f"({rows}), so it cannot be a column; leave it out with output_names"
                )
        return [np.asarray(v) for v in values]


def predict_dataset(
    ds: Any,
    model: ModelSource,
    *,
    providers: Sequence[Any] | None = None,
    config: ConfigSource = None,
    session_options: OptionsSource = None,
    config_entries: Mapping[str, Any] | None = None,
    input_columns: Mapping[str, str] | None = None,
    output_names: Sequence[str] | None = None,
    keep_columns: Sequence[str] = (),
    precompile: bool = False,
    actors: int = 1,
    batch_size: int | None = 64,
    num_cpus: float = 1,
    **map_batches_args: Any,
) -> Any:
    """``ds.map_batches(EpCoreBatchPredictor, ...)`` on a fixed pool of ``actors``, each reserving
    ``num_cpus`` (and what ``map_batches_args`` asks: ``num_gpus``, ``resources``...). Returns the
    lazy Dataset of output (and kept) columns.

    The provider config and session options are checked here, on the driver. Each session's
    threads default to ``num_cpus`` (``intra_op_num_threads`` in ``session_options`` overrides).
    ``precompile=True`` compiles the model once here (``compile_context_model``) and ships the
    EPContext model's bytes, so actors skip compiling."""
    ray_data = require_ray()
    cfg = resolve_config(config)
    options = build_session_options(session_options, config_entries)
    if "intra_op_num_threads" not in options.model_fields_set:
        options.intra_op_num_threads = max(1, int(num_cpus))
    name = None if isinstance(model, bytes) else f"model {os.fspath(model)!r}"
    if precompile:
        model = compile_context_model(model, providers=providers, config=cfg, session_options=options)
        name = f"EPContext {name or 'model'} (compiled on the driver)"
    kwargs = {
        "model": model,
        "providers": providers,
        "config": cfg,
        "session_options": options,
        "input_columns": input_columns,
        "output_names": output_names,
        "keep_columns": tuple(keep_columns),
        "name": name,
    }
    map_batches_args.setdefault("udf_modifying_row_count", False)
    return ds.map_batches(
        EpCoreBatchPredictor,
        fn_constructor_kwargs=kwargs,
        compute=ray_data.ActorPoolStrategy(size=actors),
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=num_cpus,
        **map_batches_args,
    )
