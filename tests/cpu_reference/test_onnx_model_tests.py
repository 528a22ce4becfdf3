"""The model tests onnx ships in ``onnx/backend/test/data``, through the reference EP.

``simple``, ``pytorch-converted`` and ``pytorch-operator`` hold ``model.onnx`` plus
``test_data_set_*/{input,output}_*.pb``. ``light`` holds ``light_<name>.onnx`` and
``light_<name>_output_0.pb`` only: like onnx's runner, the inputs are generated
(``arange(n).reshape(shape) / n`` in float32, unknown dims as 1) and compared with the stored
outputs. The light models are CNNs (Conv/pool heavy), so they are marked ``slow``."""

from __future__ import annotations

import glob
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ep_core
from ep_core.tools.conformance import assert_close

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
FOLDERS = ("simple", "pytorch-converted", "pytorch-operator")
# (rtol, atol) as onnx's model case table sets them; others use onnx's runner default
LIGHT_TOLERANCE = {"densenet121": (2e-3, 1e-7)}
# light models whose expected output is a softmax of logits equal in exact arithmetic but about
# 1e10 in size, where one float32 ulp is ~1000: whether the softmax comes out uniform depends on
# BLAS rounding every output channel of the last convolution alike, which OpenBLAS does or not
# by thread count and CPU (one thread on an AVX-512 EPYC: not). The logits are checked instead:
# equal to a few ulps, the softmax's premise.
LIGHT_LOGITS = {"squeezenet"}
DEFAULT_TOLERANCE = (1e-3, 1e-7)
# model dir name -> why it cannot run on the reference EP
SKIPPED = {
    name: (
        "ai.onnx.preview.training::Gradient differentiates the graph that contains it; it is "
        "a training-time graph transformation, not a kernel, and no EP here implements it"
    )
    for name in ("test_gradient_of_add", "test_gradient_of_add_and_mul")
}


def _model_dirs() -> list[Path]:
    return sorted(p for f in FOLDERS for p in (DATA / f).glob("test_*") if (p / "model.onnx").exists())


def _load_pb(path: str) -> object:
    """A test-data protobuf: tensor, sequence or optional (onnx stores all three)."""
    data = Path(path).read_bytes()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    if tensor.data_type or tensor.dims:
        return numpy_helper.to_array(tensor)
    seq = onnx.SequenceProto()
    seq.ParseFromString(data)
    if seq.elem_type:
        return numpy_helper.to_list(seq)
    opt = onnx.OptionalProto()
    opt.ParseFromString(data)
    return numpy_helper.to_optional(opt)


def _run(model: onnx.ModelProto, inputs: list[object], expected: list[object], rtol: float, atol: float) -> None:
    sess = ep_core.InferenceSession(model.SerializeToString())
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = sess.run(None, dict(zip(names, inputs, strict=False)))
    assert len(got) == len(expected)
    for i, (e, a) in enumerate(zip(expected, got, strict=False)):
        assert_close(e, a, rtol, atol, f"output {i}")


@pytest.mark.parametrize("model_dir", _model_dirs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_model(model_dir: Path) -> None:
    if model_dir.name in SKIPPED:
        pytest.skip(SKIPPED[model_dir.name])
    model = onnx.load(str(model_dir / "model.onnx"))
    sets = sorted(glob.glob(os.path.join(model_dir, "test_data_set_*")))
    assert sets, f"{model_dir} has no test data"
    for ds in sets:
        inputs = [_load_pb(p) for p in sorted(glob.glob(os.path.join(ds, "input_*.pb")), key=_index)]
        outputs = [_load_pb(p) for p in sorted(glob.glob(os.path.join(ds, "output_*.pb")), key=_index)]
        _run(model, inputs, outputs, *DEFAULT_TOLERANCE)


def _index(path: str) -> int:
    return int(Path(path).stem.rsplit("_", 1)[1])


def _light_models() -> list[str]:
    return sorted(p.name[len("light_") : -len(".onnx")] for p in (DATA / "light").glob("light_*.onnx"))


def _generated_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """onnx's runner's deterministic input: arange(n)/n in float32, unknown dims as 1."""
    tt = vi.type.tensor_type
    if tt.elem_type != onnx.TensorProto.FLOAT:
        pytest.skip(f"input {vi.name!r} is not float; onnx generates float inputs only")
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", _light_models())
def test_light_model(name: str) -> None:
    model = onnx.load(str(DATA / "light" / f"light_{name}.onnx"))
    inits = {i.name for i in model.graph.initializer}
    inputs = [_generated_input(vi) for vi in model.graph.input if vi.name not in inits]
    expected = []
    for i in range(len(model.graph.output)):
        path = DATA / "light" / f"light_{name}_output_{i}.pb"
        if not path.exists():
            pytest.skip(f"{path.name} is not shipped; onnx would compute it with its own evaluator")
        expected.append(_load_pb(str(path)))
    if name in LIGHT_LOGITS:
        _check_logits(model, inputs)
        return
    _run(model, inputs, expected, *LIGHT_TOLERANCE.get(name, DEFAULT_TOLERANCE))


def _check_logits(model: onnx.ModelProto, inputs: list[object]) -> None:
    """The input of the model's final Softmax, at one and two threads: all equal to 4 ulps."""
    softmax = model.graph.node[-1]
    assert softmax.op_type == "Softmax", softmax.op_type
    model.graph.output.append(onnx.helper.make_tensor_value_info(softmax.input[0], onnx.TensorProto.FLOAT, None))
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    for threads in (1, 2):
        sess = ep_core.InferenceSession(model.SerializeToString(), ep_core.SessionOptions(intra_op_num_threads=threads))
        logits = np.asarray(sess.run(None, dict(zip(names, inputs, strict=False)))[-1], np.float64)
        top = float(np.abs(logits).max())
        assert top > 0 and float(logits.max() - logits.min()) <= 4 * np.spacing(np.float32(top)), (threads, top)


def test_every_folder_has_models() -> None:
    for f in FOLDERS:
        assert any((DATA / f).glob("test_*/model.onnx")), f
    assert _light_models()
