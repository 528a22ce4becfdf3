"""Batch inference on Ray Data (``ep_core.tools.batch``) on a local 2-CPU Ray cluster: outputs
identical to a single-process loop of ``InferenceSession`` over the same batches, with one and two
actors, a fixed-batch-size model run row by row, the EPContext path, and errors through Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_core import InferenceSession
from ep_core.sdk.errors import Fail
from ep_core.tools.batch import EpCoreBatchPredictor, compile_context_model, predict_dataset
from ep_core.tools.zoo import fetch_model

pytestmark = pytest.mark.xdist_group("ray")  # one worker, one local cluster at a time

REF = "CpuReferenceExecutionProvider"
NUMBA = "NumbaCpuExecutionProvider"
ROWS, BATCH = 24, 4  # two blocks of 12 rows: every Ray batch is one of the loop's batches


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def mlp(batch: int | str) -> bytes:
    """y = relu(x @ W + b) * z and s = sum(y, 1): two inputs, two outputs, batch dim ``batch``."""
    rng = np.random.RandomState(0)
    inits = [
        numpy_helper.from_array(rng.randn(8, 4).astype(np.float32), "W"),
        numpy_helper.from_array(rng.randn(4).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["r"]),
        helper.make_node("Mul", ["r", "z"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["s"], keepdims=0),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "mlp",
        [vi("x", TensorProto.FLOAT, [batch, 8]), vi("z", TensorProto.FLOAT, [batch, 4])],
        [vi("y", TensorProto.FLOAT, [batch, 4]), vi("s", TensorProto.FLOAT, [batch])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def mlp_data() -> dict[str, np.ndarray]:
    rng = np.random.RandomState(1)
    return {"feat": rng.randn(ROWS, 8).astype(np.float32), "z": rng.randn(ROWS, 4).astype(np.float32)}


def magika_data() -> dict[str, np.ndarray]:
    return {"bytes": np.random.RandomState(2).randint(0, 257, size=(ROWS, 2048)).astype(np.int32)}


def loop(model: Any, feed: dict[str, np.ndarray], rows: int, **kw: Any) -> dict[str, np.ndarray]:
    """The single-process baseline: one session, ``rows`` rows per run, outputs stacked."""
    sess = InferenceSession(model, **kw)
    n = len(next(iter(feed.values())))
    runs = [sess.run(None, {k: v[s : s + rows] for k, v in feed.items()}) for s in range(0, n, rows)]
    return {o.name: np.concatenate([r[i] for r in runs]) for i, o in enumerate(sess.get_outputs())}


def dataset(ray: Any, columns: dict[str, np.ndarray]) -> Any:
    items = [{"id": i, **{c: v[i] for c, v in columns.items()}} for i in range(ROWS)]
    return ray.data.from_items(items, override_num_blocks=2)


def collect(ds: Any) -> dict[str, np.ndarray]:
    """The dataset's columns in id order (actors finish in any order)."""
    got = ds.take_batch(ROWS + 1, batch_format="numpy")
    order = np.argsort(got["id"])
    assert got["id"][order].tolist() == list(range(ROWS))
    return {k: v[order] for k, v in got.items()}


def test_predictor_in_process_without_ray() -> None:
    data = mlp_data()
    feed = {"x": data["feat"], "z": data["z"]}
    want = loop(mlp("N"), feed, ROWS)
    free = EpCoreBatchPredictor(mlp("N"), input_columns={"x": "feat"}, keep_columns=["id"])
    got = free({**data, "id": np.arange(ROWS)})
    assert sorted(got) == ["id", "s", "y"] and free.describe()["rows_per_run"] is None
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["s"], want["s"])
    one = EpCoreBatchPredictor(mlp(1), input_columns={"x": "feat"}, output_names=["s"])
    assert one.describe()["rows_per_run"] == 1
    got = one(data)
    assert list(got) == ["s"]
    np.testing.assert_array_equal(got["s"], loop(mlp(1), feed, 1)["s"])
    with pytest.raises(Exception, match=r"batches of exactly 2 rows and this batch has 3"):
        EpCoreBatchPredictor(mlp(2), input_columns={"x": "feat"})({k: v[:3] for k, v in data.items()})
    with pytest.raises(Exception, match=r"output_names names \['q'\], which the model does not have"):
        EpCoreBatchPredictor(mlp("N"), output_names=["q"])


