"""Fixtures of the EPContext tests (see ``epcontext_support``). They need the Numba CPU EP
(``plugins_contrib/ep_numba_cpu``, installed by ``make install``), except test_generation_safety.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

if importlib.util.find_spec("ep_numba_cpu") is None:
    # test_generation_safety.py defines its own EP; every other test here needs the Numba EP
    collect_ignore = [p.name for p in Path(__file__).parent.glob("test_*.py") if p.name != "test_generation_safety.py"]

    def pytest_report_header() -> str:
        return "tests/epcontext skipped: ep_numba_cpu is not installed (pip install plugins_contrib/ep_numba_cpu)"
else:
    from epcontext_support import (  # noqa: F401
        compiled,
        count_compiles,
        one_thread_by_default,
        pytest_collection_modifyitems,
    )
