"""onnxruntime as the oracle for the reference EP's kernel tests: one-node models, and a run of the
same model on both engines (onnxruntime at one thread, its plain semantics: some of its contrib
kernels, DynamicQuantizeLSTM among them, give thread-count-dependent results)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from onnx import helper, numpy_helper

MS = "com.microsoft"


def one_node_model(
    op: str, ins: list[tuple[str, Any]], outs: list[Any], consts: set[str], domain: str = MS, **attrs: Any
) -> tuple[bytes, dict[str, np.ndarray]]:
    """A one-node model and its feeds: ``ins`` as (name, array or None for an absent optional input),
    those in ``consts`` as initializers; ``outs`` are the output element types."""
    names = [n if a is not None else "" for n, a in ins]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(len(outs))], domain=domain, **attrs)
    graph_in = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in ins
        if a is not None and n not in consts
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in ins if a is not None and n in consts]
    graph_out = [
        helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(t)), None)
        for i, t in enumerate(outs)
    ]
    graph = helper.make_graph([node], op, graph_in, graph_out, inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, ir_version=10, opset_imports=opsets)
    return model.SerializeToString(), {n: a for n, a in ins if a is not None and n not in consts}


def ours(model: bytes, feeds: dict[str, np.ndarray]) -> list[Any]:
    """The model on the reference EP."""
    import ep_core

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    return sess.run(None, feeds)


def theirs(model: bytes, feeds: dict[str, np.ndarray]) -> list[Any]:
    """The model on onnxruntime's CPU EP at one thread."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def run_both(model: bytes, feeds: dict[str, np.ndarray]) -> tuple[list[Any], list[Any]]:
    """(ours, onnxruntime's), with shapes and dtypes checked equal; onnxruntime hands float8 back as
    raw bytes (uint8), so a one-byte float type of ours matches its uint8."""
    got, want = ours(model, feeds), theirs(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        float8 = w.dtype == np.uint8 and g.dtype.itemsize == 1 and g.dtype.kind not in "iub"
        assert g.dtype == w.dtype or float8, (g.dtype, w.dtype)
    return got, want
