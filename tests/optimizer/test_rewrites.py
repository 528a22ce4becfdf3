"""One test per rewrite: the optimized graph gives the outputs of the unoptimized one (ep-core
sessions at ORT_DISABLE_ALL and at the level), and the rewrite did happen (op counts)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from opt_helpers import LEVELS, make_model, op_counts, optimized, session

BASIC, EXTENDED = LEVELS.ORT_ENABLE_BASIC, LEVELS.ORT_ENABLE_EXTENDED
node = helper.make_node


def conv_bn(rng: np.random.Generator) -> onnx.ModelProto:
    inits = {
        "W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "B": rng.standard_normal(4).astype(np.float32),
        "s": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "m": rng.standard_normal(4).astype(np.float32),
        "v": rng.uniform(0.5, 1.5, 4).astype(np.float32),
    }
    nodes = [
        node("Conv", ["X", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c", "s", "b", "m", "v"], ["Y"], name="bn"),
    ]
    return make_model(nodes, [("X", [2, 3, 8, 8])], ["Y"], inits)


def test_conv_batchnorm_folds_into_the_conv(rng: np.random.Generator) -> None:
    x = {"X": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    out = optimized(conv_bn(rng), BASIC, x, atol=1e-4)
    assert op_counts(out) == {"Conv": 1}
    assert [n.name for n in out.graph.node] == ["conv"]  # the fused node keeps the Conv's name


def test_gemm_batchnorm_folds_into_the_gemm(rng: np.random.Generator) -> None:
    inits = {"W": rng.standard_normal((5, 4)).astype(np.float32), "C": rng.standard_normal(4).astype(np.float32)}
    inits |= {k: rng.uniform(0.5, 1.5, 4).astype(np.float32) for k in "sbmv"}
    nodes = [node("Gemm", ["X", "W", "C"], ["g"]), node("BatchNormalization", ["g", "s", "b", "m", "v"], ["Y"])]
    out = optimized(
        make_model(nodes, [("X", [3, 5])], ["Y"], inits), BASIC, {"X": rng.standard_normal((3, 5)).astype(np.float32)}
    )
    assert op_counts(out) == {"Gemm": 1}


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_conv_then_per_channel_add_or_mul_folds_into_the_conv(rng: np.random.Generator, op: str) -> None:
    inits = {
        "W": rng.standard_normal((4, 3, 1, 1)).astype(np.float32),
        "K": rng.standard_normal((4, 1, 1)).astype(np.float32),
    }
    nodes = [node("Conv", ["X", "W"], ["c"], name="conv"), node(op, ["c", "K"], ["Y"], name="affine")]
    x = {"X": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    assert op_counts(optimized(make_model(nodes, [("X", [1, 3, 5, 5])], ["Y"], inits), BASIC, x)) == {"Conv": 1}


def test_conv_then_a_constant_along_another_axis_is_left(rng: np.random.Generator) -> None:
    inits = {"W": rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "K": rng.standard_normal(5).astype(np.float32)}
    nodes = [node("Conv", ["X", "W"], ["c"]), node("Add", ["c", "K"], ["Y"])]  # K runs along the width
    x = {"X": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    assert op_counts(optimized(make_model(nodes, [("X", [1, 3, 5, 5])], ["Y"], inits), BASIC, x)) == {
        "Conv": 1,
        "Add": 1,
    }


def test_transposes_that_cancel_go(rng: np.random.Generator) -> None:
    nodes = [node("Transpose", ["X"], ["t"], perm=[1, 0, 2]), node("Transpose", ["t"], ["u"], perm=[1, 0, 2])]
    nodes.append(node("Relu", ["u"], ["Y"]))
    out = optimized(
        make_model(nodes, [("X", [2, 3, 4])], ["Y"]), BASIC, {"X": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    )
    assert op_counts(out) == {"Relu": 1}


def test_reshape_reshape_and_unsqueeze_unsqueeze_merge(rng: np.random.Generator) -> None:
    inits = {"s1": np.array([6, 4], np.int64), "s2": np.array([3, 8], np.int64)}
    inits |= {"a0": np.array([0], np.int64), "a1": np.array([1], np.int64)}
    nodes = [
        node("Reshape", ["X", "s1"], ["r"]),
        node("Reshape", ["r", "s2"], ["r2"]),
        node("Unsqueeze", ["r2", "a0"], ["u"]),
        node("Unsqueeze", ["u", "a1"], ["Y"]),
    ]
    model = make_model(nodes, [("X", [2, 3, 4])], ["Y"], {k: v for k, v in inits.items()})
    for t in model.graph.initializer:
        t.data_type = TensorProto.INT64
    out = optimized(model, BASIC, {"X": rng.standard_normal((2, 3, 4)).astype(np.float32)})
    assert op_counts(out) == {"Reshape": 1, "Unsqueeze": 1}


def test_identity_no_op_cast_and_dead_nodes_go(rng: np.random.Generator) -> None:
    nodes = [
        node("Identity", ["X"], ["i"]),
        node("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
        node("Relu", ["c"], ["Y"]),
        node("Neg", ["X"], ["unused"], name="dead"),
    ]
    out = optimized(
        make_model(nodes, [("X", [2, 3])], ["Y"]), BASIC, {"X": rng.standard_normal((2, 3)).astype(np.float32)}
    )
    assert op_counts(out) == {"Relu": 1}


@pytest.mark.parametrize("op, value", [("Add", 0.0), ("Sub", 0.0), ("Mul", 1.0), ("Div", 1.0)])
def test_add_of_exactly_zero_and_mul_by_exactly_one_go(rng: np.random.Generator, op: str, value: float) -> None:
    nodes = [node(op, ["X", "k"], ["a"]), node("Relu", ["a"], ["Y"])]
    model = make_model(nodes, [("X", [2, 3])], ["Y"], {"k": np.array(value, np.float32)})
    out = optimized(model, BASIC, {"X": rng.standard_normal((2, 3)).astype(np.float32)})
    assert op_counts(out) == {"Relu": 1}


@pytest.mark.parametrize(
    "op, value", [("Add", 1e-8), ("Add", 1e-10), ("Sub", -1e-8), ("Mul", 1.000001), ("Div", 0.9999999)]
)
def test_a_constant_near_zero_or_one_is_kept(op: str, value: float) -> None:
    """onnxscript's no-op rules matched within abs 1e-8 / rel 1e-5: the guard of ``Log(x + 1e-8)``
    went and silence gave -inf (swift-f0's and basic-pitch's spectrogram logs); onnxruntime, which
    removes only an exact 0 or 1, gives log(1e-8) = -18.4."""
    import onnxruntime as ort

    nodes = [node(op, ["X", "k"], ["a"]), node("Log", ["a"], ["Y"])]
    model = make_model(nodes, [("X", [4])], ["Y"], {"k": np.array(value, np.float32)})
    x = {"X": np.array([0.0, 0.0, 1e-9, 2.0], np.float32)}
    out = optimized(model, BASIC, x)
    assert op_counts(out) == {op: 1, "Log": 1}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(session(model, LEVELS.ORT_ENABLE_ALL).run(None, x)[0], want, rtol=1e-6)


def test_constants_fold_into_initializers(rng: np.random.Generator) -> None:
    inits = {"a": np.arange(6, dtype=np.float32), "b": np.full(6, 2.0, np.float32)}
    nodes = [
        node("Mul", ["a", "b"], ["ab"], name="fold_me"),
        node("Sqrt", ["ab"], ["r"]),
        node("Add", ["X", "r"], ["Y"]),
    ]
    out = optimized(
        make_model(nodes, [("X", [6])], ["Y"], inits), BASIC, {"X": rng.standard_normal(6).astype(np.float32)}
    )
    assert op_counts(out) == {"Add": 1}
    (folded,) = [t for t in out.graph.initializer if t.name == "r"]
    np.testing.assert_allclose(numpy_helper.to_array(folded), np.sqrt(np.arange(6) * 2.0), rtol=1e-6)


def test_outer_scope_constants_fold_inside_if_branches(rng: np.random.Generator) -> None:
    def branch(name: str, op: str) -> onnx.GraphProto:
        body = [
            node("Mul", ["k1", "k2"], [f"{name}_k"], name=f"{name}_mul"),
            node(op, ["X", f"{name}_k"], [f"{name}_y"]),
        ]
        return helper.make_graph(body, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [4])])

    inits = {"k1": np.arange(4, dtype=np.float32), "k2": np.full(4, 3.0, np.float32)}
    model = make_model(
        [node("If", ["cond"], ["Y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Sub"))],
        [("X", [4])],
        ["Y"],
        inits,
    )
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    for cond in (True, False):
        feeds = {"X": rng.standard_normal(4).astype(np.float32), "cond": np.array(cond)}
        out = optimized(model, BASIC, feeds)
        assert op_counts(out) == {"If": 1, "Add": 1, "Sub": 1}  # each branch's Mul of outer constants folded


# ------------------------------------------------------------------------- EXTENDED: contrib ops
def test_basic_makes_no_fusion(rng: np.random.Generator) -> None:
    nodes = [node("Conv", ["X", "W"], ["c"]), node("Relu", ["c"], ["Y"])]
    model = make_model(nodes, [("X", [1, 3, 5, 5])], ["Y"], {"W": rng.standard_normal((2, 3, 3, 3)).astype(np.float32)})
    assert op_counts(optimized(model, BASIC, {"X": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)})) == {
        "Conv": 1,
        "Relu": 1,
    }


@pytest.mark.parametrize(
    ("act", "attrs", "extra"),
    [
        ("Relu", {}, []),
        ("Tanh", {}, []),
        ("Sigmoid", {}, []),
        ("LeakyRelu", {"alpha": 0.2}, []),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
        ("Clip", {}, ["lo", "hi"]),
    ],
)
def test_conv_activation_becomes_fused_conv(rng: np.random.Generator, act: str, attrs: dict, extra: list[str]) -> None:
    inits = {"W": rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "B": rng.standard_normal(2).astype(np.float32)}
    inits |= {"lo": np.array(-0.5, np.float32), "hi": np.array(0.6, np.float32)}
    nodes = [node("Conv", ["X", "W", "B"], ["c"], name="conv"), node(act, ["c", *extra], ["Y"], **attrs)]
    model = make_model(nodes, [("X", [1, 3, 6, 6])], ["Y"], inits)
    out = optimized(model, EXTENDED, {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)})
    assert op_counts(out) == {"com.microsoft::FusedConv": 1}
    assert out.graph.node[0].name == "conv"


def test_conv_add_activation_becomes_fused_conv_with_z(rng: np.random.Generator) -> None:
    nodes = [
        node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]),
        node("Add", ["Z", "c"], ["s"]),
        node("Relu", ["s"], ["Y"]),
    ]
    model = make_model(
        nodes,
        [("X", [1, 3, 6, 6]), ("Z", [1, 2, 6, 6])],
        ["Y"],
        {"W": rng.standard_normal((2, 3, 3, 3)).astype(np.float32)},
    )
    feeds = {
        "X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
        "Z": rng.standard_normal((1, 2, 6, 6)).astype(np.float32),
    }
    out = optimized(model, EXTENDED, feeds)
    assert op_counts(out) == {"com.microsoft::FusedConv": 1}
    assert len(out.graph.node[0].input) == 4


@pytest.mark.parametrize(("act", "attrs"), [("Relu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Elu", {}), ("Selu", {})])
def test_gemm_activation_becomes_fused_gemm(rng: np.random.Generator, act: str, attrs: dict) -> None:
    inits = {"W": rng.standard_normal((4, 5)).astype(np.float32), "C": rng.standard_normal(4).astype(np.float32)}
    nodes = [node("Gemm", ["X", "W", "C"], ["g"], transB=1, alpha=0.5), node(act, ["g"], ["Y"], **attrs)]
    out = optimized(
        make_model(nodes, [("X", [3, 5])], ["Y"], inits),
        EXTENDED,
        {"X": rng.standard_normal((3, 5)).astype(np.float32)},
    )
    assert op_counts(out) == {"com.microsoft::FusedGemm": 1}


def gelu_nodes(x: str, y: str) -> list[onnx.NodeProto]:
    return [
        node("Div", [x, "sqrt2"], ["d"]),
        node("Erf", ["d"], ["e"]),
        node("Add", ["e", "one"], ["e1"]),
        node("Mul", [x, "e1"], ["m"]),
        node("Mul", ["m", "half"], [y]),
    ]


GELU_CONSTS = {
    "sqrt2": np.array(math.sqrt(2), np.float32),
    "one": np.array(1, np.float32),
    "half": np.array(0.5, np.float32),
}


def test_erf_gelu_becomes_gelu(rng: np.random.Generator) -> None:
    model = make_model(gelu_nodes("X", "Y"), [("X", [2, 8])], ["Y"], GELU_CONSTS)
    out = optimized(model, EXTENDED, {"X": rng.standard_normal((2, 8)).astype(np.float32)})
    assert op_counts(out) == {"com.microsoft::Gelu": 1}


def test_bias_then_gelu_becomes_bias_gelu(rng: np.random.Generator) -> None:
    nodes = [node("Add", ["X", "bias"], ["xb"]), *gelu_nodes("xb", "Y")]
    model = make_model(nodes, [("X", [2, 8])], ["Y"], GELU_CONSTS | {"bias": rng.standard_normal(8).astype(np.float32)})
    out = optimized(model, EXTENDED, {"X": rng.standard_normal((2, 8)).astype(np.float32)})
    assert op_counts(out) == {"com.microsoft::BiasGelu": 1}


def test_tanh_gelu_becomes_fast_gelu(rng: np.random.Generator) -> None:
    consts = {"three": 3.0, "c": 0.044715, "k": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5}
    nodes = [
        node("Pow", ["X", "three"], ["p"]),
        node("Mul", ["c", "p"], ["t2"]),
        node("Add", ["X", "t2"], ["t3"]),
        node("Mul", ["k", "t3"], ["t4"]),
        node("Tanh", ["t4"], ["t5"]),
        node("Add", ["t5", "one"], ["t6"]),
        node("Mul", ["half", "t6"], ["t7"]),
        node("Mul", ["X", "t7"], ["Y"]),
    ]
    inits = {k: np.array(v, np.float32) for k, v in consts.items()}
    out = optimized(
        make_model(nodes, [("X", [2, 8])], ["Y"], inits),
        EXTENDED,
        {"X": rng.standard_normal((2, 8)).astype(np.float32)},
    )
    assert op_counts(out) == {"com.microsoft::FastGelu": 1}


def layer_norm_nodes(x: str, y: str) -> list[onnx.NodeProto]:
    return [
        node("ReduceMean", [x, "axes"], ["mean"], keepdims=1),
        node("Sub", [x, "mean"], ["dev"]),
        node("Mul", ["dev", "dev"], ["sq"]),
        node("ReduceMean", ["sq", "axes"], ["var"], keepdims=1),
        node("Add", ["var", "eps"], ["ve"]),
        node("Sqrt", ["ve"], ["std"]),
        node("Div", ["dev", "std"], ["norm"]),
        node("Mul", ["norm", "scale"], ["ns"]),
        node("Add", ["ns", "beta"], [y]),
    ]


def layer_norm_inits(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "axes": np.array([-1], np.int64),
        "eps": np.array(1e-5, np.float32),
        "scale": rng.standard_normal(8).astype(np.float32),
        "beta": rng.standard_normal(8).astype(np.float32),
    }


def int64_axes(model: onnx.ModelProto) -> onnx.ModelProto:
    for t in model.graph.initializer:
        if t.name == "axes":
            t.CopyFrom(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    return model


def test_decomposed_layer_norm_becomes_layer_normalization(rng: np.random.Generator) -> None:
    model = int64_axes(
        make_model(layer_norm_nodes("X", "Y"), [("X", [2, 3, 8])], ["Y"], layer_norm_inits(rng), opset=18)
    )
    out = optimized(model, EXTENDED, {"X": rng.standard_normal((2, 3, 8)).astype(np.float32)}, atol=1e-4)
    assert op_counts(out) == {"LayerNormalization": 1}


def test_add_then_layer_norm_becomes_skip_layer_normalization(rng: np.random.Generator) -> None:
    nodes = [node("Add", ["X", "S"], ["xs"]), *layer_norm_nodes("xs", "Y")]
    model = int64_axes(make_model(nodes, [("X", [2, 3, 8]), ("S", [2, 3, 8])], ["Y"], layer_norm_inits(rng), opset=18))
    feeds = {k: rng.standard_normal((2, 3, 8)).astype(np.float32) for k in "XS"}
    out = optimized(model, EXTENDED, feeds, atol=1e-4)
    assert op_counts(out) == {"com.microsoft::SkipLayerNormalization": 1}


def test_matmul_of_a_transpose_becomes_fused_matmul(rng: np.random.Generator) -> None:
    nodes = [node("Transpose", ["B"], ["bt"], perm=[1, 0]), node("MatMul", ["X", "bt"], ["Y"])]
    model = make_model(nodes, [("X", [3, 4]), ("B", [5, 4])], ["Y"])
    feeds = {"X": rng.standard_normal((3, 4)).astype(np.float32), "B": rng.standard_normal((5, 4)).astype(np.float32)}
    assert op_counts(optimized(model, EXTENDED, feeds)) == {"com.microsoft::FusedMatMul": 1}


def test_level_all_is_extended_and_disable_all_changes_nothing(rng: np.random.Generator) -> None:
    model = conv_bn(rng)
    model.graph.node.append(node("Relu", ["Y"], ["Z"]))
    model.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, None))
    x = {"X": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    assert op_counts(optimized(model, LEVELS.ORT_ENABLE_ALL, x, atol=1e-4)) == {"Conv": 1, "Relu": 1}  # Y is an output
    unoptimized = session(model, LEVELS.ORT_DISABLE_ALL)._built.model
    assert [(n.name, n.op_type) for n in unoptimized.graph.node] == [(n.name, n.op_type) for n in model.graph.node]


def test_castlike_without_saturation_is_left_to_the_kernel(rng: np.random.Generator) -> None:
    """onnxscript's folder would make it a Cast and drop saturate=0 (float8 values would saturate)."""
    like = helper.make_tensor_value_info("L", TensorProto.FLOAT8E4M3FN, [1])
    graph = helper.make_graph(
        [node("CastLike", ["X", "L"], ["c"], saturate=0), node("Cast", ["c"], ["Y"], to=TensorProto.FLOAT)],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4]), like],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    import ml_dtypes

    feeds = {"X": np.array([0.5, 1e6, -1e6, 3.0], np.float32), "L": np.zeros(1, ml_dtypes.float8_e4m3fn)}
    out = optimized(model, LEVELS.ORT_ENABLE_ALL, feeds)
    assert op_counts(out) == {"CastLike": 1, "Cast": 1}


