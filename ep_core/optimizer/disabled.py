"""Rewrites a session turns off by name: onnxruntime's ``disabled_optimizers`` (the
``InferenceSession`` keyword) and its session config entry ``optimization.disable_specified_optimizers``
(a comma-separated list, which the keyword is written into).

A name is one of ep-core's rewrites (``OWN_NAMES``: the passes of ``passes.run_passes``, the groups
of ``passes.BASIC_RULES``, the fusions of ``fusions``) or one of onnxruntime's graph transformers and
rewrite rules (``onnxruntime_optimizers.toml``), which stands for the ep-core rewrites doing that
job; onnxruntime's transformers ep-core has no counterpart of (its NCHWc layout, its common
subexpression elimination) run nowhere here, so turning them off asks for nothing. A name neither
knows is refused, listing the names: onnxruntime ignores a misspelled one, which leaves the rewrite
on without a word."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

from ep_core.sdk.config import toml_loads
from ep_core.sdk.errors import ConfigError

KEY = "optimization.disable_specified_optimizers"
# the passes ``run_passes`` names (groups of BASIC_RULES and fusions are added from those tables)
PASSES = ("constant folding", "no-op arithmetic", "Conv+Add folding", "Conv+Mul folding", "dead node removal")


@functools.cache
def onnxruntime_names() -> dict[str, tuple[str, ...]]:
    """onnxruntime's optimizer name -> the ep-core rewrites it stands for (empty: none here)."""
    data = toml_loads(Path(__file__).with_name("onnxruntime_optimizers.toml").read_text(encoding="utf-8"))
    return {name: tuple(steps) for name, steps in data["names"].items()}


@functools.cache
def own_names() -> frozenset[str]:
    from ep_core.optimizer.fusions import BASIC_GATED, EXTENDED, NBITS, QDQ
    from ep_core.optimizer.passes import BASIC_RULES

    return frozenset((*PASSES, *BASIC_RULES, NBITS, *(f.name for f in (*BASIC_GATED, *EXTENDED, QDQ[False]))))


def disabled(config: Mapping[str, str] | None) -> frozenset[str]:
    """The ep-core rewrites the session turned off; ``ConfigError`` for a name not known."""
    text = (config or {}).get(KEY, "")
    names = [n.strip() for n in text.replace(";", ",").split(",") if n.strip()]  # either separator, as in use
    if not names:
        return frozenset()
    own, theirs = own_names(), onnxruntime_names()
    out: set[str] = set()
    for name in names:
        if name in own:
            out.add(name)
        elif name in theirs:
            out.update(theirs[name])
        else:
            raise ConfigError(
                f"{KEY} (disabled_optimizers): unknown optimizer {name!r}. ep-core's rewrites: {sorted(own)}; "
                f"onnxruntime's names: {sorted(theirs)} (docs/optimizer.md)"
            )
    return frozenset(out)