def test_small_model_two_actors_and_fixed_batch_of_one(ray_cluster: Any) -> None:
    data = mlp_data()
    feed = {"x": data["feat"], "z": data["z"]}
    ds = dataset(ray_cluster, data)
    got = collect(
        predict_dataset(ds, mlp("N"), input_columns={"x": "feat"}, keep_columns=["id"], actors=2, batch_size=BATCH)
    )
    want = loop(mlp("N"), feed, BATCH)
    assert sorted(got) == ["id", "s", "y"]
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["s"], want["s"])
    one = collect(
        predict_dataset(
            ds, mlp(1), input_columns={"x": "feat"}, output_names=["y"], keep_columns=["id"], batch_size=BATCH
        )
    )
    assert sorted(one) == ["id", "y"]
    np.testing.assert_array_equal(one["y"], loop(mlp(1), feed, 1)["y"])


@pytest.mark.parametrize("actors", [1, 2])
def test_zoo_model_matches_a_single_process_loop(ray_cluster: Any, tmp_path: Path, actors: int) -> None:
    model = str(fetch_model("magika"))
    data = magika_data()
    want = loop(model, data, BATCH, providers=[REF])
    if actors == 1:  # EP names; with two actors, a provider config file read on the driver
        how: dict[str, Any] = {"providers": [REF]}
    else:
        cfg = tmp_path / "providers.json"
        cfg.write_text(json.dumps({"providers": [{"name": REF, "device": "cpu"}]}))
        how = {"config": str(cfg)}
    ds = predict_dataset(dataset(ray_cluster, data), model, keep_columns=["id"], actors=actors, batch_size=BATCH, **how)
    got = collect(ds)
    assert got["target_label"].shape == (ROWS, 214)
    np.testing.assert_array_equal(got["target_label"], want["target_label"])


def test_epcontext_model_compiled_once_loaded_by_actors(ray_cluster: Any) -> None:
    """The driver compiles magika on the Numba CPU EP once; actors load the EPContext model's bytes."""
    ctx = compile_context_model(str(fetch_model("magika")), providers=[NUMBA])
    assert isinstance(ctx, bytes)
    data = magika_data()
    want = loop(ctx, data, BATCH, providers=[NUMBA])
    actor = ray_cluster.remote(EpCoreBatchPredictor).remote(ctx, providers=[NUMBA])
    info = ray_cluster.get(actor.describe.remote())
    ray_cluster.kill(actor)
    assert info["epcontext_nodes"] > 0 and info["providers"][0] == NUMBA
    ds = dataset(ray_cluster, data)  # precompile=True: the same compile, done by predict_dataset
    out = predict_dataset(
        ds, fetch_model("magika"), providers=[NUMBA], precompile=True, keep_columns=["id"], batch_size=BATCH
    )
    # predict_dataset compiles for the actors' one thread (intra_op_num_threads = num_cpus = 1),
    # where the Numba EP plans its serial direct convolution: the float32 sums take another order
    # than the driver's BLAS plan, so the probabilities agree to float32 rounding, not bit for bit
    got = collect(out)["target_label"]
    np.testing.assert_allclose(got, want["target_label"], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got.argmax(axis=-1), want["target_label"].argmax(axis=-1))


def test_session_errors_name_model_and_ep_through_ray(ray_cluster: Any) -> None:
    data = mlp_data()
    ds = dataset(ray_cluster, {"x": data["feat"].astype(np.float64), "z": data["z"]})
    run_error = (
        r"model <\d+ bytes> on \['CpuReferenceExecutionProvider'\], batch of 4 rows: input 'x' has dtype float64"
    )
    with pytest.raises(Exception, match=run_error):
        predict_dataset(ds, mlp("N"), batch_size=BATCH).materialize()
    with pytest.raises(Fail, match="nothing was compiled"):  # on the driver: the reference EP compiles nothing
        predict_dataset(ds, mlp("N"), precompile=True)
    with pytest.raises(Exception, match=r"on \['NoSuchExecutionProvider'\]: unknown execution provider"):
        predict_dataset(ds, mlp("N"), providers=["NoSuchExecutionProvider"], batch_size=BATCH).materialize()


def test_without_ray_the_helper_says_how_to_install_it() -> None:
    code = """
import sys
import numpy as np
from ep_core.tools.batch import EpCoreBatchPredictor, predict_dataset
from ep_core.tools.sweep.ray_executor import RayNotInstalled
model = sys.stdin.buffer.read()
p = EpCoreBatchPredictor(model)
assert p({"x": np.ones((2, 8), np.float32), "z": np.ones((2, 4), np.float32)})["y"].shape == (2, 4)
assert "ray" not in sys.modules, "ep_core.tools.batch imported ray"
sys.modules["ray"] = None  # as if ray were not installed
try:
    predict_dataset(None, model)
except RayNotInstalled as exc:  # the sweeps' error: one class for "Ray is missing"
    print(exc)
"""
    proc = subprocess.run([sys.executable, "-c", code], input=mlp("N"), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "pip install 'ep-core[ray]'" in proc.stdout.decode()
