"""``ep-core run``: run a model with random or given inputs and show what ran where."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import InvalidArgument
from ep_core.tools.cli._common import add_provider_args, print_json, provider_list


def random_feed(session: Any, dims: dict[str, int], seed: int = 0) -> dict[str, Any]:
    """Inputs matching the model's declared types; symbolic dims take ``dims`` or 1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feed: dict[str, Any] = {}
    for arg, info in zip(session.get_inputs(), session.graph.inputs):
        dtype = info.np_dtype
        if dtype is None:
            raise InvalidArgument(f"input {arg.name!r} has type {arg.type}; give it with --input {arg.name}=FILE.npy")
        shape = [d if isinstance(d, int) else dims.get(str(d), 1) for d in (info.shape or ())]
        if np.issubdtype(dtype, np.floating):
            feed[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feed[arg.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feed[arg.name] = rng.integers(0, 100, shape).astype(dtype)
    return feed


def _parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or ():
        if "=" not in item:
            raise InvalidArgument(f"{what} {item!r} must look like NAME=VALUE")
        k, _, v = item.partition("=")
        out[k] = v
    return out


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.session import InferenceSession

    if bool(args.model) == bool(args.zoo):
        raise InvalidArgument("give either MODEL or --zoo NAME")
    if args.zoo:
        from ep_core.tools.zoo import fetch_model

        model = fetch_model(args.zoo)
    else:
        model = Path(args.model)
    opts = SessionOptions(enable_profiling=bool(args.profile))
    t0 = time.perf_counter()
    sess = InferenceSession(str(model), opts, providers=provider_list(args), config=args.config)
    t_create = time.perf_counter() - t0
    dims = {k: int(v) for k, v in _parse_pairs(args.dim, "--dim").items()}
    feed = random_feed(sess, dims, args.seed)
    for name, path in _parse_pairs(args.input, "--input").items():
        feed[name] = np.load(path)
    times = []
    outputs: list[Any] = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        outputs = sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    assignment = sess.get_node_assignment()
    per_ep = Counter(a["ep"] for a in assignment.values())
    fused = sorted({a["fused_node"] for a in assignment.values() if a["fused_node"]})
    trace = sess.end_profiling() if args.profile else None
    providers = sess.get_providers()
    out_info = {
        o.name: {"shape": list(np.shape(v)), "dtype": str(getattr(v, "dtype", type(v).__name__))}
        for o, v in zip(sess.get_outputs(), outputs)
    }
    rejected = sess.get_partition_diagnostics()
    result: dict[str, object] = {
        "model": str(model),
        "providers": providers,
        "session_creation_s": round(t_create, 4),
        "run_s_best": round(min(times), 6),
        "nodes_per_provider": dict(per_ep),
        "fused_nodes": fused,
        "outputs": out_info,
        "rejected_claims": rejected,
    }
    if args.show_assignment:
        result["assignment"] = assignment
    if trace:
        result["profile"] = trace
    if args.json:
        print_json(result)
        return 0
    print(f"model      {model}")
    print(f"providers  {', '.join(providers)} (priority order)")
    print(f"session    created in {t_create * 1000:.1f} ms; best run {min(times) * 1000:.2f} ms of {len(times)}")
    print("nodes per provider:")
    for ep, n in per_ep.most_common():
        print(f"  {ep:40s} {n}")
    if fused:
        print(f"fused nodes: {len(fused)}")
    for name, info in out_info.items():
        print(f"output {name}: shape {info['shape']} {info['dtype']}")
    for line in rejected:
        print(f"rejected: {line}")
    if args.show_assignment:
        print("assignment (node -> provider [fused node]):")
        for node, a in assignment.items():
            extra = f" [{a['fused_node']}]" if a["fused_node"] else ""
            print(f"  {node:50s} {a['ep']}{extra}")
    if trace:
        print(f"profile: {trace}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a model with random or given inputs and show what ran where")
    p.add_argument("model", nargs="?", help="path of an .onnx model")
    p.add_argument("--zoo", help="a real model from the pinned zoo (magika, silero_vad, ppocr_det, ppocr_cls, ...)")
    add_provider_args(p)
    p.add_argument("--input", action="append", help="NAME=FILE.npy (repeatable); other inputs are random")
    p.add_argument("--dim", action="append", help="SYMBOL=SIZE for symbolic input dims (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="runs to time (best is shown)")
    p.add_argument("--show-assignment", action="store_true", help="print every node's provider")
    p.add_argument("--profile", action="store_true", help="write a Chrome trace and print its path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)
