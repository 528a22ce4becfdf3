"""The Numba CPU EP over the whole zoo: how much of each graph it claims, how long sessions take to
create (cold, from the per-machine kernel cache, from an EPContext model), and its latency against
onnxruntime's CPU EP and ep-core's NumPy reference EP, all at one thread, in one run.

    .venv/bin/python benchmarks/bench_numba_cpu_models.py [--models m ...] [--runs-seconds S]
                                                         [--no-sessions] [--no-latency]

Columns (issue 15's bars):
- caches: each sample's kernel cache and graph-optimizer cache are folders of this run, so "cold"
  is cold (nothing compiled or optimized before) and "cached" finds what "cold" left;
- "on EP": compute nodes (every node of the optimized main graph but Constant) the EP runs, of all;
- "cold": the first session of the model in a fresh process with an empty kernel cache (the EP's
  compile; imports of ep_core, NumPy and Numba are done before the clock starts); "cached": a
  second fresh process with the cache the first one filled; "ctx": a fresh process loading the
  EPContext model a third process wrote (embed mode 0, signed by this user's key);
- latencies: best over the time budget after one warm-up run, taken in interleaved slices (the
  engines in turn, five rounds: each ratio compares the same minutes of a drifting host), BLAS,
  Numba, the reference EP and onnxruntime all pinned to one thread. A model is "convolutional" when its graph has at least 5
  Conv/ConvInteger/QLinearConv nodes.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "cpu_reference"))
from bench_cpu_reference_models import _max_err, _ort, blas_note, interleaved  # noqa: E402
from test_real_models import MODELS, model_feed  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"
CACHE_ENV = "EP_NUMBA_CPU_KERNEL_CACHE_DIR"
OPT_CACHE_ENV = "EP_CORE_OPTIMIZER_CACHE_DIR"
CONV_OPS = {"Conv", "ConvInteger", "QLinearConv"}
CONTROL_FLOW = {"If", "Loop", "Scan"}


def _options(ctx_out: str | None = None, optimized: str | None = None):  # type: ignore[no-untyped-def]
    import ep_core

    so = ep_core.SessionOptions(intra_op_num_threads=1)
    if ctx_out:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", ctx_out)
        so.add_session_config_entry("ep.context_overwrite", "1")
    if optimized:
        so.optimized_model_filepath = optimized
    return so


def child(mode: str, model: str, extra: str) -> None:
    """One fresh-process sample: create a session, print its creation time and what it compiled."""
    import numba  # noqa: F401  (imported before the clock on every side)
    import numpy  # noqa: F401

    import ep_core

    so = _options(ctx_out=extra if mode == "write_ctx" else None, optimized=extra if mode == "count" else None)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ep_core.InferenceSession(model, so, providers=[NUMBA, REF])
    seconds = time.perf_counter() - t0
    from ep_numba_cpu.codegen import STATS

    out: dict = {"seconds": seconds, **{k: int(v) for k, v in STATS.items()}}
    if mode == "count":
        import onnx

        opt = onnx.load(extra, load_external_data=False)
        # an unnamed node is named as ep-core names it (GraphView: op type and index), as the assignment does
        ops = {n.name or f"{n.op_type}_{i}": n.op_type for i, n in enumerate(opt.graph.node)}
        assigned = sess.get_node_assignment()
        compute = [n for n, op in ops.items() if op != "Constant"]
        on_ep = [n for n in compute if assigned.get(n, {}).get("ep") == NUMBA]
        groups = {assigned[n]["fused_node"] for n in on_ep if assigned[n].get("fused_node")}
        left: dict[str, int] = {}
        for n in compute:
            if n not in on_ep:
                left[ops[n]] = left.get(ops[n], 0) + 1
        out.update(compute=len(compute), on_ep=len(on_ep), groups=len(groups), left=left)
    print(json.dumps(out))


def _sample(mode: str, model: str, cache: str, extra: str = "") -> dict:
    """One child process; ``cache`` holds its kernel cache and its graph-optimizer cache."""
    env = dict(os.environ, **{CACHE_ENV: cache, OPT_CACHE_ENV: f"{cache}-optimized"})
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, model, extra], capture_output=True, text=True, env=env
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {
            "error": proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else f"exit {proc.returncode}"
        }
    return json.loads(lines[-1])


def sessions(name: str, path: str) -> dict:
    """Cold, cached and EPContext session creation of one model, each in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "kernels")
        res = {"count": _sample("count", path, str(Path(tmp) / "empty"), str(Path(tmp) / "optimized.onnx"))}
        res["cold"] = _sample("create", path, cache)
        res["cached"] = _sample("create", path, cache)
        ctx = str(Path(tmp) / f"{name}_ctx.onnx")
        res["write_ctx"] = _sample("write_ctx", path, str(Path(tmp) / "cache2"), ctx)
        res["ctx"] = _sample("create", ctx, str(Path(tmp) / "cache3")) if Path(ctx).exists() else {"error": "no ctx"}
    return res


