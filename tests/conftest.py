"""Suite-wide set-up: make ``tests/_support`` importable and keep plugin state per test."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Context signing keys (ep_core.sdk.epcontext.signing) go to a folder of this run, never the
# user's ~/.config/ep-core: subprocesses the tests start inherit it.
if "EP_CORE_KEY_DIR" not in os.environ:
    os.environ["EP_CORE_KEY_DIR"] = tempfile.mkdtemp(prefix="ep-core-keys-")
