"""The Numba CPU EP's per-machine kernel cache (ep_numba_cpu.kernel_cache): a second session in a new
process compiles nothing and computes the same; every bad entry (tampered payload or header, another
key's signature, another CPU, truncated) is refused with a warning before anything in it is
unpickled, recompiled and rewritten; the EP options have their effect or are refused."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import re
import secrets
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("ep_numba_cpu")

from ep_core import InferenceSession  # noqa: E402
from ep_core.sdk.epcontext import signing  # noqa: E402
from ep_core.sdk.errors import ConfigError  # noqa: E402
from ep_numba_cpu import codegen, kernel_cache  # noqa: E402

NUMBA = "NumbaCpuExecutionProvider"
SIG = "float32:1:C:r,float32:1:C:w"
SRC = """
def kernel(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * {k} + 1.0
"""


def _model(path: Path) -> Path:
    """Conv with bias, then a fused elementwise tail (Relu, Mul, Add, Sigmoid)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "t"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["a"], ["y"], name="sig"),
    ]
    inits = [
        helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel().tolist()),
        helper.make_tensor("b", TensorProto.FLOAT, [4], [0.1, -0.2, 0.3, 0.0]),
        helper.make_tensor("s", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("t", TensorProto.FLOAT, [1], [-0.25]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


SCRIPT = """
import json, sys, warnings
import numpy as np
from ep_core import InferenceSession
model, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    sess = InferenceSession(model, providers=[("NumbaCpuExecutionProvider", options)])
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(out, sess.run(None, {"x": x})[0])
from ep_numba_cpu.codegen import STATS
on_ep = sum(1 for a in sess.get_node_assignment().values() if a["ep"] == "NumbaCpuExecutionProvider")
print(json.dumps({**STATS, "on_ep": on_ep, "warnings": [str(w.message) for w in caught]}))
"""


def _session_in_new_process(tmp: Path, model: Path, n: int, env: dict[str, str], options: dict[str, str]) -> Any:
    script = tmp / "session.py"
    script.write_text(SCRIPT)
    out = tmp / f"out{n}.npy"
    proc = subprocess.run(
        [sys.executable, str(script), str(model), str(out), json.dumps(options)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), np.load(out)


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*" + kernel_cache.SUFFIX)) if d.is_dir() else []


def test_a_second_session_in_a_new_process_compiles_nothing_and_computes_the_same(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    env = dict(os.environ, **{kernel_cache.ENV_DIR: str(tmp_path / "from_env")})
    mine = tmp_path / "mine"
    first, y1 = _session_in_new_process(tmp_path, model, 1, env, {"kernel_cache_dir": str(mine)})
    assert first["on_ep"] == 5 and first["compiled"] >= 1 and first["cached"] == 0, first
    assert len(_entries(mine)) == first["compiled"] and not (tmp_path / "from_env").exists()
    second, y2 = _session_in_new_process(tmp_path, model, 2, env, {"kernel_cache_dir": str(mine)})
    assert second["compiled"] == 0 and second["cached"] == first["compiled"], second
    assert not second["warnings"], second["warnings"]
    np.testing.assert_array_equal(y1, y2)
    # the default directory comes from $EP_NUMBA_CPU_KERNEL_CACHE_DIR
    third, y3 = _session_in_new_process(tmp_path, model, 3, env, {})
    assert third["compiled"] == first["compiled"] and len(_entries(tmp_path / "from_env")) == first["compiled"]
    np.testing.assert_array_equal(y1, y3)


# ------------------------------------------------------------------------- in-process entries
@pytest.fixture
def cache(tmp_path: Path) -> kernel_cache.KernelCache:
    c = kernel_cache.from_options({"kernel_cache_dir": str(tmp_path / "kc")})
    assert c is not None
    return c


def _fresh(cache: kernel_cache.KernelCache | None, k: float) -> tuple[codegen.CompiledKernel, dict[str, int]]:
    """Compile-or-load ``SRC(k)`` as a new process would (nothing in this process's memory)."""
    codegen.clear_process_cache()
    before = dict(codegen.STATS)
    ck = codegen.compile_kernel(SRC.format(k=k), SIG, False, cache)
    return ck, {n: codegen.STATS[n] - before[n] for n in before}


def _run(ck: codegen.CompiledKernel) -> np.ndarray:
    x = np.arange(8, dtype=np.float32)
    out = np.empty_like(x)
    ck.dispatcher(x, out)
    return out


def _split(data: bytes) -> tuple[dict[str, Any], bytes]:
    n = int.from_bytes(data[len(kernel_cache.MAGIC) : len(kernel_cache.MAGIC) + 4], "big")
    start = len(kernel_cache.MAGIC) + 4
    return json.loads(data[start : start + n]), data[start + n :]


def _join(header: dict[str, Any], payload: bytes) -> bytes:
    head = json.dumps(header).encode()
    return kernel_cache.MAGIC + len(head).to_bytes(4, "big") + head + payload


class _Spy:
    """Stands in for ``pickle`` inside codegen: records what is unpickled."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)

    def loads(self, data: bytes) -> Any:
        self.loaded.append(hashlib.sha256(data).hexdigest())
        return pickle.loads(data)


class _Planted:
    """Unpickling this creates ``marker``: proof that file-provided code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (str(self.marker), "w"))


def _planted_payload(marker: Path) -> bytes:
    return pickle.dumps(_Planted(marker))


def _another_keys_signature(header: dict[str, Any]) -> str:
    key = secrets.token_bytes(32)
    parts = kernel_cache.signed_parts(header["key"], header["meta"], header["payload_sha256"], header["payload_size"])
    digest = hmac.new(key, signing.canonical(parts), hashlib.sha256).hexdigest()
    return f"{signing.SCHEME}:{signing.key_id(key)}:{digest}"


def _tamper_cases(marker: Path) -> dict[str, Any]:
    """name -> (edit of the entry's bytes, words the warning must hold)."""

    def payload_byte(data: bytes) -> bytes:
        b = bytearray(data)
        b[-20] ^= 0x01
        return bytes(b)

    def planted_rehashed(data: bytes) -> bytes:  # a checksum-only loader would be fooled
        header, _ = _split(data)
        payload = _planted_payload(marker)
        header.update(payload_sha256=hashlib.sha256(payload).hexdigest(), payload_size=len(payload))
        return _join(header, payload)

    def planted_other_key(data: bytes) -> bytes:
        header, _ = _split(data)
        payload = _planted_payload(marker)
        header.update(payload_sha256=hashlib.sha256(payload).hexdigest(), payload_size=len(payload))
        header["signature"] = _another_keys_signature(header)
        return _join(header, payload)

    def other_cpu(data: bytes) -> bytes:  # honestly signed by this user, for a CPU with other features
        header, payload = _split(data)
        meta = dict(header["meta"], features=header["meta"]["features"] + ",+madeup")
        return kernel_cache.entry_bytes(header["key"], meta, payload)

    def other_kernel(data: bytes) -> bytes:
        header, payload = _split(data)
        return kernel_cache.entry_bytes("0" * 24, header["meta"], payload)

    return {
        "payload byte": (payload_byte, "differs from its signed sha256"),
        "planted payload, re-hashed": (planted_rehashed, "does not match its content"),
        "planted payload, another key": (planted_other_key, "which this user does not trust"),
        "another CPU's features": (other_cpu, "another machine or versions"),
        "another kernel's entry": (other_kernel, "holds kernel"),
        "truncated": (lambda d: d[: len(d) // 2], "truncated"),
        "header not JSON": (
            lambda d: d[: len(kernel_cache.MAGIC) + 4] + b"<" + d[len(kernel_cache.MAGIC) + 5 :],
            "JSON",
        ),
        "not an entry": (lambda d: b"\x80\x04K\x01." + d, "not a kernel cache entry"),
    }


@pytest.mark.parametrize("case", list(_tamper_cases(Path("x"))))
def test_a_bad_entry_is_refused_with_a_warning_recompiled_and_rewritten(
    case: str, cache: kernel_cache.KernelCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = 1.0 + len(case) / 64
    ck, counts = _fresh(cache, k)
    want = _run(ck)
    assert counts["compiled"] == 1 and counts["cached"] == 0
    path = cache.path(ck.key)
    genuine = path.read_bytes()
    marker = tmp_path / "planted-code-ran"
    edit, words = _tamper_cases(marker)[case]
    path.write_bytes(edit(genuine))
    spy = _Spy()
    monkeypatch.setattr(codegen, "pickle", spy)
    kernel_cache._warned.clear()
    with pytest.warns(RuntimeWarning) as caught:
        ck2, counts = _fresh(cache, k)
    msgs = [str(w.message) for w in caught if "kernel cache entry" in str(w.message)]
    assert len(msgs) == 1 and str(path) in msgs[0] and words in msgs[0], msgs
    assert counts["compiled"] == 1 and counts["cached"] == 0
    assert not spy.loaded and not marker.exists()
    np.testing.assert_array_equal(_run(ck2), want)
    assert check_entry(path, ck.key)  # rewritten: the next process loads it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ck3, counts = _fresh(cache, k)
    assert counts == {"compiled": 0, "rebuilt": 0, "cached": 1} and spy.loaded == [ck3.sha256]
    np.testing.assert_array_equal(_run(ck3), want)


def check_entry(path: Path, key: str) -> bool:
    payload, reason = kernel_cache.check_entry(path.read_bytes(), key, kernel_cache.machine())
    return payload is not None and not reason


def test_an_upgrade_or_another_machine_simply_misses(cache: kernel_cache.KernelCache, monkeypatch: Any) -> None:
    """Versions and CPU are part of the file name: other ones miss, with no warning."""
    ck, _ = _fresh(cache, 3.25)
    monkeypatch.setitem(kernel_cache._machine, "numba", "0.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, counts = _fresh(cache, 3.25)
    assert counts["compiled"] == 1 and counts["cached"] == 0
    assert len(_entries(cache.directory)) == 2


def test_kernel_cache_0_writes_nothing_and_kernel_cache_dir_is_used(tmp_path: Path, monkeypatch: Any) -> None:
    model = _model(tmp_path / "m.onnx")
    monkeypatch.setenv(kernel_cache.ENV_DIR, str(tmp_path / "default"))
    x = np.ones((1, 3, 16, 16), np.float32)
    codegen.clear_process_cache()
    before = codegen.STATS["compiled"]
    off = InferenceSession(str(model), providers=[(NUMBA, {"kernel_cache": "0"})])
    assert codegen.STATS["compiled"] > before and not (tmp_path / "default").exists()
    codegen.clear_process_cache()
    mine = tmp_path / "mine"
    on = InferenceSession(str(model), providers=[(NUMBA, {"kernel_cache_dir": str(mine)})])
    assert _entries(mine) and not (tmp_path / "default").exists()
    assert (mine.stat().st_mode & 0o777) == 0o700
    np.testing.assert_array_equal(off.run(None, {"x": x})[0], on.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"kernel_cache": "yes"}, "kernel_cache='yes'"),
        ({"kernel_cache": "0", "kernel_cache_dir": "/tmp/x"}, "kernel_cache_dir"),
        ({"kernel_cache": "0", "kernel_cache_max_mb": "5"}, "kernel_cache_max_mb"),
        ({"kernel_cache_dir": ""}, "kernel_cache_dir=''"),
        ({"kernel_cache_max_mb": "0"}, "kernel_cache_max_mb='0'"),
        ({"kernel_cache_max_mb": "-3"}, "kernel_cache_max_mb='-3'"),
        ({"kernel_cache_max_mb": "nan"}, "kernel_cache_max_mb='nan'"),
        ({"kernel_cache_max_mb": "lots"}, "kernel_cache_max_mb='lots'"),
    ],
)
def test_bad_option_values_are_refused_naming_the_option(tmp_path: Path, options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as e:
        InferenceSession(str(_model(tmp_path / "m.onnx")), providers=[(NUMBA, options)])
    assert named in e.value.message and NUMBA in e.value.message


def test_an_unsafe_directory_is_refused_with_a_warning(tmp_path: Path, monkeypatch: Any) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    c = kernel_cache.from_options({"kernel_cache_dir": str(shared)})
    with pytest.warns(RuntimeWarning, match=f"{shared} can be written by group or others.*without the kernel cache"):
        _, counts = _fresh(c, 4.5)
    assert counts["compiled"] == 1 and not _entries(shared)
    theirs = tmp_path / "theirs"
    c = kernel_cache.from_options({"kernel_cache_dir": str(theirs)})
    monkeypatch.setattr(kernel_cache.os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.warns(RuntimeWarning, match=f"{theirs} is owned by uid .* not by this user"):
        _, counts = _fresh(c, 4.5)
    assert counts["compiled"] == 1 and not _entries(theirs)


def test_kernel_cache_max_mb_evicts_the_least_recently_used_entries(tmp_path: Path) -> None:
    payload = bytes(2000)
    keys = [f"{i:024d}" for i in range(5)]
    size = len(kernel_cache.entry_bytes(keys[0], kernel_cache.machine(), payload))
    mb = 3.5 * size / (1 << 20)  # room for three entries and a half
    c = kernel_cache.from_options({"kernel_cache_dir": str(tmp_path / "kc"), "kernel_cache_max_mb": repr(mb)})
    assert c is not None and c.max_bytes == int(mb * (1 << 20))
    past = time.time() - 1000
    for i, key in enumerate(keys[:3]):
        c.store(key, payload)
        os.utime(c.path(key), (past + i, past + i))
    assert c.load(keys[0]) == payload  # a hit: keys[0] is now the most recently used of the three
    for key in keys[3:]:
        c.store(key, payload)
    left = [p.name for p in _entries(c.directory)]
    assert sorted(left) == sorted(c.path(k).name for k in (keys[0], keys[3], keys[4]))
    assert sum(p.stat().st_size for p in _entries(c.directory)) <= c.max_bytes
    bigger = kernel_cache.from_options({"kernel_cache_dir": str(tmp_path / "kc2")})
    assert bigger is not None and bigger.max_bytes == 512 << 20
    for key in keys:
        bigger.store(key, payload)
    assert len(_entries(bigger.directory)) == len(keys)


WRITER = """
import sys, warnings
from pathlib import Path
from ep_numba_cpu import kernel_cache
warnings.simplefilter("error")  # a half-written entry would warn
c = kernel_cache.KernelCache(Path(sys.argv[1]), 1 << 30)
seen = 0
for i in range(60):
    key = f"{i % 3:024d}"
    payload = bytes([i % 3]) * (50_000 + 1000 * (i % 3))
    got = c.load(key)
    assert got is None or got == payload, (key, len(got))
    seen += got is not None
    c.store(key, payload)
print(seen)
"""


def test_concurrent_processes_never_read_half_an_entry(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    d = tmp_path / "kc"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    assert sum(int(out) for out, _ in results) > 0
    assert len(_entries(d)) == 3 and not list(d.glob(kernel_cache.TMP_PREFIX + "*"))


def test_an_untrusted_context_compiles_through_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A context signed by a key this user does not trust: its machine code is not loaded (the
    context's warning), its kernels come from this user's verified cache entries instead."""
    from ep_core import SessionOptions

    model = _model(tmp_path / "m.onnx")
    ctx = tmp_path / "m_ctx.onnx"
    opts = {"kernel_cache_dir": str(tmp_path / "kc")}
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(tmp_path / "build-machine"))
    so = SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx))
    codegen.clear_process_cache()
    InferenceSession(str(model), so, providers=[(NUMBA, {"kernel_cache": "0"})])
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(tmp_path / "this-user"))
    codegen.clear_process_cache()
    x = np.ones((1, 3, 16, 16), np.float32)
    want = InferenceSession(str(model), providers=[(NUMBA, opts)]).run(None, {"x": x})[0]  # fills the cache
    codegen.clear_process_cache()
    before = dict(codegen.STATS)
    with pytest.warns(RuntimeWarning, match="not loading its machine code.*does not trust"):
        sess = InferenceSession(str(ctx), providers=[(NUMBA, opts)])
    got = {k: codegen.STATS[k] - before[k] for k in before}
    assert got["compiled"] == 0 and got["rebuilt"] == 0 and got["cached"] >= 1, got
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_the_machine_covers_the_code_kernels_import() -> None:
    """Generated kernels import vnni's intrinsics and helpers, which are compiled into the cached
    machine code without being part of the kernel's source (its key): their module's bytes are
    part of every entry's machine header, so another build misses instead of reusing stale code
    (found by red-team 32)."""
    pkg = Path(kernel_cache.__file__).parent
    imported = set()  # the package's modules a kernel source (a string opening with its imports) imports
    for path in pkg.glob("*.py"):
        for block in re.findall(r'"""import numpy as np\n((?:from [\w.]+ import [^\n]+\n)+)', path.read_text()):
            imported.update(f"{m}.py" for m in re.findall(r"from ep_numba_cpu\.(\w+) import", block))
    assert imported >= {"vnni.py", "direct_conv.py"}, imported
    assert imported <= set(kernel_cache.BUILT_IN) and "codegen.py" in kernel_cache.BUILT_IN
    digest = hashlib.sha256(b"".join((pkg / f).read_bytes() for f in kernel_cache.BUILT_IN)).hexdigest()[:16]
    assert digest in kernel_cache.machine()["ep"]


HASHING = """
import json, sys
from pathlib import Path
import numpy as np
from ep_numba_cpu import codegen, kernel_cache
body = 'x[0] + hash("ep-core") % 1000' if sys.argv[2] == "hash" else "x[0] + 1.0"
source = f'''
def kernel(x, out):
    out[0] = {body}
'''
ck = codegen.compile_kernel(source, "float64:1:C:r,float64:1:C:w", False, kernel_cache.KernelCache(Path(sys.argv[1]), 1 << 30))
out = np.zeros(1)
ck.dispatcher(np.ones(3), out)
print(json.dumps({"out": float(out[0]), "hashing": "numba.cpython.hashing" in sys.modules, **codegen.STATS}))
"""


@pytest.mark.parametrize("hashes", [True, False])
def test_a_rebuilt_kernel_links_the_hash_secret_only_where_its_code_names_it(tmp_path: Path, hashes: bool) -> None:
    """Numba's string hashing reads secret symbols that importing ``numba.cpython.hashing``
    defines (~17 ms): a kernel rebuilt from the cache in a fresh process whose machine code names
    them has it imported, links and computes what the compiling process did; one that does not
    hash leaves it unimported (it was imported for every rebuild before)."""
    runs = []
    for _ in range(2):  # compile and store, then rebuild in a new process
        args = [sys.executable, "-c", HASHING, str(tmp_path / "kc"), "hash" if hashes else "plain"]
        run = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED="7"))
        assert run.returncode == 0, run.stderr[-3000:]
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    (first, second) = runs
    assert first["compiled"] == 1 and second["cached"] == 1 and second["compiled"] == 0
    assert second["out"] == first["out"] and (second["out"] != 2.0) is hashes
    assert second["hashing"] is hashes
