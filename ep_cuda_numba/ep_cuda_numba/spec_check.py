"""Strict validation of a fusion spec: the declarative data a fused group's kernel is generated
from, and the only thing an EPContext node of this EP carries.

A spec read from a context file is attacker-controlled, so nothing in it is trusted to be the
right type, size or name: every field is checked against a closed grammar (fixed keys, op names
from ``codegen.ALL_OPS``, dtype names from ``DTYPES``, ints that are ints and in range, params
that are numbers, the one attribute the generator reads) and the ops' typing rules, before the
generator turns it into source. Any violation is ``InvalidGraph`` naming where the spec came from."""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_core.sdk.errors import InvalidGraph
from ep_cuda_numba.codegen import ALL_OPS, COMPARE, LOGIC, UNARY_FLOAT, compute_dtype

SPEC_FORMAT = 2
MAX_GROUP_INPUTS = 16
MAX_SPEC_NODES = 256  # the largest group fused_group_max_nodes allows
# what the EP's kernels are registered for
DTYPES = frozenset({"bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"})
SPEC_KEYS = frozenset({"format", "inputs", "input_dtypes", "outputs", "nodes", "output_nodes"})
NODE_KEYS = frozenset({"name", "op", "attrs", "args", "params", "param_base", "dtype", "out_dtype"})
GELU_APPROXIMATE = ("none", "tanh")


def param_count(op: str) -> int:
    """How many scalar params ``{p0}``.. the op's expression template takes."""
    fields = {f for _, f, _, _ in string.Formatter().parse(ALL_OPS[op].expr) if f}
    return len([f for f in fields if f.startswith("p")])


def type_problem(op: str, arg_dtypes: Sequence[str], dtype: str, out_dtype: str) -> str | None:
    """Why ``op`` cannot be generated for these dtypes (None when it can). ``dtype`` is the
    compute dtype of the op's values (Where: its branches)."""
    names = [*arg_dtypes, dtype, out_dtype]
    bad = [d for d in names if d not in DTYPES]
    if bad:
        return f"dtype {bad[0]!r} is not one of {sorted(DTYPES)}"
    want: list[str | None] = [dtype] * len(arg_dtypes)  # None: any non-bool dtype
    out = dtype
    if op in COMPARE:
        out = "bool"
    elif op in LOGIC:
        want, out = ["bool"] * len(arg_dtypes), "bool"
        if dtype != "bool":
            return f"{op} computes on bool, not {dtype}"
    elif op == "Cast":
        out = out_dtype
    elif op == "Where":
        want = ["bool", dtype, dtype]
    elif op == "Pow":
        want = [dtype, None]
    if op in UNARY_FLOAT and dtype not in ("float16", "bfloat16", "float32", "float64"):
        return f"{op} computes on float16/bfloat16/float32/float64, not {dtype}"
    if dtype == "bool" and op not in COMPARE and op not in LOGIC and op not in ("Identity", "Cast", "Where"):
        return f"{op} does not compute on bool"
    for i, (got, w) in enumerate(zip(arg_dtypes, want, strict=False)):
        if (w is None and got == "bool") or (w is not None and got != w):
            return f"argument {i} is {got} but {op} on {dtype} needs {w or 'a number'}"
    if out_dtype != out:
        return f"output dtype {out_dtype} but {op} on {dtype} gives {out}"
    return None


def is_param(value: Any) -> bool:
    """A scalar param: a number that is not NaN (a NaN bound or slope has no one meaning)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def typed_param(value: float, dtype: str) -> Any:
    """A param as a scalar of the compute dtype: floats overflow to inf, ints clamp to the dtype's
    range (a Clip bound beyond it bounds nothing)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        with np.errstate(over="ignore"):
            return dt.type(value)
    info = np.iinfo(dt)
    return dt.type(int(min(max(value, info.min), info.max)))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str_list(spec: dict[str, Any], key: str, bad: Any) -> list[str]:
    v = spec[key]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad(f"'{key}' must be a list of strings")
    return v


