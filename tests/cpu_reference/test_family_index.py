"""The reference EP's family index (``ep_cpu_reference.family_index``): a query about one op
imports only the kernel families that register it, and gives what a full load gives; an index
made from other sources is not used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from ep_cpu_reference import family_index


def test_the_index_is_what_a_fresh_full_load_records() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "ep_cpu_reference.family_index", "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]


_EVERY_OP = """
import json, sys
from onnx import defs
from ep_cpu_reference import family_index
from ep_cpu_reference.registry import REGISTRY

index = family_index._index()
assert index is not None, "the index is not usable"


def state(key):
    domain, op = key.split("::")
    kernels = sorted(
        (d.since_version, d.end_version or 0, d.delegated, sorted((c, list(t)) for c, t in d.type_constraints.items()))
        for d in REGISTRY.kernel_defs(op, domain)
    )
    return [kernels, defs.has(op, "" if domain == "ai.onnx" else domain)]


one_op = {}
for key in sorted(index, reverse=True):  # the reverse of the full load's order
    one_op[key] = state(key)
    assert "ep_cpu_reference.families" not in sys.modules, key
REGISTRY.kernel_defs()  # the rest loads
every = {f"{d.domain_key}::{d.op_type}" for d in REGISTRY.kernel_defs()}
print(json.dumps({
    "differ": sorted(k for k in index if one_op[k] != state(k)),
    "unindexed": sorted(every - set(index)),
    "ops": len(index),
}))
"""


def test_every_op_loaded_alone_is_what_the_full_load_gives_it() -> None:
    """Each op of the index queried on its own (in the reverse of the load order, so a family
    leaning on one imported before it in the full load would show), then the full load: each op
    has the same kernels and the same schema presence either way, and every registered op is in
    the index."""
    run = subprocess.run([sys.executable, "-c", _EVERY_OP], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["differ"] == [] and got["unindexed"] == []
    assert got["ops"] > 300


@pytest.fixture
def index_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A copy of the index the test edits; the cached table is dropped before and after."""
    data = json.loads(family_index.INDEX_FILE.read_text(encoding="utf-8"))
    path = tmp_path / "family_index.json"
    monkeypatch.setattr(family_index, "INDEX_FILE", path)
    family_index._index.cache_clear()
    yield path, data
    family_index._index.cache_clear()


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(sources_sha256="0" * 64),  # made from other family sources
        lambda d: d.update(onnx="0.0.0"),  # for another onnx, whose ops may be delegated differently
        lambda d: d["ops"].update({"ai.onnx::Relu": ["no_such_family"]}),
        lambda d: d.update(ops=[]),
        None,  # no file at all
    ],
)
def test_an_index_that_does_not_fit_loads_every_family(index_file, edit) -> None:  # type: ignore[no-untyped-def]
    path, data = index_file
    if edit is not None:
        edit(data)
        path.write_text(json.dumps(data), encoding="utf-8")
    assert family_index.load_op(("ai.onnx", "Relu")) is False  # the registry then loads everything


def test_the_unedited_copy_is_used(index_file) -> None:  # type: ignore[no-untyped-def]
    """(so the refusals above are the edits', not the copy's)"""
    path, data = index_file
    path.write_text(json.dumps(data), encoding="utf-8")
    assert family_index.load_op(("ai.onnx", "Relu")) is True
    assert family_index.load_op(("ai.onnx", "NoSuchOp")) is True  # nothing registers it: nothing to load


_SESSION = """
import json, sys
import numpy as np
import ep_core
sess = ep_core.InferenceSession(sys.argv[1], providers=["CpuReferenceExecutionProvider"])
y = sess.run(None, {"x": np.array([-1.5, 2.0], np.float32)})[0]
print(json.dumps({"y": y.tolist(), "all": "ep_cpu_reference.families" in sys.modules,
                  "families": sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("ep_cpu_reference.kernels."))}))
"""


def test_a_reference_session_imports_only_the_families_of_its_ops(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    run = subprocess.run([sys.executable, "-c", _SESSION, str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["y"] == pytest.approx(2.0) and got["all"] is False
    assert {"elementwise", "reduction"} <= set(got["families"]) and len(got["families"]) < 10
