"""``ep-core providers``: every discovered EP with its status and, when unusable, why; and the
problems found in a usable one (kernels its registry refused), listed under the table."""

from __future__ import annotations

import argparse
from typing import Any

from ep_core.tools.cli._common import print_json, print_table


def provider_status() -> list[dict[str, Any]]:
    from ep_core.runtime.discover import get_registry
    from ep_core.runtime.select import ep_devices_for, hardware_devices, incompatibility_reasons
    from ep_core.sdk.kernels import registry_problems

    registry = get_registry()
    devices = hardware_devices(registry)
    rows: list[dict[str, Any]] = []
    for h in registry.handles():
        row: dict[str, Any] = {
            "name": h.name,
            "entry_point": h.target,
            "distribution": h.distribution,
            "version": None,
            "vendor": None,
            "status": "ok",
            "devices": [],
            "reasons": [],
            "problems": [],
        }
        if h.load() is None:
            row["status"] = "load error"
            row["reasons"] = [h.load_error.summary if h.load_error else "unknown"]
        else:
            row["version"] = h.call("ep_factory_version")
            row["vendor"] = h.call("ep_factory_vendor")
            eps = ep_devices_for(h, devices)
            row["devices"] = [
                d.device.key + (" (simulated)" if d.device.metadata.get("simulated") == "1" else "") for d in eps
            ]
            if not eps:
                row["status"] = "incompatible"
                row["reasons"] = incompatibility_reasons(h, devices) or ["reports no supported device"]
            # registries built so far (at import, for an EP that registers its kernels eagerly)
            row["problems"] = registry_problems(h.name)
        rows.append(row)
    return rows


def _run(args: argparse.Namespace) -> int:
    rows = provider_status()
    if args.json:
        print_json(rows)
        return 0
    print_table(
        ["NAME", "VERSION", "PACKAGE", "STATUS", "DEVICES"],
        [
            [
                r["name"],
                r["version"] or "-",
                r["distribution"] or "(registered by hand)",
                r["status"] + (f" ({len(r['problems'])} problem(s))" if r["problems"] else ""),
                ", ".join(r["devices"]) or "-",
            ]
            for r in rows
        ],
    )
    # reasons are whole lines under the table (the terminal wraps them; a table cell would chop them)
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['name']} is not usable ({r['status']}): {'; '.join(r['reasons'])}")
    problems = [(r["name"], p) for r in rows for p in r["problems"]]
    if problems:
        print(f"{len(problems)} problem(s) in usable providers (EP_CORE_STRICT_PLUGINS=1 makes them fatal):")
        for name, problem in problems:
            print(f"  {name}: {problem}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("providers", help="list installed execution providers and their status")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)
