"""What surrounds the rewrites: fusions gated on the first EP's kernels, the folding budget, what a
failing pass becomes, the optimized graph in the assignment and in optimized_model_filepath, and
onnxscript left unimported by ``import ep_core``."""

from __future__ import annotations

import logging
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from opt_helpers import LEVELS, make_model, op_counts, session
from test_rewrites import GELU_CONSTS, conv_bn, gelu_nodes

from ep_core.optimizer import optimize_model
from ep_core.sdk.errors import Fail

node = helper.make_node
BUDGET = 64 << 20


class Records:
    """The optimizer's log calls, as (severity, text)."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []

    def __call__(self, severity: int, msg: str, *args: Any) -> None:
        self.lines.append((severity, msg % args))


def checked(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model)


def gelu_model() -> onnx.ModelProto:
    return make_model(gelu_nodes("X", "Y"), [("X", [2, 8])], ["Y"], GELU_CONSTS)


def test_a_fusion_into_an_op_the_first_ep_lacks_is_skipped_and_logged() -> None:
    log = Records()
    out = optimize_model(checked(gelu_model()), LEVELS.ORT_ENABLE_ALL, lambda op, domain: domain == "", BUDGET, log)
    assert "com.microsoft::Gelu" not in op_counts(out)
    assert (
        0,
        "graph optimizer: Gelu fusion skipped: the first EP has no kernel for ['com.microsoft::Gelu']",
    ) in log.lines
    fused = optimize_model(checked(gelu_model()), LEVELS.ORT_ENABLE_ALL, lambda op, domain: True, BUDGET, Records())
    assert op_counts(fused) == {"com.microsoft::Gelu": 1}


def test_numba_cpu_first_gets_the_ops_it_runs_but_keeps_conv_and_activation_apart(rng: np.random.Generator) -> None:
    """The Numba CPU EP runs Gelu (delegated to the reference kernel): the fusion is made for it. It
    fuses Conv with its activation itself, so FusedConv (which it has no kernel for) is not made."""
    pytest.importorskip("ep_numba_cpu", reason="plugins_contrib/ep_numba_cpu is not installed (make install)")
    first = ["NumbaCpuExecutionProvider", "CpuReferenceExecutionProvider"]
    x = {"X": rng.standard_normal((2, 8)).astype(np.float32)}
    numba = session(gelu_model(), LEVELS.ORT_ENABLE_ALL, providers=first)
    assert op_counts(numba._built.model) == {"com.microsoft::Gelu": 1}
    assert {a["ep"] for a in numba.get_node_assignment().values()} == {"NumbaCpuExecutionProvider"}
    reference = session(gelu_model(), LEVELS.ORT_ENABLE_ALL, providers=["CpuReferenceExecutionProvider"])
    np.testing.assert_allclose(numba.run(None, x)[0], reference.run(None, x)[0], rtol=1e-5, atol=1e-6)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    conv = checked(
        make_model(
            [node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["Y"])],
            [("X", [1, 3, 8, 8])],
            ["Y"],
            {"W": w},
        )
    )
    assert "com.microsoft::FusedConv" in op_counts(
        session(conv, LEVELS.ORT_ENABLE_ALL, providers=["CpuReferenceExecutionProvider"])._built.model
    )
    kept = session(conv, LEVELS.ORT_ENABLE_ALL, providers=first)
    assert op_counts(kept._built.model) == {"Conv": 1, "Relu": 1}


def bomb() -> onnx.ModelProto:
    """A few bytes that fold into 1.6 GB: Expand of one float to 20000 x 20000."""
    nodes = [node("Expand", ["one", "shape"], ["big"]), node("ReduceSum", ["big"], ["s"], keepdims=0)]
    nodes.append(node("Add", ["X", "s"], ["Y"]))
    model = make_model(nodes, [("X", [1])], ["Y"], {"one": np.ones(1, np.float32)})
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([20000, 20000], np.int64), "shape"))
    return checked(model)


def test_a_folding_bomb_is_not_folded_and_allocates_nothing() -> None:
    log = Records()
    tracemalloc.start()
    try:
        out = optimize_model(bomb(), LEVELS.ORT_ENABLE_ALL, lambda op, domain: True, BUDGET, log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
    assert op_counts(out)["Expand"] == 1
    assert any("not folded: 1600000000 bytes" in line for _, line in log.lines)


def test_the_budget_is_shared_by_every_fold() -> None:
    inits = {"a": np.ones(1000, np.float32), "b": np.ones(1000, np.float32)}
    nodes = [node("Neg", ["a"], ["na"]), node("Neg", ["b"], ["nb"]), node("Sum", ["X", "na", "nb"], ["Y"])]
    model = checked(make_model(nodes, [("X", [1000])], ["Y"], inits))
    out = optimize_model(model, LEVELS.ORT_ENABLE_BASIC, None, 6000, Records())  # room for one 4000-byte fold
    assert op_counts(out) == {"Neg": 1, "Sum": 1}
    assert op_counts(optimize_model(model, LEVELS.ORT_ENABLE_BASIC, None, 8000, Records())) == {"Sum": 1}


def test_an_onnxscript_pass_that_fails_is_dropped_with_a_warning(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    from onnxscript.optimizer import _constant_folding

    def boom(self: Any, model: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(_constant_folding.FoldConstantsPass, "call", boom)
    model = conv_bn(np.random.default_rng(0))
    with caplog.at_level(logging.WARNING, logger="ep_core"):
        s = session(model, LEVELS.ORT_ENABLE_ALL)
    assert "onnxscript's pass 'constant folding' failed: RuntimeError: boom" in caplog.text
    assert op_counts(s._built.model) == {"Conv": 1, "BatchNormalization": 1}  # the checked model, untouched


def test_a_failing_pass_of_ep_core_raises_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ep_core.optimizer import own_rules

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("bad fold")

    monkeypatch.setattr(own_rules._ConvAffine, "rewrite", broken)
    monkeypatch.setattr(own_rules, "conv_affine_rules", lambda op: [own_rules._ConvAffine.rule(op)])
    inits = {"W": np.ones((2, 3, 1, 1), np.float32), "K": np.ones((2, 1, 1), np.float32)}
    model = make_model(
        [node("Conv", ["X", "W"], ["c"]), node("Mul", ["c", "K"], ["Y"])], [("X", [1, 3, 2, 2])], ["Y"], inits
    )
    with pytest.raises(Fail, match=r"ep-core's pass 'Conv\+Mul folding' failed: ValueError: bad fold.*ORT_DISABLE_ALL"):
        session(model, LEVELS.ORT_ENABLE_BASIC)


def _break_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx's checker sees the optimized model with a node reading a value nothing makes."""
    from ep_core.optimizer import passes

    def broken(proto: onnx.ModelProto) -> onnx.ModelProto:
        copy = onnx.ModelProto.FromString(proto.SerializeToString())
        copy.graph.node[0].input[0] = "nowhere"
        return copy

    monkeypatch.setattr(passes, "for_the_checker", broken)


