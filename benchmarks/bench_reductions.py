"""Sums over trailing axes, one node per session: ep-core's reference EP (sums in onnxruntime's
order, ``reduction.row_sums``), NumPy's own pairwise reduction (what the EP used before) and
onnxruntime's CPU EP, all at one thread, timed in interleaved slices of one run.

    .venv/bin/python benchmarks/bench_reductions.py
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu_reference_models import interleaved  # noqa: E402

CASES = [  # (op, input shape, axes): layer norms of transformers, a spatial mean, a full sum, odd rows
    ("ReduceMean", (1, 64, 512), [-1]),
    ("ReduceMean", (1, 256, 768), [-1]),
    ("ReduceMean", (1, 256, 80, 80), [2, 3]),
    ("ReduceSum", (1_000_000,), [0]),
    ("ReduceSum", (4000, 7), [-1]),
    ("ReduceL2", (1, 256, 80, 80), [2, 3]),
]


def model(op: str, shape: tuple[int, ...], axes: list[int]) -> bytes:
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()


def row(op: str, shape: tuple[int, ...], axes: list[int]) -> str:
    """One table row: the three engines on the same input, interleaved."""
    import onnxruntime as ort

    import ep_core

    m = model(op, shape, axes)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    opts = ep_core.SessionOptions(intra_op_num_threads=1)
    ours = ep_core.InferenceSession(m, opts, providers=["CpuReferenceExecutionProvider"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
    ax = tuple(a % len(shape) for a in axes)
    count = np.float32(np.prod([shape[a] for a in ax]))

    def pairwise() -> np.ndarray:
        s = np.add.reduce(np.square(x) if op == "ReduceL2" else x, axis=ax, keepdims=True)
        return s / count if op == "ReduceMean" else np.sqrt(s) if op == "ReduceL2" else s

    fns = {"ep": lambda: ours.run(None, {"x": x}), "numpy": pairwise, "ort": lambda: theirs.run(None, {"x": x})}
    stats, _ = interleaved(fns, 1.0)
    same = ours.run(None, {"x": x})[0].tobytes() == theirs.run(None, {"x": x})[0].tobytes()
    us = {k: v[0] * 1e6 for k, v in stats.items()}
    return (
        f"| {op} | {list(shape)} | {axes} | {us['ep']:.1f} | {us['numpy']:.1f} | {us['ort']:.1f} "
        f"| {us['ep'] / us['ort']:.2f} | {'yes' if same else 'no'} |"
    )


def main() -> None:
    print(
        "| op | input | axes | ep-core (us) | NumPy pairwise (us) | onnxruntime 1 thread (us) | ep-core / ORT "
        "| bit-equal to ORT |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for case in CASES:
        print(row(*case))


if __name__ == "__main__":
    main()