def test_a_folded_shape_at_an_old_opset_becomes_an_initializer(rng: np.random.Generator) -> None:
    """onnxscript writes Constant(value_ints), which opset 9 lacks: it must not reach the model."""
    nodes = [node("Shape", ["X"], ["s"]), node("Reshape", ["Z", "s"], ["r"]), node("Add", ["r", "X"], ["Y"])]
    model = make_model(nodes, [("X", [2, 3]), ("Z", [6])], ["Y"], opset=9)
    feeds = {"X": rng.standard_normal((2, 3)).astype(np.float32), "Z": rng.standard_normal(6).astype(np.float32)}
    out = optimized(model, BASIC, feeds)
    assert op_counts(out) == {"Reshape": 1, "Add": 1}
    assert [list(numpy_helper.to_array(t)) for t in out.graph.initializer] == [[2, 3]]


def test_shapes_are_inferred_anew_after_the_passes() -> None:
    """The optimized model's value_info is inferred anew: dims the first inference made up
    (``unk__N``, from a Slice whose ends were computed before folding) give way to what inference
    derives now, and a value inference cannot type (after a contrib op) keeps what it had."""
    from ep_core.optimizer.passes import _fresh_shapes

    c = {n: numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("six", [6]), ("ax", [1]))}
    g = helper.make_graph(
        [
            node("Slice", ["X", "zero", "six", "ax"], ["s1"]),
            node("Sigmoid", ["s1"], ["g1"]),
            node("Gelu", ["g1"], ["g2"], domain="com.microsoft"),
            node("Relu", ["g2"], ["Y"]),
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 12])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        list(c.values()),
        value_info=[
            helper.make_tensor_value_info("s1", TensorProto.FLOAT, ["unk__0", "unk__1"]),
            helper.make_tensor_value_info("g1", TensorProto.FLOAT, ["unk__0", "unk__1"]),
            helper.make_tensor_value_info("g2", TensorProto.FLOAT, ["unk__0", 6]),
        ],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=10
    )
    got = _fresh_shapes(model)
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in got.graph.value_info}
    assert shapes["s1"] == ["batch", 6] and shapes["g1"] == ["batch", 6]
    assert shapes["g2"] == ["unk__0", 6]  # onnx cannot infer com.microsoft::Gelu: the old dims stay
    plain = onnx.shape_inference.infer_shapes(model)  # what the passes' last step did before: stale dims kept
    stale = next(v for v in plain.graph.value_info if v.name == "s1").type.tensor_type.shape.dim
    assert stale[0].dim_param == "unk__0"


