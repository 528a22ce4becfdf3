"""Models read as onnxruntime reads them (red-teams 16 and 17: unusual graph structures, control
flow and sequences): each case runs on onnxruntime and on both CPU EPs, and must agree, in values,
declared inputs/outputs and type strings."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import ep_core
from ep_core.sdk.errors import InvalidArgument

PROVIDERS = ["CpuReferenceExecutionProvider", "NumbaCpuExecutionProvider"]
F = TP.FLOAT


def _t(name: str, elem: int = F, shape: Any = None) -> Any:
    return h.make_tensor_value_info(name, elem, shape)


def _model(graph: Any, opset: int = 17, ir: int = 8, **kw: Any) -> bytes:
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=ir, **kw).SerializeToString()


def _sessions(model: bytes, provider: str) -> tuple[Any, Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]), ep_core.InferenceSession(
            model, providers=[provider]
        )


def _io(sess: Any) -> list[tuple[str, Any, str]]:
    return [(a.name, a.shape, a.type) for a in [*sess.get_inputs(), *sess.get_outputs()]]


def _agree(model: bytes, feeds: dict[str, Any], provider: str) -> list[Any]:
    theirs, ours = _sessions(model, provider)
    assert _io(ours) == _io(theirs)
    want, got = theirs.run(None, feeds), ours.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
            continue
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return got


@pytest.mark.parametrize("provider", PROVIDERS)
def test_function_default_attribute_is_bound(provider: str) -> None:
    """A local function's attribute default (IR 9 ``attribute_proto``) applies to a call that leaves it
    unset, from the graph and from another function: onnx's inliner dropped it, LeakyRelu took 0.01."""
    leaky = h.make_function(
        "local", "LeakyD", ["x"], ["y"], [h.make_node("LeakyRelu", ["x"], ["y"])], [h.make_opsetid("", 17)]
    )
    ref = onnx.AttributeProto(name="alpha", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT)
    leaky.node[0].attribute.append(ref)
    leaky.attribute_proto.append(h.make_attribute("alpha", 0.25))
    outer = h.make_function(
        "local", "Twice", ["x"], ["y"],
        [h.make_node("LeakyD", ["x"], ["t"], domain="local"), h.make_node("LeakyD", ["t"], ["y"], domain="local", alpha=0.5)],
        [h.make_opsetid("", 17), h.make_opsetid("local", 1)],
    )  # fmt: skip
    graph = h.make_graph(
        [h.make_node("LeakyD", ["X"], ["Y"], domain="local"), h.make_node("Twice", ["X"], ["Z"], domain="local")],
        "g", [_t("X", F, [2])], [_t("Y"), _t("Z")],
    )  # fmt: skip
    model = h.make_model(
        graph,
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)],
        ir_version=9,
        functions=[leaky, outer],
    ).SerializeToString()
    y, z = _agree(model, {"X": np.array([-4, 4], np.float32)}, provider)
    np.testing.assert_array_equal(y, [-1, 4])
    np.testing.assert_array_equal(z, [-0.5, 4])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_long_default_domain_and_repeated_metadata_load(provider: str) -> None:
    """A node in domain ``ai.onnx`` with only ``""`` imported, and a repeated metadata key: onnxruntime
    loads both (the last value stands); onnx's checker refused them."""
    graph = h.make_graph(
        [h.make_node("Relu", ["X"], ["Y"], domain="ai.onnx")], "g", [_t("X", F, [2])], [_t("Y", F, [2])]
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    for key, value in (("a", "1"), ("a", "2")):
        model.metadata_props.add(key=key, value=value)
    _agree(model.SerializeToString(), {"X": np.array([-1, 2], np.float32)}, provider)
    meta = ep_core.InferenceSession(model.SerializeToString(), providers=[provider]).get_modelmeta()
    assert meta.custom_metadata_map == {"a": "2"}
    assert model.graph.node[0].domain == "ai.onnx"  # the caller's model is not edited


@pytest.mark.parametrize("outer", ["initializer", "input", "node output"])
def test_subgraph_initializer_shadowing_an_outer_value_reads_the_outer_one(outer: str) -> None:
    """onnxruntime binds an If branch's initializer named like an enclosing value to the outer value."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    then = h.make_graph(
        [h.make_node("Add", ["X", "W"], ["o"])], "then", [], [_t("o", F, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 100, np.float32), "W")],
    )  # fmt: skip
    other = h.make_graph([h.make_node("Sub", ["X", "W"], ["o2"])], "else", [], [_t("o2", F, [2, 3])])
    nodes = [h.make_node("If", ["C"], ["Y"], then_branch=then, else_branch=other)]
    inputs, inits, feeds = [_t("X", F, [2, 3]), _t("C", TP.BOOL, [])], [], {"X": x, "C": np.array(True)}
    if outer == "initializer":
        inits.append(numpy_helper.from_array(np.full((2, 3), 10, np.float32), "W"))
    elif outer == "input":
        inputs.append(_t("W", F, [2, 3]))
        feeds["W"] = np.ones((2, 3), np.float32)
    else:
        nodes.insert(0, h.make_node("Identity", ["X"], ["W"]))
    model = _model(h.make_graph(nodes, "g", inputs, [_t("Y", F, [2, 3])], inits))
    with pytest.warns(RuntimeWarning, match="initializer 'W' named like a value of an enclosing graph"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    (y,) = _agree(model, feeds, "CpuReferenceExecutionProvider")
    assert y.max() < 100


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_input_keeps_its_declared_type_against_outputs_and_value_info(provider: str) -> None:
    """A graph output or value_info naming a graph input does not replace its declaration: the feed is
    still checked against it, and get_inputs() shows it."""
    graph = h.make_graph(
        [h.make_node("Relu", ["X"], ["Y"])], "g", [_t("X", F, ["N", 3])], [_t("Y", F, ["N", 3]), _t("X", F, ["N", 3])],
        value_info=[_t("X", F, [5])],
    )  # fmt: skip
    model = _model(graph)
    _agree(model, {"X": np.arange(6, dtype=np.float32).reshape(2, 3) - 2}, provider)
    with pytest.raises(InvalidArgument, match="input 'X' has rank 1"):
        ep_core.InferenceSession(model, providers=[provider]).run(None, {"X": np.ones(4, np.float32)})


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_scalar_input_takes_a_one_element_feed(provider: str) -> None:
    """onnxruntime does not check a rank-0 input's shape; an If condition fed ``[True]`` is common. A
    one-element feed is the scalar; more elements are refused, saying why."""
    then = h.make_graph([h.make_node("Neg", ["A"], ["t"])], "then", [], [_t("t", F, [2])])
    other = h.make_graph([h.make_node("Identity", ["A"], ["e"])], "else", [], [_t("e", F, [2])])
    graph = h.make_graph(
        [h.make_node("If", ["C"], ["Y"], then_branch=then, else_branch=other), h.make_node("Mul", ["Y", "S"], ["Z"])],
        "g", [_t("A", F, [2]), _t("C", TP.BOOL, []), _t("S", F, [])], [_t("Z", F, [2])],
    )  # fmt: skip
    model = _model(graph)
    a = np.array([1, -2], np.float32)
    (z,) = _agree(model, {"A": a, "C": np.array([True]), "S": np.array([3], np.float32)}, provider)
    np.testing.assert_array_equal(z, [-3, 6])
    session = ep_core.InferenceSession(model, providers=[provider])
    with pytest.raises(InvalidArgument, match="input 'S' has rank 1 .* onnxruntime runs a scalar input fed any shape"):
        session.run(None, {"A": a, "C": np.array(True), "S": np.array([3, 4], np.float32)})


@pytest.mark.parametrize("opset", [7, 10, 12])
def test_dropout_mask_in_inference_is_onnxruntimes(opset: int) -> None:
    """Opsets 7-11: onnxruntime's identity kernel fills the mask with zeros (typed like the input before
    opset 10, bool after); opset 12's kernel gives all True."""
    mask_type = F if opset < 10 else TP.BOOL
    graph = h.make_graph(
        [h.make_node("Dropout", ["X"], ["Y", "M"])],
        "g",
        [_t("X", F, [2, 3])],
        [_t("Y", F, [2, 3]), _t("M", mask_type, [2, 3])],
    )
    model = _model(graph, opset=opset, ir=7 if opset < 12 else 8)
    for provider in PROVIDERS:
        _, mask = _agree(model, {"X": np.arange(6, dtype=np.float32).reshape(2, 3)}, provider)
        assert mask.all() == (opset >= 12)


