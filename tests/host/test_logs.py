"""log_severity_level, log_verbosity_level, logid and RunOptions' logging go through Python
``logging`` on ``ep_core`` and its per-session and per-run children (ep_core/host/logs.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest
from _support.models import add_mul_chain

import ep_core
from ep_core.host import logs
from ep_core.sdk.errors import InvalidArgument

MODEL = add_mul_chain(4).SerializeToString()
FEED = {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)}


@pytest.fixture(autouse=True)
def default_logger() -> Iterator[None]:
    """Every test starts and ends at onnxruntime's defaults (warning, verbosity 0)."""
    root = logging.getLogger("ep_core")
    level, verbosity = root.level, logs._default_verbosity[0]
    yield
    root.setLevel(level)
    logs._default_verbosity[0] = verbosity


def _records(caplog: pytest.LogCaptureFixture, prefix: str = "ep_core") -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith(prefix)]


def test_quiet_at_the_default_severity(caplog):
    with caplog.at_level(logging.DEBUG):  # the application's own level does not open ep_core's
        ep_core.InferenceSession(MODEL).run(None, FEED)
    assert _records(caplog) == []


def test_a_session_at_info_logs_its_creation_on_its_logid_logger(caplog):
    opts = ep_core.SessionOptions(log_severity_level=1, logid="mysession")
    ep_core.InferenceSession(MODEL, opts).run(None, FEED)
    (created,) = _records(caplog)
    name, level, msg = created
    assert (name, level) == ("ep_core.mysession", logging.INFO)
    assert "session created" in msg and "CpuReferenceExecutionProvider: 4 node(s)" in msg
    assert "model (from bytes)" in msg


def test_verbose_logs_every_run_on_the_runs_tagged_logger(caplog):
    opts = ep_core.SessionOptions(log_severity_level=0, logid="verbose")
    sess = ep_core.InferenceSession(MODEL, opts)
    caplog.clear()
    sess.run(None, FEED, ep_core.RunOptions(run_tag="r1"))
    sess.run(None, FEED)
    runs = _records(caplog)
    assert [(n, lv) for n, lv, _ in runs] == [("ep_core.verbose.r1", logging.DEBUG)] * 2 + [
        ("ep_core.verbose", logging.DEBUG)
    ] * 2
    assert "run started on" in runs[0][2] and "run finished in" in runs[1][2]


def test_verbosity_gates_the_verbose_records(caplog):
    ep_core.InferenceSession(MODEL, ep_core.SessionOptions(log_severity_level=0, logid="v0"))
    assert not any("node add_0" in m for _, _, m in _records(caplog))
    ep_core.InferenceSession(MODEL, ep_core.SessionOptions(log_severity_level=0, log_verbosity_level=1, logid="v1"))
    nodes = [m for n, _, m in _records(caplog, "ep_core.v1") if m.startswith("node ")]
    assert nodes[0] == "node add_0 (Add) -> CpuReferenceExecutionProvider" and len(nodes) == 4
    caplog.clear()
    logs.set_default_logger_verbosity(1)  # the default verbosity opens them too
    ep_core.InferenceSession(MODEL, ep_core.SessionOptions(log_severity_level=0, logid="v2"))
    assert any(m.startswith("node ") for _, _, m in _records(caplog, "ep_core.v2"))


def test_a_runs_own_severity_overrides_the_sessions(caplog):
    sess = ep_core.InferenceSession(MODEL, ep_core.SessionOptions(logid="quiet"))
    sess.run(None, FEED, ep_core.RunOptions(run_tag="loud", log_severity_level=0))
    sess.run(None, FEED)
    assert {n for n, _, _ in _records(caplog)} == {"ep_core.quiet.loud"}
    caplog.clear()
    loud = ep_core.InferenceSession(MODEL, ep_core.SessionOptions(log_severity_level=0, logid="loud_session"))
    caplog.clear()
    loud.run(None, FEED, ep_core.RunOptions(log_severity_level=3))
    assert _records(caplog) == []


def test_the_default_severity_applies_to_sessions_that_set_none(caplog):
    logs.set_default_logger_severity(1)
    assert logging.getLogger("ep_core").level == logging.INFO
    ep_core.InferenceSession(MODEL)
    (name, level, msg), *_ = _records(caplog)
    assert name.startswith("ep_core.session_") and level == logging.INFO and "session created" in msg
    logs.set_default_logger_severity(3)
    caplog.clear()
    ep_core.InferenceSession(MODEL, ep_core.SessionOptions(log_severity_level=1, logid="own"))
    assert [n for n, _, _ in _records(caplog)] == ["ep_core.own"]  # its own severity wins


@pytest.mark.parametrize("bad", [5, -1, "1", None, True])
def test_bad_severities_are_refused(bad):
    with pytest.raises(InvalidArgument, match="must be an int from 0 to 4"):
        logs.set_default_logger_severity(bad)


def test_bad_verbosity_is_refused():
    with pytest.raises(InvalidArgument, match="verbosity must be an int"):
        logs.set_default_logger_verbosity("1")


def _child(code: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        f"""
        import numpy as np, ep_core
        from ep_core.host.logs import set_default_logger_severity
        {textwrap.dedent(code).strip()}
        set_default_logger_severity(1)
        ep_core.InferenceSession({MODEL!r})
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_without_logging_configured_records_go_to_stderr_once():
    proc = _child("")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("session created") == 1 and "[INFO:ep_core.session_1]" in proc.stderr
    assert "session created" not in proc.stdout


def test_with_logging_configured_records_go_only_where_the_application_says():
    proc = _child("import logging, sys; logging.basicConfig(stream=sys.stdout, format='APP %(name)s %(message)s')")
    assert proc.returncode == 0, proc.stderr
    assert "session created" not in proc.stderr
    assert proc.stdout.count("APP ep_core.session_1 session created") == 1
