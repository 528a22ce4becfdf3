"""Static coverage: what an EP's kernel registry (and declared fusable ops) covers, against the
ONNX schemas of the pinned onnx and against the reference EP.

Nothing runs here. For every (domain, op) the opsets from the op's first schema to the domain's
newest opset are walked one by one and grouped into segments that follow the schema versions (adjacent gaps merge),
so coverage reads like ``Softmax: 1-10 missing, 11-12 ok, 13+ ok``. A segment is ``ok`` when some
kernel covers the opset with every type the schema allows, ``partial`` when it covers it with
fewer types (the missing ones are listed), ``missing`` otherwise."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ep_core.sdk.kernels import KernelDef
from ep_core.tools.parity.families import family_of
from ep_core.tools.parity.introspect import EpDescription

ONNX_DOMAINS = ("ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview")


def _dkey(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class SchemaVersion:
    since: int
    deprecated: bool
    constraints: dict[str, frozenset[str]]


@dataclass(frozen=True)
class _Def:
    """A KernelDef plus how it serves nodes (``kernel``, ``delegated`` or ``fusable``)."""

    kdef: KernelDef
    via: str


@functools.lru_cache(maxsize=1)
def schema_index() -> dict[tuple[str, str], list[SchemaVersion]]:
    """(domain, op) -> its schema versions, oldest first, from the pinned onnx. Only the ONNX
    domains count: EPs may register custom-domain schemas into ``onnx.defs`` at run time, which
    must not change the totals from one call to the next."""
    from onnx import defs

    index: dict[tuple[str, str], list[SchemaVersion]] = {}
    for s in defs.get_all_schemas_with_history():
        if _dkey(s.domain) not in ONNX_DOMAINS:
            continue
        cons = {tc.type_param_str: frozenset(tc.allowed_type_strs) for tc in s.type_constraints}
        index.setdefault((_dkey(s.domain), s.name), []).append(SchemaVersion(s.since_version, bool(s.deprecated), cons))
    for versions in index.values():
        versions.sort(key=lambda v: v.since)
    return index


@functools.lru_cache(maxsize=1)
def domain_max_opset() -> dict[str, int]:
    """The newest opset of each domain the pinned onnx knows."""
    from onnx import defs

    out: dict[str, int] = {}
    for s in defs.get_all_schemas_with_history():
        d = _dkey(s.domain)
        if d not in ONNX_DOMAINS:
            continue
        out[d] = max(out.get(d, 1), s.since_version)
    out["ai.onnx"] = max(out.get("ai.onnx", 1), defs.onnx_opset_version())
    out["ai.onnx.ml"] = max(out.get("ai.onnx.ml", 1), defs.onnx_ml_opset_version())
    return out


def _schema_at(versions: Sequence[SchemaVersion], opset: int) -> SchemaVersion | None:
    found = None
    for v in versions:
        if v.since <= opset:
            found = v
    return found


def _range_text(start: int, end: int | None) -> str:
    if end is None:
        return f"{start}+"
    return str(start) if start == end else f"{start}-{end}"


def _segment_text(seg: dict[str, Any]) -> str:
    text = f"{_range_text(seg['from'], seg['to'])} {seg['status']}"
    if seg["status"] in ("ok", "partial") and seg["via"] != "kernel":
        text += f" ({seg['via']})"
    if seg["missing_types"]:
        miss = "; ".join(
            f"{c}: {', '.join(t.replace('tensor(', '').rstrip(')') for t in ts)}"
            for c, ts in seg["missing_types"].items()
        )
        text += f" [missing types {miss}]"
    return text


def _coverage_at(
    defs: Sequence[_Def], schema: SchemaVersion | None, opset: int
) -> tuple[str, str, dict[str, list[str]]]:
    """(status, via, missing types) of one opset."""
    covering = [d for d in defs if d.kdef.covers(opset)]
    if not covering:
        return "missing", "none", {}
    vias = {d.via for d in covering}
    via = "kernel" if "kernel" in vias else ("delegated" if "delegated" in vias else "fusable")
    if schema is None:
        return "ok", via, {}
    missing: dict[str, list[str]] = {}
    for name, allowed in schema.constraints.items():
        have: set[str] = set()
        for d in covering:
            if name in d.kdef.type_constraints:
                have.update(d.kdef.type_constraints[name])
            else:
                have = set(allowed)
                break
        lack = sorted(allowed - have)
        if lack:
            missing[name] = lack
    return ("partial" if missing else "ok"), via, missing


def op_segments(defs: Sequence[_Def], versions: Sequence[SchemaVersion], max_opset: int) -> list[dict[str, Any]]:
    """Coverage segments of one op for one EP, split at schema versions and coverage changes."""
    if not versions:  # not an ONNX op: the defs' own ranges are all there is
        return [
            {
                "from": d.kdef.since_version,
                "to": d.kdef.end_version,
                "schema_since": None,
                "status": "ok",
                "via": d.via,
                "missing_types": {},
            }
            for d in sorted(defs, key=lambda d: d.kdef.since_version)
        ]
    segments: list[dict[str, Any]] = []
    for opset in range(versions[0].since, max_opset + 1):
        schema = _schema_at(versions, opset)
        if schema is None:
            continue
        missing: dict[str, list[str]]
        if schema.deprecated:
            status, via, missing = "deprecated", "none", {}
        else:
            status, via, missing = _coverage_at(defs, schema, opset)
        # covered opsets split at schema versions (types differ); gaps merge into one range
        split = None if status in ("missing", "deprecated") else schema.since
        key = (split, status, via, tuple((k, tuple(v)) for k, v in missing.items()))
        if segments and segments[-1]["_key"] == key and segments[-1]["to"] == opset - 1:
            segments[-1]["to"] = opset
        else:
            segments.append(
                {
                    "from": opset,
                    "to": opset,
                    "schema_since": schema.since,
                    "status": status,
                    "via": via,
                    "missing_types": missing,
                    "_key": key,
                }
            )
    for seg in segments:
        del seg["_key"]
    if segments and segments[-1]["to"] == max_opset:
        segments[-1]["to"] = None
    return segments


def _bad_constraints(defs: Sequence[_Def], versions: Sequence[SchemaVersion], max_opset: int) -> list[str]:
    """Type-constraint names (and type strings) a def uses that its schema versions lack, one line
    per def and problem with the schema opsets where it holds."""
    problems: list[str] = []
    for d in defs:
        k = d.kdef
        end = k.end_version if k.end_version is not None else max_opset
        found: dict[str, list[int]] = {}
        for opset in range(k.since_version, end + 1):
            schema = _schema_at(versions, opset)
            if schema is None or schema.deprecated:
                continue
            for name, types in k.type_constraints.items():
                if name not in schema.constraints:
                    text = f"type constraint {name!r} does not exist (schema has {sorted(schema.constraints)})"
                else:
                    extra = sorted(set(types) - schema.constraints[name])
                    if not extra:
                        continue
                    text = f"{name} lists {extra}, which the schema does not allow"
                sinces = found.setdefault(text, [])
                if schema.since not in sinces:
                    sinces.append(schema.since)
        where = f"{k.domain_key}::{k.op_type} {_range_text(k.since_version, k.end_version)} ({d.via})"
        for text, sinces in found.items():
            problems.append(f"{where}: {text} at schema opset(s) {', '.join(map(str, sinces))}")
    return problems


def _defs_of(desc: EpDescription) -> dict[tuple[str, str], list[_Def]]:
    out: dict[tuple[str, str], list[_Def]] = {}
    for k in desc.kernel_defs:
        out.setdefault((k.domain_key, k.op_type), []).append(_Def(k, "delegated" if k.delegated else "kernel"))
    for k in desc.fusable:
        out.setdefault((k.domain_key, k.op_type), []).append(_Def(k, "fusable"))
    return out


def _side(defs: Sequence[_Def], versions: Sequence[SchemaVersion], max_opset: int) -> dict[str, Any]:
    segs = op_segments(defs, versions, max_opset)
    live = [s for s in segs if s["status"] != "deprecated"]
    latest = (
        live[-1]["status"]
        if live and versions and live[-1]["to"] is None
        else ("ok" if not versions and defs else "missing")
    )
    return {
        "segments": segs,
        "summary": ", ".join(_segment_text(s) for s in segs) if defs else "not registered",
        "registered": bool(defs),
        "latest": latest,
        "delegated": bool(defs) and all(d.via == "delegated" for d in defs),
        "fusable": any(d.via == "fusable" for d in defs),
    }


def _pct(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 2) if den else None


def static_report(ep: EpDescription, reference: EpDescription) -> dict[str, Any]:
    """The ``static`` section of the report (see report.schema.json)."""
    index = schema_index()
    max_opsets = domain_max_opset()
    ep_defs = _defs_of(ep)
    ref_defs = _defs_of(reference)
    keys = sorted(set(index) | set(ep_defs) | set(ref_defs))
    ops: list[dict[str, Any]] = []
    onnx_ops = onnx_latest = onnx_versions = onnx_versions_cov = 0
    per_domain: dict[str, dict[str, int]] = {}
    ref_ops = ref_cov = 0
    for key in keys:
        domain, op = key
        versions = index.get(key, [])
        max_opset = max_opsets.get(domain, max((v.since for v in versions), default=1))
        mine = ep_defs.get(key, [])
        theirs = ref_defs.get(key, [])
        deprecated = bool(versions) and versions[-1].deprecated
        if not versions and not mine and not theirs:
            continue
        ep_side = _side(mine, versions, max_opset)
        ref_side = _side(theirs, versions, max_opset)
        gaps = _gaps_vs_reference(ep_side["segments"], ref_side["segments"], max_opset) if versions else []
        ops.append(
            {
                "domain": domain,
                "op_type": op,
                "family": family_of(op, domain),
                "in_onnx": bool(versions),
                "deprecated": deprecated,
                "schema_versions": [v.since for v in versions],
                "ep": ep_side,
                "reference": ref_side,
                "gaps_vs_reference": gaps,
                "bad_type_constraints": _bad_constraints(mine, versions, max_opset) if versions else [],
            }
        )
        if versions and not deprecated:
            onnx_ops += 1
            d = per_domain.setdefault(domain, {"ops": 0, "covered_latest": 0})
            d["ops"] += 1
            if ep_side["latest"] in ("ok", "partial"):
                onnx_latest += 1
                d["covered_latest"] += 1
            for i, v in enumerate(versions):
                if v.deprecated:
                    continue
                end = versions[i + 1].since - 1 if i + 1 < len(versions) else max_opset
                onnx_versions += 1
                if all(_coverage_at(mine, v, o)[0] != "missing" for o in range(v.since, end + 1)):
                    onnx_versions_cov += 1
        if theirs:
            ref_ops += 1
            if mine:
                ref_cov += 1
    ep_only = [
        f"{o['domain']}::{o['op_type']}" for o in ops if o["ep"]["registered"] and not o["reference"]["registered"]
    ]
    ref_only = [
        f"{o['domain']}::{o['op_type']}" for o in ops if o["reference"]["registered"] and not o["ep"]["registered"]
    ]
    problems = ep.kernel_registry.validate() if ep.kernel_registry is not None else []
    return {
        "ep_kind": ep.kind,
        "fusable_declared": ep.fusable_declared,
        "counts": {
            "ep_ops": sum(1 for o in ops if o["ep"]["registered"]),
            "ep_kernel_defs": len(ep.kernel_defs),
            "ep_fusable_defs": len(ep.fusable),
            "reference_ops": ref_ops,
            "onnx_ops": onnx_ops,
        },
        "coverage_vs_onnx": {
            "ops_latest": {"covered": onnx_latest, "total": onnx_ops, "percent": _pct(onnx_latest, onnx_ops)},
            "op_versions": {
                "covered": onnx_versions_cov,
                "total": onnx_versions,
                "percent": _pct(onnx_versions_cov, onnx_versions),
            },
            "per_domain": {
                d: {**v, "percent": _pct(v["covered_latest"], v["ops"])} for d, v in sorted(per_domain.items())
            },
        },
        "coverage_vs_reference": {"covered": ref_cov, "total": ref_ops, "percent": _pct(ref_cov, ref_ops)},
        "ep_only": ep_only,
        "reference_only": ref_only,
        "delegated_ops": [
            f"{o['domain']}::{o['op_type']}" for o in ops if o["ep"]["registered"] and o["ep"]["delegated"]
        ],
        "fusable_ops": sorted(
            {f"{k.domain_key}::{k.op_type} {_range_text(k.since_version, k.end_version)}" for k in ep.fusable}
        ),
        "bad_type_constraints": [p for o in ops for p in o["bad_type_constraints"]],
        "registry_problems": problems,
        "ops": ops,
    }


def _gaps_vs_reference(mine: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]], max_opset: int) -> list[str]:
    """Opset ranges the reference covers and the EP does not, e.g. ``["1-10", "13+"]``."""

    def expand(segs: Sequence[dict[str, Any]]) -> set[int]:
        out: set[int] = set()
        for s in segs:
            if s["status"] in ("ok", "partial"):
                out.update(range(s["from"], (s["to"] if s["to"] is not None else max_opset) + 1))
        return out

    ranges: list[str] = []
    start = prev = -1
    for v in sorted(expand(theirs) - expand(mine)) + [-1]:
        if v != -1 and v == prev + 1:
            prev = v
            continue
        if start != -1:
            ranges.append(_range_text(start, None if prev == max_opset else prev))
        start = prev = v
    return ranges
