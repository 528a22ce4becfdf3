"""The reference EP's family index (``ep_cpu_reference.family_index``): a query about one op
imports only the kernel families that register it, and gives what a full load gives; an index
made from other sources is not used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def test_an_index_too_deeply_nested_to_parse_loads_every_family(index_file) -> None:  # type: ignore[no-untyped-def]
    path, _ = index_file
    path.write_text("[" * 100_000, encoding="utf-8")  # json raises RecursionError, not ValueError
    assert family_index.load_op(("ai.onnx", "Relu")) is False


def test_the_sources_digest_covers_files_in_subpackages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A family may be a subpackage: editing a file inside one makes the index stale too."""
    package = tmp_path / "kernels_copy"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "top.py").write_text("X = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "inner.py").write_text("Y = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(family_index, "KERNELS", "kernels_copy")
    before = family_index.sources_sha256()
    (package / "sub" / "inner.py").write_text("Y = 2\n")
    assert family_index.sources_sha256() != before
    sys.modules.pop("kernels_copy", None)


_CONTRIB_FIRST = """
import json, sys, warnings
import numpy as np
from onnx import TensorProto, helper
import ep_core

warnings.simplefilter("ignore")
P = ["CpuReferenceExecutionProvider"]
x = np.array([-1, 0.5, 1, 2], np.float32)
if sys.argv[1] == "second":  # a session before it, whose ops load other families
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    ep_core.InferenceSession(m.SerializeToString(), providers=P).run(None, {"x": x})
model = open(sys.argv[2], "rb").read()
print(json.dumps(ep_core.InferenceSession(model, providers=P).run(None, {"x": x})[0].tolist()))
"""


@pytest.mark.parametrize("when", ["first", "second"])
def test_a_function_named_like_a_contrib_op_is_the_op_as_in_onnxruntime(tmp_path: Path, when: str) -> None:
    """A model-local function com.microsoft::Gelu (body: Neg) beside the contrib op of that name:
    onnxruntime runs the op. The session registers the schemas of the model's contrib ops (each EP
    is asked about them) before checking and inlining, in a process's first session as in a later
    one, so ep-core runs the op too."""
    import onnxruntime as ort

    f = helper.make_function(
        "com.microsoft", "Gelu", ["X"], ["Y"], [helper.make_node("Neg", ["X"], ["Y"])], [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[f], ir_version=10)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    run = subprocess.run([sys.executable, "-c", _CONTRIB_FIRST, when, str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    x = np.array([-1, 0.5, 1, 2], np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got[0] < 0 < got[1]  # Gelu, not the function's Neg
