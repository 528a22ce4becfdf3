"""Runtime parity: run node test cases and real models on the EP under test (CPU fallback on, as
a user would run it) and on the reference EP (the oracle), and say per case what happened.

Statuses, in the order they win:

* ``skipped``  not run, with the reason (too large for this run, simulator, ...);
* ``timeout``  the EP under test did not finish the case within the case timeout (its worker
               process was stopped);
* ``error``    the EP-under-test session could not be created or run;
* ``fallback`` no node ran on the EP under test (everything fell back) - never a pass;
* ``fail``     some node ran on the EP and the outputs are wrong: for node tests against the
               case's expected outputs, for models against the reference EP's outputs;
* ``fallback`` (partial) right outputs, but some nodes ran on another EP: they are listed;
* ``pass``     every node ran on the EP under test and the outputs are right.

Node tests are also compared against the reference EP; that comparison is recorded, not judged,
because the reference EP is itself checked against the same expected outputs.

Each run of a case on one EP is a :class:`RunJob`, plain data that ``ep_core.tools.sweep`` runs in
this process, in worker processes under a timeout, or as Ray tasks; the judging happens here."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ep_core.runtime.discover import PluginRegistry
from ep_core.tools.parity.cases import Case
from ep_core.tools.parity.compare import Comparison, compare_outputs, json_float
from ep_core.tools.parity.families import family_of
from ep_core.tools.sweep import Executor, Outcome, RegisterEps, run_cases

STATUSES = ("pass", "fail", "error", "timeout", "fallback", "skipped")
# Ops whose outputs are random: only shapes and dtypes can be compared.
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}
)
_WORST = {"error": 5, "timeout": 4, "fail": 3, "fallback": 2, "pass": 1, "skipped": 0}


@dataclass
class RunResult:
    """One session's outputs (per data set), which EP ran each node, or the error."""

    outputs: list[list[Any]] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    assignment: dict[str, dict[str, Any]] = field(default_factory=dict)
    op_types: dict[str, str] = field(default_factory=dict)
    declined: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    timed_out: bool = False


