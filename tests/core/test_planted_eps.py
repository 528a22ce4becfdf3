"""Planted third-party EPs, one per mistake an EP author makes at discovery and build time.

Each package is real: a module and a ``*.dist-info`` folder with ``entry_points.txt`` in a
temporary directory put on ``sys.path``, found by a fresh plugin registry the way an installed
distribution is. Every mistake must give a typed error naming the EP and the node or op in strict
mode (``EP_CORE_STRICT_PLUGINS=1``), or a recorded diagnostic that ``ep-core providers`` or the
session shows by default."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.runtime.discover import PluginRegistry, reset_registry
from ep_core.sdk.capability import SupportInfo
from ep_core.sdk.errors import STRICT_ENV, EpFail, NotImplementedByAnyEp, PluginError, UnknownProviderError
from ep_core.sdk.graph import GraphView, opset_map
from ep_core.sdk.kernels import KernelDef, KernelRegistry, schema_versions
from ep_core.tools.cli import main as cli_main
from ep_core.tools.cli.providers import provider_status

F = TensorProto.FLOAT
NO_FALLBACK = {"session.disable_cpu_ep_fallback": "1"}

# ------------------------------------------------------------------------- the packages
HEADER = """
import numpy as np
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.kernels import KernelRegistry, FLOATS
"""


def _factory(cls: str, facts: str, create: str = "return RegistryEp(self.ep_name, REGISTRY)") -> str:
    return f"""
class {cls}(HostEpFactory):
{textwrap.indent(textwrap.dedent(facts).strip(), "    ")}
    def ep_factory_create_ep(self, devices, ep_options, session_options):
        {create}

factory = {cls}()
"""


def _registry(name: str, registration: str) -> str:
    return f"""
REGISTRY = KernelRegistry({name!r})

@REGISTRY.register({registration})
def neg(node, ctx):
    return lambda x: (np.negative(x),)
"""


NEG_OK = '"Neg", since=13, types={"T": FLOATS}'
# (module, entry-point name, source)
PACKAGES: dict[str, tuple[str, str]] = {
    "no_vendor_ep": (
        "NoVendorExecutionProvider",
        HEADER
        + _registry("NoVendorExecutionProvider", NEG_OK)
        + _factory("NoVendorFactory", 'ep_name = "NoVendorExecutionProvider"\nep_version = "1.0.0"'),
    ),
    "no_version_ep": (
        "NoVersionExecutionProvider",
        HEADER
        + _registry("NoVersionExecutionProvider", NEG_OK)
        + _factory("NoVersionFactory", 'ep_name = "NoVersionExecutionProvider"\nep_vendor = "Acme"'),
    ),
    "bad_semver_ep": (
        "BadSemverExecutionProvider",
        HEADER
        + _registry("BadSemverExecutionProvider", NEG_OK)
        + _factory(
            "BadSemverFactory", 'ep_name = "BadSemverExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.2"'
        ),
    ),
    "bad_name_ep": (
        "AcmeNpu",
        HEADER
        + _registry("AcmeNpu", NEG_OK)
        + _factory("BadNameFactory", 'ep_name = "AcmeNpu"\nep_vendor = "Acme"\nep_version = "1.0.0"'),
    ),
    "mismatch_ep": (
        "AcmeNpuExecutionProvider",
        HEADER
        + _registry("AcmeExecutionProvider", NEG_OK)
        + _factory("MismatchFactory", 'ep_name = "AcmeExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"'),
    ),
    "unknown_constraint_ep": (
        "UnknownConstraintExecutionProvider",
        HEADER
        + _registry("UnknownConstraintExecutionProvider", '"Neg", since=13, types={"T1": FLOATS}')
        + _factory(
            "UnknownConstraintFactory",
            'ep_name = "UnknownConstraintExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"',
        ),
    ),
    "since14_ep": (
        "Since14ExecutionProvider",
        HEADER
        + _registry("Since14ExecutionProvider", '"Neg", since=14, types={"T": FLOATS}')
        + _factory("Since14Factory", 'ep_name = "Since14ExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"'),
    ),
    "returns_list_ep": (
        "ReturnsListExecutionProvider",
        HEADER
        + _registry("ReturnsListExecutionProvider", NEG_OK)
        + """
