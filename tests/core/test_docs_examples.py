"""The EP examples in docs/writing-an-ep.md are real: the smallest EP is planted as an installed
package (module + dist-info entry point) and runs a model; the compiling EP's grouping runs under
strict mode, where any rejected claim would raise."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _support.models import make_model
from onnx import TensorProto, helper

import ep_core
from ep_core.runtime.discover import reset_registry
from ep_core.sdk.errors import STRICT_ENV

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-an-ep.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture
def strict_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(STRICT_ENV, "1")
    monkeypatch.delenv("EP_CORE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    yield
    reset_registry()


def test_the_smallest_ep_installs_and_runs(tmp_path: Path, strict_registry: None) -> None:
    (tmp_path / "my_ep").mkdir()
    (tmp_path / "my_ep" / "__init__.py").write_text("")
    (tmp_path / "my_ep" / "factory.py").write_text(_python_blocks()[0])
    dist = tmp_path / "my_ep-1.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-ep\nVersion: 1.0.0\n")
    (dist / "entry_points.txt").write_text(
        "[ep_core.execution_providers]\nMyExecutionProvider = my_ep.factory:factory\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        reset_registry()
        model = make_model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [("x", TensorProto.FLOAT, [3])],
            [("y", TensorProto.FLOAT, [3])],
        )
        options = ep_core.SessionOptions()
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ep_core.InferenceSession(model.SerializeToString(), options, providers=["MyExecutionProvider"])
        (y,) = sess.run(None, {"x": np.array([-1.0, 0.5, 2.0], np.float32)})
        np.testing.assert_array_equal(y, [0.0, 0.5, 2.0])
        assert sess.get_node_assignment()["relu"]["ep"] == "MyExecutionProvider"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "my_ep" or m.startswith("my_ep.")]:
            del sys.modules[name]


def test_the_compiling_ep_claims_only_convex_groups(strict_registry: None) -> None:
    namespace: dict[str, object] = {}
    exec(_python_blocks()[1], namespace)  # the doc's own example, nothing from a file the user gave
    ep_class = namespace["MyCompilingEp"]
    from ep_core.sdk.capability import SupportInfo
    from ep_core.sdk.graph import GraphView, opset_map

    model = make_model(
        [
            helper.make_node("Add", ["x", "x"], ["a"], name="a"),
            helper.make_node("Sigmoid", ["a"], ["b"], name="b"),
            helper.make_node("Mul", ["a", "a"], ["c"], name="c"),
            helper.make_node("Add", ["b", "c"], ["d"], name="d"),
        ],
        [("x", TensorProto.FLOAT, [2])],
        [("d", TensorProto.FLOAT, [2])],
    )
    view = GraphView(model.graph, opset_map(model))
    support = SupportInfo("MyCompilingExecutionProvider", view, None)
    ep_class().ep_get_capability(view, support)  # type: ignore[operator]
    assert not support.rejected
    assert [[n.name for n in c.nodes] for c in support.fused] == [["a", "c"], ["d"]]
