"""Discovery through real installed distributions: tiny EP packages are built and pip-installed
into a temporary directory, and a fresh interpreter with that directory on its path lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _support.sandbox import clean_env

pytestmark = pytest.mark.xdist_group("plugin_packages")

GOOD = """
import numpy as np
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import KernelRegistry, FLOATS

REGISTRY = KernelRegistry("GoodTestExecutionProvider")

@REGISTRY.register("Neg", since=13, types={"T": FLOATS})
def neg(node, ctx):
    return lambda x: (np.negative(x),)

class GoodFactory(HostEpFactory):
    ep_name = "GoodTestExecutionProvider"
    ep_vendor = "Good Vendor"
    ep_version = "2.3.4"
    def ep_factory_create_ep(self, devices, ep_options, session_options):
        return RegistryEp(self.ep_name, REGISTRY)

factory = GoodFactory()
"""

BROKEN = """
raise RuntimeError("this plugin is broken on purpose")
"""

TYPO = """
from ep_core.sdk.ep_base import HostEpFactory

class TypoFactory(HostEpFactory):
    ep_name = "TypoTestExecutionProvider"
    ep_vendor = "tests"
    ep_version = "1.0.0"
    def ep_factory_create_ep(self, devices, ep_options, session_options):
        return None
    def ep_factory_get_suported_devices(self, devices):
        return []

factory = TypoFactory()
"""

BAD_ARG = """
from ep_core.sdk.ep_base import HostEpFactory

class BadArgFactory(HostEpFactory):
    ep_name = "BadArgTestExecutionProvider"
    ep_vendor = "tests"
    ep_version = "1.0.0"
    def ep_factory_create_ep(self, devices, ep_options, session_options, tracer):
        return None

factory = BadArgFactory()
"""

PACKAGES = {
    # distribution: (module, source, entry-point name)
    "good-test-ep": ("good_test_ep", GOOD, "GoodTestExecutionProvider"),
    "broken-test-ep": ("broken_test_ep", BROKEN, "BrokenImportTestExecutionProvider"),
    "typo-test-ep": ("typo_test_ep", TYPO, "TypoTestExecutionProvider"),
    "badarg-test-ep": ("badarg_test_ep", BAD_ARG, "BadArgTestExecutionProvider"),
    # a second distribution claiming the good EP's name
    "dup-test-ep": ("dup_test_ep", GOOD, "GoodTestExecutionProvider"),
}


def _write_package(root: Path, dist: str, module: str, source: str, ep_name: str) -> Path:
    pkg = root / dist
    (pkg / module).mkdir(parents=True)
    (pkg / module / "__init__.py").write_text(textwrap.dedent(source))
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{dist}"
            version = "0.0.1"

            [project.entry-points."ep_core.execution_providers"]
            {ep_name} = "{module}:factory"

            [tool.setuptools]
            packages = ["{module}"]
            """
        )
    )
    return pkg


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    target = tmp_path_factory.mktemp("site")
    paths = [str(_write_package(src, d, *spec)) for d, spec in PACKAGES.items()]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
        *paths,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(list(target.glob("*.dist-info"))) == len(PACKAGES)
    return target


def _env(site: Path, **extra: str) -> dict[str, str]:
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    env.update(extra)
    return env


def _python(site: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(site, **env))


def _cli(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ep_core.tools.cli", *args], capture_output=True, text=True, env=_env(site, **env)
    )


def test_cli_lists_good_and_reports_each_broken_plugin(site: Path) -> None:
    proc = _cli(site, "providers", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    good = rows["GoodTestExecutionProvider"]
    assert (good["status"], good["version"], good["vendor"]) == ("ok", "2.3.4", "Good Vendor")
    assert good["distribution"] == "good-test-ep"
    assert rows["CpuReferenceExecutionProvider"]["status"] == "ok"

    broken = rows["BrokenImportTestExecutionProvider"]
    assert broken["status"] == "load error" and broken["distribution"] == "broken-test-ep"
    assert "RuntimeError: this plugin is broken on purpose" in broken["reasons"][0]

    typo = rows["TypoTestExecutionProvider"]
    assert typo["status"] == "load error"
    assert "unknown hook 'ep_factory_get_suported_devices'" in typo["reasons"][0]
    assert "did you mean 'ep_factory_get_supported_devices'" in typo["reasons"][0]

    bad = rows["BadArgTestExecutionProvider"]
    assert bad["status"] == "load error"
    assert "tracer" in bad["reasons"][0] and "ep_factory_create_ep" in bad["reasons"][0]

    table = _cli(site, "providers")
    assert table.returncode == 0
    for name in rows:
        assert name in table.stdout
    assert "this plugin is broken on purpose" in table.stdout


def test_duplicate_name_warns_and_first_wins(site: Path) -> None:
    code = textwrap.dedent(
        """
        import warnings, json
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            from ep_core.runtime.discover import get_registry
            reg = get_registry()
        print(json.dumps([str(x.message) for x in w]))
        """
    )
    proc = _python(site, code)
    assert proc.returncode == 0, proc.stderr
    messages = json.loads(proc.stdout)
    assert any("'GoodTestExecutionProvider' is registered twice" in m and "dup-test-ep" in m for m in messages)


def test_good_plugin_runs_a_model_while_broken_ones_are_ignored(site: Path) -> None:
    code = textwrap.dedent(
        """
        import numpy as np, onnx
        from onnx import helper, TensorProto
        import ep_core
        g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"], name="neg")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        s = ep_core.InferenceSession(m.SerializeToString(), providers=["GoodTestExecutionProvider"])
        print(s.run(None, {"x": np.array([1, -2], np.float32)})[0].tolist(), s.get_node_assignment()["neg"]["ep"])
        """
    )
    proc = _python(site, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[-1.0, 2.0] GoodTestExecutionProvider"


def test_strict_mode_makes_load_errors_fatal(site: Path) -> None:
    proc = _cli(site, "providers", EP_CORE_STRICT_PLUGINS="1")
    assert proc.returncode == 1
    assert "EP_CORE_STRICT_PLUGINS=1 makes this fatal" in proc.stderr
    assert "(distribution " in proc.stderr
    code = textwrap.dedent(
        """
        from ep_core.sdk.errors import PluginError
        from ep_core.runtime.discover import get_registry
        reg = get_registry()
        assert reg.handle("GoodTestExecutionProvider").load() is not None
        try:
            reg.handle("BrokenImportTestExecutionProvider").load()
        except PluginError as exc:
            print(exc)
        """
    )
    proc = _python(site, code, EP_CORE_STRICT_PLUGINS="1")
    assert proc.returncode == 0, proc.stderr
    assert "broken-test-ep" in proc.stdout and "broken on purpose" in proc.stdout


def test_autoload_switch_skips_entry_points(site: Path) -> None:
    proc = _cli(site, "providers", "--json", EP_CORE_DISABLE_PLUGIN_AUTOLOAD="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_listing_imports_no_plugin_until_used(site: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from ep_core.runtime.discover import get_registry
        names = get_registry().names()
        assert "GoodTestExecutionProvider" in names and "BrokenImportTestExecutionProvider" in names
        print(sorted(m for m in sys.modules if m.endswith("_test_ep") or m.startswith("ep_cpu_reference")))
        """
    )
    proc = _python(site, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
