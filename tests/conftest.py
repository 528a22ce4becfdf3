"""Suite-wide set-up: make ``tests/_support`` importable and keep plugin state per test."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Context signing keys (ep_core.sdk.epcontext.signing) go to a folder of this run, never the
# user's ~/.config/ep-core: subprocesses the tests start inherit it.
if "EP_CORE_KEY_DIR" not in os.environ:
    os.environ["EP_CORE_KEY_DIR"] = tempfile.mkdtemp(prefix="ep-core-keys-")
# The Numba CPU EP's kernel cache (ep_numba_cpu.kernel_cache) likewise: never ~/.cache/ep-numba-cpu.
if "EP_NUMBA_CPU_KERNEL_CACHE_DIR" not in os.environ:
    os.environ["EP_NUMBA_CPU_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="ep-numba-cpu-kernels-")

# `ep-core run`'s EPContext cache likewise: never ~/.cache/ep-core/ctx (the ctx_cache fixture gives a test its own)
os.environ.setdefault("EP_CORE_CTX_CACHE", tempfile.mkdtemp(prefix="ep-core-ctx-"))

# The graph optimizer's per-machine cache (ep_core.optimizer.cache): a folder of its own per test, so
# no test sees another's optimized models (tests that count or log optimizer passes stay exact).
_OPT_CACHE_ROOT = tempfile.mkdtemp(prefix="ep-core-optimized-")
# module- and session-scoped fixtures run before the per-test one: a folder of this run for them
os.environ.setdefault("EP_CORE_OPTIMIZER_CACHE_DIR", os.path.join(_OPT_CACHE_ROOT, "run"))
_opt_cache_tests = iter(range(1 << 62))


@pytest.fixture(autouse=True)
def _optimizer_cache_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EP_CORE_OPTIMIZER_CACHE_DIR", os.path.join(_OPT_CACHE_ROOT, str(next(_opt_cache_tests))))
