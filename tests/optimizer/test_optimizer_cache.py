"""The graph optimizer's per-machine cache (ep_core.optimizer.cache): a second session of a model,
in this process or a new one, gets the optimized model without running the passes (nor importing
onnxscript), computing the same; an entry is used only when the session's first EP answers the
passes' questions as before; tampered or foreign entries and unsafe folders are refused with a
warning and the model optimized again; ``session.optimizer_cache`` has its effect or is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession, SessionOptions
from ep_core.optimizer import cache, passes
from ep_core.sdk.errors import InvalidArgument

REF = "CpuReferenceExecutionProvider"


def _model(path: Path) -> Path:
    """Conv -> BatchNormalization -> Relu: folded to one Conv (+Relu) at the default level."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "scale": rng.random(4).astype(np.float32) + 0.5,
        "bias": rng.standard_normal(4).astype(np.float32),
        "mean": rng.standard_normal(4).astype(np.float32),
        "var": rng.random(4).astype(np.float32) + 0.5,
    }
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"]),
            helper.make_node("Relu", ["b"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


X = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _session(model: Path, **config: str) -> InferenceSession:
    so = SessionOptions()
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return InferenceSession(str(model), so, providers=[REF])


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the passes ran."""
    calls: list[int] = []
    real = passes.run_passes

    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(passes, "run_passes", run)
    return calls


def _entries() -> list[Path]:
    return sorted(cache.folder().glob("*.onnxopt"))


def test_a_second_session_reuses_the_optimized_model(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    first = _session(model)
    second = _session(model)
    assert len(counted) == 1 and len(_entries()) == 1
    assert len(second.get_node_assignment()) == len(first.get_node_assignment()) < 3  # BN folded both times
    np.testing.assert_array_equal(first.run(None, {"x": X})[0], second.run(None, {"x": X})[0])


def test_a_new_process_skips_the_passes_and_onnxscript(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model)
    code = (
        "import sys, json; from ep_core import InferenceSession; "
        f"InferenceSession({str(model)!r}, providers=[{REF!r}]); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('onnxscript', 'onnx_ir'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_session_optimizer_cache_0_optimizes_every_time_and_writes_nothing(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model, **{"session.optimizer_cache": "0"})
    _session(model, **{"session.optimizer_cache": "0"})
    assert len(counted) == 2 and _entries() == []


@pytest.mark.parametrize("value", ["2", "yes", ""])
def test_bad_values_are_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidArgument, match="session.optimizer_cache"):
        _session(_model(tmp_path / "m.onnx"), **{"session.optimizer_cache": value})


def test_another_level_or_config_is_another_entry(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model)
    so = SessionOptions()
    so.graph_optimization_level = 1  # ORT_ENABLE_BASIC
    InferenceSession(str(model), so, providers=[REF])
    _session(model, **{"session.disable_quant_qdq": "1"})
    assert len(counted) == 3 and len(_entries()) == 3


def test_an_entry_is_used_only_when_the_first_ep_answers_as_before(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model)
    (entry,) = _entries()
    data = entry.read_bytes()
    size = int.from_bytes(data[len(cache.MAGIC) : len(cache.MAGIC) + 4], "big")
    header = json.loads(data[len(cache.MAGIC) + 4 : len(cache.MAGIC) + 4 + size])
    assert header["answers"], "the passes asked which ops the EP has"
    # an EP answering otherwise: the recorded answers are asked again and the entry is not used
    assert cache.load(entry.stem, lambda op, domain: (op, domain, True) not in map(tuple, header["answers"])) is None
    assert cache.load(entry.stem, lambda op, domain: [op, domain, True] in header["answers"]) is not None


def _rewrite(entry: Path, edit) -> None:  # type: ignore[no-untyped-def]
    data = entry.read_bytes()
    size = int.from_bytes(data[len(cache.MAGIC) : len(cache.MAGIC) + 4], "big")
    header = json.loads(data[len(cache.MAGIC) + 4 : len(cache.MAGIC) + 4 + size])
    body = data[len(cache.MAGIC) + 4 + size :]
    header, body = edit(header, body)
    head = json.dumps(header).encode()
    entry.write_bytes(cache.MAGIC + len(head).to_bytes(4, "big") + head + body)


def _changed_model(header: dict, body: bytes) -> tuple[dict, bytes]:
    m = onnx.load_model_from_string(body)
    w = m.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * 2, w.name))  # what a planted entry computes
    return header, m.SerializeToString()


@pytest.mark.parametrize(
    "edit,why",
    [
        (_changed_model, "modified after signing"),
        (lambda h, b: ({**h, "signature": None}, b), "no signature"),
        (lambda h, b: ({**h, "signature": "hmac-sha256:0123456789abcdef:00"}, b), "does not trust"),
        (lambda h, b: ({**h, "key": "0" * 64}, b), "another model"),
        (lambda h, b: ({**h, "unchanged": True}, b), "modified after signing"),
    ],
)
def test_tampered_entries_are_refused_and_the_model_optimized_again(
    tmp_path: Path, counted: list[int], edit, why
) -> None:  # type: ignore[no-untyped-def]
    model = _model(tmp_path / "m.onnx")
    want = _session(model).run(None, {"x": X})[0]
    (entry,) = _entries()
    _rewrite(entry, edit)
    cache._warned.clear()
    with pytest.warns(RuntimeWarning, match=why):
        got = _session(model).run(None, {"x": X})[0]
    assert len(counted) == 2
    np.testing.assert_array_equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten by the second session: clean again
        _session(model)
    assert len(counted) == 2


def test_garbage_is_refused(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model)
    (entry,) = _entries()
    entry.write_bytes(b"not an entry")
    cache._warned.clear()
    with pytest.warns(RuntimeWarning, match="not an optimizer cache entry"):
        _session(model)
    assert len(counted) == 2


def test_a_folder_others_may_write_is_not_used(tmp_path: Path, counted: list[int]) -> None:
    model = _model(tmp_path / "m.onnx")
    cache.folder().mkdir(parents=True)
    cache.folder().chmod(0o777)
    cache._warned.clear()
    with pytest.warns(RuntimeWarning, match="other users may write to it"):
        _session(model)
    _session(model)
    assert len(counted) == 2 and _entries() == []


def test_least_recently_used_entries_go_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path / "m.onnx")
    _session(model)
    (entry,) = _entries()
    monkeypatch.setattr(cache, "MAX_BYTES", entry.stat().st_size + 10)
    os.utime(entry, (1, 1))  # the oldest
    _session(model, **{"session.disable_quant_qdq": "1"})
    left = _entries()
    assert len(left) == 1 and left[0] != entry


@pytest.mark.parametrize("blocked", ["key", "folder"])
def test_no_usable_key_or_folder_optimizes_without_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    """A home where no signing key or cache folder can be made (read-only containers; here a path
    through a file, which stops root too): the session is optimized and created as without the
    cache, with one warning saying why."""
    afile = tmp_path / "a-file"
    afile.write_text("not a folder")
    if blocked == "key":
        monkeypatch.setenv("EP_CORE_KEY_DIR", str(afile / "keys"))
    else:
        monkeypatch.setenv(cache.ENV_DIR, str(afile / "optimized"))
    cache._warned.clear()
    with pytest.warns(RuntimeWarning, match="optimizer cache"):
        s = _session(_model(tmp_path / "m.onnx"))
    assert s.run(None, {"x": X})[0].shape == (1, 4, 8, 8)
