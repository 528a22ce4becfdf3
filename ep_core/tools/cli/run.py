"""``ep-core run``: run a model on the chosen providers and show what it answered and what ran where.

Inputs are made up valid for the model (``_feeds``) unless given with ``--input`` (``_files``);
the session comes from the EPContext cache when an earlier run compiled it (``_session``); the
answer is summarised per output, with the top classes of a classifier (``_outputs``)."""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import InvalidGraph, NoSuchFile
from ep_core.tools.cli._common import (
    UsageError,
    add_provider_args,
    print_json,
    provider_list,
    provider_options,
)
from ep_core.tools.parity.introspect import normalize_fusable

if TYPE_CHECKING:
    from ep_core.runtime.session import InferenceSession
    from ep_core.sdk.graph import GraphView


def _load_graph(model: Path) -> "GraphView":
    """The original model's main graph, read before any session (inputs are planned from it)."""
    import onnx

    from ep_core.sdk.graph import GraphView, opset_map

    if not model.is_file():
        raise NoSuchFile(f"model file {str(model)!r} does not exist")
    try:
        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - whatever onnx raises, the file is no model
        raise InvalidGraph(f"{model} is not a valid ONNX model: {' '.join(str(exc).split())[:200]}") from None
    return GraphView(proto.graph, opset_map(proto))


