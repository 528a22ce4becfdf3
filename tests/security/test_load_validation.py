"""The models issue 11 found accepted (or failing untyped) are refused at load with a typed error
naming the node or tensor at fault, as onnxruntime 1.31 refuses them; models onnxruntime loads
despite a declared shape the inferred one contradicts load here too.

These run in process and are small; the hostile-model suite (``test_hostile_models.py``) runs the
same cases, and a thousand more, in subprocesses under memory and time limits."""

from __future__ import annotations

import pytest

import ep_core
from ep_core.sdk.errors import InvalidGraph
from security.hostile_models import crafted_cases

CASES = {c.name: c for c in crafted_cases()}

# case -> (what the message names, whether onnxruntime refuses it at load too)
REFUSED = {
    "reshape_to_minus5": ("node name: reshape", True),
    "reshape_init_minus5": ("node name: reshape", True),
    "split_sum_mismatch": ("node name: split", True),
    "split_negative": ("node 'split'", False),  # onnxruntime refuses it when it runs
    "split_attr_negative_opset11": ("node 'split'", True),
    "pad_by_minus_1e10": ("node 'pad'", False),  # the same
    "opset_10000": ("opset 10000", True),
    "add_float_int64": ("node name: add", True),
    "cast_to_contradicts_output": ("node name: cast", True),
    "cast_to_contradicts_value_info": ("node name: cast", True),
    "relu_declared_int64": ("node name: relu", True),
    "transpose_perm_1e12": ("node name: transpose", True),
    "conv_stride_0": ("node name: conv", True),
    "utf8_op_type": ("field 'op_type'", True),
    "utf8_attribute_name": ("field 'name'", True),
    "raw_data_too_long": ("initializer 'w'", True),
    "float_data_too_long": ("initializer 'w'", True),
    "dims_1e12_with_4_bytes": ("initializer 'w'", True),
    "constant_node_dims_1e12": ("of node 'cst'", True),
    "data_type_999": ("initializer 'w'", True),
    "input_elem_type_999": ("value 'x'", True),
    "sparse_dims_1e12": ("sparse initializer 'w'", True),
    "constant_sparse_dims_1e12": ("node 'cst'", True),
}


def _onnxruntime_refuses(data: bytes) -> bool:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_at_load_with_a_typed_error_naming_the_culprit(name):
    names, ort_refuses = REFUSED[name]
    with pytest.raises(InvalidGraph) as info:
        ep_core.InferenceSession(CASES[name].model, providers=["CpuReferenceExecutionProvider"])
    assert names in info.value.message
    assert _onnxruntime_refuses(CASES[name].model) is ort_refuses


@pytest.mark.parametrize(
    "name", ["relu_shape_contradicts_value_info", "relu_rank_contradicts_output", "constant_two_values"]
)
def test_what_onnxruntime_tolerates_loads(name):
    assert not _onnxruntime_refuses(CASES[name].model)
    ep_core.InferenceSession(CASES[name].model, providers=["CpuReferenceExecutionProvider"])


def test_a_string_tensor_that_is_not_utf8_loads_and_keeps_its_bytes():
    """onnxruntime keeps string data as bytes; here it is text with the bad bytes escaped."""
    sess = ep_core.InferenceSession(CASES["utf8_string_tensor_data"].model, providers=["CpuReferenceExecutionProvider"])
    (y,) = sess.run(None, {})
    assert y[0].encode("utf-8", "surrogateescape").startswith(b"\xff\xfe") and y[1] == "ok"
