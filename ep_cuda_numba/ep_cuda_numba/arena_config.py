"""Arena settings as onnxruntime spells them: the CUDA EP's provider options ``gpu_mem_limit`` and
``arena_extend_strategy``, and ``OrtArenaCfg``'s key-value form (``arena.max_mem``,
``arena.extend_strategy`` ...), which the CUDA plugin EP reads from its allocator options (and
from ``ep.<ep>.arena.*`` session entries, the prefix stripped). Values are checked as onnxruntime
checks them; every refusal names the key, the value and what it accepts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from ep_core.sdk.errors import ConfigError
from ep_cuda_numba import EP_NAME

INT_MAX = 2**31 - 1
STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")

# OrtArenaCfg key -> (ArenaConfig field, what it accepts)
ARENA_KEYS: dict[str, tuple[str, str]] = {
    "arena.max_mem": ("max_mem", "integer >= 0 (bytes; 0 = no limit)"),
    "arena.extend_strategy": ("extend_strategy", "0 (kNextPowerOfTwo) | 1 (kSameAsRequested)"),
    "arena.initial_chunk_size_bytes": ("initial_chunk_size_bytes", f"integer 1..{INT_MAX}"),
    "arena.max_dead_bytes_per_chunk": ("max_dead_bytes_per_chunk", f"integer 1..{INT_MAX}"),
    "arena.initial_growth_chunk_size_bytes": ("initial_growth_chunk_size_bytes", f"integer 1..{INT_MAX}"),
    "arena.max_power_of_two_extend_bytes": ("max_power_of_two_extend_bytes", "integer >= 1"),
}


@dataclass(frozen=True)
class ArenaConfig:
    """One arena's settings; the defaults are onnxruntime's (``OrtArenaCfg{0, -1, -1, -1, -1, -1}``)."""

    max_mem: int = 0  # bytes the arena's regions may total; 0 = no limit
    extend_strategy: str = "kNextPowerOfTwo"
    initial_chunk_size_bytes: int = 1 << 20
    max_dead_bytes_per_chunk: int = 128 << 20
    initial_growth_chunk_size_bytes: int = 2 << 20
    max_power_of_two_extend_bytes: int = 1 << 30

    def describe(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


def _int(key: str, value: str, lo: int, hi: int | None) -> int:
    text = str(value).strip()
    try:
        n = int(text)
    except ValueError:
        n = lo - 1
    if n < lo or (hi is not None and n > hi):
        raise ConfigError(f"{EP_NAME} arena option {key}={value!r} is invalid; allowed: {ARENA_KEYS[key][1]}")
    return n


def parse_arena_keys(raw: Mapping[str, str]) -> dict[str, object]:
    """The ``arena.*`` entries of ``raw`` as ArenaConfig field values (only the keys given)."""
    out: dict[str, object] = {}
    for key, value in raw.items():
        if key not in ARENA_KEYS:
            raise ConfigError(
                f"{EP_NAME} has no arena option {key!r} (no CUDA mempool allocator either); "
                f"its arena options are {sorted(ARENA_KEYS)}"
            )
        name = ARENA_KEYS[key][0]
        if name == "extend_strategy":
            text = str(value).strip()
            if text not in ("0", "1"):
                raise ConfigError(f"{EP_NAME} arena option {key}={value!r} is invalid; allowed: {ARENA_KEYS[key][1]}")
            out[name] = STRATEGIES[int(text)]
        elif name == "max_mem":
            out[name] = _int(key, value, 0, None)
        elif name == "max_power_of_two_extend_bytes":
            out[name] = _int(key, value, 1, None)
        else:
            out[name] = _int(key, value, 1, INT_MAX)
    return out


def arena_request(
    arena_keys: Mapping[str, str], gpu_mem_limit: int | None = None, arena_extend_strategy: str | None = None
) -> dict[str, object]:
    """The arena settings a session asks for explicitly: ``arena.*`` keys plus the provider options
    ``gpu_mem_limit`` / ``arena_extend_strategy`` (None = not given). Both spellings of one setting
    must agree: onnxruntime lets an OrtArenaCfg silently override them, ep-core refuses instead."""
    request = parse_arena_keys(arena_keys)
    for name, value, key, option in (
        ("max_mem", gpu_mem_limit, "arena.max_mem", "gpu_mem_limit"),
        ("extend_strategy", arena_extend_strategy, "arena.extend_strategy", "arena_extend_strategy"),
    ):
        if value is None:
            continue
        if name in request and request[name] != value:
            raise ConfigError(
                f"{EP_NAME} options {option}={value} and {key} (= {request[name]}) disagree; give one of them"
            )
        request[name] = value
    return request


def config_for(request: Mapping[str, object], base: ArenaConfig | None = None) -> ArenaConfig:
    """``base`` (default: onnxruntime's defaults) with the requested settings applied."""
    return replace(base or ArenaConfig(), **request)  # type: ignore[arg-type]


def conflicts(request: Mapping[str, object], config: ArenaConfig) -> list[str]:
    """Requested settings that differ from ``config``'s, as ``name=asked (is current)``."""
    return [f"{k}={v} (is {getattr(config, k)})" for k, v in request.items() if getattr(config, k) != v]


SHRINK_KEY = "memory.enable_memory_arena_shrinkage"


def shrink_targets(value: str) -> set[tuple[str, int]]:
    """The (device, id) pairs of onnxruntime's run config entry ``memory.enable_memory_arena_shrinkage``
    (``"gpu:0"``, ``"cpu:0;gpu:1"``; an id left out is 0), refused as onnxruntime refuses it."""
    from ep_core.sdk.errors import InvalidArgument

    out: set[tuple[str, int]] = set()
    for pair in filter(None, value.split(";")):
        parts = pair.split(":")
        if parts[0] not in ("cpu", "gpu"):
            raise InvalidArgument(
                f"Unsupported device specified in the memory arena shrink list: {parts[0]} "
                f"(run config entry {SHRINK_KEY}={value!r}; devices are cpu and gpu, e.g. 'gpu:0')"
            )
        dev_id = 0
        if len(parts) > 1:
            if not parts[1].isdigit():
                raise InvalidArgument(
                    f"Unsupported device id in the memory arena shrink list: {parts[1]} "
                    f"(run config entry {SHRINK_KEY}={value!r}; e.g. 'gpu:0')"
                )
            dev_id = int(parts[1])
        out.add((parts[0], dev_id))
    return out
