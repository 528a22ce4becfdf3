"""Compiled-model compatibility: ``ep_compatibility_info.<EP>`` metadata checked by the factory."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any

from ep_core.sdk.errors import InvalidGraph

if TYPE_CHECKING:
    from pathlib import Path

    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.options import SessionOptions

METADATA_PREFIX = "ep_compatibility_info."


class CompiledModelCompatibility(str, Enum):
    NOT_APPLICABLE = "NOT_APPLICABLE"
    SUPPORTED_OPTIMAL = "SUPPORTED_OPTIMAL"
    SUPPORTED_PREFER_RECOMPILATION = "SUPPORTED_PREFER_RECOMPILATION"
    UNSUPPORTED = "UNSUPPORTED"


def parse_verdict(answer: Any) -> tuple[CompiledModelCompatibility, str]:
    """A validate hook's answer (enum, or ``"VERDICT: reason"``) as (verdict, reason)."""
    if answer is None:
        return CompiledModelCompatibility.NOT_APPLICABLE, ""
    if isinstance(answer, CompiledModelCompatibility):
        return answer, ""
    text = str(answer)
    head, _, reason = text.partition(":")
    try:
        return CompiledModelCompatibility(head.strip()), reason.strip()
    except ValueError:
        raise InvalidGraph(
            f"compatibility verdict {text!r} is not one of {[v.value for v in CompiledModelCompatibility]}"
        ) from None


def validate_model_compatibility(
    model: Any, eps: "list[EpInstance]", options: "SessionOptions", model_path: "Path | None" = None
) -> None:
    """Ask each selected EP's factory about the compatibility info recorded for it; errors name
    the model file (or say the model came as bytes)."""
    recorded = {
        p.key[len(METADATA_PREFIX) :]: p.value for p in model.metadata_props if p.key.startswith(METADATA_PREFIX)
    }
    where = f"the compiled model {str(model_path)!r}" if model_path else "the compiled model (given as bytes)"
    for ep in eps:
        info = recorded.get(ep.name)
        if info is None:
            continue
        devices = [d.device for d in ep.devices]
        answer = ep.handle.call(
            "ep_factory_validate_compiled_model_compatibility", devices=devices, compatibility_info=info
        )
        try:
            verdict, reason = parse_verdict(answer)
        except InvalidGraph as exc:
            raise InvalidGraph(f"{where}: {ep.name}: {exc.message}") from exc
        why = f": {reason}" if reason else ""
        if verdict is CompiledModelCompatibility.UNSUPPORTED:
            raise InvalidGraph(
                f"{where} cannot run on {ep.name}{why} (recorded {METADATA_PREFIX}{ep.name}={info!r}); "
                "recompile it from the source model"
            )
        if verdict is CompiledModelCompatibility.SUPPORTED_PREFER_RECOMPILATION:
            msg = f"{where} runs on {ep.name} but should be recompiled{why}"
            if options.flag("session.fail_on_suboptimal_compiled_model"):
                raise InvalidGraph(msg + " (session.fail_on_suboptimal_compiled_model=1)")
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
