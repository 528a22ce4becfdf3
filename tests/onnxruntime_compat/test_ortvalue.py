"""``ep_core.onnxruntime.ortvalue.OrtValue`` beside onnxruntime 1.31's: the same arrays, shapes,
type strings and memory sharing, the same error families; device values on the Numba-CUDA EP
(under ``NUMBA_ENABLE_CUDASIM=1`` in CI)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ep_core
from ep_core.onnxruntime.ortvalue import OrtValue, copy_tensors
from ep_core.sdk.errors import InvalidArgument, NotImplementedByAnyEp

DTYPES = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.bool_,
]


def _cuda_available() -> bool:
    return any(d.ep_name == "NumbaCudaExecutionProvider" for d in ep_core.get_ep_devices())


needs_cuda = pytest.mark.skipif(
    not _cuda_available(), reason="no Numba-CUDA device: run with NUMBA_ENABLE_CUDASIM=1 or on a CUDA GPU"
)


def _describe(v) -> tuple:
    return (
        v.shape(),
        v.data_type(),
        v.element_type(),
        v.device_name(),
        v.tensor_size_in_bytes(),
        v.is_tensor(),
        v.has_value(),
        v.is_tensor_sequence(),
        v.is_sparse_tensor(),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cpu_value_describes_itself_as_onnxruntime_and_shares_the_array(dtype) -> None:
    arr = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    ours, theirs = OrtValue.ortvalue_from_numpy(arr), ort.OrtValue.ortvalue_from_numpy(arr)
    assert _describe(ours) == _describe(theirs)
    assert ours.data_ptr() == theirs.data_ptr() == arr.ctypes.data
    arr[0, 0] = 1  # both share the array: the change shows through
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert ours.numpy()[0, 0] == 1 and np.shares_memory(ours.numpy(), arr)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert np.asarray(ours, dtype=np.float64).dtype == np.float64


def test_non_contiguous_arrays_are_copied_and_scalars_have_an_empty_shape() -> None:
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    ours, theirs = OrtValue.ortvalue_from_numpy(strided), ort.OrtValue.ortvalue_from_numpy(strided)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert not np.shares_memory(ours.numpy(), strided) and not np.shares_memory(theirs.numpy(), strided)
    scalar = np.ones((), np.float32)
    assert _describe(OrtValue.ortvalue_from_numpy(scalar)) == _describe(ort.OrtValue.ortvalue_from_numpy(scalar))
    empty = np.zeros((0, 3), np.float32)
    assert OrtValue.ortvalue_from_numpy(empty).data_ptr() == ort.OrtValue.ortvalue_from_numpy(empty).data_ptr() == 0


def test_onnx_typed_values_reinterpret_the_array() -> None:
    raw = np.array([0x3F80, 0x4000, 0xC040], np.uint16)  # bfloat16 1, 2, -3
    ours = OrtValue.ortvalue_from_numpy_with_onnx_type(raw, TensorProto.BFLOAT16)
    theirs = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, TensorProto.BFLOAT16)
    assert (ours.data_type(), ours.element_type(), ours.shape()) == (
        theirs.data_type(),
        theirs.element_type(),
        theirs.shape(),
    )
    assert ours.data_ptr() == raw.ctypes.data
    # onnxruntime has no NumPy type for bfloat16; ep-core hands ml_dtypes' (what its EPs compute with)
    np.testing.assert_array_equal(ours.numpy().astype(np.float32), [1, 2, -3])
    assert ours.numpy().dtype == ml_dtypes.bfloat16
    for impl in (OrtValue, ort.OrtValue):
        with pytest.raises(RuntimeError, match="Items size in the incoming array: 4 specified by onnxtype: 2"):
            impl.ortvalue_from_numpy_with_onnx_type(np.zeros(3, np.float32), TensorProto.BFLOAT16)


@pytest.mark.parametrize("element_type", [np.float32, np.int64, "float16", TensorProto.FLOAT16, TensorProto.UINT8])
def test_values_from_shape_and_type(element_type) -> None:
    ours = OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
    theirs = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
    assert _describe(ours) == _describe(theirs)
    assert ours.numpy().dtype == theirs.numpy().dtype


def test_refusals_are_typed_and_in_onnxruntimes_families() -> None:
    cases = [
        lambda impl: impl.ortvalue_from_numpy(np.array(["a", "bc"])),
        lambda impl: impl.ortvalue_from_numpy([1.0, 2.0]),
        lambda impl: impl.ortvalue_from_shape_and_type([2, -1], np.float32),
        lambda impl: impl.ortvalue_from_shape_and_type([2], np.str_),
        lambda impl: impl.ortvalue_from_shape_and_type([2], 99),
        lambda impl: impl.ortvalue_from_numpy(np.zeros(2, np.float32), "dml"),
        lambda impl: impl.ortvalue_from_numpy(np.zeros(2, np.float32)).as_sparse_tensor(),
        lambda impl: impl.ortvalue_from_numpy(np.zeros(3, np.float32)).update_inplace(np.zeros(4, np.float32)),
    ]
    for case in cases:
        with pytest.raises(RuntimeError):
            case(ort.OrtValue)
        with pytest.raises(RuntimeError) as info:
            case(OrtValue)
        assert isinstance(info.value, InvalidArgument), info.value
    for impl in (OrtValue, ort.OrtValue):
        with pytest.raises(TypeError, match="data must be a numpy.ndarray or an OrtValue"):
            impl.ortvalue_from_numpy(np.zeros(3, np.float32)).update_inplace([1, 2, 3])
        with pytest.raises(Exception, match="Unsupported device type: tpu"):
            impl.ortvalue_from_numpy(np.zeros(3, np.float32), "tpu")
    with pytest.raises(InvalidArgument, match=r"no installed execution provider offers device dml:0 .*devices here"):
        OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "dml")
    with pytest.raises(NotImplementedByAnyEp, match="no sparse tensors"):
        OrtValue.ort_value_from_sparse_tensor(object())


def test_update_inplace_keeps_the_memory() -> None:
    arr = np.zeros((2, 3), np.float32)
    ours, theirs = OrtValue.ortvalue_from_numpy(arr), ort.OrtValue.ortvalue_from_numpy(arr.copy())
    new = np.arange(6, dtype=np.float32)  # same element count, other shape: accepted by both
    ours.update_inplace(new)
    theirs.update_inplace(new)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(arr, new.reshape(2, 3))  # written into the shared array
    ours.update_inplace(OrtValue.ortvalue_from_numpy(np.full((2, 3), 7, np.float32)))
    assert ours.data_ptr() == arr.ctypes.data and (arr == 7).all()
    # onnxruntime copies the raw bytes of another type (garbage); ep-core refuses
    with pytest.raises(InvalidArgument, match="the data is float64, this OrtValue is float32"):
        ours.update_inplace(np.zeros((2, 3), np.float64))
    src, dst = OrtValue.ortvalue_from_numpy(np.ones(3, np.int32)), OrtValue.ortvalue_from_numpy(np.zeros(3, np.int32))
    copy_tensors([src], [dst])
    np.testing.assert_array_equal(dst.numpy(), [1, 1, 1])
    with pytest.raises(InvalidArgument, match="takes no stream"):
        copy_tensors([src], [dst], stream=1)


def test_dlpack_shares_memory_both_ways() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours, theirs = OrtValue.ortvalue_from_numpy(arr), ort.OrtValue.ortvalue_from_numpy(arr)
    assert ours.__dlpack_device__() == theirs.__dlpack_device__() == (1, 0)
    exported = np.from_dlpack(ours)
    assert np.shares_memory(exported, arr) and np.shares_memory(np.from_dlpack(theirs), arr)
    src = np.arange(4, dtype=np.int64)
    imported = OrtValue.from_dlpack(src)
    assert imported.data_type() == ort.OrtValue.from_dlpack(src).data_type() == "tensor(int64)"
    assert imported.data_ptr() == src.ctypes.data
    from_capsule = OrtValue.from_dlpack(np.arange(3, dtype=np.int32).__dlpack__())
    np.testing.assert_array_equal(from_capsule.numpy(), [0, 1, 2])
    assert OrtValue.from_dlpack(np.array([True, False])).data_type() == "tensor(bool)"
    assert OrtValue.from_dlpack(ours).data_ptr() == arr.ctypes.data


def test_the_constructor_takes_only_an_engine_value() -> None:
    for impl in (OrtValue, ort.OrtValue):
        with pytest.raises(ValueError, match="`Provided ortvalue` needs to be of type"):
            impl(3)
    value = OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32))
    assert isinstance(value._ortvalue, ep_core.Tensor) and value._get_c_value() is value._tensor is value._ortvalue


def _seq_and_map_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    zipmap = helper.make_value_info(
        "z",
        helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
        ),
    )
    nodes = [
        helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
        helper.make_node("ZipMap", ["x"], ["z"], domain="ai.onnx.ml", classlabels_int64s=[1, 2, 3]),
    ]
    graph = helper.make_graph(nodes, "seq_map", [x], [seq, zipmap])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


def test_sequence_and_map_values_describe_themselves_as_onnxruntime() -> None:
    from ep_core.onnxruntime.iobinding import IOBinding

    model, x = _seq_and_map_model(), np.ones((2, 3), np.float32)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run_with_ort_values(
        ["s", "z"], {"x": ort.OrtValue.ortvalue_from_numpy(x)}
    )
    sess = ep_core.InferenceSession(model)
    binding = IOBinding(sess)
    binding.bind_cpu_input("x", x)
    binding.bind_output("s")
    binding.bind_output("z")
    sess.run_with_iobinding(binding._iobinding)
    ours = binding.get_outputs()
    for o, t in zip(ours, theirs, strict=True):
        assert (o.data_type(), o.is_tensor(), o.is_tensor_sequence(), o.has_value()) == (
            t.data_type(),
            t.is_tensor(),
            t.is_tensor_sequence(),
            t.has_value(),
        )
        for impl_value in (o, t):
            with pytest.raises(RuntimeError):
                impl_value.numpy()
            with pytest.raises(RuntimeError):
                impl_value.shape()
    assert ours[0].element_type() == theirs[0].element_type() == TensorProto.FLOAT
    for impl_value in (ours[1], theirs[1]):
        with pytest.raises(RuntimeError, match="Tensor proto_type is unavailable for this value"):
            impl_value.element_type()


@needs_cuda
def test_cuda_values_live_in_the_numba_cuda_eps_memory() -> None:
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    value = OrtValue.ortvalue_from_numpy(host, "cuda", 0)
    assert value.device_name() == "cuda" and value.shape() == [2, 3] and value.data_type() == "tensor(float)"
    assert value._ortvalue.memory_info.name == "Cuda" and not isinstance(value._ortvalue.data, np.ndarray)
    assert value.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(value.numpy(), host)
    host[0, 0] = 99  # a device value is a copy
    assert value.numpy()[0, 0] == 0
    ptr = value.data_ptr()
    value.update_inplace(np.full(6, 5, np.float32))
    assert value.data_ptr() == ptr and (value.numpy() == 5).all()
    zeros = OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "cuda", 0)
    assert zeros.device_name() == "cuda" and (zeros.numpy() == 0).all()
    zeros.update_inplace(value)  # device to device
    assert (zeros.numpy() == 5).all()
    back = OrtValue.ortvalue_from_numpy(np.zeros((2, 3), np.float32))
    back.update_inplace(value)  # device to host
    assert (back.numpy() == 5).all()
    with pytest.raises(NotImplementedByAnyEp, match="does not export DLPack"):
        value.__dlpack__()
    with pytest.raises(RuntimeError, match=r"no installed execution provider offers device cuda:7 .*cuda:0"):
        OrtValue.ortvalue_from_numpy(host, "cuda", 7)