def test_an_invalid_model_from_a_pass_of_ep_core_raises_naming_the_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    _break_the_output(monkeypatch)
    inits = {"W": np.ones((2, 3, 1, 1), np.float32), "K": np.ones((2, 1, 1), np.float32)}
    model = make_model(
        [node("Conv", ["X", "W"], ["c"]), node("Mul", ["c", "K"], ["Y"])], [("X", [1, 3, 2, 2])], ["Y"], inits
    )
    with pytest.raises(Fail, match=r"made by the passes \['Conv\+Mul folding'.*\] is invalid.*ORT_DISABLE_ALL"):
        session(model, LEVELS.ORT_ENABLE_BASIC)


def test_an_invalid_model_from_onnxscript_alone_is_dropped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    _break_the_output(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="ep_core"):
        s = session(conv_bn(np.random.default_rng(0)), LEVELS.ORT_ENABLE_BASIC)
    assert "the model made by the passes ['dead node removal', 'redundant node elimination'] is invalid" in caplog.text
    assert op_counts(s._built.model) == {"Conv": 1, "BatchNormalization": 1}


def test_assignment_and_optimized_model_file_show_the_optimized_graph(rng: np.random.Generator, tmp_path: Path) -> None:
    model = conv_bn(rng)
    model.graph.node[1].output[0] = "bn"
    model.graph.node.append(node("Relu", ["bn"], ["Y"], name="relu"))
    path = tmp_path / "optimized.onnx"
    s = session(model, LEVELS.ORT_ENABLE_ALL, path)
    assert set(s.get_node_assignment()) == {"conv"}
    written = onnx.load(str(path))
    assert op_counts(written) == {"com.microsoft::FusedConv": 1}
    x = {"X": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, x)[0]
    original = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(s.run(None, x)[0], original, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(theirs, original, rtol=1e-4, atol=1e-4)  # onnxruntime runs the file the same


def test_a_graph_no_rule_applies_to_is_returned_as_given() -> None:
    model = checked(make_model([node("Sin", ["X"], ["Y"])], [("X", [2])], ["Y"]))
    assert optimize_model(model, LEVELS.ORT_ENABLE_ALL, None, BUDGET, Records()) is model


def test_import_ep_core_does_not_import_onnxscript() -> None:
    code = "import sys, ep_core; print(sorted(m for m in ('onnxscript', 'onnx_ir') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_fused_graph_outputs_match_the_unfused_one_for_a_bias_gelu_chain(rng: np.random.Generator) -> None:
    """Two fusions that build on each other (Gelu, then BiasGelu) still compute the same."""
    nodes = [node("MatMul", ["X", "W"], ["xw"]), node("Add", ["xw", "bias"], ["xb"]), *gelu_nodes("xb", "Y")]
    inits = GELU_CONSTS | {
        "W": rng.standard_normal((4, 8)).astype(np.float32),
        "bias": rng.standard_normal(8).astype(np.float32),
    }
    model = make_model(nodes, [("X", [3, 4])], ["Y"], inits)
    x = {"X": rng.standard_normal((3, 4)).astype(np.float32)}
    s = session(model, LEVELS.ORT_ENABLE_ALL)
    assert op_counts(s._built.model) == {"MatMul": 1, "com.microsoft::BiasGelu": 1}
    np.testing.assert_allclose(
        s.run(None, x)[0], session(model, LEVELS.ORT_DISABLE_ALL).run(None, x)[0], rtol=1e-5, atol=1e-6
    )
    assert TensorProto.FLOAT == s._built.model.graph.output[0].type.tensor_type.elem_type


def test_a_compiled_model_is_left_as_it_is() -> None:
    """Its graph was optimized before it was compiled; a cached context must load fast."""
    model = checked(gelu_model())
    model.graph.node.append(node("EPContext", ["Y"], ["Z"], domain="com.microsoft"))
    assert optimize_model(model, LEVELS.ORT_ENABLE_ALL, lambda op, domain: True, BUDGET, Records()) is model
