"""Generation never touches a file it did not create in this run: the context model, the files an EP
stages and the external-initializers file are refused (typed, before anything is written) when they
are the source model or its data, each other, outside the output folder (symlinks followed), or an
existing file without ``ep.context_overwrite=1``; staged files of a generation killed with SIGKILL
are removed by the next one. Uses an EP defined here (no Numba)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _support.eps import FusingEp
from _support.models import add_mul_chain
from onnx import helper, numpy_helper

import ep_core
from ep_core import InferenceSession, SessionOptions
from ep_core.runtime.compile_api import CompileApiFlags, ModelCompiler
from ep_core.sdk.compute import NodeComputeInfo
from ep_core.sdk.ep_base import HostEpFactory
from ep_core.sdk.epcontext.output import STAGED_PREFIX, ContextOutput, remove_stale_staged, staged_name
from ep_core.sdk.epcontext.sharing import is_last_sharing_session, reset_workspaces, sharing_enabled, workspace
from ep_core.sdk.errors import InvalidArgument

EP = "GenerationSafetyTestExecutionProvider"
BIN = f"chain_{EP}.bin"
HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------ the test EP
class WritingEp(FusingEp):
    """Fuses Add/Mul chains; writes its context files (``binary``: comma-separated names, default
    ``[model]_[EP].bin``; the nodes name the first) or, when sharing, the group's binary from the
    last session. ``pause`` (compile | context) touches
    ``marker`` and sleeps there, so a test can kill the process mid-generation; ``plant`` creates a
    file after staging (another process racing the generation)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__()
        self.options = dict(options)
        self.fused: list[Any] = []

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
        self.fused.extend(fused_nodes)
        pause(self.options, "compile")
        return super().ep_compile(graphs, fused_nodes)

    def ep_get_ep_context_nodes(self, output: ContextOutput) -> list[Any]:
        data = b"compiled:" + b",".join(f.name.encode() for f in self.fused)
        names = [n for n in self.options.get("binary", "").split(",") if n] or [output.binary_name(EP)]
        rel = names[0]
        if sharing_enabled(output.options):
            ws = workspace(EP)
            with ws.lock:
                if ws.binary_path is None:
                    assert output.folder is not None
                    ws.binary_path = output.folder / rel
                rel = output.relative(ws.binary_path)
                ws.extra.setdefault("parts", []).append(data)
                if is_last_sharing_session(output.options):
                    output.write_absolute(ws.binary_path, b"|".join(ws.extra["parts"]))
                    ws.clear_generation()
        else:
            for name in names:
                output.write_file(name, data)
        if self.options.get("plant"):
            Path(self.options["plant"]).write_bytes(b"planted by another process")
        pause(self.options, "context")
        return [
            helper.make_node(
                "EPContext",
                f.inputs,
                f.outputs,
                name=f.name,
                domain="com.microsoft",
                embed_mode=0,
                ep_cache_context=rel,
                source=EP,
            )
            for f in self.fused
        ]


def pause(options: Mapping[str, str], where: str) -> None:
    if options.get("pause") == where:  # the marker appears whole (renamed into place): the test reads it at once
        marker = Path(options["marker"])
        marker.with_suffix(".tmp").write_text(str(os.getpid()))
        marker.with_suffix(".tmp").replace(marker)
        time.sleep(120)


class WritingFactory(HostEpFactory):
    ep_name = EP
    ep_vendor = "tests"
    ep_version = "1.0.0"
    option_names = ("binary", "pause", "marker", "plant")

    def __init__(self) -> None:
        self.created = 0

    def ep_factory_api_version(self) -> int:
        return 2

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> WritingEp:
        self.check_options(ep_options)
        self.created += 1
        return WritingEp(ep_options)


@contextlib.contextmanager
def registered() -> Iterator[WritingFactory]:
    factory = WritingFactory()
    ep_core.register_execution_provider_library(EP, factory)
    try:
        yield factory
    finally:
        ep_core.unregister_execution_provider_library(EP)
        reset_workspaces()


