"""A model's files on disk: the external data its tensors name, read from the model's folder
only, checked against the file before a byte is read.

Every tensor is covered, sparse ones included (their values and indices may be external too;
onnx's ``external_data_helper`` lists only dense initializers and attribute tensors, so a sparse
``Constant`` once read a file of the working folder). Kept out of the runtime's load step, which
decides what a model may be; this module only locates and reads bytes."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

from ep_core.sdk.errors import InvalidGraph, NoSuchFile
from ep_core.sdk.graph import nested_graphs

INLINE_LIMIT = 1 << 30  # a model whose external data brings it past this keeps that data in its file
_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2, 24: 6, 27: 6}  # UINT4 INT4 FLOAT4E2M1, UINT2 INT2, FLOAT6 types


def tensor_bits(data_type: int) -> int:
    """Bits per element of an ONNX tensor type; 0 for a number that is not one."""
    from onnx import helper

    try:
        return _BITS.get(data_type) or int(helper.tensor_dtype_to_np_dtype(data_type).itemsize) * 8
    except KeyError:
        return 0


def stored_bytes(t: Any, raw: bool) -> int:
    """What a tensor's dims need: bytes of raw data, else entries of its typed field."""
    n, bits = int(math.prod(t.dims)), tensor_bits(t.data_type)
    if raw or bits in (2, 4):  # sub-byte types pack their typed field too
        return -(-n * bits // 8)
    return 2 * n if t.data_type in (14, 15) else n  # COMPLEX64, COMPLEX128: two floats each


def all_tensors(proto: Any) -> Iterator[Any]:
    """Every TensorProto of the model: initializers, attribute tensors, and the values and indices
    of sparse initializers and sparse attributes, in every graph and function."""
    from onnx import external_data_helper as edh

    yield from edh._get_all_tensors(proto)
    for g in (*nested_graphs(proto.graph), *(g for f in proto.functions for g in _function_graphs(f))):
        attrs = [a for n in g.node for a in n.attribute]
        sparse = [
            *getattr(g, "sparse_initializer", ()),
            *(a.sparse_tensor for a in attrs if a.HasField("sparse_tensor")),
        ]
        for s in sparse + [s for a in attrs for s in a.sparse_tensors]:
            yield from (s.values, s.indices)


def _function_graphs(f: Any) -> Iterator[Any]:
    """A function (its nodes, as a graph has them) and the subgraphs of its nodes."""
    yield f
    for n in f.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from nested_graphs(sub)


def resolve_external(proto: Any, base: str, model_file: str | None = None) -> None:
    """Checks every external tensor against its file (inside ``base``, offset and length within
    the file, length matching the dims), then reads it into the model, unless that would take the
    model past ``INLINE_LIMIT``: main-graph initializers then keep their data in the file, their
    location made the absolute path checked here, which ``GraphView`` reads (``tensor_array``).
    ``model_file``: the path the model came from, whose real folder a linked data file may be in."""
    from onnx import TensorProto
    from onnx import external_data_helper as edh

    roots = [os.path.realpath(base)] + ([os.path.dirname(os.path.realpath(model_file))] if model_file else [])

    total = sum(external_span(t, base, roots)[2] for t in all_tensors(proto) if edh.uses_external_data(t))
    if proto.ByteSize() + total > INLINE_LIMIT:
        for t in proto.graph.initializer:
            if edh.uses_external_data(t):
                file, offset, length = external_span(t, base, roots)
                del t.external_data[:]
                for key, value in (("location", file), ("offset", str(offset)), ("length", str(length))):
                    e = t.external_data.add()
                    e.key, e.value = key, value
    for t in all_tensors(proto):
        if edh.uses_external_data(t) and not os.path.isabs(edh.ExternalDataInfo(t).location):
            file, offset, length = external_span(t, base, roots)
            with open(file, "rb") as fh:
                fh.seek(offset)
                t.raw_data = fh.read(length)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT


def read_back(tensors: Iterator[Any] | list[Any]) -> None:
    """Reads the data ``resolve_external`` left in its file (an absolute location it checked) into
    each tensor, for writing a model elsewhere: a written model never names a file by absolute
    path (no loader would accept it, and it would tell where the user keeps their files)."""
    from onnx import TensorProto
    from onnx import external_data_helper as edh

    for t in tensors:
        if edh.uses_external_data(t) and os.path.isabs(location := edh.ExternalDataInfo(t).location):
            info = edh.ExternalDataInfo(t)
            with open(location, "rb") as fh:
                fh.seek(info.offset or 0)
                t.raw_data = fh.read(info.length or stored_bytes(t, raw=True))
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT


def _linked_in_folder(base: str, location: str, roots: list[str]) -> int | None:
    """A read-only descriptor of the regular file a symbolic link inside ``base`` points to, when
    that file lies in one of ``roots`` (the model folder's and the model file's real folders), as
    onnxruntime checks it: Hugging Face's cache keeps ``snapshots/<rev>/model.onnx`` and its
    ``model.onnx_data`` as links into ``blobs/``. None otherwise (onnx's resolver refuses every link;
    a link out of those folders, as to ``/etc/hostname``, stays refused)."""
    import stat

    parts = location.replace("\\", "/").split("/")
    if not location or os.path.isabs(location) or any(p in ("", ".", "..") for p in parts):
        return None
    real = os.path.realpath(os.path.join(base, *parts))
    if not any(os.path.commonpath([real, root]) == root for root in roots):
        return None
    try:
        fd = os.open(real, os.O_RDONLY)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a device, a FIFO: never read
        os.close(fd)
        return None
    return fd


def external_span(t: Any, base: str, roots: list[str] | None = None) -> tuple[str, int, int]:
    """(file, offset, length) of an external tensor, checked by onnx's own resolver (relative,
    inside ``base``; a symbolic link there is followed to a regular file, as onnxruntime does) and
    against the file's size."""
    from onnx.onnx_cpp2py_export import checker as c_checker

    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    where = f"external data of tensor {t.name!r} ({location!r} in folder {base!r})"
    try:
        fd: int = c_checker._open_external_data(base, location, t.name, True)
    except Exception as exc:
        linked = _linked_in_folder(base, location, roots or [os.path.realpath(base)])
        if linked is None:
            missing = not os.path.lexists(os.path.join(base, location))
            raise (NoSuchFile if missing else InvalidGraph)(f"{where} cannot be read: {exc}") from exc
        fd = linked
    try:
        size = os.fstat(fd).st_size
        offset = int(info.get("offset", "0"))
        want = stored_bytes(t, raw=True)
        length = int(info["length"]) if "length" in info else want
    except (ValueError, OSError, KeyError) as exc:
        raise InvalidGraph(f"{where}: {exc}") from exc
    finally:
        os.close(fd)
    file = os.path.realpath(os.path.join(base, location))
    if offset < 0 or length != want or offset + length > size:
        raise InvalidGraph(
            f"{where}: offset {offset} and length {length} do not fit: its dims {list(t.dims)} need {want} "
            f"bytes and the file has {size}"
        )
    return file, offset, length
