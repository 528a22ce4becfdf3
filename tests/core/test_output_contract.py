"""The EP contract on what kernels and compiled functions return (ep_core/runtime/contract.py):
a tuple with one value per node output, each of the declared dtype, rank and static dims. Planted
EPs, registered through the plugin registry, break it one way at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_core
from ep_core.sdk.compute import NodeComputeInfo
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.errors import EpFail, InvalidGraph, StatusCode
from ep_core.sdk.kernels import FLOATS, KernelRegistry

KERNEL_EP = "ContractKernelTestExecutionProvider"
FUSING_EP = "ContractFusingTestExecutionProvider"
F32 = np.float32


@dataclass
class DeviceValue:
    """A value on some device: only ``dtype`` and ``shape`` are readable, as with numba's arrays."""

    dtype: np.dtype
    shape: tuple[int, ...]


def _ok(x: Any) -> tuple[Any, ...]:
    return (np.maximum(x, 0),)


# what each planted compute returns for x, and what the error must say it got and expected
MISTAKES: dict[str, tuple[Callable[[Any], Any], str, str]] = {
    "wrong dtype": (lambda x: (x.astype(np.float64),), "got float64 with shape [2]", "expected float32 with shape [2]"),
    "the issue's example": (
        lambda x: (np.zeros((100, 100), np.int32),),
        "got int32 with shape [100, 100]",
        "expected float32 with shape [2]",
    ),
    "wrong rank": (lambda x: (x.reshape(2, 1),), "got float32 with shape [2, 1]", "expected float32 with shape [2]"),
    "wrong static dim": (
        lambda x: (np.zeros(3, F32),),
        "got float32 with shape [3]",
        "expected float32 with shape [2]",
    ),
    "wrong device value": (
        lambda x: (DeviceValue(np.dtype(F32), (4,)),),
        "got float32 with shape [4] (DeviceValue)",
        "expected float32 with shape [2]",
    ),
    "not a tensor": (lambda x: ([1.0, 2.0],), "got list with no dtype and shape", "expected float32 with shape [2]"),
    "bare array": (lambda x: np.maximum(x, 0), "returned a bare ndarray", "expected a tuple of 1 value (outputs 'y')"),
    "list": (lambda x: [np.maximum(x, 0)], "returned a list", "expected a tuple of 1 value (outputs 'y')"),
    "extra outputs": (lambda x: (x, x), "returned 2 values", "expected a tuple of 1 value (outputs 'y')"),
    "too few outputs": (lambda x: (), "returned 0 values", "expected a tuple of 1 value (outputs 'y')"),
}


class KernelFactory(HostEpFactory):
    """An EP with one kernel (Relu unless ``op`` says otherwise) whose compute is ``compute``."""

    ep_name = KERNEL_EP
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, compute: Callable[..., Any], op: str = "Relu") -> None:
        self.registry = KernelRegistry(KERNEL_EP)
        types = {"T": FLOATS} if op == "Relu" else None
        self.registry.register(op, since=14 if op == "Relu" else 11, types=types)(lambda node, ctx: compute)

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> RegistryEp:
        return RegistryEp(KERNEL_EP, self.registry)


class FusingEp:
    """Fuses every Relu into a compiled function that is ``compute``."""

    def __init__(self, compute: Callable[[Any], Any]) -> None:
        self.compute = compute

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        nodes = [n for n in graph.nodes if n.op_type == "Relu"]
        if nodes:
            support.add_nodes_to_fuse(nodes)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
        return [NodeComputeInfo(compute=lambda state, x: self.compute(x)) for _ in fused_nodes]


class FusingFactory(HostEpFactory):
    ep_name = FUSING_EP
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, compute: Callable[[Any], Any]) -> None:
        self.compute = compute

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> FusingEp:
        return FusingEp(self.compute)


@pytest.fixture
def planted():
    """Registers a planted EP (``planted(kind, compute)``) and always unregisters it."""
    names: list[str] = []

    def register(kind: str, compute: Callable[..., Any], op: str = "Relu") -> str:
        factory: Any = KernelFactory(compute, op) if kind == "kernel" else FusingFactory(compute)
        name = factory.ep_name
        ep_core.register_execution_provider_library(name, factory)
        names.append(name)
        return name

    yield register
    for name in names:
        ep_core.unregister_execution_provider_library(name)


def _relu_model(shape: list[Any], constant_input: bool = False) -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    inits = [numpy_helper.from_array(np.array([-1.0, 2.0], F32), "x")] if constant_input else []
    inputs = [] if constant_input else [("x", TensorProto.FLOAT, shape)]
    return make_model([node], inputs, [("y", TensorProto.FLOAT, shape)], initializers=inits).SerializeToString()


