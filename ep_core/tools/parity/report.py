"""``build_report``: the one entry point behind the CLI and the Python API. It returns the report
as JSON-ready data (the renderers and the JSON file read nothing else), validated in tests against
``report.schema.json``."""

from __future__ import annotations

import datetime as _dt
import difflib
import os
import platform
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ep_core.runtime.discover import PluginRegistry, get_registry
from ep_core.tools.parity.introspect import EpDescription, EpLoadFailure, describe_ep, reference_ep_name

if TYPE_CHECKING:
    from ep_core.tools.sweep import Executor

SCHEMA_VERSION = "1.1"  # 1.1: the "timeout" status (and its count)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_EP_LOAD = 0, 1, 2, 3


class ParityUsageError(ValueError):
    """A bad argument (regex, model name, empty selection): exit code 2."""


@dataclass
class ParityReport:
    data: dict[str, Any]

    @property
    def score(self) -> float | None:
        return self.data["summary"]["score"]

    @property
    def defects(self) -> int:
        return int(self.data["summary"]["defects"])

    def exit_code(self, fail_under: float | None = None) -> int:
        """0 when nothing is wrong; 1 when a case failed (wrong numbers, or an error on a case the
        reference EP runs) or the score is under ``fail_under`` percent."""
        if self.defects:
            return EXIT_FAILED
        if fail_under is not None and (self.score is None or self.score < fail_under):
            return EXIT_FAILED
        return EXIT_OK


def _ep_json(desc: EpDescription) -> dict[str, Any]:
    return {
        "name": desc.name,
        "version": desc.version,
        "vendor": desc.vendor,
        "devices": desc.devices,
        "kind": desc.kind,
        "fusable_declared": desc.fusable_declared,
    }


def _environment() -> dict[str, Any]:
    import numpy
    import onnx

    import ep_core

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "onnx": onnx.__version__,
        "numpy": numpy.__version__,
        "ep_core": ep_core.__version__,
        "cuda_simulator": os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1",
    }


def build_report(
    ep: str,
    *,
    static: bool = True,
    runtime: bool = False,
    node_tests: bool = True,
    ops: Sequence[str] | None = None,
    filter: str | None = None,
    models: Sequence[str] = (),
    include_expanded: bool = True,
    only_ep_ops: bool = False,
    max_elements: int | None = None,
    skip_models_reason: str | None = None,
    reference: str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    registry: PluginRegistry | None = None,
    cluster: "str | Executor | None" = None,
    case_timeout: float | None = None,
) -> ParityReport:
    """Static and/or runtime parity of ``ep`` against the reference EP and the ONNX schemas.

    Runtime mode runs the node test cases (exact ``ops`` and/or the ``filter`` regex; with
    ``only_ep_ops`` just the ops the EP declares) and the zoo ``models``. ``max_elements`` and
    ``skip_models_reason`` keep slow EPs (simulators) bounded; what they leave out is listed as
    skipped with the reason.

    Where the cases run (``ep_core.tools.sweep.make_executor``): in this process by default; in
    worker processes here with ``case_timeout`` seconds (a case that overruns it is reported
    ``timeout``); as Ray tasks with ``cluster`` = ``"local"``, ``"auto"`` or ``"ray://HOST:PORT"``
    (``case_timeout`` None is then 120 s, 0 none). The report is the same wherever they run.
    Raises ``EpLoadFailure`` (exit 3), ``ParityUsageError`` (exit 2), or a ``ClusterError`` (an
    ``InvalidArgument``, exit 2) when the cluster cannot run them."""
    from ep_core.tools.parity.cases import model_case, node_cases, node_test_ops
    from ep_core.tools.parity.runtime import runtime_report
    from ep_core.tools.parity.static import static_report
    from ep_core.tools.sweep import make_executor
    from ep_core.tools.zoo import MODELS

    if not static and not runtime:
        raise ParityUsageError("nothing to do: ask for static and/or runtime parity")
    if not runtime and (cluster is not None or case_timeout is not None):
        raise ParityUsageError("cluster and case_timeout given, but static parity runs no case (ask for runtime=True)")
    executor = make_executor(cluster, case_timeout) if runtime else None
    if filter:
        try:
            re.compile(filter)
        except re.error as exc:
            raise ParityUsageError(f"--filter {filter!r} is not a valid regular expression: {exc}") from None
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ParityUsageError(f"unknown model(s) {unknown}; known zoo models: {sorted(MODELS)}")
    if runtime and node_tests and ops:
        known = node_test_ops()
        bad = [o for o in ops if o not in known]
        if bad:
            hints = {o: difflib.get_close_matches(o, known, n=1) for o in bad}
            said = ", ".join(f"{o!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for o, h in hints.items())
            raise ParityUsageError(f"no ONNX node test exercises op {said}; op names are case-sensitive ONNX op types")
    registry = registry or get_registry()
    ref_name = reference or reference_ep_name(registry)
    desc = describe_ep(ep, registry)
    ref_desc = desc if ref_name == ep else describe_ep(ref_name, registry)
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "tool": "ep-core parity-report",
        "environment": _environment(),
        "ep": _ep_json(desc),
        "reference": _ep_json(ref_desc),
        "modes": [m for m, on in (("static", static), ("runtime", runtime)) if on],
        "static": None,
        "runtime": None,
    }
    if static:
        data["static"] = static_report(desc, ref_desc)
    if runtime:
        declared = {(k.domain_key, k.op_type) for k in desc.kernel_defs + desc.fusable}
        predicate = (lambda d, o: (d, o) in declared) if only_ep_ops else None
        cases = node_cases(ops, filter, include_expanded, max_elements, predicate) if node_tests else []
        mcases = []
        for m in models:
            c = model_case(m)
            if skip_models_reason:
                c.skip_reason = skip_models_reason
            mcases.append(c)
        if not cases and not mcases:
            raise ParityUsageError(
                f"the runtime selection is empty (ops={list(ops or [])}, filter={filter!r}, only_ep_ops={only_ep_ops}, "
                f"models={list(models)}); widen the filter or name models"
            )
        filters = {
            "ops": list(ops or []),
            "filter": filter,
            "include_expanded": include_expanded,
            "only_ep_ops": only_ep_ops,
            "max_elements": max_elements,
            "node_tests": node_tests,
            "models": list(models),
            "skip_models_reason": skip_models_reason,
        }
        data["runtime"] = runtime_report(ep, ref_name, cases, mcases, registry, progress, filters, executor)
    data["summary"] = _summary(data)
    return ParityReport(data)


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    rt, st = data["runtime"], data["static"]
    if rt is not None:
        score, basis = rt["pass_rate"], "runtime: percent of cases run that passed on the EP itself"
        defects = rt["defects"]
    else:
        score, basis = (
            st["coverage_vs_onnx"]["ops_latest"]["percent"],
            "static: percent of ONNX ops covered at their newest opset",
        )
        defects = 0
    return {"score": score, "score_basis": basis, "defects": defects}


__all__ = [
    "build_report",
    "ParityReport",
    "ParityUsageError",
    "EpLoadFailure",
    "SCHEMA_VERSION",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_EP_LOAD",
]
