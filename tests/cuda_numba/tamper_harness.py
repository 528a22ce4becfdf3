"""Subprocess side of test_context_tampering.py: load and run tampered context models under an
audit hook, and classify each outcome.

Usage: ``python tamper_harness.py MANIFEST OUT MARK``. MANIFEST lists the cases (model path,
whether the session asks for ``ep.context_require_signature=1``) plus the feeds/expected ``.npz``
and the untampered model used to warm up. While a case loads and runs, the audit hook records
every ``exec``/``compile`` whose code or source contains MARK (planted in every injected string),
every ``pickle.find_class`` and every ``marshal.loads``; an injected string that ran would also set
the environment variable MARK. OUT gets one JSON record per case."""

from __future__ import annotations

import ast
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

EP = "NumbaCudaExecutionProvider"
REF = "CpuReferenceExecutionProvider"
_recording = False
_events: list[str] = []


def _code_text(obj: Any, depth: int = 0) -> str:
    """Every string a code object (or source, or AST) carries, for the marker search."""
    if isinstance(obj, (str, bytes, bytearray)):
        return obj.decode("latin-1") if isinstance(obj, (bytes, bytearray)) else obj
    if isinstance(obj, ast.AST):
        return ast.dump(obj)
    if hasattr(obj, "co_consts") and depth < 20:
        parts = [obj.co_filename, *obj.co_names, *obj.co_varnames]
        parts += [_code_text(c, depth + 1) for c in obj.co_consts]
        return "\n".join(parts)
    return repr(obj) if isinstance(obj, (tuple, frozenset)) else ""


def _hook_for(mark: str) -> Any:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not _recording:
            return
        if event in ("exec", "compile") and args and mark in _code_text(args[0]):
            _events.append(event)
        elif event == "pickle.find_class":
            _events.append(f"pickle.find_class {args!r}")
        elif event == "marshal.loads":
            _events.append("marshal.loads")

    return hook


def _payloads(model: Any, folder: Path) -> dict[str, tuple[Any, dict[str, np.ndarray]]]:
    """EPContext node name -> (its graph's spec, constant input name -> array) as the context
    binary says (for the oracle); a node whose graph cannot be read -> missing."""
    from ep_cuda_numba import context_binary

    nodes = [n for n in model.graph.node if n.op_type == "EPContext"]
    out = {}
    try:
        attrs = {a.name: a for a in nodes[0].attribute}
        raw = attrs["ep_cache_context"].s
        if "embed_mode" in attrs and attrs["embed_mode"].i == 0:
            raw = (folder / raw.decode()).read_bytes()
        meta, tensors = context_binary.read(raw, ValueError)
    except Exception:  # noqa: BLE001 - an unreadable binary has no oracle
        return out
    for n in nodes:
        a = {x.name: x for x in n.attribute}
        graph = a["partition_name"].s.decode() if "partition_name" in a and a["partition_name"].s else n.name
        try:
            rec = meta["graphs"][graph]
            spec = rec["spec"]
            consts = {spec["inputs"][c["input"]]: tensors[f"w.{c['key']}"] for c in rec["constants"]}
            out[n.name] = (spec, consts)
        except Exception:  # noqa: BLE001
            continue
    return out


def _const(name: str, value: float, dtype: str) -> Any:
    from onnx import numpy_helper

    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        value = int(min(max(value, info.min), info.max))
    return numpy_helper.from_array(np.array(value, dtype=dt), name)


