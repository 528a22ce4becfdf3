"""The Numba-CUDA EP declares the elementwise ops its fusion generator supports (the parity
report's ``ep_factory_get_fusable_ops`` hook)."""

from __future__ import annotations

from ep_core.tools.parity import build_report
from ep_cuda_numba.codegen import ALL_OPS
from ep_cuda_numba.fusion import fusable_ops

EP = "NumbaCudaExecutionProvider"


def test_declared_ops_are_the_generator_table():
    declared = fusable_ops()
    assert {op for _, op, _, _ in declared} == set(ALL_OPS)
    since = {op: s for _, op, s, _ in declared}
    assert since["Gelu"] == 20 and since["Relu"] == 1 and since["Where"] == 9
    assert all(d == "" and end is None for d, _, _, end in declared)


def test_the_factory_hook_declares_them_under_a_contract_that_has_the_hook():
    from ep_core.sdk.hookspecs import HOOK_API_VERSIONS
    from ep_cuda_numba.factory import factory

    # fusable ops came with contract version 2; the EP speaks 4 (graph capture hooks)
    assert factory.ep_factory_api_version() >= HOOK_API_VERSIONS["ep_factory_get_fusable_ops"] == 2
    assert factory.ep_factory_api_version() == 4
    assert factory.ep_factory_get_fusable_ops() == fusable_ops()


def test_parity_static_mode_shows_the_fusable_ops():
    data = build_report(EP, static=True).data
    st = data["static"]
    assert st["fusable_declared"] and data["ep"]["fusable_declared"]
    assert data["ep"]["kind"] == "kernels+compile"
    assert "ai.onnx::Gelu 20+" in st["fusable_ops"] and "ai.onnx::Tanh 1+" in st["fusable_ops"]
    assert len(st["fusable_ops"]) == len(ALL_OPS)
