"""Rewrites turned off by name (``optimization.disable_specified_optimizers``, onnxruntime's
``disabled_optimizers``): ep-core's names and onnxruntime's, each leaving its rewrite undone while
the others still run and the outputs stay those of the unoptimized graph; a name neither knows is
refused at every level."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from opt_helpers import LEVELS, make_model, op_counts

from ep_core import InferenceSession
from ep_core.optimizer.disabled import KEY, onnxruntime_names, own_names
from ep_core.runtime.options import SessionOptions
from ep_core.sdk.errors import ConfigError

node = helper.make_node


def _session(model: onnx.ModelProto, off: str, level: int = LEVELS.ORT_ENABLE_ALL) -> InferenceSession:
    so = SessionOptions(graph_optimization_level=level)
    so.add_session_config_entry(KEY, off)
    return InferenceSession(model.SerializeToString(), so, providers=["CpuReferenceExecutionProvider"])


def _model(rng: np.random.Generator) -> onnx.ModelProto:
    """Constants to fold, an Add of exactly 0, cancelling Transposes, Conv+BatchNormalization+Relu."""
    inits = {
        "W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "k": np.arange(4, dtype=np.float32),
        "two": np.full(4, 2.0, np.float32),
        "zero": np.array(0.0, np.float32),
    }
    inits |= {n: rng.uniform(0.5, 1.5, 4).astype(np.float32) for n in "sbmv"}
    nodes = [
        node("Mul", ["k", "two"], ["k2"], name="fold_me"),
        node("Add", ["X", "zero"], ["x0"], name="add_zero"),
        node("Transpose", ["x0"], ["t"], perm=[0, 2, 3, 1]),
        node("Transpose", ["t"], ["u"], perm=[0, 3, 1, 2]),
        node("Conv", ["u", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c", "s", "b", "m", "v"], ["d"], name="bn"),
        node("Relu", ["d"], ["r"], name="relu"),
        node("ReduceSum", ["r"], ["y0"], keepdims=0),
        node("Add", ["y0", "k2"], ["Y"], name="use_k2"),
    ]
    return make_model(nodes, [("X", [1, 3, 6, 6])], ["Y"], inits, opset=13)


@pytest.mark.parametrize(
    "off, kept",
    [
        ("", {}),
        ("constant folding", {"Mul": 1, "Identity": 2}),  # onnxscript's folding removes the Identities too
        ("no-op arithmetic", {"Add": 2}),
        ("NoopElimination", {"Add": 2}),
        ("Transpose chains", {"Transpose": 2}),
        ("TransposeOptimizer", {"Transpose": 2}),
        ("BatchNormalization folding", {"BatchNormalization": 1, "Conv": 1, "Relu": 1}),
        ("ConvBNFusion;FusedConv fusion", {"BatchNormalization": 1, "Conv": 1, "Relu": 1}),
        ("FusedConv fusion", {"Conv": 1, "Relu": 1}),
        ("ConvActivationFusion, ConstantFolding", {"Conv": 1, "Relu": 1, "Mul": 1, "Identity": 2}),
        ("NchwcTransformer;CommonSubexpressionElimination", {}),  # nothing of ep-core's: the same graph
    ],
)
def test_each_named_rewrite_is_left_undone_and_the_rest_still_run(
    rng: np.random.Generator, off: str, kept: dict[str, int]
) -> None:
    model = _model(rng)
    x = {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    want = _session(model, "", LEVELS.ORT_DISABLE_ALL).run(None, x)[0]
    s = _session(model, off)
    np.testing.assert_allclose(s.run(None, x)[0], want, rtol=1e-4)
    counts = op_counts(s._built.model)
    fused = {"com.microsoft::FusedConv": 1} if not {"Conv", "BatchNormalization"} & set(kept) else {}
    assert counts == {"ReduceSum": 1, "Add": 1, **fused, **kept}, counts


@pytest.mark.parametrize("level", [LEVELS.ORT_DISABLE_ALL, LEVELS.ORT_ENABLE_ALL])
def test_a_name_neither_runtime_knows_is_refused_at_every_level(rng: np.random.Generator, level: int) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown optimizer 'ConvBNFussion'.*onnxruntime's names: \[.*'ConvBNFusion'"
    ):
        _session(_model(rng), "ConstantFolding;ConvBNFussion", level)


def test_every_onnxruntime_name_stands_for_ep_core_rewrites_that_exist() -> None:
    own = own_names()
    for name, steps in onnxruntime_names().items():
        assert set(steps) <= own, (name, set(steps) - own)
    assert not own & set(onnxruntime_names())  # one namespace: no name means two things


@pytest.mark.parametrize(
    "off, kept",
    [
        ("", {"Conv": 1}),
        ("Conv+Add folding", {"Conv": 1, "Add": 1, "Mul": 1}),  # the Add between keeps the Mul off the Conv
        ("ConvAddFusion", {"Conv": 1, "Add": 1, "Mul": 1}),
        ("Conv+Mul folding", {"Conv": 1, "Mul": 1}),
        ("ConvMulFusion", {"Conv": 1, "Mul": 1}),
        ("dead node removal", {"Conv": 1, "Neg": 1}),
    ],
)
def test_conv_folding_and_dead_node_removal_turn_off_by_name(
    rng: np.random.Generator, off: str, kept: dict[str, int]
) -> None:
    """Every name of ``disabled.PASSES`` is a step ``run_passes`` takes (one misspelt there would
    turn nothing off): Conv+Add and Conv+Mul folding apart, and dead-node removal."""
    inits = {
        "W": rng.standard_normal((4, 3, 1, 1)).astype(np.float32),
        "k": rng.standard_normal((4, 1, 1)).astype(np.float32),
        "m": rng.uniform(0.5, 1.5, (4, 1, 1)).astype(np.float32),
    }
    nodes = [
        node("Conv", ["X", "W"], ["c"], name="conv"),
        node("Add", ["c", "k"], ["a"], name="add"),
        node("Mul", ["a", "m"], ["Y"], name="mul"),
        node("Neg", ["X"], ["unused"], name="dead"),
    ]
    model = make_model(nodes, [("X", [1, 3, 5, 5])], ["Y"], inits)
    x = {"X": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    want = _session(model, "", LEVELS.ORT_DISABLE_ALL).run(None, x)[0]
    s = _session(model, off, LEVELS.ORT_ENABLE_BASIC)
    np.testing.assert_allclose(s.run(None, x)[0], want, rtol=1e-5, atol=1e-6)
    assert op_counts(s._built.model) == kept