def test_optional_values_pass_through_and_types_are_spelled_as_onnxruntime() -> None:
    """An optional input without a value passes through an Identity (it raised AttributeError), and
    non-tensor types read as onnxruntime's ``NodeArg.type``: ``optional(tensor(float))``, ``seq(...)``."""
    opt = h.make_optional_type_proto(h.make_tensor_type_proto(F, [None]))
    graph = h.make_graph(
        [h.make_node("Identity", ["o"], ["p"]), h.make_node("SequenceEmpty", [], ["s"], dtype=TP.INT64)],
        "g", [h.make_value_info("o", opt)], [h.make_value_info("p", opt), h.make_tensor_sequence_value_info("s", TP.INT64, None)],
    )  # fmt: skip
    model = _model(graph, opset=16)
    theirs, ours = _sessions(model, "CpuReferenceExecutionProvider")
    assert _io(ours) == _io(theirs)
    assert [a.type for a in ours.get_outputs()] == ["optional(tensor(float))", "seq(tensor(int64))"]
    for feed in (None, np.ones(3, np.float32)):
        got, want = ours.run(None, {"o": feed}), theirs.run(None, {"o": feed})
        assert got[1] == want[1] == []
        assert (got[0] is None) == (want[0] is None)
        if feed is not None:
            np.testing.assert_array_equal(got[0], want[0])


