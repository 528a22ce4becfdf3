"""Provider selection: explicit lists, config files (TOML, JSON) through the API, the CLI and the
environment, EpDevices, policies; and the precise error for each kind of mistake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support.eps import FAKE_DEVICE, DeviceFactory, FusingFactory
from _support.models import add_mul_chain
from _support.sandbox import clean_env

import ep_core
from ep_core.sdk.errors import ConfigError, UnknownProviderError

FUSING = "FusingTestExecutionProvider"
FAKE = "FakeNpuTestExecutionProvider"


@pytest.fixture
def eps():
    ep_core.register_execution_provider_library(FUSING, FusingFactory())
    ep_core.register_execution_provider_library(FAKE, DeviceFactory())
    yield
    ep_core.unregister_execution_provider_library(FUSING)
    ep_core.unregister_execution_provider_library(FAKE)


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    path.write_bytes(add_mul_chain(4).SerializeToString())
    return path


TOML = """
[[providers]]
name = "FusingTestExecutionProvider"
device = "cpu:0"

[session_options]
enable_profiling = false

[config_entries]
"session.disable_cpu_ep_fallback" = "1"
"""

JSON = {
    "providers": [{"name": "FusingTestExecutionProvider", "device": "cpu"}],
    "config_entries": {"session.disable_cpu_ep_fallback": "1"},
}


def _feed():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return {"x": x, "y": np.full((2, 3), 2, np.float32)}


@pytest.mark.parametrize("kind", ["toml", "json"])
def test_config_file_selects_providers_and_entries(eps, tmp_path: Path, model_path: Path, kind: str) -> None:
    cfg = tmp_path / f"providers.{kind}"
    cfg.write_text(TOML if kind == "toml" else json.dumps(JSON))
    sess = ep_core.InferenceSession(str(model_path), config=str(cfg))
    assert sess.get_providers() == [FUSING]  # fallback disabled by the file
    assert sess.get_session_options().get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    (out,) = sess.run(None, _feed())
    x, y = _feed()["x"], _feed()["y"]
    np.testing.assert_allclose(out, ((x + y) * y + y) * y)


def test_config_file_from_environment(eps, tmp_path: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "env.toml"
    cfg.write_text(TOML)
    monkeypatch.setenv("EP_CORE_CONFIG", str(cfg))
    assert ep_core.InferenceSession(str(model_path)).get_providers() == [FUSING]
    # an explicit provider list wins over the environment
    assert ep_core.InferenceSession(str(model_path), providers=["CpuReferenceExecutionProvider"]).get_providers() == [
        "CpuReferenceExecutionProvider"
    ]


def test_cli_run_with_config(tmp_path: Path, model_path: Path) -> None:
    cfg = tmp_path / "cli.json"
    cfg.write_text(json.dumps({"providers": [{"name": "CpuReferenceExecutionProvider"}]}))
    env = clean_env()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ep_core.tools.cli",
            "run",
            str(model_path),
            "--config",
            str(cfg),
            "--json",
            "--show-assignment",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["providers"] == ["CpuReferenceExecutionProvider"]
    assert out["nodes_per_provider"] == {"CpuReferenceExecutionProvider": 4}
    assert out["outputs"]["out"]["shape"] == [2, 3]

    bad = tmp_path / "bad.toml"
    bad.write_text('[[providers]]\nname = "NoSuchExecutionProvider"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "ep_core.tools.cli", "run", str(model_path), "--config", str(bad)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2  # a usage error
    assert "unknown execution provider 'NoSuchExecutionProvider'" in proc.stderr and "ep-core providers" in proc.stderr


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_unknown_ep_in_file_names_file_and_available(eps, tmp_path: Path, model_path: Path) -> None:
    cfg = _write(tmp_path, "c.toml", '[[providers]]\nname = "FusingTestsExecutionProvider"\n')
    with pytest.raises(UnknownProviderError) as info:
        ep_core.InferenceSession(str(model_path), config=cfg)
    msg = info.value.message
    assert cfg in msg and "'FusingTestsExecutionProvider'" in msg
    assert "Did you mean 'FusingTestExecutionProvider'" in msg and "ep-core providers" in msg


def test_unknown_key_names_key_path_and_allowed(tmp_path: Path, model_path: Path) -> None:
    cfg = _write(tmp_path, "c.toml", '[[providers]]\nname = "CpuReferenceExecutionProvider"\ndevise = "cpu"\n')
    with pytest.raises(ConfigError) as info:
        ep_core.InferenceSession(str(model_path), config=cfg)
    msg = info.value.message
    assert f"{cfg}: providers.0.devise: unknown key" in msg
    assert "'device'" in msg and "'options'" in msg and "(got 'cpu')" in msg


def test_wrong_type_names_value(tmp_path: Path, model_path: Path) -> None:
    cfg = _write(tmp_path, "c.json", json.dumps({"session_options": {"enable_profiling": "sometimes"}}))
    with pytest.raises(ConfigError) as info:
        ep_core.InferenceSession(str(model_path), config=cfg)
    assert f"{cfg}: session_options.enable_profiling:" in info.value.message
    assert "'sometimes'" in info.value.message


def test_bad_config_entry_value_names_allowed(tmp_path: Path, model_path: Path) -> None:
    cfg = _write(tmp_path, "c.toml", '[config_entries]\n"ep.context_embed_mode" = "2"\n')
    with pytest.raises(
        ConfigError,
        match=r"config_entries.ep.context_embed_mode.*'2' is not allowed \(1 embeds .*\); use one of \['0', '1'\]",
    ):
        ep_core.InferenceSession(str(model_path), config=cfg)
    cfg = _write(tmp_path, "d.toml", '[config_entries]\n"ep.context_enabel" = "1"\n')
    with pytest.raises(ConfigError, match="unknown session config entry 'ep.context_enabel'"):
        ep_core.load_provider_config(cfg)


def test_unknown_device_lists_supported(eps, tmp_path: Path, model_path: Path) -> None:
    cfg = _write(tmp_path, "c.toml", f'[[providers]]\nname = "{FUSING}"\ndevice = "gpu:1"\n')
    with pytest.raises(ConfigError) as info:
        ep_core.InferenceSession(str(model_path), config=cfg)
    assert "has no device 'gpu:1'; it supports ['cpu:0']" in info.value.message and cfg in info.value.message
    cfg = _write(tmp_path, "d.toml", f'[[providers]]\nname = "{FUSING}"\ndevice = "tpu"\n')
    with pytest.raises(ConfigError, match="providers.0.device"):
        ep_core.InferenceSession(str(model_path), config=cfg)


def test_explicit_provider_errors(eps, model_path: Path) -> None:
    with pytest.raises(UnknownProviderError, match=r"Available: \[.*'CpuReferenceExecutionProvider'"):
        ep_core.InferenceSession(str(model_path), providers=["CUDAExecutionProvider"])
    with pytest.raises(ConfigError, match="has no option\\(s\\) \\['turbo'\\]"):
        ep_core.InferenceSession(str(model_path), providers=[(FUSING, {"turbo": 1})])
    with pytest.raises(ConfigError, match="listed twice"):
        ep_core.InferenceSession(str(model_path), providers=[FUSING, FUSING])


def test_provider_options_arrive_as_session_entries(eps, model_path: Path) -> None:
    opts = ep_core.SessionOptions()
    opts.add_session_config_entry(f"ep.{FUSING}.turbo", "1")
    with pytest.raises(ConfigError, match="turbo"):
        ep_core.InferenceSession(str(model_path), opts, providers=[FUSING])


def test_ep_devices_and_policies(eps, model_path: Path) -> None:
    devices = ep_core.get_ep_devices()
    fake = [d for d in devices if d.ep_name == FAKE]
    assert len(fake) == 1 and fake[0].device == FAKE_DEVICE
    opts = ep_core.SessionOptions()
    opts.add_provider_for_devices(fake, {})
    sess = ep_core.InferenceSession(str(model_path), opts)
    assert sess.get_providers() == [FAKE, "CpuReferenceExecutionProvider"]
    assert {a["ep"] for a in sess.get_node_assignment().values()} == {FAKE, "CpuReferenceExecutionProvider"}

    opts = ep_core.SessionOptions()
    opts.set_provider_selection_policy("PREFER_NPU")
    assert ep_core.InferenceSession(str(model_path), opts).get_providers()[0] == FAKE
    opts = ep_core.SessionOptions()
    opts.set_provider_selection_policy("PREFER_CPU")
    assert ep_core.InferenceSession(str(model_path), opts).get_providers()[0] != FAKE
    with pytest.raises(
        ConfigError, match="ep_selection_policy: Input should be 'DEFAULT', 'PREFER_CPU'.*got 'FASTEST'"
    ):
        opts.set_provider_selection_policy("FASTEST")

    opts = ep_core.SessionOptions()
    opts.set_provider_selection_policy_delegate(
        lambda eps, model_md, runtime_md, max_n: [d for d in eps if d.ep_name == FUSING]
    )
    assert ep_core.InferenceSession(str(model_path), opts).get_providers() == [FUSING, "CpuReferenceExecutionProvider"]


def test_session_option_keys_checked() -> None:
    opts = ep_core.SessionOptions()
    with pytest.raises(ConfigError, match="Known keys"):
        opts.add_session_config_entry("ep.contxt_enable", "1")
    opts.add_session_config_entry("ep.context_enable", True)
    assert opts.get_session_config_entry("ep.context_enable") == "1"


@pytest.mark.parametrize("cls", [ep_core.SessionOptions, ep_core.RunOptions])
def test_a_bad_option_value_is_a_config_error_naming_the_option(cls: type) -> None:
    """Not pydantic's ValidationError: ep-core's typed INVALID_ARGUMENT, at construction and at
    assignment, naming the option, the value and what is allowed."""
    with pytest.raises(ConfigError, match=rf"{cls.__name__}: log_severity_level: .*less than or equal to 4 \(got 5\)"):
        cls(log_severity_level=5)
    opts = cls()
    with pytest.raises(ConfigError, match=r"log_severity_level: .*less than or equal to 4 \(got 7\)") as info:
        opts.log_severity_level = 7
    assert info.value.code.value == "INVALID_ARGUMENT"
    assert opts.log_severity_level == -1  # nothing changed
    with pytest.raises(
        ConfigError, match=r"log_severity_lvl: unknown key; allowed keys here: \[.*'log_severity_level'"
    ):
        cls(log_severity_lvl=1)
