"""The per-machine kernel cache: compiled kernels kept on disk so that a later session of a model,
in any process of this user, rebuilds them instead of compiling (no EPContext model needed).

An entry holds what ``codegen`` serialises for one kernel (a pickle, as Numba's own cache), so it
is protected as a context file is (``ep_core.sdk.epcontext.signing``): a JSON header (no pickle)
names the kernel key and the machine the code was made for (CPU triple, name and features; Numba,
llvmlite, NumPy and Python versions; this EP's version and the modules compiled into every kernel,
``BUILT_IN``), and an HMAC-SHA256
signature by the user's key covers key, machine and the payload's sha256. The payload is handed to
``codegen`` (which unpickles it) only after the signature verifies with a trusted key, the header
matches this kernel on this machine and the payload's size and sha256 match. Anything else is a
bad entry: a warning naming the file and the reason (once per process), then the kernel compiles
and the entry is rewritten. The file name hashes key and machine too, so an upgrade or another CPU
simply misses (no warning).

Entries are written whole (temp file + ``os.replace``: concurrent processes never see half an
entry), in a directory created 0700; a directory another user owns or others can write is refused
(warning, no cache). The cache is bounded: past ``kernel_cache_max_mb`` the least recently used
entries (a hit touches its file's mtime) are deleted down to 90% of the bound."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ep_core.sdk.epcontext import signing
from ep_core.sdk.errors import ConfigError
from ep_numba_cpu import EP_NAME, __version__

ENV_DIR = "EP_NUMBA_CPU_KERNEL_CACHE_DIR"
OPTIONS = ("kernel_cache", "kernel_cache_dir", "kernel_cache_max_mb")
DEFAULT_MAX_MB = 512
FORMAT = "ep_numba_cpu kernel cache/1"
MAGIC = b"EP_NUMBA_CPU_KERNEL\n"
SUFFIX = ".nbk"
TMP_PREFIX = ".tmp-"
HEADER_FIELDS = {"format", "key", "meta", "payload_sha256", "payload_size", "signature"}
MAX_HEADER = 1 << 16
STALE_TMP_SECONDS = 3600.0

_lock = threading.Lock()
_dirs: dict[str, str | None] = {}  # directory -> None (usable) or why not, checked once per process
_usage: dict[str, int] = {}  # directory -> bytes its entries take, as this process last counted
_warned: set[tuple[str, str]] = set()
_machine: dict[str, str] = {}


# the modules whose code enters the cached machine code besides a kernel's own source (part of
# every entry's machine header): codegen (how it is compiled), and the intrinsics and helpers
# kernels import (vnni's, direct_conv's)
BUILT_IN = ("codegen.py", "vnni.py", "direct_conv.py")


def default_dir() -> Path:
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ep-numba-cpu" / "kernels"


def from_options(ep_options: Mapping[str, str]) -> KernelCache | None:
    """The cache the EP options ask for (None: ``kernel_cache=0``); ConfigError naming a bad option."""
    on = ep_options.get("kernel_cache", "1")
    if on not in ("0", "1"):
        raise ConfigError(
            f"{EP_NAME} option kernel_cache={on!r}: use '1' (keep compiled kernels in a per-machine cache, the "
            "default) or '0' (compile every session's kernels)"
        )
    if on == "0":
        extra = [k for k in OPTIONS[1:] if k in ep_options]
        if extra:
            raise ConfigError(
                f"{EP_NAME} option(s) {extra} configure the kernel cache, which kernel_cache=0 turns off; "
                "drop them or set kernel_cache=1"
            )
        return None
    raw_dir = ep_options.get("kernel_cache_dir")
    if raw_dir is not None and (not raw_dir.strip() or "\0" in raw_dir):
        raise ConfigError(f"{EP_NAME} option kernel_cache_dir={raw_dir!r}: give a directory path")
    directory = Path(raw_dir).expanduser() if raw_dir is not None else default_dir()
    raw_mb = ep_options.get("kernel_cache_max_mb", str(DEFAULT_MAX_MB))
    try:
        mb = float(raw_mb)
    except ValueError:
        mb = -1.0
    if not math.isfinite(mb) or mb <= 0:
        raise ConfigError(
            f"{EP_NAME} option kernel_cache_max_mb={raw_mb!r}: give the cache's size bound in MiB, a number > 0 "
            f"(default {DEFAULT_MAX_MB})"
        )
    return KernelCache(directory.absolute(), int(mb * (1 << 20)))


def machine() -> dict[str, str]:
    """What machine code depends on besides the kernel itself (checked on every load)."""
    if not _machine:
        import llvmlite
        import numba
        import numpy

        from ep_numba_cpu.compat import host_target

        triple, cpu, features = host_target()
        cfg: Any = numba.config
        built_in = hashlib.sha256(b"".join(Path(__file__).with_name(f).read_bytes() for f in BUILT_IN))
        _machine.update(
            triple=triple,
            cpu=cpu,
            features=features,
            numba=numba.__version__,
            llvmlite=llvmlite.__version__,
            numpy=numpy.__version__,
            python=f"{sys.implementation.cache_tag} {platform.python_version()}",
            ep=f"{__version__} {'+'.join(f[:-3] for f in BUILT_IN)} {built_in.hexdigest()[:16]}",
            numba_config=(
                f"opt={cfg.OPT};loop_vectorize={cfg.LOOP_VECTORIZE};slp_vectorize={cfg.SLP_VECTORIZE};"
                f"avx={cfg.ENABLE_AVX};boundscheck={cfg.BOUNDSCHECK}"
            ),
        )
    return dict(_machine)


def entry_name(key: str, meta: Mapping[str, str]) -> str:
    digest = hashlib.sha256(json.dumps({"key": key, "meta": dict(meta)}, sort_keys=True).encode()).hexdigest()
    return digest[:40] + SUFFIX


def signed_parts(key: str, meta: Mapping[str, str], sha256: str, size: int) -> dict[str, str]:
    """What an entry's signature covers (``purpose`` keeps it from passing as a context's)."""
    meta_text = json.dumps(dict(meta), sort_keys=True)
    return {"purpose": FORMAT, "key": key, "meta": meta_text, "payload_sha256": sha256, "payload_size": str(size)}


def entry_bytes(key: str, meta: Mapping[str, str], payload: bytes, signature: str | None = None) -> bytes:
    """An entry: MAGIC, the header's length (4 bytes, big-endian), the JSON header, the payload."""
    sha = hashlib.sha256(payload).hexdigest()
    sig = signature if signature is not None else signing.sign(signed_parts(key, meta, sha, len(payload)))
    header = {
        "format": FORMAT,
        "key": key,
        "meta": dict(meta),
        "payload_sha256": sha,
        "payload_size": len(payload),
        "signature": sig,
    }
    head = json.dumps(header, sort_keys=True).encode()
    return MAGIC + len(head).to_bytes(4, "big") + head + payload


