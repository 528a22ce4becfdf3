"""`ep-core run`'s EPContext cache: the first session compiles and writes the context model into the
cache, the next ones load it and say how much faster that was; a cached model that no longer loads
is reported and rebuilt. Also: why a provider asked for got no node, and what compile/ctx-gen list."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from _support.models import add_mul_chain, make_model
from onnx import TensorProto, helper

NUMBA = "NumbaCpuExecutionProvider"
CPU = "CpuReferenceExecutionProvider"


@pytest.fixture
def chain(tmp_path: Path) -> str:
    path = tmp_path / "chain.onnx"
    path.write_bytes(add_mul_chain(4).SerializeToString())
    return str(path)


def test_the_second_session_loads_the_cached_context_model(chain: str, ctx_cache: Path, cli: Callable) -> None:
    first = cli("run", chain, "--providers", NUMBA, "--json")
    assert first.code == 0, first.err
    s1 = first.json()["session"]
    assert s1["source"] == "compiled" and s1["speedup"] is None
    folder = Path(s1["cache"])
    assert folder.parent == ctx_cache and (folder / "chain_ctx.onnx").is_file() and (folder / "meta.json").is_file()
    assert first.json()["per_provider"][0] == {"ep": NUMBA, "nodes": 4, "fused_groups": 1, "epcontext_nodes": 0}

    second = cli("run", chain, "--providers", NUMBA)
    assert second.code == 0, second.err
    line = next(line for line in second.out.splitlines() if line.startswith("session"))
    assert "loaded the cached EPContext model" in line and "x faster than the first session" in line
    data = cli("run", chain, "--providers", NUMBA, "--json").json()
    assert data["session"]["source"] == "cache" and data["session"]["first_session_seconds"] == round(s1["seconds"], 4)
    assert data["per_provider"][0]["epcontext_nodes"] == 1
    assert data["outputs"]["out"]["shape"] == [2, 3]

    # another provider choice is another cache entry; --no-cache neither reads nor writes
    other = cli("run", chain, "--providers", NUMBA, "--provider-option", f"{NUMBA}:parallel=0", "--json").json()
    assert other["session"]["source"] == "compiled" and other["provider_options"][NUMBA] == {"parallel": "0"}
    assert len(list(ctx_cache.iterdir())) == 2
    assert cli("run", chain, "--providers", NUMBA, "--no-cache", "--json").json()["session"]["source"] == "model"
    assert len(list(ctx_cache.iterdir())) == 2


def test_a_broken_cache_entry_is_reported_and_rebuilt(chain: str, cli: Callable) -> None:
    folder = Path(cli("run", chain, "--providers", NUMBA, "--json").json()["session"]["cache"])
    (folder / "chain_ctx.onnx").write_bytes(b"garbage")
    r = cli("run", chain, "--providers", NUMBA, "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["session"]["source"] == "compiled"
    assert any(w in n for n in data["notes"] for w in ("should be rebuilt", "did not load", "not one this user")), data[
        "notes"
    ]
    assert cli("run", chain, "--providers", NUMBA, "--json").json()["session"]["source"] == "cache"


def test_a_replaced_cache_entry_is_never_run(chain: str, tmp_path: Path, cli: Callable) -> None:
    """Whoever can write the cache could replace the context model with any model of the same inputs
    and outputs: meta.json signs its sha256 with this user's key, so it is compiled again instead
    (red-team 12: the replaced model ran, giving other outputs, with no note)."""
    first = cli("run", chain, "--providers", NUMBA, "--json").json()
    folder = Path(first["session"]["cache"])
    other = add_mul_chain(4)
    other.graph.node[0].op_type = "Sub"  # same inputs and outputs, other results
    (folder / "chain_ctx.onnx").write_bytes(other.SerializeToString())
    data = cli("run", chain, "--providers", NUMBA, "--json").json()
    assert data["session"]["source"] == "compiled"
    assert any("is not one this user wrote" in n for n in data["notes"]), data["notes"]
    assert data["outputs"] == first["outputs"]


def test_a_cache_folder_others_may_write_is_not_used(chain: str, ctx_cache: Path, cli: Callable) -> None:
    ctx_cache.mkdir(parents=True, exist_ok=True)
    ctx_cache.chmod(0o777)
    data = cli("run", chain, "--providers", NUMBA, "--json").json()
    assert data["session"]["source"] == "model" and not any(ctx_cache.iterdir())
    assert any("not using the EPContext cache" in n and "other users may write" in n for n in data["notes"]), data


def test_an_entry_written_by_another_build_of_the_ep_is_rebuilt(chain: str, cli: Callable) -> None:
    """A cached context model whose compatibility info names another build of the Numba EP (its code
    changed: the stored plan may expand to other kernels, whose machine code the context lacks) is
    recompiled instead of loading without its machine code on every run."""
    import onnx

    folder = Path(cli("run", chain, "--providers", NUMBA, "--json").json()["session"]["cache"])
    model = onnx.load(str(folder / "chain_ctx.onnx"))
    for p in model.metadata_props:
        if p.key == f"ep_compatibility_info.{NUMBA}":
            p.value = p.value.replace(";build=", ";build=0000")
    onnx.save(model, str(folder / "chain_ctx.onnx"))
    data = cli("run", chain, "--providers", NUMBA, "--json").json()
    assert data["session"]["source"] == "compiled"
    assert any("written by another build of this EP" in n for n in data["notes"]), data["notes"]
    assert cli("run", chain, "--providers", NUMBA, "--json").json()["session"]["source"] == "cache"


def test_nothing_is_cached_when_nothing_compiles(chain: str, ctx_cache: Path, cli: Callable) -> None:
    assert cli("run", chain, "--json").json()["session"]["source"] == "model"  # the CPU fallback alone

    # the EP takes no If, and no group inside a control-flow body unless something there compiles
    # (a TopK alone would be a delegated step: only a runner's overhead on every branch taken)
    def branch(name: str) -> object:
        return helper.make_graph(
            [helper.make_node("TopK", ["x", "k"], [f"{name}_v", f"{name}_i"], name=f"{name}_topk")],
            name,
            [],
            [
                helper.make_tensor_value_info(f"{name}_v", TensorProto.FLOAT, None),
                helper.make_tensor_value_info(f"{name}_i", TensorProto.INT64, None),
            ],
        )

    model = make_model(
        [helper.make_node("If", ["c"], ["v", "i"], name="if", then_branch=branch("then"), else_branch=branch("else"))],
        [("x", TensorProto.FLOAT, [2, 5]), ("c", TensorProto.BOOL, [])],
        [("v", TensorProto.FLOAT, None), ("i", TensorProto.INT64, None)],
        [helper.make_tensor("k", TensorProto.INT64, [1], [2])],
    )
    path = Path(chain).with_name("topk.onnx")
    path.write_bytes(model.SerializeToString())
    r = cli("run", str(path), "--providers", NUMBA, "--json")
    assert r.code == 0, r.err
    data = r.json()
    assert data["session"]["source"] == "model" and not any(ctx_cache.iterdir())
    assert data["idle_providers"] == {
        NUMBA: f"declined all 1 node(s) it was offered; If x1: {NUMBA} has no kernel for ai.onnx::If"
    }
    text = cli("run", str(path), "--providers", NUMBA).out
    assert f"{NUMBA} got no node: declined all 1 node(s)" in text


def test_a_provider_behind_one_that_took_everything_says_so(chain: str, cli: Callable) -> None:
    r = cli("run", chain, "--providers", f"{CPU},{NUMBA}", "--json")
    assert r.code == 0, r.err
    assert r.json()["idle_providers"] == {NUMBA: "the providers before it in priority order took every node"}


def test_compile_and_ctx_gen_list_only_what_they_wrote(chain: str, tmp_path: Path, cli: Callable) -> None:
    (tmp_path / "unrelated.txt").write_text("not ours")
    r = cli("compile", chain, "--providers", NUMBA)
    assert r.code == 0, r.err
    files = json.loads(r.out)["files"]
    assert str(tmp_path / "chain_ctx.onnx") in files and all(
        "unrelated" not in f and "chain.onnx" != Path(f).name for f in files
    )
    assert len(files) == 2  # the model and its context binary
    out = tmp_path / "shared"
    r = cli("ctx-gen", chain, "-e", NUMBA, "--output-dir", str(out))
    assert r.code == 0, r.err
    assert sorted(Path(f).name for f in json.loads(r.out)["files"]) == sorted(p.name for p in out.iterdir())
    (out / "stray.bin").write_text("x")
    r = cli("ctx-gen", chain, "-e", NUMBA, "--output-dir", str(out), "--overwrite")
    assert r.code == 0, r.err
    assert "stray.bin" not in " ".join(json.loads(r.out)["files"])


def test_a_context_model_that_cannot_be_written_is_reported_and_the_run_goes_on(
    chain: str, ctx_cache: Path, cli: Callable
) -> None:
    from _support.eps import FusingEp, FusingFactory

    import ep_core

    class BadContextEp(FusingEp):
        def ep_get_ep_context_nodes(self, output: object) -> list:
            return [helper.make_node("EPContext", ["x"], ["out"], name="bogus", domain="com.microsoft")]

    class Factory(FusingFactory):
        def ep_factory_api_version(self) -> int:
            return 2

        def ep_factory_get_fusable_ops(self) -> list:
            return [("Add", "", 1, None), ("Mul", "", 1, None)]

        def ep_factory_create_ep(self, devices, ep_options, session_options):  # noqa: ANN001, ANN201
            return BadContextEp()

    ep_core.register_execution_provider_library(Factory.ep_name, Factory())
    try:
        r = cli("run", chain, "--providers", Factory.ep_name, "--json")
    finally:
        ep_core.unregister_execution_provider_library(Factory.ep_name)
    assert r.code == 0, r.err
    data = r.json()
    assert data["session"]["source"] == "model" and data["per_provider"][0]["fused_groups"] == 1
    assert any("its EPContext model could not be written" in n and "bogus" in n for n in data["notes"]), data["notes"]
    assert not any(ctx_cache.iterdir())
