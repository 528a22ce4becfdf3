"""The EP side of EPContext: one ``EPContext`` node per fused group, claiming our own nodes back,
and the compatibility string recorded in compiled models.

A context file is data. The payload (``ep_cache_context``, or ``<model>_<EP>_<group>.json`` with
embed_mode=0) is JSON ``{"format", "graph", "spec", "signature"}``: the group's fusion spec (op
names from a fixed table, wiring, scalar params, dtypes; ``spec_check``), no source and no native
code. Loading validates the spec strictly, binds it to the node (same graph name, exactly the
node's inputs and outputs, the dtypes the model declares) and regenerates the kernel with this
package's generator. The signature (``ep_core.sdk.epcontext.signing``) covers the spec and the
node's binding attributes: a context not signed by a trusted key still loads, with a warning that
what runs is what the file says, or is refused under ``ep.context_require_signature=1``."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ep_core.sdk.epcontext import signing
from ep_core.sdk.errors import InvalidGraph
from ep_cuda_numba import EP_NAME, __version__
from ep_cuda_numba.spec_check import SPEC_FORMAT, validate_spec

if TYPE_CHECKING:
    from ep_core.sdk.devices import HardwareDevice
    from ep_core.sdk.epcontext.output import ContextOutput
    from ep_core.sdk.epcontext.payload import ContextNode
    from ep_core.sdk.graph import NodeView
    from ep_core.sdk.kernels import KernelContext
    from ep_cuda_numba.fusion import CompiledGroup

PAYLOAD_FORMAT = "ep_cuda_numba.fused/2"
OLD_FORMATS = ("ep_cuda_numba.fused/1",)  # stored kernel source and PTX beside the spec
PAYLOAD_KEYS = frozenset({"format", "graph", "spec", "signature"})
MAX_PAYLOAD_BYTES = 1 << 20  # a 256-node spec is ~100 KB
COMPAT_PREFIX = "ep_cuda_numba"


def _target(device_id: int = 0) -> str:
    from ep_cuda_numba.device import simulator_requested

    if simulator_requested():
        return "sim"
    from numba import cuda

    cc = cuda.gpus[device_id].compute_capability
    return f"sm_{cc[0]}{cc[1]}"


def _numba_cuda_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "unknown"


def compatibility_info(device_id: int = 0) -> str:
    """``ep_cuda_numba=<ver>;spec=<n>;numba_cuda=<ver>;target=<sm_XY|sim>``."""
    return f"{COMPAT_PREFIX}={__version__};spec={SPEC_FORMAT};numba_cuda={_numba_cuda_version()};target={_target(device_id)}"


def _parse(info: str) -> dict[str, str]:
    out = {}
    for part in info.split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def validate_compatibility(devices: Sequence["HardwareDevice"], info: str) -> str:
    rec = _parse(info)
    if COMPAT_PREFIX not in rec or "spec" not in rec:
        return f"UNSUPPORTED: {info!r} was not written by {EP_NAME}"
    if rec["spec"] != str(SPEC_FORMAT):
        return f"UNSUPPORTED: fusion spec format {rec['spec']} but this {EP_NAME} reads format {SPEC_FORMAT}"
    here = "sim" if any(d.metadata.get("simulated") == "1" for d in devices) else None
    if here is None:
        ccs = {d.metadata.get("compute_capability", "") for d in devices}
        here = ",".join(sorted("sm_" + c.replace(".", "") for c in ccs if c)) or "unknown"
    if rec.get("target") != here:
        return (
            f"SUPPORTED_PREFER_RECOMPILATION: compiled for {rec.get('target')}, running on {here}; kernels are "
            "regenerated from the recorded specs (contexts carry no native code)"
        )
    if rec.get(COMPAT_PREFIX) != __version__:
        return f"SUPPORTED_PREFER_RECOMPILATION: compiled by {EP_NAME} {rec.get(COMPAT_PREFIX)}, this is {__version__}"
    return "SUPPORTED_OPTIMAL"


def canonical_spec(spec: Any) -> str:
    """The spec as signed: one JSON text for one parsed value (sorted keys, no spaces)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=True)


