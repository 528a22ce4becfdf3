"""Context signing (``ep_core.sdk.epcontext.signing``): the per-user key is private, signatures
cover every part unambiguously, and a foreign key is trusted only once the user says so."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ep_core.sdk.epcontext import signing
from ep_core.sdk.errors import Fail
from ep_core.tools.cli import main as cli_main


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(tmp_path / "keys"))
    return tmp_path / "keys"


def test_own_key_is_created_private_on_first_use(keys: Path) -> None:
    key = signing.own_key()
    path = keys / signing.OWN_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert len(key) == 32 and signing.own_key() == key  # created once


def test_a_key_others_can_read_is_refused(keys: Path) -> None:
    signing.own_key()
    os.chmod(keys / signing.OWN_KEY_FILE, 0o644)
    with pytest.raises(Fail, match="can be read by other users.*chmod 600"):
        signing.sign({"a": b"x"})


def test_signature_verifies_and_any_edit_breaks_it(keys: Path) -> None:
    parts = {"plan": b"step 1", "binding": "node0 -> graph0"}
    sig = signing.sign(parts)
    assert signing.verify(parts, sig).trusted
    assert not signing.verify({**parts, "plan": b"step 2"}, sig).trusted
    assert "modified after signing" in signing.verify({**parts, "binding": "node0 -> graph1"}, sig).reason
    assert not signing.verify({"plan": b"step 1"}, sig).trusted  # a dropped part
    # moving bytes between parts does not keep the signature (length-prefixed encoding)
    assert signing.canonical({"a": "xy", "b": ""}) != signing.canonical({"a": "x", "b": "y"})
    assert "no signature" in signing.verify(parts, None).reason
    assert "not of the form" in signing.verify(parts, "sha256:abc").reason


def test_a_foreign_key_is_trusted_only_after_trust_key(
    keys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build-machine"
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(build))
    parts = {"payload": b"\x00native"}
    sig = signing.sign(parts)
    monkeypatch.setenv(signing.KEY_DIR_ENV, str(keys))
    verdict = signing.verify(parts, sig)
    assert not verdict.trusted and "ep-core trust-key" in verdict.reason
    assert cli_main(["trust-key", str(build / signing.OWN_KEY_FILE)]) == 0
    assert signing.verify(parts, sig).trusted
    trusted = next((keys / signing.TRUSTED_DIR).glob("*.key"))
    assert stat.S_IMODE(trusted.stat().st_mode) == 0o600


def test_processes_creating_the_key_at_once_all_get_the_same_whole_key(keys: Path) -> None:
    """Two sessions starting together on a fresh machine (or two pytest workers) race to create
    the key: it is written whole under a private name and then linked, so no process reads it
    half-written and all of them use the one that won."""
    import subprocess
    import sys

    code = "from ep_core.sdk.epcontext import signing; print(signing.key_id(signing.own_key()))"
    env = {**os.environ, "EP_CORE_KEY_DIR": str(keys)}
    for _ in range(5):
        for f in keys.glob("*.key"):
            f.unlink()
        procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE) for _ in range(4)]
        ids = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(ids) == 1 and len(next(iter(ids))) == 16
        assert [p.name for p in keys.iterdir() if p.name.startswith(".")] == []  # no temporary left
