"""Cases under a timeout on this machine: each runs in a worker process (a fresh interpreter,
``python -m ep_core.tools.sweep.worker``) that can be killed. A worker that overruns the timeout is
killed and its case reported ``timeout``; one that dies (a crashing kernel, ``os._exit``) has its
case retried on a new worker up to ``max_retries`` times. Fresh interpreters, not forks: a fork
would inherit this process's CUDA context, which no child can use."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from ep_core.tools.sweep.core import ClusterError, OnDone, Outcome, Resources

START_S = 120.0  # for a worker to import ep-core and its EPs and say it is ready


def _dumps(obj: Any, what: str) -> bytes:
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises many kinds
        raise ClusterError(
            f"{what} cannot be sent to a worker process ({type(exc).__name__}: {exc}); cases, run_one and setup "
            "must be plain data and module-level functions, or run in this process with --case-timeout 0"
        ) from None


def exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """One worker process and the two pipes to it (jobs in, results out)."""

    def __init__(self, init: bytes) -> None:
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)  # what this process imports
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ep_core.tools.sweep.worker", str(job_r), str(res_w)],
                pass_fds=(job_r, res_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(job_r)
            os.close(res_w)
        self.tx = Connection(job_w, readable=False)
        self.rx = Connection(res_r, writable=False)
        self.ready = False
        self.job: int | None = None
        self.started = time.monotonic()  # until ready: when it was started
        self.send(init)

    def send(self, data: bytes) -> bool:
        try:
            self.tx.send_bytes(data)
            return True
        except OSError:  # it died; the caller learns how from its exit code
            return False

    def close(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.tx.close()
        self.rx.close()
        return code


class LocalProcessExecutor:
    """``workers`` worker processes on this machine, each case under ``timeout`` seconds (None: no
    timeout, the process isolation alone). The timeout starts when a ready worker gets the case, so
    a worker's start-up does not count."""

    in_process = False

    def __init__(self, timeout: float | None, workers: int = 1, max_retries: int = 2) -> None:
        self.timeout = timeout
        self.workers = workers
        self.max_retries = max_retries

    def run(
        self,
        jobs: Sequence[Any],
        run_one: Callable[[Any], Any],
        *,
        setup: Callable[[], None] | None = None,
        resources: Resources | None = None,
        on_done: OnDone,
    ) -> list[Outcome[Any]]:
        check = getattr(setup, "check_picklable", None)
        if callable(check):
            check()  # names the hand-registered EP that cannot travel
        init = _dumps((setup, run_one), "the worker's setup and run_one")
        queue = deque(range(len(jobs)))
        attempts = [0] * len(jobs)
        results: list[Outcome[Any] | None] = [None] * len(jobs)
        pool: list[_Worker] = []

        def finish(i: int, outcome: Outcome[Any]) -> None:
            results[i] = outcome
            on_done(i, outcome)

        def lost(w: _Worker) -> None:
            """A worker died: its case goes back to the queue, or fails after the last retry."""
            pool.remove(w)
            how = exit_description(w.close())
            if w.job is None:
                raise ClusterError(f"a sweep worker process stopped before it was ready ({how}); its output is above")
            i = w.job
            if attempts[i] <= self.max_retries:
                queue.appendleft(i)
            else:
                finish(
                    i,
                    Outcome(
                        "error",
                        error=f"the worker process died ({how}) on each of {attempts[i]} attempts",
                        seconds=time.monotonic() - w.started,
                        attempts=attempts[i],
                    ),
                )

        try:
            while queue or any(w.job is not None for w in pool):
                busy = sum(w.job is not None for w in pool)
                while len(pool) < min(self.workers, len(queue) + busy):
                    pool.append(_Worker(init))
                for w in list(pool):
                    if w.ready and w.job is None and queue:
                        i = queue.popleft()
                        attempts[i] += 1
                        w.job, w.started = i, time.monotonic()
                        if not w.send(_dumps((i, jobs[i]), f"case {i}")):
                            lost(w)
                deadlines = [w.started + self.timeout for w in pool if w.job is not None and self.timeout]
                deadlines += [w.started + START_S for w in pool if not w.ready]
                wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                for conn in wait([w.rx for w in pool], wait_s):
                    w = next(x for x in pool if x.rx is conn)
                    try:
                        msg = pickle.loads(w.rx.recv_bytes())
                    except (EOFError, OSError):
                        lost(w)
                        continue
                    if msg[0] == "ready":
                        w.ready = True
                    elif msg[0] == "setup_error":
                        raise ClusterError(f"a sweep worker process could not set itself up: {msg[1]}")
                    else:
                        kind, i, payload, seconds = msg
                        w.job = None
                        value, error = (payload, "") if kind == "ok" else (None, payload)
                        finish(i, Outcome(kind, value, error, seconds, attempts[i]))
                now = time.monotonic()
                if any(not w.ready and now - w.started >= START_S for w in pool):
                    raise ClusterError(
                        f"a sweep worker process did not start within {START_S:g} s; its output is above"
                    )
                for w in [w for w in pool if w.job is not None and self.timeout and now - w.started >= self.timeout]:
                    pool.remove(w)
                    w.close()
                    assert w.job is not None and self.timeout is not None
                    finish(
                        w.job,
                        Outcome(
                            "timeout",
                            error=f"timed out after {self.timeout:g} s",
                            seconds=now - w.started,
                            attempts=attempts[w.job],
                        ),
                    )
        finally:
            for w in pool:
                w.close()
        return [r for r in results if r is not None]