def test_a_shape_of_another_rank_is_replaced_only_when_all_derived() -> None:
    """A value_info of a stale rank gives way to a shape inference derives in full; a fresh shape
    with made-up dims of another rank does not replace it."""
    from ep_core.optimizer.passes import _merge_dims

    def tensor(dims: list[Any]) -> Any:
        return helper.make_tensor_value_info("v", TensorProto.FLOAT, dims).type.tensor_type

    old = tensor(["unk__0", "unk__1", "unk__2"])
    _merge_dims(old, tensor(["batch", 6]))
    assert [d.dim_param or d.dim_value for d in old.shape.dim] == ["batch", 6]
    old = tensor(["batch", 6, 1])
    _merge_dims(old, tensor(["unk__3", 6]))
    assert [d.dim_param or d.dim_value for d in old.shape.dim] == ["batch", 6, 1]


CLAMPS = {  # name -> (nodes, initializers): two clamps in a row
    "Clip Clip": (
        [node("Clip", ["X", "a", "b"], ["c"]), node("Clip", ["c", "d", "e"], ["Y"])],
        {"a": -6.0, "b": 6.0, "d": -1.0, "e": 2.0},
    ),
    "Clip Relu": ([node("Clip", ["X", "a", "b"], ["c"]), node("Relu", ["c"], ["Y"])], {"a": -3.0, "b": 6.0}),
    "Relu Clip": ([node("Relu", ["X"], ["c"]), node("Clip", ["c", "", "b"], ["Y"])], {"b": 6.0}),
    "legacy Clip Clip": (
        [node("Clip", ["X"], ["c"], min=0.0, max=6.0), node("Clip", ["c"], ["Y"], min=-1.0, max=1.0)],
        {},
    ),
    "legacy Clip Relu": ([node("Clip", ["X"], ["c"], min=-3.0, max=6.0), node("Relu", ["c"], ["Y"])], {}),
}
APART = {  # clamps that are not one clamp, or whose bound does not bound
    "intervals apart": (
        [node("Clip", ["X", "a", "b"], ["c"]), node("Clip", ["c", "d", "e"], ["Y"])],
        {"a": 0.0, "b": 1.0, "d": 2.0, "e": 3.0},
    ),
    "Relu after a negative Clip": (
        [node("Clip", ["X", "a", "b"], ["c"]), node("Relu", ["c"], ["Y"])],
        {"a": -5.0, "b": -1.0},
    ),
    "NaN min then Relu": (
        [node("Clip", ["X", "a", "b"], ["c"]), node("Relu", ["c"], ["Y"])],
        {"a": math.nan, "b": 1.0},
    ),
}


