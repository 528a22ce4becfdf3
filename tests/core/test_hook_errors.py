"""Every exception crossing the EP contract is attributed once, in one place
(``ep_core.runtime.discover.hook_error``): untyped ones become EP_FAIL naming the EP and the hook,
typed ones keep their type and code with the EP and hook prepended, and the original is always the
``__cause__``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.runtime.discover import hook_error
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.errors import EpFail, InvalidArgument, StatusCode
from ep_core.sdk.kernels import FLOATS, KernelRegistry

NAME = "RaisingTestExecutionProvider"
REGISTRY = KernelRegistry(NAME)


@REGISTRY.register("Neg", since=13, types={"T": FLOATS})
def _neg(node: Any, ctx: Any) -> Any:
    return lambda x: (np.negative(x),)


class RaisingEp(RegistryEp):
    def __init__(self, raise_in: str, exc: Exception) -> None:
        super().__init__(NAME, REGISTRY)
        self.raise_in, self.exc = raise_in, exc

    def _maybe(self, hook: str) -> None:
        if hook == self.raise_in:
            raise self.exc

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        self._maybe("ep_get_capability")
        super().ep_get_capability(graph, support)

    def ep_on_run_start(self, run_options: Any) -> None:
        self._maybe("ep_on_run_start")


class RaisingFactory(HostEpFactory):
    ep_name = NAME
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, raise_in: str, exc: Exception) -> None:
        self.raise_in, self.exc = raise_in, exc

    def ep_factory_create_ep(
        self, devices: Sequence[Any], ep_options: Mapping[str, str], session_options: Any
    ) -> RaisingEp:
        if self.raise_in == "ep_factory_create_ep":
            raise self.exc
        return RaisingEp(self.raise_in, self.exc)


@contextmanager
def raising(hook: str, exc: Exception) -> Iterator[None]:
    ep_core.register_execution_provider_library(NAME, RaisingFactory(hook, exc))
    try:
        yield
    finally:
        ep_core.unregister_execution_provider_library(NAME)


def _run() -> None:
    model = make_model(
        [helper.make_node("Neg", ["x"], ["y"], name="neg")],
        [("x", TensorProto.FLOAT, [2])],
        [("y", TensorProto.FLOAT, [2])],
    )
    sess = ep_core.InferenceSession(model.SerializeToString(), providers=[NAME])
    sess.run(None, {"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("hook", ["ep_factory_create_ep", "ep_get_capability", "ep_on_run_start"])
def test_an_untyped_exception_becomes_ep_fail_naming_ep_and_hook(hook: str) -> None:
    original = ZeroDivisionError("division by zero")
    with raising(hook, original), pytest.raises(EpFail) as info:
        _run()
    assert info.value.message.startswith(f"{NAME}.{hook} failed: ZeroDivisionError: division by zero")
    assert info.value.__cause__ is original


def test_a_typed_exception_keeps_its_code_and_gains_the_ep_and_hook() -> None:
    original = InvalidArgument("option 'x' is bad")
    with raising("ep_on_run_start", original), pytest.raises(InvalidArgument) as info:
        _run()
    assert info.value.code is StatusCode.INVALID_ARGUMENT
    assert info.value.message == f"{NAME}.ep_on_run_start: option 'x' is bad"
    assert info.value.__cause__ is original


def test_an_error_already_naming_the_ep_is_not_wrapped_twice() -> None:
    original = EpFail(f"{NAME}: the device is gone")
    assert hook_error(NAME, "ep_sync", original) is original


class ProbeFailingFactory(RaisingFactory):
    def ep_factory_probe_hardware_devices(self) -> list[Any]:
        raise ZeroDivisionError("the driver query failed")


def test_a_failing_hardware_probe_leaves_the_other_eps_usable() -> None:
    """A CPU-only session must not fail because another EP's probe raises (a broken driver, a
    module the probe imports): that EP gets no device and its failure is recorded as a load
    failure; asking for it by name raises the probe's EP_FAIL."""
    from ep_core.runtime.discover import get_registry

    ep_core.register_execution_provider_library(NAME, ProbeFailingFactory("", ValueError()))
    try:
        names = {d.ep_name for d in ep_core.get_ep_devices()}
        assert NAME not in names and "CpuReferenceExecutionProvider" in names
        assert "hardware probe: " in str(get_registry().handle(NAME).load_error)
        assert "ZeroDivisionError: the driver query failed" in str(get_registry().handle(NAME).load_error)
        model = make_model(
            [helper.make_node("Neg", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
        )
        sess = ep_core.InferenceSession(model.SerializeToString(), providers=["CpuReferenceExecutionProvider"])
        np.testing.assert_array_equal(sess.run(None, {"x": np.ones(2, np.float32)})[0], -np.ones(2, np.float32))
        with pytest.raises(EpFail, match=f"{NAME}.ep_factory_probe_hardware_devices failed: ZeroDivisionError"):
            ep_core.InferenceSession(model.SerializeToString(), providers=[NAME])
    finally:
        ep_core.unregister_execution_provider_library(NAME)
