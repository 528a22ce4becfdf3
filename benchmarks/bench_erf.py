"""Erf and Gelu per element on one 1M-element float32 tensor: the old ``np.vectorize(math.erf)``,
the vectorised erf of ``ep_cpu_reference/kernels/special.py`` (float32 and float64), ep-core's
Erf/Gelu nodes on the reference EP, and onnxruntime's Erf/Gelu nodes, both at one thread.

    .venv/bin/python benchmarks/bench_erf.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

N = 1_000_000


def ns_per_element(fn: Callable[[], Any], n: int = N, repeat: int = 5) -> float:
    """Best of ``repeat`` runs (after one warm-up), in ns per element."""
    fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e9


def node_model(op: str, domain: str = "", opset: int = 20) -> bytes:
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    g = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])],
    )
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, ir_version=10, opset_imports=ops).SerializeToString()


def main() -> None:
    import onnxruntime as ort

    import ep_core
    from ep_cpu_reference.kernels.special import erf

    x = (np.random.default_rng(0).standard_normal(N) * 2).astype(np.float32)
    x64 = x.astype(np.float64)
    old = np.vectorize(math.erf, otypes=[np.float64])
    rows = [
        ("np.vectorize(math.erf) (old Erf)", ns_per_element(lambda: old(x64), repeat=1)),
        ("special.erf float32", ns_per_element(lambda: erf(x))),
        ("special.erf float64", ns_per_element(lambda: erf(x64))),
    ]
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    for op, domain in [("Erf", ""), ("Gelu", ""), ("Gelu", "com.microsoft")]:
        model = node_model(op, domain)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
        theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        name = f"{domain + '::' if domain else ''}{op}"
        rows.append((f"ep-core reference EP {name} node", ns_per_element(lambda s=ours: s.run(None, {"x": x}))))
        rows.append((f"onnxruntime {name} node", ns_per_element(lambda s=theirs: s.run(None, {"x": x}))))
    print(f"{N:,} float32 elements, 1 thread")
    for label, ns in rows:
        print(f"  {label:<44} {ns:8.2f} ns/element")


if __name__ == "__main__":
    main()
