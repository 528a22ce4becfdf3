"""Hostile ONNX models, as an attacker would write them: resource bombs, models onnxruntime
rejects at load for a structural or type reason, malformed tensors and strings, escaping external
data; plus byte and field mutations of the onnx node-test models and of the zoo models.

Every case is a ``Case``: the model bytes and the files that go beside it. The suite writes each
case to its own folder and loads it by path in a subprocess (``worker.py``)."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
OPSET = 21
IR = 10


@dataclass(frozen=True)
class Case:
    name: str
    model: bytes
    files: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes, beside model.onnx
    node: str | None = None  # the node (or tensor) a typed error must name


def model(nodes, inputs=(), outputs=(("y", F, None),), inits=(), opset=OPSET, ir=IR, **kw) -> onnx.ModelProto:
    """A model from (name, elem_type, shape) inputs/outputs; shape None means unknown rank."""
    graph = helper.make_graph(
        list(nodes),
        "hostile",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(inits),
        **kw,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def const(name: str, value: object, dtype: type = np.int64) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=f"const_{name}", value=numpy_helper.from_array(np.array(value, dtype))
    )


def init(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def node(op: str, ins: list[str], outs: list[str], name: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=name, **attrs)


_CRAFTED: list[Callable[[], Iterator[Case]]] = []


def crafted(fn: Callable[[], Iterator[Case]]) -> Callable[[], Iterator[Case]]:
    _CRAFTED.append(fn)
    return fn


def case(name: str, m: onnx.ModelProto | bytes, node_name: str | None = None) -> Case:
    return Case(name, m if isinstance(m, bytes) else m.SerializeToString(), {}, node_name)


# ---------------------------------------------------------------------------------------- bombs
def tile_bomb() -> onnx.ModelProto:
    """The issue's model: Tile of a one-element constant by 10^12 (87 bytes here)."""
    return model([node("Tile", ["x", "r"], ["y"], "tile")], inits=[init("x", [1.0], np.float32), init("r", [10**12])])


@crafted
def bombs() -> Iterator[Case]:
    big = 10**12
    yield case("tile_bomb", tile_bomb())
    yield case(
        "tile_bomb_constant_nodes",
        model([const("x", [1.0], np.float32), const("r", [big]), node("Tile", ["x", "r"], ["y"], "tile")]),
    )
    yield case(
        "tile_bomb_2d",
        model(
            [const("x", [[1]], np.uint8), const("r", [10**6, 10**6]), node("Tile", ["x", "r"], ["y"], "tile")],
            outputs=[("y", TensorProto.UINT8, None)],
        ),
    )
    # repeats only known once a Concat is folded: no static shape before folding
    yield case(
        "tile_bomb_repeats_from_concat",
        model(
            [
                const("x", [1.0], np.float32),
                const("a", [big]),
                node("Concat", ["a"], ["r"], "cat", axis=0),
                node("Tile", ["x", "r"], ["y"], "tile"),
            ]
        ),
    )
    # shape inference with data propagation turns a 1-D int64 tensor into a TensorShapeProto
    for n in (10**8, 10**12):
        yield case(
            f"data_propagation_tile_cast_{n}",
            model(
                [
                    const("x", [1]),
                    const("r", [n]),
                    node("Tile", ["x", "r"], ["t"], "tile"),
                    node("Cast", ["t"], ["y"], "cast", to=I64),
                ],
                outputs=[("y", I64, None)],
            ),
        )
    yield case(
        "data_propagation_declared_input",
        model([node("Cast", ["t"], ["y"], "cast", to=I64)], inputs=[("t", I64, [10**12])], outputs=[("y", I64, None)]),
    )
    yield case(
        "data_propagation_expand_chain",
        model(
            [
                const("one", [1]),
                const("n", [10**9]),
                node("Concat", ["n"], ["s"], "cat", axis=0),
                node("Expand", ["one", "s"], ["e"], "expand"),
                node("Cast", ["e"], ["y"], "cast", to=I64),
            ],
            outputs=[("y", I64, None)],
        ),
    )
    yield case(
        "constant_of_shape_bomb", model([const("s", [10**6, 10**6]), node("ConstantOfShape", ["s"], ["y"], "cos")])
    )
    yield case(
        "expand_bomb",
        model([const("x", [1.0], np.float32), const("s", [big]), node("Expand", ["x", "s"], ["y"], "expand")]),
    )
    yield case(
        "range_bomb",
        model(
            [const("a", 0), const("b", big), const("d", 1), node("Range", ["a", "b", "d"], ["y"], "range")],
            outputs=[("y", I64, None)],
        ),
    )
    yield case(
        "pad_bomb",
        model([const("x", [1.0], np.float32), const("p", [10**10, 10**10]), node("Pad", ["x", "p"], ["y"], "pad")]),
    )
    yield case(
        "onehot_bomb",
        model(
            [
                const("i", [0]),
                const("d", big),
                const("v", [0.0, 1.0], np.float32),
                node("OneHot", ["i", "d", "v"], ["y"], "onehot"),
            ]
        ),
    )
    yield case(
        "resize_bomb",
        model(
            [
                const("x", np.ones((1, 1, 2, 2)), np.float32),
                const("s", [1, 1, 10**5, 10**5], np.float32),
                node("Resize", ["x", "", "s"], ["y"], "resize"),
            ]
        ),
    )
    # each fold is 64 MiB, 40 of them 2.5 GiB: more than the worker's address space
    nodes = [const("s", [16 * 2**20])]
    for i in range(40):
        nodes.append(node("ConstantOfShape", ["s"], [f"c{i}"], f"cos{i}"))
    nodes.append(node("Sum", [f"c{i}" for i in range(40)], ["y"], "sum"))
    yield case("many_medium_folds", model(nodes))
    yield case("loop_trip_count_bomb", _loop_model(big))  # loading must not run it
    yield case("many_nodes_20k", _identity_chain(20000))
    yield case("nested_if_depth_20", _nested_if(20))


