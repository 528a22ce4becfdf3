"""The API walk: every public name of onnxruntime 1.31's Python API is in ``ep_core.onnxruntime``
or listed with its reason (``missing.toml``); refused names raise that reason; the generated table
in docs/onnxruntime-compat.md is current."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as real
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core.onnxruntime as ort
from ep_core.onnxruntime import walk
from ep_core.onnxruntime.capi import onnxruntime_pybind11_state as C
from ep_core.onnxruntime.refusals import reasons
from ep_core.sdk.errors import NotImplementedByAnyEp

DOC = Path(__file__).resolve().parents[2] / "docs" / "onnxruntime-compat.md"


@pytest.fixture(scope="module")
def entries() -> list[walk.Entry]:
    return walk.walk(real)


def test_every_name_is_present_or_has_a_reason_and_no_reason_is_stale(entries: list[walk.Entry]) -> None:
    assert walk.problems(entries) == []
    names = {e.name for e in entries}
    # the walk reaches the names applications use, classes' members included
    assert {
        "InferenceSession.run",
        "SessionOptions.intra_op_num_threads",
        "capi.onnxruntime_pybind11_state.Fail",
    } <= names
    assert {"OrtValue.ortvalue_from_numpy", "IOBinding.bind_ortvalue_output", "__version__"} <= names
    present = {e.name for e in entries if e.status == "present"}
    assert "capi.onnxruntime_pybind11_state.NotImplemented" in present and "get_device" in present


def test_the_walk_finds_a_name_missing_without_a_reason(entries: list[walk.Entry], monkeypatch: Any) -> None:
    """The check can fail: drop a reason and the walk reports the name."""
    table = reasons()
    absent = dict(table["absent"])
    del absent["OrtSyncStream"]
    monkeypatch.setattr(walk, "reasons", lambda: {**table, "absent": absent})
    assert "OrtSyncStream: missing, with no reason in missing.toml" in walk.problems(walk.walk(real))


def test_the_committed_table_is_current(entries: list[walk.Entry]) -> None:
    assert DOC.read_text(encoding="utf-8") == walk.render(entries, real.__version__), (
        "docs/onnxruntime-compat.md is stale: run `python -m ep_core.onnxruntime.walk --write docs/onnxruntime-compat.md`"
    )


def _session() -> ort.InferenceSession:
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    )
    return ort.InferenceSession(model.SerializeToString())


_MODEL = make_model(
    [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
)

# one call per [refused] reason: each must raise NotImplemented with that very reason
REFUSED: dict[str, Callable[[], Any]] = {
    "LoraAdapter": lambda: ort.LoraAdapter(),
    "AdapterFormat": lambda: ort.AdapterFormat.read_adapter("adapter.onnx_adapter"),
    "SparseTensor": lambda: ort.SparseTensor.sparse_coo_from_numpy(
        np.array([3]), np.ones(1, np.float32), np.array([0]), ort.OrtDevice.make("cpu", 0)
    ),
    "create_and_register_allocator": lambda: ort.create_and_register_allocator(
        ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT), None
    ),
    "create_and_register_allocator_v2": lambda: C.create_and_register_allocator_v2(
        "CPUExecutionProvider",
        ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT),
        {},
        ort.OrtArenaCfg(0, -1, -1, -1),
    ),
    "OrtValue.ort_value_from_sparse_tensor": lambda: ort.OrtValue.ort_value_from_sparse_tensor(None),
    "InferenceSession.set_ep_dynamic_options": lambda: _session().set_ep_dynamic_options({"ep.dynamic.x": "1"}),
    "ModelCompiler.set_ep_context_data_write_func": lambda: ort.ModelCompiler(
        ort.SessionOptions(), _MODEL.SerializeToString()
    ).set_ep_context_data_write_func(print),
    "ModelCompiler(get_initializer_location_func=...)": lambda: ort.ModelCompiler(
        ort.SessionOptions(), _MODEL.SerializeToString(), get_initializer_location_func=lambda *a: None
    ),
    "ModelCompiler(external_initializers_size_threshold=...)": lambda: ort.ModelCompiler(
        ort.SessionOptions(), _MODEL.SerializeToString(), external_initializers_file_path="weights.bin"
    ),
}


def test_every_refusal_is_exercised() -> None:
    assert set(REFUSED) == set(reasons()["refused"])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_name_raises_not_implemented_with_its_reason(name: str) -> None:
    with pytest.raises(NotImplementedByAnyEp) as info:
        REFUSED[name]()
    assert reasons()["refused"][name] in info.value.message
    assert isinstance(info.value, C.NotImplemented)
