"""Per-kernel test cases generated from the EP's registry: one small single-node model for every
registered (op, opset range, type) combination. Elementwise ops get their cases from the
expression tables; every other op has a builder here. A kernel registered without a builder
makes the suite fail, so a new kernel is tested as soon as it exists."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ep_core.sdk.kernels import KernelDef
from ep_core.sdk.layout import NHWC_DOMAIN

F32 = np.dtype(np.float32)
EP = "NumbaCudaExecutionProvider"
F16_TOL = 2e-3  # two float16 ulps near 1: the EP computes in float32 and rounds once, NumPy per op
BF16_TOL = 1.6e-2  # two bfloat16 ulps near 1


@dataclass
class Case:
    id: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    tol: float = 1e-5
    marks: list[Any] = field(default_factory=list)
    # where onnx.reference (behind the reference EP) departs from the ONNX spec, a NumPy oracle
    # written from the spec is the judge instead; ``oracle_reason`` says why
    oracle: Callable[[dict[str, np.ndarray]], list[np.ndarray]] | None = None
    oracle_reason: str = ""
    # provider list for this EP's session (None: the EP with default options); internal-domain
    # (NHWC) kernels are reached through prefer_nhwc=1 and the core's layout transformer
    providers: list[Any] | None = None
    nhwc_node: str = ""  # the node that must run in com.ms.internal.nhwc on this EP


def _tp(dt: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def _np(type_str: str) -> np.dtype:
    name = type_str[len("tensor(") : -1]
    return np.dtype({"float": "float32", "double": "float64", "bool": "bool"}.get(name, name))


def rand(shape: tuple[int, ...], dt: np.dtype, rng: np.random.Generator, positive: bool = False) -> np.ndarray:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo = 1 if positive else (-4 if dt.kind == "i" else 0)
        return rng.integers(lo, 5, size=shape).astype(dt)
    if positive:
        return rng.uniform(0.5, 2.0, size=shape).astype(dt)
    return rng.uniform(-2.0, 2.0, size=shape).astype(dt)


def _ftol(t: np.dtype, tol: float) -> float:
    """float16 cases (computed in float32, rounded at the store) compare within float16's reach."""
    return max(tol, 1e-2) if np.dtype(t) == np.float16 else tol