def _op_types(graph: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for n in graph.all_nodes:
        q = f"{prefix}/{n.name}" if prefix else n.name
        out[q] = n.op_type
        for attr, sub in n.subgraphs.items():
            out.update(_op_types(sub, f"{q}/{attr}"))
    return out


def _decline_reasons(sess: Any, provider: str, assignment: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Why ``provider`` did not take each main-graph node that ran elsewhere: its registry's
    lookup miss (versions, types), else a rejected claim from the partition diagnostics."""
    mine = next((ep for ep in sess.execution_providers if ep.name == provider), None)
    if mine is None:
        return {}
    rejected = [d for d in sess.get_partition_diagnostics() if d.startswith(f"{provider} claim")]
    fuses = callable(getattr(mine.ep, "ep_compile", None))
    out: dict[str, str] = {}
    for name, a in assignment.items():
        if a["ep"] == provider:
            continue
        why = next((d for d in rejected if repr(name) in d), "")
        if not why:
            try:
                node = sess.graph.node(name)
            except KeyError:  # a subgraph node: its own graph is not at hand
                continue
            why = mine.decline_reason(node) if mine.kernel_registry is not None else ""
            if fuses and (not why or " has no kernel for " in why):
                why = f"{provider} did not put it in a fused group" + (f" and {why.split(' ', 1)[1]}" if why else "")
            why = why or f"{provider} did not claim it"
        out[name] = why[:300]
    return out


def _short_error(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def execute(case: Case, provider: str, registry: PluginRegistry | None) -> RunResult:
    """Create a session for ``provider`` (fallback on) and run every data set of ``case``. One
    intra-op thread: BLAS sums in an order that depends on its thread count, and the adaptive
    default follows the machine's load, so a report would differ in the last bits between a quiet
    and a busy machine (or between a sweep's workers and the calling process)."""
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.session import InferenceSession

    result = RunResult()
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            opts = SessionOptions(intra_op_num_threads=1)
            sess = InferenceSession(case.model_bytes, opts, providers=[provider], registry=registry)
            try:
                result.output_names = [o.name for o in sess.get_outputs()]
                for feed in case.feeds:
                    result.outputs.append(list(sess.run(None, feed)))
                result.assignment = sess.get_node_assignment()
                result.op_types = _op_types(sess.graph)
                result.declined = _decline_reasons(sess, provider, result.assignment)
            finally:
                sess.close()
    except Exception as exc:  # an EP may raise anything; the report records it
        result.error = _short_error(exc)
    result.seconds = time.perf_counter() - t0
    return result


@dataclass(frozen=True)
class RunJob:
    """One session run a sweep hands to a worker: ``case`` on ``provider``."""

    case: Case
    provider: str


def run_job(job: RunJob, registry: PluginRegistry | None = None) -> RunResult:
    """A worker's ``run_one``: with no registry, the worker's own (its installed EPs)."""
    return execute(job.case, job.provider, registry)


def _as_run(outcome: Outcome[RunResult], provider: str) -> RunResult:
    if outcome.status == "ok" and outcome.value is not None:
        return outcome.value
    if outcome.status == "timeout":
        why = f"{outcome.error} on {provider} (the case timeout); the worker running it was stopped"
        return RunResult(error=why, timed_out=True, seconds=outcome.seconds)
    return RunResult(error=outcome.error, seconds=outcome.seconds)


def _compare(run: RunResult, expected: Sequence[Sequence[Any]], case: Case) -> Comparison:
    out = Comparison(True)
    for got, want in zip(run.outputs, expected, strict=False):
        out = out.merge(
            compare_outputs(
                list(got), list(want), run.output_names, case.rtol, case.atol, case.op_type not in RANDOM_OPS
            )
        )
    return out


def judge_case(case: Case, ep_name: str, mine: RunResult | None, oracle: RunResult | None) -> dict[str, Any]:
    """The report entry of one case from the two runs (``mine`` None only when skipped)."""
    entry: dict[str, Any] = {
        "name": case.name,
        "kind": case.kind,
        "op_type": case.op_type,
        "domain": case.domain,
        "family": family_of(case.op_type, case.domain) if case.kind == "node" else "model",
        "expanded": case.expanded,
        "input_elements": case.input_elements,
        "status": "skipped",
        "reason": case.skip_reason or "",
        "max_abs_err": None,
        "max_rel_err": None,
        "vs_expected": None,
        "vs_reference": None,
        "reference_status": "not run",
        "reference_error": None,
        "nodes_total": 0,
        "nodes_on_ep": 0,
        "fused_groups": 0,
        "fallback_nodes": [],
        "ep_counts": {},
        "seconds": 0.0,
    }
    if case.kind == "model":
        entry["model_ops"] = case.meta.get("ops", [])
    if mine is None:
        return entry
    entry["seconds"] = round(mine.seconds + (oracle.seconds if oracle is not None and oracle is not mine else 0.0), 4)
    if oracle is not None:
        entry["reference_status"] = "error" if oracle.error else "ok"
        entry["reference_error"] = oracle.error
    if mine.error is not None:
        entry["status"] = "timeout" if mine.timed_out else "error"
        entry["reason"] = mine.error
        return entry
    on_ep = [n for n, a in mine.assignment.items() if a["ep"] == ep_name]
    others = [
        {"node": n, "op_type": mine.op_types.get(n, "?"), "ep": a["ep"], "why": mine.declined.get(n, "")}
        for n, a in mine.assignment.items()
        if a["ep"] != ep_name
    ]
    counts: dict[str, int] = {}
    for a in mine.assignment.values():
        counts[a["ep"]] = counts.get(a["ep"], 0) + 1
    entry["ops_on_ep"] = sorted({mine.op_types.get(n, "?") for n in on_ep})
    entry.update(
        nodes_total=len(mine.assignment),
        nodes_on_ep=len(on_ep),
        fused_groups=len({a["fused_node"] for a in mine.assignment.values() if a["ep"] == ep_name and a["fused_node"]}),
        fallback_nodes=others,
        ep_counts=counts,
    )
    if case.kind == "model":  # the full node -> EP map; node tests have one node, ep_counts says it
        entry["assignment"] = {n: a["ep"] for n, a in mine.assignment.items()}
    vs_expected = _compare(mine, case.expected, case) if case.expected is not None else None
    vs_reference = None
    if oracle is not None and oracle.error is None:
        vs_reference = _compare(mine, oracle.outputs, case)
    entry["vs_expected"] = vs_expected.to_json() if vs_expected is not None else None
    entry["vs_reference"] = vs_reference.to_json() if vs_reference is not None else None
    primary = vs_expected if case.kind == "node" else vs_reference
    if primary is not None:
        entry["max_abs_err"] = json_float(primary.max_abs_err)
        entry["max_rel_err"] = json_float(primary.max_rel_err)
    where = sorted({o["ep"] for o in others})
    if not on_ep:
        entry["status"] = "fallback"
        entry["reason"] = f"no node ran on {ep_name}; all {len(others)} ran on {', '.join(where) or 'nothing'}"
    elif primary is None:
        entry["status"] = "error"
        entry["reason"] = f"oracle unavailable: the reference EP failed ({oracle.error if oracle else 'not run'})"
    elif not primary.ok:
        entry["status"] = "fail"
        against = "expected outputs" if case.kind == "node" else "reference EP outputs"
        entry["reason"] = f"vs {against}: {primary.mismatch}"
        if case.kind == "node" and vs_reference is not None and vs_reference.ok:
            entry["reason"] += " (matches the reference EP, which is also off)"
    elif others:
        entry["status"] = "fallback"
        ops = sorted({o["op_type"] for o in others})
        entry["reason"] = (
            f"partial fallback: {len(others)} of {len(mine.assignment)} nodes ran on "
            f"{', '.join(where)} ({', '.join(ops)})"
        )
    else:
        entry["status"] = "pass"
        if case.op_type in RANDOM_OPS:
            entry["reason"] = "random op: only shapes and dtypes compared"
        elif vs_reference is not None and not vs_reference.ok:
            entry["reason"] = f"matches expected outputs; differs from the reference EP: {vs_reference.mismatch}"
    return entry


def _runner(
    executor: Executor | None, registry: PluginRegistry | None
) -> tuple[Callable[[RunJob], RunResult], dict[str, Any]]:
    """run_one and the ``run_cases`` arguments for ``executor``: in this process the runs use
    ``registry`` itself; workers rebuild its hand-registered EPs (``setup``) and, on Ray, ask for
    the resources of the EP each run needs."""
    from ep_core.runtime.discover import get_registry
    from ep_core.tools.parity.report import ParityUsageError

    if executor is None or executor.in_process:
        return functools.partial(run_job, registry=registry), {}
    if registry is not None and registry is not get_registry():
        raise ParityUsageError(
            "a registry other than the process's own cannot be sent to worker processes; run in this process "
            "(case_timeout=0, no cluster) or register the EPs in the process registry"
        )
    needs: dict[str, dict[str, float]] = {}

    def resources(job: RunJob) -> dict[str, float]:
        from ep_core.tools.sweep.ray_executor import ep_resources

        if job.provider not in needs:
            needs[job.provider] = ep_resources(job.provider, registry)
        return needs[job.provider]

    return run_job, {"setup": RegisterEps.from_registry(registry), "resources": resources}


def _worse(a: float | str | None, b: float | str | None) -> float | str | None:
    if a is None:
        return b
    if b is None:
        return a
    if "nan" in (a, b):
        return "nan"
    if "inf" in (a, b):
        return "inf"
    return max(float(a), float(b))  # type: ignore[arg-type]


def aggregate(
    cases: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], tuple[str, ...]]
) -> dict[tuple[str, ...], dict[str, Any]]:
    """Counts per status, worst status, and worst errors over the cases where the EP under test
    ran at least one node."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for c in cases:
        g = groups.setdefault(
            key(c),
            {
                "cases": 0,
                "counts": dict.fromkeys(STATUSES, 0),
                "status": "skipped",
                "max_abs_err": None,
                "max_rel_err": None,
                "failed_cases": [],
            },
        )
        g["cases"] += 1
        g["counts"][c["status"]] += 1
        if _WORST[c["status"]] > _WORST[g["status"]]:
            g["status"] = c["status"]
        if c["nodes_on_ep"] > 0:  # a full fallback measures the other EP, not this one
            g["max_abs_err"] = _worse(g["max_abs_err"], c["max_abs_err"])
            g["max_rel_err"] = _worse(g["max_rel_err"], c["max_rel_err"])
        if c["status"] in ("fail", "error", "timeout"):
            g["failed_cases"].append(c["name"])
    return groups


def is_defect(case: dict[str, Any]) -> bool:
    """A result that is the EP's fault: wrong numbers, or an error or a timeout on a case the oracle runs."""
    return case["status"] == "fail" or (case["status"] in ("error", "timeout") and case["reference_status"] == "ok")


def runtime_report(
    ep_name: str,
    reference: str,
    node_cases: Sequence[Case],
    model_cases: Sequence[Case],
    registry: PluginRegistry | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    filters: dict[str, Any] | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """The ``runtime`` section of the report (see report.schema.json). The runs go to ``executor``
    (default: this process); a worker gets the EPs installed where it runs and those ``registry``
    has by hand, never the registry object itself."""
    cases = list(node_cases) + list(model_cases)
    jobs = [RunJob(c, p) for c in cases if not c.skip_reason for p in dict.fromkeys((ep_name, reference))]
    left = {id(c): 1 if ep_name == reference else 2 for c in cases if not c.skip_reason}
    done = len(cases) - len(left)
    if progress is not None and cases:
        progress(done, len(cases), "")

    def on_done(i: int, outcome: Outcome[Any]) -> None:
        nonlocal done
        case = jobs[i].case
        left[id(case)] -= 1
        if left[id(case)] == 0 and progress is not None:
            done += 1
            progress(done, len(cases), case.name)

    run_one, extra = _runner(executor, registry)
    runs = run_cases(jobs, run_one, executor, on_done=on_done, **extra)
    by_job = {(id(j.case), j.provider): _as_run(o, j.provider) for j, o in zip(jobs, runs)}
    results: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    for case in cases:
        if case.skip_reason:
            entry = judge_case(case, ep_name, None, None)
        else:
            entry = judge_case(case, ep_name, by_job[(id(case), ep_name)], by_job[(id(case), reference)])
        (results if case.kind == "node" else models).append(entry)
    everything = results + models
    totals = dict.fromkeys(STATUSES, 0)
    for c in everything:
        totals[c["status"]] += 1
    ran = len(everything) - totals["skipped"]
    observed: dict[str, int] = {}
    for c in everything:
        for op in c.get("ops_on_ep", ()):
            observed[op] = observed.get(op, 0) + 1
    ops = aggregate(results, lambda c: (c["domain"], c["op_type"]))
    fams = aggregate(results, lambda c: (c["family"],))
    return {
        "reference_ep": reference,
        "filters": filters or {},
        "totals": {**totals, "total": len(everything), "ran": ran},
        "pass_rate": round(100.0 * totals["pass"] / ran, 2) if ran else None,
        "defects": sum(1 for c in everything if is_defect(c)),
        "observed_ops": dict(sorted(observed.items())),
        "ops": [
            {"domain": d, "op_type": o, "family": family_of(o, d), **g}
            for (d, o), g in sorted(ops.items(), key=lambda kv: (kv[0][0], kv[0][1]))
        ],
        "families": {
            f: {
                "cases": g["cases"],
                "counts": g["counts"],
                "status": g["status"],
                "max_abs_err": g["max_abs_err"],
                "max_rel_err": g["max_rel_err"],
            }
            for (f,), g in sorted(fams.items())
        },
        "cases": results,
        "models": models,
    }
