"""``ep-core ctx-gen``: the weight-sharing workflow of the EP Context design in one command (like
ORT's ep_weight_sharing_ctx_gen): every model compiles into one shared context binary named after
the first model, the last session writes it; N models give N ``_ctx.onnx`` files plus one ``.bin``.

After the group, the files are checked: exactly one context binary was written and every context
model's primary EPContext nodes name it. An EP that ignores ``ep.share_ep_contexts`` (one file per
model, embedded contexts, or none) fails the command, and everything it wrote is removed."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import EpFail, InvalidArgument
from ep_core.tools.cli._common import print_json, snapshot, written_files


def parse_ep_options(text: str | None) -> dict[str, str]:
    """``"key|value key2|value2"`` as a dict (the ORT tool's spelling)."""
    out: dict[str, str] = {}
    for item in (text or "").split():
        key, sep, value = item.partition("|")
        if not sep or not key:
            raise InvalidArgument(f"-i entry {item!r} must look like key|value")
        out[key] = value
    return out


def generate_shared(
    models: list[Path],
    ep: str,
    ep_options: dict[str, str],
    session_entries: dict[str, str],
    output_dir: Path | None = None,
    overwrite: bool = False,
) -> list[str]:
    """Run the sharing group: one session per model, the last with ``ep.stop_share_ep_contexts=1``.
    Returns the context models written (the shared binary lies beside them)."""
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.session import InferenceSession
    from ep_core.sdk.epcontext.sharing import workspace

    if not models:
        raise InvalidArgument("ctx-gen needs at least one model")
    stems = [m.name[:-5] if m.name.endswith(".onnx") else m.name for m in models]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise InvalidArgument(
            f"ctx-gen: several models are named {twice}: their context models would be one file; rename them"
        )
    outs: list[str] = []
    ws = workspace(ep)
    if not ws.empty:
        raise InvalidArgument(f"a sharing group for {ep} is already open in this process; finish it first")
    folder = output_dir if output_dir is not None else models[0].parent
    before = snapshot(folder)
    try:
        for k, model in enumerate(models):
            opts = SessionOptions()
            for key, value in session_entries.items():
                opts.add_session_config_entry(key, value)
            opts.add_session_config_entry("ep.context_enable", "1")
            opts.add_session_config_entry("ep.context_embed_mode", "0")
            opts.add_session_config_entry("ep.share_ep_contexts", "1")
            if overwrite:
                opts.add_session_config_entry("ep.context_overwrite", "1")
            if k == len(models) - 1:
                opts.add_session_config_entry("ep.stop_share_ep_contexts", "1")
            opts.add_session_config_entry("ep.context_file_path", str(folder / f"{stems[k]}_ctx.onnx"))
            sess = InferenceSession(str(model), opts, providers=[(ep, ep_options)])
            outs.append(str(sess.context_model_path))
            sess.close()
    except BaseException:
        ws.clear_generation()
        for done in outs:  # the group is incomplete: its context models refer to a binary never written
            Path(done).unlink(missing_ok=True)
        raise
    try:
        check_shared(ep, outs, folder, before)
    except EpFail:
        for name, stat in snapshot(folder).items():  # everything this group wrote
            if before.get(name) != stat:
                (folder / name).unlink(missing_ok=True)
        raise
    return outs


def check_shared(ep: str, outs: list[str], folder: Path, before: dict[str, tuple[int, int]]) -> None:
    """``EpFail`` unless the group wrote exactly one context binary, in ``folder``, and every
    context model's main_context=1 EPContext nodes name it (embed_mode=0)."""
    import onnx

    from ep_core.sdk.epcontext.payload import ContextNode, is_ep_context_node

    referenced: set[str] = set()
    problems: list[str] = []
    for out in outs:
        model = onnx.load(out, load_external_data=False)
        nodes = [ContextNode.from_node(n) for n in model.graph.node if is_ep_context_node(n)]
        mains = [n for n in nodes if n.main_context == 1]
        if nodes and not mains:
            problems.append(f"{Path(out).name} has no main_context=1 EPContext node")
        for n in mains:
            if n.embed_mode != 0 or not n.ep_cache_context:
                problems.append(f"{Path(out).name}: node {n.name!r} embeds its context instead of naming a binary")
            else:
                referenced.add(os.path.realpath(Path(out).parent / n.relative_path))
    written = {os.path.realpath(folder / n) for n, st in snapshot(folder).items() if before.get(n) != st}
    written -= {os.path.realpath(o) for o in outs}
    if not problems and len(referenced) == 1 and referenced == written:
        return
    what = "; ".join(problems) or (
        f"its context models name {len(referenced)} context file(s) {sorted(Path(r).name for r in referenced)} and "
        f"it wrote {sorted(Path(w).name for w in written)}"
    )
    raise EpFail(
        f"ctx-gen: {ep} did not share one context binary between the {len(outs)} model(s) ({what}); the design "
        f"asks for N context models plus ONE [model_name]_[ep].bin. {ep} does not implement ep.share_ep_contexts: "
        "compile each model on its own with `ep-core compile`, or use an EP that shares contexts"
    )


def _ctx_gen(args: argparse.Namespace) -> int:
    models = [Path(m) for m in args.models.split(",") if m.strip()]
    entries: dict[str, str] = {}
    for item in args.option or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgument(f"--option {item!r} must look like KEY=VALUE")
        entries[key] = value
    folder = Path(args.output_dir) if args.output_dir else (models[0].parent if models else Path("."))
    before = snapshot(folder)
    t0 = time.perf_counter()
    outs = generate_shared(
        models,
        args.ep,
        parse_ep_options(args.i),
        entries,
        Path(args.output_dir) if args.output_dir else None,
        args.overwrite,
    )
    print_json(
        {
            "models": [str(m) for m in models],
            "context_models": outs,
            "files": written_files(folder, before, outs),
            "seconds": round(time.perf_counter() - t0, 3),
        }
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ctx-gen", help="generate EPContext models sharing one context binary (weight sharing)")
    p.add_argument("models", help="comma-separated models: m1.onnx,m2.onnx (the binary is named after m1)")
    p.add_argument("-e", "--ep", required=True, help="execution provider name (`ep-core providers` lists them)")
    p.add_argument("-i", metavar='"key|value ..."', help="provider options, space-separated key|value pairs")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="session config entry (repeatable)")
    p.add_argument("--output-dir", help="folder for every output (default: the first model's folder)")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    p.add_argument("--json", action="store_true", help="errors as JSON too (the result is always JSON)")
    p.set_defaults(func=_ctx_gen)