def _loop_model(trips: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [node("Identity", ["cond"], ["cond_out"], "cond_id"), node("Identity", ["i"], ["i_out"], "i_id")],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("i_out", I64, []),
        ],
    )
    return model(
        [const("n", trips), const("c", True, np.bool_), node("Loop", ["n", "c"], ["y"], "loop", body=body)],
        outputs=[("y", I64, None)],
    )


def _identity_chain(n: int) -> onnx.ModelProto:
    nodes = [
        node("Identity", ["x" if i == 0 else f"t{i}"], ["y" if i == n - 1 else f"t{i + 1}"], f"id{i}") for i in range(n)
    ]
    return model(nodes, inputs=[("x", F, [1])], outputs=[("y", F, [1])])


def _nested_if(depth: int) -> onnx.ModelProto:
    def branch(level: int) -> onnx.GraphProto:
        if level == depth:
            nodes = [node("Identity", ["x"], [f"o{level}"], f"leaf{level}")]
        else:
            leaf = helper.make_graph(
                [node("Identity", ["x"], [f"e{level}"], f"else{level}")],
                f"e{level}",
                [],
                [helper.make_tensor_value_info(f"e{level}", F, [1])],
            )
            nodes = [node("If", ["c"], [f"o{level}"], f"if{level}", then_branch=branch(level + 1), else_branch=leaf)]
        return helper.make_graph(nodes, f"g{level}", [], [helper.make_tensor_value_info(f"o{level}", F, [1])])

    top = branch(0)
    return model(list(top.node), inputs=[("c", TensorProto.BOOL, []), ("x", F, [1])], outputs=[("o0", F, [1])])


# ------------------------------------------------------------- structure and types (onnxruntime rejects)
X4 = [("x", F, [4])]


