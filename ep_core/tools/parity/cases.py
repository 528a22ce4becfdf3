"""The workloads of a runtime parity run: ONNX node test cases and real zoo models, as inputs
ready to feed a session.

Node cases come from ``onnx.backend.test.case.node.collect_testcases()`` of the pinned onnx (the
data files are no longer shipped). A case's op is the op of its single node; an ``_expanded`` case
(the op's function body) belongs to the op of its twin case."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Case:
    """One thing to run: a model, its feeds, and for node tests the expected outputs."""

    name: str
    kind: str  # "node" or "model"
    op_type: str
    domain: str
    model_bytes: bytes
    feeds: list[dict[str, Any]]
    expected: list[list[Any]] | None
    rtol: float
    atol: float
    expanded: bool = False
    input_elements: int = 0
    skip_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def to_value(v: Any) -> Any:
    """A test-data value as a session takes it: TensorProto -> ndarray, NumPy scalar -> 0-d array,
    sequences element by element."""
    from onnx import TensorProto, numpy_helper

    if v is None:
        return None
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, (list, tuple)):
        return [to_value(x) for x in v]
    if isinstance(v, dict):
        return {k: to_value(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return v
    return np.asarray(v)


def _elements(v: Any) -> int:
    if isinstance(v, np.ndarray):
        return int(v.size)
    if isinstance(v, (list, tuple)):
        return sum(_elements(x) for x in v)
    if isinstance(v, dict):
        return sum(_elements(x) for x in v.values())
    return 1


@functools.lru_cache(maxsize=1)
def _all_node_testcases() -> tuple[Any, ...]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(collect_testcases())


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def node_test_ops() -> set[str]:
    """Every op type some node test case exercises (to check ``--ops`` names)."""
    return {c.model.graph.node[0].op_type for c in _all_node_testcases() if len(c.model.graph.node) == 1}


def node_cases(
    ops: Sequence[str] | None = None,
    pattern: str | None = None,
    include_expanded: bool = True,
    max_elements: int | None = None,
    op_predicate: Callable[[str, str], bool] | None = None,
) -> list[Case]:
    """Node test cases, filtered by exact op names, a regex (searched in the op name and the case
    name), and ``op_predicate(domain, op)``. Cases over ``max_elements`` input elements are kept
    but marked skipped with the reason, so the report says what it left out."""
    rx = re.compile(pattern) if pattern else None
    raw = _all_node_testcases()
    op_of: dict[str, tuple[str, str]] = {}
    for c in raw:
        if len(c.model.graph.node) == 1:
            n = c.model.graph.node[0]
            op_of[c.name] = (n.op_type, "ai.onnx" if n.domain in ("", "ai.onnx") else n.domain)
    wanted = set(ops) if ops else None
    out: list[Case] = []
    for c in raw:
        expanded = bool(_EXPANDED.search(c.name))
        if expanded and not include_expanded:
            continue
        op, domain = (
            op_of.get(_EXPANDED.sub("", c.name)) or op_of.get(c.name) or (c.model.graph.node[0].op_type, "ai.onnx")
        )
        if wanted is not None and op not in wanted:
            continue
        if rx is not None and not (rx.search(op) or rx.search(c.name)):
            continue
        if op_predicate is not None and not op_predicate(domain, op):
            continue
        feeds: list[dict[str, Any]] = []
        expected: list[list[Any]] = []
        input_names = [i.name for i in c.model.graph.input]
        n_elems = 0
        for inputs, outputs in c.data_sets or ():
            vals = [to_value(v) for v in inputs]
            n_elems = max(n_elems, sum(_elements(v) for v in vals))
            feeds.append(dict(zip(input_names, vals, strict=False)))
            expected.append([to_value(v) for v in outputs])
        case = Case(
            name=c.name,
            kind="node",
            op_type=op,
            domain=domain,
            model_bytes=c.model.SerializeToString(),
            feeds=feeds,
            expected=expected,
            rtol=float(c.rtol),
            atol=float(c.atol),
            expanded=expanded,
            input_elements=n_elems,
        )
        if max_elements is not None and n_elems > max_elements:
            case.skip_reason = f"inputs have {n_elems} elements, over the limit of {max_elements} for this run"
        out.append(case)
    return out


# Real models need realistic feeds; dims the model leaves free get these values.
_MODEL_FEEDS: dict[str, dict[str, tuple[list[int], str]]] = {
    "magika": {"bytes": ([1, 2048], "bytes")},
    "ppocr_cls": {"x": ([1, 3, 48, 192], "image")},
    "ppocr_det": {"x": ([1, 3, 64, 64], "image")},
    "silero_vad": {"input": ([1, 512], "audio"), "state": ([2, 1, 128], "zeros"), "sr": ([], "sr")},
    "silero_vad_16k_op15": {"input": ([1, 512], "audio"), "state": ([2, 1, 128], "zeros"), "sr": ([], "sr")},
    "silero_vad_op18_ifless": {"input": ([1, 512], "audio"), "state": ([2, 1, 128], "zeros"), "sr": ([], "sr")},
    "silero_vad_half": {"input": ([1, 512], "audio"), "state": ([2, 1, 128], "zeros"), "sr": ([], "sr")},
}
MODEL_RTOL = 1e-3
MODEL_ATOL = 1e-4


def _feed_for(
    model: str, name: str, shape: Sequence[Any] | None, np_dtype: Any, rng: np.random.Generator
) -> np.ndarray:
    spec = _MODEL_FEEDS.get(model, {}).get(name)
    if spec is not None:
        dims, kind = spec
    else:
        dims = [d if isinstance(d, int) and d > 0 else (1 if i == 0 else 8) for i, d in enumerate(shape or [])]
        kind = "generic"
    dtype = np.dtype(np_dtype) if np_dtype is not None else np.dtype(np.float32)
    if kind == "bytes":
        return rng.integers(0, 257, size=dims).astype(dtype)
    if kind == "sr":
        return np.array(16000, dtype=dtype)
    if kind == "zeros":
        return np.zeros(dims, dtype=dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=dims).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=dims).astype(bool)
    lo, hi = (-1.0, 1.0) if kind in ("image", "audio", "generic") else (0.0, 1.0)
    return rng.uniform(lo, hi, size=dims).astype(dtype)


def model_case(name: str, seed: int = 0) -> Case:
    """A zoo model with deterministic random feeds (seeded), compared only against the oracle."""
    from ep_core.runtime.load import check_and_infer, load_model
    from ep_core.sdk.graph import GraphView, opset_map
    from ep_core.tools.zoo import fetch_model

    path = fetch_model(name)
    proto, _ = load_model(str(path), None)
    fixed = _symbolic_negative_dims(proto)
    model = check_and_infer(proto)
    graph = GraphView(model.graph, opset_map(model))
    rng = np.random.default_rng(seed)
    feeds = {v.name: _feed_for(name, v.name, v.shape, v.np_dtype, rng) for v in graph.inputs}
    ops = sorted({n.op_type for n in graph.all_nodes})
    return Case(
        name=name,
        kind="model",
        op_type="",
        domain="",
        model_bytes=proto.SerializeToString() if fixed else path.read_bytes(),
        feeds=[feeds],
        expected=None,
        rtol=MODEL_RTOL,
        atol=MODEL_ATOL,
        input_elements=sum(int(v.size) for v in feeds.values()),
        meta={"path": str(path), "ops": ops, "nodes": len(graph.all_nodes), "negative_dims_made_symbolic": fixed},
    )


def _symbolic_negative_dims(model: Any) -> list[str]:
    """Some exporters (paddle2onnx) write a free dim as ``dim_value: -1``, which the IR does not
    allow (dims are >= 0 or symbolic); make those symbolic so a session accepts real inputs.
    Returns the inputs/outputs changed, which the report records."""
    changed: list[str] = []
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value < 0:
                d.dim_param = f"{vi.name}_dim{i}"
                changed.append(vi.name)
    return sorted(set(changed))
