"""The declarative record of one compiled graph, as stored in a context, and its strict check.

A record says what to compute and nothing else: value names, dtypes, ranks, broadcast flags, op
names from a fixed table with their numeric parameters, contraction attributes. No string in it
ever reaches generated code (value names only key dictionaries at run time); kernel sources are
generated from it by ``generate`` after ``check_record`` accepted every field. Anything unexpected
(an unknown key, op, dtype or kind, a wrong type, a number out of range, a reference to a value
not yet defined) is a ``SpecError`` naming the field, which the EP reports as INVALID_GRAPH.

    record = {"plan": {"inputs": [name], "outputs": [name], "steps": [step]},
              "weights": {name: sha256 of the weight},
              "types": {"inputs": [type], "outputs": [type]}}     type = [dtype | null, [dim | null] | null]
    step   = {"kind": "kernel", "inputs": [name], "arrays": [dtype], "full": [[bool] * rank],
              "rank": int, "items": [item], "outputs": [name], "exports": [item index],
              "out_ranks": [int], "parallel": bool}
           | {"kind": "conv", "inputs": [x, w, b | ""], "outputs": [name], "attrs": {...},
              "depthwise": null | {"dtype": dtype, "parallel": bool}}
           | {"kind": "matmul", "inputs": [a, b], "outputs": [name]}
           | {"kind": "node", "op": op, "domain": domain, "opset": int, "attrs": {name: attr},
              "inputs": [name | ""], "outputs": [name | ""], "in_types": [type], "out_types": [type],
              optionally "int8": "vnni" | "vnni-runtime" (its 8-bit products on the VNNI kernels,
              weights packed once or both operands at run time: ``int_loops``)}
    item   = {"op": name, "args": [ref | null], "dtype": dtype, "params": {...}}
    ref    = ["a", array index] | ["v", earlier item index] | ["c", dtype, number]
    attr   = ["int", int] | ["float", float] | ["string", str] | ["ints", [int]] | ["floats", [float]]
           | ["strings", [str]] | ["tensor", weight name]

A "node" step is a delegated ONNX node (``delegate``): the EP runs it through the reference EP's
kernel for that op, domain and opset. It is checked against what the reference registry serves and
against the op's ONNX schema (attribute names and types, input and output counts); "" names an
absent optional input or output; a TENSOR attribute is one of the group's stored weights. Ops with
subgraph attributes (If, Loop, Scan) are never stored, nor GRAPH, SPARSE_TENSOR or TYPE_PROTO
attributes. The node is rebuilt from these checked fields alone when its kernel is built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ep_numba_cpu.ops import ARITY, DATA_DTYPES, FLOAT_DTYPES, KERNEL_DTYPES, MAX_ARGS, PARAMS

MAX_STEPS = 100_000
MAX_ITEMS = 10_000
MAX_ARRAYS = 1024
MAX_RANK = 32
MAX_NAME = 65_536
MAX_ATTRS = 64
MAX_ATTR_VALUES = 1 << 20  # entries of one INTS/FLOATS/STRINGS attribute
MAX_OPSET = 1000
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_DOMAIN = re.compile(r"[a-z][a-z0-9_.]{0,127}|")
INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
AUTO_PADS = ("NOTSET", "", "SAME_UPPER", "SAME_LOWER", "VALID")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class SpecError(ValueError):
    """A stored record that this EP does not accept (the message names the field)."""


def _fail(path: str, why: str) -> SpecError:
    return SpecError(f"{path}: {why}")


def _obj(value: Any, path: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"is a {type(value).__name__}, not an object")
    if set(value) != keys:
        extra, missing = sorted(set(value) - keys), sorted(keys - set(value))
        raise _fail(path, f"unexpected keys {extra[:4]}" if extra else f"missing keys {missing}")
    return value


def _list(value: Any, path: str, lo: int, hi: int) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"is a {type(value).__name__}, not a list")
    if not lo <= len(value) <= hi:
        raise _fail(path, f"has {len(value)} entries, allowed {lo} to {hi}")
    return value


def _int(value: Any, path: str, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise _fail(path, f"{value!r:.40} is not an integer in [{lo}, {hi}]")
    return value


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _fail(path, f"{value!r:.40} is not true or false")
    return value


def _float(value: Any, path: str) -> float:
    if type(value) is not float:
        raise _fail(path, f"{value!r:.40} is not a floating-point number")
    return value


def _dtype(value: Any, path: str, allowed: tuple[str, ...] = KERNEL_DTYPES) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(path, f"{value!r:.40} is not one of the dtypes {list(allowed)}")
    return value


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise _fail(path, f"{value!r:.40} is not a value name")
    return value


def _names(value: Any, path: str, lo: int = 0, hi: int = MAX_ARRAYS) -> list[str]:
    names = [_name(v, f"{path}[{i}]") for i, v in enumerate(_list(value, path, lo, hi))]
    if len(set(names)) != len(names):
        raise _fail(path, "names a value twice")
    return names


def over_limits(node: Any) -> str | None:
    """Why ``node`` would make a step over this module's bounds (``check_record`` refusing the
    group at compile time, failing the session), or None. Asked before a node is claimed, so one
    over them (a boosted-trees export with 2.4M class_ids) is left to the next EP; lengths are read
    from the proto, no attribute is decoded. String lengths count bytes (at least the characters)."""
    attrs = node.proto.attribute
    if len(attrs) > MAX_ATTRS:
        return f"{len(attrs)} attributes, over this EP's limit of {MAX_ATTRS}"
    for a in attrs:
        n = max(len(a.floats), len(a.ints), len(a.strings))
        if n > MAX_ATTR_VALUES:
            return f"attribute {a.name!r} has {n} entries, over this EP's limit of {MAX_ATTR_VALUES}"
        if len(a.s) > MAX_NAME or any(len(x) > MAX_NAME for x in a.strings):
            return f"attribute {a.name!r} holds a string over this EP's limit of {MAX_NAME} characters"
    return _values_over_limits(node)


def _values_over_limits(node: Any) -> str | None:
    """Why ``node``'s inputs or outputs exceed the bounds on counts, names and ranks, or None."""
    for side, names in (("inputs", node.inputs), ("outputs", node.outputs)):
        if len(names) > MAX_ARRAYS:
            return f"{len(names)} {side}, over this EP's limit of {MAX_ARRAYS}"
        for name in names:
            if len(name) > MAX_NAME:
                return f"a value name over this EP's limit of {MAX_NAME} characters"
            info = node.graph.value_info(name) if name else None
            shape = None if info is None else info.shape
            if shape is not None and len(shape) > MAX_RANK:
                return f"value {name[:60]!r} has rank {len(shape)}, over this EP's limit of {MAX_RANK}"
    return None