def _assert_names_everything(exc: EpFail, ep: str, node: str, got: str, expected: str, output: str = "'y'") -> None:
    msg = str(exc)
    assert exc.code is StatusCode.EP_FAIL
    for part in (ep, node, output, got, expected):
        assert part in msg, f"{part!r} not in {msg!r}"


@pytest.mark.parametrize("kind", ["kernel", "fused"])
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_mistake_is_an_ep_fail_naming_ep_node_output_expected_and_got(planted, kind, mistake):
    compute, got, expected = MISTAKES[mistake]
    ep = planted(kind, compute)
    sess = ep_core.InferenceSession(_relu_model([2]), providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.array([-1.0, 2.0], F32)})
    node = "node 'relu0' (op Relu)" if kind == "kernel" else f"fused '{ep}_"
    _assert_names_everything(info.value, ep, node, got, expected)


def test_the_profiled_run_checks_too(planted, tmp_path):
    ep = planted("kernel", MISTAKES["wrong dtype"][0])
    opts = ep_core.SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = ep_core.InferenceSession(_relu_model([2]), opts, providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.array([-1.0, 2.0], F32)})
    _assert_names_everything(info.value, ep, "node 'relu0'", "got float64", "expected float32")


def test_a_node_folded_at_session_creation_is_checked_there(planted):
    ep = planted("kernel", MISTAKES["list"][0])
    with pytest.raises(EpFail) as info:
        ep_core.InferenceSession(_relu_model([2], constant_input=True), providers=[ep])
    _assert_names_everything(info.value, ep, "node 'relu0'", "returned a list", "folded at session creation")


@pytest.mark.parametrize("kind", ["kernel", "fused"])
def test_a_correct_compute_with_unknown_dims_passes_for_any_size(planted, kind):
    ep = planted(kind, _ok)
    sess = ep_core.InferenceSession(_relu_model(["N", None]), providers=[ep])
    for rows in (1, 3, 1):  # a new size after one that passed is checked, not refused
        x = np.linspace(-1, 1, rows * 5, dtype=F32).reshape(rows, 5)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_unknown_dims_still_check_rank_and_dtype(planted):
    ep = planted("kernel", lambda x: (x.reshape(-1).astype(np.float64),))
    sess = ep_core.InferenceSession(_relu_model(["N", 5]), providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.zeros((2, 5), F32)})
    _assert_names_everything(
        info.value, ep, "node 'relu0'", "got float64 with shape [10]", "expected float32 with shape [?, 5]"
    )


def test_a_tuple_subclass_is_a_tuple(planted):
    from collections import namedtuple

    Out = namedtuple("Out", ["y"])
    ep = planted("kernel", lambda x: Out(np.maximum(x, 0)))
    sess = ep_core.InferenceSession(_relu_model([2]), providers=[ep])
    (y,) = sess.run(None, {"x": np.array([-1.0, 2.0], F32)})
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_a_sequence_output_must_be_a_list(planted):
    ep = planted("kernel", lambda *xs: (xs,), op="SequenceConstruct")
    node = helper.make_node("SequenceConstruct", ["a", "b"], ["s"], name="seq0")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("a", "b")],
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    sess = ep_core.InferenceSession(model, providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"a": np.zeros(2, F32), "b": np.ones(2, F32)})
    _assert_names_everything(info.value, ep, "node 'seq0'", "got tuple", "expected a sequence (list)", "'s'")


# ------------------------------------------------------------------- declared graph-output shapes
# A graph output's declared shape is the model author's word: the EP is held to the shape inference
# derives (and to the dtype), never to the declaration alone; a run contradicting it is logged with
# onnxruntime's warning (its VerifyOutputSizes), as onnxruntime goes on too.
WARNING_START = "Expected shape from model of "


def _declared_relu(declared: list[Any] | None, x_shape: list[Any]) -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    model = make_model([node], [("x", TensorProto.FLOAT, x_shape)], [("y", TensorProto.FLOAT, declared)])
    model.ir_version = 10  # what onnxruntime 1.31 reads
    return model.SerializeToString()


def _shape_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("ep_core") and WARNING_START in r.getMessage()]


