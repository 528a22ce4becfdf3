"""ONNX node conformance of one EP: every case of ``onnx.backend.test.case.node.collect_testcases()``
run through an ``InferenceSession`` on that EP alone (the CPU fallback off, so nothing else runs a node).

``ep-core conformance [--ep NAME] [--exclusions FILE] [--filter RE] [--json PATH] [--min-percent P]``
(or ``python -m ep_core.tools.conformance ...``) prints failures per op and a final
``conformance: P passed, F failed of N (X%)`` line. Without ``--ep`` the EP under test is the one the
core picks with no providers given: the installed CPU fallback EP.

What an EP cannot pass here is the EP's knowledge, not the core's: an exclusions file (TOML) names
the EP and lists case-name patterns, each with why. Excluded cases are reported with the reason and
still count as failed in the percentage. The file format::

    ep = "SomeExecutionProvider"      # the EP the list is for; --ep must match it
    [[exclude]]
    cases = "^test_bernoulli"          # regex, searched in each case name
    why = "what makes the case impossible here"
    unless_importable = "PIL"          # optional: the cases run when this module imports

The comparison follows onnx's backend runner: same dtype and shape, strings and bools exact, floats
within the case's rtol/atol, sequences element by element, ``None`` for empty optionals.

Where the cases run (``--case-timeout``, ``--cluster``; ``run_conformance(..., cluster=...)`` in
Python) follows ``ep_core.tools.sweep``: worker processes here, each case under a timeout (default
120 s; a case still running then is reported ``timeout`` and counts as failed), in this process
with ``--case-timeout 0``, or Ray tasks on a cluster. The results are the same wherever they run."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.config import toml_loads
from ep_core.sdk.errors import ConfigError
from ep_core.tools.progress import Bar
from ep_core.tools.sweep import core as placement

if TYPE_CHECKING:
    from ep_core.tools.sweep import Executor, Outcome


@dataclass(frozen=True)
class Exclusion:
    """Case names matching ``cases`` cannot pass on the EP, for the reason ``why``."""

    cases: str
    why: str
    unless_importable: str | None = None

    def applies(self, name: str) -> bool:
        return re.search(self.cases, name) is not None and not (
            self.unless_importable and _importable(self.unless_importable)
        )


@dataclass(frozen=True)
class Exclusions:
    """One EP's exclusions file."""

    ep: str
    entries: tuple[Exclusion, ...]
    source: str

    def reason(self, name: str) -> str | None:
        """The written reason case ``name`` is excluded, or None if it must run."""
        return next((e.why for e in self.entries if e.applies(name)), None)


@cache
def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


_KEYS = {"cases": str, "why": str, "unless_importable": str}