def check_record(rec: Any) -> None:
    """Accept a stored graph record, or raise ``SpecError`` naming the first field at fault."""
    _obj(rec, "graph", {"plan", "weights", "types"})
    plan = _obj(rec["plan"], "plan", {"inputs", "outputs", "steps"})
    inputs, outputs = _names(plan["inputs"], "plan.inputs"), _names(plan["outputs"], "plan.outputs", 1)
    weights = rec["weights"]
    if not isinstance(weights, dict):
        raise _fail("weights", "is not an object")
    for name, key in weights.items():
        _name(name, "weights")
        if not isinstance(key, str) or not _HEX64.fullmatch(key):
            raise _fail(f"weights[{name!r:.60}]", "is not a sha256")
    types = _obj(rec["types"], "types", {"inputs", "outputs"})
    for side, names in (("inputs", inputs), ("outputs", outputs)):
        for i, t in enumerate(_list(types[side], f"types.{side}", len(names), len(names))):
            _check_type(t, f"types.{side}[{i}]")
    defined = set(inputs)
    if defined & set(weights):
        raise _fail("weights", "redefine a plan input")
    defined |= set(weights)
    for k, step in enumerate(_list(plan["steps"], "plan.steps", 1, MAX_STEPS)):
        _check_step(step, f"plan.steps[{k}]", defined, weights)
    for i, name in enumerate(outputs):
        if name not in defined:
            raise _fail(f"plan.outputs[{i}]", f"{name!r:.60} is computed by no step")


def _check_type(t: Any, path: str) -> None:
    dtype, shape = _list(t, path, 2, 2)
    if dtype is not None:
        _dtype(dtype, f"{path}[0]", DATA_DTYPES)
    if shape is not None:
        for d, dim in enumerate(_list(shape, f"{path}[1]", 0, MAX_RANK)):
            if dim is not None:
                _int(dim, f"{path}[1][{d}]", 0, 2**62)