@crafted
def structure() -> Iterator[Case]:
    def one(name: str, nodes: list, node_name: str | None = None, **kw: object) -> Case:
        kw.setdefault("inputs", X4)
        return case(name, model(nodes, **kw), nodes[-1].name if node_name is None and nodes else node_name)

    yield one("reshape_to_minus5", [const("s", [-5, 2]), node("Reshape", ["x", "s"], ["y"], "reshape")])
    yield one("reshape_init_minus5", [node("Reshape", ["x", "s"], ["y"], "reshape")], inits=[init("s", [-5, 2])])
    yield one("reshape_two_minus1", [const("s", [-1, -1]), node("Reshape", ["x", "s"], ["y"], "reshape")])
    yield one("reshape_count_mismatch", [const("s", [3, 3]), node("Reshape", ["x", "s"], ["y"], "reshape")])
    yield one(
        "split_negative",
        [const("s", [-1, 5]), node("Split", ["x", "s"], ["y", "z"], "split")],
        outputs=[("y", F, None), ("z", F, None)],
    )
    yield one(
        "split_sum_mismatch",
        [const("s", [1, 1]), node("Split", ["x", "s"], ["y", "z"], "split")],
        outputs=[("y", F, None), ("z", F, None)],
    )
    yield one(
        "split_attr_negative_opset11",
        [node("Split", ["x"], ["y", "z"], "split", split=[-1, 5])],
        opset=11,
        ir=7,
        outputs=[("y", F, None), ("z", F, None)],
    )
    yield one("pad_by_minus_1e10", [const("p", [-(10**10), 0]), node("Pad", ["x", "p"], ["y"], "pad")])
    yield one("pad_by_minus_1e10_init", [node("Pad", ["x", "p"], ["y"], "pad")], inits=[init("p", [-(10**10), 0])])
    yield one("opset_10000", [node("Relu", ["x"], ["y"], "relu")], "", opset=10000)  # the model's fault
    yield one("opset_0", [node("Relu", ["x"], ["y"], "relu")], opset=0)
    yield one("ir_version_100", [node("Relu", ["x"], ["y"], "relu")], "", ir=100)
    yield one("add_float_int64", [node("Add", ["x", "i"], ["y"], "add")], inputs=X4 + [("i", I64, [4])])
    yield one("add_float_int64_init", [node("Add", ["x", "i"], ["y"], "add")], inits=[init("i", [1, 2, 3, 4])])
    yield one("cast_to_contradicts_output", [node("Cast", ["x"], ["y"], "cast", to=I32)])
    yield one(
        "cast_to_contradicts_value_info",
        [node("Cast", ["x"], ["t"], "cast", to=I32), node("Abs", ["t"], ["y"], "abs")],
        "cast",
        outputs=[("y", I32, None)],
        value_info=[helper.make_tensor_value_info("t", F, [4])],
    )
    yield one("relu_declared_int64", [node("Relu", ["x"], ["y"], "relu")], outputs=[("y", I64, [4])])
    yield one("unknown_op", [node("NoSuchOp", ["x"], ["y"], "nosuch")])
    yield one("cast_without_to", [node("Cast", ["x"], ["y"], "cast")])
    yield one("cast_to_is_float", [node("Cast", ["x"], ["y"], "cast", to=1.5)])
    yield one("cast_to_unknown_type", [node("Cast", ["x"], ["y"], "cast", to=999)])
    yield one("relu_unknown_attribute", [node("Relu", ["x"], ["y"], "relu", foo=1)])
    yield one("relu_two_inputs", [node("Relu", ["x", "x"], ["y"], "relu")])
    yield one("add_one_input", [node("Add", ["x"], ["y"], "add")])
    yield one("relu_two_outputs", [node("Relu", ["x"], ["y", "z"], "relu")])
    yield one("two_producers", [node("Relu", ["x"], ["y"], "relu"), node("Abs", ["x"], ["y"], "abs")], "'y'")
    yield one("input_from_nowhere", [node("Add", ["x", "ghost"], ["y"], "add")])
    yield one(
        "cycle",
        [
            node("Add", ["x", "b"], ["a"], "add_a"),
            node("Relu", ["a"], ["b"], "relu_b"),
            node("Abs", ["b"], ["y"], "abs"),
        ],
        "add_a",
    )
    yield one("output_not_produced", [node("Relu", ["x"], ["z"], "relu")], "'y'", outputs=[("y", F, [4])])
    yield one("duplicate_graph_inputs", [node("Relu", ["x"], ["y"], "relu")], "'x'", inputs=X4 + X4)
    yield one(
        "duplicate_initializers",
        [node("Add", ["x", "w"], ["y"], "add")],
        "w",
        inits=[init("w", [1.0] * 4, np.float32), init("w", [2.0] * 4, np.float32)],
    )
    yield one("input_elem_type_999", [node("Relu", ["x"], ["y"], "relu")], "'x'", inputs=[("x", 999, [4])])
    yield one("no_outputs", [node("Relu", ["x"], ["y"], "relu")], outputs=[])
    yield one("empty_op_type", [node("", ["x"], ["y"], "empty")])
    yield one("custom_domain_without_opset", [helper.make_node("Foo", ["x"], ["y"], name="foo", domain="com.example")])
    yield one(
        "constant_two_values",
        [helper.make_node("Constant", [], ["y"], name="c", value_float=1.0, value_int=2)],
        inputs=[],
    )
    yield one("constant_no_value", [helper.make_node("Constant", [], ["y"], name="c")], inputs=[])
    img = [("x", F, [1, 1, 4, 4])]
    w = [init("w", np.ones((1, 1, 2, 2)), np.float32)]
    yield one("conv_stride_0", [node("Conv", ["x", "w"], ["y"], "conv", strides=[0, 0])], inputs=img, inits=w)
    yield one(
        "conv_negative_kernel_shape",
        [node("Conv", ["x", "w"], ["y"], "conv", kernel_shape=[-2, -2])],
        inputs=img,
        inits=w,
    )
    yield one("conv_group_0", [node("Conv", ["x", "w"], ["y"], "conv", group=0)], inputs=img, inits=w)
    yield one("conv_dilation_0", [node("Conv", ["x", "w"], ["y"], "conv", dilations=[0, 0])], inputs=img, inits=w)
    yield one(
        "conv_negative_pads", [node("Conv", ["x", "w"], ["y"], "conv", pads=[-9, -9, -9, -9])], inputs=img, inits=w
    )
    yield one(
        "conv_weight_rank_mismatch",
        [node("Conv", ["x", "w"], ["y"], "conv")],
        inputs=img,
        inits=[init("w", np.ones((2, 2)), np.float32)],
    )
    yield one(
        "maxpool_kernel_larger_than_input", [node("MaxPool", ["x"], ["y"], "pool", kernel_shape=[9, 9])], inputs=img
    )
    yield one("maxpool_kernel_1e12", [node("MaxPool", ["x"], ["y"], "pool", kernel_shape=[10**12, 10**12])], inputs=img)
    yield one(
        "gather_constant_out_of_range",
        [const("d", [1.0, 2.0], np.float32), const("i", [7]), node("Gather", ["d", "i"], ["y"], "gather")],
        inputs=[],
    )
    yield one("concat_axis_out_of_range", [node("Concat", ["x", "x"], ["y"], "concat", axis=5)])
    yield one("transpose_bad_perm", [node("Transpose", ["x"], ["y"], "transpose", perm=[3])])
    yield one("transpose_perm_1e12", [node("Transpose", ["x"], ["y"], "transpose", perm=[10**12])])
    yield one("squeeze_axis_out_of_range", [const("a", [3]), node("Squeeze", ["x", "a"], ["y"], "squeeze")])
    yield one("unsqueeze_duplicate_axes", [const("a", [0, 0]), node("Unsqueeze", ["x", "a"], ["y"], "unsqueeze")])
    yield one("softmax_axis_out_of_range", [node("Softmax", ["x"], ["y"], "softmax", axis=9)])
    yield one("flatten_axis_out_of_range", [node("Flatten", ["x"], ["y"], "flatten", axis=9)])
    yield one(
        "slice_step_0",
        [
            const("s", [0]),
            const("e", [4]),
            const("a", [0]),
            const("p", [0]),
            node("Slice", ["x", "s", "e", "a", "p"], ["y"], "slice"),
        ],
    )
    yield one(
        "topk_negative_k",
        [const("k", [-3]), node("TopK", ["x", "k"], ["y", "i"], "topk")],
        outputs=[("y", F, None), ("i", I64, None)],
    )
    yield one(
        "matmul_shape_mismatch",
        [node("MatMul", ["a", "b"], ["y"], "matmul")],
        inputs=[("a", F, [2, 3]), ("b", F, [4, 5])],
    )
    yield one(
        "gemm_shape_mismatch", [node("Gemm", ["a", "b"], ["y"], "gemm")], inputs=[("a", F, [2, 3]), ("b", F, [4, 5])]
    )
    yield one(
        "relu_shape_contradicts_value_info",
        [node("Relu", ["x"], ["t"], "relu"), node("Abs", ["t"], ["y"], "abs")],
        "relu",
        value_info=[helper.make_tensor_value_info("t", F, [5])],
    )
    yield one("relu_rank_contradicts_output", [node("Relu", ["x"], ["y"], "relu")], outputs=[("y", F, [2, 2])])
    # control flow
    then_g = helper.make_graph(
        [node("Identity", ["x"], ["t"], "then_id")], "then", [], [helper.make_tensor_value_info("t", F, [4])]
    )
    two_out = helper.make_graph(
        [node("Identity", ["x"], ["t"], "t1"), node("Identity", ["x"], ["u"], "t2")],
        "else",
        [],
        [helper.make_tensor_value_info("t", F, [4]), helper.make_tensor_value_info("u", F, [4])],
    )
    cond = [("c", TensorProto.BOOL, [])]
    yield one("if_without_else", [node("If", ["c"], ["y"], "if", then_branch=then_g)], inputs=cond + X4)
    yield one(
        "if_branch_output_count",
        [node("If", ["c"], ["y"], "if", then_branch=then_g, else_branch=two_out)],
        inputs=cond + X4,
    )
    ghost = helper.make_graph(
        [node("Identity", ["ghost"], ["t"], "ghost_id")], "then", [], [helper.make_tensor_value_info("t", F, [4])]
    )
    yield one(
        "if_branch_reads_unknown_name",
        [node("If", ["c"], ["y"], "if", then_branch=ghost, else_branch=then_g)],
        inputs=cond + X4,
    )
    bad_body = helper.make_graph(
        [node("Identity", ["x"], ["t"], "body_id")], "body", [], [helper.make_tensor_value_info("t", F, [4])]
    )
    yield one("loop_body_without_inputs", [const("n", 2), node("Loop", ["n", ""], ["y"], "loop", body=bad_body)])
    yield one(
        "loop_trip_count_float", [const("n", 2.0, np.float32), node("Loop", ["n", ""], ["y"], "loop", body=bad_body)]
    )
    yield one("scan_without_body", [node("Scan", ["x"], ["y"], "scan", num_scan_inputs=1)])


