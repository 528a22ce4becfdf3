"""``ep-core exec -- COMMAND``: run a program written for onnxruntime on ep-core, unchanged.

In the processes COMMAND starts, ``import onnxruntime`` gives ``ep_core.onnxruntime`` (the
onnxruntime API over ep-core's EPs; ``CPUExecutionProvider`` is the CPU fallback EP). Only for
that command: nothing else on the machine changes. A bare ``python``/``python3`` means the Python
ep-core itself runs on (which can import ep_core)."""

from __future__ import annotations

import argparse
from typing import Any

from ep_core.tools.cli._common import UsageError


def _run(args: argparse.Namespace) -> int:
    from ep_core.onnxruntime.dropin import run_command

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the command to run, e.g. `ep-core exec -- python app.py`")
    return run_command(command)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "exec",
        help="run a program that imports onnxruntime on ep-core, unchanged (ep-core exec -- python app.py)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("argv", metavar="command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    p.set_defaults(func=_run)
