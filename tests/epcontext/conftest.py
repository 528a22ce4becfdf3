"""Fixtures of the EPContext tests (see ``epcontext_support``). They need the Numba CPU EP
(``plugins_contrib/ep_numba_cpu``, installed by ``make install``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

if importlib.util.find_spec("ep_numba_cpu") is None:
    collect_ignore_glob = ["test_*.py"]

    def pytest_report_header() -> str:
        return "tests/epcontext skipped: ep_numba_cpu is not installed (pip install plugins_contrib/ep_numba_cpu)"
else:
    from epcontext_support import compiled, count_compiles, pytest_collection_modifyitems  # noqa: F401