def check_entry(data: bytes, key: str, meta: Mapping[str, str]) -> tuple[bytes | None, str]:
    """(payload, "") for a sound entry of kernel ``key`` on this machine, else (None, why not).
    Reads JSON only; the payload is returned only after signature, size and sha256 check out."""
    start = len(MAGIC) + 4
    if len(data) < start or not data.startswith(MAGIC):
        return None, "it is not a kernel cache entry (bad magic bytes or truncated)"
    n = int.from_bytes(data[len(MAGIC) : start], "big")
    if n > MAX_HEADER or len(data) < start + n:
        return None, "its header is truncated or too long"
    try:
        header = json.loads(data[start : start + n])
    except (UnicodeDecodeError, ValueError):
        return None, "its header is not JSON"
    if not isinstance(header, dict) or set(header) != HEADER_FIELDS:
        return None, f"its header does not have exactly the fields {sorted(HEADER_FIELDS)}"
    if header["format"] != FORMAT:
        return None, f"its format is {str(header['format'])[:40]!r}, not {FORMAT!r}"
    if header["key"] != key:
        return None, f"it holds kernel {str(header['key'])[:40]!r}, not {key!r}"
    stored = header["meta"]
    if not isinstance(stored, dict) or stored != dict(meta):
        diff = sorted(set(meta) ^ set(stored)) if isinstance(stored, dict) else ["meta"]
        diff += [k for k in meta if isinstance(stored, dict) and k in stored and stored[k] != meta[k]]
        return None, f"it was made for another machine or versions (differs in {diff[:6]})"
    sha, size, sig = header["payload_sha256"], header["payload_size"], header["signature"]
    if not isinstance(sha, str) or not isinstance(size, int) or not isinstance(sig, str):
        return None, "its header's payload_sha256, payload_size or signature has the wrong type"
    verdict = signing.verify(signed_parts(key, meta, sha, size), sig)
    if not verdict.trusted:
        return None, verdict.reason.replace("the context", "the entry")
    payload = data[start + n :]
    if len(payload) != size:
        return None, f"its payload has {len(payload)} bytes, its signed header says {size} (truncated?)"
    if hashlib.sha256(payload).hexdigest() != sha:
        return None, "its payload differs from its signed sha256 (modified after signing)"
    return payload, ""


