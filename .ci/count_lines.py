"""Size check for `make lint`: non-blank, non-comment lines of the core (ep_core/sdk + ep_core/runtime,
at most 6,000, issue 12) and of the layers around it (host services, tools, the onnxruntime compat
module), counted apart. Docstrings count: they are code to read.

Standard library only, so it runs before (and without) anything ep-core imports. Exit 1 over the limit."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE_LIMIT = 6000
PARTS = ("ep_core/sdk", "ep_core/runtime", "ep_core/host", "ep_core/tools", "ep_core/onnxruntime")


def count_lines(folder: Path) -> int:
    """Lines that are neither blank nor only a comment, over every .py file below ``folder``."""
    total = 0
    for path in sorted(folder.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.strip()
            if text and not text.startswith("#"):
                total += 1
    return total


def main() -> int:
    counts = {part: count_lines(ROOT / part) for part in PARTS if (ROOT / part).is_dir()}
    core = counts["ep_core/sdk"] + counts["ep_core/runtime"]
    for part, n in counts.items():
        print(f"{part:<16} {n:>6}")
    print(f"{'sdk + runtime':<16} {core:>6} (limit {CORE_LIMIT})")
    if core > CORE_LIMIT:
        print(
            f"ep_core/sdk + ep_core/runtime is {core} lines, over the {CORE_LIMIT} limit: move code out of the "
            "core (into ep_core/tools or an EP) or make it shorter",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
