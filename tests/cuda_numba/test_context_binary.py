"""The EP's context per the EP Context design: ONE ``[model]_NumbaCudaExecutionProvider.bin`` (or
embedded), the first EPContext node main_context=1 and the rest 0, every design attribute; weight
sharing across sessions (constants stored once by content hash, the binary read once per group);
``ctx-gen`` writing N+1 files, and failing for an EP that does not share; tampered binaries and
attributes refused; the stored-PTX decision."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession, SessionOptions
from ep_core.sdk.epcontext.sharing import reset_workspaces
from ep_core.sdk.errors import ConfigError, EpFail, InvalidGraph
from ep_cuda_numba import context_binary, context_ptx, epcontext

from .conftest import EP, REF, SIM, all_on_ep, assert_close

BIN = f"{EP}.bin"
W = np.linspace(-1.0, 1.0, 4, dtype=np.float32)


def weighted_model(v: np.ndarray, second: str = "Tanh") -> onnx.ModelProto:
    """Two fused groups around a Transpose, each reading an initializer: Sigmoid(x + W) and
    second(u * V); W is the same in every model built here, V is given."""
    nodes = [
        helper.make_node("Add", ["x", "W"], ["a0"], name="add"),
        helper.make_node("Sigmoid", ["a0"], ["a1"], name="sigmoid"),
        helper.make_node("Transpose", ["a1"], ["u"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Mul", ["u", "V"], ["b0"], name="mul"),
        helper.make_node(second, ["b0"], ["y"], name="second"),
    ]
    graph = helper.make_graph(
        nodes,
        "weighted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(v.astype(np.float32), "V")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).normal(size=[2, 3, 4]).astype(np.float32)}


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def options(**entries: Any) -> SessionOptions:
    so = SessionOptions()
    for key, value in entries.items():
        so.add_session_config_entry(key.replace("__", "."), str(value))
    return so


def generate(src: Path, embed: int = 0, **entries: Any) -> Path:
    so = options(ep__context_enable=1, ep__context_embed_mode=embed, **entries)
    sess = InferenceSession(str(src), so, providers=[EP])
    return Path(sess.context_model_path)


def ctx_nodes(path: Path) -> list[Any]:
    return [n for n in onnx.load(str(path)).graph.node if n.op_type == "EPContext"]


def attrs(node: Any) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def reference(model: onnx.ModelProto, f: Mapping[str, np.ndarray]) -> list[Any]:
    return InferenceSession(model.SerializeToString(), providers=[REF]).run(None, dict(f))


@pytest.fixture(autouse=True)
def _fresh_workspaces() -> Iterator[None]:
    reset_workspaces()
    yield
    reset_workspaces()


# --------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("embed", [0, 1])
def test_one_binary_first_node_main_the_rest_secondary_every_attribute(tmp_path: Path, embed: int) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, embed)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(["m.onnx", "m_ctx.onnx"] + ([f"m_{BIN}"] if embed == 0 else [])), files
    model = onnx.load(str(ctx))
    n0, n1 = ctx_nodes(ctx)
    a0, a1 = attrs(n0), attrs(n1)
    assert (a0["main_context"], a1["main_context"]) == (1, 0)
    for a, node in ((a0, n0), (a1, n1)):
        assert a["embed_mode"] == embed and a["source"] == EP.encode() and a["partition_name"] == node.name.encode()
        assert a["onnx_model_filename"] == b"m.onnx"
        assert a["hardware_architecture"] == b"sim" if SIM else a["hardware_architecture"].startswith(b"sm_")
        assert a["ep_sdk_version"].startswith(f"{EP} ".encode()) and b"numba-cuda" in a["ep_sdk_version"]
        notes = json.loads(a["notes"])
        assert notes["signature"].startswith("hmac-sha256:") and "PTX" in notes["ptx"]
    assert "ep_cache_context" not in a1 and "max_size" not in a1  # the secondary names no content
    if embed:
        blob = a0["ep_cache_context"]
    else:
        assert a0["ep_cache_context"] == f"m_{BIN}".encode()
        blob = (tmp_path / f"m_{BIN}").read_bytes()
    assert a0["max_size"] == len(blob) and json.loads(a0["notes"])["binary_sha256"] == context_binary.sha256(blob)
    meta, tensors = context_binary.read(blob, AssertionError)
    assert set(meta["graphs"]) == {n0.name, n1.name}
    assert sorted(k for k in tensors if k.startswith("w.")) == sorted(
        f"w.{context_binary.weight_key(a)}" for a in (W, np.arange(3.0, dtype=np.float32))
    )
    # the constants live in the binary: the context model has no initializer and the nodes do not read them
    assert list(model.graph.initializer) == [] and list(n0.input) == ["x"] and list(n1.input) == ["u"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # signed by this user's key: no warning
        loaded = InferenceSession(str(ctx), providers=[EP])
    assert all_on_ep(loaded) == {}
    assert_close(loaded.run(None, feeds(1)), reference(weighted_model(np.arange(3.0)), feeds(1)), 1e-6)


def test_an_old_per_group_json_context_is_refused_with_the_way_out(tmp_path: Path) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    (tmp_path / f"m_{BIN}").write_bytes(json.dumps({"format": "ep_cuda_numba.fused/2", "spec": {}}).encode())
    model = onnx.load(str(ctx))
    notes = json.loads(attrs(model.graph.node[0])["notes"])
    del notes["binary_sha256"]
    for a in model.graph.node[0].attribute:
        if a.name == "notes":
            a.s = json.dumps(notes).encode()
    onnx.save(model, str(ctx))
    with pytest.raises(InvalidGraph, match=r"m_ctx|NumbaCuda.*regenerate the context model"):
        InferenceSession(str(ctx), providers=[EP])


# ------------------------------------------------------------------------------- sharing
def two_models(folder: Path) -> tuple[Path, Path]:
    return (
        save(weighted_model(np.arange(3.0), "Tanh"), folder / "m1.onnx"),
        save(weighted_model(np.array([0.5, -2.0, 3.0]), "Relu"), folder / "m2.onnx"),
    )


def test_sessions_share_one_binary_weights_stored_once_and_read_once(tmp_path: Path) -> None:
    m1, m2 = two_models(tmp_path / "src")
    out = tmp_path / "out"
    c1 = generate(m1, 0, ep__share_ep_contexts=1, ep__context_file_path=out / "m1_ctx.onnx")
    assert not (out / f"m1_{BIN}").exists()  # only the last session writes it
    c2 = generate(
        m2, 0, ep__share_ep_contexts=1, ep__stop_share_ep_contexts=1, ep__context_file_path=out / "m2_ctx.onnx"
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(["m1_ctx.onnx", "m2_ctx.onnx", f"m1_{BIN}"])
    blob = (out / f"m1_{BIN}").read_bytes()
    meta, tensors = context_binary.read(blob, AssertionError)
    names = {n.name for c in (c1, c2) for n in ctx_nodes(c)}
    assert set(meta["graphs"]) == names and len(names) == 4
    weights = [k for k in tensors if k.startswith("w.")]
    assert len(weights) == 3  # W is in both models: stored once
    for c in (c1, c2):
        n0, n1 = ctx_nodes(c)
        assert attrs(n0)["ep_cache_context"] == f"m1_{BIN}".encode() and attrs(n1)["main_context"] == 0
        assert "binary_sha256" not in json.loads(attrs(n0)["notes"])  # written later, by the last session
    epcontext.READS.clear()
    so = options(ep__share_ep_contexts=1)
    s1 = InferenceSession(str(c1), so, providers=[EP])
    s2 = InferenceSession(str(c2), so, providers=[EP])
    assert list(epcontext.READS.values()) == [1], epcontext.READS  # the second session read nothing
    for s, m in (
        (s1, weighted_model(np.arange(3.0), "Tanh")),
        (s2, weighted_model(np.array([0.5, -2.0, 3.0]), "Relu")),
    ):
        assert_close(s.run(None, feeds(3)), reference(m, feeds(3)), 1e-6)
    epcontext.READS.clear()
    InferenceSession(str(c2), providers=[EP])  # without sharing every session reads its binary
    assert list(epcontext.READS.values()) == [1]


def test_sharing_needs_an_external_binary(tmp_path: Path) -> None:
    m1, _ = two_models(tmp_path)
    with pytest.raises(ConfigError, match="ep.context_embed_mode=0"):
        generate(m1, 1, ep__share_ep_contexts=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m1.onnx", "m2.onnx"]


def test_ctx_gen_writes_n_plus_one_files(tmp_path: Path) -> None:
    from ep_core.tools.cli import main

    m1, m2 = two_models(tmp_path / "src")
    out = tmp_path / "out"
    assert main(["ctx-gen", "-e", EP, "--output-dir", str(out), f"{m1},{m2}"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(["m1_ctx.onnx", "m2_ctx.onnx", f"m1_{BIN}"])
    for c, m in ((out / "m1_ctx.onnx", m1), (out / "m2_ctx.onnx", m2)):
        got = InferenceSession(str(c), options(ep__share_ep_contexts=1), providers=[EP]).run(None, feeds(4))
        assert_close(got, reference(onnx.load(str(m)), feeds(4)), 1e-6)


class _PerModelEp:
    """A fusing EP that ignores ep.share_ep_contexts: one binary per model (or, with
    ``mode=embed``, its context embedded; ``mode=none``: no context at all)."""

    def __init__(self, mode: str) -> None:
        from _support.eps import FusingEp

        self.inner = FusingEp()
        self.mode = mode
        self.fused: list[Any] = []

    def ep_get_capability(self, graph: Any, support: Any) -> None:
        self.inner.ep_get_capability(graph, support)

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[Any]:
        self.fused.extend(fused_nodes)
        return self.inner.ep_compile(graphs, fused_nodes)

    def ep_get_ep_context_nodes(self, output: Any) -> list[Any]:
        if self.mode == "none":
            return []
        rel = output.binary_name(PER_MODEL_EP)
        embed = 1 if self.mode == "embed" else 0
        if not embed:
            output.write_file(rel, b"per-model context")
        return [
            helper.make_node(
                "EPContext",
                f.inputs,
                f.outputs,
                name=f.name,
                domain="com.microsoft",
                embed_mode=embed,
                ep_cache_context=b"per-model context" if embed else rel.encode(),
                source=PER_MODEL_EP,
            )
            for f in self.fused
        ]


PER_MODEL_EP = "PerModelContextTestExecutionProvider"


@pytest.mark.parametrize("mode", ["file", "embed", "none"])
def test_ctx_gen_fails_for_an_ep_that_does_not_share_and_leaves_nothing(tmp_path: Path, mode: str) -> None:
    from _support.models import add_mul_chain

    import ep_core
    from ep_core.sdk.ep_base import HostEpFactory
    from ep_core.tools.cli.ctx_gen import generate_shared

    class Factory(HostEpFactory):
        ep_name = PER_MODEL_EP
        ep_vendor = "tests"
        ep_version = "1.0.0"

        def ep_factory_create_ep(self, devices: Any, ep_options: Any, session_options: Any) -> Any:
            return _PerModelEp(mode)

    src = tmp_path / "src"
    src.mkdir()
    models = []
    for k in (1, 2):
        models.append(src / f"c{k}.onnx")
        onnx.save(add_mul_chain(2 + k), str(models[-1]))
    out = tmp_path / "out"
    out.mkdir()
    ep_core.register_execution_provider_library(PER_MODEL_EP, Factory())
    quiet = pytest.warns(RuntimeWarning, match="nothing was compiled") if mode == "none" else contextlib.nullcontext()
    try:
        with pytest.raises(EpFail) as e, quiet:
            generate_shared(models, PER_MODEL_EP, {}, {}, out)
    finally:
        ep_core.unregister_execution_provider_library(PER_MODEL_EP)
    msg = e.value.message
    assert PER_MODEL_EP in msg and "did not share one context binary" in msg and "ep-core compile" in msg, msg
    assert list(out.iterdir()) == []  # nothing left behind


# ------------------------------------------------------------------------------ tampering
def _rewrite_binary(path: Path, edit: Any) -> None:
    meta, tensors = context_binary.read(path.read_bytes(), AssertionError)
    edit(meta, tensors)
    weights = {k[2:]: v for k, v in tensors.items() if k.startswith("w.")}
    ptx = {k[4:]: v.tobytes() for k, v in tensors.items() if k.startswith("ptx.")}
    path.write_bytes(context_binary.pack(meta["graphs"], weights, ptx))


def _drop_sha(ctx: Path) -> None:
    """Remove the binary's sha256 from the primary's notes (so the edited binary is parsed)."""
    model = onnx.load(str(ctx))
    for a in model.graph.node[0].attribute:
        if a.name == "notes":
            notes = json.loads(a.s)
            notes.pop("binary_sha256", None)
            a.s = json.dumps(notes).encode()
    onnx.save(model, str(ctx))


def test_a_modified_binary_is_refused_naming_the_node_and_file(tmp_path: Path) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    binary = tmp_path / f"m_{BIN}"
    data = bytearray(binary.read_bytes())
    data[-3] ^= 0xFF
    binary.write_bytes(bytes(data))
    with pytest.raises(InvalidGraph, match="corrupt or was replaced"):
        InferenceSession(str(ctx), providers=[EP])
    _drop_sha(ctx)  # without the recorded sha256 the weight's own hash catches it
    # the weight's own hash catches it; on a GPU the last bytes are the kernel's PTX, caught by its own hash
    with pytest.raises(InvalidGraph, match=rf"{BIN}.*(differs from its sha256|stored PTX does not match its sha256)"):
        InferenceSession(str(ctx), providers=[EP])
    binary.write_bytes(b"\x00" * 4)
    with pytest.raises(InvalidGraph, match=rf"EPContext node .*{BIN}.*truncated"):
        InferenceSession(str(ctx), providers=[EP])


def test_an_edited_spec_warns_and_strict_sessions_refuse(tmp_path: Path) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    _drop_sha(ctx)
    first = ctx_nodes(ctx)[0].name

    def edit(meta: dict[str, Any], tensors: Any) -> None:
        meta["graphs"][first]["spec"]["nodes"][1]["op"] = "Tanh"

    _rewrite_binary(tmp_path / f"m_{BIN}", edit)
    with pytest.warns(RuntimeWarning, match="modified after signing"):
        sess = InferenceSession(str(ctx), providers=[EP])
    got = sess.run(None, feeds())
    assert not np.allclose(got[0], reference(weighted_model(np.arange(3.0)), feeds())[0])
    with pytest.raises(InvalidGraph, match="context_require_signature=1 refuses"):
        InferenceSession(str(ctx), options(ep__context_require_signature=1), providers=[EP])


@pytest.mark.parametrize(
    "attr,value,needle",
    [
        ("main_context", 0, "main_context=0 but an ep_cache_context"),
        ("main_context", 2, "both must be 0 or 1"),
        ("partition_name", "elsewhere", "is in none of the context binaries"),
        ("ep_cache_context", b"../m.onnx", "leaves the model's folder"),
        ("embed_mode", 2, "both must be 0 or 1"),
    ],
)
def test_edited_attributes_are_refused(tmp_path: Path, attr: str, value: Any, needle: str) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    model = onnx.load(str(ctx))
    node = model.graph.node[0]
    for a in list(node.attribute):
        if a.name == attr:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(attr, value))
    onnx.save(model, str(ctx))
    with pytest.raises(InvalidGraph, match=needle):
        InferenceSession(str(ctx), providers=[EP])


def test_a_secondary_carrying_content_or_a_swapped_graph_is_refused(tmp_path: Path) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    model = onnx.load(str(ctx))
    model.graph.node[2].attribute.append(helper.make_attribute("ep_cache_context", b"m_x.bin"))
    path = tmp_path / "sec_ctx.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InvalidGraph, match="main_context=0 but an ep_cache_context"):
        InferenceSession(str(path), providers=[EP])
    model = onnx.load(str(ctx))
    n0, n2 = model.graph.node[0], model.graph.node[2]
    p0 = next(a for a in n0.attribute if a.name == "partition_name")
    p2 = next(a for a in n2.attribute if a.name == "partition_name")
    p0.s, p2.s = p2.s, p0.s
    onnx.save(model, str(path))
    with pytest.raises(InvalidGraph, match="the graph writes"):
        InferenceSession(str(path), providers=[EP])


# ---------------------------------------------------------------------------- stored PTX
HERE = {"cc": [8, 0, ""], "driver": "12.4", "numba_cuda": "0.30.4", "ep_version": "0.2.0"}


def test_the_stored_ptx_decision() -> None:
    entry = {"sha256": "0" * 64, "entry": "_Z6kernel", **HERE}
    assert context_ptx.decide(entry, dict(HERE), True)[0] is True
    for key, other in (("cc", [9, 0, "a"]), ("driver", "12.8"), ("numba_cuda", "0.31.0"), ("ep_version", "0.3.0")):
        use, why = context_ptx.decide(entry, {**HERE, key: other}, True)
        assert not use and key in why, why
    assert context_ptx.decide(entry, dict(HERE), False) == (
        False,
        "its signature is not trusted, and native code is only loaded from trusted contexts",
    )
    assert not context_ptx.decide(entry, None, True)[0]  # the simulator runs no PTX
    assert not context_ptx.decide(None, dict(HERE), True)[0]


def _with_ptx(ctx: Path, binary: Path, ptx: bytes, recorded_sha: str | None = None) -> None:
    """Give the first graph a PTX entry (as a real-GPU generation writes it) and re-sign it with
    this user's key, as a trusted generator would."""
    from ep_core.sdk.epcontext import signing

    model = onnx.load(str(ctx))
    node = model.graph.node[0]
    a = attrs(node)

    def edit(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        sha = context_binary.sha256(ptx)
        rec = meta["graphs"][node.name]
        rec["ptx"] = {"sha256": recorded_sha or sha, "entry": "_Z12fused_kernel", **HERE}
        tensors[f"ptx.{recorded_sha or sha}"] = np.frombuffer(ptx, dtype=np.uint8)

    _rewrite_binary(binary, edit)
    meta, _ = context_binary.read(binary.read_bytes(), AssertionError)
    binding = epcontext._binding(
        node.name,
        {
            "source": a["source"].decode(),
            "partition_name": a["partition_name"].decode(),
            "main_context": 1,
            "embed_mode": 0,
            "context_file": a["ep_cache_context"].decode(),
        },
        list(node.input),
        list(node.output),
    )
    parts = context_binary.signed_parts(binding, context_binary.graph_digest(meta["graphs"][node.name]))
    notes = {"signature": signing.sign(parts), "ptx": "test"}
    for x in node.attribute:
        if x.name == "notes":
            x.s = json.dumps(notes).encode()
        if x.name == "max_size":
            x.i = binary.stat().st_size
    onnx.save(model, str(ctx))


@pytest.mark.skipif(not SIM, reason="the simulator's rebuild path; a real GPU would link the fake PTX")
def test_stored_ptx_is_hash_checked_and_under_the_simulator_the_kernel_is_rebuilt(tmp_path: Path) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    binary = tmp_path / f"m_{BIN}"
    _with_ptx(ctx, binary, b"// PTX\n.visible .entry _Z12fused_kernel()\n{\n}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # trusted
        sess = InferenceSession(str(ctx), providers=[EP])
    assert_close(sess.run(None, feeds()), reference(weighted_model(np.arange(3.0)), feeds()), 1e-6)
    (loaded,) = epcontext._LOADED[sess.execution_providers[0].ep].values()
    first = ctx_nodes(ctx)[0].name
    assert loaded.decisions[first] == "rebuilt from the spec: running under the CUDA simulator, which runs no PTX"
    # PTX bytes that differ from the sha256 their signed record names: refused
    ctx2 = generate(save(weighted_model(np.arange(3.0)), tmp_path / "b" / "m.onnx"), 0)
    _with_ptx(ctx2, ctx2.parent / f"m_{BIN}", b"// PTX edited", recorded_sha="1" * 64)
    with pytest.raises(InvalidGraph, match="stored PTX does not match its sha256"):
        InferenceSession(str(ctx2), providers=[EP])


PTX_WITHOUT_GPU = """
from types import SimpleNamespace
import numpy as np, onnx
from cuda_numba.test_context_binary import weighted_model
from ep_core.sdk.compute import FusedNode
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.runtime.partition import fused_inputs_outputs
from ep_cuda_numba import context_binary, context_ptx
from ep_cuda_numba.context_group import compile_group
m = onnx.shape_inference.infer_shapes(weighted_model(np.arange(3.0)))
g = GraphView(m.graph, opset_map(m))
nodes = tuple(n for n in g.all_nodes if n.name in ("add", "sigmoid"))
ins, outs = fused_inputs_outputs(g, nodes, True)
assert ins == ("x",), ins
fused = FusedNode("group", ins, outs, tuple(n.name for n in nodes))
ep = SimpleNamespace(name="NumbaCudaExecutionProvider", options=SimpleNamespace(max_threads_per_block=256), simulated=False)
group = compile_group(g.subset([n.index for n in nodes]), fused, ep)
assert sorted(group.constants) == [1], group.constants
info = {"cc": [8, 0, ""], "driver": "12.4", "numba_cuda": context_ptx.numba_cuda_version(), "ep_version": "0.2.0"}
entry, ptx, note = context_ptx.compile_entry(group, info)
assert entry is not None and entry["sha256"] == context_binary.sha256(ptx), note
assert (".entry " + entry["entry"]).encode() in ptx and entry["cc"] == [8, 0, ""], entry
assert note == "PTX stored for sm_80 (driver 12.4)", note
print("PTX ENTRY OK", entry["entry"][:40])
"""


def test_generation_stores_ptx_for_the_device_and_none_under_the_simulator() -> None:
    """The real-GPU generation path compiles the group's kernel to PTX through NVVM (no GPU needed:
    a process without the simulator); under the simulator nothing is stored and the note says so."""
    from .test_ptx_dry_run import run_nvvm_script

    proc = run_nvvm_script(PTX_WITHOUT_GPU)
    assert proc.returncode == 0 and "PTX ENTRY OK" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]
    if SIM:
        assert context_ptx.generate(None, 0) == (None, b"", context_ptx.NO_PTX_SIM)  # type: ignore[arg-type]


# ------------------------------------------------------------- stored PTX: argument types, load failures
def _identity_group(dtype: str) -> Any:
    from types import SimpleNamespace

    from ep_cuda_numba.fusion import compile_spec
    from ep_cuda_numba.spec_check import validate_spec

    node = {"name": "id", "op": "Identity", "attrs": {}, "args": [["x", 0]], "params": [], "param_base": 0}
    spec = {
        "format": 2,
        "inputs": ["x"],
        "input_dtypes": [dtype],
        "outputs": ["y"],
        "nodes": [{**node, "dtype": dtype, "out_dtype": dtype}],
        "output_nodes": [0],
    }
    validate_spec(spec, "test")
    ep = SimpleNamespace(name=EP, options=SimpleNamespace(max_threads_per_block=256), simulated=True)
    return compile_spec(spec, f"id_{dtype}", ep)


def test_compiling_and_binding_ptx_use_the_same_argument_types_for_every_spec_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``compile_ptx`` (generation) and ``install`` (load) must type the kernel alike, bfloat16 (as its
    uint16 bits) included; the numba-cuda internals ``install`` needs are stubbed (no GPU here)."""
    import sys
    from types import SimpleNamespace

    from numba import cuda, from_dtype, types

    from ep_cuda_numba import codegen
    from ep_cuda_numba.spec_check import DTYPES

    compiled: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cuda, "compile_ptx", lambda fn, sig, cc: (compiled.append(tuple(sig)), ("ptx", None))[1])
    bound: list[tuple[Any, ...]] = []
    dispatcher = SimpleNamespace(
        py_func=None,
        targetctx=SimpleNamespace(codegen=lambda: None),
        add_overload=lambda k, sig: bound.append(tuple(sig)),
    )
    monkeypatch.setattr(codegen, "compile_program", lambda *a: (dispatcher, ""))
    lib = SimpleNamespace(CUDACodeLibrary=SimpleNamespace(_rebuild=lambda **kw: None))
    kern = SimpleNamespace(_Kernel=SimpleNamespace(_rebuild=lambda **kw: SimpleNamespace(bind=lambda: None)))
    monkeypatch.setitem(sys.modules, "numba.cuda.codegen", lib)
    monkeypatch.setitem(sys.modules, "numba.cuda.dispatcher", kern)
    entry = {"entry": "_Z1k", "cc": [8, 0, ""]}
    for dtype in sorted(DTYPES):
        group = _identity_group(dtype)
        group.compile_ptx((8, 0))
        context_ptx.install(group, b"ptx", entry)
        assert compiled[-1] == bound[-1], (dtype, compiled[-1], bound[-1])
        want = np.dtype("uint16") if dtype == "bfloat16" else np.dtype(dtype)
        assert compiled[-1] == (types.Array(from_dtype(want), 1, "C"),) * 2, (dtype, compiled[-1])
    assert len(compiled) == len(bound) == len(DTYPES)


@pytest.mark.skipif(not SIM, reason="a real GPU would try the fake PTX itself")
def test_stored_ptx_that_does_not_load_is_rebuilt_from_the_spec_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = save(weighted_model(np.arange(3.0)), tmp_path / "m.onnx")
    ctx = generate(src, 0)
    _with_ptx(ctx, tmp_path / f"m_{BIN}", b"// PTX\n.visible .entry _Z12fused_kernel()\n{\n}\n")
    monkeypatch.setattr(context_ptx, "decide", lambda entry, here, trusted: (entry is not None, "test: matches"))

    def install(group: Any, ptx: bytes, entry: Any) -> None:
        raise RuntimeError("CUDA_ERROR_INVALID_PTX")

    monkeypatch.setattr(context_ptx, "install", install)
    with pytest.warns(RuntimeWarning, match="CUDA_ERROR_INVALID_PTX.*rebuilt from the validated spec"):
        sess = InferenceSession(str(ctx), providers=[EP])
    assert_close(sess.run(None, feeds()), reference(weighted_model(np.arange(3.0)), feeds()), 1e-6)
    (loaded,) = epcontext._LOADED[sess.execution_providers[0].ep].values()
    why = loaded.decisions[ctx_nodes(ctx)[0].name]
    assert why.startswith("rebuilt from the spec: its stored PTX does not load") and "INVALID_PTX" in why, why


# -------------------------------------------------------- sharing: a last session with nothing to compile
def test_the_last_sharing_session_writes_the_binary_even_when_it_compiled_nothing(tmp_path: Path) -> None:
    """The hook of a last session whose model gave this EP no fused group still writes the group's
    binary (the earlier sessions' graphs would otherwise never be written)."""
    from types import SimpleNamespace

    from ep_core.runtime.context_write import open_output

    m1, m2 = two_models(tmp_path / "src")
    out = tmp_path / "out"
    c1 = generate(m1, 0, ep__share_ep_contexts=1, ep__context_file_path=out / "m1_ctx.onnx")
    assert not (out / f"m1_{BIN}").exists()
    so = options(
        ep__context_enable=1,
        ep__share_ep_contexts=1,
        ep__stop_share_ep_contexts=1,
        ep__context_file_path=out / "m3_ctx.onnx",
    )
    output = open_output(so, m2, None)  # a model that gave this EP nothing
    ep = SimpleNamespace(compiled=[], session_options=so, options=SimpleNamespace(device_id=0))
    assert epcontext.make_context_nodes(ep, output) == []
    output._commit()
    meta, _ = context_binary.read((out / f"m1_{BIN}").read_bytes(), AssertionError)
    assert set(meta["graphs"]) == {n.name for n in ctx_nodes(c1)}
    loaded = InferenceSession(str(c1), options(ep__share_ep_contexts=1), providers=[EP])
    assert_close(loaded.run(None, feeds(2)), reference(weighted_model(np.arange(3.0), "Tanh"), feeds(2)), 1e-6)


def test_ctx_gen_with_a_last_model_this_ep_cannot_run_still_writes_the_binary(tmp_path: Path) -> None:
    """End to end: the core asks every EP of a sharing session for its context nodes, so the last
    session (a model whose only node, Sign, this EP has no kernel for) writes the shared binary."""
    from onnx import TensorProto, helper

    from ep_core.tools.cli import main

    m1, _ = two_models(tmp_path / "src")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Sign", ["x"], ["y"])], "g", [x], [y])
    m3 = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "src" / "m3.onnx")
    out = tmp_path / "out"
    assert main(["ctx-gen", "-e", EP, "--output-dir", str(out), f"{m1},{m3}"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(["m1_ctx.onnx", "m3_ctx.onnx", f"m1_{BIN}"])
    got = InferenceSession(str(out / "m1_ctx.onnx"), options(ep__share_ep_contexts=1), providers=[EP]).run(
        None, feeds(4)
    )
    assert_close(got, reference(onnx.load(str(m1)), feeds(4)), 1e-6)


def test_groups_inside_if_branches_get_no_context_node(tmp_path: Path) -> None:
    """Only main-graph groups become EPContext nodes (the core writes none inside subgraphs, and the
    first node must be the one carrying the binary); the branches' groups recompile on load."""
    from _support.models import if_with_fusable_branches

    src = save(if_with_fusable_branches(), tmp_path / "m.onnx")
    ctx = tmp_path / "m_ctx.onnx"
    sess = InferenceSession(str(src), options(ep__context_enable=1, ep__context_file_path=ctx), providers=[EP])
    model = onnx.load(str(ctx))
    assert [n.op_type for n in model.graph.node] == ["EPContext", "If"]
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    again = InferenceSession(str(ctx), providers=[EP])
    for cond in (True, False):
        feed = {"x": x, "cond": np.array(cond)}
        assert_close(again.run(None, feed), sess.run(None, feed), 1e-6)
