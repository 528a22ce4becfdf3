"""onnxruntime's logging, through Python ``logging``.

Severities are onnxruntime's: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal (-1 in options: the
default logger's). They map to DEBUG, INFO, WARNING, ERROR and CRITICAL on the logger ``ep_core``
(the default logger: ``set_default_logger_severity`` sets its level, warning as in onnxruntime
until set), a child per session named by ``SessionOptions.logid`` (or ``session_<n>``) and a child
of that per tagged run (``RunOptions.run_tag``, onnxruntime's ``logid``). A session's or run's own
severity overrides the default for its records. Verbose records carry a verbosity and pass only up
to the larger of the logger's ``log_verbosity_level`` and ``set_default_logger_verbosity``'s.

Loggers of sessions and runs are created on their first record, so a quiet session registers none.
While the application configures no logging handler, records go to stderr (onnxruntime prints its
log there too); once it does, they go only where it says."""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Any

from ep_core.sdk.errors import InvalidArgument

ROOT_NAME = "ep_core"
VERBOSE, INFO, WARNING, ERROR, FATAL = range(5)
LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)

_root = logging.getLogger(ROOT_NAME)
_default_verbosity = [0]
_session_ids = itertools.count(1)


class _StderrUntilConfigured(logging.Handler):
    """Writes to stderr only while the root logger has no handler (the application configured no
    logging): like ``logging.lastResort``, but at any level the severity lets through."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s:%(name)s] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            sys.stderr.write(self.format(record) + "\n")


if _root.level == logging.NOTSET:  # onnxruntime's default severity, unless the application set one
    _root.setLevel(logging.WARNING)
if not any(isinstance(h, _StderrUntilConfigured) for h in _root.handlers):
    _root.addHandler(_StderrUntilConfigured())


def _check(severity: Any, what: str, lowest: int = 0) -> int:
    if isinstance(severity, bool) or not isinstance(severity, int) or not lowest <= severity <= FATAL:
        raise InvalidArgument(
            f"{what} must be an int from {lowest} to 4 (0 verbose, 1 info, 2 warning, 3 error, 4 fatal"
            f"{', -1 the default' if lowest < 0 else ''}), got {severity!r}"
        )
    return severity


def set_default_logger_severity(level: int) -> None:
    """onnxruntime's name: the severity of the default logger (``ep_core``) and so of every
    session and run that sets none."""
    _root.setLevel(LEVELS[_check(level, "set_default_logger_severity: the severity")])


def set_default_logger_verbosity(level: int) -> None:
    """onnxruntime's name: how verbose the verbose (severity 0) records may be."""
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidArgument(f"set_default_logger_verbosity: the verbosity must be an int, got {level!r}")
    _default_verbosity[0] = level


class SessionLog:
    """A session's logger and its severity/verbosity; ``enabled`` is cheap enough for every run."""

    __slots__ = ("name", "level", "verbosity", "_logger")

    def __init__(self, logid: str, severity: int, verbosity: int) -> None:
        self.name = f"{ROOT_NAME}.{logid or f'session_{next(_session_ids)}'}"
        self.level = LEVELS[_check(severity, "SessionOptions.log_severity_level", -1)] if severity >= 0 else None
        self.verbosity = verbosity
        self._logger: logging.Logger | None = None

    @property
    def logger(self) -> logging.Logger:
        if self._logger is None:
            self._logger = logging.getLogger(self.name)
        return self._logger

    def ep_logger(self, ep_name: str) -> logging.Logger:
        """What ``ep_factory_create_ep`` gets as ``logger`` (``CreateEp``'s ``OrtLogger``): the
        session's logger's child named after the EP, at the session's severity if it sets one (else
        the default logger's, through its parent)."""
        logger = logging.getLogger(f"{self.name}.{ep_name}")
        logger.setLevel(self.level if self.level is not None else logging.NOTSET)
        return logger

    def enabled(self, severity: int, run_options: Any = None, verbosity: int = 0) -> bool:
        """Whether a record of this severity (and verbosity, for verbose ones) passes for the
        session, or for the run of ``run_options`` (whose own severity, if set, decides)."""
        run_severity = getattr(run_options, "log_severity_level", -1)
        if run_severity >= 0:
            passes = LEVELS[severity] >= LEVELS[run_severity]
            own_verbosity = getattr(run_options, "log_verbosity_level", 0)
        else:
            passes = _root.isEnabledFor(LEVELS[severity]) if self.level is None else LEVELS[severity] >= self.level
            own_verbosity = self.verbosity
        return passes and (severity != VERBOSE or verbosity <= max(own_verbosity, _default_verbosity[0]))

    def log(self, severity: int, msg: str, *args: Any, run_options: Any = None, verbosity: int = 0) -> None:
        """A record on the session's logger (the run's when ``run_options`` has a tag), if it passes."""
        if not self.enabled(severity, run_options, verbosity):
            return
        tag = getattr(run_options, "run_tag", "")
        logger = logging.getLogger(f"{self.name}.{tag}") if tag else self.logger
        # the severity is decided above (a session's may be lower than its logger's level)
        logger.handle(logger.makeRecord(logger.name, LEVELS[severity], "(ep_core)", 0, msg, args, None))

    def session_created(self, built: Any, model: str, ms: float) -> None:
        """Info: the model, the providers chosen and the partition, with how many nodes left the
        preferred (first) EP; verbose (verbosity 1): every note and every node's EP."""
        if not self.enabled(INFO):
            return
        eps = [ep.name for ep in built.eps]
        counts: dict[str, list[int]] = {name: [0, 0] for name in eps}  # EP -> [nodes, fused groups]
        for program in built.programs():
            for unit in program.units:
                c = counts[eps[unit.ep_index]]
                c[0] += len(unit.fused_nodes) or 1
                c[1] += bool(unit.fused_nodes)
        parts = ", ".join(
            f"{n}: {c[0]} node(s)" + (f" in {c[1]} fused group(s)" if c[1] else "") for n, c in counts.items()
        )
        elsewhere = sum(c[0] for n, c in counts.items() if n != eps[0]) if eps else 0
        fallback = f"; {elsewhere} node(s) not on the preferred {eps[0]} (get_partition_diagnostics() says why)"
        self.log(
            INFO,
            "session created in %.1f ms: model %s, providers %s; partition: %s%s",
            ms,
            model,
            eps,
            parts,
            fallback if elsewhere else "",
        )
        if self.enabled(VERBOSE, verbosity=1):
            for note in built.notes:
                self.log(VERBOSE, "%s", note, verbosity=1)
            for program in built.programs():
                for unit in program.units:
                    self.log(VERBOSE, "node %s (%s) -> %s", unit.name, unit.op_type, eps[unit.ep_index], verbosity=1)
