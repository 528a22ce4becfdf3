"""The EP contract on what kernels and compiled functions return (ep_core/runtime/contract.py):
a tuple with one value per node output, each of the declared dtype, rank and static dims. Planted
EPs, registered through the plugin registry, break it one way at a time."""

from __future__ import annotations

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
from ep_core.sdk.errors import EpFail, StatusCode
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