def load_exclusions(path: str | Path) -> Exclusions:
    """Read an exclusions file; a ``ConfigError`` names the file and the entry at fault."""
    try:
        data = toml_loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the conformance exclusions file {path}: {exc}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ConfigError(f"conformance exclusions file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"ep", "exclude"})
    if unknown or not isinstance(data.get("ep"), str) or not isinstance(data.get("exclude", []), list):
        raise ConfigError(
            f'{path} must hold `ep = "NameExecutionProvider"` and [[exclude]] tables'
            + (f"; unknown keys {unknown}" if unknown else "")
        )
    entries = []
    for i, raw in enumerate(data.get("exclude", [])):
        where = f"{path}: [[exclude]] #{i + 1}"
        if not isinstance(raw, dict) or not {"cases", "why"} <= set(raw) or not set(raw) <= set(_KEYS):
            raise ConfigError(f"{where} must have `cases` and `why` (and optionally `unless_importable`), got {raw!r}")
        bad = [k for k, v in raw.items() if not isinstance(v, _KEYS[k]) or not v.strip()]
        if bad:
            raise ConfigError(f"{where}: {bad} must be non-empty strings")
        try:
            re.compile(raw["cases"])
        except re.error as exc:
            raise ConfigError(f"{where}: cases = {raw['cases']!r} is not a regular expression: {exc}") from None
        entries.append(Exclusion(**raw))
    return Exclusions(data["ep"], tuple(entries), str(path))


def default_ep() -> str:
    """The EP a session runs on when given no providers: the installed CPU fallback EP."""
    from ep_core.runtime.discover import get_registry

    handle = get_registry().cpu_fallback()
    if handle is None:
        raise ConfigError(
            "no installed EP declares itself the CPU fallback (ep_factory_is_cpu_fallback), or it does not load; "
            "name the EP under test with --ep NAME (see `ep-core providers`)"
        )
    return handle.name


def collect(filter_re: str | None = None) -> list[Any]:
    """The onnx node test cases, optionally only those whose name matches ``filter_re``."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    if filter_re:
        rx = re.compile(filter_re)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def to_feed_value(value: Any) -> Any:
    """A test-case input as a session input: TensorProto -> array (ml_dtypes for float8,
    bfloat16, int4), NumPy scalar -> 0-d array, sequences element-wise, None stays None."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return [to_feed_value(v) for v in value]
    return value


def _as_float(a: Any) -> Any:
    import numpy as np

    return a.astype(np.float32) if a.dtype.kind == "V" or a.dtype.name.startswith(("float8", "bfloat", "float4")) else a


def assert_close(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> None:
    """Raise AssertionError if ``actual`` differs from ``expected`` the way onnx's runner checks."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    if isinstance(expected, TensorProto):
        expected = numpy_helper.to_array(expected)
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{where}: expected an empty optional (None), got {type(actual).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise AssertionError(f"{where}: expected a sequence, got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise AssertionError(f"{where}: expected {len(expected)} sequence elements, got {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            assert_close(e, a, rtol, atol, f"{where}[{i}]")
        return
    expected = np.asarray(expected)
    if not isinstance(actual, np.ndarray):
        if isinstance(actual, np.generic):
            actual = np.asarray(actual)
        else:
            raise AssertionError(f"{where}: expected numpy.ndarray, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {actual.shape} != expected {expected.shape}")
    if expected.dtype == object or expected.dtype.kind in "US":
        if actual.dtype != object and actual.dtype.kind not in "US":
            raise AssertionError(f"{where}: dtype {actual.dtype} != expected strings")
        if actual.tolist() != expected.tolist():
            raise AssertionError(f"{where}: strings differ: {actual.tolist()!r} != {expected.tolist()!r}")
        return
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {actual.dtype} != expected {expected.dtype}")
    if expected.dtype.kind in "biu" or expected.dtype == bool or expected.dtype.name.startswith(("int", "uint")):
        if expected.dtype.name.startswith(("int2", "int4", "uint2", "uint4")):
            actual, expected = actual.astype(np.int8), expected.astype(np.int8)
        np.testing.assert_array_equal(actual, expected, err_msg=where)
        return
    r = rtol
    if expected.dtype.name == "bfloat16":
        r = max(rtol, 2**-6)  # two bfloat16 ULPs, as onnx's runner allows
    np.testing.assert_allclose(_as_float(actual), _as_float(expected), rtol=r, atol=atol, err_msg=where)


@dataclass(frozen=True)
class PlainCase:
    """A node test case as plain data (what a worker process or a Ray task receives): the model's
    bytes and each data set's feeds and expected outputs, already as arrays."""

    name: str
    op: str
    model: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    data_sets: tuple[tuple[dict[str, Any], list[Any]], ...]
    rtol: float
    atol: float


def plain_case(case: Any, op: str | None = None) -> PlainCase:
    """An onnx ``TestCase`` as a :class:`PlainCase` (``op``: its ``main_op``, when known)."""
    inputs = tuple(i.name for i in case.model.graph.input)
    data = tuple(
        ({n: to_feed_value(v) for n, v in zip(inputs, ins, strict=False)}, [to_feed_value(e) for e in expected])
        for ins, expected in case.data_sets
    )
    outputs = tuple(o.name for o in case.model.graph.output)
    model = case.model.SerializeToString()
    op = op or main_op(case)
    return PlainCase(case.name, op, model, inputs, outputs, data, float(case.rtol), float(case.atol))


def check_case(case: PlainCase, ep: str | None = None) -> None:
    """Run one case through a fresh session; raise on any difference. With ``ep`` the session has
    that EP alone (no CPU fallback); without, the core's default choice."""
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.session import InferenceSession

    opts = SessionOptions()
    if ep is not None:
        opts.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = InferenceSession(case.model, opts, providers=[ep] if ep else None)
    for feed, expected in case.data_sets:
        got = sess.run(list(case.outputs), feed)
        if len(got) != len(expected):
            raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, got, strict=False)):
            assert_close(e, a, case.rtol, case.atol, f"output {i} ({case.outputs[i]})")