class ListingEp(RegistryEp):
    def ep_get_capability(self, graph, support):
        return [n for n in graph.nodes if n.op_type == "Neg"]  # the mistake: claims are calls
"""
        + _factory(
            "ReturnsListFactory",
            'ep_name = "ReturnsListExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"',
            create="return ListingEp(self.ep_name, REGISTRY)",
        ),
    ),
    "wrong_output_ep": (
        "WrongOutputExecutionProvider",
        HEADER
        + """
REGISTRY = KernelRegistry("WrongOutputExecutionProvider")

@REGISTRY.register("Neg", since=13, types={"T": FLOATS})
def neg(node, ctx):
    return lambda x: (np.zeros((100, 100), np.int32),)  # the mistake: int32 (100, 100) for float[2]
"""
        + _factory(
            "WrongOutputFactory",
            'ep_name = "WrongOutputExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"',
        ),
    ),
    "greedy_ep": (
        "GreedyExecutionProvider",
        HEADER
        + """
REGISTRY = KernelRegistry("GreedyExecutionProvider")

@REGISTRY.register("Thing", domain="com.example")
def thing(node, ctx):
    return lambda x: (x,)

class GreedyEp(RegistryEp):
    def ep_get_capability(self, graph, support):
        for node in graph.all_nodes:  # the mistake: all_nodes includes nodes other EPs took
            support.add_single_node(node)
