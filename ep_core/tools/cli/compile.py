"""``ep-core compile``: write the compiled (EPContext) model of MODEL with the compile API."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ep_core.sdk.errors import EpCoreError, InvalidArgument
from ep_core.tools.cli._common import add_provider_args, print_json, provider_list, snapshot, written_files


def parse_options(items: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` session config entries."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--option {item!r} must look like KEY=VALUE (a session config entry)")
        out[key] = value
    return out


_CLI_REMEDIES = {
    "leave out the compile API flag ERROR_IF_OUTPUT_FILE_EXISTS": "pass --overwrite",
    "the compile API flag ERROR_IF_NO_NODES_COMPILED makes this an error": (
        "pass --allow-nothing-compiled to write the copy of the source model anyway"
    ),
}


def _compile(args: argparse.Namespace) -> int:
    from ep_core.runtime.compile_api import CompileApiFlags, ModelCompiler
    from ep_core.runtime.options import SessionOptions

    model = Path(args.model)
    out = (
        Path(args.output)
        if args.output
        else model.with_name((model.name[:-5] if model.name.endswith(".onnx") else model.name) + "_ctx.onnx")
    )
    opts = SessionOptions()
    for key, value in parse_options(args.option).items():
        opts.add_session_config_entry(key, value)
    if args.prefix:
        opts.add_session_config_entry("ep.context_node_name_prefix", args.prefix)
    flags = CompileApiFlags.NONE
    if not args.allow_nothing_compiled:
        flags |= CompileApiFlags.ERROR_IF_NO_NODES_COMPILED
    if not args.overwrite:
        flags |= CompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS
    compiler = ModelCompiler(
        opts,
        str(model),
        embed_compiled_data_into_model=args.embed,
        external_initializers_file_path=args.external_initializers,
        flags=flags,
        providers=provider_list(args),
        config=args.config,
    )
    before = snapshot(out.parent)
    t0 = time.perf_counter()
    try:
        path = compiler.compile_to_file(out)
    except EpCoreError as exc:  # the compile API's remedies, said as this command's flags
        text = exc.message
        for api, cli in _CLI_REMEDIES.items():
            text = text.replace(api, cli)
        raise type(exc)(text) from exc
    result: dict[str, Any] = {
        "model": str(model),
        "output": path,
        "epcontext_nodes": compiler.nodes_compiled,
        "embed_mode": int(args.embed),
        "seconds": round(time.perf_counter() - t0, 3),
        "files": written_files(Path(path).parent, before, [path]),
    }
    print_json(result)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("compile", help="write the compiled (EPContext) model of an ONNX model")
    p.add_argument("model", metavar="MODEL", help="the .onnx model to compile")
    p.add_argument("-o", "--output", help="output path (default: MODEL_ctx.onnx beside MODEL)")
    add_provider_args(p)
    p.add_argument("--embed", action="store_true", help="embed context payloads in the model (embed_mode=1)")
    p.add_argument(
        "--external-initializers",
        metavar="FILE",
        help="put every initializer of the output in FILE (relative to the output's folder)",
    )
    p.add_argument("--prefix", help="ep.context_node_name_prefix for node, partition and graph names")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument(
        "--allow-nothing-compiled", action="store_true", help="write the model even when no EP compiled anything"
    )
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="session config entry (repeatable)")
    p.add_argument("--json", action="store_true", help="errors as JSON too (the result is always JSON)")
    p.set_defaults(func=_compile)
