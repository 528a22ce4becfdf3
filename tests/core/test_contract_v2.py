"""Contract version 2: what used to live outside the hookspecs (context sources, fusable ops, the
context output, ``session.disable_compile``, the kernel context) crosses as hooks and arguments,
and EP hooks are version-gated like factory hooks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _support.eps import FusingEp, FusingFactory
from _support.models import add_mul_chain, make_model
from onnx import TensorProto, helper

import ep_core
from ep_core import InferenceSession, SessionOptions
from ep_core.sdk import hookspecs
from ep_core.sdk.compute import NodeComputeInfo
from ep_core.sdk.config import SessionConfig
from ep_core.sdk.ep_base import HostEpFactory, RegistryEp
from ep_core.sdk.epcontext import output as output_module
from ep_core.sdk.epcontext.output import ContextOutput
from ep_core.sdk.epcontext.schema import register_ep_context_schema
from ep_core.sdk.errors import ModelRequiresCompilation, NotImplementedByAnyEp, StatusCode
from ep_core.sdk.kernels import KernelContext, KernelRegistry
from ep_core.tools.parity.introspect import EpLoadFailure, describe_ep

NAME = "ContractV2TestExecutionProvider"
MS = "com.microsoft"


@contextlib.contextmanager
def registered(factory: Any, name: str = NAME) -> Iterator[Any]:
    ep_core.register_execution_provider_library(name, factory)
    try:
        yield factory
    finally:
        ep_core.unregister_execution_provider_library(name)


def context_model(source: str) -> onnx.ModelProto:
    """One EPContext node (``source`` names the EP it belongs to) between x and y."""
    register_ep_context_schema()
    node = helper.make_node(
        "EPContext", ["x"], ["y"], name="ctx", domain=MS, embed_mode=1, ep_cache_context=b"{}", source=source
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


class ContextEp(RegistryEp):
    """Serves its EPContext nodes through a kernel; answers the version-2 context-sources hook."""

    def __init__(self) -> None:
        reg = KernelRegistry(NAME)
        reg.register("EPContext", since=1, domain=MS)(self._build)
        super().__init__(NAME, reg)
        self.sources_asked = 0
        self.contexts: list[Any] = []

    def ep_get_context_sources(self) -> tuple[str, ...]:
        self.sources_asked += 1
        return ("OldContractName",)

    def _build(self, node: Any, ctx: KernelContext) -> Any:
        self.contexts.append(ctx)
        return lambda x: (x.copy(),)


class ContextFactory(HostEpFactory):
    ep_name = NAME
    ep_vendor = "tests"
    ep_version = "2.0.0"

    def __init__(self, api: int) -> None:
        self.api = api
        self.last_ep: ContextEp | None = None

    def ep_factory_api_version(self) -> int:
        return self.api

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> ContextEp:
        self.last_ep = ContextEp()
        return self.last_ep


# ------------------------------------------------------------------------------- the specs
def test_version_2_hooks_are_declared_and_documented() -> None:
    assert hookspecs.API_VERSION >= 2
    for hook in ("ep_get_context_sources", "ep_factory_get_fusable_ops"):
        assert hookspecs.HOOK_API_VERSIONS[hook] == 2
        assert hook in (hookspecs.__doc__ or "")
    assert "output" in hookspecs.ep_get_ep_context_nodes.__code__.co_varnames
    assert not hasattr(output_module, "current_output") and not hasattr(output_module, "writing_context")


def test_the_eps_of_this_project_declare_contract_version_2_or_later() -> None:
    import importlib.util

    from ep_core.runtime.discover import get_registry

    names = ["CpuReferenceExecutionProvider", "NumbaCudaExecutionProvider"]
    if importlib.util.find_spec("ep_numba_cpu") is not None:
        names.append("NumbaCpuExecutionProvider")
    for name in names:
        handle = get_registry().handle(name)
        assert handle.load() is not None and handle.api_version >= 2, name


# ------------------------------------------------------------------------ context sources
def test_context_sources_come_from_the_hook() -> None:
    with registered(ContextFactory(api=2)) as factory:
        x = np.array([1.0, 2.0], dtype=np.float32)
        for source in (NAME, "OldContractName"):  # its own name, and the alias the hook adds
            sess = InferenceSession(context_model(source).SerializeToString(), providers=[NAME])
            assert sess.get_node_assignment()["ctx"]["ep"] == NAME
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
        assert factory.last_ep.sources_asked == 1
        with pytest.raises(NotImplementedByAnyEp, match="ctx"):
            InferenceSession(context_model("SomeoneElse").SerializeToString(), providers=[NAME])


def test_a_version_1_factory_never_gets_a_version_2_ep_hook_called() -> None:
    with registered(ContextFactory(api=1)) as factory:
        with pytest.warns(RuntimeWarning, match=r"ep_get_context_sources.*declares version 1.*return 2"):
            InferenceSession(context_model(NAME).SerializeToString(), providers=[NAME])
        assert factory.last_ep.sources_asked == 0
        with pytest.warns(RuntimeWarning), pytest.raises(NotImplementedByAnyEp, match="ctx"):
            InferenceSession(context_model("OldContractName").SerializeToString(), providers=[NAME])
        assert factory.last_ep.sources_asked == 0


def test_a_context_sources_answer_that_is_not_names_is_an_ep_failure() -> None:
    class Bad(ContextEp):
        def ep_get_context_sources(self) -> Any:
            return "OldContractName"  # a string, not a sequence of names

    class BadFactory(ContextFactory):
        def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
            return Bad()

    with registered(BadFactory(api=2)):
        with pytest.raises(ep_core.sdk.errors.EpFail, match=f"{NAME}.ep_get_context_sources returned"):
            InferenceSession(context_model(NAME).SerializeToString(), providers=[NAME])


# --------------------------------------------------------------------------- fusable ops
class FusableFactory(FusingFactory):
    ep_name = NAME

    def __init__(self, api: int, fusable: Any) -> None:
        super().__init__()
        self.api = api
        self.fusable = fusable

    def ep_factory_api_version(self) -> int:
        return self.api

    def ep_factory_get_fusable_ops(self) -> Any:
        return self.fusable


def test_fusable_ops_come_from_the_factory_hook() -> None:
    with registered(FusableFactory(2, [("", "Add", 7, None), ("ai.onnx", "Mul", 7, 12)])):
        desc = describe_ep(NAME)
    assert desc.fusable_declared and desc.kind == "compile"
    assert [(d.op_type, d.since_version, d.end_version) for d in desc.fusable] == [("Add", 7, None), ("Mul", 7, 12)]
    with registered(FusableFactory(2, None)):  # None: declares nothing (the documented default)
        assert not describe_ep(NAME).fusable_declared


def test_fusable_ops_on_a_version_1_factory_are_refused_not_ignored() -> None:
    with registered(FusableFactory(1, [("", "Add", 7, None)])):
        with pytest.raises(EpLoadFailure, match=r"implements ep_factory_get_fusable_ops .*version 1; return 2"):
            describe_ep(NAME)


# ------------------------------------------------------------------------ context output
class ContextWritingEp(FusingEp):
    """Fuses Add/Mul chains and writes one context file per fused node through ``output``."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[Any] = []
        self.fused: list[Any] = []

    def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
        self.fused.extend(fused_nodes)
        return super().ep_compile(graphs, fused_nodes)

    def ep_get_ep_context_nodes(self, output: ContextOutput) -> list[Any]:
        self.outputs.append(output)
        nodes = []
        for f in self.fused:
            rel = f"{output.model_name}_{f.name}.bin"
            output.write_file(rel, b"compiled " + f.name.encode())
            nodes.append(
                helper.make_node(
                    "EPContext", f.inputs, f.outputs, name=f.name, domain=MS, embed_mode=0, ep_cache_context=rel
                )
            )
        return nodes


