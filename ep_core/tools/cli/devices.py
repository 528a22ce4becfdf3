"""``ep-core devices``: hardware devices and the EPs that support each."""

from __future__ import annotations

import argparse
from typing import Any

from ep_core.tools.cli._common import print_json, print_table


def device_table() -> list[dict[str, Any]]:
    from ep_core.runtime.select import get_ep_devices, hardware_devices

    ep_devices = get_ep_devices()
    out = []
    for d in hardware_devices():
        entry = d.to_dict()
        entry["execution_providers"] = [e.ep_name for e in ep_devices if e.device == d]
        out.append(entry)
    return out


def _run(args: argparse.Namespace) -> int:
    rows = device_table()
    if args.json:
        print_json(rows)
        return 0
    print_table(
        ["DEVICE", "TYPE", "VENDOR", "DETAILS", "EXECUTION PROVIDERS"],
        [
            [
                r["key"],
                r["type"],
                r["vendor"],
                "\n".join(f"{k}={v}" for k, v in r["metadata"].items()),
                "\n".join(r["execution_providers"]) or "-",
            ]
            for r in rows
        ],
        no_wrap=(0, 4),
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("devices", help="list hardware devices and the EPs that support them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)