def signed_parts(
    node: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str], graph: str, spec: Any
) -> dict[str, str]:
    """Everything that decides what an EPContext node of this EP runs: the spec, the graph name
    it answers to and the node's binding (name, inputs, outputs, source, partition_name,
    main_context, embed_mode, context file)."""
    parts = {
        f"node.{k}": str(node.get(k, "")) for k in ("name", "source", "partition_name", "main_context", "embed_mode")
    }
    parts["node.context_file"] = str(node.get("context_file", ""))
    parts["node.inputs"] = json.dumps(list(inputs))
    parts["node.outputs"] = json.dumps(list(outputs))
    parts["payload.format"] = PAYLOAD_FORMAT
    parts["payload.graph"] = graph
    parts["payload.spec"] = canonical_spec(spec)
    return parts


def make_context_node(group: "CompiledGroup", output: "ContextOutput") -> Any:
    """The EPContext node of one fused group; with ``ep.context_embed_mode=0`` the payload goes to
    ``<model>_<EP>_<group>.json`` beside the context model (staged through ``output``)."""
    from onnx import helper

    embed = int(output.embed_mode)
    rel = f"{output.model_name}_{EP_NAME}_{group.name}.json" if embed == 0 else ""
    binding = {
        "name": group.name,
        "source": EP_NAME,
        "partition_name": group.name,
        "main_context": 1,
        "embed_mode": embed,
        "context_file": rel,
    }
    spec = group.spec
    parts = signed_parts(binding, spec["inputs"], spec["outputs"], group.name, spec)
    payload = {"format": PAYLOAD_FORMAT, "graph": group.name, "spec": spec, "signature": signing.sign(parts)}
    data = json.dumps(payload, allow_nan=True).encode("utf-8")
    cache: Any = data
    if embed == 0:
        output.write_file(rel, data)
        cache = rel
    return helper.make_node(
        "EPContext",
        inputs=list(spec["inputs"]),
        outputs=list(spec["outputs"]),
        name=group.name,
        domain="com.microsoft",
        main_context=1,
        embed_mode=embed,
        ep_cache_context=cache,
        ep_sdk_version=f"numba-cuda {_numba_cuda_version()}",
        hardware_architecture=_target(group.ep.options.device_id) if group.ep is not None else "",
        partition_name=group.name,
        source=EP_NAME,
        notes="fusion spec only (no source, no native code): the kernel is regenerated from it on load",
    )


def load_context_node(node: "NodeView", ctx: "KernelContext") -> dict[str, Any]:
    """The validated fusion spec of one of our EPContext nodes (embedded, or a file beside the
    model), bound to the node. Every failed check is ``InvalidGraph`` naming the node and file."""
    from ep_core.sdk.epcontext.payload import (
        ContextNode,
        context_base_dir,
        payload_location,
        read_context_payload,
        resolve_context_file,
    )

    cn = ContextNode.from_node(node)
    base = context_base_dir(ctx.model_path, ctx.session_options)
    model = str(ctx.model_path) if ctx.model_path is not None else "the model given as bytes"
    loc = payload_location(cn, base) if cn.embed_mode == 0 else f"payload embedded in {model}"
    where = f"EPContext node {cn.name!r} ({loc})"  # the core prefixes the node and this EP
    if cn.main_context != 1:
        raise InvalidGraph(
            f"{where}: main_context={cn.main_context}, but this EP stores every group's spec in its own node "
            "(main_context=1); regenerate the context model"
        )
    if cn.embed_mode == 0:
        path = resolve_context_file(cn, base)
        if path.is_file() and path.stat().st_size > MAX_PAYLOAD_BYTES:
            raise InvalidGraph(f"{where}: the context file is larger than {MAX_PAYLOAD_BYTES} bytes; regenerate it")
    payload = _parse_payload(read_context_payload(cn, base), where)
    if payload["graph"] != cn.graph_name:
        raise InvalidGraph(
            f"{where}: the payload holds group {payload['graph']!r} but the node's partition_name names "
            f"{cn.graph_name!r}; regenerate the context model"
        )
    spec = payload["spec"]
    validate_spec(spec, where)
    if spec["inputs"] != list(cn.inputs) or spec["outputs"] != list(cn.outputs):
        raise InvalidGraph(
            f"{where}: the spec reads {spec['inputs']} and writes {spec['outputs']}, but the node reads "
            f"{list(cn.inputs)} and writes {list(cn.outputs)}; regenerate the context model"
        )
    _check_declared_types(node, spec, where)
    _check_signature(cn, payload, ctx, where)
    return spec


