"""Sparse initializers become dense ones at load, as onnxruntime converts them when it loads a
graph: no EP here consumes sparse tensors, and onnx's inference refuses a node reading one
("unsupported type: sparse_tensor"). Their size was checked against the creation budget first
(``load._check_tensors``); the caller's ModelProto is not edited."""

from __future__ import annotations

from typing import Any

from ep_core.sdk.errors import InvalidGraph
from ep_core.sdk.graph import nested_graphs


def dense_initializers(model: Any) -> Any:
    """``model``, or a copy whose graphs hold their sparse initializers as dense initializers."""
    if not any(g.sparse_initializer for g in nested_graphs(model.graph)):
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    for g in nested_graphs(copy.graph):
        dense = [_dense(s) for s in g.sparse_initializer]
        del g.sparse_initializer[:]
        g.initializer.extend(dense)
    return copy


def _dense(s: Any) -> Any:
    """The SparseTensorProto ``s`` as a TensorProto: indices are linear (NNZ,) or coordinates
    (NNZ, rank), as the ONNX spec allows; an index outside the dims is refused, naming it."""
    import numpy as np
    from onnx import numpy_helper

    values, indices, dims = numpy_helper.to_array(s.values), numpy_helper.to_array(s.indices), tuple(s.dims)
    size = int(np.prod(dims, dtype=np.int64))
    flat = indices.reshape(-1) if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims, mode="wrap")
    if indices.ndim == 2 and (indices < 0).any() | (indices >= np.array(dims)).any():
        raise InvalidGraph(f"sparse initializer {s.values.name!r}: an index lies outside its dims {list(dims)}")
    if flat.size != values.size or ((flat < 0) | (flat >= size)).any():
        raise InvalidGraph(
            f"sparse initializer {s.values.name!r}: {flat.size} indices for {values.size} values, or one outside "
            f"its {size} elements"
        )
    out = np.zeros(size, values.dtype)
    out[flat] = values.reshape(-1)
    return numpy_helper.from_array(out.reshape(dims), s.values.name)