class Builder:
    """Collects one single-node model: inputs fed at run time, initializers, typed outputs."""

    def __init__(self, op: str, opset: int, rng: np.random.Generator) -> None:
        self.op, self.opset, self.rng = op, opset, rng
        self.inputs: list[Any] = []
        self.inits: list[Any] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.names: list[str] = []

    def feed(self, value: np.ndarray) -> str:
        name = f"in{len(self.names)}"
        self.names.append(name)
        self.inputs.append(helper.make_tensor_value_info(name, _tp(value.dtype), list(value.shape)))
        self.feeds[name] = value
        return name

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        name = f"c{len(self.names)}"
        self.names.append(name)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def model(self, inputs: list[str], out_types: list[np.dtype], **attrs: Any) -> onnx.ModelProto:
        outs = [f"out{i}" for i in range(len(out_types))]
        node = helper.make_node(self.op, inputs, outs, name=f"{self.op}_node", **attrs)
        graph = helper.make_graph(
            [node],
            "case",
            self.inputs,
            [helper.make_tensor_value_info(o, _tp(t), None) for o, t in zip(outs, out_types, strict=False)],
            initializer=self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


POSITIVE_OPS = {"Log", "Sqrt", "Pow", "Reciprocal", "ReduceLogSum"}
SHAPES = [(2, 3, 4), (3, 1), (4,)]


def _elementwise(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    from ep_cuda_numba.codegen import ALL_OPS, COMPARE, LOGIC

    op = b.op
    spec = ALL_OPS[op]
    t = tm.get("T", F32)
    pos = op in POSITIVE_OPS
    if op == "Where":
        ins = [
            b.feed(rand(SHAPES[0], np.bool_, b.rng)),
            b.feed(rand(SHAPES[1], t, b.rng)),
            b.feed(rand(SHAPES[2], t, b.rng)),
        ]
        return b.model(ins, [t]), 1e-6
    if op == "Cast":
        src, dst = tm["T1"], tm["T2"]
        x = rand(SHAPES[0], src, b.rng) * (1 if src == np.bool_ else 1)
        return b.model([b.feed(x)], [dst], to=_tp(dst)), 1e-6
    if op == "Clip":
        x = b.feed(rand(SHAPES[0], t, b.rng))
        if b.opset >= 11:
            return b.model([x, b.const(-1, t), b.const(1, t)], [t]), 1e-6
        return b.model([x], [t], min=-1.0, max=1.0), 1e-6
    if op == "Pow":
        ins = [b.feed(rand(SHAPES[0], t, b.rng, True)), b.feed(rand(SHAPES[1], tm.get("T1", t), b.rng))]
        return b.model(ins, [t]), 1e-5
    n = 3 if spec.arity == -1 else spec.arity
    ins = []
    for i in range(n):
        in_t = t
        if op in LOGIC:
            in_t = np.dtype(np.bool_)
        positive = pos or (op == "Div" and i == 1)
        ins.append(b.feed(rand(SHAPES[i], in_t, b.rng, positive)))
    out_t = np.dtype(np.bool_) if (op in COMPARE or op in LOGIC) else t
    attrs = {"approximate": "tanh"} if op == "Gelu" and b.rng.random() < 0.5 else {}
    return b.model(ins, [out_t], **attrs), 1e-5


def _reduce(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    x = b.feed(rand((2, 3, 4), t, b.rng, positive=b.op in ("ReduceLogSum", "ReduceProd")))
    axes_as_input = b.opset >= (13 if b.op == "ReduceSum" else 18)
    if axes_as_input:
        return b.model([x, b.const([0, 2])], [t], keepdims=1), 1e-5
    return b.model([x], [t], axes=[0, 2], keepdims=0), 1e-5


def _simple(
    shape: tuple[int, ...], out_same: bool = True, **attrs: Any
) -> Callable[[Builder, dict[str, np.dtype]], tuple[onnx.ModelProto, float]]:
    def build(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
        t = tm.get("T", F32)
        return b.model([b.feed(rand(shape, t, b.rng))], [t], **attrs), 1e-5

    return build


def _layernorm(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    ins = [b.feed(rand((2, 3, 4), t, b.rng)), b.feed(rand((4,), t, b.rng)), b.feed(rand((4,), t, b.rng))]
    return b.model(ins, [t], axis=-1, epsilon=1e-5), 1e-4


def _matmul(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    return b.model([b.feed(rand((2, 3, 5), t, b.rng)), b.feed(rand((5, 6), t, b.rng))], [t]), 1e-5


def _gemm(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    ins = [b.feed(rand((3, 4), t, b.rng)), b.feed(rand((5, 4), t, b.rng)), b.feed(rand((5,), t, b.rng))]
    return b.model(ins, [t], transB=1, alpha=0.5, beta=2.0), 1e-5


def _conv(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    ins = [b.feed(rand((1, 4, 6, 6), t, b.rng)), b.feed(rand((6, 2, 3, 3), t, b.rng)), b.feed(rand((6,), t, b.rng))]
    return b.model(ins, [t], group=2, pads=[1, 1, 1, 1], strides=[2, 1]), _ftol(t, 1e-4)


def _conv_transpose(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    ins = [b.feed(rand((1, 2, 3, 3), t, b.rng)), b.feed(rand((2, 3, 2, 2), t, b.rng)), b.feed(rand((3,), t, b.rng))]
    return b.model(ins, [t], strides=[2, 2], pads=[0, 1, 0, 0]), _ftol(t, 1e-4)


def _pool(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    attrs: dict[str, Any] = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    if b.opset >= 10:
        attrs["ceil_mode"] = 1
    return b.model([b.feed(rand((1, 2, 6, 6), t, b.rng))], [t], **attrs), _ftol(t, 1e-5)


def _batchnorm(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    ins = [b.feed(rand((2, 3, 2, 2), t, b.rng))] + [
        b.const(rand((3,), tm.get("T1", t), b.rng), tm.get("T1", t)) for _ in range(2)
    ]
    ins += [
        b.const(rand((3,), tm.get("T2", t), b.rng), tm.get("T2", t)),
        b.const(rand((3,), tm.get("T2", t), b.rng, True), tm.get("T2", t)),
    ]
    return b.model(ins, [t], epsilon=1e-3), _ftol(t, 1e-5)


def _resize(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T1"]
    x = b.feed(rand((1, 2, 3, 4), t, b.rng))
    roi = b.const(np.zeros(0, np.float32), np.float32)
    if t == np.float32:  # float32 cases resize nearest, float64 cases linear: both are always covered
        m = b.model(
            [x, roi, b.const([1, 1, 2, 2], np.float32)],
            [t],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    else:
        m = b.model(
            [x, roi, b.const(np.zeros(0, np.float32), np.float32), b.const([1, 2, 5, 7])],
            [t],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        )
    return m, _ftol(t, 1e-5)


def _depth_space(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    t = tm["T"]
    if b.op == "SpaceToDepth":
        return b.model([b.feed(rand((1, 2, 4, 6), t, b.rng))], [t], blocksize=2), 0
    attrs = {"mode": "CRD"} if b.opset >= 11 and t != np.float32 else {}  # float32 cases keep DCR
    return b.model([b.feed(rand((1, 8, 2, 3), t, b.rng))], [t], blocksize=2, **attrs), 0


def _data(op: str) -> Callable[[Builder, dict[str, np.dtype]], tuple[onnx.ModelProto, float]]:
    def build(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
        t = tm.get("T", tm.get("T2", F32))
        ind = tm.get("Tind", np.dtype(np.int64))
        r = lambda shape: b.feed(rand(shape, t, b.rng))  # noqa: E731
        if op == "Transpose":
            return b.model([r((2, 3, 4))], [t], perm=[2, 0, 1]), 0
        if op == "Concat":
            return b.model([r((2, 1, 3)), r((2, 2, 3)), r((2, 3, 3))], [t], axis=1), 0
        if op == "Slice":
            return b.model(
                [
                    r((4, 5, 6)),
                    b.const([1, -1], ind),
                    b.const([3, -7], ind),
                    b.const([0, 2], ind),
                    b.const([1, -2], ind),
                ],
                [t],
            ), 0
        if op == "Gather":
            return b.model([r((5, 4)), b.const([[0, -1, 2], [1, 1, 3]], ind)], [t], axis=1), 0
        if op == "Pad":
            mode = "reflect" if b.rng.random() < 0.5 else "constant"
            ins = [r((3, 4)), b.const([1, 2, 2, 1])]
            if mode == "constant" and t != np.bool_:
                ins.append(b.const(np.array(3, t), t))
            return b.model(ins, [t], mode=mode), 0
        if op == "Expand":
            return b.model([r((3, 1)), b.const([2, 3, 4])], [t]), 0
        if op == "Reshape":
            return b.model([r((2, 3, 4)), b.const([4, -1])], [t]), 0
        if op == "Flatten":
            return b.model([r((2, 3, 4))], [t], axis=2), 0
        if op in ("Squeeze", "Unsqueeze"):
            shape, axes = ((2, 1, 4), [1]) if op == "Squeeze" else ((2, 4), [0, 3])
            if b.opset >= 13:
                return b.model([r(shape), b.const(axes)], [t]), 0
            return b.model([r(shape)], [t], axes=axes), 0
        if op in ("Shape", "Size"):
            return b.model([r((2, 3, 4))], [np.dtype(np.int64)]), 0
        if op == "Constant":
            value = rand((2, 3), t, b.rng)
            return b.model([], [t], value=numpy_helper.from_array(value)), 0
        if op == "ConstantOfShape":
            return b.model([b.const([2, 3])], [t], value=numpy_helper.from_array(np.array([1], t))), 0
        raise KeyError(op)

    return build


def _ep_context(b: Builder, tm: dict[str, np.dtype]) -> tuple[onnx.ModelProto, float]:
    """An EPContext node of this EP whose spec is Relu(a + b)."""
    import json

    from ep_core.sdk.epcontext import signing
    from ep_core.sdk.epcontext.schema import register_ep_context_schema
    from ep_cuda_numba import EP_NAME, context_binary
    from ep_cuda_numba.epcontext import _binding
    from ep_cuda_numba.spec_check import SPEC_FORMAT

    register_ep_context_schema()
    x, y = b.feed(rand((2, 3, 4), F32, b.rng)), b.feed(rand((4,), F32, b.rng))

    def node(name: str, op: str, args: list) -> dict:
        return {
            "name": name,
            "op": op,
            "attrs": {},
            "args": args,
            "params": [],
            "param_base": 0,
            "dtype": "float32",
            "out_dtype": "float32",
        }

    spec = {
        "format": SPEC_FORMAT,
        "inputs": [x, y],
        "input_dtypes": ["float32", "float32"],
        "outputs": ["out0"],
        "output_nodes": [1],
        "nodes": [node("add", "Add", [["x", 0], ["x", 1]]), node("relu", "Relu", [["t", 0]])],
    }
    record = {"spec": spec, "constants": [], "ptx": None}
    binding = {"source": EP_NAME, "partition_name": "", "main_context": 1, "embed_mode": 1, "context_file": ""}
    parts = context_binary.signed_parts(_binding("ctx", binding, [x, y], ["out0"]), context_binary.graph_digest(record))
    ctx = helper.make_node(
        "EPContext",
        [x, y],
        ["out0"],
        name="ctx",
        domain="com.microsoft",
        source="NumbaCudaExecutionProvider",
        embed_mode=1,
        ep_cache_context=context_binary.pack({"ctx": record}, {}, {}),
        notes=json.dumps({"signature": signing.sign(parts)}),  # as this user wrote it
    )
    graph = helper.make_graph([ctx], "case", b.inputs, [helper.make_tensor_value_info("out0", _tp(F32), [2, 3, 4])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    return model, 1e-6


BUILDERS: dict[str, Callable[[Builder, dict[str, np.dtype]], tuple[onnx.ModelProto, float]]] = {
    **{
        op: _reduce
        for op in (
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSumExp",
            "ReduceLogSum",
        )
    },
    "Softmax": _simple((2, 3, 4), axis=1),
    "LogSoftmax": _simple((2, 3, 4), axis=1),
    "GlobalAveragePool": _simple((1, 3, 4, 5)),
    "GlobalMaxPool": _simple((1, 3, 4, 5)),
    "LayerNormalization": _layernorm,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "BatchNormalization": _batchnorm,
    "Resize": _resize,
    "DepthToSpace": _depth_space,
    "SpaceToDepth": _depth_space,
    "EPContext": _ep_context,
    **{
        op: _data(op)
        for op in (
            "Transpose",
            "Concat",
            "Slice",
            "Gather",
            "Pad",
            "Expand",
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Shape",
            "Size",
            "Constant",
            "ConstantOfShape",
        )
    },
}


def _declare_output_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """Give graph outputs their shapes (the checker wants them for older IR versions)."""
    from onnx.reference import ReferenceEvaluator

    if all(len(vi.type.tensor_type.shape.dim) for vi in model.graph.output):
        return
    results = ReferenceEvaluator(model).run(None, feeds)
    for vi, value in zip(model.graph.output, results, strict=False):
        dims = vi.type.tensor_type.shape
        del dims.dim[:]
        for d in np.shape(value):
            dims.dim.add().dim_value = int(d)


def _softmax_coerced(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """Softmax before opset 13: the input is coerced to 2-D [prod(:axis), prod(axis:)]."""
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(x2 - x2.max(axis=1, keepdims=True))
    s = e.sum(axis=1, keepdims=True)
    y = np.log(e / s) if log else e / s
    return y.reshape(x.shape).astype(x.dtype)


def _bn_inference(feeds: dict[str, np.ndarray], model: onnx.ModelProto) -> list[np.ndarray]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = model.graph.node[0]
    x = feeds[node.input[0]]
    scale, bias, mean, var = (inits[n] for n in node.input[1:5])
    eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shp)) / np.sqrt(var.reshape(shp) + eps) * scale.reshape(shp) + bias.reshape(shp)
    return [y.astype(x.dtype)]


def _attach_oracle(case: Case, op: str, opset: int) -> None:
    if op in ("Softmax", "LogSoftmax") and opset < 13:
        name = case.model.graph.input[0].name
        case.oracle = lambda feeds: [_softmax_coerced(feeds[name], 1, op == "LogSoftmax")]
        case.oracle_reason = "onnx.reference applies opset-13 per-axis Softmax to older opsets (no 2-D coercion)"
    elif op == "EPContext":
        names = [i.name for i in case.model.graph.input]
        case.oracle = lambda feeds: [np.maximum(feeds[names[0]] + feeds[names[1]], 0)]
        case.oracle_reason = "only this EP can run its own EPContext nodes"
    elif op == "Clip" and str(case.feeds["in0"].dtype) == "bfloat16":
        inits = {t.name: numpy_helper.to_array(t) for t in case.model.graph.initializer}
        bounds = [inits[n] for n in case.model.graph.node[0].input[1:3]]
        case.oracle = lambda feeds: [np.clip(feeds["in0"], *bounds).astype(feeds["in0"].dtype)]
        case.oracle_reason = "the reference EP's Clip returns float32 for bfloat16 inputs"
    elif op == "BatchNormalization" and opset < 14:
        model = case.model
        case.oracle = lambda feeds: _bn_inference(feeds, model)
        case.oracle_reason = (
            "onnx.reference BatchNormalization-9 uses batch statistics (momentum default) for inference"
        )


def type_combos(kdef: KernelDef) -> Iterator[dict[str, np.dtype]]:
    """Every registered type of every constraint at least once (others at their first type)."""
    base = {c: _np(ts[0]) for c, ts in kdef.type_constraints.items()}
    yield dict(base)
    for c, ts in kdef.type_constraints.items():
        for t in ts[1:]:
            yield {**base, c: _np(t)}


def case_opset(kdef: KernelDef) -> int:
    """An opset inside the def's range (>= 7, where broadcasting and modern schemas start)."""
    if kdef.since_version >= 7:
        return kdef.since_version
    return min(7, kdef.end_version) if kdef.end_version is not None else 7


def build_cases(defs: list[KernelDef]) -> list[Case | str]:
    """Cases for every def; a string names a def that has no builder (a test failure)."""
    from ep_cuda_numba.codegen import ALL_OPS

    out: list[Case | str] = []
    for kdef in defs:
        op = kdef.op_type
        builder = BUILDERS.get(op) or (_elementwise if op in ALL_OPS else None)
        if builder is None:
            out.append(f"{op} since {kdef.since_version}")
            continue
        opset = case_opset(kdef)
        nhwc = kdef.domain == NHWC_DOMAIN  # the same NCHW model, rewritten by the layout transformer
        for tm in type_combos(kdef):
            seed = zlib.crc32(
                repr((op, opset, sorted((k, str(v)) for k, v in tm.items()))).encode()
            )  # stable across runs
            rng = np.random.default_rng(seed)
            b = Builder(op, opset, rng)
            model, tol = builder(b, tm)
            _declare_output_shapes(model, b.feeds)
            if tol and np.dtype(np.float16) in tm.values():
                tol = max(tol, F16_TOL)  # arithmetic on float16: ulps, not 1e-5 (data movement stays exact)
            if tol and any(str(v) == "bfloat16" for v in tm.values()):
                tol = max(tol, BF16_TOL)
            tid = f"{op}-{opset}-" + "-".join(f"{k}={v}" for k, v in sorted(tm.items(), key=lambda kv: kv[0]))
            case = Case(("nhwc:" if nhwc else "") + tid, model, b.feeds, tol or 0.0)
            if nhwc:
                case.providers = [(EP, {"prefer_nhwc": "1"})]
                case.nhwc_node = model.graph.node[0].name
            _attach_oracle(case, op, opset)
            out.append(case)
    return out
