"""A sweep worker process (started by ``LocalProcessExecutor``): reads ``(setup, run_one)``, then
``(index, job)`` messages from one pipe and writes each outcome to another, until the first pipe
closes. Its stdout goes to stderr, so what a kernel prints never mixes with a report on stdout."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any


def _die_with_parent() -> None:
    """Linux: be killed when the sweeping process dies, even while stuck in a hanging case."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _send(tx: Connection, msg: tuple[Any, ...]) -> None:
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - a result that cannot travel is that case's error
        data = pickle.dumps(("error", msg[1], f"its result cannot be pickled: {type(exc).__name__}: {exc}", msg[3]))
    tx.send_bytes(data)


def main(argv: Sequence[str]) -> int:
    from ep_core.tools.sweep.core import describe_exception

    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the sweeping process, which ends its workers
    os.dup2(2, 1)
    rx = Connection(int(argv[0]), writable=False)
    tx = Connection(int(argv[1]), readable=False)
    try:
        setup, run_one = pickle.loads(rx.recv_bytes())
        if setup is not None:
            setup()
    except Exception as exc:  # noqa: BLE001 - reported to the sweeping process, which stops
        tx.send_bytes(pickle.dumps(("setup_error", describe_exception(exc))))
        return 1
    tx.send_bytes(pickle.dumps(("ready",)))
    while True:
        try:
            data = rx.recv_bytes()
        except (EOFError, OSError):
            return 0
        t0 = time.perf_counter()
        i = -1
        try:
            i, job = pickle.loads(data)
            msg: tuple[Any, ...] = ("ok", i, run_one(job), time.perf_counter() - t0)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the case's error, not the worker's
            msg = ("error", i, describe_exception(exc), time.perf_counter() - t0)
        _send(tx, msg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
