"""``ep-core run``'s text output: what the model answered, where it ran, how long it took."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ep_core.tools.cli._common import print_table
from ep_core.tools.cli._outputs import stats_line


def _home(path: str) -> str:
    home = str(Path.home())
    return "~" + path[len(home) :] if home != "/" and path.startswith(home + "/") else path


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def show_run(r: dict[str, Any], info: Any) -> None:
    """Print a run's result (the dict ``--json`` prints) for a person."""
    if info:
        print(f"model    {info.name}: {info.description}, from the {info.package} {info.version} wheel")
        print(f"         {_home(r['model'])}")
    else:
        print(f"model    {r['model']}")
    for name, i in r["inputs"].items():
        print(f"input    {name} {i['shape']} {i['dtype']}: {i['how']}")
    for s in r["outputs"].values():
        print(f"output   {s['name']} {stats_line(s)}")
        if "top_k" in s:
            _print_answers(s, r["rows"])
    prov = r["per_provider"]
    print_table(
        ["PROVIDER (priority order)", "NODES", "FUSED GROUPS"],
        [
            [p["ep"], p["nodes"], f"{p['epcontext_nodes']} EPContext" if p["epcontext_nodes"] else p["fused_groups"]]
            for p in prov
        ],
    )
    for ep, why in r["idle_providers"].items():
        print(f"{ep} got no node: {why}")
    s = r["session"]
    if s["source"] == "cache":
        text = (
            f"{_seconds(s['seconds'])}: loaded the cached EPContext model, {s['speedup']:g}x faster than the "
            f"first session ({_seconds(s['first_session_seconds'])}, compiling)"
        )
    elif s["source"] == "compiled":
        text = (
            f"{_seconds(s['seconds'])}: compiled; EPContext model cached in {_home(s['cache'])} (the next run loads it)"
        )
    else:
        text = f"{_seconds(s['seconds'])}"
    print(
        f"start    {_seconds(s['providers_startup_seconds'])}: providers started (once per process, before the session)"
    )
    print(f"session  {text}")
    runs = r["run"]["runs"]
    print(f"run      {_seconds(r['run']['best_seconds'])}" + (f" (best of {runs})" if runs > 1 else ""))
    for note in r["notes"]:
        print(f"note: {note}", file=sys.stderr)
    for path in r.get("saved_outputs", ()):
        print(f"wrote    {path}")
    if "assignment" in r:
        print_table(
            ["NODE", "PROVIDER", "FUSED GROUP"],
            [[n, a["ep"], a["fused_node"] or "-"] for n, a in r["assignment"].items()],
            title="node assignment",
        )
    else:
        print("(every node's provider: --show-assignment)")
    if r.get("profile"):
        print(f"profile: {r['profile']}")


def _print_answers(s: dict[str, Any], rows: list[str]) -> None:
    k = len(s["top_k"][0]) if s["top_k"] else 0
    names = rows if len(rows) == len(s["top_k"]) else [f"row {i}" for i in range(len(s["top_k"]))]

    def label(e: dict[str, Any]) -> str:
        return e["label"] if e["label"] is not None else f"class {e['index']}"

    print_table(
        ["INPUT", "ANSWER", "SCORE"] + (["NEXT"] if k > 1 else []),
        [
            [n, label(top[0]), f"{top[0]['score']:.3f}"]
            + ([", ".join(f"{label(e)} {e['score']:.3f}" for e in top[1:])] if k > 1 else [])
            for n, top in zip(names, s["top_k"])
        ],
        title=f"what the model said ({s['name']}: top {k} of {s['shape'][1]})",
    )
