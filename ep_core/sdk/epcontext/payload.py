"""Reading EPContext nodes at inference: what a node says, where its context file is, and its
payload. EPs call these helpers so every EP resolves paths, refuses escapes and reports errors the
same way: ``InvalidGraph`` naming the node and the file, and what to do about it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ep_core.sdk.epcontext.schema import EP_CONTEXT_OP, MS_DOMAIN
from ep_core.sdk.errors import InvalidGraph

if TYPE_CHECKING:
    import onnx

    from ep_core.sdk.config import SessionConfig
    from ep_core.sdk.graph import GraphView, NodeView

CONTEXT_FILE_PATH_KEY = "ep.context_file_path"


@dataclass(frozen=True)
class ContextNode:
    """The attributes of one EPContext node, defaults applied (the design's table)."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    main_context: int = 1
    embed_mode: int = 1
    ep_cache_context: bytes = b""
    source: str = ""
    partition_name: str = ""
    ep_sdk_version: str = ""
    onnx_model_filename: str = ""
    hardware_architecture: str = ""
    notes: str = ""
    max_size: int = 0

    @classmethod
    def from_node(cls, node: Any) -> "ContextNode":
        """From a ``NodeView`` or a ``NodeProto``; string attributes keep their raw bytes where the
        payload needs them."""
        proto = getattr(node, "proto", node)
        if proto.op_type != EP_CONTEXT_OP or proto.domain != MS_DOMAIN:
            raise InvalidGraph(
                f"node {proto.name!r} is {proto.domain}::{proto.op_type}, not {MS_DOMAIN}::{EP_CONTEXT_OP}"
            )
        kw: dict[str, Any] = {}
        for a in proto.attribute:
            if a.name in ("main_context", "embed_mode", "max_size"):
                kw[a.name] = int(a.i)
            elif a.name == "ep_cache_context":
                kw[a.name] = bytes(a.s)
            elif a.name in cls.__dataclass_fields__:
                kw[a.name] = a.s.decode("utf-8", errors="replace")
        name = getattr(node, "name", None) or proto.name
        return cls(name=name, inputs=tuple(proto.input), outputs=tuple(proto.output), **kw)

    @property
    def graph_name(self) -> str:
        """The graph this node runs: ``partition_name``, else the node's name."""
        return self.partition_name or self.name

    @property
    def relative_path(self) -> str:
        """``ep_cache_context`` as a path (embed_mode=0)."""
        return self.ep_cache_context.decode("utf-8", errors="replace")

    def notes_json(self) -> dict[str, Any]:
        """``notes`` parsed as a JSON object ({} when empty); malformed notes are an error."""
        if not self.notes:
            return {}
        try:
            value = json.loads(self.notes)
        except ValueError as exc:
            raise InvalidGraph(f"EPContext node {self.name!r}: its notes attribute is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidGraph(f"EPContext node {self.name!r}: its notes attribute is not a JSON object")
        return value


def is_ep_context_node(node: "NodeView | onnx.NodeProto") -> bool:
    return node.op_type == EP_CONTEXT_OP and node.domain == MS_DOMAIN


def context_base_dir(model_path: str | os.PathLike[str] | None, options: "SessionConfig | None") -> Path | None:
    """The folder context files are relative to: the model file's folder, or for a model given
    as bytes the folder of ``ep.context_file_path``; None when neither is known."""
    if model_path is not None:
        return Path(model_path).resolve().parent
    if options is not None:
        hint = options.get_session_config_entry(CONTEXT_FILE_PATH_KEY)
        if hint:
            return Path(hint).resolve().parent
    return None


def resolve_context_file(node: ContextNode, base_dir: Path | None) -> Path:
    """The absolute path of an embed_mode=0 node's context file, refusing paths that leave the
    model's folder (absolute paths, ``..``, symlinks pointing outside)."""
    rel = node.relative_path
    if not rel:
        raise InvalidGraph(f"EPContext node {node.name!r} has embed_mode=0 but an empty ep_cache_context path")
    if base_dir is None:
        raise InvalidGraph(
            f"EPContext node {node.name!r} references the context file {rel!r}, but the model was given as bytes: "
            f"set the session config entry {CONTEXT_FILE_PATH_KEY!r} to the model's path so the file can be found"
        )
    if "\x00" in rel or any(ord(c) < 32 for c in rel):
        raise InvalidGraph(
            f"EPContext node {node.name!r}: context file path {rel!r} contains control characters; it must be a "
            "plain relative file name (an embedded payload read as a path?)"
        )
    if os.path.isabs(rel) or Path(rel).is_absolute() or rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":"):
        raise InvalidGraph(
            f"EPContext node {node.name!r}: context file path {rel!r} is absolute; context paths must be relative to "
            f"the model's folder {str(base_dir)!r} and stay inside it"
        )
    base = base_dir.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise InvalidGraph(
            f"EPContext node {node.name!r}: context file path {rel!r} leaves the model's folder {str(base)!r}; "
            "context files must live in the model's folder or below it"
        )
    return target


def read_context_payload(node: ContextNode | Any, model_dir: Path | None, expected_sha256: str | None = None) -> bytes:
    """The node's context bytes: the attribute itself (embed_mode=1) or the file it names
    (embed_mode=0, resolved against ``model_dir``). With ``expected_sha256`` the bytes are
    checked against it before anyone parses them."""
    cn = node if isinstance(node, ContextNode) else ContextNode.from_node(node)
    where = "the payload embedded in its ep_cache_context attribute"
    if cn.embed_mode == 1:
        data = cn.ep_cache_context
        if not data:
            raise InvalidGraph(f"EPContext node {cn.name!r} has embed_mode=1 but an empty ep_cache_context payload")
    elif cn.embed_mode == 0:
        path = resolve_context_file(cn, model_dir)
        where = f"context file {str(path)!r}"
        if not path.is_file():
            raise InvalidGraph(
                f"EPContext node {cn.name!r}: {where} does not exist; copy it beside the model or regenerate the "
                "context model"
            )
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidGraph(f"EPContext node {cn.name!r}: cannot read {where}: {exc}") from exc
    else:
        raise InvalidGraph(f"EPContext node {cn.name!r} has embed_mode={cn.embed_mode}; allowed values are 0 and 1")
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise InvalidGraph(
            f"EPContext node {cn.name!r}: {where} is corrupt or was replaced (sha256 differs from the one recorded in "
            "the model); regenerate the context model"
        )
    return data


def payload_location(node: ContextNode, model_dir: Path | None) -> str:
    """How errors name where a node's payload lives."""
    if node.embed_mode == 0:
        try:
            return str(resolve_context_file(node, model_dir))
        except InvalidGraph:
            return node.relative_path
    return f"<embedded in node {node.name!r}>"


def context_nodes(graph: "GraphView", accepts: Any = None) -> list[ContextNode]:
    """Every EPContext node of ``graph`` (all of them, claimed or not) whose ``source`` the
    callable ``accepts`` approves (all when None)."""
    out = []
    for n in graph.all_nodes:
        if is_ep_context_node(n):
            cn = ContextNode.from_node(n)
            if accepts is None or accepts(cn.source):
                out.append(cn)
    return out


def primary_for(node: ContextNode, candidates: Iterable[ContextNode]) -> list[ContextNode]:
    """The main_context=1 nodes that may hold a main_context=0 node's graph (same source)."""
    return [c for c in candidates if c.main_context == 1 and c.source == node.source]