class ContextWritingFactory(FusingFactory):
    ep_name = NAME

    def ep_factory_api_version(self) -> int:
        return 2

    def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
        self.last_ep = ContextWritingEp()
        return self.last_ep


def test_the_context_output_is_passed_as_an_argument(tmp_path: Path) -> None:
    src = tmp_path / "chain.onnx"
    onnx.save(add_mul_chain(4), str(src))
    so = SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    with registered(ContextWritingFactory()) as factory:
        sess = InferenceSession(str(src), so, providers=[NAME])
    (out,) = factory.last_ep.outputs
    assert isinstance(out, ContextOutput)
    assert out.model_name == "chain" and out.folder == tmp_path.resolve() and out.embed_mode == 0
    (fused,) = factory.last_ep.fused
    assert (tmp_path / f"chain_{fused.name}.bin").read_bytes() == b"compiled " + fused.name.encode()
    ctx = onnx.load(sess.context_model_path)
    assert [n.op_type for n in ctx.graph.node] == ["EPContext"]


def test_a_context_nodes_hook_without_the_output_argument_still_works(tmp_path: Path) -> None:
    """pluggy passes an implementation only the arguments it names (version-1 EPs keep working)."""

    class NoOutputEp(ContextWritingEp):
        def ep_get_ep_context_nodes(self) -> list[Any]:  # type: ignore[override]
            return [
                helper.make_node("EPContext", f.inputs, f.outputs, name=f.name, domain=MS, ep_cache_context=b"x")
                for f in self.fused
            ]

    class NoOutputFactory(ContextWritingFactory):
        def ep_factory_api_version(self) -> int:
            return 1

        def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
            self.last_ep = NoOutputEp()
            return self.last_ep

    src = tmp_path / "chain.onnx"
    onnx.save(add_mul_chain(4), str(src))
    so = SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    with registered(NoOutputFactory()):
        sess = InferenceSession(str(src), so, providers=[NAME])
    assert [n.op_type for n in onnx.load(sess.context_model_path).graph.node] == ["EPContext"]