class KernelCache:
    """One cache directory and its size bound (``from_options``)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.directory / entry_name(key, machine())

    def load(self, key: str) -> bytes | None:
        """The verified payload of ``key``'s entry; None on a miss or a bad entry (warned)."""
        if not self._usable():
            return None
        path = self.path(key)
        try:
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                self.reject(path, "it is not a regular file")
                return None
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.reject(path, f"it cannot be read ({type(exc).__name__}: {exc})")
            return None
        payload, reason = check_entry(data, key, machine())
        if payload is None:
            self.reject(path, reason)
            return None
        try:
            os.utime(path)  # least recently used is evicted first
        except OSError:
            pass
        return payload

    def reject(self, path: Path, reason: str) -> None:
        """A bad entry: warn once per file and reason; the kernel compiles and replaces it."""
        _warn_once(  # once per reason: a changed key would otherwise warn for every entry
            (str(path.parent), reason),
            f"{EP_NAME}: kernel cache entry {path} not loaded: {reason}. The kernel is compiled instead and the "
            "entry rewritten",
        )

    def store(self, key: str, payload: bytes) -> None:
        """Write ``key``'s entry atomically, then keep the directory within its bound."""
        if not self._usable():
            return
        data = entry_bytes(key, machine(), payload)
        if len(data) > self.max_bytes:
            return  # larger than the whole cache may be
        target = self.path(key)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=self.directory)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            _warn_once(
                (str(self.directory), "write"),
                f"{EP_NAME}: kernel cache directory {self.directory}: cannot write entries ({type(exc).__name__}: "
                f"{exc}); kernels compiled now will compile again in the next process",
            )
            return
        with _lock:
            d = str(self.directory)
            used = _usage.get(d)
            used = _count(self.directory) if used is None else used + len(data)
            if used > self.max_bytes:
                used = evict(self.directory, int(self.max_bytes * 0.9))
            _usage[d] = used

    def _usable(self) -> bool:
        d = str(self.directory)
        with _lock:
            if d not in _dirs:
                _dirs[d] = _check_dir(self.directory)
            reason = _dirs[d]
        if reason is not None:
            _warn_once(
                (d, "dir"),
                f"{EP_NAME}: kernel cache directory {d} {reason}; running without the kernel cache (every process "
                f"compiles its kernels again). Fix it, or name another directory with the EP option kernel_cache_dir "
                f"or ${ENV_DIR}; kernel_cache=0 turns the cache off",
            )
        return reason is None


def _check_dir(directory: Path) -> str | None:
    """Create the directory (0700) if needed; why it must not be used, or None."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError as exc:
        return f"cannot be created ({type(exc).__name__}: {exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None and info.st_uid != uid:
        return f"is owned by uid {info.st_uid}, not by this user (uid {uid}): another user could plant entries"
    if info.st_mode & 0o022:
        return f"can be written by group or others (mode {stat.filemode(info.st_mode)}); run: chmod go-w {directory}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return "is not writable by this user"
    return None


def _entries(directory: Path) -> list[tuple[int, int, Path]]:
    """(mtime_ns, size, path) of every entry; stale temp files of crashed writers are deleted."""
    out = []
    now = time.time()
    try:
        with os.scandir(directory) as it:
            for e in it:
                try:
                    info = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.endswith(SUFFIX) and stat.S_ISREG(info.st_mode):
                    out.append((info.st_mtime_ns, info.st_size, Path(e.path)))
                elif e.name.startswith(TMP_PREFIX) and now - info.st_mtime > STALE_TMP_SECONDS:
                    Path(e.path).unlink(missing_ok=True)
    except OSError:
        return []
    return out


def _count(directory: Path) -> int:
    return sum(size for _, size, _ in _entries(directory))


def evict(directory: Path, target_bytes: int) -> int:
    """Delete least recently used entries until they take at most ``target_bytes``; bytes left."""
    entries = sorted(_entries(directory))
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= target_bytes:
            break
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # another process evicted it
        except OSError:
            continue
        total -= size
    return total


def _warn_once(what: tuple[str, str], message: str) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(message, RuntimeWarning, stacklevel=4)
