"""Real models (magika, PP-OCR cls and det) assign every compute node to this EP. Only shape
arithmetic stays on the host, as in ORT's CUDA EP: nodes that read only host values and whose
results feed only host-side inputs (Reshape's shape, Clip's bounds, ...). On a GPU the models also
run and match the reference EP within 1e-3."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import EP, REF, assert_close, session, skip_on_cudasim

MODELS = {
    "magika": lambda rng: {"bytes": rng.integers(0, 257, size=(1, 2048)).astype(np.int32)},
    "ppocr_cls": lambda rng: {"x": rng.uniform(-1, 1, size=(1, 3, 48, 192)).astype(np.float32)},
    "ppocr_det": lambda rng: {"x": rng.uniform(-1, 1, size=(1, 3, 64, 96)).astype(np.float32)},
}
SHAPE_OPS = {
    "Shape",
    "Cast",
    "Slice",
    "Concat",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Constant",
    "ConstantOfShape",
    "Reshape",
}


def _model_path(name: str) -> str:
    from ep_core.tools.zoo import fetch_model

    try:
        return str(fetch_model(name))
    except Exception as exc:  # no network and no cache
        pytest.skip(f"zoo model {name} unavailable: {exc}")


def _value_is_small_int(sess, name: str) -> bool:
    vi = sess.graph.value_info(name)
    if vi is None or vi.np_dtype is None:
        return False
    return vi.np_dtype.kind in "iu" and vi.shape is not None and len(vi.shape) <= 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_assigns_every_compute_node_to_the_ep(name: str) -> None:
    sess = session(_model_path(name))
    ep = sess.execution_providers[0].ep
    elsewhere = {k: v["ep"] for k, v in sess.get_node_assignment().items() if v["ep"] != EP}
    assert set(elsewhere.values()) <= {REF}
    assert set(elsewhere) == set(ep.host_nodes), "only nodes this EP chose to leave on the host may run elsewhere"
    for node_name in elsewhere:
        node = sess.graph.node(node_name)
        assert node.op_type in SHAPE_OPS, f"{node_name} ({node.op_type}) is not shape arithmetic"
        for out in node.outputs:
            assert _value_is_small_int(sess, out) or node.op_type == "Constant", (
                f"{node_name} computes {out}, not a shape"
            )
    assert ep.declined == {}
    assert sum(1 for v in sess.get_node_assignment().values() if v["ep"] == EP) > 50
    copies = [line for line in sess.get_plan() if " copy " in line]
    assert len(copies) == len(sess.get_inputs()) + len(sess.get_outputs()), (
        "per run only the inputs go up and the outputs come down",
        copies,
    )


@skip_on_cudasim("a real model takes hours at ~100 us per simulated thread; session creation is tested above")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_the_reference_on_a_gpu(name: str) -> None:
    path = _model_path(name)
    feeds = MODELS[name](np.random.default_rng(0))
    got = session(path).run(None, feeds)
    ref = session(path, [REF]).run(None, feeds)
    assert_close(got, ref, 1e-3, name)
