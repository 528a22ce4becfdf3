"""``ep_core.onnxruntime.iobinding.IOBinding`` beside onnxruntime 1.31's: only bound outputs come
back, in bind order; preallocated buffers and OrtValues receive the results; raw pointers; device
bindings on the Numba-CUDA EP (under ``NUMBA_ENABLE_CUDASIM=1`` in CI)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ep_core
from ep_core.onnxruntime.iobinding import IOBinding, SessionIOBinding
from ep_core.onnxruntime.ortvalue import OrtValue
from ep_core.runtime.iobinding import IOBinding as EngineIOBinding
from ep_core.sdk.errors import InvalidArgument

from .test_ortvalue import needs_cuda

CUDA = "NumbaCudaExecutionProvider"


def _model() -> bytes:
    """Three outputs: a = Relu(x), b = Neg(x), c = x + x."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["x"], ["b"], name="neg"),
        helper.make_node("Add", ["x", "x"], ["c"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "three",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "abc"],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
EXPECTED = {"a": np.maximum(X, 0), "b": -X, "c": X + X}


class Pair:
    """The same binding calls on onnxruntime and on ep-core."""

    def __init__(self, providers: list[str] | None = None) -> None:
        self.ort_sess = ort.InferenceSession(_model(), providers=["CPUExecutionProvider"])
        self.sess = ep_core.InferenceSession(_model(), providers=providers)
        self.theirs, self.ours = self.ort_sess.io_binding(), IOBinding(self.sess)

    def both(self, method: str, *args, **kwargs) -> None:
        getattr(self.theirs, method)(*args, **kwargs)
        getattr(self.ours, method)(*args, **kwargs)

    def run(self) -> None:
        self.ort_sess.run_with_iobinding(self.theirs)
        self.sess.run_with_iobinding(self.ours._iobinding)


def test_only_bound_outputs_come_back_in_bind_order() -> None:
    p = Pair()
    assert p.ours.get_outputs() == [] and p.theirs.get_outputs() == []
    p.both("bind_cpu_input", "x", X)
    p.both("bind_output", "c")
    p.both("bind_output", "a")
    p.run()
    ours, theirs = p.ours.get_outputs(), p.theirs.get_outputs()
    assert [type(o) for o in ours] == [OrtValue, OrtValue] and len(theirs) == 2
    for o, t, name in zip(ours, theirs, "ca", strict=True):
        np.testing.assert_array_equal(o.numpy(), t.numpy())
        np.testing.assert_array_equal(o.numpy(), EXPECTED[name])
        assert (o.device_name(), o.data_type(), o.shape()) == (t.device_name(), t.data_type(), t.shape())
    copied = p.ours.copy_outputs_to_cpu()
    assert [c.tolist() for c in copied] == [c.tolist() for c in p.theirs.copy_outputs_to_cpu()]
    assert all(isinstance(c, np.ndarray) for c in copied)
    assert [t.shape for t in p.ours.get_outputs_as_ortvaluevector()] == [(2, 3), (2, 3)]
    p.both("bind_output", "b")
    p.both("bind_output", "c")  # rebinding keeps its place: c, a, b
    p.run()
    for o, t, name in zip(p.ours.get_outputs(), p.theirs.get_outputs(), "cab", strict=True):
        np.testing.assert_array_equal(o.numpy(), t.numpy())
        np.testing.assert_array_equal(o.numpy(), EXPECTED[name])
    p.both("clear_binding_outputs")
    assert p.ours.get_outputs() == [] and p.theirs.get_outputs() == [] and p.ours.copy_outputs_to_cpu() == []


def test_a_run_with_no_output_bound_is_refused() -> None:
    p = Pair()
    p.both("bind_cpu_input", "x", X)
    with pytest.raises(RuntimeError, match="At least one output should be requested"):
        p.ort_sess.run_with_iobinding(p.theirs)
    with pytest.raises(InvalidArgument, match="no output is bound"):
        p.sess.run_with_iobinding(p.ours._iobinding)


def test_preallocated_buffers_receive_the_results() -> None:
    p = Pair()
    p.both("bind_cpu_input", "x", X)
    theirs_buf, ours_buf = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    p.theirs.bind_output("b", "cpu", 0, np.float32, [2, 3], theirs_buf.ctypes.data)
    p.ours.bind_output("b", "cpu", 0, np.float32, [2, 3], ours_buf.ctypes.data)
    theirs_ov = ort.OrtValue.ortvalue_from_numpy(np.zeros((2, 3), np.float32))
    ours_arr = np.zeros((2, 3), np.float32)
    ours_ov = OrtValue.ortvalue_from_numpy(ours_arr)
    p.theirs.bind_ortvalue_output("c", theirs_ov)
    p.ours.bind_ortvalue_output("c", ours_ov)
    p.run()
    np.testing.assert_array_equal(ours_buf, theirs_buf)
    np.testing.assert_array_equal(ours_buf, EXPECTED["b"])
    np.testing.assert_array_equal(ours_arr, EXPECTED["c"])  # written into the array the OrtValue shares
    np.testing.assert_array_equal(ours_ov.numpy(), theirs_ov.numpy())
    got = p.ours.get_outputs()
    assert [o.data_ptr() for o in got] == [ours_buf.ctypes.data, ours_ov.data_ptr()]
    assert [o.data_ptr() for o in p.theirs.get_outputs()] == [theirs_buf.ctypes.data, theirs_ov.data_ptr()]


def test_a_buffer_of_the_wrong_shape_or_type_fails_the_run() -> None:
    for shape, dtype, ort_msg in [((3, 3), np.float32, "invalid dimensions"), ((2, 3), np.float64, "data type")]:
        p = Pair()
        p.both("bind_cpu_input", "x", X)
        p.theirs.bind_ortvalue_output("a", ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype)))
        p.ours.bind_ortvalue_output("a", OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype)))
        with pytest.raises(RuntimeError, match=ort_msg):
            p.ort_sess.run_with_iobinding(p.theirs)
        with pytest.raises(InvalidArgument, match="into the buffer bound for output 'a'"):
            p.sess.run_with_iobinding(p.ours._iobinding)


