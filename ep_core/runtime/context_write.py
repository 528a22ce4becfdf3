"""Writing the EPContext model (``<model>_ctx.onnx``) after the EPs compiled their groups.

The EPs hand back one EPContext node per fused node (``ep_get_ep_context_nodes``); each replaces the
nodes of its group. Every other node stays, with its initializers embedded (or all of them in
``ep.context_model_external_initializers_file_name``); graph inputs and outputs keep their order.
Every file (an EP's context binaries through ``ContextOutput.write_file``, the external initializers,
the model) is checked before it is written and again before it is renamed into place: generation
never writes a file it did not create in this run (unless ``ep.context_overwrite=1``), never the
source model or its data, never outside the output folder; a failure leaves nothing behind and
the staged files of a killed generation are removed by the next one (see ``ContextOutput``)."""

from __future__ import annotations

import functools
import mmap
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.optimizer.spelling import for_the_checker
from ep_core.runtime.compatibility import METADATA_PREFIX
from ep_core.runtime.contract import declared_outputs
from ep_core.sdk.epcontext.output import (
    EMBED_KEY,
    EXTERNAL_INIT_KEY,
    FILE_PATH_KEY,
    OVERWRITE_KEY,
    PREFIX_KEY,
    ContextOutput,
    check_name,
)
from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN, SINCE_VERSION, register_ep_context_schema
from ep_core.sdk.epcontext.sharing import sharing_enabled
from ep_core.sdk.errors import EpFail, Fail, InvalidArgument
from ep_core.sdk.graph import topo_order

if TYPE_CHECKING:
    from ep_core.runtime.engine import Built
    from ep_core.runtime.options import SessionOptions

NOTHING_COMPILED = "nothing was compiled"


@dataclass
class CompileRequest:
    """What the compile API asks of a build: its flags, whether the model goes to bytes, and what came out."""

    error_if_no_nodes_compiled: bool = False
    error_if_output_exists: bool = True
    to_bytes: bool = False
    result_bytes: bytes | None = None
    output_path: Path | None = None
    nodes_compiled: int = 0


# ---------------------------------------------------------------------------- where it goes
def output_path(options: "SessionOptions", model_path: Path | None, req: CompileRequest | None) -> Path | None:
    """The context model's path: ``ep.context_file_path``, else ``<model>_ctx.onnx`` beside the source.
    None when compiling to bytes. Errors when neither a path nor the option is known."""
    if req is not None and req.to_bytes:
        return None
    hint = options.get_session_config_entry(FILE_PATH_KEY)
    if hint:
        return Path(hint)
    if model_path is None:
        raise InvalidArgument(
            f"ep.context_enable=1 for a model given as bytes: set the session config entry {FILE_PATH_KEY!r} to the "
            "path of the context model to write (the session cannot know the model's name or folder)"
        )
    name = model_path.name
    stem = name[:-5] if name.endswith(".onnx") else name
    return model_path.with_name(f"{stem}_ctx.onnx")


def open_output(options: "SessionOptions", model_path: Path | None, req: CompileRequest | None) -> ContextOutput:
    """The generation's ``ContextOutput`` with the context model and the external-initializers file
    claimed: each is refused (typed, naming the file and the option) when it resolves to the source
    model or its external data, to the other, outside the output folder, or to an existing file
    without ``ep.context_overwrite=1`` (the compile API: without ERROR_IF_OUTPUT_FILE_EXISTS)."""
    out = output_path(options, model_path, req)
    src_name = model_path.name if model_path is not None else ""
    stem_src = src_name or (out.name if out is not None else "model")
    stem = stem_src[:-5] if stem_src.endswith(".onnx") else stem_src
    if model_path is None and stem.endswith("_ctx"):
        stem = stem[:-4]
    try:
        src_name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"the source model's file name {src_name!r} is not valid UTF-8 and is stored in the context model; "
            "rename the file"
        ) from None
    if out is not None:
        check_name(out.name, FILE_PATH_KEY)
        if out.is_dir():
            raise InvalidArgument(f"{FILE_PATH_KEY}={str(out)!r} is a folder; give the path of the .onnx file to write")
    output = ContextOutput(
        model_path=out,
        folder=Path(os.path.realpath(out.parent)) if out is not None else None,
        model_name=stem,
        embed_mode=int(options.get_session_config_entry(EMBED_KEY, "0") or "0"),
        node_name_prefix=options.get_session_config_entry(PREFIX_KEY, "") or "",
        options=options,
        source_model_filename=src_name,
        overwrite=options.flag(OVERWRITE_KEY) if req is None else not req.error_if_output_exists,
        protected=source_files(model_path),
    )
    if req is not None:
        output.overwrite_hint = "leave out the compile API flag ERROR_IF_OUTPUT_FILE_EXISTS"
    if output.folder is not None and out is not None:
        output._claim(output.folder / out.name, "the context model", FILE_PATH_KEY)
        ext = options.get_session_config_entry(EXTERNAL_INIT_KEY)
        if ext:
            output._claim(
                output.folder / check_name(ext, EXTERNAL_INIT_KEY), "the external initializers file", EXTERNAL_INIT_KEY
            )
    return output