@pytest.fixture
def factory() -> Iterator[WritingFactory]:
    with registered() as f:
        yield f


# -------------------------------------------------------------------------------- helpers
def chain_model(path: Path, external: str | None = None) -> Path:
    """x -> Add(w) -> Mul(w) -> Add(w) -> out, w an initializer (in ``external`` when given)."""
    model = add_mul_chain(3)
    model.graph.input.pop()  # y becomes the initializer w
    for n in model.graph.node:
        n.input[1] = "w"
    model.graph.initializer.append(numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "w"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=external, size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


def options(**entries: Any) -> SessionOptions:
    so = SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    for key, value in entries.items():
        so.add_session_config_entry(key.replace("__", "."), str(value))
    return so


def generate(src: Path | bytes, ep_options: Mapping[str, str] | None = None, **entries: Any) -> str:
    sess = InferenceSession(
        src if isinstance(src, bytes) else str(src), options(**entries), [(EP, dict(ep_options or {}))]
    )
    path = sess.context_model_path
    sess.close()
    assert path is not None
    return path


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` (links reported, not followed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def staged(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(f"{STAGED_PREFIX}*"))


def refused(factory: WritingFactory, src: Path, *needles: str, ep_options: Any = None, **entries: Any) -> str:
    """Generation fails with InvalidArgument naming every needle; returns the message."""
    with pytest.raises(InvalidArgument) as e:
        generate(src, ep_options, **entries)
    for needle in needles:
        assert needle in e.value.message, e.value.message
    return e.value.message


# ------------------------------------------------------------------ the source is never written
def test_external_initializers_named_like_the_source_model_is_refused(factory, tmp_path):
    """The bug: this truncated the source model to 0 bytes."""
    src = chain_model(tmp_path / "chain.onnx")
    before = snapshot(tmp_path)
    for overwrite in (0, 1):
        msg = refused(
            factory,
            src,
            "the source model",
            "ep.context_model_external_initializers_file_name",
            str(src.name),
            ep__context_model_external_initializers_file_name="chain.onnx",
            ep__context_overwrite=overwrite,
        )
        assert "external initializers" in msg
    assert snapshot(tmp_path) == before
    assert factory.created == 0  # refused before any EP was created, let alone compiled


def test_outputs_that_are_the_source_external_data_or_a_link_to_the_source_are_refused(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx", external="chain.data")
    (tmp_path / "link_ctx.onnx").symlink_to(src)
    before = snapshot(tmp_path)
    refused(
        factory,
        src,
        "external data of the source model",
        "chain.data",
        ep__context_model_external_initializers_file_name="chain.data",
        ep__context_overwrite=1,
    )
    refused(factory, src, "the source model", ep__context_file_path=tmp_path / "link_ctx.onnx", ep__context_overwrite=1)
    # an EP's file with the data file's name is refused inside the EP hook, before it is staged
    msg = refused(factory, src, "external data of the source model", EP, ep_options={"binary": "chain.data"})
    assert "ep_get_ep_context_nodes" in msg
    assert snapshot(tmp_path) == before and not staged(tmp_path)


# ------------------------------------------------------------------------ existing files
def test_two_models_in_one_folder_with_overwrite_0(factory, tmp_path):
    """The bug: the second model replaced the first one's binary although overwrite was 0."""
    a = chain_model(tmp_path / "a" / "chain.onnx")
    b = add_mul_chain(5)
    (tmp_path / "b").mkdir()
    onnx.save(b, str(tmp_path / "b" / "chain.onnx"))
    out = tmp_path / "out"
    generate(a, ep__context_file_path=out / "a_ctx.onnx")
    assert sorted(p.name for p in out.iterdir()) == ["a_ctx.onnx", BIN]
    before = snapshot(tmp_path)
    refused(
        factory,
        tmp_path / "b" / "chain.onnx",
        str(out / BIN),
        "already exists",
        "ep.context_overwrite=1",
        ep__context_file_path=out / "b_ctx.onnx",
    )
    assert snapshot(tmp_path) == before and not staged(tmp_path)
    # asked for: the second model replaces the binary
    generate(tmp_path / "b" / "chain.onnx", ep__context_file_path=out / "b_ctx.onnx", ep__context_overwrite=1)
    assert sorted(p.name for p in out.iterdir()) == ["a_ctx.onnx", "b_ctx.onnx", BIN]


def test_existing_context_model_is_refused_before_compiling(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    (tmp_path / "chain_ctx.onnx").write_bytes(b"keep me")
    before = snapshot(tmp_path)
    refused(factory, src, "the context model", "already exists", "ep.context_file_path")
    assert snapshot(tmp_path) == before and factory.created == 0


def test_a_file_created_during_generation_is_never_replaced(factory, tmp_path):
    """Every file is checked again right before the renames (and, without overwrite, a hard link
    rather than a rename gives it its name): a file that appears meanwhile is left alone."""
    src = chain_model(tmp_path / "chain.onnx")
    plant = tmp_path / "chain_ctx.onnx"
    msg = refused(factory, src, str(plant), ep_options={"plant": str(plant)})
    assert "already exists" in msg or "appeared" in msg
    assert plant.read_bytes() == b"planted by another process"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.onnx", "chain_ctx.onnx"]


# --------------------------------------------------------------------------- one another
def test_two_outputs_of_one_generation_that_are_one_file_are_refused(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    before = snapshot(tmp_path)
    refused(
        factory,
        src,
        "the external initializers file",
        "same file as the context model",
        ep__context_model_external_initializers_file_name="chain_ctx.onnx",
    )
    refused(factory, src, "same file as the context model", EP, ep_options={"binary": "chain_ctx.onnx"})
    refused(
        factory,
        src,
        "same file as the external initializers file",
        ep_options={"binary": "w.data"},
        ep__context_model_external_initializers_file_name="w.data",
    )
    assert snapshot(tmp_path) == before and not staged(tmp_path)


# --------------------------------------------------------------------------------- symlinks
def test_a_symlinked_subfolder_cannot_send_a_file_outside_the_output_folder(factory, tmp_path):
    """The bug: ``write_file``'s '..' check was lexical only."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.bin").write_bytes(b"precious")
    out = tmp_path / "out"
    src = chain_model(out / "chain.onnx")
    (out / "sub").symlink_to(outside, target_is_directory=True)
    (out / "victim_ctx.onnx").symlink_to(outside / "victim.bin")
    before = snapshot(tmp_path)
    refused(factory, src, "outside the output folder", str(outside), ep_options={"binary": "sub/x.bin"})
    refused(factory, src, "outside the output folder", ep_options={"binary": "sub/victim.bin"}, ep__context_overwrite=1)
    refused(
        factory,
        src,
        "outside the output folder",
        "ep.context_model_external_initializers_file_name",
        ep__context_model_external_initializers_file_name="sub/w.data",
    )
    refused(
        factory,
        src,
        "the context model",
        "outside the output folder",
        ep__context_file_path=out / "victim_ctx.onnx",
        ep__context_overwrite=1,
    )
    refused(factory, src, "'..'", ep_options={"binary": "../outside/x.bin"})
    assert snapshot(tmp_path) == before and not staged(tmp_path)


# ------------------------------------------------------------------- folders and odd names
def test_output_path_below_a_regular_file_is_a_typed_error(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    (tmp_path / "somefile").write_bytes(b"a file")
    before = snapshot(tmp_path)
    refused(
        factory,
        src,
        "which is a file, not a folder",
        "ep.context_file_path",
        ep__context_file_path=tmp_path / "somefile" / "deeper" / "c.onnx",
    )
    refused(factory, src, "which is a file, not a folder", ep_options={"binary": "chain.onnx/x.bin"})
    assert snapshot(tmp_path) == before and factory.created == 1


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_folder_is_a_typed_error(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    (tmp_path / "ro").mkdir(mode=0o555)
    try:
        refused(factory, src, "not writable", ep__context_file_path=tmp_path / "ro" / "c.onnx")
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_odd_names_are_typed_errors(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    before = snapshot(tmp_path)
    refused(factory, src, "control character", ep_options={"binary": "a\nb.bin"})
    refused(factory, src, "not valid UTF-8", ep_options={"binary": "bad\udcff.bin"})
    refused(factory, src, "longer than 255 bytes", ep_options={"binary": "x" * 300})
    refused(factory, src, "control character", ep__context_model_external_initializers_file_name="w\x00.data")
    refused(factory, src, "control character", ep__context_file_path=tmp_path / "c\x00.onnx")
    refused(factory, src, "relative", ep__context_model_external_initializers_file_name=str(tmp_path / "abs.data"))
    assert snapshot(tmp_path) == before and not staged(tmp_path)
    odd = Path(os.fsdecode(bytes(tmp_path / "m") + b"\xff.onnx"))
    chain_model(odd)
    refused(factory, odd, "not valid UTF-8", "rename the file")


def test_a_failed_generation_removes_the_files_and_folders_it_created(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    refused(
        factory,
        src,
        "same file as context file 'bins/x.bin'",
        ep_options={"binary": "bins/x.bin,bins/x.bin"},
        ep__context_file_path=tmp_path / "new" / "a" / "c.onnx",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.onnx"]


# --------------------------------------------------------------------------- sharing group
def test_sharing_group_writes_the_shared_binary_from_its_last_session(factory, tmp_path):
    m1, m2 = chain_model(tmp_path / "src" / "m1.onnx"), tmp_path / "src" / "m2.onnx"
    onnx.save(add_mul_chain(5), str(m2))
    out = tmp_path / "out"
    generate(m1, ep__share_ep_contexts=1, ep__context_file_path=out / "m1_ctx.onnx")
    assert sorted(p.name for p in out.iterdir()) == ["m1_ctx.onnx"]
    generate(m2, ep__share_ep_contexts=1, ep__stop_share_ep_contexts=1, ep__context_file_path=out / "m2_ctx.onnx")
    assert sorted(p.name for p in out.iterdir()) == [f"m1_{EP}.bin", "m1_ctx.onnx", "m2_ctx.onnx"]
    assert (out / f"m1_{EP}.bin").read_bytes().count(b"compiled:") == 2
    # a second group into the same folder: refused in its FIRST session, before anything is written
    (out / "m1_ctx.onnx").unlink()
    before = snapshot(tmp_path)
    refused(
        factory,
        m1,
        str(out / f"m1_{EP}.bin"),
        "already exists",
        ep__share_ep_contexts=1,
        ep__context_file_path=out / "m1_ctx.onnx",
    )
    assert snapshot(tmp_path) == before and not staged(tmp_path)


# ------------------------------------------------------------------------------ compile API
def test_compile_api_flag_maps_to_overwrite(factory, tmp_path):
    src = chain_model(tmp_path / "chain.onnx")
    source_sha = hashlib.sha256(src.read_bytes()).hexdigest()
    out = tmp_path / "c.onnx"
    out.write_bytes(b"old")
    with pytest.raises(InvalidArgument, match="ERROR_IF_OUTPUT_FILE_EXISTS"):
        ModelCompiler(None, str(src), providers=[EP]).compile_to_file(out)
    assert out.read_bytes() == b"old"
    ModelCompiler(None, str(src), providers=[EP], flags=CompileApiFlags.NONE).compile_to_file(out)
    assert onnx.load(str(out)).graph.node[0].op_type == "EPContext"
    with pytest.raises(InvalidArgument, match="the source model"):
        ModelCompiler(
            None, str(src), providers=[EP], external_initializers_file_path=src, flags=CompileApiFlags.NONE
        ).compile_to_file(tmp_path / "d.onnx")
    assert snapshot(tmp_path)["chain.onnx"] == source_sha and not (tmp_path / "d.onnx").exists()


# ------------------------------------------------------------------------ stale staged files
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_a_dead_processs_staged_files_are_removed(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = _dead_pid()
        mine = staged_name("a.bin")
        host = mine.split("-")[1]

        def name(pid: int, host: str = host) -> str:
            return f"{STAGED_PREFIX}{host}-{pid}-0123456789ab-a.bin"

        (tmp_path / name(dead)).write_bytes(b"stale")
        keep = {
            name(live.pid): b"live process",
            mine: b"this process",
            name(dead, "ffffffff" if host != "ffffffff" else "00000000"): b"another host",
            f"{STAGED_PREFIX}junk": b"not a staging name",
            "a.bin": b"a user's file",
        }
        for n, data in keep.items():
            (tmp_path / n).write_bytes(data)
        (tmp_path / f"{name(dead)}-dir").mkdir()  # a folder with a staging name is never removed
        (tmp_path / f"{name(dead)}x").symlink_to(tmp_path / "a.bin")  # nor a link
        removed = remove_stale_staged(tmp_path)
        assert [p.name for p in removed] == [name(dead)]
        assert {p.name for p in tmp_path.iterdir()} == set(keep) | {f"{name(dead)}-dir", f"{name(dead)}x"}
        assert all((tmp_path / n).read_bytes() == data for n, data in keep.items())
    finally:
        live.kill()
        live.wait()


DRIVER = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import test_generation_safety as t
t.generate_in_subprocess(json.loads(sys.argv[3]))
"""


def generate_in_subprocess(args: dict[str, Any]) -> None:
    """The body of the killed generation (run by DRIVER in a child process)."""
    if args["ep_options"].get("pause") == "commit":  # between staging the model and renaming anything
        commit = ContextOutput._commit

        def paused(self: ContextOutput) -> None:
            pause(args["ep_options"], "commit")
            commit(self)

        ContextOutput._commit = paused  # type: ignore[method-assign]
    with registered():
        generate(Path(args["src"]), args["ep_options"])


@pytest.mark.parametrize(
    "where, binary",
    [("compile", ""), ("context", ""), ("context", "bins/chain.bin"), ("commit", ""), ("commit", "bins/chain.bin")],
)
def test_kill_9_mid_generation_leaves_no_final_file_and_the_next_run_cleans_up(factory, tmp_path, where, binary):
    folder = tmp_path / "m"
    src = chain_model(folder / "chain.onnx")
    (folder / "notes.txt").write_bytes(b"a user's file")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    live_staged = folder / f"{STAGED_PREFIX}{staged_name('x').split('-')[1]}-{live.pid}-0123456789ab-x.bin"
    live_staged.write_bytes(b"a live generation's file")
    before = snapshot(folder)
    marker = tmp_path / "marker"
    ep_options = {"pause": where, "marker": str(marker), "binary": binary}
    args = {"src": str(src), "ep_options": ep_options}
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(HERE.parent), str(HERE), json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.communicate()[0].decode()
            assert time.monotonic() < deadline, "the generation never reached its pause"
            time.sleep(0.02)
        assert int(marker.read_text()) == child.pid
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
        left = staged(folder)
        expected = {"compile": 0, "context": 1, "commit": 2}[where]
        assert len([n for n in left if f"-{child.pid}-" in n]) == expected, left
        finals = {"chain_ctx.onnx", BIN, "bins/chain.bin"}
        assert not finals & set(snapshot(folder))  # no final file, partial or whole
        assert {k: v for k, v in snapshot(folder).items() if STAGED_PREFIX not in k} == {
            k: v for k, v in before.items() if STAGED_PREFIX not in k
        }  # the source and the user's files are untouched

        generate(src, {"binary": binary})  # the next generation removes the killed one's files

        after = snapshot(folder)
        assert {k: after[k] for k in before} == before  # the live generation's file too
        assert set(after) - set(before) == {"chain_ctx.onnx", binary or BIN}
        assert staged(folder) == [live_staged.name]
    finally:
        for proc in (child, live):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
