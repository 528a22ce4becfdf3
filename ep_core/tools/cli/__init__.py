"""The ``ep-core`` command. Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from ep_core.sdk.errors import EpCoreError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ep-core", description="Run ONNX models on pluggable execution providers.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EpCoreError as exc:
        print(f"ep-core {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