def validate_spec(spec: Any, where: str) -> None:
    """Raise ``InvalidGraph`` (``where``: the node and file) unless ``spec`` is a well-formed spec
    this EP can generate a kernel for."""

    def bad(why: str) -> InvalidGraph:
        return InvalidGraph(f"{where}: invalid fusion spec: {why}; regenerate the context model")

    if not isinstance(spec, dict) or set(spec) != SPEC_KEYS:
        keys = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise bad(f"expected exactly the keys {sorted(SPEC_KEYS)}, found {keys}")
    if not _is_int(spec["format"]) or spec["format"] != SPEC_FORMAT:
        raise bad(f"format {spec['format']!r} is not {SPEC_FORMAT}")
    inputs, outputs = _str_list(spec, "inputs", bad), _str_list(spec, "outputs", bad)
    in_dtypes = _str_list(spec, "input_dtypes", bad)
    if len(inputs) > MAX_GROUP_INPUTS or len(in_dtypes) != len(inputs) or not outputs:
        raise bad(
            f"{len(inputs)} inputs (at most {MAX_GROUP_INPUTS}), {len(in_dtypes)} input dtypes, {len(outputs)} outputs"
        )
    if not set(in_dtypes) <= DTYPES:
        raise bad(f"input dtypes {in_dtypes} are not all in {sorted(DTYPES)}")
    nodes = spec["nodes"]
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_SPEC_NODES:
        raise bad(f"'nodes' must be a list of 1 to {MAX_SPEC_NODES} entries")
    out_dtypes: list[str] = []
    n_params = 0
    for k, e in enumerate(nodes):
        out_dtypes.append(_check_node(e, k, n_params, in_dtypes, out_dtypes, bad))
        n_params += len(e["params"])
    outs = spec["output_nodes"]
    if (
        not isinstance(outs, list)
        or len(outs) != len(outputs)
        or not all(_is_int(k) and 0 <= k < len(nodes) for k in outs)
    ):
        raise bad(f"'output_nodes' must list, for each of the {len(outputs)} outputs, a node index below {len(nodes)}")


def _check_node(e: Any, k: int, param_base: int, in_dtypes: list[str], out_dtypes: list[str], bad: Any) -> str:
    """Check one spec entry (node ``k``); returns its output dtype."""
    if not isinstance(e, dict) or set(e) != NODE_KEYS:
        raise bad(f"node {k} must have exactly the keys {sorted(NODE_KEYS)}")
    label = f"node {k} ({e['name']!r})" if isinstance(e["name"], str) else f"node {k}"
    if not isinstance(e["name"], str):
        raise bad(f"{label}: 'name' must be a string")
    op = e["op"]
    if not isinstance(op, str) or op not in ALL_OPS:
        raise bad(f"{label}: {op!r} is not an elementwise op this EP fuses")
    args = e["args"]
    arity = ALL_OPS[op].arity
    if not isinstance(args, list) or (len(args) != arity if arity > 0 else not 1 <= len(args) <= MAX_GROUP_INPUTS):
        raise bad(f"{label}: {op} takes {arity if arity > 0 else '1 or more'} arguments")
    arg_dtypes = []
    for a in args:
        if not isinstance(a, list) or len(a) != 2 or a[0] not in ("x", "t") or not _is_int(a[1]):
            raise bad(f"{label}: argument {a!r} is not ['x', input index] or ['t', node index]")
        limit = len(in_dtypes) if a[0] == "x" else k
        if not 0 <= a[1] < limit:
            raise bad(f"{label}: argument {a!r} is out of range (below {limit})")
        arg_dtypes.append(in_dtypes[a[1]] if a[0] == "x" else out_dtypes[a[1]])
    attrs = e["attrs"]
    allowed = {"approximate": GELU_APPROXIMATE} if op == "Gelu" else {}
    if not isinstance(attrs, dict) or any(k_ not in allowed or v not in allowed[k_] for k_, v in attrs.items()):
        raise bad(f"{label}: attrs {attrs!r} are not among {allowed}")
    params = e["params"]
    n = param_count(op)
    if not isinstance(params, list) or len(params) != n or not all(is_param(p) for p in params):
        raise bad(f"{label}: {op} takes {n} numeric params (not NaN), got {params!r}")
    if not _is_int(e["param_base"]) or e["param_base"] != param_base:
        raise bad(f"{label}: param_base {e['param_base']!r} is not {param_base} (the params before it)")
    dtype, out = e["dtype"], e["out_dtype"]
    if not isinstance(dtype, str) or not isinstance(out, str):
        raise bad(f"{label}: 'dtype' and 'out_dtype' must be strings")
    why = type_problem(op, arg_dtypes, dtype, out)
    if why is not None:
        raise bad(f"{label}: {why}")
    try:
        for p in params:
            typed_param(p, compute_dtype(op, np.dtype(dtype), np.dtype(out)).name)
    except ValueError as exc:
        raise bad(f"{label}: {exc}") from None
    return out