"""
        + _factory(
            "GreedyFactory",
            'ep_name = "GreedyExecutionProvider"\nep_vendor = "Acme"\nep_version = "1.0.0"',
            create="return GreedyEp(self.ep_name, REGISTRY)",
        ),
    ),
}


def _plant(root: Path, module: str) -> None:
    ep_name, source = PACKAGES[module]
    (root / f"{module}.py").write_text(source)
    info = root / f"{module.replace('_', '-')}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[ep_core.execution_providers]\n{ep_name} = {module}:factory\n")


@pytest.fixture
def plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., PluginRegistry]]:
    """``plant(*modules, strict=False)``: those packages on the path and a fresh registry."""
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.delenv("EP_CORE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    planted: list[str] = []

    def do(*modules: str, strict: bool = False) -> PluginRegistry:
        for m in modules:
            _plant(tmp_path, m)
            planted.append(m)
        if strict:
            monkeypatch.setenv(STRICT_ENV, "1")
        sys.path.insert(0, str(tmp_path))
        return reset_registry()

    yield do
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))
    for m in planted:
        sys.modules.pop(m, None)
    reset_registry()


def _neg_model(opset: int = 13) -> onnx.ModelProto:
    return make_model(
        [helper.make_node("Neg", ["x"], ["y"], name="neg")], [("x", F, [2])], [("y", F, [2])], opset=opset
    )


def _session(model: onnx.ModelProto, providers: list[str], **config: str) -> ep_core.InferenceSession:
    opts = ep_core.SessionOptions()
    for k, v in config.items():
        opts.add_session_config_entry(k, v)
    return ep_core.InferenceSession(model.SerializeToString(), sess_options=opts, providers=providers)


# ------------------------------------------------------------------- factory facts
FACT_CASES = [
    ("no_vendor_ep", "NoVendorExecutionProvider", "NoVendorFactory does not declare ep_vendor"),
    ("no_version_ep", "NoVersionExecutionProvider", "NoVersionFactory does not declare ep_version"),
    ("bad_semver_ep", "BadSemverExecutionProvider", "ep_factory_version() returned '1.2', which is not SemVer"),
    ("bad_name_ep", "AcmeNpu", "ep_factory_name() returned 'AcmeNpu': an EP name must end in 'ExecutionProvider'"),
    (
        "mismatch_ep",
        "AcmeNpuExecutionProvider",
        "ep_factory_name() returned 'AcmeExecutionProvider' but the entry point is named 'AcmeNpuExecutionProvider'",
    ),
]


@pytest.mark.parametrize(("module", "ep_name", "reason"), FACT_CASES)
def test_factory_fact_mistake_is_a_shown_load_error(
    plant: Callable[..., PluginRegistry], module: str, ep_name: str, reason: str
) -> None:
    registry = plant(module)
    handle = registry.handle(ep_name)
    assert handle.load() is None
    assert handle.load_error is not None and reason in str(handle.load_error)
    assert str(handle.load_error).startswith(f"{ep_name} = {module}:factory (distribution {module.replace('_', '-')})")
    row = next(r for r in provider_status() if r["name"] == ep_name)
    assert row["status"] == "load error" and reason in row["reasons"][0]
    assert row["vendor"] is None and row["version"] is None  # never listed as ep-core's, 0.1.0
    with pytest.raises(UnknownProviderError, match="is installed but failed to load") as err:
        _session(_neg_model(), [ep_name])
    assert reason in str(err.value)


@pytest.mark.parametrize(("module", "ep_name", "reason"), FACT_CASES)
def test_factory_fact_mistake_raises_in_strict_mode(
    plant: Callable[..., PluginRegistry], module: str, ep_name: str, reason: str
) -> None:
    registry = plant(module, strict=True)
    with pytest.raises(PluginError) as err:
        registry.handle(ep_name).load()
    assert ep_name in str(err.value) and reason in str(err.value)


def test_cli_table_shows_every_discovery_problem(
    plant: Callable[..., PluginRegistry], capsys: pytest.CaptureFixture[str]
) -> None:
    plant("no_vendor_ep", "bad_name_ep", "unknown_constraint_ep")
    assert cli_main(["providers"]) == 0
    out = capsys.readouterr().out
    assert "NoVendorFactory does not declare ep_vendor" in out
    assert "an EP name must end in 'ExecutionProvider'" in out
    assert "UnknownConstraintExecutionProvider: UnknownConstraintExecutionProvider: kernel ai.onnx::Neg" in out
    assert "ok (1 problem(s))" in out


# ------------------------------------------------------------------ kernel registry
T1_REASON = (
    "UnknownConstraintExecutionProvider: kernel ai.onnx::Neg for opsets 13+: type constraint 'T1' does not "
    "exist in its schema (versions [13] have ['T']); the kernel is not registered"
)


def test_unknown_type_constraint_is_a_shown_diagnostic(plant: Callable[..., PluginRegistry]) -> None:
    registry = plant("unknown_constraint_ep")
    name = "UnknownConstraintExecutionProvider"
    row = next(r for r in provider_status() if r["name"] == name)
    assert row["status"] == "ok" and row["problems"] == [T1_REASON]
    with pytest.raises(NotImplementedByAnyEp) as err:
        _session(_neg_model(), [name], **NO_FALLBACK)
    assert "'neg'" in str(err.value) and f"refused at registration: {T1_REASON}" in str(err.value)

    from ep_core.runtime.eps import EpInstance
    from ep_core.runtime.options import SessionOptions
    from ep_core.runtime.select import SelectedEp, ep_devices_for, hardware_devices

    handle = registry.handle(name)
    instance = EpInstance(
        SelectedEp(handle, ep_devices_for(handle, hardware_devices(registry))[:1]), SessionOptions(), registry
    )
    try:
        assert instance.diagnostics() == [T1_REASON]
    finally:
        instance.close()


def test_unknown_type_constraint_raises_in_strict_mode(plant: Callable[..., PluginRegistry]) -> None:
    registry = plant("unknown_constraint_ep", strict=True)
    with pytest.raises(PluginError) as err:
        registry.handle("UnknownConstraintExecutionProvider").load()
    assert "EpFail" in str(err.value) and "type constraint 'T1' does not exist" in str(err.value)
    assert "UnknownConstraintExecutionProvider: kernel ai.onnx::Neg for opsets 13+" in str(err.value)


def test_registration_checks_op_and_since_against_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STRICT_ENV, raising=False)
    reg = KernelRegistry("PlantedExecutionProvider")
    reg.register("Gelu", since=1)(lambda n, c: None)  # Gelu first appears in opset 20
    reg.register("Neg", since=6, end=3)(lambda n, c: None)
    reg.register("Negate", since=13)(lambda n, c: None)
    reg.register("Thing", domain="com.example", types={"Q": ("tensor(float)",)})(lambda n, c: None)  # no schema
    assert reg.kernel_defs() == [KernelDef("Thing", "com.example", type_constraints={"Q": ("tensor(float)",)})]
    assert reg.problems == [
        "PlantedExecutionProvider: kernel ai.onnx::Gelu for opsets 1+: no schema at opset 1; Gelu versions begin "
        "at opsets [20], so register it with since=20 or later; the kernel is not registered",
        "PlantedExecutionProvider: kernel ai.onnx::Neg for opsets 6-3: end 3 is before since 6; the kernel is not "
        "registered",
        "PlantedExecutionProvider: kernel ai.onnx::Negate for opsets 13+: onnx has no op 'Negate' in domain "
        "'ai.onnx'; the kernel is not registered",
    ]
    assert reg.validate()[:3] == reg.problems
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(EpFail, match="Gelu for opsets 1\\+: no schema at opset 1.*EP_CORE_STRICT_PLUGINS=1"):
        reg.register("Gelu", since=1)(lambda n, c: None)


def test_since_only_serves_each_later_schema_version() -> None:
    """``since`` is expanded over the schema's history: Neg since 6 serves Neg-6 (opsets 6-12) and
    Neg-13 (13+) until the EP registers a newer def, which takes over from its own since."""
    neg6 = KernelDef("Neg", since_version=6, type_constraints={"T": ("tensor(float)",)})
    assert [(v.since, v.end) for v in schema_versions(neg6) or ()] == [(6, 12), (13, None)]
    assert [(v.since, v.end) for v in schema_versions(KernelDef("Neg", since_version=7, end_version=12)) or ()] == [
        (6, 12)
    ]
    reg = KernelRegistry("PlantedExecutionProvider")
    reg.add(neg6, lambda n, c: None)

    def found(opset: int) -> int | None:
        node = GraphView(_neg_model(opset).graph, opset_map(_neg_model(opset))).nodes[0]
        hit = reg.lookup(node)
        return hit.entry.kernel_def.since_version if hit.entry else None

    assert (found(6), found(12), found(13), found(21)) == (6, 6, 6, 6)
    reg.register("Neg", since=13, types={"T": ("tensor(float)",)})(lambda n, c: None)
    assert (found(12), found(13), found(21)) == (6, 13, 13)
    miss = reg.lookup(GraphView(_neg_model(5).graph, opset_map(_neg_model(5))).nodes[0])
    assert miss.reason == (
        "PlantedExecutionProvider's ai.onnx::Neg kernels cover opsets 6+, but the model imports ai.onnx opset 5"
    )


SINCE14_REASON = (
    "Since14ExecutionProvider's ai.onnx::Neg kernel covers opsets 14+, but the model imports ai.onnx opset 11"
)


def test_since_14_kernel_on_opset_11_model_says_why(plant: Callable[..., PluginRegistry]) -> None:
    plant("since14_ep")
    model = _neg_model(opset=11)
    with pytest.raises(NotImplementedByAnyEp) as err:
        _session(model, ["Since14ExecutionProvider"], **NO_FALLBACK)
    assert "'neg'" in str(err.value) and SINCE14_REASON in str(err.value)
    # with the CPU fallback the model runs, and the diagnostics say why the planted EP declined
    sess = _session(model, ["Since14ExecutionProvider"])
    assert sess.get_node_assignment()["neg"]["ep"] == "CpuReferenceExecutionProvider"
    assert f"Since14ExecutionProvider claim on ['neg'] rejected: {SINCE14_REASON}" in sess.get_partition_diagnostics()
    assert sess.run(None, {"x": np.array([1, -2], np.float32)})[0].tolist() == [-1.0, 2.0]


# --------------------------------------------------------------------------- claims
def _support_for(registry: PluginRegistry, name: str) -> tuple[Any, GraphView, SupportInfo]:
    handle = registry.handle(name)
    ep = handle.call(
        "ep_factory_create_ep", devices=[], ep_options={}, session_options=None, logger=logging.getLogger(name)
    )
    model = _neg_model()
    view = GraphView(model.graph, opset_map(model))
    return ep, view, SupportInfo(name, view, ep.ep_get_kernel_registry())


def test_capability_returning_a_list_is_recorded(plant: Callable[..., PluginRegistry]) -> None:
    ep, view, support = _support_for(plant("returns_list_ep"), "ReturnsListExecutionProvider")
    support.check_return(ep.ep_get_capability(view, support))
    assert not support.singles and not support.fused
    assert [str(r) for r in support.rejected] == [
        "ReturnsListExecutionProvider claim on ['neg'] rejected: ep_get_capability returned a list of 1 item(s); "
        "claims are made by calling support.add_single_node(node) / support.add_nodes_to_fuse(nodes), the return "
        "value is ignored"
    ]
    support.check_return(None)  # the correct return value records nothing
    assert len(support.rejected) == 1


def test_capability_returning_a_list_raises_in_strict_mode(plant: Callable[..., PluginRegistry]) -> None:
    ep, view, support = _support_for(plant("returns_list_ep", strict=True), "ReturnsListExecutionProvider")
    with pytest.raises(EpFail, match=r"ReturnsListExecutionProvider claim on \['neg'\] rejected: .*returned a list"):
        support.check_return(ep.ep_get_capability(view, support))


def test_capability_returning_a_list_is_a_session_diagnostic(plant: Callable[..., PluginRegistry]) -> None:
    """Through a real session: the node falls back to the CPU EP and the session says why."""
    plant("returns_list_ep")
    sess = _session(_neg_model(), ["ReturnsListExecutionProvider"])
    assert sess.get_node_assignment()["neg"]["ep"] == "CpuReferenceExecutionProvider"
    assert any(
        d.startswith("ReturnsListExecutionProvider claim on ['neg'] rejected: ep_get_capability returned a list")
        for d in sess.get_partition_diagnostics()
    )


def test_capability_returning_a_list_fails_the_session_in_strict_mode(plant: Callable[..., PluginRegistry]) -> None:
    plant("returns_list_ep", strict=True)
    with pytest.raises(EpFail, match=r"ReturnsListExecutionProvider claim on \['neg'\] rejected: .*returned a list"):
        _session(_neg_model(), ["ReturnsListExecutionProvider"])


def _thing_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["t"], name="add"),
        helper.make_node("Thing", ["t"], ["y"], name="thing", domain="com.example"),
    ]
    return make_model(nodes, [("x", F, [2])], [("y", F, [2])], extra_opsets=[("com.example", 1)])


def test_claim_of_a_node_not_offered_is_a_diagnostic(plant: Callable[..., PluginRegistry]) -> None:
    plant("greedy_ep")
    sess = _session(_thing_model(), ["CpuReferenceExecutionProvider", "GreedyExecutionProvider"])
    assignment = sess.get_node_assignment()
    assert (assignment["add"]["ep"], assignment["thing"]["ep"]) == (
        "CpuReferenceExecutionProvider",
        "GreedyExecutionProvider",
    )
    assert (
        "GreedyExecutionProvider claim on ['add'] rejected: node 'add' is already assigned to another execution "
        "provider" in sess.get_partition_diagnostics()
    )


def test_claim_of_a_node_not_offered_raises_in_strict_mode(plant: Callable[..., PluginRegistry]) -> None:
    plant("greedy_ep", strict=True)
    with pytest.raises(EpFail) as err:
        _session(_thing_model(), ["CpuReferenceExecutionProvider", "GreedyExecutionProvider"])
    assert "GreedyExecutionProvider claim on ['add'] rejected: node 'add' is already assigned" in str(err.value)


def test_validate_checks_types_against_every_schema_version_a_kernel_serves() -> None:
    """Add gained bfloat16 in opset 13: an open-ended def from 7 may list it, one ending at 12 may not."""
    bf16 = ("tensor(float)", "tensor(bfloat16)")
    reg = KernelRegistry("PlantedExecutionProvider")
    reg.register("Add", since=7, types={"T": bf16})(lambda n, c: None)
    assert reg.validate() == []
    reg = KernelRegistry("PlantedExecutionProvider")
    reg.register("Add", since=7, end=12, types={"T": bf16})(lambda n, c: None)
    assert reg.validate() == [
        "ai.onnx::Add 7-12: T lists ['tensor(bfloat16)'], which no schema version it serves allows"
    ]


# --------------------------------------------------------------------------- outputs
def test_wrong_output_is_an_ep_failure_naming_ep_node_and_output(plant: Callable[..., PluginRegistry]) -> None:
    """The issue's example: int32 (100, 100) returned for a declared float[2] output."""
    plant("wrong_output_ep")
    sess = _session(_neg_model(), ["WrongOutputExecutionProvider"])
    with pytest.raises(EpFail) as err:
        sess.run(None, {"x": np.ones(2, np.float32)})
    message = str(err.value)
    assert "node 'neg' (op Neg) on WrongOutputExecutionProvider" in message
    assert "output 0 'y': expected float32 with shape [2], got int32 with shape [100, 100]" in message