# ----------------------------------------------------------------------- disable_compile
def test_disable_compile_is_refused_by_the_core_for_an_ep_that_never_reads_it() -> None:
    so = SessionOptions()
    so.add_session_config_entry("session.disable_compile", "1")
    factory = FusingFactory()
    with registered(factory, FusingFactory.ep_name):
        with pytest.raises(ModelRequiresCompilation) as err:
            InferenceSession(add_mul_chain(4).SerializeToString(), so, providers=[FusingFactory.ep_name])
        assert err.value.code is StatusCode.MODEL_REQUIRES_COMPILATION
        msg = err.value.message
        assert FusingFactory.ep_name in msg and "session.disable_compile=1" in msg
        assert all(f"'{n}'" in msg for n in ("add_0", "mul_1", "add_2", "mul_3"))
        assert factory.last_ep is not None and factory.last_ep.compiled == [], "ep_compile must not be called"
        sess = InferenceSession(add_mul_chain(4).SerializeToString(), providers=[FusingFactory.ep_name])
        assert factory.last_ep.compiled, "without the option the same EP compiles"
        assert sess is not None


def test_disable_compile_lets_an_ep_restore_context_nodes_through_ep_compile() -> None:
    """Only groups of EPContext nodes may reach ep_compile: restoring is not compiling."""

    class RestoringEp(RegistryEp):
        def __init__(self) -> None:
            super().__init__(NAME, KernelRegistry(NAME))
            self.restored: list[str] = []

        def ep_get_capability(self, graph: Any, support: Any) -> None:
            for n in graph.nodes:
                if n.op_type == "EPContext":
                    support.add_nodes_to_fuse([n])

        def ep_compile(self, graphs: Sequence[Any], fused_nodes: Sequence[Any]) -> list[NodeComputeInfo]:
            self.restored.extend(f.node_names for f in fused_nodes)
            return [NodeComputeInfo(compute=lambda state, x: (x.copy(),)) for _ in fused_nodes]

    class RestoringFactory(ContextFactory):
        def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
            self.last_ep = RestoringEp()  # type: ignore[assignment]
            return self.last_ep

    so = SessionOptions()
    so.add_session_config_entry("session.disable_compile", "1")
    with registered(RestoringFactory(api=2)) as factory:
        sess = InferenceSession(context_model(NAME).SerializeToString(), so, providers=[NAME])
        x = np.array([3.0, 4.0], dtype=np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
        assert factory.last_ep.restored == [("ctx",)]


# --------------------------------------------------------------------------- kernel ctx
KERNEL_CONTEXT = {"node", "ep", "memory_info", "stream", "allocator", "session_options", "model_path"}


def test_the_kernel_context_is_exactly_the_protocol(tmp_path: Path) -> None:
    declared = {n for n in vars(KernelContext) if not n.startswith("_")}
    assert declared == KERNEL_CONTEXT | {"constant", "subgraph"}
    path = tmp_path / "ctx.onnx"
    onnx.save(context_model(NAME), str(path))
    so = SessionOptions()
    so.add_session_config_entry("ep.context_file_path", str(tmp_path / "unused_ctx.onnx"))
    with registered(ContextFactory(api=2)) as factory:
        InferenceSession(str(path), so, providers=[NAME])
        ep = factory.last_ep
        (ctx,) = ep.contexts
        assert {a for a in dir(ctx) if not a.startswith("_")} == declared
        assert ctx.ep is ep, "ctx.ep is the EP's own object, not the core's handle on it"
        assert ctx.node.name == "ctx" and ctx.node.op_type == "EPContext"
        assert ctx.memory_info.is_host and ctx.stream is None and ctx.allocator is None
        assert isinstance(ctx.session_options, SessionConfig)
        assert ctx.session_options.get_session_config_entry("ep.context_file_path") == str(tmp_path / "unused_ctx.onnx")
        assert ctx.model_path == path
        assert ctx.constant("x") is None
        InferenceSession(context_model(NAME).SerializeToString(), providers=[NAME])
        assert factory.last_ep.contexts[0].model_path is None  # a model given as bytes


def test_kernel_builders_get_constants_through_the_context() -> None:
    seen: list[Any] = []
    reg = KernelRegistry(NAME)

    @reg.register("Add", since=7)
    def build(node: Any, ctx: KernelContext) -> Any:
        seen.append(ctx.constant(node.inputs[1]))
        return lambda a, b: (a + b,)

    class F(HostEpFactory):
        ep_name = NAME
        ep_vendor = "tests"
        ep_version = "1.0.0"

        def ep_factory_create_ep(self, devices: Any, ep_options: Mapping[str, str], session_options: Any) -> Any:
            return RegistryEp(NAME, reg)

    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [("x", 1, [2])], [("y", 1, [2])], [w])
    with registered(F()):
        sess = InferenceSession(model.SerializeToString(), providers=[NAME])
        out = sess.run(None, {"x": np.zeros(2, np.float32)})[0]
    np.testing.assert_array_equal(seen[0], [1.0, 2.0])
    np.testing.assert_array_equal(out, [1.0, 2.0])
