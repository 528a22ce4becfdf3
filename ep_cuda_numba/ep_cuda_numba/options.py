"""Provider options as a pydantic model: ``ep.NumbaCudaExecutionProvider.<key>`` entries (strings)
are validated here, and every rejection names the option and what it accepts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ep_core.sdk.errors import ConfigError
from ep_cuda_numba import EP_NAME

ArenaStrategy = Literal["kNextPowerOfTwo", "kSameAsRequested"]


class NumbaCudaOptions(BaseModel):
    """What a session may tune on this EP (names follow ORT's CUDA EP where one exists)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device_id: int = Field(0, ge=0, description="CUDA ordinal; must be one of the devices the factory found")
    prefer_nhwc: bool = Field(
        False, description="ask for NHWC layout (granted only if every rewritten op has an NHWC kernel)"
    )
    arena_extend_strategy: ArenaStrategy = Field("kNextPowerOfTwo", description="how the arena rounds block sizes")
    gpu_mem_limit: int = Field(0, ge=0, description="bytes the device arena may hold; 0 = no limit")
    enable_fusion: bool = Field(True, description="compile chains of elementwise ops into one kernel")
    max_threads_per_block: int = Field(256, ge=32, le=1024, description="threads per block for 1-D launches")
    fused_group_max_nodes: int = Field(32, ge=2, le=256, description="largest elementwise group fused into one kernel")
    enable_cuda_graph: bool = Field(
        False,
        description="capture runs as CUDA graphs after warm-up and replay them (IOBinding inputs at fixed "
        "device addresses; run config entry gpu_graph_id picks the graph, -1 skips capture)",
    )
    # the arena settings asked for explicitly (ArenaConfig field -> value): gpu_mem_limit,
    # arena_extend_strategy and the OrtArenaCfg keys ``arena.*`` (arena_config.ARENA_KEYS); set by parse_options
    arena: dict[str, object] = Field(default_factory=dict, exclude=True)

    @field_validator("max_threads_per_block")
    @classmethod
    def _warp_multiple(cls, v: int) -> int:
        if v % 32:
            raise ValueError("must be a multiple of 32 (the warp size)")
        return v


def allowed_values() -> dict[str, str]:
    """Option name -> what it accepts, for error messages and docs."""
    from ep_cuda_numba.arena_config import ARENA_KEYS

    out: dict[str, str] = {key: accepts for key, (_, accepts) in ARENA_KEYS.items()}
    for name, f in NumbaCudaOptions.model_fields.items():
        if name == "arena":
            continue
        if name == "arena_extend_strategy":
            out[name] = "kNextPowerOfTwo | kSameAsRequested"
        elif f.annotation is bool:
            out[name] = "0 | 1"
        else:
            lo = next((m.ge for m in f.metadata if hasattr(m, "ge")), None)
            hi = next((m.le for m in f.metadata if hasattr(m, "le")), None)
            out[name] = f"integer{'' if lo is None else f' >= {lo}'}{'' if hi is None else f' <= {hi}'}"
    return out


def parse_options(raw: Mapping[str, str]) -> NumbaCudaOptions:
    """Validate string options; raise ``ConfigError`` naming the bad key and the allowed values."""
    allowed = allowed_values()
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"{EP_NAME} has no option(s) {unknown}; its options are {sorted(allowed)}")
    values: dict[str, object] = {}
    arena_keys = {k: str(v) for k, v in raw.items() if k.startswith("arena.")}
    for key, value in raw.items():
        text = str(value).strip()
        if key in arena_keys:
            continue
        if NumbaCudaOptions.model_fields[key].annotation is bool:
            if text.lower() not in ("0", "1", "true", "false"):
                raise ConfigError(f"{EP_NAME} option {key}={value!r} is invalid; allowed: {allowed[key]}")
        values[key] = text
    try:
        opts = NumbaCudaOptions.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err.get("loc") else "?"
        raise ConfigError(
            f"{EP_NAME} option {key}={raw.get(key)!r} is invalid ({err['msg']}); allowed: {allowed.get(key, '?')}"
        ) from None
    from ep_cuda_numba.arena_config import arena_request

    limit = opts.gpu_mem_limit if "gpu_mem_limit" in raw else None
    strategy = opts.arena_extend_strategy if "arena_extend_strategy" in raw else None
    return opts.model_copy(update={"arena": arena_request(arena_keys, limit, strategy)})