def latencies(path: str, feed: dict, budget: float) -> dict:
    import ep_core

    out: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_sess = _ort(path)
        want = ort_sess.run(None, feed)
        fns = {"ort": lambda: ort_sess.run(None, feed)}
        for key, providers in (("numba", [NUMBA, REF]), ("ref", [REF])):
            try:
                s = ep_core.InferenceSession(path, _options(), providers=providers)
                out[f"{key}_err"] = _max_err(s.run(None, feed), want)
                fns[key] = lambda s=s: s.run(None, feed)
            except Exception as exc:  # reported in the table, not hidden
                out[key] = None
                out[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        timed, errors = interleaved(fns, budget)
        out.update({k: v[0] for k, v in timed.items()})
        for key, why in errors.items():  # failed while timed: reported in the table, not hidden
            out[key] = None
            out[f"{key}_error"] = why
    return out


def _gmean(v: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--runs-seconds", type=float, default=1.0)
    ap.add_argument("--no-sessions", action="store_true")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return

    import onnx
    import scipy.linalg  # noqa: F401  (its BLAS too, for blas_note; Numba's np.dot uses it)

    from ep_core.tools.zoo import fetch_model

    print(f"# {blas_note()}", flush=True)
    rows = []
    for name in args.models:
        path = str(fetch_model(name))
        ops = [n.op_type for n in onnx.load(path, load_external_data=False).graph.node]
        row: dict = {
            "name": name,
            "conv": sum(op in CONV_OPS for op in ops) >= 5,
            "control_flow": any(op in CONTROL_FLOW for op in ops),
        }
        if not args.no_sessions:
            row.update(sessions(name, path))
        if not args.no_latency:
            row.update(latencies(path, model_feed(name), args.runs_seconds))
        rows.append(row)
        print(f"# {json.dumps(row)}", file=sys.stderr, flush=True)
    report(rows, args)


def _cell(d: dict | None, key: str = "seconds", fmt: str = "{:.2f}") -> str:
    if not d:
        return ""
    return fmt.format(d[key]) if key in d else f"error: {d.get('error', '?')}"


def report(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        "| model | conv | control flow | on EP (compute nodes) | groups | cold (s) | kernels compiled | cached (s) "
        "| compiled when cached | ctx (s) | cold / ctx | Numba (ms) | reference EP (ms) | ORT 1 thread (ms) "
        "| Numba / ORT | Numba / reference | max abs err vs ORT |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    conv_r, rest_r = [], []
    for r in rows:
        cnt = r.get("count", {})
        cov = (
            f"{cnt['on_ep']}/{cnt['compute']} ({100 * cnt['on_ep'] / max(cnt['compute'], 1):.0f}%)"
            if "on_ep" in cnt
            else ""
        )
        cold, ctx = r.get("cold", {}), r.get("ctx", {})
        speed = f"{cold['seconds'] / ctx['seconds']:.0f}x" if "seconds" in cold and "seconds" in ctx else ""
        lat = ""
        if r.get("numba") and r.get("ort"):
            ratio = r["numba"] / r["ort"]
            (conv_r if r["conv"] else rest_r).append(ratio)
            vs_ref = f"{r['numba'] / r['ref']:.2f}" if r.get("ref") else r.get("ref_error", "")
            lat = (
                f"{r['numba'] * 1e3:.2f} | {(r['ref'] or 0) * 1e3:.2f} | {r['ort'] * 1e3:.2f} | {ratio:.2f} "
                f"| {vs_ref} | {r.get('numba_err', float('nan')):.2g}"
            )
        elif not args.no_latency:
            lat = f"error: {r.get('numba_error') or r.get('ort_error', '?')} | | | | |"
        else:
            lat = "| | | | |"
        print(
            f"| {r['name']} | {'yes' if r['conv'] else ''} | {'yes' if r['control_flow'] else ''} | {cov} "
            f"| {cnt.get('groups', '')} | {_cell(cold)} | {_cell(cold, 'compiled', '{}')} | {_cell(r.get('cached'))} "
            f"| {_cell(r.get('cached'), 'compiled', '{}')} | {_cell(ctx, 'seconds', '{:.3f}')} | {speed} | {lat} |"
        )
    if conv_r or rest_r:
        print()
        print(
            f"geometric mean Numba / ORT-1-thread: {_gmean(conv_r):.2f}x over {len(conv_r)} convolutional models, "
            f"{_gmean(rest_r):.2f}x over {len(rest_r)} others"
        )


if __name__ == "__main__":
    main()