def test_a_schema_registered_at_run_time_is_found_by_its_ops_history_alone() -> None:
    """A schema registered after the registry first asked about the op (the reference EP registers
    legacy ai.onnx ops such as Affine) is found by walking that op's versions: its kernel is not
    refused, and no walk over every schema happens (~10 ms a process at session start)."""
    from onnx import defs

    from ep_core.sdk import kernels

    name = "PlantedRuntimeOp"
    assert kernels.schema_history("ai.onnx", name) == ()  # not there yet: nothing is cached
    t = defs.OpSchema.FormalParameter
    schema = defs.OpSchema(
        name, "", 3, inputs=[t("X", "T")], outputs=[t("Y", "T")], type_constraints=[("T", ["tensor(float)"], "")]
    )
    defs.register_schema(schema)
    walks: list[int] = []
    real_walk = defs.get_all_schemas_with_history
    defs.get_all_schemas_with_history = lambda: walks.append(1) or real_walk()  # type: ignore[assignment]
    try:
        reg = KernelRegistry("PlantedExecutionProvider")
        reg.register(name, since=3, types={"T": ("tensor(float)",)})(lambda n, c: None)
        assert reg.problems == [] and [d.op_type for d in reg.kernel_defs()] == [name]
        assert [(v.since, v.end) for v in kernels.schema_history("ai.onnx", name)] == [(3, None)]
        reg.register(name, since=1)(lambda n, c: None)  # before its first version: refused with the reason
        assert "versions begin at opsets [3]" in reg.problems[0]
        assert walks == []
    finally:  # leave onnx's registry and the histories as they were for the tests after this one
        defs.get_all_schemas_with_history = real_walk  # type: ignore[assignment]
        defs.deregister_schema(name, 3, "")
        kernels._HISTORIES.pop(("ai.onnx", name), None)


