"""Shared CLI helpers: provider arguments and JSON/table printing."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def add_provider_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--providers",
        help="comma-separated EP names in priority order (see `ep-core providers`)",
    )
    group.add_argument("--config", help="provider config file (.toml or .json)")


def provider_list(args: argparse.Namespace) -> list[str] | None:
    if getattr(args, "providers", None):
        return [p.strip() for p in args.providers.split(",") if p.strip()]
    return None


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