def _check_args(args: argparse.Namespace) -> None:
    if bool(args.model) == bool(args.zoo):
        raise UsageError("give either MODEL or --zoo NAME (`ep-core run --help` lists the zoo)")
    for flag, value in (("--repeat", args.repeat), ("--top-k", args.top_k)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if args.save_outputs:  # refuse before the session, not after the run
        target = Path(args.save_outputs).absolute()
        folder = target.parent if target.suffix == ".npz" else target
        existing = next(p for p in [folder, *folder.parents] if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK):
            raise UsageError(
                f"--save-outputs {args.save_outputs}: {existing} is not a writable folder; give a writable PATH.npz or folder"
            )


def _feed(args: argparse.Namespace, graph: "GraphView", conventions: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The feed, how each input was made, and what the files gave (for row names)."""
    from ep_core.tools.cli import _feeds, _files

    dims = _feeds.parse_dims(args.dim, graph)
    parsed = _files.parse(args.input, graph)
    specs = _feeds.plan(graph, dims, conventions)
    given = _files.load(parsed, specs, conventions, args.zoo)
    bound = {}
    for name, arr in given.feed.items():
        for axis, d in enumerate(specs[name].declared or ()):
            if _feeds.is_symbol(d) and axis < getattr(arr, "ndim", 0):
                bound[str(d)] = int(arr.shape[axis])
    if bound:
        specs = _feeds.plan(graph, dims, conventions, bound)
    rest = {n: s for n, s in specs.items() if n not in given.feed}
    if given.sample_rate:
        for s in rest.values():
            if s.how.startswith("sample rate"):
                s.fill, s.how = float(given.sample_rate), f"sample rate {given.sample_rate} Hz (of the audio file)"
    feed = {**_feeds.synthesise(rest, args.seed), **given.feed}
    inputs = {
        n: {"shape": list(getattr(feed[n], "shape", ())), "dtype": str(feed[n].dtype), "how": given.how.get(n, s.how)}
        for n, s in specs.items()
    }
    return {n: feed[n] for n in specs}, inputs, given


def _per_ep(sess: "InferenceSession") -> list[dict[str, Any]]:
    """Per provider, in priority order: nodes, fused groups, EPContext nodes."""
    assignment = sess.get_node_assignment()
    ops = {n.name: n.op_type for n in sess.graph.all_nodes}
    rows = []
    for name in sess.get_providers():
        mine = {n: a for n, a in assignment.items() if a["ep"] == name}
        rows.append(
            {
                "ep": name,
                "nodes": len(mine),
                "fused_groups": len({a["fused_node"] for a in mine.values() if a["fused_node"]}),
                "epcontext_nodes": sum(ops.get(n) == "EPContext" for n in mine),
            }
        )
    return rows


def why_idle(sess: "InferenceSession", per_ep: list[dict[str, Any]], asked: list[str]) -> dict[str, str]:
    """For each provider asked for (``asked``) that got no node, why: the providers before it took everything, or per op
    type what it said when asked (its kernels' opset ranges and type constraints, ops it does not
    fuse, claims the core rejected, kernels its registry refused)."""
    assignment = sess.get_node_assignment()
    eps = sess.execution_providers
    diagnostics = sess.get_partition_diagnostics()
    out: dict[str, str] = {}
    for i, row in enumerate(per_ep):
        if row["nodes"] or row["ep"] not in asked:
            continue
        ep = eps[i]
        earlier = {e.name for e in eps[:i]}
        offered = [n for n in sess.graph.all_nodes if assignment.get(n.name, {}).get("ep") not in earlier]
        if not offered:
            out[ep.name] = "the providers before it in priority order took every node"
            continue
        fusable = {d.op_type for d in normalize_fusable(ep.name, ep.handle.call("ep_factory_get_fusable_ops"))}
        counts = Counter(n.op_type for n in offered)
        reasons: dict[str, str] = {}
        for n in offered:
            if n.op_type not in reasons:
                why = ep.decline_reason(n)
                if n.op_type in fusable:
                    why = f"fusable, but not claimed ({why})"
                reasons[n.op_type] = why
        shown = [f"{op} x{c}: {reasons[op]}" for op, c in counts.most_common(4)]
        more = len(counts) - len(shown)
        text = f"declined all {len(offered)} node(s) it was offered; " + "; ".join(shown)
        if more > 0:
            text += f"; and {more} more op type(s)"
        mine = [d for d in diagnostics if d.startswith(ep.name)]
        if mine:
            text += f"; {len(mine)} diagnostic(s), first: {mine[0]}"
        out[ep.name] = text
    return out


def _run(args: argparse.Namespace) -> int:
    from ep_core.runtime.discover import get_registry
    from ep_core.runtime.options import SessionOptions
    from ep_core.tools import zoo
    from ep_core.tools.cli import _outputs, _session

    _check_args(args)
    info = zoo.model_info(args.zoo) if args.zoo else None
    model = zoo.fetch_model(args.zoo) if args.zoo else Path(args.model)
    graph = _load_graph(model)
    conventions = info.conventions if info else None
    feed, inputs, given = _feed(args, graph, conventions)

    providers: list[Any] | None = provider_list(args)
    asked = _session.requested(providers, args.config)
    fallback = get_registry().cpu_fallback()
    options = provider_options(args.provider_option, asked or ([fallback.name] if fallback else []))
    opts = SessionOptions(enable_profiling=bool(args.profile))
    if options and not asked:
        providers = list(options)
    for ep, values in options.items():
        for key, value in values.items():
            opts.add_session_config_entry(f"ep.{ep}.{key}", value)
    made = _session.create(model, opts, providers, args.config, use_cache=not args.no_cache)
    sess = made.session

    times: list[float] = []
    outputs: list[Any] = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        outputs = sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    out_names = [o.name for o in sess.get_outputs()]
    labels = zoo.labels(args.zoo) if args.zoo else None
    summaries = [_outputs.summarize(n, v, labels, args.top_k) for n, v in zip(out_names, outputs)]
    per_ep = _per_ep(sess)
    assignment = sess.get_node_assignment()
    result: dict[str, Any] = {
        "model": str(model),
        "zoo": args.zoo,
        "providers": sess.get_providers(),
        "provider_options": sess.get_provider_options(),
        "session_creation_s": round(made.seconds, 4),
        "run_s_best": round(min(times), 6),
        "nodes_per_provider": {p["ep"]: p["nodes"] for p in per_ep},
        "fused_nodes": sorted({a["fused_node"] for a in assignment.values() if a["fused_node"]}),
        "per_provider": per_ep,
        "idle_providers": why_idle(sess, per_ep, asked or list(options)),
        "inputs": inputs,
        "rows": given.rows,
        "outputs": {s["name"]: s for s in summaries},
        "session": {
            "providers_startup_seconds": round(made.startup_seconds, 4),
            "seconds": round(made.seconds, 4),
            "source": made.source,
            "cache": str(made.cache_dir) if made.cache_dir else None,
            "first_session_seconds": round(made.first_seconds, 4) if made.first_seconds else None,
            "speedup": round(made.first_seconds / made.seconds, 1) if made.first_seconds else None,
        },
        "run": {"best_seconds": round(min(times), 6), "runs": len(times)},
        "notes": made.notes,
        "rejected_claims": sess.get_partition_diagnostics(),
    }
    if args.save_outputs:
        result["saved_outputs"] = _outputs.save(out_names, outputs, args.save_outputs)
    if args.show_assignment:
        result["assignment"] = assignment
    if args.profile:
        result["profile"] = sess.end_profiling() or None
        if result["profile"] is None:
            made.notes.append(
                "no profile was written: the provider config sets session_options.enable_profiling = false"
            )
    if args.json:
        print_json(result)
    else:
        from ep_core.tools.cli._show import show_run

        show_run(result, info)
    return 0


def register(subparsers: Any) -> None:
    from ep_core.tools.zoo import MODELS

    p = subparsers.add_parser(
        "run",
        help="run a model and show what it answered and what ran where",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", help="path of an .onnx model")
    p.add_argument("--zoo", metavar="NAME", help=f"a real model from the pinned zoo: {', '.join(MODELS)}")
    add_provider_args(p, options=True)
    p.add_argument(
        "--input",
        action="append",
        metavar="NAME=FILE",
        help="an input from a file (repeatable; FILE may be a glob; several files batch): .npy, .npz, an image, "
        ".wav audio, or raw bytes; FILE.npz alone feeds every array it holds by name. Other inputs are made up",
    )
    p.add_argument("--dim", action="append", metavar="SYMBOL=N", help="size of a symbolic dim, or INPUT:AXIS=N")
    p.add_argument("--seed", type=int, default=0, help="seed of the made-up inputs")
    p.add_argument("--repeat", type=int, default=1, help="runs to time (the best is shown)")
    p.add_argument("--top-k", type=int, default=3, metavar="K", help="classes shown per row of a classifier")
    p.add_argument("--save-outputs", metavar="PATH", help="write the outputs: PATH.npz, or a folder of NAME.npy")
    p.add_argument("--no-cache", action="store_true", help="neither load nor write the EPContext cache")
    p.add_argument("--show-assignment", action="store_true", help="print every node's provider")
    p.add_argument("--profile", action="store_true", help="write a Chrome trace and print its path")
    p.add_argument("--json", action="store_true", help="machine-readable output (errors too)")
    p.set_defaults(func=_run)
