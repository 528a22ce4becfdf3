"""The environment a test's subprocess gets: the caller's, without ep-core's settings (a provider
config, a strict-plugins flag...) but with this run's sandbox folders (signing keys, the optimizer
cache, the EPContext cache), so no subprocess writes into the user's ~/.config/ep-core or
~/.cache/ep-core (a CLI test once left optimizer-cache entries signed with a temporary key there,
which every later session then reported as untrusted)."""

from __future__ import annotations

import os

SANDBOX = ("EP_CORE_KEY_DIR", "EP_CORE_OPTIMIZER_CACHE_DIR", "EP_CORE_CTX_CACHE")


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` minus every ``EP_CORE_*`` variable but the sandbox folders, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EP_CORE_") or k in SANDBOX}
    return {**env, **extra}
