"""Helpers of the optimizer tests: real models built with onnx.helper, run through ep-core sessions
at ORT_DISABLE_ALL and at a level, the optimized graph read back from optimized_model_filepath."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession
from ep_core.runtime.options import GraphOptimizationLevel, SessionOptions

LEVELS = GraphOptimizationLevel
F = TensorProto.FLOAT


def make_model(
    nodes: Sequence[Any],
    inputs: Sequence[tuple[str, Sequence[int | str] | None]],
    outputs: Sequence[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def session(model: onnx.ModelProto, level: int, path: Path | None = None, providers: Any = None) -> InferenceSession:
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel(level)
    if path is not None:
        so.optimized_model_filepath = str(path)
    return InferenceSession(model.SerializeToString(), so, providers=providers)


def graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield g
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from graphs(sub)


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Op types over the graph and its subgraphs, contrib ops as 'com.microsoft::Op'."""
    return Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for g in graphs(model.graph) for n in g.node)


def optimized(model: onnx.ModelProto, level: int, feeds: dict[str, np.ndarray], atol: float = 1e-5) -> Any:
    """The graph a session at ``level`` runs (the optimizer's output), after checking its outputs
    match those of a session at ORT_DISABLE_ALL."""
    want = session(model, LEVELS.ORT_DISABLE_ALL).run(None, feeds)
    s = session(model, level)
    got = s.run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)
    return s._built.model
