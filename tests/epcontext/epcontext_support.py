"""Compiled context models shared by the EPContext tests: each model compiles once per worker
(every test here is in one xdist group), later tests copy the files they damage."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

NUMBA = "NumbaCpuExecutionProvider"


def pytest_collection_modifyitems(items: list[Any]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.xdist_group("epcontext"))


def feed_for(name: str) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    if name == "magika":
        return {"bytes": rng.randint(0, 257, size=(1, 2048)).astype(np.int32)}
    if name.startswith("silero_vad"):  # an If between the groups: several EPContext nodes (magika is one group)
        feed = {
            "input": rng.randn(1, 512).astype(np.float32) * 0.1,
            "state": rng.randn(2, 1, 128).astype(np.float32) * 0.1,
        }
        return {**feed, "sr": np.array(16000, np.int64)}
    return {"x": rng.rand(1, 3, 64, 96).astype(np.float32)}


@dataclass
class Compiled:
    name: str
    folder: Path
    source: Path
    ctx: Path
    embed: int
    feed: dict[str, np.ndarray]
    expected: list[np.ndarray]
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)

    def copy_to(self, dest: Path) -> "Compiled":
        """The context model (and its binary) copied into ``dest``, for tests that damage files."""
        dest.mkdir(parents=True, exist_ok=True)
        for p in self.folder.iterdir():
            if p.is_file() and p.name != self.source.name:
                shutil.copy(p, dest / p.name)
        return Compiled(
            self.name,
            dest,
            self.source,
            dest / self.ctx.name,
            self.embed,
            self.feed,
            self.expected,
            self.input_names,
            self.output_names,
        )


def options(**entries: Any) -> Any:
    from ep_core.runtime.options import SessionOptions

    so = SessionOptions()
    for k, v in entries.items():
        so.add_session_config_entry(k.replace("__", "."), str(v))
    return so


def compile_model(name: str, folder: Path, embed: int, **entries: Any) -> Compiled:
    from ep_core import InferenceSession
    from ep_core.tools.zoo import fetch_model

    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.onnx"
    shutil.copy(fetch_model(name), src)
    so = options(ep__context_enable=1, ep__context_embed_mode=embed, **entries)
    sess = InferenceSession(str(src), so, providers=[NUMBA])
    feed = feed_for(name)
    expected = sess.run(None, feed)
    ins, outs = [i.name for i in sess.get_inputs()], [o.name for o in sess.get_outputs()]
    path = Path(sess.context_model_path)
    sess.close()
    return Compiled(name, folder, src, path, embed, feed, expected, ins, outs)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``compiled(name, embed)`` -> Compiled, built once per worker."""
    cache: dict[tuple[str, int], Compiled] = {}

    def get(name: str, embed: int) -> Compiled:
        key = (name, embed)
        if key not in cache:
            cache[key] = compile_model(name, tmp_path_factory.mktemp(f"{name}_e{embed}"), embed)
        return cache[key]

    return get


class CompileCounter:
    """Counts Numba compilations (the compiler pipeline's entry point) and calls of the EP's
    ``ep_compile`` while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import numba.core.compiler as nbc

        from ep_numba_cpu.ep import NumbaCpuEp

        self.numba = 0
        self.ep_compile = 0
        orig_compile = nbc.compile_extra
        orig_ep = NumbaCpuEp.ep_compile

        def counting_compile(*a: Any, **k: Any) -> Any:
            self.numba += 1
            return orig_compile(*a, **k)

        def counting_ep(ep: Any, graphs: Any, fused_nodes: Any) -> Any:
            self.ep_compile += 1
            return orig_ep(ep, graphs, fused_nodes)

        monkeypatch.setattr(nbc, "compile_extra", counting_compile)
        monkeypatch.setattr(NumbaCpuEp, "ep_compile", counting_ep)


@pytest.fixture
def count_compiles(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``count_compiles()`` starts counting (call it after building what the test loads)."""
    return lambda: CompileCounter(monkeypatch)


def ctx_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == "EPContext"]


def set_attr(node: Any, name: str, value: Any) -> None:
    from onnx import helper

    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


@pytest.fixture(autouse=True)
def one_thread_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions here compare answers bit for bit across sessions and runs; BLAS sums in an order
    that follows its thread count, which the adaptive default (``threads.default_size``) sets
    from this machine's load at each run: at one thread the order is fixed (these tests are not
    about threads; tests/host covers them)."""
    from ep_core.host import threads

    monkeypatch.setattr(threads, "default_size", lambda cpus: 1)