def run_case(case: Any, ep: str | None = None) -> None:
    """``check_case`` of an onnx ``TestCase``."""
    check_case(plain_case(case), ep)


@dataclass(frozen=True)
class CaseJob:
    case: PlainCase
    ep: str


def judge(job: CaseJob) -> tuple[str, str]:
    """A worker's ``run_one``: ``("passed", "")`` or ``("failed", why)``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_case(job.case, job.ep)
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
        return "failed", f"{type(exc).__name__}: {exc}"
    return "passed", ""


@dataclass
class ConformanceRun:
    """What ``run_conformance`` found: per case ``{"status", "op", "reason"}`` (status ``passed``,
    ``failed``, ``excluded`` or ``timeout``), in the cases' order."""

    ep: str
    results: dict[str, dict[str, str]]
    exclusions: Exclusions | None = None
    seconds: float = 0.0
    by_op: dict[str, list[str]] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return sum(r["status"] == "passed" for r in self.results.values())

    @property
    def percent(self) -> float:
        return 100.0 * self.passed / len(self.results) if self.results else 0.0


def _status(outcome: "Outcome[tuple[str, str]]") -> tuple[str, str]:
    if outcome.status == "ok" and outcome.value is not None:
        return outcome.value
    if outcome.status == "timeout":
        return "timeout", f"{outcome.error} (the case timeout); the worker running it was stopped"
    return "failed", outcome.error