def _reads(names: list[str], path: str, defined: set[str], optional: tuple[int, ...] = ()) -> None:
    for i, name in enumerate(names):
        if name == "" and i in optional:
            continue
        if name not in defined:
            raise _fail(f"{path}[{i}]", f"{name!r:.60} is neither an input, a weight nor computed by an earlier step")


def _writes(names: list[str], path: str, defined: set[str]) -> None:
    for i, name in enumerate(names):
        if name in defined:
            raise _fail(f"{path}[{i}]", f"{name!r:.60} is already defined")
        defined.add(name)


_STEP_KEYS = {
    "kernel": {"kind", "inputs", "arrays", "full", "rank", "items", "outputs", "exports", "out_ranks", "parallel"},
    "conv": {"kind", "inputs", "outputs", "attrs", "depthwise"},
    "matmul": {"kind", "inputs", "outputs"},
    "node": {"kind", "op", "domain", "opset", "attrs", "inputs", "outputs", "in_types", "out_types"},
}


def _check_step(step: Any, path: str, defined: set[str], weights: Mapping[str, str]) -> None:
    kind = step.get("kind") if isinstance(step, dict) else None
    if not isinstance(kind, str) or kind not in _STEP_KEYS:
        raise _fail(f"{path}.kind", f"{kind!r:.40} is not one of {sorted(_STEP_KEYS)}")
    optional = {"node": "int8", "conv": "direct"}.get(kind)  # keys a step holds only when it needs them
    keys = _STEP_KEYS[kind] | ({optional} if optional and isinstance(step, dict) and optional in step else set())
    _obj(step, path, keys)
    if kind == "kernel":
        _check_cluster(step, path, defined)
        return
    if kind == "node":
        _check_node(step, path, defined, weights)
        if "int8" in keys:  # (after the node's fields: its in_types are checked)
            from ep_numba_cpu.int_loops import int8_problem

            problem = int8_problem(step)
            if problem is not None:
                raise _fail(f"{path}.int8", problem)
        return
    n = 2 if kind == "matmul" else 3
    inputs = _list(step["inputs"], f"{path}.inputs", n, n)
    if not all(isinstance(v, str) for v in inputs):
        raise _fail(f"{path}.inputs", "holds a non-string")
    _reads(inputs, f"{path}.inputs", defined, optional=(2,))
    if kind == "conv":
        check_conv_attrs(step["attrs"], f"{path}.attrs")
        if "direct" in keys and step["direct"] is not True:  # (what it serves: ``generate``, with the filter)
            raise _fail(f"{path}.direct", f"{step['direct']!r:.40} is not true (a step without it leaves the key out)")
        dw = step["depthwise"]
        if dw is not None:
            _obj(dw, f"{path}.depthwise", {"dtype", "parallel"})
            _dtype(dw["dtype"], f"{path}.depthwise.dtype", FLOAT_DTYPES)
            _bool(dw["parallel"], f"{path}.depthwise.parallel")
            if inputs[1] not in weights:
                raise _fail(f"{path}.inputs[1]", "a depthwise convolution's filter must be a stored weight")
    _writes(_names(step["outputs"], f"{path}.outputs", 1, 1), f"{path}.outputs", defined)


