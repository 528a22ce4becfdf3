"""Fixtures of the EPContext tests (see ``epcontext_support``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from epcontext_support import compiled, count_compiles, pytest_collection_modifyitems  # noqa: E402,F401