def test_split_to_sequence_of_an_empty_axis_by_a_scalar_has_no_chunk() -> None:
    """A scalar ``split`` over a length-0 axis makes no chunk (onnxruntime), not one empty chunk."""
    graph = h.make_graph(
        [h.make_node("SplitToSequence", ["x", "sp"], ["s"]), h.make_node("SequenceLength", ["s"], ["n"])],
        "g", [_t("x", F, [None]), _t("sp", TP.INT64, [])], [_t("n", TP.INT64, [])],
    )  # fmt: skip
    model = _model(graph, opset=17)
    for x in (np.ones(0, np.float32), np.ones(5, np.float32)):
        (n,) = _agree(model, {"x": x, "sp": np.array(2, np.int64)}, "CpuReferenceExecutionProvider")
        assert int(n) == -(-len(x) // 2)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_output_dims_resolved_after_folding_are_shown_as_onnxruntime_shows_them(provider: str) -> None:
    """Pads made by a ConstantOfShape chain (onnxscript keeps every ConstantOfShape; a small one is now
    folded, as onnxruntime folds it) and a Conv+Relu fused into FusedConv (which onnx cannot infer):
    the outputs' declared symbols become the sizes onnxruntime shows (silero-vad's LSTM state showed
    ``LSTMhn_dim_1`` for 1). A dim the model names ``unk__3`` itself stays, as in onnxruntime."""
    const = lambda name, v: h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))  # noqa: E731
    nodes = [
        const("two", [2]),
        h.make_node("ConstantOfShape", ["two"], ["zeros"], value=numpy_helper.from_array(np.array([0], np.int64))),
        const("ones", [1, 1]),
        h.make_node("Concat", ["zeros", "ones"], ["pads"], axis=0),  # [0, 0, 1, 1]: one more row and column
        h.make_node("Pad", ["X", "pads"], ["P"]),
        h.make_node("Unsqueeze", ["P", "ax"], ["U"]),
        h.make_node("Conv", ["U", "W"], ["C"]),
        h.make_node("Relu", ["C"], ["R"]),
        h.make_node("Transpose", ["R"], ["Y"], perm=[0, 2, 1]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "W"),
        numpy_helper.from_array(np.array([1], np.int64), "ax"),
    ]
    graph = h.make_graph(nodes, "g", [_t("X", F, ["unk__3", 6])], [_t("Y", F, ["unk__3", "T", "C"])], inits)
    model = _model(graph, opset=17)
    theirs, ours = _sessions(model, provider)
    assert _io(ours) == _io(theirs)
    assert ours.get_outputs()[0].shape == ["unk__3", 5, 2]
    import ep_core.onnxruntime as dropin

    assert _io(dropin.InferenceSession(model, providers=[provider])) == _io(theirs)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_numpy_str_and_bytes_arrays_feed_a_string_input(provider: str) -> None:
    """np.array(['a', 'b']) is '<U1' and np.array([b'a']) 'S1': onnxruntime takes both for a string
    input; ep-core's own session refused them (only object arrays)."""
    graph = h.make_graph(
        [h.make_node("Identity", ["s"], ["t"])], "g", [_t("s", TP.STRING, [None])], [_t("t", TP.STRING, [None])]
    )
    model = _model(graph)
    for feed in (np.array(["a", "bé"]), np.array(["a", "bé"], object), np.array([b"a", "bé".encode()])):
        (t,) = _agree(model, {"s": feed}, provider)
        assert t.dtype == object and t.tolist() == ["a", "bé"]


