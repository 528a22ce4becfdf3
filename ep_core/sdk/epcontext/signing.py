"""Signing what an EP stores in a context, so that native code is only ever loaded from a context
this user (or a machine this user trusts) wrote.

A checksum stored beside the data it checks proves nothing: whoever edits the data rewrites the
checksum. A signature needs a secret. Each user gets an HMAC-SHA256 key, created on first use in
``$EP_CORE_KEY_DIR`` (default ``~/.config/ep-core``) as ``context-signing.key`` with mode 0600. An EP
signs everything that decides what runs (its plans, specs, native code, weights, the EPContext
node's binding to them) when it writes a context, and verifies before it loads native code. A
context from elsewhere verifies only if its writer's key was put in ``trusted-context-keys/`` (see
``trust_key``); otherwise the EP rebuilds from its declarative spec (with a warning saying why) or,
under ``ep.context_require_signature=1``, refuses. HMAC keys are secrets: trusting a build machine
means copying its key file here over a channel you trust, never publishing it."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ep_core.sdk.errors import Fail

if TYPE_CHECKING:
    from ep_core.sdk.config import SessionConfig

KEY_DIR_ENV = "EP_CORE_KEY_DIR"
OWN_KEY_FILE = "context-signing.key"
TRUSTED_DIR = "trusted-context-keys"
SCHEME = "hmac-sha256"
REQUIRE_SIGNATURE_KEY = "ep.context_require_signature"


@dataclass(frozen=True)
class Verdict:
    """Whether signed parts may be trusted, and if not, a sentence saying why and what to do."""

    trusted: bool
    reason: str = ""


def key_dir() -> Path:
    configured = os.environ.get(KEY_DIR_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ep-core"


def _read_key(path: Path) -> bytes:
    """A key file's bytes; refuses one that others can read or that is not a regular file."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise Fail(f"context signing key {str(path)!r} is not a regular file")
    if info.st_mode & 0o077:
        raise Fail(
            f"context signing key {str(path)!r} can be read by other users (mode {stat.filemode(info.st_mode)}); "
            f"run: chmod 600 {path}"
        )
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise Fail(f"context signing key {str(path)!r} is not hex text") from None
    if len(key) < 32:
        raise Fail(f"context signing key {str(path)!r} is shorter than 32 bytes")
    return key


def own_key() -> bytes:
    """This user's signing key, created (0600, in a 0700 folder) the first time it is needed."""
    folder = key_dir()
    path = folder / OWN_KEY_FILE
    if not path.exists():  # written whole under a private name, then linked: never seen half-written
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".{OWN_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process made it first: use theirs
            pass
        finally:
            tmp.unlink()
    return _read_key(path)


def key_id(key: bytes) -> str:
    """A public name for a key (a hash of it), recorded in signatures to say which key signed."""
    return hashlib.sha256(b"ep-core context key id|" + key).hexdigest()[:16]


def trusted_keys() -> dict[str, bytes]:
    """Key id -> key, for this user's own key and every key in ``trusted-context-keys/``."""
    keys = {}
    own = own_key()
    keys[key_id(own)] = own
    folder = key_dir() / TRUSTED_DIR
    if folder.is_dir():
        for path in sorted(folder.glob("*.key")):
            key = _read_key(path)
            keys[key_id(key)] = key
    return keys


def trust_key(source: str | os.PathLike[str]) -> Path:
    """Trust contexts signed with the key in ``source`` (a build machine's ``context-signing.key``):
    copied, 0600, into ``trusted-context-keys/``. Returns where it went."""
    key = _read_key(Path(source))
    folder = key_dir() / TRUSTED_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = folder / f"{key_id(key)}.key"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    return target


def canonical(parts: Mapping[str, bytes | str]) -> bytes:
    """One unambiguous byte string for named parts (length-prefixed, sorted by name), so no edit of
    one part can be made up for by another."""
    out = bytearray(b"ep-core signed context v1\n")
    for name in sorted(parts):
        value = parts[name]
        data = value.encode() if isinstance(value, str) else bytes(value)
        encoded = name.encode()
        out += len(encoded).to_bytes(4, "big") + encoded + len(data).to_bytes(8, "big") + data
    return bytes(out)


def sign(parts: Mapping[str, bytes | str]) -> str:
    """``hmac-sha256:<key id>:<hex digest>`` over ``parts`` with this user's key."""
    key = own_key()
    digest = hmac.new(key, canonical(parts), hashlib.sha256).hexdigest()
    return f"{SCHEME}:{key_id(key)}:{digest}"


def verify(parts: Mapping[str, bytes | str], signature: str | None) -> Verdict:
    """Whether ``signature`` is a valid signature of ``parts`` by a trusted key."""
    if not signature:
        return Verdict(False, "the context carries no signature")
    scheme, _, rest = signature.partition(":")
    kid, _, digest = rest.partition(":")
    if scheme != SCHEME or not kid or not digest:
        return Verdict(False, f"the context's signature is not of the form {SCHEME}:<key id>:<digest>")
    key = trusted_keys().get(kid)
    if key is None:
        return Verdict(
            False,
            f"it was signed with key {kid}, which this user does not trust; to trust the machine that wrote it, "
            f"copy its {OWN_KEY_FILE} and run `ep-core trust-key FILE` (adds it to {key_dir() / TRUSTED_DIR})",
        )
    expected = hmac.new(key, canonical(parts), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, digest):
        return Verdict(False, f"its signature by key {kid} does not match its content: it was modified after signing")
    return Verdict(True)


def require_signature(options: "SessionConfig | None") -> bool:
    """Whether the session asked to refuse untrusted native code (``ep.context_require_signature=1``)."""
    return options is not None and options.flag(REQUIRE_SIGNATURE_KEY)