def _check_node(step: dict[str, Any], path: str, defined: set[str], weights: Mapping[str, str]) -> None:
    from ep_numba_cpu import delegate

    op, domain = step["op"], step["domain"]
    if not isinstance(op, str) or not _OP_NAME.fullmatch(op):
        raise _fail(f"{path}.op", f"{op!r:.40} is not an op name")
    if not isinstance(domain, str) or not _DOMAIN.fullmatch(domain):
        raise _fail(f"{path}.domain", f"{domain!r:.40} is not a domain name")
    opset = _int(step["opset"], f"{path}.opset", 1, MAX_OPSET)
    if not delegate.served(op, domain, opset):
        raise _fail(f"{path}.op", f"{domain or 'ai.onnx'}::{op} at opset {opset} is not an op this EP delegates")
    schema = delegate.schema(op, domain, opset)
    inputs = _list(step["inputs"], f"{path}.inputs", schema.min_input, min(schema.max_input, MAX_ARRAYS))
    outputs = _list(step["outputs"], f"{path}.outputs", schema.min_output, min(schema.max_output, MAX_ARRAYS))
    for side, names in (("inputs", inputs), ("outputs", outputs)):
        for i, name in enumerate(names):
            if name != "":
                _name(name, f"{path}.{side}[{i}]")
    made = [n for n in outputs if n]
    if not made or len(set(made)) != len(made):
        raise _fail(f"{path}.outputs", "makes no value, or one value twice")
    for side, names in (("in_types", inputs), ("out_types", outputs)):
        for i, t in enumerate(_list(step[side], f"{path}.{side}", len(names), len(names))):
            _check_type(t, f"{path}.{side}[{i}]")
    attrs = step["attrs"]
    if not isinstance(attrs, dict) or len(attrs) > MAX_ATTRS:
        raise _fail(f"{path}.attrs", f"is not an object of at most {MAX_ATTRS} attributes")
    for name, value in attrs.items():
        at = f"{path}.attrs.{name!s:.60}"
        declared = schema.attributes.get(name) if isinstance(name, str) else None
        if declared is None:
            raise _fail(at, f"{op} has no such attribute")
        kind, v = _list(value, at, 2, 2)
        if not isinstance(kind, str) or delegate.SCHEMA_KINDS.get(kind) != declared.type.name:
            raise _fail(f"{at}[0]", f"{kind!r:.40} is not the attribute's type ({declared.type.name.lower()})")
        _check_attr_value(kind, v, f"{at}[1]", weights)
    _reads([n for n in inputs], f"{path}.inputs", defined, optional=tuple(i for i, n in enumerate(inputs) if n == ""))
    _writes(made, f"{path}.outputs", defined)


def _check_attr_value(kind: str, v: Any, path: str, weights: Mapping[str, str]) -> None:
    if kind == "int":
        _int(v, path, *INT_RANGE["int64"])
    elif kind == "float":
        _float(v, path)
    elif kind == "string":
        if not isinstance(v, str) or len(v) > MAX_NAME:
            raise _fail(path, f"{v!r:.40} is not a string of at most {MAX_NAME} characters")
    elif kind == "tensor":
        if not isinstance(v, str) or v not in weights:
            raise _fail(path, f"{v!r:.60} is not a stored weight")
    else:  # a list: a tree ensemble's hold ~10^5 numbers, so the common case is checked in bulk
        items, inner = _list(v, path, 0, MAX_ATTR_VALUES), kind[:-1]
        lo, hi = INT_RANGE["int64"]
        if inner == "int" and all(type(x) is int and lo <= x <= hi for x in items):
            return
        if inner == "float" and all(type(x) is float for x in items):
            return
        if inner == "string" and all(type(x) is str and len(x) <= MAX_NAME for x in items):
            return
        for i, x in enumerate(items):  # else the element at fault, named
            _check_attr_value(inner, x, f"{path}[{i}]", weights)


def check_conv_attrs(attrs: Any, path: str) -> None:
    """A compiled Conv's attributes within the bounds its generated code is checked for (the
    planner asks before claiming a Conv, so one over them is delegated instead)."""
    ints = {"dilations": (1, 2, 1, 4096), "strides": (1, 2, 1, 4096), "kernel_shape": (1, 2, 1, 4096)}
    ints["pads"] = (2, 4, -(2**20), 2**20)
    if not isinstance(attrs, dict) or not set(attrs) <= set(ints) | {"auto_pad", "group"}:
        raise _fail(path, "holds attributes Conv does not have")
    for key, (lo, hi, vlo, vhi) in ints.items():
        if key in attrs:
            for i, v in enumerate(_list(attrs[key], f"{path}.{key}", lo, hi)):
                _int(v, f"{path}.{key}[{i}]", vlo, vhi)
    if "group" in attrs:
        _int(attrs["group"], f"{path}.group", 1, 2**24)
    if "auto_pad" in attrs and attrs["auto_pad"] not in AUTO_PADS:
        raise _fail(f"{path}.auto_pad", f"{attrs['auto_pad']!r:.40} is not one of {list(AUTO_PADS)}")