def test_inputs_from_pointers_ortvalues_and_shared_arrays() -> None:
    p = Pair()
    p.both("bind_output", "b")
    p.both("bind_input", "x", "cpu", 0, np.float32, [2, 3], X.ctypes.data)
    p.run()
    np.testing.assert_array_equal(p.ours.copy_outputs_to_cpu()[0], p.theirs.copy_outputs_to_cpu()[0])
    p.both("bind_input", "x", "cpu", 0, TensorProto.FLOAT, [2, 3], X.ctypes.data)  # ONNX type ints too
    p.run()
    np.testing.assert_array_equal(p.ours.copy_outputs_to_cpu()[0], EXPECTED["b"])
    p.theirs.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(X * 2))
    p.ours.bind_ortvalue_input("x", OrtValue.ortvalue_from_numpy(X * 2))
    p.run()
    np.testing.assert_array_equal(p.ours.copy_outputs_to_cpu()[0], p.theirs.copy_outputs_to_cpu()[0])
    shared = np.zeros((2, 3), np.float32)
    p.both("bind_cpu_input", "x", shared)
    shared[:] = -5  # the binding shares the array: the run sees the change
    p.run()
    assert p.ours.copy_outputs_to_cpu()[0][0, 0] == p.theirs.copy_outputs_to_cpu()[0][0, 0] == 5
    p.both("clear_binding_inputs")
    p.both("synchronize_inputs")
    p.both("synchronize_outputs")
    with pytest.raises(RuntimeError, match="Missing Input: x"):
        p.ort_sess.run_with_iobinding(p.theirs)
    with pytest.raises(InvalidArgument, match="missing input 'x'"):
        p.sess.run_with_iobinding(p.ours._iobinding)


def test_binding_mistakes_raise_onnxruntimes_error_families() -> None:
    p = Pair()
    for binding in (p.theirs, p.ours):
        with pytest.raises(RuntimeError, match="Failed to find NodeArg with name: zz in the def list"):
            binding.bind_cpu_input("zz", X)
        with pytest.raises(RuntimeError, match="Unable to create OrtValue from the given python object"):
            binding.bind_cpu_input("x", [[1.0, 2.0, 3.0]])
        with pytest.raises(ValueError, match="`element_type` and `shape` are to be provided"):
            binding.bind_output("a", "cpu", 0, np.float32, None, 1234)
    with pytest.raises(InvalidArgument, match="unknown output 'zz'"):  # onnxruntime only fails at run time
        p.ours.bind_output("zz")
    with pytest.raises(InvalidArgument, match="no installed execution provider offers device dml:0"):
        p.ours.bind_output("a", "dml")