def oracle(model_path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """What the tampered file says: each EPContext node replaced by plain ONNX nodes built from
    the spec (and constants) its graph in the context binary carries, run on the reference EP.
    None when that is not a runnable model."""
    import onnx
    from onnx import helper, numpy_helper

    from ep_core import InferenceSession

    model = onnx.load(str(model_path))
    specs = _payloads(model, model_path.parent)
    nodes, inits = [], list(model.graph.initializer)
    try:
        for n in model.graph.node:
            if n.op_type != "EPContext":
                nodes.append(n)
                continue
            spec, consts = specs[n.name]
            for cname, arr in consts.items():
                if cname not in {t.name for t in inits}:
                    inits.append(numpy_helper.from_array(arr, cname))
            p = f"oracle_{len(nodes)}"

            def name(a: list[Any], spec: dict[str, Any] = spec, p: str = p) -> str:
                return spec["inputs"][a[1]] if a[0] == "x" else f"{p}_t{a[1]}"

            for k, e in enumerate(spec["nodes"]):
                ins, kw = [name(a) for a in e["args"]], {}
                op, prm = e["op"], e["params"]
                if op == "Clip":
                    for i, v in enumerate(prm):
                        inits.append(_const(f"{p}_{k}_c{i}", v, e["dtype"]))
                        ins.append(f"{p}_{k}_c{i}")
                elif op in ("LeakyRelu", "Elu"):
                    kw["alpha"] = prm[0]
                elif op == "HardSigmoid":
                    kw["alpha"], kw["beta"] = prm
                elif op == "Gelu":
                    kw.update(e["attrs"])
                elif op == "Cast":
                    kw["to"] = helper.np_dtype_to_tensor_dtype(np.dtype(e["out_dtype"]))
                nodes.append(helper.make_node(op, ins, [f"{p}_t{k}"], **kw))
            for j, k in enumerate(spec["output_nodes"]):
                nodes.append(helper.make_node("Identity", [f"{p}_t{k}"], [spec["outputs"][j]]))
        g = model.graph
        graph = helper.make_graph(nodes, "oracle", list(g.input), list(g.output), initializer=inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        return list(InferenceSession(m.SerializeToString(), providers=[REF]).run(None, feeds))
    except Exception:  # noqa: BLE001 - the spec does not describe a runnable model
        return None


def same(got: list[Any], want: list[Any] | None) -> bool:
    if want is None or len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        if not np.allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True):
            return False
    return True


def classify(
    case: dict[str, Any], feeds: dict[str, np.ndarray], expected: list[np.ndarray], mark: str
) -> dict[str, Any]:
    global _recording
    from ep_core import InferenceSession, SessionOptions
    from ep_core.sdk.errors import EpCoreError

    rec: dict[str, Any] = {"id": case["id"], "names": case["names"]}
    so = SessionOptions()
    if case.get("strict"):
        so.add_session_config_entry("ep.context_require_signature", "1")
    _events.clear()
    got = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _recording = True
        try:
            sess = InferenceSession(case["model"], so, providers=[EP])
            got = sess.run(None, feeds)
        except EpCoreError as exc:
            rec["error"] = f"{exc.code.value}: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - what the suite counts as untyped
            rec["untyped"] = f"{type(exc).__name__}: {exc}"
        finally:
            _recording = False
    trust = [
        str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "EPContext node" in str(w.message)
    ]
    rec["warning"] = trust[0] if trust else ""
    rec["executed"] = list(_events) + ([f"environment variable {mark} set"] if mark in os.environ else [])
    os.environ.pop(mark, None)
    if got is not None:
        if same(got, expected):
            rec["result"] = "correct"
        else:
            rec["result"] = "edited" if same(got, oracle(Path(case["model"]), feeds)) else "wrong"
    return rec


def self_check(mark: str) -> list[str]:
    """The hook sees what it must: an exec/compile of the marker, an unpickled class, a marshal
    load (a suite whose hook saw nothing could not fail)."""
    import collections
    import marshal
    import pickle

    global _recording
    _recording = True
    exec(compile(f"{mark!r}", "<self-check>", "eval"))  # noqa: S102 - the positive control
    pickle.loads(pickle.dumps(collections.OrderedDict()))  # noqa: S301
    marshal.loads(marshal.dumps(1))
    _recording = False
    seen = list(_events)
    _events.clear()
    return seen


def main() -> None:
    manifest, out, mark = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    spec = json.loads(manifest.read_text())
    data = np.load(spec["data"], allow_pickle=False)
    feeds = {k[5:]: data[k] for k in data.files if k.startswith("feed_")}
    expected = [data[f"expected_{i}"] for i in range(len([k for k in data.files if k.startswith("expected_")]))]
    from ep_core import InferenceSession

    # warm up imports and caches with the untampered model, so a case's events are its own
    for warm in spec["warmup"]:
        InferenceSession(warm, providers=[EP]).run(None, feeds)
    InferenceSession(spec["source"], providers=[REF]).run(None, feeds)
    oracle(Path(spec["warmup"][0]), feeds)
    sys.addaudithook(_hook_for(mark))
    seen = self_check(mark)
    records = [classify(case, feeds, expected, mark) for case in spec["cases"]]
    out.write_text(json.dumps({"self_check": seen, "records": records}))


if __name__ == "__main__":
    main()
