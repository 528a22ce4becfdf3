"""Framework overhead per node: a chain of 100 Add nodes on 1x4 float tensors.

Compares, in one run, ep-core's per-run latency with onnxruntime's (1 thread) and with
onnx.reference's, and subtracts the cost of the 100 bare ``np.add`` calls to get ep-core's own
framework time per node (target: <= 1 us), with the EP contract's output checks on (they always
are: ``ep_core/runtime/contract.py``); the script prints how many node outputs the plan checks.

    .venv/bin/python benchmarks/bench_overhead.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

N_NODES = 100


def chain_model() -> bytes:
    nodes = []
    prev = "x"
    for i in range(N_NODES):
        out = "y" if i == N_NODES - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "b"], [out], name=f"add{i}"))
        prev = out
    g = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    # IR 10: onnxruntime 1.31 reads IR versions up to 13, onnx 1.23 writes 14 by default
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def best_of(fn, repeat: int = 7, number: int = 300) -> float:
    """Median over ``repeat`` batches of the mean seconds per call."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def main() -> None:
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    import ep_core

    model = chain_model()
    feed = {"x": np.ones((1, 4), np.float32), "b": np.full((1, 4), 0.5, np.float32)}

    sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    ref = ReferenceEvaluator(model)

    # the checks are always on; count them in the plan so the number below is known to include them
    plan = sess.program.plan()
    checked = sum(spec is not None for step in plan.steps for spec in step[4])
    assert checked == N_NODES, f"expected every Add output checked, the plan checks {checked}"

    expected = ort_sess.run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], expected)

    a, b = feed["x"], feed["b"]

    def bare() -> None:
        v = a
        for _ in range(N_NODES):
            v = np.add(v, b)

    t_ep = best_of(lambda: sess.run(None, feed))
    t_ort = best_of(lambda: ort_sess.run(None, feed))
    t_ref = best_of(lambda: ref.run(None, feed), number=50)
    t_bare = best_of(bare)
    framework_per_node = (t_ep - t_bare) / N_NODES

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}; "
        f"onnxruntime {ort.__version__}"
    )
    print(f"{'runtime':34s} {'per run (us)':>13s} {'per node (us)':>14s} {'vs ort':>8s}")
    for name, t in (
        ("ep-core CpuReferenceEP", t_ep),
        ("onnxruntime CPU (1 thread)", t_ort),
        ("onnx.reference.ReferenceEvaluator", t_ref),
        ("bare np.add x100 (kernel cost)", t_bare),
    ):
        print(f"{name:34s} {t * 1e6:13.1f} {t * 1e6 / N_NODES:14.2f} {t / t_ort:8.2f}")
    print(f"output checks: on ({checked} of {N_NODES} node outputs checked for dtype, rank and static dims)")
    print(f"ep-core framework time per node: {framework_per_node * 1e6:.2f} us (target <= 1 us)")


if __name__ == "__main__":
    main()
