"""What ep-core refuses of onnxruntime's API, and why. The reasons live in ``missing.toml`` (the
table of docs/onnxruntime-compat.md is generated from it): a ``[refused]`` name exists here and
raises ``NotImplemented`` (ep-core's ``NotImplementedByAnyEp``) with its reason when used; an
``[absent]`` name does not exist here at all; ``[notes]`` say how a present name differs."""

from __future__ import annotations

from enum import IntEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

from ep_core.sdk.config import toml_loads
from ep_core.sdk.errors import NotImplementedByAnyEp

REASONS_FILE = Path(__file__).with_name("missing.toml")


@lru_cache(maxsize=1)
def reasons() -> dict[str, dict[str, str]]:
    """``{"absent": {name: reason}, "refused": {name: reason}, "notes": {name: note}}``; names are
    onnxruntime's, dotted below the ``onnxruntime`` package (``InferenceSession.run_async``)."""
    data = toml_loads(REASONS_FILE.read_text(encoding="utf-8"))
    return {k: dict(data.get(k, {})) for k in ("absent", "refused", "notes")}


def refuse(name: str) -> NoReturn:
    """Raise onnxruntime's ``NotImplemented`` for a refused name, with its reason."""
    reason = reasons()["refused"].get(name)
    if reason is None:  # a programming error of this module: every refusal has a written reason
        raise KeyError(f"{name!r} has no [refused] reason in {REASONS_FILE}")
    raise NotImplementedByAnyEp(f"onnxruntime.{name} is not supported by ep-core: {reason}")


class _Refused:
    """A class ep-core refuses: making one, or calling any of its methods, raises the reason."""

    _refused_as = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        refuse(self._refused_as)


def _refused_method(cls_name: str) -> Any:
    def method(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(cls_name)

    return staticmethod(method)


def _refused_class(name: str, methods: tuple[str, ...]) -> type:
    namespace: dict[str, Any] = {m: _refused_method(name) for m in methods}
    namespace["_refused_as"] = name
    namespace["__doc__"] = f"onnxruntime's ``{name}``: refused by ep-core (see ``refusals.reasons()``)."
    namespace["__module__"] = __name__
    return type(name, (_Refused,), namespace)


LoraAdapter = _refused_class("LoraAdapter", ("Load",))
AdapterFormat = _refused_class(
    "AdapterFormat",
    (
        "read_adapter",
        "export_adapter",
        "get_format_version",
        "set_adapter_version",
        "get_adapter_version",
        "set_model_version",
        "get_model_version",
        "set_parameters",
        "get_parameters",
        "adapter_version",  # the pybind class's attributes
        "format_version",
        "model_version",
        "parameters",
    ),
)
SparseTensor = _refused_class(
    "SparseTensor",
    (
        "sparse_coo_from_numpy",
        "sparse_csr_from_numpy",
        "values",
        "as_coo_view",
        "as_csrc_view",
        "as_blocksparse_view",
        "to_cuda",
        "format",
        "dense_shape",
        "data_type",
        "device_name",
        "blocksparse_from_numpy",  # the pybind class's methods
        "get_coo_data",
        "get_csrc_data",
        "get_blocksparse_data",
    ),
)


class OrtSparseFormat(IntEnum):
    """The formats of onnxruntime's ``SparseTensor`` (which ep-core refuses)."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4
