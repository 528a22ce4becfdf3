"""Loads hostile model cases in a child process with an address-space limit, one JSON line per
event on stdout, so that the parent (``runner.py``) can tell a typed refusal from an untyped
error, a crash (signal or MemoryError) or a hang (no line before its deadline).

    python worker.py MANIFEST START MEM_BYTES ORT

MANIFEST is a JSON list of {"name", "path"}; cases from index START on are loaded with
ep-core (reference EP), then, when ORT is 1, with onnxruntime for comparison."""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
import traceback
import warnings

_OUT = sys.stdout  # the protocol channel; anything else a library prints goes to stderr


def _emit(**event: object) -> None:
    _OUT.write(json.dumps(event) + "\n")
    _OUT.flush()


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _ours(path: str) -> dict[str, object]:
    import ep_core
    from ep_core.sdk.errors import EpCoreError

    try:
        sess = ep_core.InferenceSession(path, providers=["CpuReferenceExecutionProvider"])
        del sess
        return {"outcome": "ok"}
    except Exception as exc:  # noqa: BLE001 - classifying every exception is the point
        if any(isinstance(e, MemoryError) for e in _chain(exc)):
            return {"outcome": "crash", "error": f"MemoryError: {exc}"[:400]}
        if isinstance(exc, EpCoreError):
            return {"outcome": "typed", "code": exc.code.value, "error": exc.message[:400]}
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return {"outcome": "untyped", "error": f"{type(exc).__name__}: {exc}"[:400], "where": "".join(tb[-3:])[-800:]}


def _ort(path: str) -> dict[str, object]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    try:
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return {"outcome": "ok"}
    except Exception as exc:  # noqa: BLE001
        return {"outcome": "rejected", "kind": type(exc).__name__, "error": str(exc)[-300:]}


def _not_ours(path: str, ort_error: str) -> str | None:
    """Why a model onnxruntime refuses and ep-core loads is not a structural refusal ep-core
    owes, or None. Runs under this worker's memory limit.

    - "huge_dims": the model declares a dim of 2^31 or more; onnxruntime's shape inference
      overflows on those (magika with batch 2^31 is refused, with 10^6 it loads).
    - "declared_shapes": a declared shape contradicts the inferred one; onnxruntime merges the two
      and infers on from the merge, so whether it refuses depends on the nodes downstream.
    - "data_propagation": onnx's strict inference finds the error only with data propagation,
      which ep-core leaves off (it cannot be bounded in process).
    - "onnx_function_body": onnx cannot infer through the body of a function op that reads its
      attributes (MeanVarianceNormalization), so the declared types of its outputs go unchecked.
    - "onnxruntime_inference": onnxruntime's own shape inference (its own shape-value
      propagation) reaches a node onnx's cannot; ep-core refuses such a model when it runs."""
    import onnx

    from ep_core.runtime.load import _problems

    m = onnx.load(path, load_external_data=False)
    values = list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
    if any(d.dim_value >= 2**31 for v in values for d in v.type.tensor_type.shape.dim):
        return "huge_dims"
    for data_prop in (False, True):
        try:
            onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=data_prop)
        except MemoryError:
            break
        except Exception as exc:  # noqa: BLE001
            if "existing shape differ" in str(exc):
                return "declared_shapes"
            if "One and only one of the attributes" in str(exc) and not _problems(str(exc)):
                return "onnx_function_body"
            if _problems(str(exc)):
                return "data_propagation" if data_prop else None
    if "[ShapeInferenceError]" in ort_error or "[TypeInferenceError]" in ort_error:
        return "onnxruntime_inference"
    return None


def main(argv: list[str]) -> int:
    global _OUT
    manifest, start, mem, with_ort = argv[1], int(argv[2]), int(argv[3]), argv[4] == "1"
    _OUT = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    warnings.simplefilter("ignore")
    import ep_core  # noqa: F401 - imported before the first deadline starts

    if with_ort:
        import onnxruntime  # noqa: F401
    with open(manifest) as fh:
        cases = json.load(fh)
    _emit(ready=True)
    for i in range(start, len(cases)):
        path = cases[i]["path"]
        _emit(start=i, phase="ours")
        t0 = time.perf_counter()
        try:
            res = _ours(path)
        except MemoryError as exc:  # raised while classifying: still a crash of ours
            res = {"outcome": "crash", "error": f"MemoryError: {exc}"}
        res["seconds"] = round(time.perf_counter() - t0, 4)
        gc.collect()
        _emit(id=i, phase="ours", **res)
        if with_ort:
            _emit(start=i, phase="ort")
            try:
                o = _ort(path)
            except MemoryError as exc:
                o = {"outcome": "rejected", "kind": "MemoryError", "error": str(exc)}
            if res["outcome"] == "ok" and o["outcome"] == "rejected":
                o["not_ours"] = _not_ours(path, str(o["error"]))
            _emit(id=i, phase="ort", **o)
    _emit(done=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    sys.exit(main(sys.argv))
