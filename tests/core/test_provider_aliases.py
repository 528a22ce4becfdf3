"""Provider aliases (contract version 3, ``ep_factory_get_provider_aliases``): onnxruntime's
``CPUExecutionProvider`` selects the CPU fallback EP; an alias never hides a real EP; suggestions
for unknown names rank real candidates and never offer an EP that failed to load."""

from __future__ import annotations

import numpy as np
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.runtime.discover import FactoryHandle, PluginRegistry
from ep_core.sdk.ep_base import HostEpFactory
from ep_core.sdk.errors import UnknownProviderError


def _model() -> bytes:
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])]
    ).SerializeToString()


def test_cpu_execution_provider_selects_the_cpu_fallback() -> None:
    sess = ep_core.InferenceSession(_model(), providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CpuReferenceExecutionProvider"]
    (y,) = sess.run(None, {"x": np.array([-1.0, 0.0, 2.0], np.float32)})
    np.testing.assert_array_equal(y, [0.0, 0.0, 2.0])


class _Aliasing(HostEpFactory):
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self, name: str, aliases: list[str], api: int = 3) -> None:
        self.ep_name, self._aliases, self._api = name, aliases, api

    def ep_factory_api_version(self) -> int:
        return self._api

    def ep_factory_get_provider_aliases(self) -> list[str]:
        return self._aliases

    def ep_factory_create_ep(self, devices: object, ep_options: object, session_options: object) -> object:
        raise AssertionError("these tests only resolve names")


def _registry(*factories: _Aliasing) -> PluginRegistry:
    reg = PluginRegistry(autoload=False)
    for f in factories:
        reg.register_library(f.ep_name, f)
    return reg


def test_an_alias_never_hides_a_real_ep_and_the_first_claim_wins() -> None:
    a = _Aliasing("AcmeExecutionProvider", ["ZetaExecutionProvider", "OtherExecutionProvider"])
    z = _Aliasing("ZetaExecutionProvider", ["OtherExecutionProvider", "not-an-ep-name"])
    reg = _registry(a, z)
    assert reg.handle("ZetaExecutionProvider").name == "ZetaExecutionProvider"  # the real one
    assert reg.handle("OtherExecutionProvider").name == "AcmeExecutionProvider"  # first claim
    assert reg.aliases() == {"OtherExecutionProvider": "AcmeExecutionProvider"}


def test_a_version_2_factory_is_not_asked_for_aliases() -> None:
    reg = _registry(_Aliasing("OldExecutionProvider", ["NewNameExecutionProvider"], api=2))
    assert reg.aliases() == {}
    with pytest.raises(UnknownProviderError):
        reg.handle("NewNameExecutionProvider")


def test_suggestions_rank_real_candidates_and_skip_eps_that_failed_to_load() -> None:
    reg = _registry(_Aliasing("NumbaCudaExecutionProvider", []), _Aliasing("CpuReferenceExecutionProvider", []))

    def broken() -> object:
        raise ImportError("libcuda.so.1: cannot open shared object file")

    handle = FactoryHandle(reg, "CudaBrokenExecutionProvider", "acme_cuda:factory", "acme-cuda", broken)
    reg._handles[handle.name] = handle  # as entry-point discovery adds an installed package
    assert handle.load() is None and handle.load_error is not None
    with pytest.raises(UnknownProviderError) as info:
        reg.handle("CUDAExecutionProvider")
    message = info.value.message
    assert "Did you mean 'NumbaCudaExecutionProvider'?" in message
    assert "CudaBroken" not in message
    with pytest.raises(UnknownProviderError) as info:
        reg.handle("OpenVINOExecutionProvider")
    assert "Did you mean" not in info.value.message
