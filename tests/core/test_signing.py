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
