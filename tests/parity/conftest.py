"""Test EPs for the parity report, defined here and registered by hand for one test at a time.

Each is a host-memory EP built from ep_core's public pieces (``HostEpFactory``, ``RegistryEp``,
``KernelRegistry``), exactly as a third-party EP would be."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import ep_core
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import FLOATS, NUMERIC, KernelDef, KernelRegistry

Builder = Callable[..., Any]


def _binary(fn: Callable[[Any, Any], Any]) -> Builder:
    def build(node: Any, ctx: Any) -> Callable[..., Any]:
        return lambda a, b: (fn(a, b),)

    return build


def exact_add(a: Any, b: Any) -> Any:
    return np.add(a, b)


def wrong_add(a: Any, b: Any) -> Any:
    """The planted defect: Add is off by 1e-2."""
    out = np.add(a, b)
    return (out + out.dtype.type(1e-2)) if out.dtype.kind == "f" else out + out.dtype.type(1)


def crashing_add(a: Any, b: Any) -> Any:
    raise RuntimeError("planted crash in Add")


class _FusingEp(RegistryEp):
    """A compile-based EP: every Relu becomes a one-node fused group run by NumPy."""

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        for node in graph.nodes:
            if node.op_type == "Relu":
                support.add_nodes_to_fuse([node])

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[Any]:
        from ep_core.sdk.compute import NodeComputeInfo

        return [NodeComputeInfo(compute=lambda state, x: (np.maximum(x, x.dtype.type(0)),)) for _ in fused_nodes]


class TestFactory(HostEpFactory):
    """A factory whose EP serves ``registry`` (an empty one claims nothing)."""

    __test__ = False

    def __init__(
        self, name: str, registry: KernelRegistry, fusable: Any = None, fail_create: bool = False, fuses: bool = False
    ) -> None:
        self._fuses = fuses
        self.ep_name = name
        self.ep_vendor = "tests"
        self.ep_version = "0.0.1"
        self._registry = registry
        self._fusable = fusable
        self._fail = fail_create

    def ep_factory_api_version(self) -> int:
        return 2

    def ep_factory_get_fusable_ops(self) -> Any:
        return self._fusable

    def ep_factory_create_ep(self, devices: Sequence[Any], ep_options: Mapping[str, str], session_options: Any) -> Any:
        if self._fail:
            raise RuntimeError("planted failure in create_ep")
        return (_FusingEp if self._fuses else RegistryEp)(self.ep_name, self._registry)


def add_registry(name: str, fn: Callable[[Any, Any], Any], types: Sequence[str] = NUMERIC) -> KernelRegistry:
    reg = KernelRegistry(name)
    reg.register("Add", since=7, types={"T": types})(_binary(fn))
    return reg


@contextlib.contextmanager
def registered(factory: TestFactory) -> Iterator[str]:
    """Register a test EP for the duration of a block, and always unregister it."""
    ep_core.register_execution_provider_library(factory.ep_name, factory)
    try:
        yield factory.ep_name
    finally:
        ep_core.unregister_execution_provider_library(factory.ep_name)


@pytest.fixture
def wrong_add_ep() -> Iterator[str]:
    with registered(
        TestFactory("ParityWrongAddExecutionProvider", add_registry("ParityWrongAddExecutionProvider", wrong_add))
    ) as n:
        yield n


@pytest.fixture
def exact_add_ep() -> Iterator[str]:
    with registered(
        TestFactory("ParityExactAddExecutionProvider", add_registry("ParityExactAddExecutionProvider", exact_add))
    ) as n:
        yield n


@pytest.fixture
def crashing_add_ep() -> Iterator[str]:
    with registered(
        TestFactory("ParityCrashAddExecutionProvider", add_registry("ParityCrashAddExecutionProvider", crashing_add))
    ) as n:
        yield n


@pytest.fixture
def claims_nothing_ep() -> Iterator[str]:
    with registered(
        TestFactory("ParityNothingExecutionProvider", KernelRegistry("ParityNothingExecutionProvider"))
    ) as n:
        yield n


@pytest.fixture
def broken_ep() -> Iterator[str]:
    with registered(TestFactory("ParityBrokenExecutionProvider", KernelRegistry("x"), fail_create=True)) as n:
        yield n


def planted_static_registry(name: str) -> KernelRegistry:
    """Known static facts: Softmax 13+ float only, Add 7-12, Relu 14+, a kernel with a bogus
    constraint name (refused at registration), an EP-only custom op and a delegated op."""
    reg = KernelRegistry(name)
    noop = _binary(exact_add)
    reg.register("Softmax", since=13, types={"T": ("tensor(float)",)})(noop)
    reg.register("Add", since=7, end=12, types={"T": FLOATS})(noop)
    reg.register("Relu", since=14, types={"T": ("tensor(float)",)})(noop)
    reg.register("Elu", since=6, types={"T3": ("tensor(float)",)})(noop)
    reg.register("MyOp", since=1, domain="com.example")(noop)
    reg.add(KernelDef("Tanh", since_version=13, delegated=True), noop)
    return reg


@pytest.fixture
def planted_static_ep() -> Iterator[str]:
    name = "ParityStaticExecutionProvider"
    with registered(TestFactory(name, planted_static_registry(name))) as n:
        yield n


@pytest.fixture
def fusing_ep() -> Iterator[str]:
    name = "ParityFusingExecutionProvider"
    fusable = [("", "Relu", 14, None), ("ai.onnx", "Conv", 11, None)]  # declares Conv, fuses only Relu
    with registered(TestFactory(name, KernelRegistry(name), fusable=fusable, fuses=True)) as n:
        yield n
