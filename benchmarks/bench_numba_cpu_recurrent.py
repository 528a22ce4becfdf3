"""Micro-benchmark of the Numba CPU EP's compiled LSTM / GRU loops (ep_numba_cpu.recurrent) on the
recurrent nodes of zoo models, with their real weights and the inputs the models feed them:
the compiled loop vs the reference EP's kernel (built the way the EP delegates a node) vs an
onnxruntime one-node session, all on one thread. Run with OPENBLAS_NUM_THREADS=1."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from ep_core.tools import zoo  # noqa: E402
from ep_numba_cpu import codegen, delegate, recurrent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cpu_reference"))
from test_real_models import model_feed  # noqa: E402

KINDS = {1: "float", 2: "int", 3: "string", 6: "floats", 7: "ints", 8: "strings"}


def best_us(fn: Any, reps: int = 9) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        fn()
        n += 1
    n = max(5, n * 3)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def recurrent_nodes(name: str) -> list[tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """(node, its constant inputs, its runtime inputs as the model feeds them) per LSTM/GRU node."""
    model = onnx.load(zoo.fetch_model(name))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in ("LSTM", "GRU")]
    wanted = sorted({i for n in nodes for i in n.input if i and i not in inits})
    probe = onnx.load(zoo.fetch_model(name))
    probe.graph.output.extend(helper.make_empty_tensor_value_info(w) for w in wanted)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip(wanted, sess.run(wanted, model_feed(name)), strict=True))
    return [
        (n, {i: inits[i] for i in n.input if i in inits}, {i: values[i] for i in n.input if i in values}) for n in nodes
    ]


def record(node: Any, consts: dict[str, np.ndarray], feeds: dict[str, np.ndarray], opset: int) -> dict[str, Any]:
    def typ(n: str) -> list[Any]:
        v = consts.get(n, feeds.get(n))
        return [None, None] if v is None else [str(v.dtype), list(v.shape)]

    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        v = v.decode() if isinstance(v, bytes) else [s.decode() for s in v] if a.type == 8 else v
        attrs[a.name] = [KINDS[a.type], list(v) if a.type in (6, 7, 8) else v]
    return {
        "kind": "node", "op": node.op_type, "domain": "", "opset": opset, "attrs": attrs,
        "inputs": list(node.input), "outputs": list(node.output),
        "in_types": [typ(n) for n in node.input], "out_types": [[None, None] for _ in node.output],
    }  # fmt: skip


def one_node_session(node: Any, consts: dict[str, np.ndarray], feeds: dict[str, np.ndarray], opset: int) -> Any:
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()
    ]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "g", ins, outs, [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def main() -> None:
    for name in ("silero_vad_16k_sequence", "romanizer_encoder", "eeg_seizure_lstm"):
        opset = next(o.version for o in onnx.load(zoo.fetch_model(name)).opset_import if o.domain in ("", "ai.onnx"))
        for node, consts, feeds in recurrent_nodes(name):
            rec = record(node, consts, feeds, opset)
            sources = recurrent.kernel_sources(rec)
            assert sources is not None, recurrent.decline_reason(rec)
            t0 = time.perf_counter()
            kernels = [codegen.compile_kernel(k.source, k.signature, k.parallel).dispatcher for k in sources]
            compile_s = time.perf_counter() - t0
            mine = recurrent.make_compute(rec, kernels)
            ref = delegate.build(rec, consts, delegate.Host())
            for v in consts.values():
                v.flags.writeable = False  # as the EP stores weights: prepared once
            args = [consts.get(n, feeds.get(n)) if n else None for n in node.input]
            sess = one_node_session(node, consts, feeds, opset)
            got, want = mine(*args), sess.run(None, feeds)
            err = max(float(np.max(np.abs(g - w)) / np.max(np.abs(w))) for g, w in zip(got, want, strict=True))
            x = feeds[node.input[0]]
            attrs = {k: v for k, (_, v) in rec["attrs"].items()}
            t_m = best_us(lambda f=mine, a=args: f(*a))
            t_r = best_us(lambda f=ref, a=args: f(*a))
            t_o = best_us(lambda s=sess, a=feeds: s.run(None, a))
            print(
                f"{name} {node.op_type} X{list(x.shape)} {attrs}: compiled loop {t_m:.1f} us, reference kernel "
                f"{t_r:.1f} us, onnxruntime {t_o:.1f} us (loop/ort {t_m / t_o:.2f}x, loop/reference {t_m / t_r:.2f}x); "
                f"max |err| vs ort / output scale {err:.1e}; compile {compile_s:.2f} s"
            )


if __name__ == "__main__":
    main()
