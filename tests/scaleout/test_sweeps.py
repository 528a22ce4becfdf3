"""Parity and conformance sweeps (``ep_core.tools.sweep``) in this process, in local worker
processes under a case timeout, and on a local 2-CPU Ray cluster (the code path of a remote one):
the same reports, hanging cases reported as ``timeout``, a worker killed mid-sweep losing no case,
a resource no node has failing at once, and the message without Ray installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

import ep_core
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.errors import InvalidArgument
from ep_core.sdk.kernels import NUMERIC, KernelRegistry
from ep_core.tools.conformance import run_conformance
from ep_core.tools.parity import build_report
from ep_core.tools.parity.render import render_markdown, render_text
from ep_core.tools.sweep import LocalProcessExecutor, make_executor
from ep_core.tools.sweep.ray_executor import MissingClusterResource, connect

pytestmark = pytest.mark.xdist_group("ray")  # one worker, one local cluster at a time

NUMBA = "NumbaCpuExecutionProvider"
REF = "CpuReferenceExecutionProvider"
REFERENCE_EXCLUSIONS = Path(__file__).resolve().parents[2] / "docs" / "conformance" / "cpu_reference.toml"
HANG = "SweepHangExecutionProvider"
CRASH = "SweepCrashOnceExecutionProvider"
LATE = "SweepLateExecutionProvider"
EXACT = "SweepExactExecutionProvider"
TIMEOUT_S = 3.0


def _add(behaviour: str, marker: str, node: Any, ctx: Any) -> Any:
    def add(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        if behaviour == "hang" and a.shape == b.shape:  # test_add hangs, test_add_bcast does not
            while True:
                time.sleep(0.5)
        if behaviour == "crash_once" and a.dtype == np.uint8 and not os.path.exists(marker):
            Path(marker).touch()  # the retry finds it and runs normally
            os._exit(1)
        return (np.add(a, b),)

    return add


class PlantedFactory(HostEpFactory):
    """An exact Add with a planted behaviour. Workers get it by pickle (by reference to this
    module), as any factory object registered by hand."""

    ep_vendor = "tests"
    ep_version = "0.0.1"

    def __init__(self, name: str, behaviour: str = "", marker: str = "") -> None:
        self.ep_name = name
        self.behaviour = behaviour
        self.marker = marker

    def ep_factory_api_version(self) -> int:
        return 2

    def ep_factory_create_ep(self, devices: Sequence[Any], ep_options: Mapping[str, str], session_options: Any) -> Any:
        reg = KernelRegistry(self.ep_name)
        reg.register("Add", since=7, types={"T": NUMERIC})(
            lambda node, ctx: _add(self.behaviour, self.marker, node, ctx)
        )
        return RegistryEp(self.ep_name, reg)


def strip_timings(data: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(json.dumps(data))
    data.pop("generated_at")
    for c in data["runtime"]["cases"] + data["runtime"]["models"]:
        c.pop("seconds")
    return data


@pytest.fixture(scope="module")
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sweeps") / "crashed-once"


@pytest.fixture(scope="module")
def planted(marker: Path) -> Iterator[None]:
    """Hand-registered EPs, registered before the cluster starts so it offers their resources."""
    factories = [PlantedFactory(HANG, "hang"), PlantedFactory(CRASH, "crash_once", str(marker)), PlantedFactory(EXACT)]
    for f in factories:
        ep_core.register_execution_provider_library(f.ep_name, f)
    yield
    for f in factories:
        ep_core.unregister_execution_provider_library(f.ep_name)


@pytest.fixture(scope="module")
def ray_cluster(planted: None) -> Iterator[Any]:
    pytest.importorskip("ray")
    with connect("local", num_cpus=2) as ray:
        yield ray


@pytest.mark.parametrize(
    ("ep", "selection"),
    [(NUMBA, {"ops": ["Add", "Relu", "Softmax"]}), (EXACT, {"ops": ["Add", "Sub"], "models": ["magika"]})],
    ids=["numba-cpu-ops", "planted-ep-ops-and-magika"],
)
def test_local_and_ray_reports_are_identical_apart_from_timings(
    ray_cluster: Any, ep: str, selection: dict[str, Any]
) -> None:
    """A real EP (Numba JIT kernels), and an EP whose cases fall back wholly (Sub) or partly (magika)."""
    kw: dict[str, Any] = dict(static=True, runtime=True, **selection)
    in_process = build_report(ep, **kw).data
    workers = build_report(ep, case_timeout=60, **kw).data
    on_ray = build_report(ep, cluster="local", **kw).data
    totals = in_process["runtime"]["totals"]
    assert totals["total"] >= 10 and totals["pass"] > 0 and totals["error"] == totals["timeout"] == 0
    assert strip_timings(workers) == strip_timings(in_process)
    assert strip_timings(on_ray) == strip_timings(in_process)


def test_conformance_results_are_the_same_wherever_the_cases_run(ray_cluster: Any) -> None:
    kw: dict[str, Any] = dict(exclusions=REFERENCE_EXCLUSIONS, filter="^test_(abs|add|relu|softmax|bernoulli)")
    in_process = run_conformance(REF, **kw)
    assert {r["status"] for r in in_process.results.values()} == {"passed", "excluded"} and in_process.passed > 10
    assert run_conformance(REF, case_timeout=60, **kw).results == in_process.results
    assert run_conformance(REF, cluster="local", **kw).results == in_process.results


@pytest.mark.parametrize("cluster", [None, "local"], ids=["local-workers", "ray"])
def test_a_hanging_case_times_out_and_is_reported(ray_cluster: Any, cluster: str | None) -> None:
    t0 = time.monotonic()
    report = build_report(
        HANG,
        static=False,
        runtime=True,
        ops=["Add"],
        filter="^test_add(_bcast)?$",
        cluster=cluster,
        case_timeout=TIMEOUT_S,
    )
    assert time.monotonic() - t0 < 30
    cases = {c["name"]: c for c in report.data["runtime"]["cases"]}
    assert cases["test_add"]["status"] == "timeout" and cases["test_add_bcast"]["status"] == "pass"
    assert cases["test_add"]["reason"].startswith(f"timed out after 3 s on {HANG}")
    assert cases["test_add"]["reference_status"] == "ok"
    rt = report.data["runtime"]
    assert rt["totals"]["timeout"] == 1 and rt["defects"] == 1 and report.exit_code() == 1
    assert rt["ops"][0]["status"] == "timeout" and rt["ops"][0]["failed_cases"] == ["test_add"]
    schema = json.loads(resources.files("ep_core.tools.parity").joinpath("report.schema.json").read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(report.data)) == []
    assert "  timed out: test_add\n" in render_text(report.data)
    assert "### Failures, errors and timeouts (1)" in render_markdown(report.data)


def test_a_hanging_conformance_case_times_out(ray_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from ep_core.tools.cli import main

    on_ray = run_conformance(HANG, filter="^test_add(_bcast)?$", cluster="local", case_timeout=TIMEOUT_S)
    assert {k: v["status"] for k, v in on_ray.results.items()} == {"test_add": "timeout", "test_add_bcast": "passed"}
    args = ["conformance", "--ep", HANG, "--filter", "^test_add(_bcast)?$", "--case-timeout", str(TIMEOUT_S)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "test_add [TIMEOUT] timed out after 3 s" in out
    assert "conformance: 1 passed, 1 failed of 2 (50.00%)" in out


@pytest.mark.parametrize("cluster", [None, "local"], ids=["local-workers", "ray"])
def test_a_worker_killed_mid_sweep_loses_no_case(ray_cluster: Any, marker: Path, cluster: str | None) -> None:
    marker.unlink(missing_ok=True)
    kw: dict[str, Any] = dict(static=False, runtime=True, ops=["Add"], include_expanded=False)
    report = build_report(CRASH, cluster=cluster, case_timeout=60, **kw)
    assert marker.exists()  # the uint8 case killed its worker once
    cases = report.data["runtime"]["cases"]
    assert len(cases) == 8 and {c["status"] for c in cases} == {"pass"}
    assert strip_timings(report.data) == strip_timings(build_report(CRASH, **kw).data)  # in-process: no crash now


def test_a_worker_that_always_dies_is_an_error_after_the_retries(planted: None, marker: Path) -> None:
    marker.unlink(missing_ok=True)
    report = build_report(
        CRASH,
        static=False,
        runtime=True,
        ops=["Add"],
        filter="^test_add_uint8$",
        cluster=LocalProcessExecutor(60, max_retries=0),
    )
    (case,) = report.data["runtime"]["cases"]
    assert case["status"] == "error" and case["reason"] == "the worker process died (exit code 1) on each of 1 attempts"


def test_a_resource_no_node_has_fails_fast(ray_cluster: Any) -> None:
    ep_core.register_execution_provider_library(LATE, PlantedFactory(LATE))  # after the cluster started
    try:
        t0 = time.monotonic()
        with pytest.raises(MissingClusterResource, match=f"the resource\\(s\\) 'ep:{LATE}'") as info:
            build_report(LATE, static=False, runtime=True, ops=["Add"], include_expanded=False, cluster="local")
        with pytest.raises(MissingClusterResource, match=f"'ep:{LATE}'"):
            run_conformance(LATE, filter="^test_add$", cluster="local")
        assert time.monotonic() - t0 < 20
    finally:
        ep_core.unregister_execution_provider_library(LATE)
    assert f"""ray start --address=HEAD_IP:6379 --resources='{{"ep:{LATE}": 1, "device:cpu": 1}}'""" in str(info.value)


def test_a_negative_case_timeout_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="--case-timeout must be 0 \\(no timeout\\) or a number of seconds"):
        make_executor(None, -1)


def test_an_ep_object_a_worker_cannot_unpickle_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from ep_core.tools.cli import main

    name = "SweepClosureExecutionProvider"
    factory = PlantedFactory(name)
    factory.hook = lambda: None  # type: ignore[attr-defined]  # a closure: no pickle carries it
    ep_core.register_execution_provider_library(name, factory)
    try:
        assert main(["parity-report", "--ep", name, "--ops", "Add", "--no-expanded"]) == 2
        assert main(["parity-report", "--ep", name, "--ops", "Add", "--no-expanded", "--case-timeout", "0"]) == 0
    finally:
        ep_core.unregister_execution_provider_library(name)
    err = capsys.readouterr().err
    assert f"execution provider {name!r} was registered in this process as a PlantedFactory object" in err
    assert "register it as 'package.module:attribute'" in err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--static", "--cluster", "local"], "--cluster given, but static parity runs no case"),
        (["--case-timeout", "5"], "--case-timeout given, but static parity runs no case"),
        (["--ops", "Abs", "--cluster-cpus", "2"], "--cluster-cpus sizes a local Ray cluster: add --cluster local"),
        (["--ops", "Abs", "--cluster", "yarn"], "--cluster 'yarn' must be 'local', 'auto' or 'ray://HOST:PORT'"),
    ],
)
def test_placement_flags_that_cannot_work_are_usage_errors(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ep_core.tools.cli import main

    assert main(["parity-report", "--ep", "CpuReferenceExecutionProvider", *argv]) == 2
    assert match in capsys.readouterr().err


def test_without_ray_the_commands_say_how_to_install_it() -> None:
    """Ray made unimportable in a fresh interpreter: ``--cluster`` is a usage error that says how to
    install it, and the tools never import Ray on their own."""
    code = """
import importlib, pkgutil, sys
import ep_core.tools
for m in pkgutil.walk_packages(ep_core.tools.__path__, "ep_core.tools."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
assert "ray" not in sys.modules, "a tool imported ray"
sys.modules["ray"] = None
from ep_core.tools.cli import main
print(main(["parity-report", "--ep", "CpuReferenceExecutionProvider", "--ops", "Abs", "--cluster", "local"]))
print(main(["conformance", "--filter", "^test_abs$", "--cluster", "auto"]))
from ep_core.tools.parity import build_report
from ep_core.sdk.errors import InvalidArgument
try:
    build_report("CpuReferenceExecutionProvider", runtime=True, ops=["Abs"], cluster="ray://head:10001")
except InvalidArgument as exc:
    print(type(exc).__name__)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "2", "RayNotInstalled"]
    lines = [x for x in proc.stderr.splitlines() if "error:" in x]
    assert len(lines) == 2 and all("install it with `pip install 'ep-core[ray]'`" in x for x in lines), lines
    assert lines[0].startswith("ep-core parity-report: error: --cluster runs the cases as Ray tasks")