def run_conformance(
    ep: str | None = None,
    *,
    exclusions: Exclusions | str | Path | None = None,
    filter: str | None = None,
    cluster: "str | Executor | None" = None,
    case_timeout: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> ConformanceRun:
    """Every node test case (matching ``filter``) on ``ep`` alone (default: the CPU fallback EP).
    ``cluster`` and ``case_timeout`` say where the cases run, as for ``build_report``: by default in
    this process; worker processes here with a timeout; Ray tasks with ``cluster``."""
    from ep_core.runtime.discover import get_registry
    from ep_core.tools.sweep import RegisterEps, run_cases

    ep = ep or default_ep()
    handle = get_registry().handle(ep)
    if handle.load() is None:
        raise ConfigError(f"execution provider {ep!r} is installed but failed to load: {handle.load_error}")
    if exclusions is not None and not isinstance(exclusions, Exclusions):
        exclusions = load_exclusions(exclusions)
    if exclusions is not None and exclusions.ep != ep:
        raise ConfigError(
            f"{exclusions.source} lists the exclusions of {exclusions.ep}, but the EP under test is {ep}; "
            f"pass --ep {exclusions.ep} or that EP's own exclusions file"
        )
    executor = placement.make_executor(cluster, case_timeout)
    raw = collect(filter)
    ops = [main_op(c) for c in raw]
    reasons = [exclusions.reason(c.name) if exclusions else None for c in raw]
    jobs = [CaseJob(plain_case(c, op), ep) for c, op, why in zip(raw, ops, reasons) if why is None]
    extra: dict[str, Any] = {}
    if not executor.in_process:
        from ep_core.tools.sweep.ray_executor import ep_resources

        needs = cache(ep_resources)  # asked for only on Ray, once
        extra = {"setup": RegisterEps.from_registry(), "resources": lambda job: needs(job.ep)}
    t0 = time.perf_counter()
    outcomes = iter(run_cases(jobs, judge, executor, progress=progress, label=lambda j: j.case.name, **extra))
    run = ConformanceRun(ep, {}, exclusions, time.perf_counter() - t0)
    for case, op, reason in zip(raw, ops, reasons):
        status, why = ("excluded", reason) if reason is not None else _status(next(outcomes))
        run.results[case.name] = {"status": status, "op": op, "reason": why}
        if status != "passed":
            run.by_op.setdefault(op, []).append(case.name)
    return run


@cache
def _op_names() -> tuple[str, ...]:
    from onnx import defs

    return tuple(sorted({s.name for s in defs.get_all_schemas_with_history()}, key=len, reverse=True))


def main_op(case: Any) -> str:
    """The op a case tests: the longest ONNX op name the case name starts with (so expanded
    function cases count under their op, not the first body node), else the first node's op."""
    key = case.name[len("test_") :].replace("_", "").lower()
    for name in _op_names():
        if key.startswith(name.lower()):
            return name
    nodes = case.model.graph.node
    return nodes[0].op_type if nodes else "?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ep", help="EP under test (see `ep-core providers`); default: the CPU fallback EP")
    parser.add_argument("--exclusions", metavar="FILE", help="the EP's exclusions file (TOML; see above)")
    parser.add_argument("--filter", metavar="RE", help="only cases whose name matches this regex")
    parser.add_argument("--json", metavar="PATH", help="write per-case results (status, op, reason) here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failure's reason in full")
    parser.add_argument(
        "--min-percent", type=float, metavar="P", help="exit 1 if fewer than this percentage of cases pass"
    )
    parser.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    placement.add_arguments(parser)


_TAGS = {"excluded": "excluded", "timeout": "TIMEOUT"}


def run(args: argparse.Namespace) -> int:
    """Run the cases on the EP and print the report; the exit code honours ``--min-percent``."""
    if args.filter:
        try:
            re.compile(args.filter)
        except re.error as exc:
            from ep_core.tools.cli._common import UsageError

            raise UsageError(f"--filter {args.filter!r} is not a valid regular expression: {exc}") from None
    ep = args.ep or default_ep()
    bar = Bar(f"conformance {ep}", force=True if getattr(args, "progress", False) else None)
    try:
        result = run_conformance(
            ep,
            exclusions=args.exclusions,
            filter=args.filter,
            cluster=placement.executor_from_args(args),
            progress=bar.update,
        )
    finally:
        bar.close()
    results, exclusions = result.results, result.exclusions
    print(f"EP under test: {ep}" + (f" (exclusions: {exclusions.source})" if exclusions else ""))
    for op, names in sorted(result.by_op.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{op}: {len(names)} failed")
        for n in names:
            r = results[n]
            tag = _TAGS.get(r["status"], "FAILED")
            text = r["reason"] if args.verbose else r["reason"].splitlines()[0][:160] if r["reason"] else ""
            print(f"    {n} [{tag}] {text}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    total, passed, pct = len(results), result.passed, result.percent
    print(f"({result.seconds:.1f}s)", file=sys.stderr)
    print(f"conformance: {passed} passed, {total - passed} failed of {total} ({pct:.2f}%)")
    return 1 if args.min_percent is not None and pct < args.min_percent else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ep_core.tools.conformance ...``: the same as ``ep-core conformance ...``."""
    from ep_core.tools.cli import main as cli_main

    return cli_main(["conformance", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
