"""Shared CLI helpers: provider arguments, JSON output, and tables that fit the terminal."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import InvalidArgument


class UsageError(InvalidArgument):
    """A command line that cannot work as given (exit code 2, one line, no traceback)."""


def add_provider_args(parser: argparse.ArgumentParser, options: bool = False) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--providers",
        help="comma-separated EP names in priority order (see `ep-core providers`)",
    )
    group.add_argument("--config", help="provider config file (.toml or .json)")
    if options:
        parser.add_argument(
            "--provider-option",
            action="append",
            metavar="EP:KEY=VALUE",
            help="an option of one of the providers asked for, as EP:KEY=VALUE (repeatable)",
        )


def provider_list(args: argparse.Namespace) -> list[str] | None:
    if getattr(args, "providers", None):
        names = [p.strip() for p in args.providers.split(",") if p.strip()]
        if not names:
            raise UsageError(f"--providers {args.providers!r} names no provider (see `ep-core providers`)")
        return names
    return None


def provider_options(items: list[str] | None, requested: list[str]) -> dict[str, dict[str, str]]:
    """``EP:KEY=VALUE`` items by EP. The EP must be one the session is asked to use (``requested``,
    fallback included); whether it has the option is the EP's to say when the session creates it."""
    out: dict[str, dict[str, str]] = {}
    for item in items or ():
        ep, colon, rest = item.partition(":")
        key, eq, value = rest.partition("=")
        if not colon or not eq or not ep.strip() or not key.strip():
            raise UsageError(f"--provider-option {item!r} must look like EP:KEY=VALUE")
        ep = ep.strip()
        if ep not in requested:
            raise UsageError(
                f"--provider-option {item!r}: {ep} is not among the providers of this session "
                f"({', '.join(requested) or 'none'}); add it with --providers or --config"
            )
        out.setdefault(ep, {})[key.strip()] = value
    return out


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def console(stream: Any = None) -> Any:
    """A rich Console on stdout: the terminal's width (or $COLUMNS, else 80 when piped), no
    markup or highlighting of the text it is given, and no colour when it is not a terminal."""
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, markup=False, emoji=False, soft_wrap=False)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, no_wrap: Sequence[int] = (0,), title: str | None = None
) -> None:
    """A table that fits the terminal: columns in ``no_wrap`` keep their cells whole (names), the
    others wrap at word boundaries. When even that cannot fit, each row becomes a block: its first
    cell, then ``HEADER value`` pairs wrapped under it."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    con = console()
    cells = [[str(c) for c in r] for r in rows]

    def need(i: int) -> int:
        words = [w for r in cells for line in r[i].splitlines() for w in ([line] if i in no_wrap else line.split())]
        return max([len(headers[i])] + [len(w) for w in words])

    if title:
        con.print(title)
    if sum(need(i) for i in range(len(headers))) + 3 * (len(headers) - 1) > con.width:
        for r in cells:
            pairs = "; ".join(f"{h.lower()} {c}".replace("\n", ", ") for h, c in zip(headers[1:], r[1:]))
            print(r[0])
            print(textwrap.fill(pairs, width=max(20, con.width), initial_indent="  ", subsequent_indent="  "))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, h in enumerate(headers):
        table.add_column(h, no_wrap=i in no_wrap, min_width=need(i) if i in no_wrap else len(h))
    for r in cells:
        table.add_row(*(Text(c) for c in r))
    con.print(table)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """File name -> (mtime_ns, size) of the files directly in ``folder``."""
    if not folder.is_dir():
        return {}
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir() if p.is_file()}


def written_files(folder: Path, before: dict[str, tuple[int, int]], models: Sequence[str] = ()) -> list[str]:
    """What a command wrote: files of ``folder`` new or changed since ``before``, plus the files the
    written ``models`` reference (EPContext payloads, external initializers) wherever they lie."""
    after = snapshot(folder)
    out = {str(folder / n) for n, stat in after.items() if before.get(n) != stat}
    for model in models:
        out.update(str(p) for p in referenced_files(Path(model)))
    return sorted(out)


def referenced_files(model: Path) -> list[Path]:
    """Files beside ``model`` that it needs: payloads of its EPContext nodes with embed_mode=0 and
    the locations of its external initializers."""
    import onnx
    from onnx import external_data_helper

    from ep_core.sdk.epcontext.payload import ContextNode, is_ep_context_node

    proto = onnx.load(str(model), load_external_data=False)
    found = []
    for node in proto.graph.node:
        if is_ep_context_node(node):
            ctx = ContextNode.from_node(node)
            if ctx.embed_mode == 0 and ctx.ep_cache_context:
                found.append(model.parent / ctx.relative_path)
    for t in external_data_helper._get_all_tensors(proto):
        if external_data_helper.uses_external_data(t):
            location = next((e.value for e in t.external_data if e.key == "location"), None)
            if location:
                found.append(model.parent / location)
    return sorted({p for p in found if p.is_file()})
