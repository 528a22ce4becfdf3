"""Runs hostile cases through ``worker.py`` subprocesses and classifies each outcome.

Cases are written one folder each (``model.onnx`` plus the files beside it) and loaded by path.
A worker takes many cases; when it dies (signal, abort) or misses a deadline, the case it was on
is recorded as a crash or a hang and a fresh worker goes on with the next case."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from security.hostile_models import Case

WORKER = Path(__file__).with_name("worker.py")
OURS = ("ok", "typed", "untyped", "crash", "hang")
# What onnxruntime refuses for reasons other than the model's structure or types, by message:
NOT_STRUCTURAL = (
    # its version support, and schemas older than those of onnx 1.23 (which the checker here uses)
    "Unsupported model IR version",
    "Current official support for domain",
    "Unrecognized attribute",
    "is not a registered function/op",
    # running out of memory in its own shape inference (ep-core loads those without allocating)
    "std::bad_alloc",
    # a type error inside the body of a function op it expands (unnamed nodes there); a named
    # node's type error is found by onnx's strict inference, which ep-core runs
    "in node ().",
    # its kernels' own restrictions and integer widths; the spec has none of these
    "exclude_outside can be set to 1 when",
    "when anti-aliasing is set, Resize only supports",
    "Attribute saturate is only used for cast to float 8",
    "Batchwise recurrent operations (layout == 1) are not supported",
    "narrowing_error",
    # an empty input name (ONNX reads it as absent) taken as given
    "the 'split' input should not be provided",
    # a declared element type 0 (UNDEFINED): ep-core reads it as unknown
    "Invalid tensor data type 0.",
    # a locale this machine lacks (StringNormalizer)
    "Failed to construct locale",
)


@dataclass
class Report:
    results: list[dict[str, object]] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> Counter[str]:
        return Counter(str(r["ours"]["outcome"]) for r in self.results)

    def bad(self) -> list[dict[str, object]]:
        return [r for r in self.results if r["ours"]["outcome"] in ("untyped", "crash", "hang")]

    def missed_rejections(self) -> list[dict[str, object]]:
        """Cases onnxruntime refuses at load for a structural or type reason that ep-core loads.
        NOT_IMPLEMENTED (no CPU kernel) is not such a reason, nor its Python binding failing on
        bytes that are not UTF-8, nor those in NOT_STRUCTURAL, nor those the worker sets apart
        (``worker._not_ours``)."""
        return [
            r
            for r in self.results
            if r["ours"]["outcome"] == "ok"
            and r.get("ort", {}).get("outcome") == "rejected"
            and r["ort"].get("kind") not in ("NotImplemented", "UnicodeDecodeError")
            and not any(p in str(r["ort"].get("error")) for p in NOT_STRUCTURAL)
            and not r["ort"].get("not_ours")
        ]

    def extra_refusals(self) -> list[dict[str, object]]:
        """Cases ep-core refuses that onnxruntime loads."""
        return [r for r in self.results if r["ours"]["outcome"] == "typed" and r.get("ort", {}).get("outcome") == "ok"]

    def set_apart(self) -> Counter[str]:
        return Counter(str(r["ort"]["not_ours"]) for r in self.results if r.get("ort", {}).get("not_ours"))


def write_cases(cases: list[Case], root: Path) -> Path:
    entries = []
    for i, c in enumerate(cases):
        d = root / f"{i:05d}"
        d.mkdir(parents=True)
        (d / "model.onnx").write_bytes(c.model)
        for name, data in c.files.items():
            if name.startswith("@"):  # a symbolic link: the bytes are its target
                os.symlink(data.decode(), d / name[1:])
            else:
                (d / name).write_bytes(data)
        entries.append({"name": c.name, "path": str(d / "model.onnx")})
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps(entries))
    return manifest


def run_cases(
    cases: list[Case], root: Path, *, timeout: float = 20.0, mem: int = 2 << 30, with_ort: bool = True
) -> Report:
    """Every case through workers; ``timeout`` is per case and phase, ``mem`` the address-space
    limit of each worker (RLIMIT_AS)."""
    t0 = time.perf_counter()
    manifest = write_cases(cases, root)
    results: list[dict[str, object]] = [{"name": c.name} for c in cases]
    nxt = 0
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONWARNINGS": "ignore"}
    while nxt < len(cases):
        cmd = [sys.executable, str(WORKER), str(manifest), str(nxt), str(mem), "1" if with_ort else "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current: tuple[int, str] | None = None
        deadline = time.monotonic() + 120.0  # imports before the first case
        try:
            while True:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    if current is None:
                        raise RuntimeError(f"worker did not start: {cmd}")
                    i, phase = current
                    results[i][phase] = {"outcome": "hang", "error": f"no answer within {timeout} s"}
                    nxt = i + 1
                    break
                line = proc.stdout.readline()
                if not line:  # the worker died on the case it was loading
                    rc = proc.wait()
                    if current is None:
                        raise RuntimeError(f"worker exited with {rc} before its first case: {cmd}")
                    i, phase = current
                    results[i][phase] = {"outcome": "crash", "error": f"worker exited with status {rc}"}
                    nxt = i + 1
                    break
                event = json.loads(line)
                if "start" in event:
                    current = (int(event["start"]), str(event["phase"]))
                    deadline = time.monotonic() + timeout
                elif "id" in event:
                    i = int(event.pop("id"))
                    results[i][str(event.pop("phase"))] = event
                    nxt = i + 1
                elif event.get("done"):
                    nxt = len(cases)
                    break
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            sel.close()
        if current is not None and current[1] == "ort" and "ours" in results[current[0]]:
            # onnxruntime, not ep-core, failed on this case: ours is already recorded
            results[current[0]].setdefault("ort", {"outcome": "crash"})
    for r in results:
        r.setdefault("ours", {"outcome": "hang", "error": "never reached"})
    return Report(results, time.perf_counter() - t0)


def summary(report: Report) -> dict[str, object]:
    counts = report.counts()
    ort = Counter(str(r.get("ort", {}).get("outcome", "-")) for r in report.results)
    by_kind: dict[str, Counter[str]] = {}
    for r in report.results:
        kind = str(r["name"]).split(":")[0] if ":" in str(r["name"]) else "crafted"
        by_kind.setdefault(kind, Counter())[str(r["ours"]["outcome"])] += 1
    return {
        "cases": len(report.results),
        "seconds": round(report.seconds, 1),
        "ours": {k: counts.get(k, 0) for k in OURS},
        "onnxruntime": dict(ort),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "missed_rejections": len(report.missed_rejections()),
        "onnxruntime_refusals_set_apart": dict(report.set_apart()),
        "refused_here_loaded_by_onnxruntime": len(report.extra_refusals()),
    }
