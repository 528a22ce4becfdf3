"""Suite-wide set-up: make ``tests/_support`` importable and keep plugin state per test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
