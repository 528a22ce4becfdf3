"""``ep-core parity-report``: how far an EP matches the reference EP and the ONNX spec.

Cases run in worker processes under ``--case-timeout`` (a case still running then is reported
``timeout``), or as Ray tasks with ``--cluster local|auto|ray://HOST:PORT``; the report is the same.

Exit codes: 0 ok; 1 a case failed or timed out (or the score is under ``--fail-under``); 2 usage
error (Ray missing for ``--cluster``, a resource no node has); 3 the EP (or the reference EP)
failed to load."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ep_core.tools.parity.render import FORMATS
from ep_core.tools.sweep import core as placement

if TYPE_CHECKING:
    from ep_core.tools.parity.report import ParityReport


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "parity-report",
        help="static and runtime parity of an EP against the reference EP and the ONNX schemas",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--ep", help="execution provider under test (see `ep-core providers`); required unless --from-json")
    p.add_argument("--from-json", metavar="PATH", help="render a saved JSON report again instead of running anything")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--static", action="store_true", help="registry coverage only (default unless tests or models are asked for)"
    )
    mode.add_argument("--runtime", action="store_true", help="run cases only (node tests unless --models alone)")
    p.add_argument("--node-tests", action="store_true", help="run the ONNX node test cases")
    p.add_argument("--filter", metavar="RE", help="regex searched in each node test's op name and case name")
    p.add_argument("--ops", metavar="OP,OP", help="node tests of exactly these op types")
    p.add_argument("--only-ep-ops", action="store_true", help="node tests only for ops the EP declares")
    p.add_argument("--no-expanded", action="store_true", help="leave out the *_expanded (function body) cases")
    p.add_argument("--max-elements", type=int, metavar="N", help="skip cases whose inputs exceed N elements")
    p.add_argument("--models", metavar="M1,M2", help="zoo models to run (magika, ppocr_cls, ...)")
    p.add_argument("--reference", metavar="EP", help="oracle EP (default: the installed CPU fallback EP)")
    p.add_argument("--format", choices=FORMATS, default=None, help="output format (default: md with -o, text without)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the report here (the terminal summary still prints)")
    p.add_argument("--fail-under", type=float, metavar="PCT", help="exit 1 if the score is under PCT percent")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    placement.add_arguments(p)
    p.set_defaults(func=run)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def run(args: argparse.Namespace) -> int:
    from ep_core.tools.parity import EXIT_EP_LOAD, EXIT_USAGE, EpLoadFailure, ParityUsageError, build_report
    from ep_core.tools.parity.progress import ProgressBar

    def usage(msg: str) -> int:
        print(f"ep-core parity-report: error: {msg}", file=sys.stderr)
        return EXIT_USAGE

    if args.fail_under is not None and not 0 <= args.fail_under <= 100:
        return usage(f"--fail-under must be a percentage between 0 and 100, got {args.fail_under}")
    if args.max_elements is not None and args.max_elements < 1:
        return usage("--max-elements must be at least 1")
    fmt = args.format or ("md" if args.output else "text")
    placed = placement.placement_flags(args)
    if args.from_json:
        if (
            args.ep
            or args.static
            or args.runtime
            or args.node_tests
            or args.filter
            or args.ops
            or args.models
            or placed
        ):
            return usage("--from-json re-renders a saved report; it takes only --format, -o and --fail-under")
        return _from_json(args.from_json, fmt, args.output, args.fail_under)
    if not args.ep:
        return usage("--ep NAME is required (or --from-json PATH to re-render a saved report)")
    ops, models = _split(args.ops), _split(args.models)
    wants_cases = bool(args.node_tests or args.filter or ops or args.only_ep_ops or models)
    if args.static and wants_cases:
        return usage("--static runs nothing; drop it to run node tests or models")
    static = args.static or not args.runtime
    runtime = args.runtime or wants_cases
    node_tests = bool(args.node_tests or args.filter or ops or args.only_ep_ops or (args.runtime and not models))
    if placed and not runtime:
        return usage(f"{', '.join(placed)} given, but static parity runs no case (add --node-tests or --models)")
    executor = placement.executor_from_args(args) if runtime else None
    try:
        report = build_report(
            args.ep,
            static=static,
            runtime=runtime,
            node_tests=node_tests,
            ops=ops or None,
            filter=args.filter,
            models=models,
            include_expanded=not args.no_expanded,
            only_ep_ops=args.only_ep_ops,
            max_elements=args.max_elements,
            reference=args.reference,
            progress=ProgressBar(True if args.progress else None),
            cluster=executor,
        )
    except ParityUsageError as exc:
        return usage(str(exc))
    except EpLoadFailure as exc:
        print(f"ep-core parity-report: error: {exc}", file=sys.stderr)
        return EXIT_EP_LOAD
    return _emit(report, fmt, args.output, args.fail_under)


def _emit(report: "ParityReport", fmt: str, output: str | None, fail_under: float | None) -> int:
    from ep_core.tools.parity.render import render, render_text, write_report

    if output:
        try:
            path = write_report(report.data, fmt, output)
        except OSError as exc:
            print(
                f"ep-core parity-report: error: cannot write the {fmt} report to {output}: {exc}; "
                "choose a writable -o path",
                file=sys.stderr,
            )
            return 2
        sys.stdout.write(render_text(report.data))
        print(f"wrote {fmt} report to {path}")
    else:
        sys.stdout.write(render(report.data, fmt))
    code = report.exit_code(fail_under)
    if fail_under is not None and report.score is not None and report.score < fail_under:
        print(f"score {report.score:.2f}% is under --fail-under {fail_under:g}%", file=sys.stderr)
    return code


def _from_json(path: str, fmt: str, output: str | None, fail_under: float | None) -> int:
    """Render a saved report; it must carry the schema major version this ep-core writes."""
    import json

    from ep_core.tools.parity import EXIT_USAGE, SCHEMA_VERSION, ParityReport

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"ep-core parity-report: error: cannot read the JSON report {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    version = str(data.get("schema_version", "")) if isinstance(data, dict) else ""
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        print(
            f"ep-core parity-report: error: {path} has schema_version {version or 'none'!r}; this ep-core renders "
            f"{SCHEMA_VERSION} (regenerate the report)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return _emit(ParityReport(data), fmt, output, fail_under)