# ------------------------------------------------------------------------------ malformed tensors
def _tensor(name: str, dtype: int, dims: list[int], **fields: object) -> onnx.TensorProto:
    t = TensorProto(name=name, data_type=dtype, dims=dims)
    for k, v in fields.items():
        if k == "raw_data":
            t.raw_data = v
        else:
            getattr(t, k).extend(v)
    return t


def _with_init(t: onnx.TensorProto, name: str) -> Case:
    return case(name, model([node("Add", ["x", t.name], ["y"], "add")], inputs=X4, inits=[t]), t.name)


@crafted
def tensors() -> Iterator[Case]:
    yield _with_init(_tensor("w", F, [4], raw_data=b"\0" * 8), "raw_data_too_short")
    yield _with_init(_tensor("w", F, [4], raw_data=b"\0" * 40), "raw_data_too_long")
    yield _with_init(_tensor("w", F, [4], float_data=[1.0, 2.0]), "float_data_too_short")
    yield _with_init(_tensor("w", F, [4], float_data=[1.0] * 9), "float_data_too_long")
    yield _with_init(_tensor("w", I64, [4], int64_data=[1]), "int64_data_too_short")
    yield _with_init(_tensor("w", F, [4]), "no_data")
    yield _with_init(_tensor("w", F, [-4], raw_data=b"\0" * 16), "negative_dim")
    yield _with_init(_tensor("w", F, [10**6, 10**6], raw_data=b"\0" * 4), "dims_1e12_with_4_bytes")
    yield _with_init(_tensor("w", F, [2**40, 2**40], raw_data=b"\0" * 4), "dims_overflow_int64")
    yield _with_init(_tensor("w", 999, [4], raw_data=b"\0" * 16), "data_type_999")
    yield _with_init(_tensor("w", 0, [4], raw_data=b"\0" * 16), "data_type_undefined")
    yield _with_init(_tensor("w", F, [4], raw_data=b"\0" * 16, float_data=[1.0] * 4), "raw_and_float_data")
    yield _with_init(_tensor("w", TensorProto.STRING, [4], string_data=[b"a"]), "string_data_too_short")
    yield _with_init(_tensor("w", TensorProto.FLOAT16, [4], int32_data=[1, 2]), "float16_int32_data_too_short")
    seg = _tensor("w", F, [4], raw_data=b"\0" * 16)
    seg.segment.begin, seg.segment.end = 0, 10**12
    yield _with_init(seg, "segment_1e12")
    # a Constant node carrying the same kind of malformed tensor
    bad = _tensor("v", F, [10**6, 10**6], raw_data=b"\0" * 4)
    yield case(
        "constant_node_dims_1e12",
        model(
            [helper.make_node("Constant", [], ["c"], name="cst", value=bad), node("Add", ["x", "c"], ["y"], "add")],
            inputs=X4,
        ),
        "cst",
    )
    short = _tensor("v", F, [4], raw_data=b"\0" * 2)
    yield case(
        "constant_node_raw_too_short",
        model(
            [helper.make_node("Constant", [], ["c"], name="cst", value=short), node("Add", ["x", "c"], ["y"], "add")],
            inputs=X4,
        ),
        "cst",
    )
    # sparse initializers and sparse Constant values
    for name, dims, idx, vals in (
        ("sparse_dims_1e12", [10**6, 10**6], [0], [1.0]),
        ("sparse_index_out_of_range", [4], [99], [1.0]),
        ("sparse_values_indices_mismatch", [4], [0, 1, 2], [1.0]),
        ("sparse_negative_index", [4], [-1], [1.0]),
    ):
        sp = helper.make_sparse_tensor(
            numpy_helper.from_array(np.array(vals, np.float32), "w"),
            numpy_helper.from_array(np.array(idx, np.int64), ""),
            dims,
        )
        m = model([node("Add", ["x", "w"], ["y"], "add")], inputs=X4)
        m.graph.sparse_initializer.append(sp)
        yield case(name, m)  # onnx's message names no tensor: a sparse initializer is not a node
        sp2 = helper.make_sparse_tensor(
            numpy_helper.from_array(np.array(vals, np.float32), "v"),
            numpy_helper.from_array(np.array(idx, np.int64), ""),
            dims,
        )
        yield case(
            f"constant_{name}",
            model(
                [
                    helper.make_node("Constant", [], ["c"], name="cst", sparse_value=sp2),
                    node("Add", ["x", "c"], ["y"], "add"),
                ],
                inputs=X4,
            ),
            "cst",
        )


