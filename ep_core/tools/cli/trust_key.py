"""``ep-core trust-key FILE``: trust EPContext models signed on another machine (its
``context-signing.key``), and ``--show`` where this user's own key is."""

from __future__ import annotations

import argparse
from typing import Any

from ep_core.sdk.epcontext import signing
from ep_core.tools.cli._common import UsageError, print_json


def _run(args: argparse.Namespace) -> int:
    if args.show:
        key = signing.own_key()
        path = signing.key_dir() / signing.OWN_KEY_FILE
        if args.json:
            print_json({"own_key": str(path), "key_id": signing.key_id(key)})
            return 0
        print(f"this user's context signing key: {path} (id {signing.key_id(key)})")
        print("copy it, over a channel you trust, to machines that should load contexts written here")
        return 0
    if not args.file:
        raise UsageError("give the key FILE to trust, or --show")
    target = signing.trust_key(args.file)
    if args.json:
        print_json({"trusted": str(target), "key_id": target.stem})
        return 0
    print(f"trusted: contexts signed with key {target.stem} now load their native code ({target})")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("trust-key", help="trust EPContext models signed with another machine's key")
    p.add_argument("file", nargs="?", help="a context-signing.key file from the machine that wrote the contexts")
    p.add_argument("--show", action="store_true", help="print where this user's own signing key is")
    p.add_argument("--json", action="store_true", help="machine-readable output (errors too)")
    p.set_defaults(func=_run)