def test_a_kernel_package_that_fails_part_way_raises_its_failure_on_every_later_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any EP's lazily loaded kernels (the CUDA EP's too, not only the reference EP's): a package
    that registered some kernels and then failed is not imported again (that would register them
    twice, a misleading error); every later query raises an EP_FAIL naming the first failure."""
    (tmp_path / "flaky_registry.py").write_text(
        "from ep_core.sdk.kernels import KernelRegistry\n"
        "REG = KernelRegistry('FlakyExecutionProvider', kernel_package='flaky_kernels')\n"
    )
    (tmp_path / "flaky_kernels").mkdir()
    (tmp_path / "flaky_kernels" / "__init__.py").write_text(
        "from flaky_registry import REG\n"
        "REG.register('Relu', since=14)(lambda node, ctx: None)\n"
        "raise RuntimeError('disk went away')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import flaky_registry  # type: ignore[import-not-found]

    try:
        with pytest.raises(RuntimeError, match="disk went away"):
            flaky_registry.REG.has_op("Relu")
        for query in (lambda: flaky_registry.REG.has_op("Relu"), flaky_registry.REG.kernel_defs):
            with pytest.raises(EpFail) as err:
                query()
            assert "FlakyExecutionProvider" in str(err.value) and "RuntimeError: disk went away" in str(err.value)
            assert "start a new process" in str(err.value) and "twice" not in str(err.value)
    finally:
        for name in ("flaky_registry", "flaky_kernels"):
            sys.modules.pop(name, None)