# ---------------------------------------------------------------------------------- bad strings
def _utf8_case(name: str, m: onnx.ModelProto, marker: str) -> Case:
    """Replaces ``marker`` in the serialized model by bytes of the same length that are not UTF-8."""
    data = m.SerializeToString()
    bad = (b"\xff\xfe\xc3\x28" * len(marker))[: len(marker)]
    assert data.count(marker.encode()) >= 1
    return case(name, data.replace(marker.encode(), bad))


@crafted
def strings() -> Iterator[Case]:
    def base(op: str = "Relu", i: str = "x", n: str = "relu") -> onnx.ModelProto:
        return model([node(op, [i], ["y"], n)], inputs=[(i, F, [4])])

    yield _utf8_case("utf8_op_type", base(op="ReluQQQQ"), "ReluQQQQ")
    yield _utf8_case("utf8_node_name", base(n="QQQQnode"), "QQQQnode")
    yield _utf8_case("utf8_value_name", base(i="QQQQval"), "QQQQval")
    m = base()
    m.graph.node[0].domain = "QQQQdom"
    m.opset_import.append(helper.make_opsetid("QQQQdom", 1))
    yield _utf8_case("utf8_domain", m, "QQQQdom")
    m = model([node("Cast", ["x"], ["y"], "cast", to=F)], inputs=X4)
    m.graph.node[0].attribute[0].name = "QQQQ"
    yield _utf8_case("utf8_attribute_name", m, "QQQQ")
    m = base()
    m.graph.name = "QQQQgraph"
    yield _utf8_case("utf8_graph_name", m, "QQQQgraph")
    m = model([node("Add", ["x", "QQQQw"], ["y"], "add")], inputs=X4, inits=[init("QQQQw", [1.0] * 4, np.float32)])
    yield _utf8_case("utf8_initializer_name", m, "QQQQw")
    m = base()
    m.producer_name = "QQQQprod"
    yield _utf8_case("utf8_producer_name", m, "QQQQprod")
    m = base()
    m.doc_string = "QQQQdoc"
    yield _utf8_case("utf8_doc_string", m, "QQQQdoc")
    m = base()
    helper.set_model_props(m, {"QQQQkey": "QQQQval"})
    yield _utf8_case("utf8_metadata", m, "QQQQkey")
    m = model([node("Relu", ["x"], ["y"], "relu")], inputs=[("x", F, ["QQQQdim"])], outputs=[("y", F, ["QQQQdim"])])
    yield _utf8_case("utf8_dim_param", m, "QQQQdim")
    m = model(
        [node("Identity", ["s"], ["y"], "id")],
        inputs=[],
        outputs=[("y", TensorProto.STRING, [2])],
        inits=[numpy_helper.from_array(np.array([b"QQQQs1", b"ok"], dtype=object), "s")],
    )
    yield _utf8_case("utf8_string_tensor_data", m, "QQQQs1")


