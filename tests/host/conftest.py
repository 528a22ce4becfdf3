"""A planted EP whose MatMul kernel records, while it computes, what the host services set: the
BLAS/OpenMP libraries' sizes (threadpoolctl) and Numba's size on the computing thread."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from _support.models import make_model
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_info

import ep_core
from ep_core.host import threads
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import FLOATS, KernelRegistry

PROBE_EP = "HostProbeTestExecutionProvider"
SEEN: list[dict[str, Any]] = []  # one entry per MatMul computed


def _matmul(node: Any, ctx: Any) -> Any:
    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        numba = sys.modules.get("numba")
        SEEN.append(
            {
                "blas": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"],
                "openmp": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp"],
                "numba": numba.get_num_threads() if numba is not None else None,
            }
        )
        return (a @ b,)

    return compute


class ProbeFactory(HostEpFactory):
    ep_name = PROBE_EP
    ep_vendor = "tests"
    ep_version = "1.0.0"

    def __init__(self) -> None:
        self.registry = KernelRegistry(PROBE_EP)
        self.registry.register("MatMul", since=13, types={"T": FLOATS})(_matmul)

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> RegistryEp:
        return RegistryEp(PROBE_EP, self.registry)


def matmul_model(n: int = 64) -> bytes:
    """y = x @ w, w a constant (n x n)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = make_model([node], [("x", TensorProto.FLOAT, ["N", n])], [("y", TensorProto.FLOAT, ["N", n])], [w])
    return model.SerializeToString()


@dataclass
class Probe:
    ep: str = PROBE_EP
    seen: list[dict[str, Any]] = field(default_factory=lambda: SEEN)

    @staticmethod
    def model(n: int = 64) -> bytes:
        return matmul_model(n)


@pytest.fixture
def probe() -> Iterator[Probe]:
    """Registers the probe EP; yields it with what its kernel saw. Restores the process-wide sizes."""
    ep_core.register_execution_provider_library(PROBE_EP, ProbeFactory())
    saved = list(threads._global_sizes)
    SEEN.clear()
    try:
        yield Probe()
    finally:
        ep_core.unregister_execution_provider_library(PROBE_EP)
        threads._global_sizes[:] = saved
        threads.limit_threads(threads.available_cpus())
