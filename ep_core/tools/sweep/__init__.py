"""One execution layer under the parity report and the conformance runner: ``run_cases(cases,
run_one, executor)`` runs ``run_one(case)`` for every case and returns one :class:`Outcome` per
case, in the cases' order, whatever the order they finished in.

Executors (``make_executor(cluster, case_timeout)`` picks one):

* :class:`InProcessExecutor`  in this process, one case after another, no timeout (what both tools
  always did; ``--case-timeout 0``);
* :class:`LocalProcessExecutor`  fresh worker processes on this machine, each case under a timeout:
  a worker that overruns it is killed (the case is reported ``timeout``) and replaced; a worker that
  dies is replaced and its case retried;
* :class:`~ep_core.tools.sweep.ray_executor.RayExecutor`  every case a Ray task on a worker that has
  the EP under test (custom resources ``ep:NAME`` and ``device:KIND``), with the same timeout and
  retries. Ray is optional (``pip install 'ep-core[ray]'``) and imported only when it runs.

Cases, ``run_one`` and results cross process boundaries by pickle: they are plain data and
module-level functions. A worker builds its own sessions from the EPs installed where it runs, plus
the ones this process registered by hand (:class:`RegisterEps`, the ``setup`` of a worker)."""

from __future__ import annotations

from ep_core.tools.sweep.core import (
    CLUSTER_HELP,
    DEFAULT_CASE_TIMEOUT,
    ClusterError,
    Executor,
    InProcessExecutor,
    Outcome,
    RegisterEps,
    make_executor,
    run_cases,
)
from ep_core.tools.sweep.local import LocalProcessExecutor

__all__ = [
    "CLUSTER_HELP",
    "DEFAULT_CASE_TIMEOUT",
    "ClusterError",
    "Executor",
    "InProcessExecutor",
    "LocalProcessExecutor",
    "Outcome",
    "RegisterEps",
    "make_executor",
    "run_cases",
]