def _check_cluster(step: dict[str, Any], path: str, defined: set[str]) -> None:
    rank = _int(step["rank"], f"{path}.rank", 1, MAX_RANK)
    inputs = _names(step["inputs"], f"{path}.inputs")
    _reads(inputs, f"{path}.inputs", defined)
    arrays = [
        _dtype(d, f"{path}.arrays[{j}]") for j, d in enumerate(_list(step["arrays"], f"{path}.arrays", 0, MAX_ARRAYS))
    ]
    full = _list(step["full"], f"{path}.full", len(inputs), len(inputs))
    if len(arrays) != len(inputs):
        raise _fail(f"{path}.arrays", f"has {len(arrays)} dtypes for {len(inputs)} inputs")
    for j, flags in enumerate(full):
        for d, f in enumerate(_list(flags, f"{path}.full[{j}]", rank, rank)):
            _bool(f, f"{path}.full[{j}][{d}]")
    items = _list(step["items"], f"{path}.items", 1, MAX_ITEMS)
    for t, item in enumerate(items):
        _check_item(item, f"{path}.items[{t}]", t, len(arrays))
    outputs = _names(step["outputs"], f"{path}.outputs", 1, len(items))
    exports = _list(step["exports"], f"{path}.exports", len(outputs), len(outputs))
    for m, t in enumerate(exports):
        _int(t, f"{path}.exports[{m}]", 0, len(items) - 1)
    if len(set(exports)) != len(exports):
        raise _fail(f"{path}.exports", "exports an item twice")
    for m, r in enumerate(_list(step["out_ranks"], f"{path}.out_ranks", len(outputs), len(outputs))):
        _int(r, f"{path}.out_ranks[{m}]", 0, rank)
    _bool(step["parallel"], f"{path}.parallel")
    _writes(outputs, f"{path}.outputs", defined)


def _check_item(item: Any, path: str, t: int, n_arrays: int) -> None:
    _obj(item, path, {"op", "args", "dtype", "params"})
    op = item["op"]
    if not isinstance(op, str) or op not in ARITY:
        raise _fail(f"{path}.op", f"{op!r:.40} is not an op this EP generates code for")
    for i, ref in enumerate(_list(item["args"], f"{path}.args", 1, MAX_ARGS)):
        if ref is not None:
            _check_ref(ref, f"{path}.args[{i}]", t, n_arrays)
    _dtype(item["dtype"], f"{path}.dtype")
    check_params(op, item["params"], f"{path}.params")


def check_params(op: str, params: Any, path: str) -> None:
    """An item's declarative parameters as ``PARAMS`` declares them, with usable values (the
    planner asks before compiling a node, so a LeakyRelu of NaN slope is delegated instead)."""
    schema = PARAMS.get(op, {})
    params = _obj(params, path, set(schema))
    for key, kind in schema.items():
        value = params[key]
        if kind == "bool":
            _bool(value, f"{path}.{key}")
        elif value is not None or kind != "float?":
            # NaN parameters make no model; bounds may be infinite, slopes and offsets may not
            if math.isnan(_float(value, f"{path}.{key}")) or (kind == "float" and math.isinf(value)):
                raise _fail(f"{path}.{key}", f"{value} is not a usable {key}")
    if op == "Clip" and not params["legacy"] and (params["min"] is not None or params["max"] is not None):
        raise _fail(path, "Clip bounds are attributes only before opset 11 (legacy)")


def _check_ref(ref: Any, path: str, t: int, n_arrays: int) -> None:
    tag = ref[0] if isinstance(ref, list) and ref else None
    if tag == "a":
        _int(_list(ref, path, 2, 2)[1], f"{path}[1]", 0, n_arrays - 1)
    elif tag == "v":
        _int(_list(ref, path, 2, 2)[1], f"{path}[1]", 0, t - 1)
    elif tag == "c":
        _, dtype, value = _list(ref, path, 3, 3)
        _dtype(dtype, f"{path}[1]")
        if dtype == "bool":
            _bool(value, f"{path}[2]")
        elif dtype in INT_RANGE:
            _int(value, f"{path}[2]", *INT_RANGE[dtype])
        else:
            _float(value, f"{path}[2]")
    else:
        raise _fail(path, f"{ref!r:.40} is not a reference ['a', i], ['v', i] or ['c', dtype, value]")