def _clamp_model(case: tuple[list[Any], dict[str, float]]) -> onnx.ModelProto:
    nodes, inits = case
    opset = 9 if "min" in [a.name for n in nodes for a in n.attribute] else 17
    return make_model(nodes, [("X", [13])], ["Y"], {k: np.array(v, np.float32) for k, v in inits.items()}, opset)


def _clamp_feed() -> dict[str, np.ndarray]:
    return {"X": np.array([-np.inf, -9, -5, -2, -1, -0.5, 0, 0.5, 1, 2.5, 7, np.inf, np.nan], np.float32)}


def _as_onnxruntime(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> None:
    import onnxruntime as ort

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(session(model, BASIC).run(None, feed)[0], want)


@pytest.mark.parametrize("name", sorted(CLAMPS))
def test_relu_and_clip_chains_become_one_clip(name: str) -> None:
    """Attribute-form Clips (opset 6-10) included: onnxscript's rules read bounds from inputs only,
    so two such Clips became one Clip without bounds (ep-core now has its own rule)."""
    model, feed = _clamp_model(CLAMPS[name]), _clamp_feed()
    assert op_counts(optimized(model, BASIC, feed)) == {"Clip": 1}
    _as_onnxruntime(model, feed)


@pytest.mark.parametrize("name", sorted(APART))
def test_clamps_that_are_not_one_clamp_are_kept(name: str) -> None:
    model, feed = _clamp_model(APART[name]), _clamp_feed()
    assert sum(op_counts(optimized(model, BASIC, feed)).values()) == 2
    _as_onnxruntime(model, feed)