def test_a_local_function_named_like_an_onnx_op_is_ignored_for_the_op() -> None:
    """A function ``Relu`` in domain "" (body Neg): onnxruntime runs the real Relu; inlining the
    function gave other numbers, silently. Now the op runs, with a warning naming the function."""
    f = h.make_function("", "Relu", ["x"], ["y"], [h.make_node("Neg", ["x"], ["y"])], [h.make_opsetid("", 17)])
    graph = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "g", [_t("X", F, [4])], [_t("Y", F, [4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=9, functions=[f]).SerializeToString()
    x = np.array([-2, -1, 0.5, 3], np.float32)
    with pytest.warns(RuntimeWarning, match="local function ai.onnx::Relu has the name of an ONNX op"):
        ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    (y,) = _agree(model, {"X": x}, "CpuReferenceExecutionProvider")
    np.testing.assert_array_equal(y, [0, 0, 0.5, 3])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_forwarded_attribute_left_unset_takes_the_inner_function_s_default(provider: str) -> None:
    """Outer(beta) calls Scale(alpha=@beta); Scale's default alpha is 2. Outer called without beta:
    the reference resolves to nothing and Scale's default applies (onnxruntime: 2x); onnx's inliner
    left Scale's Constant without a value (the session failed naming a node of the function body)."""
    const = h.make_node("Constant", [], ["a"])
    ref = onnx.AttributeProto(name="value_float", type=onnx.AttributeProto.FLOAT, ref_attr_name="alpha")
    const.attribute.append(ref)
    scale = h.make_function(
        "my", "Scale", ["x"], ["y"], [const, h.make_node("Mul", ["x", "a"], ["y"])], [h.make_opsetid("", 17)]
    )
    scale.attribute_proto.append(h.make_attribute("alpha", 2.0))
    call = h.make_node("Scale", ["x"], ["y"], domain="my")
    call.attribute.append(onnx.AttributeProto(name="alpha", type=onnx.AttributeProto.FLOAT, ref_attr_name="beta"))
    outer = h.make_function(
        "my", "Outer", ["x"], ["y"], [call], [h.make_opsetid("", 17), h.make_opsetid("my", 1)], attributes=["beta"]
    )
    graph = h.make_graph([h.make_node("Outer", ["X"], ["Y"], domain="my")], "g", [_t("X", F, [4])], [_t("Y", F, [4])])
    opsets = [h.make_opsetid("", 17), h.make_opsetid("my", 1)]
    model = h.make_model(graph, opset_imports=opsets, ir_version=9, functions=[scale, outer]).SerializeToString()
    (y,) = _agree(model, {"X": np.array([-2, -1, 0.5, 3], np.float32)}, provider)
    np.testing.assert_array_equal(y, [-4, -2, 1, 6])


def test_independent_chains_whose_inputs_share_a_dim_name_run_on_the_numba_ep() -> None:
    """X["N"] and Z["N"] fed 3 and 4 elements: onnxruntime holds feeds to no shared dim name; the
    Numba EP fused the two chains into one kernel of one shape and failed at run time."""
    graph = h.make_graph(
        [h.make_node("Relu", ["X"], ["Y"]), h.make_node("Neg", ["Z"], ["Y2"])], "g",
        [_t("X", F, ["N"]), _t("Z", F, ["N"])], [_t("Y", F, ["N"]), _t("Y2", F, ["N"])],
    )  # fmt: skip
    y, y2 = _agree(
        _model(graph), {"X": np.ones(3, np.float32), "Z": np.zeros(4, np.float32)}, "NumbaCpuExecutionProvider"
    )
    assert y.shape == (3,) and y2.shape == (4,)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_negative_dims_and_unnamed_graphs_load(provider: str) -> None:
    """An input dim of -1 (older converters' dynamic batch) is unknown, as onnxruntime reads it
    (onnx's strict inference took -1 for a size and refused the Add); a graph named "" runs (onnx's
    checker refused it)."""
    graph = h.make_graph(
        [h.make_node("Add", ["X", "B"], ["Y"])], "",
        [_t("X", F, [-1, 2]), _t("B", F, [3, 2])], [_t("Y", F, [-1, 2])],
    )  # fmt: skip
    (y,) = _agree(_model(graph), {"X": np.ones((3, 2), np.float32), "B": np.ones((3, 2), np.float32)}, provider)
    assert y.shape == (3, 2)


def test_an_unused_local_function_is_not_checked() -> None:
    """A function nothing calls, whose body uses an op no schema defines: onnxruntime never reads it
    (onnx's checker refused the whole model)."""
    f = h.make_function("my", "Unused", ["x"], ["y"], [h.make_node("NoSuchOp", ["x"], ["y"])], [h.make_opsetid("", 17)])
    graph = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "g", [_t("X", F, [3])], [_t("Y", F, [3])])
    opsets = [h.make_opsetid("", 17), h.make_opsetid("my", 1)]
    model = h.make_model(graph, opset_imports=opsets, ir_version=9, functions=[f]).SerializeToString()
    _agree(model, {"X": np.array([-1, 0, 1], np.float32)}, "CpuReferenceExecutionProvider")


def test_an_ort_format_model_is_named_as_such(tmp_path: Any) -> None:
    """onnxruntime's own flatbuffer format ("ORTM" at byte 4) is NOT_IMPLEMENTED saying what it is,
    not a 'corrupt protobuf'."""
    from ep_core.sdk.errors import NotImplementedByAnyEp

    data = b"\x10\x00\x00\x00ORTM" + bytes(range(64))
    (tmp_path / "m.ort").write_bytes(data)
    for model in (data, str(tmp_path / "m.ort")):
        with pytest.raises(NotImplementedByAnyEp, match="an ORT-format model"):
            ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])


def test_an_output_size_inference_contradicts_is_shown_unknown() -> None:
    """Y declared [7], inferred [3]: onnxruntime's get_outputs shows [None] (ep-core showed 7, which
    would size an IOBinding buffer wrongly), on the native session and the drop-in."""
    graph = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "g", [_t("X", F, [3])], [_t("Y", F, [7])])
    model = _model(graph)
    theirs, ours = _sessions(model, "CpuReferenceExecutionProvider")
    assert _io(ours) == _io(theirs) and ours.get_outputs()[0].shape == [None]
    import ep_core.onnxruntime as dropin

    assert _io(dropin.InferenceSession(model, providers=["CPUExecutionProvider"])) == _io(theirs)