def check_types(rec: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> None:
    """The record agrees with itself and with its weights: every kernel argument has the dtype its
    kernel is compiled for (a weight's stored dtype and rank, a plan input's declared dtype, the
    dtype an earlier step makes), and every plan output a kernel makes has the declared dtype and
    rank."""
    plan, types = rec["plan"], rec["types"]
    # the dtype of every value known before it is read: the plan's inputs, then what each step
    # makes (a delegated node's out_types, a kernel's items), so a step reading a value made inside
    # the group is held to its maker's dtype too (a record that disagrees is refused here, at load,
    # instead of failing on every run)
    declared_in: dict[str, Any] = dict(zip(plan["inputs"], types["inputs"], strict=True))
    declared_out = dict(zip(plan["outputs"], types["outputs"], strict=True))
    for k, step in enumerate(plan["steps"]):
        if k:
            _record_made(plan["steps"][k - 1], declared_in)
        path = f"plan.steps[{k}]"
        w = weights.get(step["inputs"][1]) if step["kind"] == "conv" else None
        shape = step.get("attrs", {}).get("kernel_shape")
        if w is not None and shape is not None and list(w.shape[2:]) != shape:
            raise _fail(f"{path}.attrs.kernel_shape", f"is {shape}, but the filter has shape {list(w.shape)}")
        if step["kind"] == "node":
            _check_node_types(step, path, weights, declared_in, declared_out)
            continue
        if step["kind"] != "kernel":
            continue
        for j, (name, dtype) in enumerate(zip(step["inputs"], step["arrays"], strict=True)):
            w = weights.get(name)
            have = _np_name(w.dtype) if w is not None else declared_in.get(name, [None])[0]
            if have is not None and have != dtype:
                raise _fail(f"{path}.arrays[{j}]", f"is {dtype}, but {name!r:.60} is {have}")
            if w is not None and w.ndim > step["rank"]:
                raise _fail(f"{path}.rank", f"is {step['rank']}, less than the rank of weight {name!r:.60}")
        for m, (name, t) in enumerate(zip(step["outputs"], step["exports"], strict=True)):
            dtype, shape = declared_out.get(name, [None, None])
            made = step["items"][t]["dtype"]
            if dtype is not None and made != dtype:
                raise _fail(f"{path}.items[{t}].dtype", f"makes {made}, but output {name!r:.60} is declared {dtype}")
            if shape is not None and step["out_ranks"][m] != len(shape):
                raise _fail(f"{path}.out_ranks[{m}]", f"output {name!r:.60} is declared with rank {len(shape)}")


def _record_made(step: Mapping[str, Any], known: dict[str, Any]) -> None:
    """Add the dtypes a checked step makes to ``known`` (a conv or matmul step's follow its input's
    and are not recorded)."""
    if step["kind"] == "node":
        known.update((n, [t[0], None]) for n, t in zip(step["outputs"], step["out_types"], strict=True) if n)
    elif step["kind"] == "kernel":
        known.update(
            (n, [step["items"][t]["dtype"], None]) for n, t in zip(step["outputs"], step["exports"], strict=True)
        )


def _check_node_types(
    step: Mapping[str, Any],
    path: str,
    weights: Mapping[str, np.ndarray],
    declared_in: Mapping[str, Any],
    declared_out: Mapping[str, Any],
) -> None:
    """A delegated node's stored types agree with its weights (dtype and shape) and with the fused
    node's declared inputs and outputs; its TENSOR attributes are weights of a stored dtype."""
    for i, (name, (dtype, shape)) in enumerate(zip(step["inputs"], step["in_types"], strict=True)):
        w = weights.get(name)
        if w is not None:
            if dtype != _np_name(w.dtype) or (shape is not None and list(w.shape) != shape):
                raise _fail(
                    f"{path}.in_types[{i}]",
                    f"is {[dtype, shape]}, but weight {name!r:.60} is {[_np_name(w.dtype), list(w.shape)]}",
                )
        elif name in declared_in and None not in (dtype, declared_in[name][0]) and dtype != declared_in[name][0]:
            raise _fail(f"{path}.in_types[{i}]", f"is {dtype}, but {name!r:.60} is {declared_in[name][0]}")
    for i, (name, (dtype, _)) in enumerate(zip(step["outputs"], step["out_types"], strict=True)):
        want = declared_out.get(name, [None])[0]
        if None not in (dtype, want) and dtype != want:
            raise _fail(f"{path}.out_types[{i}]", f"is {dtype}, but output {name!r:.60} is declared {want}")
    for name, (kind, value) in step["attrs"].items():
        if kind == "tensor" and _np_name(weights[value].dtype) not in DATA_DTYPES:
            raise _fail(f"{path}.attrs.{name}", f"weight {value!r:.60} has dtype {weights[value].dtype}")


def _np_name(dtype: np.dtype) -> str:
    return "bool" if dtype == np.bool_ else str(dtype)
