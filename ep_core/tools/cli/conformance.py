"""``ep-core conformance``: one EP on every ONNX node test case (see ``ep_core.tools.conformance``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from ep_core.tools import conformance

    p = subparsers.add_parser(
        "conformance",
        help="run every ONNX node test case on one EP and print the pass count",
        description=conformance.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    conformance.add_arguments(p)
    p.set_defaults(func=conformance.run)
