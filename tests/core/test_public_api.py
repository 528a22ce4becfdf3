"""What ``ep_core`` (for users) and ``ep_core.sdk`` (for EP authors) export, pinned: adding, removing
or renaming a public name is a decision, so it fails here until this list is changed with it.

The light-import guarantees live beside: ``import ep_core`` loads no heavy stack
(tests/core/test_session_api.py::test_import_ep_core_is_light) and ``import ep_core.sdk`` loads
nothing of the engine or the tools (below)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ep_core
import ep_core.sdk

EP_CORE = [
    "CompileApiFlags",
    "DeviceType",
    "EpDevice",
    "EpSelectionPolicy",
    "FusedNode",
    "GraphOptimizationLevel",
    "HOST_MEMORY",
    "HardwareDevice",
    "InferenceSession",
    "KernelDef",
    "KernelRegistry",
    "MemoryInfo",
    "ModelCompiler",
    "ModelMetadata",
    "NodeArg",
    "NodeComputeInfo",
    "ProviderConfig",
    "RunOptions",
    "SessionOptions",
    "Tensor",
    "__version__",
    "get_all_providers",
    "get_available_providers",
    "get_ep_devices",
    "hardware_devices",
    "hookimpl",
    "load_provider_config",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
]

EP_CORE_SDK = [
    "API_VERSION",
    "Allocator",
    "ComputeContext",
    "ConfigError",
    "DataTransfer",
    "DeviceType",
    "ENTRY_POINT_GROUP",
    "EpCoreError",
    "EpDevice",
    "EpFail",
    "EpProfiler",
    "ExecutionProvider",
    "ExecutionProviderFactory",
    "Fail",
    "FusedNode",
    "GraphView",
    "HOST_MEMORY",
    "HardwareDevice",
    "HostEpFactory",
    "InvalidArgument",
    "InvalidGraph",
    "KernelContext",
    "KernelDef",
    "KernelRegistry",
    "LAYOUT_SENSITIVE_OPS",
    "MemType",
    "MemoryInfo",
    "ModelRequiresCompilation",
    "NHWC_DOMAIN",
    "NoSuchFile",
    "NodeComputeInfo",
    "NodeView",
    "NotImplementedByAnyEp",
    "RegistryEp",
    "RunConfig",
    "SessionConfig",
    "StatusCode",
    "SupportInfo",
    "SyncNotification",
    "SyncStream",
    "Tensor",
    "ValueInfo",
    "convex_groups",
    "hookimpl",
]


@pytest.mark.parametrize(
    ("module", "expected"), [(ep_core, EP_CORE), (ep_core.sdk, EP_CORE_SDK)], ids=["ep_core", "sdk"]
)
def test_exports_are_pinned_and_every_name_resolves(module: object, expected: list[str]) -> None:
    exported = list(module.__all__)  # type: ignore[attr-defined]
    assert len(exported) == len(set(exported)), "a name is exported twice"
    assert sorted(exported) == expected
    missing = [name for name in expected if getattr(module, name, None) is None]
    assert missing == []


def test_star_import_and_dir_of_ep_core_give_exactly_the_exports() -> None:
    namespace: dict[str, object] = {}
    exec("from ep_core import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == EP_CORE
    assert sorted(dir(ep_core)) == EP_CORE


def test_an_unknown_name_on_ep_core_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'ep_core' has no attribute 'Session'"):
        ep_core.Session  # type: ignore[attr-defined]  # noqa: B018


def test_sdk_names_at_the_root_are_the_sdk_objects() -> None:
    """What ``ep_core`` re-exports from the SDK is the same object, not a copy an EP could mix up."""
    for name in sorted(set(EP_CORE) & set(EP_CORE_SDK)):
        assert getattr(ep_core, name) is getattr(ep_core.sdk, name), name


def test_importing_the_sdk_loads_no_runtime_or_tools_module() -> None:
    code = (
        "import sys, ep_core.sdk\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith(('ep_core.runtime', 'ep_core.tools'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], f"import ep_core.sdk loaded {proc.stdout.split()}"
