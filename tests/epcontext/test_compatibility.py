"""The four compatibility verdicts, from the metadata the generator writes."""

from __future__ import annotations

import warnings

import onnx
import pytest
from epcontext_support import NUMBA, options

from ep_core import InferenceSession
from ep_core.sdk.errors import InvalidGraph
from ep_numba_cpu.compat import current_info, parse_info, verdict

KEY = f"ep_compatibility_info.{NUMBA}"


@pytest.fixture
def ctx(compiled, tmp_path):
    return compiled("magika", 1).copy_to(tmp_path / "c")


def _edit_info(path, fn):
    model = onnx.load(str(path))
    for p in list(model.metadata_props):
        if p.key == KEY:
            new = fn(p.value)
            if new is None:
                model.metadata_props.remove(p)
            else:
                p.value = new
    onnx.save(model, str(path))


def _with(info: str, **changes: str) -> str:
    d = parse_info(info)
    d.update(changes)
    return ";".join(f"{k}={v}" for k, v in d.items())


def test_generated_model_records_the_compatibility_info(ctx):
    info = {p.key: p.value for p in onnx.load(str(ctx.ctx)).metadata_props}[KEY]
    assert info == current_info()
    assert {"numba", "llvmlite", "python", "cpu", "features"} <= set(parse_info(info))


def test_supported_optimal_loads_silently(ctx):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        InferenceSession(str(ctx.ctx), providers=[NUMBA])


def test_not_applicable_without_metadata(ctx):
    _edit_info(ctx.ctx, lambda v: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        InferenceSession(str(ctx.ctx), providers=[NUMBA])


def _fewer_features(info: str) -> str:
    feats = parse_info(info)["features"].split(",")
    drop = next(f for f in feats if f.startswith("+"))
    return _with(info, features=",".join(f for f in feats if f != drop))


def test_prefer_recompilation_warns_or_fails_on_request(ctx):
    _edit_info(ctx.ctx, _fewer_features)
    with pytest.warns(RuntimeWarning, match="should be recompiled"):
        InferenceSession(str(ctx.ctx), providers=[NUMBA])
    with pytest.raises(InvalidGraph, match="fail_on_suboptimal_compiled_model"):
        InferenceSession(str(ctx.ctx), options(session__fail_on_suboptimal_compiled_model=1), providers=[NUMBA])


def test_unsupported_fails_with_the_eps_reason(ctx):
    _edit_info(ctx.ctx, lambda v: _with(v, numba="0.1.0"))
    with pytest.raises(InvalidGraph) as e:
        InferenceSession(str(ctx.ctx), providers=[NUMBA])
    assert "compiled with numba 0.1.0" in e.value.message and NUMBA in e.value.message


def test_verdicts_for_cpu_features():
    info = current_info()
    assert verdict(info) == "SUPPORTED_OPTIMAL"
    assert verdict(_fewer_features(info)).startswith("SUPPORTED_PREFER_RECOMPILATION")
    extra = _with(info, features=parse_info(info)["features"] + ",+imaginary-feature")
    v = verdict(extra)
    assert v.startswith("UNSUPPORTED") and "imaginary-feature" in v
    assert verdict(_with(info, llvmlite="0.1")).startswith("UNSUPPORTED")
    # another build of the EP (or one from before builds were recorded) may expand a plan differently
    assert "another build of this EP" in verdict(_with(info, build="0123456789abcdef"))
    unrecorded = ";".join(part for part in info.split(";") if not part.startswith("build="))
    assert verdict(unrecorded).startswith("SUPPORTED_PREFER_RECOMPILATION")
    assert verdict("garbage").startswith("UNSUPPORTED")
