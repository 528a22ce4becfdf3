"""Set-up for the Numba-CUDA EP suite: the same tests run under the simulator (CI,
``NUMBA_ENABLE_CUDASIM=1``) and on a real GPU. What the simulator cannot do is a
``skip_on_cudasim`` with its reason; without numba-cuda, or with neither a GPU nor the simulator,
the whole suite is skipped with the reason the factory gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

EP = "NumbaCudaExecutionProvider"
REF = "CpuReferenceExecutionProvider"

numba = pytest.importorskip("numba", reason="numba-cuda is not installed: pip install ./ep_cuda_numba")


def _device_problem() -> str | None:
    from ep_cuda_numba.device import probe

    found = probe()
    if found.devices:
        return None
    return "; ".join(found.problems) or "no CUDA device"


_problem = _device_problem()
SIM = bool(numba.config.ENABLE_CUDASIM)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    if _problem is None:
        return
    skip = pytest.mark.skip(reason=f"Numba-CUDA EP unavailable: {_problem}")
    for item in items:
        if "cuda_numba" in str(item.fspath):
            item.add_marker(skip)


def skip_on_cudasim(reason: str) -> Any:
    return pytest.mark.skipif(SIM, reason=f"simulator: {reason}")


def skip_unless_cudasim(reason: str) -> Any:
    return pytest.mark.skipif(not SIM, reason=f"real GPU: {reason}")


def session(model: Any, providers: Sequence[Any] | None = None, **kwargs: Any) -> Any:
    from ep_core import InferenceSession

    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    return InferenceSession(data, providers=list(providers or [EP]), **kwargs)


def run_both(
    model: Any, feeds: Mapping[str, np.ndarray], providers: Sequence[Any] | None = None
) -> tuple[list[Any], list[Any], Any]:
    """(outputs on this EP, outputs on the reference EP, the EP session)."""
    sess = session(model, providers)
    got = sess.run(None, dict(feeds))
    ref = session(model, [REF]).run(None, dict(feeds))
    return got, ref, sess


def assert_close(got: Sequence[Any], ref: Sequence[Any], tol: float = 1e-5, what: str = "") -> None:
    assert len(got) == len(ref), what
    for i, (g, r) in enumerate(zip(got, ref, strict=False)):
        g, r = np.asarray(g), np.asarray(r)
        assert g.shape == r.shape, f"{what} output {i}: shape {g.shape} != reference {r.shape}"
        assert g.dtype == r.dtype, f"{what} output {i}: dtype {g.dtype} != reference {r.dtype}"
        if g.dtype.kind in "fc" or g.dtype.name == "bfloat16":
            g, r = (g, r) if g.dtype.kind in "fc" else (g.astype(np.float32), r.astype(np.float32))
            np.testing.assert_allclose(g, r, rtol=tol, atol=tol, err_msg=f"{what} output {i}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{what} output {i}")


def all_on_ep(sess: Any) -> dict[str, str]:
    """Nodes NOT assigned to this EP (name -> ep)."""
    return {k: v["ep"] for k, v in sess.get_node_assignment().items() if v["ep"] != EP}
