"""A per-machine cache of optimized models, so a second session of a model (in any process) skips
the graph optimizer: importing onnxscript, onnx-ir and sympy (~0.3 s per process) and running the
passes (~0.3 s for PP-OCR det).

An entry is keyed by the sha256 of the checked model's bytes, the level, the folding budget, the
session config entries the passes read (``session.*``, ``optimization.*``), the versions of
ep-core, onnx, onnxscript and onnx-ir, and the optimizer's own source files. The passes also ask which ops the session's first EP supports
(``supports``): every answer is recorded in the entry and asked again on a hit, which is a hit only
when all agree. The optimized model is data (ONNX protobuf, no code), yet whoever can write the
cache folder could change what a session computes: each entry is signed with this user's context
signing key (``ep_core.sdk.epcontext.signing``) and one that does not verify is a miss, with a
warning naming the file. Writes are atomic; the folder (0700, ``EP_CORE_OPTIMIZER_CACHE_DIR`` or
``~/.cache/ep-core/optimized``) keeps at most ``MAX_BYTES``, least recently used entries going
first. ``session.optimizer_cache=0`` turns it off for a session."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import stat
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ep_core.sdk.epcontext import signing
from ep_core.sdk.errors import Fail, InvalidArgument

ENV_DIR = "EP_CORE_OPTIMIZER_CACHE_DIR"
CONFIG_KEY = "session.optimizer_cache"
MAGIC = b"EPCORE-OPT1\n"
MAX_BYTES = 2 << 30
SupportsOp = Callable[[str, str], bool]
_warned: set[tuple[str, str]] = set()


@functools.cache
def _sources_digest() -> str:
    """What changes when the optimizer's result may: its own code (the version alone does not change
    between releases) and the versions of ep-core and the libraries its passes come from; read once
    per process."""
    from importlib import metadata

    versions = []
    for dist in ("ep-core", "onnx", "onnxscript", "onnx-ir"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=?")
    h = hashlib.sha256("|".join(versions).encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def enabled(config: Mapping[str, str] | None) -> bool:
    value = (config or {}).get(CONFIG_KEY, "1")
    if value not in ("0", "1"):
        raise InvalidArgument(
            f"session config entry {CONFIG_KEY}={value!r}: use '1' (reuse optimized models from the per-machine "
            "cache, the default) or '0' (optimize every session's model)"
        )
    return value == "1"


def folder() -> Path:
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ep-core" / "optimized"


class Recorder:
    """``supports`` with every answer kept, in the order asked."""

    def __init__(self, supports: SupportsOp) -> None:
        self._supports = supports
        self.answers: dict[tuple[str, str], bool] = {}

    def __call__(self, op: str, domain: str) -> bool:
        key = (op, domain)
        if key not in self.answers:
            self.answers[key] = bool(self._supports(op, domain))
        return self.answers[key]


def entry_key(model: Any, level: int, budget: int, config: Mapping[str, str] | None) -> str:
    relevant = sorted((k, v) for k, v in (config or {}).items() if k.startswith(("session.", "optimization.")))
    h = hashlib.sha256(json.dumps([level, budget, relevant, _sources_digest()]).encode())
    h.update(model.SerializeToString())
    return h.hexdigest()


def _parts(key: str, header: Mapping[str, Any], body_sha: str) -> dict[str, str]:
    return {
        "kind": "ep-core optimized model",
        "key": key,
        "answers": json.dumps(header["answers"]),
        "unchanged": str(header["unchanged"]),
        "body": body_sha,
    }


def usable_folder(directory: Path) -> str:
    """Why ``directory`` must not be used for a cache this user trusts ('' when it may): another
    user owns it, or others may write to it (also ``ep-core run``'s context cache)."""
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return ""
    except OSError as exc:  # a path through a file, no permission ...
        return f"it cannot be used ({exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return "another user owns it"
    if info.st_mode & 0o022:
        return f"other users may write to it (mode {stat.filemode(info.st_mode)})"
    return ""


def _warn(path: Path, why: str) -> None:
    if (str(path.parent), why) not in _warned:
        _warned.add((str(path.parent), why))
        warnings.warn(
            f"ep-core optimizer cache: not using {path}: {why}; the model is optimized again. Remove the file, or "
            f"set the session config entry {CONFIG_KEY}=0 to not use the cache",
            RuntimeWarning,
            stacklevel=4,
        )


def load(key: str, supports: SupportsOp) -> tuple[Any, bool] | None:
    """``(model, unchanged)`` from a verified entry whose recorded answers ``supports`` repeats."""
    directory = folder()
    path = directory / f"{key}.onnxopt"
    why = usable_folder(directory)
    if why:
        _warn(path, why)
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if not data.startswith(MAGIC):
            raise ValueError("it is not an optimizer cache entry")
        size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
        start = len(MAGIC) + 4 + size
        header = json.loads(data[len(MAGIC) + 4 : start])
        body = data[start:]
        if not isinstance(header, dict) or header.get("key") != key:
            raise ValueError("its header names another model")
        signature = header.get("signature")
        verdict = signing.verify(
            _parts(key, header, hashlib.sha256(body).hexdigest()), signature if isinstance(signature, str) else None
        )
        if not verdict.trusted:
            raise ValueError(verdict.reason)
        if any(supports(op, domain) != ok for op, domain, ok in header["answers"]):
            return None  # another first EP: the passes could decide otherwise
    except (ValueError, TypeError, KeyError, AttributeError, OSError, Fail) as exc:
        # OSError: no readable signing key (a read-only or missing home): optimize, say why once
        _warn(path, str(exc))
        return None
    try:
        os.utime(path)  # most recently used
    except OSError:
        pass  # a folder we may read but not write: the LRU order just does not move
    if header["unchanged"]:
        return None, True
    import onnx

    return onnx.load_model_from_string(body), False


def store(key: str, answers: Mapping[tuple[str, str], bool], model: Any, unchanged: bool) -> None:
    directory = folder()
    if usable_folder(directory):
        return  # warned about when loading
    body = b"" if unchanged else model.SerializeToString()
    header: dict[str, Any] = {
        "key": key,
        "answers": [[o, d, ok] for (o, d), ok in answers.items()],
        "unchanged": unchanged,
    }
    try:
        header["signature"] = signing.sign(_parts(key, header, hashlib.sha256(body).hexdigest()))
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (Fail, OSError) as exc:  # no usable signing key or folder (read-only home): nothing cached, said once
        _warn(directory / f"{key}.onnxopt", str(exc))
        return
    head = json.dumps(header).encode()
    tmp = directory / f".{key}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + len(head).to_bytes(4, "big") + head + body)
        os.replace(tmp, directory / f"{key}.onnxopt")
    except OSError:
        tmp.unlink(missing_ok=True)
        return
    _evict(directory)


def _evict(directory: Path) -> None:
    """Drop least recently used entries while the folder holds more than ``MAX_BYTES``."""
    entries = []
    for p in directory.glob("*.onnxopt"):
        try:
            st = p.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
        if total <= MAX_BYTES:
            break
        p.unlink(missing_ok=True)
        total -= size