@pytest.mark.parametrize("kind", ["kernel", "fused"])
def test_a_wrong_declared_output_shape_runs_and_warns_once_per_shape_as_onnxruntime(planted, kind, caplog, capfd):
    ort = pytest.importorskip("onnxruntime")
    model = _declared_relu([1, "N"], ["B", 3])  # rows are B; the author wrote 1
    so = ort.SessionOptions()
    so.log_severity_level = 2
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    ours = ep_core.InferenceSession(model, providers=[planted(kind, _ok)])
    assert ours.get_outputs()[0].shape == theirs.get_outputs()[0].shape == [1, 3]  # declared, inference filling N
    caplog.set_level(logging.WARNING, logger="ep_core")
    capfd.readouterr()
    for rows in (2, 2, 4, 1, 2):
        x = np.linspace(-1, 1, rows * 3, dtype=F32).reshape(rows, 3)
        (y,) = ours.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        theirs.run(None, {"x": x})
    told = [
        line.split("VerifyOutputSizes] ", 1)[1].split("\x1b")[0]
        for line in capfd.readouterr().err.splitlines()
        if "VerifyOutputSizes] " in line
    ]
    expected = [f"{WARNING_START}{{1,3}} does not match actual shape of {{{r},3}} for output y" for r in (2, 4)]
    assert _shape_warnings(caplog) == expected  # once per shape; onnxruntime says it on every run
    assert sorted(set(told)) == expected and len(told) == 4


def test_a_declared_rank_no_run_has_is_logged_not_refused(caplog):
    """The zoo's ddddocr_int8: a Reshape to a shape computed at run time, declared [1, seqlen]."""
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape0")
    inputs = [("x", TensorProto.FLOAT, None), ("s", TensorProto.INT64, [3])]
    model = make_model([node], inputs, [("y", TensorProto.FLOAT, [1, "seqlen"])]).SerializeToString()
    sess = ep_core.InferenceSession(model, providers=["CpuReferenceExecutionProvider"])
    assert sess.get_outputs()[0].shape == [1, "seqlen"]
    caplog.set_level(logging.WARNING, logger="ep_core")
    (y,) = sess.run(None, {"x": np.arange(24, dtype=F32), "s": np.array([4, 1, 6])})
    assert y.shape == (4, 1, 6)
    assert _shape_warnings(caplog) == [f"{WARNING_START}{{1,-1}} does not match actual shape of {{4,1,6}} for output y"]


@pytest.mark.parametrize("kind", ["kernel", "fused"])
def test_a_wrong_declared_output_shape_does_not_excuse_a_wrong_dtype(planted, kind):
    ep = planted(kind, MISTAKES["wrong dtype"][0])
    sess = ep_core.InferenceSession(_declared_relu([1, "N"], ["B", 3]), providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.zeros((2, 3), F32)})
    # held to what inference derives ([B, 3]), not to the declared [1, N]
    node = "node 'relu0' (op Relu)" if kind == "kernel" else f"fused '{ep}_"
    _assert_names_everything(
        info.value, ep, node, "got float64 with shape [2, 3]", "expected float32 with shape [?, 3]"
    )


def test_a_wrong_declared_output_dtype_is_still_refused_at_load():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    model = make_model([node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.INT64, [7])])
    with pytest.raises(InvalidGraph) as info:
        ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
    assert "node name: relu0" in str(info.value)


@pytest.mark.parametrize("kind", ["kernel", "fused"])
def test_an_output_shape_inference_derives_still_binds_the_ep(planted, kind):
    """Declared [1, N], but inference derives [2] from the input: the EP must return [2]."""
    ep = planted(kind, MISTAKES["wrong static dim"][0])
    sess = ep_core.InferenceSession(_declared_relu([1, "N"], [2]), providers=[ep])
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.array([-1.0, 2.0], F32)})
    node = "node 'relu0' (op Relu)" if kind == "kernel" else f"fused '{ep}_"
    _assert_names_everything(info.value, ep, node, "got float32 with shape [3]", "expected float32 with shape [2]")


def test_an_intermediate_value_still_binds_the_ep_whatever_the_output_declares(planted):
    ep = planted("kernel", lambda x: (np.zeros(3, F32),))
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu0"), helper.make_node("Relu", ["h"], ["y"], name="relu1")]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [1, "N"])])
    unoptimized = ep_core.SessionOptions(graph_optimization_level=ep_core.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ep_core.InferenceSession(model.SerializeToString(), unoptimized, providers=[ep])  # Relu(Relu) stays
    with pytest.raises(EpFail) as info:
        sess.run(None, {"x": np.array([-1.0, 2.0], F32)})
    _assert_names_everything(
        info.value, ep, "node 'relu0'", "got float32 with shape [3]", "expected float32 with shape [2]", "'h'"
    )


def test_saved_models_keep_the_declared_outputs_as_onnxruntime_writes_them(tmp_path):
    import onnx

    ort = pytest.importorskip("onnxruntime")
    model = _declared_relu([1, "N"], ["B", 3])
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    opts = ep_core.SessionOptions(optimized_model_filepath=str(tmp_path / "ep_core.onnx"))
    ep_core.InferenceSession(model, opts, providers=["CpuReferenceExecutionProvider"])
    theirs, ours = (onnx.load(str(tmp_path / f)).graph.output for f in ("ort.onnx", "ep_core.onnx"))
    assert ours == theirs == onnx.load_from_string(model).graph.output