# ------------------------------------------------------------------------------- external data
@crafted
def external() -> Iterator[Case]:
    def ext(
        name: str,
        location: str,
        offset: int | str = 0,
        length: int | str | None = 16,
        files: dict[str, bytes] | None = None,
    ) -> Case:
        t = _tensor("w", F, [4])
        t.data_location = TensorProto.EXTERNAL
        entries = {"location": location, "offset": str(offset)}
        if length is not None:
            entries["length"] = str(length)
        for k, v in entries.items():
            e = t.external_data.add()
            e.key, e.value = k, v
        c = _with_init(t, name)
        return Case(c.name, c.model, files if files is not None else {"w.bin": b"\0" * 16}, "w")

    yield ext("external_ok", "w.bin")
    yield ext("external_parent_dir", "../w.bin")
    yield ext("external_absolute", "/etc/passwd")
    yield ext("external_missing_file", "missing.bin")
    yield ext("external_offset_beyond_file", "w.bin", offset=4096)
    yield ext("external_length_beyond_file", "w.bin", length=10**15)
    yield ext("external_length_contradicts_dims", "w.bin", length=8)
    yield ext("external_negative_offset", "w.bin", offset=-8)
    yield ext("external_offset_not_a_number", "w.bin", offset="abc")
    yield ext("external_location_is_a_folder", ".")
    yield ext("external_location_empty", "")
    yield ext("external_file_too_short", "w.bin", files={"w.bin": b"\0" * 4})
    yield ext("external_location_is_the_model", "model.onnx", length=None)
    yield ext("external_symlink_outside", "link.bin", files={"@link.bin": b"/etc/hostname"})


