"""The EP side of EPContext: one ``EPContext`` node per fused group, claiming our own nodes back,
and the compatibility string recorded in compiled models.

Payload (``ep_cache_context``, embed_mode=1): JSON with the group's fusion spec (data only: op
names from a fixed table, wiring, scalar params, dtypes), the generated kernel source and, on a
real GPU, its PTX for the device it was compiled on. Loading rebuilds the kernel from the spec
with this package's generator and never executes stored text. Under the simulator there is no
PTX: the payload records the generated source instead and says so in ``notes``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import InvalidGraph
from ep_cuda_numba import EP_NAME, __version__

if TYPE_CHECKING:
    from ep_core.sdk.devices import HardwareDevice
    from ep_core.sdk.epcontext.output import ContextOutput
    from ep_core.sdk.kernels import KernelContext
    from ep_cuda_numba.fusion import CompiledGroup

PAYLOAD_FORMAT = "ep_cuda_numba.fused/1"
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
    from ep_cuda_numba.fusion import SPEC_FORMAT

    return f"{COMPAT_PREFIX}={__version__};spec={SPEC_FORMAT};numba_cuda={_numba_cuda_version()};target={_target(device_id)}"


def _parse(info: str) -> dict[str, str]:
    out = {}
    for part in info.split(";"):
        k, sep, v = part.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def validate_compatibility(devices: Sequence["HardwareDevice"], info: str) -> str:
    from ep_cuda_numba.fusion import SPEC_FORMAT

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
            "regenerated from the recorded specs, the recorded PTX is not used"
        )
    if rec.get(COMPAT_PREFIX) != __version__:
        return f"SUPPORTED_PREFER_RECOMPILATION: compiled by {EP_NAME} {rec.get(COMPAT_PREFIX)}, this is {__version__}"
    return "SUPPORTED_OPTIMAL"


def make_context_node(group: "CompiledGroup", output: "ContextOutput") -> Any:
    """The EPContext node of one fused group; with ``ep.context_embed_mode=0`` the payload goes to
    ``<model>_<EP>_<group>.json`` beside the context model (staged through ``output``)."""
    from onnx import helper

    group.ensure_ptx()
    payload = {
        "format": PAYLOAD_FORMAT,
        "spec": group.spec,
        "source": group.source,
        "source_sha256": hashlib.sha256(group.source.encode()).hexdigest(),
        "ptx": group.ptx,
        "ptx_target": group.ptx_target or ("sim" if group.simulated else ""),
    }
    data = json.dumps(payload).encode("utf-8")
    notes = (
        "numba-cuda simulator: no PTX exists; the generated kernel source is recorded instead"
        if group.simulated
        else f"PTX for {group.ptx_target}; the kernel is regenerated from 'spec' on load"
    )
    embed = int(output.embed_mode)
    cache: Any = data
    if embed == 0:
        rel = f"{output.model_name}_{EP_NAME}_{group.name}.json"
        output.write_file(rel, data)
        cache = rel
    return helper.make_node(
        "EPContext",
        inputs=list(group.spec["inputs"]),
        outputs=list(group.spec["outputs"]),
        name=group.name,
        domain="com.microsoft",
        main_context=1,
        embed_mode=embed,
        ep_cache_context=cache,
        ep_sdk_version=f"numba-cuda {_numba_cuda_version()}",
        hardware_architecture=payload["ptx_target"],
        partition_name=group.name,
        source=EP_NAME,
        notes=notes,
    )


def load_context_node(node: Any, ctx: "KernelContext") -> dict[str, Any]:
    """The fusion spec of one of our EPContext nodes (embedded, or a file beside the model)."""
    from ep_core.sdk.epcontext.payload import context_base_dir, read_context_payload

    base = context_base_dir(ctx.model_path, ctx.session_options)
    data = read_context_payload(node, base)
    try:
        payload = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except ValueError:
        raise InvalidGraph(f"EPContext node {node.name!r}: ep_cache_context is not {EP_NAME} JSON") from None
    if (
        not isinstance(payload, dict)
        or payload.get("format") != PAYLOAD_FORMAT
        or not isinstance(payload.get("spec"), dict)
    ):
        got = payload.get("format") if isinstance(payload, dict) else "?"
        raise InvalidGraph(
            f"EPContext node {node.name!r}: payload format {got!r} is not {PAYLOAD_FORMAT}; recompile the model with "
            f"this version of {EP_NAME}"
        )
    return payload["spec"]
