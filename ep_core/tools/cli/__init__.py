"""The ``ep-core`` command. Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.

Errors: one line on stderr, no traceback (``--verbose`` adds it); with ``--json`` the error is a
JSON object on stdout instead. Exit codes: 0 ok, 1 the model or an EP failed, 2 a usage error
(bad flags, a missing or unreadable file, an unknown provider or option, a bad input), 130 when
interrupted. Warnings print as one ``warning:`` line each."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from ep_core.sdk.errors import EpCoreError, InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile, StatusCode
from ep_core.tools.cli._common import UsageError

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
_USER_ERRORS = (InvalidArgument, NoSuchFile, InvalidGraph, InvalidProtobuf)  # what the person typed or gave is at fault


class Parser(argparse.ArgumentParser):
    """argparse with its errors raised as one-line ``UsageError``s (no usage block)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _version() -> str:
    from ep_core import __version__

    return f"ep-core {__version__} (Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ep-core", description="Run ONNX models on pluggable execution providers.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--verbose", action="store_true", help="show the traceback of an error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    for sub in subparsers.choices.values():
        if "--verbose" not in sub._option_string_actions:
            sub.add_argument("--verbose", action="store_true", help="show the traceback of an error")
    return parser


def _commands() -> list[str]:
    return [m.name.replace("_", "-") for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]


def _wants_json(argv: Sequence[str]) -> bool:
    """``--json`` as a flag (``conformance --json PATH`` names a file instead)."""
    return "--json" in argv and (not argv or argv[0] != "conformance")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _report(command: str | None, exc: BaseException, as_json: bool, verbose: bool) -> int:
    """Print the error the way the user asked for; return its exit code."""
    if isinstance(exc, KeyboardInterrupt):
        code, status, message = EXIT_INTERRUPTED, "INTERRUPTED", "interrupted"
    elif isinstance(exc, EpCoreError):
        code = EXIT_USAGE if isinstance(exc, _USER_ERRORS) else EXIT_FAILED
        status, message = exc.code.value, exc.message
    elif isinstance(exc, OSError):  # a file the user named cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        code, status, message = EXIT_USAGE, StatusCode.NO_SUCHFILE.value, f"{exc.strerror or exc}{where}"
    else:
        code, status = EXIT_FAILED, StatusCode.FAIL.value
        message = f"internal error {type(exc).__name__}: {exc} (a bug: please report it with the --verbose output)"
    prefix = f"ep-core {command}" if command else "ep-core"
    if verbose and not isinstance(exc, KeyboardInterrupt):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if as_json:
        print(json.dumps({"error": {"command": command, "code": status, "message": message, "exit_code": code}}))
    else:
        print(f"{prefix}: error: {_one_line(message)}", file=sys.stderr)
    return code


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"warning: {_one_line(str(message))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json, verbose = _wants_json(argv), "--verbose" in argv
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in _commands():
        command = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    except (UsageError, EpCoreError) as exc:
        return _report(command, exc, as_json, verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    old = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say, nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - every error becomes one line and a code
        return _report(args.command, exc, as_json, verbose or bool(getattr(args, "verbose", False)))
    finally:
        warnings.showwarning = old


if __name__ == "__main__":
    sys.exit(main())