# ------------------------------------------------------------------------------------ raw files
@crafted
def files() -> Iterator[Case]:
    good = model([node("Relu", ["x"], ["y"], "relu")], inputs=X4).SerializeToString()
    yield case("empty_file", b"")
    yield case("random_bytes", random.Random(1).randbytes(4096))
    yield case("truncated_model", good[: len(good) // 2])
    yield case("length_prefix_2gib", b"\x3a\xff\xff\xff\xff\x07" + good)  # graph field claiming ~2 GiB
    yield case("deep_message_nesting", b"\x3a\x80\x01" * 2000)


def crafted_cases() -> list[Case]:
    return [c for fn in _CRAFTED for c in fn()]


# ------------------------------------------------------------------------------------ mutations
def _structure_spans(data: bytes, proto: onnx.ModelProto) -> list[tuple[int, int]]:
    """Byte ranges of ``data`` outside large tensor payloads: where a mutation changes the
    model's structure rather than one weight."""
    blobs = [t.raw_data for t in proto.graph.initializer if len(t.raw_data) > 64]
    cut: list[tuple[int, int]] = []
    for b in blobs:
        at = data.find(b)
        if at >= 0:
            cut.append((at, at + len(b)))
    cut.sort()
    spans, pos = [], 0
    for a, b in cut:
        if a > pos:
            spans.append((pos, a))
        pos = max(pos, b)
    if pos < len(data):
        spans.append((pos, len(data)))
    return spans


INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x3A, 0x12, 0x08, 0x0A)


def byte_mutation(data: bytes, spans: list[tuple[int, int]], rng: random.Random) -> bytes:
    """One to four edits at random places outside weight payloads: bit flips, interesting bytes,
    inserted, deleted or duplicated runs, truncation."""
    buf = bytearray(data)
    weights = [b - a for a, b in spans]
    for _ in range(rng.randint(1, 4)):
        if not buf:
            break
        a, b = rng.choices(spans, weights)[0]
        pos = rng.randrange(a, max(a + 1, min(b, len(buf))))
        if pos >= len(buf):
            pos = len(buf) - 1
        kind = rng.randrange(7)
        if kind == 0:
            buf[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buf[pos] = rng.choice(INTERESTING)
        elif kind == 2:
            buf[pos] = rng.randrange(256)
        elif kind == 3:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif kind == 4:
            del buf[pos : pos + rng.randint(1, 8)]
        elif kind == 5:
            n = rng.randint(1, 16)
            buf[pos:pos] = buf[pos : pos + n]
        else:
            del buf[rng.randrange(pos, len(buf)) :]
    return bytes(buf)


def _parseable_mutation(data: bytes, spans: list[tuple[int, int]], rng: random.Random) -> bytes:
    """Most random edits break the wire format and stop at the parser; four in five cases here
    are retried (up to 20 times) until the bytes still parse, so that they reach the checks."""
    keep_broken = rng.random() < 0.2
    for _ in range(20):
        mutant = byte_mutation(data, spans, rng)
        try:
            onnx.load_from_string(mutant)
            return mutant
        except Exception:  # noqa: BLE001 - any parse failure
            if keep_broken:
                return mutant
    return mutant


EXTREMES = (0, -1, 1, 2, -(2**31), 2**31 - 1, 2**62, -(2**62), 10**12, -(10**12))


def field_mutation(m: onnx.ModelProto, rng: random.Random) -> onnx.ModelProto:
    """One structured edit that keeps the bytes parseable: an attribute, a dim, a type, an opset,
    a node's inputs or outputs, a dropped or duplicated node."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    g = m2.graph
    kind = rng.randrange(10)
    nodes = list(g.node)
    if kind == 0 and nodes:
        n = rng.choice(nodes)
        ints = [a for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if ints:
            a = rng.choice(ints)
            if a.type == onnx.AttributeProto.INT:
                a.i = rng.choice(EXTREMES)
            elif a.ints:
                a.ints[rng.randrange(len(a.ints))] = rng.choice(EXTREMES)
            return m2
    if kind == 1 and g.initializer:
        t = rng.choice(list(g.initializer))
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(EXTREMES)
        else:
            t.dims.append(rng.choice(EXTREMES))
        return m2
    if kind == 2:
        vis = [v for v in list(g.input) + list(g.output) + list(g.value_info) if v.type.HasField("tensor_type")]
        if vis:
            v = rng.choice(vis)
            if rng.random() < 0.5:
                v.type.tensor_type.elem_type = rng.choice((0, 1, 6, 7, 9, 16, 25, 999))
            else:
                dims = v.type.tensor_type.shape.dim
                if dims:
                    dims[rng.randrange(len(dims))].dim_value = rng.choice((0, 1, 10**12, 2**62))
            return m2
    if kind == 3 and g.initializer:
        rng.choice(list(g.initializer)).data_type = rng.choice((0, 1, 2, 7, 8, 11, 16, 23, 999))
        return m2
    if kind == 4 and m2.opset_import:
        m2.opset_import[0].version = rng.choice((0, 1, 6, 9, 13, 22, 23, 24, 100, 10000))
        return m2
    if kind == 5 and nodes:
        n = rng.choice(nodes)
        names = [v.name for v in g.input] + [o for x in nodes for o in x.output] + ["", "ghost"]
        if n.input and rng.random() < 0.7:
            n.input[rng.randrange(len(n.input))] = rng.choice(names)
        else:
            n.input.append(rng.choice(names))
        return m2
    if kind == 6 and nodes:
        n = rng.choice(nodes)
        if n.output:
            n.output[rng.randrange(len(n.output))] = rng.choice([v.name for v in g.input] + ["", "y2"] + list(n.input))
        return m2
    if kind == 7 and nodes:
        del g.node[rng.randrange(len(nodes))]
        return m2
    if kind == 8 and nodes:
        g.node.insert(rng.randrange(len(nodes) + 1), rng.choice(nodes))
        return m2
    if nodes:
        n = rng.choice(nodes)
        if n.attribute and rng.random() < 0.5:
            del n.attribute[rng.randrange(len(n.attribute))]
        else:
            n.op_type = rng.choice(
                ("Relu", "Add", "Reshape", "Tile", "Expand", "Loop", "If", "Cast", "Conv", "Gather", "Split")
            )
    return m2


def node_test_models() -> list[tuple[str, onnx.ModelProto]]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    for c in cases:  # stamped with onnx's newest IR, which onnxruntime 1.31 does not read yet
        c.model.ir_version = min(c.model.ir_version, IR)
    return [(c.name, c.model) for c in cases]


def zoo_models() -> tuple[list[tuple[str, bytes]], list[str]]:
    """(name, bytes) of the zoo models already cached, and why the others are skipped: the suite
    never downloads."""
    from ep_core.tools import zoo

    got, skipped = [], []
    for name, m in zoo.MODELS.items():
        path = zoo.cache_dir() / m.package / m.version / m.member.replace("/", "__")
        if path.is_file():
            got.append((name, path.read_bytes()))
        else:
            skipped.append(
                f"{name}: not in the model cache {zoo.cache_dir()} (run the real-model tests once to fetch it)"
            )
    return got, skipped


def mutated_cases(
    n_node_bytes: int, n_node_fields: int, per_zoo: int, seed: int = 0, zoo_max_bytes: int | None = None
) -> tuple[list[Case], list[str]]:
    """Byte and field mutations of node-test models (sampled) and of every cached zoo model (those of at
    most ``zoo_max_bytes``, when given: each mutation is a session, and the zoo has 20 MB models)."""
    rng = random.Random(seed)
    out: list[Case] = []
    tests = node_test_models()
    for name, m in rng.sample(tests, min(n_node_bytes, len(tests))):
        data = m.SerializeToString()
        out.append(Case(f"bytes:{name}", _parseable_mutation(data, _structure_spans(data, m), rng)))
    for name, m in rng.sample(tests, min(n_node_fields, len(tests))):
        out.append(Case(f"fields:{name}", field_mutation(m, rng).SerializeToString()))
    zoo, skipped = zoo_models()
    if zoo_max_bytes is not None:
        skipped += [
            f"{n}: over {zoo_max_bytes} bytes (EP_CORE_SECURITY_FULL=1 mutates it)"
            for n, d in zoo
            if len(d) > zoo_max_bytes
        ]
        zoo = [(n, d) for n, d in zoo if len(d) <= zoo_max_bytes]
    for name, data in zoo:
        proto = onnx.load_from_string(data)
        spans = _structure_spans(data, proto)
        for i in range(per_zoo):
            if i % 2 == 0:
                out.append(Case(f"zoo-bytes:{name}:{i}", _parseable_mutation(data, spans, rng)))
            else:
                out.append(Case(f"zoo-fields:{name}:{i}", field_mutation(proto, rng).SerializeToString()))
    return out, skipped