def source_files(model_path: Path | None) -> dict[str, str]:
    """The real paths generation must never write: the source model and its external-data files."""
    if model_path is None:
        return {}
    st = model_path.stat()
    files = {os.path.realpath(model_path): f"the source model {model_path.name!r}"}
    locations = _external_locations(os.path.realpath(model_path), st.st_mtime_ns, st.st_size) if st.st_size else ()
    for loc in locations:
        files.setdefault(os.path.realpath(model_path.parent / loc), f"external data of the source model ({loc!r})")
    return files


@functools.lru_cache(maxsize=8)
def _external_locations(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The external-data locations the model file names (read once per file version: the loaded
    model no longer says where its data came from)."""
    import onnx
    from onnx import external_data_helper as edh

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if mm.find(b"location") < 0:  # no external-data entry can be in it: skip parsing the model
            return ()
    tensors = [t for t in edh._get_all_tensors(onnx.load(path, load_external_data=False)) if edh.uses_external_data(t)]
    return tuple(dict.fromkeys(e.value for t in tensors for e in t.external_data if e.key == "location"))


# ---------------------------------------------------------------------------------- writing
def generate_context_model(built: "Built", req: CompileRequest | None) -> str | None:
    """Write the EPContext model of a session that just compiled. Returns its path (None when the
    compile API asked for bytes; they are left in its request)."""
    import onnx

    register_ep_context_schema()
    options = built.options
    model_path: Path | None = built.model_path
    output = open_output(options, model_path, req)  # every check again: the folder may have changed
    out_path = output.model_path
    if output.folder is not None:
        output._sweep(output.folder)  # staged files a killed generation left here

    main_graph = built.graph
    assert main_graph is not None and built.context is not None
    compiled = [(ep_i, fused, view) for ep_i, fused, view in built.context.compiled if view.proto is main_graph.proto]
    try:
        ctx_nodes: dict[str, Any] = {}
        contributing: list[Any] = []
        # in a sharing group every EP is asked: a last session with nothing of its own still writes the binary
        shared = set(range(len(built.eps))) if sharing_enabled(options) else set()
        for ep_i in sorted({e for e, _, _ in compiled} | shared):
            ep = built.eps[ep_i]
            output.writer = ep.name
            nodes = ep.call("ep_get_ep_context_nodes", output=output)
            mine = {f.name: f for e, f, _ in compiled if e == ep_i}
            for node in nodes or ():
                if node.op_type != EP_CONTEXT_OP or node.domain != MS_DOMAIN:
                    raise EpFail(f"{ep.name} returned a {node.domain}::{node.op_type} node as an EPContext node")
                fused = mine.get(node.name)
                if fused is None:
                    raise EpFail(
                        f"{ep.name} returned EPContext node {node.name!r}, which names none of its main-graph fused "
                        f"nodes {sorted(mine)} (groups inside subgraphs get no EPContext node)"
                    )
                if tuple(node.input) != fused.inputs or tuple(node.output) != fused.outputs:
                    raise EpFail(
                        f"{ep.name}: EPContext node {node.name!r} must read {list(fused.inputs)} and write "
                        f"{list(fused.outputs)}, like its fused node"
                    )
                ctx_nodes[node.name] = node
            if nodes:
                contributing.append(ep)
        if req is not None:
            req.nodes_compiled = len(ctx_nodes)
        if not ctx_nodes:
            msg = (
                f"{NOTHING_COMPILED}: no execution provider produced EPContext nodes for this model "
                f"(EPs: {[e.name for e in built.eps]})"
            )
            if req is not None and req.error_if_no_nodes_compiled:
                raise Fail(msg + "; the compile API flag ERROR_IF_NO_NODES_COMPILED makes this an error")
            warnings.warn(msg + "; the context model is a copy of the source model", RuntimeWarning, stacklevel=3)

        model = _build_model(built, compiled, ctx_nodes)
        for ep in contributing:
            info = ep.call("ep_get_compiled_model_compatibility_info", graph=main_graph)
            if info:
                _set_metadata(model, METADATA_PREFIX + ep.name, str(info))
        onnx.checker.check_model(for_the_checker(model), full_check=False)  # as lenient as loading the source
        if out_path is None:
            data = model.SerializeToString()
            output._abort()  # nothing may be staged for a bytes model
            assert req is not None
            req.result_bytes = data
            return None
        ext = options.get_session_config_entry(EXTERNAL_INIT_KEY)
        if ext:
            _stage_external_initializers(model, output, ext)
        assert output.folder is not None
        output._write_claimed(output.folder / out_path.name, model.SerializeToString())
        output._commit()  # re-checks every file; the model is renamed last
        if req is not None:
            req.output_path = out_path
        return str(out_path)
    except BaseException:
        output._abort()
        raise


def _set_metadata(model: Any, key: str, value: str) -> None:
    for p in model.metadata_props:
        if p.key == key:
            p.value = value
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value


def _build_model(built: "Built", compiled: list[Any], ctx_nodes: dict[str, Any]) -> Any:
    import onnx
    from onnx import helper

    src = onnx.ModelProto()
    src.CopyFrom(built.model)
    graph = src.graph
    assert built.graph is not None
    by_name = {n.name: n for n in built.graph.all_nodes}
    replaced: dict[int, str] = {}
    for _, fused, _ in compiled:
        if fused.name in ctx_nodes:
            for nm in fused.node_names:
                replaced[by_name[nm].index] = fused.name
    nodes: list[Any] = []
    placed: set[str] = set()
    for i, n in enumerate(graph.node):
        owner = replaced.get(i)
        if owner is None:
            nodes.append(n)
        elif owner not in placed:
            placed.add(owner)
            nodes.append(ctx_nodes[owner])
    # EPContext nodes sit where their group began; sort so every producer comes first
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    edges: list[list[int]] = [[] for _ in nodes]
    for k, n in enumerate(nodes):
        for name in _all_inputs(n):
            p = producer.get(name)
            if p is not None and p != k:
                edges[p].append(k)
    order = topo_order(len(nodes), edges)
    new_nodes = [nodes[k] for k in order]
    used = {name for n in new_nodes for name in _all_inputs(n)} | {v.name for v in graph.input}
    inits = [t for t in graph.initializer if t.name in used]
    live = {o for n in new_nodes for o in n.output} | {v.name for v in graph.input}
    value_info = [v for v in graph.value_info if v.name in live]
    shown = ("output", declared_outputs(built.declared, graph))  # as get_outputs shows them (and with shapes)
    for field_name, items in (("node", new_nodes), ("initializer", inits), ("value_info", value_info), shown):
        graph.ClearField(field_name)
        getattr(graph, field_name).extend(items)
    if ctx_nodes and not any(o.domain == MS_DOMAIN for o in src.opset_import):
        src.opset_import.append(helper.make_opsetid(MS_DOMAIN, SINCE_VERSION))
    return src


def _all_inputs(node: Any) -> list[str]:
    """A node's inputs plus the outer-scope names its subgraphs read."""
    from onnx import AttributeProto

    names = [i for i in node.input if i]
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS else []
        for g in graphs:
            local = {v.name for v in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
            names.extend(i for n in g.node for i in _all_inputs(n) if i not in local)
    return names


def _stage_external_initializers(model: Any, output: ContextOutput, name: str) -> None:
    """Every initializer of the context model into one external file (the design's
    ``ep.context_model_external_initializers_file_name``), staged like the other files."""
    from onnx import external_data_helper, numpy_helper

    assert output.folder is not None
    rel = check_name(name, EXTERNAL_INIT_KEY).as_posix()
    chunks: list[bytes] = []
    offset = 0
    for t in model.graph.initializer:
        raw = t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()
        pad = (-offset) % 64
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        external_data_helper.set_external_data(t, location=rel, offset=offset, length=len(raw))
        t.data_location = 1  # TensorProto.EXTERNAL
        for field_name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            t.ClearField(field_name)
        t.ClearField("raw_data")
        chunks.append(raw)
        offset += len(raw)
    output._write_claimed(output.folder / rel, b"".join(chunks))


def prepare_session(options: "SessionOptions", model_path: Path | None, proto: Any, req: CompileRequest | None) -> None:
    """Called by the session right after loading: registers the EPContext schema when the model
    uses the com.microsoft domain, and with ``ep.context_enable=1`` refuses a missing or existing
    output before any compiling happens."""
    if options.flag("ep.context_enable") or any(o.domain == MS_DOMAIN for o in proto.opset_import):
        register_ep_context_schema()
    if options.flag("ep.context_enable"):
        open_output(options, model_path, req)  # refuses: no path for a bytes model, a file it may not write