def test_the_engine_binding_is_what_the_session_runs() -> None:
    sess = ep_core.InferenceSession(_model())
    binding = IOBinding(sess)
    assert isinstance(binding._iobinding, EngineIOBinding) and binding._session is sess
    engine = SessionIOBinding(sess)  # onnxruntime's C-level class: the engine binding itself
    engine.bind_cpu_input("x", X)
    engine.bind_output("c")
    sess.run_with_iobinding(engine)
    np.testing.assert_array_equal(engine.copy_outputs_to_cpu()[0], EXPECTED["c"])

    class Wrapper:  # an onnxruntime-style session keeping the engine session in _sess
        _sess = sess

    assert IOBinding(Wrapper())._session is sess
    with pytest.raises(TypeError, match="IOBinding needs an InferenceSession"):
        IOBinding(object())


def test_through_the_compat_inference_session() -> None:
    from ep_core.onnxruntime.session import InferenceSession

    sess = InferenceSession(_model())
    binding = sess.io_binding()
    assert isinstance(binding, IOBinding)
    binding.bind_cpu_input("x", X)
    binding.bind_output("b")
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    np.testing.assert_array_equal(out.numpy(), EXPECTED["b"])


def test_sequence_outputs_copy_to_cpu_as_lists() -> None:
    from .test_ortvalue import _seq_and_map_model

    x = np.ones((2, 3), np.float32)
    theirs_sess = ort.InferenceSession(_seq_and_map_model(), providers=["CPUExecutionProvider"])
    sess = ep_core.InferenceSession(_seq_and_map_model())
    theirs, ours = theirs_sess.io_binding(), IOBinding(sess)
    for b in (theirs, ours):
        b.bind_cpu_input("x", x)
        b.bind_output("s")
    theirs_sess.run_with_iobinding(theirs)
    sess.run_with_iobinding(ours._iobinding)
    (t,), (o,) = theirs.copy_outputs_to_cpu(), ours.copy_outputs_to_cpu()
    assert isinstance(o, list) and isinstance(t, list) and len(o) == len(t) == 2
    for a, b in zip(o, t, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_cuda
def test_device_bindings_on_the_numba_cuda_ep() -> None:
    sess = ep_core.InferenceSession(_model(), providers=[CUDA])
    binding = IOBinding(sess)
    x_dev = OrtValue.ortvalue_from_numpy(X, "cuda", 0)
    binding.bind_ortvalue_input("x", x_dev)
    binding.bind_output("b", "cuda", 0)  # allocated by the session on the device
    out_dev = OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "cuda", 0)
    binding.bind_ortvalue_output("c", out_dev)  # preallocated on the device
    sess.run_with_iobinding(binding._iobinding)
    binding.synchronize_outputs()
    b, c = binding.get_outputs()
    assert b.device_name() == c.device_name() == "cuda"
    assert not isinstance(b._ortvalue.data, np.ndarray) and b._ortvalue.memory_info == x_dev._ortvalue.memory_info
    np.testing.assert_array_equal(b.numpy(), EXPECTED["b"])
    assert c.data_ptr() == out_dev.data_ptr()
    np.testing.assert_array_equal(out_dev.numpy(), EXPECTED["c"])
    plan = sess.get_plan({"x": sess.execution_providers[0].memory_info}, outputs_to_host=False)
    assert not [line for line in plan if " copy " in line], "device input and outputs: nothing to copy"
    # a raw device pointer as input, and a host output of a device session
    binding.clear_binding_inputs()
    binding.clear_binding_outputs()
    binding.bind_input("x", "cuda", 0, np.float32, [2, 3], out_dev.data_ptr())
    binding.bind_output("a")
    sess.run_with_iobinding(binding._iobinding)
    (a,) = binding.get_outputs()
    assert a.device_name() == "cpu"
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(EXPECTED["c"], 0))
    # a CPU-only session cannot use the device
    cpu_binding = IOBinding(ep_core.InferenceSession(_model()))
    with pytest.raises(RuntimeError, match=r"no execution provider of this session .* uses device cuda:0"):
        cpu_binding.bind_output("a", "cuda")
    with pytest.raises(RuntimeError, match="uses device cuda:0"):
        cpu_binding.bind_ortvalue_input("x", x_dev)
