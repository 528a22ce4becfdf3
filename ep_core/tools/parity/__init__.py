"""Parity reports: how far an execution provider matches the reference EP and the ONNX spec.

``build_report(ep, static=..., runtime=...)`` returns a :class:`ParityReport` whose ``data`` is
the JSON document described by ``report.schema.json``; ``ep_core.tools.parity.render`` turns it into a
terminal summary, Markdown, JSON or one offline HTML file. Compile-based EPs declare what they
can fuse with the ``fusable_ops()`` protocol documented in ``ep_core.tools.parity.introspect``."""

from __future__ import annotations

from ep_core.tools.parity.introspect import EpLoadFailure, FusableOpsError, normalize_fusable
from ep_core.tools.parity.report import (
    EXIT_EP_LOAD,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    SCHEMA_VERSION,
    ParityReport,
    ParityUsageError,
    build_report,
)

__all__ = [
    "EXIT_EP_LOAD",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "SCHEMA_VERSION",
    "EpLoadFailure",
    "FusableOpsError",
    "ParityReport",
    "ParityUsageError",
    "build_report",
    "normalize_fusable",
]