def _parse_payload(data: bytes, where: str) -> dict[str, Any]:
    """The payload object, with exactly the keys this format has (no source, no native code)."""
    if len(data) > MAX_PAYLOAD_BYTES:
        raise InvalidGraph(f"{where}: the payload is larger than {MAX_PAYLOAD_BYTES} bytes; regenerate it")
    try:
        payload = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise InvalidGraph(f"{where}: the payload is not {EP_NAME} JSON; regenerate the context model") from None
    got = payload.get("format") if isinstance(payload, dict) else None
    if got in OLD_FORMATS:
        raise InvalidGraph(
            f"{where}: payload format {got!r} is an older format that stored kernel source and PTX, which this "
            f"version never loads; regenerate the context model with this version of {EP_NAME}"
        )
    if got != PAYLOAD_FORMAT:
        raise InvalidGraph(
            f"{where}: payload format {got!r} is not {PAYLOAD_FORMAT}; regenerate the context model with this "
            f"version of {EP_NAME}"
        )
    keys = set(payload)
    if not keys <= PAYLOAD_KEYS or not {"graph", "spec"} <= keys:
        raise InvalidGraph(
            f"{where}: payload keys {sorted(keys)} are not {sorted(PAYLOAD_KEYS)} (this EP's contexts carry a spec "
            "only, never code); regenerate the context model"
        )
    if not isinstance(payload["graph"], str) or not isinstance(payload.get("signature", ""), str):
        raise InvalidGraph(f"{where}: payload 'graph' and 'signature' must be strings; regenerate the context model")
    return payload


def _check_declared_types(node: "NodeView", spec: dict[str, Any], where: str) -> None:
    """The spec's input and output dtypes must be those the model declares for the node's values."""
    nodes = spec["nodes"]
    wanted = [("input", i, dt) for i, dt in enumerate(spec["input_dtypes"])]
    wanted += [("output", j, nodes[k]["out_dtype"]) for j, k in enumerate(spec["output_nodes"])]
    for kind, i, dt in wanted:
        vi = node.input_info(i) if kind == "input" else node.output_info(i)
        declared = None if vi is None else vi.np_dtype
        if declared is not None and str(declared) != dt:
            raise InvalidGraph(
                f"{where}: the spec's {kind} {i} is {dt} but the model declares {str(declared)}; regenerate the "
                "context model"
            )


def _check_signature(cn: "ContextNode", payload: dict[str, Any], ctx: "KernelContext", where: str) -> None:
    """Warn (or refuse, under ``ep.context_require_signature=1``) when no trusted key signed the
    spec and binding: then what runs is whatever the file says, validated but unvouched for."""
    binding = {
        "name": cn.name,
        "source": cn.source,
        "partition_name": cn.partition_name,
        "main_context": cn.main_context,
        "embed_mode": cn.embed_mode,
        "context_file": cn.relative_path if cn.embed_mode == 0 else "",
    }
    parts = signed_parts(binding, cn.inputs, cn.outputs, payload["graph"], payload["spec"])
    verdict = signing.verify(parts, payload.get("signature"))
    if verdict.trusted:
        return
    if signing.require_signature(ctx.session_options):
        raise InvalidGraph(
            f"{where}: not loaded: {verdict.reason}; {signing.REQUIRE_SIGNATURE_KEY}=1 refuses contexts no trusted "
            "key signed"
        )
    warnings.warn(
        f"{where}: {verdict.reason}. Its kernel is regenerated from the validated spec exactly as the file records "
        f"it (this EP never loads code from a context); set {signing.REQUIRE_SIGNATURE_KEY}=1 to refuse such "
        "contexts",
        RuntimeWarning,
        stacklevel=2,
    )
