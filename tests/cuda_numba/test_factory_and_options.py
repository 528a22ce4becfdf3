"""The factory: lazy imports, the simulated device, incompatibility reasons a person can act on,
provider options validated with the allowed values named, and the NHWC decision."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from ep_core.sdk.errors import ConfigError

from .conftest import EP, SIM, session, skip_unless_cudasim
from .test_memory_streams_iobinding import chain_model


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_importing_ep_core_and_the_factory_does_not_import_numba() -> None:
    proc = _python("import sys, ep_core, ep_cuda_numba.factory; print('numba' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    timing = _python("import ep_core", "-X", "importtime")
    assert timing.returncode == 0, timing.stderr
    modules = [
        line.rsplit("|", 1)[-1].strip() for line in timing.stderr.splitlines() if line.startswith("import time:")
    ]
    assert modules and not [m for m in modules if m == "numba" or m.startswith(("numba.", "numba_cuda"))]


def test_devices_are_found_through_numba_cuda() -> None:
    from ep_core import get_ep_devices

    mine = [d for d in get_ep_devices() if d.ep_name == EP]
    assert mine, "the EP offers at least one device"
    for d in mine:
        assert d.device.type.value == "GPU" and d.memory_info.name == "Cuda"
        assert d.device.metadata["simulated"] == ("1" if SIM else "0")
    if SIM:
        assert len(mine) == 1, "the simulator is ONE simulated device, never a real GPU"


@skip_unless_cudasim("only the simulator's device carries simulated=1")
def test_a_performance_policy_never_picks_the_simulated_device() -> None:
    from ep_core import EpSelectionPolicy, InferenceSession, SessionOptions

    opts = SessionOptions()
    opts.set_provider_selection_policy(EpSelectionPolicy.PREFER_GPU)
    sess = InferenceSession(chain_model().SerializeToString(), opts)
    assert EP not in sess.get_providers()


def test_incompatibility_reasons_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import numba
    from numba import cuda

    from ep_core.sdk.devices import host_cpu_device
    from ep_cuda_numba import device
    from ep_cuda_numba.factory import factory

    cpu = host_cpu_device()
    reasons = factory.ep_factory_get_hardware_device_incompatibility_details(cpu)
    assert any("NVIDIA GPUs only" in r for r in reasons)
    if SIM:
        assert any("simulated device" in r and "NUMBA_ENABLE_CUDASIM" in r for r in reasons)
    try:
        monkeypatch.setattr(device, "_numba_cuda_installed", lambda: False)
        device.probe.cache_clear()
        assert any("pip install ep-cuda-numba" in r for r in device.incompatibility(cpu))
        monkeypatch.undo()
        monkeypatch.setattr(numba.config, "ENABLE_CUDASIM", False)
        monkeypatch.setattr(cuda, "is_available", lambda: False, raising=False)
        device.probe.cache_clear()
        assert any("no CUDA driver" in r for r in device.incompatibility(cpu))
        old = SimpleNamespace(id=0, name=b"Old GPU", compute_capability=(3, 0))
        monkeypatch.setattr(device, "compiler_problem", lambda: None)  # a faked GPU; the simulator compiles nothing
        monkeypatch.setattr(cuda, "is_available", lambda: True, raising=False)
        monkeypatch.setattr(cuda, "gpus", [old], raising=False)
        device.probe.cache_clear()
        gpu = device.probe().devices[0]
        assert factory.ep_factory_get_supported_devices([gpu]) == []
        (why,) = device.incompatibility(gpu)
        assert "compute capability 3.0" in why and "minimum 5.0" in why
    finally:
        monkeypatch.undo()
        device.probe.cache_clear()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"no_such_option": "1"}, "has no option(s) ['no_such_option']; its options are"),
        ({"prefer_nhwc": "maybe"}, "prefer_nhwc='maybe' is invalid; allowed: 0 | 1"),
        ({"arena_extend_strategy": "kDouble"}, "allowed: kNextPowerOfTwo | kSameAsRequested"),
        ({"gpu_mem_limit": "-5"}, "gpu_mem_limit='-5' is invalid"),
        ({"max_threads_per_block": "100"}, "multiple of 32"),
        ({"device_id": "7"}, "device_id=7 names no usable CUDA device; available device ids: [0"),
    ],
)
def test_invalid_provider_options_are_rejected_with_the_allowed_values(options: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        session(chain_model(), [(EP, options)])
    assert expected in str(err.value)


def test_an_unknown_device_is_rejected_naming_the_devices() -> None:
    with pytest.raises(ConfigError, match=r"has no device 'gpu:9'; it supports \['gpu:0'"):
        session(chain_model(), [(EP, {"device": "gpu:9"})])


def test_valid_options_reach_the_ep() -> None:
    sess = session(chain_model(), [(EP, {"enable_fusion": "0", "max_threads_per_block": "128", "device_id": "0"})])
    ep = sess.execution_providers[0].ep
    assert ep.options.enable_fusion is False and ep.options.max_threads_per_block == 128
    x = np.ones((2, 3, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.full((2, 3, 4), 0.25, np.float32), rtol=1e-6)


def test_the_device_id_comes_from_the_selected_device_and_the_users_must_agree() -> None:
    import logging

    from ep_core import get_ep_devices
    from ep_cuda_numba.factory import factory

    (gpu,) = [d for d in get_ep_devices() if d.ep_name == EP][:1]
    assert gpu.ep_options == {"device_id": str(gpu.device.device_id)}
    logger = logging.getLogger("tests.cuda_numba")
    # without a device_id (a direct call) the selected device decides; with the device's own, no refusal
    for options in ({}, dict(gpu.ep_options), {**gpu.ep_options, "enable_fusion": "0"}):
        ep = factory.ep_factory_create_ep([gpu], options, None, logger)
        try:
            assert ep.options.device_id == gpu.device.device_id and ep.logger is logger
        finally:
            factory.ep_factory_release_ep(ep)
    with pytest.raises(ConfigError, match=r"device_id=9 names no usable CUDA device; available device ids: \[0"):
        factory.ep_factory_create_ep([gpu], {"device_id": "9"}, None, logger)
    # the session passes the device's options merged under the user's: they reach the EP
    sess = session(chain_model(), [(EP, {"enable_fusion": "0"})])
    assert sess.execution_providers[0].ep.options.device_id == gpu.device.device_id


def _without_simulator(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        # NumPy 2.5 removed np.row_stack, which numba-cuda 0.30.4 overloads when its CUDA target loads:
        # on the H100 machine (NumPy 2.5.2) every kernel failed until the probe said so up front
        ("import numpy; del numpy.row_stack", ["cannot load its CUDA target with NumPy", "numpy<2.5", "row_stack"]),
        (
            "import numba.cuda.cudadrv.nvvm as m\n"
            "def broken():\n    raise OSError('libnvvm.so: cannot open shared object file')\n"
            "m.NVVM = broken",
            ["libNVVM", "could not be loaded", "libnvvm.so", "nvidia-nvvm", "CUDA_HOME"],
        ),
    ],
    ids=["numpy-without-row_stack", "no-libnvvm"],
)
def test_a_numba_cuda_that_cannot_compile_here_is_named_by_the_probe(plant: str, says: list[str]) -> None:
    """Found before any session is built, with the way out, instead of as a failure in every node."""
    proc = _without_simulator(f"{plant}\nfrom ep_cuda_numba.device import compiler_problem\nprint(compiler_problem())")
    assert proc.returncode == 0, proc.stderr
    for words in says:
        assert words in proc.stdout, proc.stdout
