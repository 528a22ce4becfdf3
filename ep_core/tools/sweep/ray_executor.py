"""Cases as Ray tasks (``--cluster local|auto|ray://HOST:PORT``). Ray is imported only here, and
only when a sweep runs on it: ``import ep_core`` and the tools never load it.

Placement: a case declares the custom resources of the EP that runs it, ``ep:<EP name>`` and
``device:<kind>`` (``cpu``, ``gpu``, ``npu``), each a small share (0.001), so a node started with
``ray start --resources='{"ep:NumbaCudaExecutionProvider": 1, "device:gpu": 1}'`` takes those cases
(as many at once as its CPUs allow) and no other node does. ``--cluster local`` starts a cluster
with the resources of the EPs usable here. A case that no node can take fails the sweep at once,
naming the resource, instead of waiting forever.

Timeout: a task tells a small actor when it starts; once it has run ``timeout`` seconds it is
cancelled with ``ray.cancel(force=True)`` (its worker process is killed) and reported ``timeout``.
Time spent queued behind other cases does not count. A task whose worker dies is retried by Ray
(``max_retries``)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ep_core.tools.sweep.core import ClusterError, OnDone, Outcome, Resources, describe_exception

SHARE = 0.001  # of an ``ep:``/``device:`` resource per running case: declaring 1 on a node is enough
INSTALL = "pip install 'ep-core[ray]'"
_POLL_S = 0.2


class RayNotInstalled(ClusterError):
    """Ray is asked for (a sweep's ``--cluster``, batch inference) and is not importable."""


class MissingClusterResource(ClusterError):
    """No node of the cluster has the resources some cases need."""


def import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayNotInstalled(
            f"--cluster runs the cases as Ray tasks, and Ray is not installed here ({exc}); install it with "
            f"`{INSTALL}`, or leave out --cluster to run on this machine"
        ) from None


def _device_kinds(registry: Any = None) -> dict[str, list[str]]:
    """EP name -> the kinds of device it can use here (``cpu``, ``gpu``, ...), first one first."""
    from ep_core.runtime.select import get_ep_devices

    out: dict[str, list[str]] = {}
    for d in get_ep_devices(registry):
        kinds = out.setdefault(d.ep_name, [])
        kind = d.device.type.value.lower()
        if kind not in kinds:
            kinds.append(kind)
    return out


def ep_resources(ep_name: str, registry: Any = None) -> dict[str, float]:
    """What one case on ``ep_name`` asks of a node: ``ep:NAME`` and, when this machine knows the EP's
    device kind, ``device:KIND``."""
    kinds = _device_kinds(registry).get(ep_name)
    return {f"ep:{ep_name}": SHARE, **({f"device:{kinds[0]}": SHARE} if kinds else {})}


def local_resources(registry: Any = None) -> dict[str, float]:
    """The custom resources of a cluster on this machine: one of each usable EP and device kind."""
    out: dict[str, float] = {}
    for ep, kinds in _device_kinds(registry).items():
        out[f"ep:{ep}"] = 1.0
        out.update({f"device:{k}": 1.0 for k in kinds})
    return out


def ray_start_line(resources: Mapping[str, float]) -> str:
    wanted = {k: 1 for k in resources if k.startswith(("ep:", "device:"))}
    return f"ray start --address=HEAD_IP:6379 --resources='{json.dumps(wanted)}'"


@contextmanager
def connect(address: str, num_cpus: int | None = None, registry: Any = None) -> Iterator[Any]:
    """Ray, connected to ``address``: ``local`` starts a cluster here (with :func:`local_resources`),
    ``auto`` joins the one ``ray start`` runs here, ``ray://HOST:PORT`` is a Ray client. A Ray
    already connected in this process is used as it is (and left connected)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    quiet: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address == "local":
            cpus = num_cpus or os.cpu_count() or 1
            ray.init(num_cpus=cpus, resources=local_resources(registry), include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, ...
        where = "start a local Ray cluster" if address == "local" else f"connect to the Ray cluster at {address!r}"
        raise ClusterError(
            f"could not {where}: {type(exc).__name__}: {exc}"
            + ("" if address == "local" else "; is it running (`ray start --head`), and is ep-core installed there?")
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()


def check_resources(ray: Any, needs: Sequence[Mapping[str, float]], address: str) -> None:
    """Fail now, naming the resource, when no alive node can take some case (Ray would wait forever)."""
    nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
    seen: set[tuple[tuple[str, float], ...]] = set()
    for need in needs:
        key = tuple(sorted(need.items()))
        if key in seen:
            continue
        seen.add(key)
        full = {"CPU": 1.0, **need}
        if any(all(res.get(k, 0.0) >= v for k, v in full.items()) for res in nodes):
            continue
        absent = [k for k in full if not any(res.get(k, 0.0) >= full[k] for res in nodes)]
        eps = [k.split(":", 1)[1] for k in need if k.startswith("ep:")]
        offered = sorted({k for res in nodes for k in res if k.startswith(("ep:", "device:"))})
        what = f"the resource(s) {', '.join(map(repr, absent))}" if absent else f"all of {sorted(full)} together"
        raise MissingClusterResource(
            f"no node of the Ray cluster ({address}) has {what}, which the cases on {', '.join(eps) or 'it'} need; "
            f"start the nodes that have the EP with `{ray_start_line(full)}` (see docs/scale-out.md); "
            f"the nodes now offer {offered or 'no ep:/device: resources'}"
        )


class _Starts:
    """A Ray actor the tasks tell when they start, so a timeout counts from then, not from the queue."""

    def __init__(self) -> None:
        self.keys: list[int] = []

    def started(self, key: int) -> None:
        self.keys.append(key)

    def take(self) -> list[int]:
        keys, self.keys = self.keys, []
        return keys


def _task(setup: Callable[[], None] | None, run_one: Callable[[Any], Any], job: Any, key: int, starts: Any) -> Any:
    if starts is not None:
        starts.started.remote(key)
    if setup is not None:
        setup()
    return run_one(job)


def _failure(ray: Any, exc: BaseException, attempts: int) -> str:
    errors = ray.exceptions
    lost = tuple(
        getattr(errors, n)
        for n in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OwnerDiedError")
        if hasattr(errors, n)
    )
    if isinstance(exc, lost):
        return f"the Ray worker running it died on each of {attempts} attempts ({type(exc).__name__})"
    cause = getattr(exc, "cause", None)
    if isinstance(exc, errors.RayTaskError) and isinstance(cause, BaseException):
        return describe_exception(cause)
    return f"{type(exc).__name__}: {str(exc).strip()[:1500]}"


class RayExecutor:
    """Every case a Ray task on a node that has its EP; see the module docstring."""

    in_process = False

    def __init__(
        self, address: str, timeout: float | None, *, num_cpus: int | None = None, max_retries: int = 2
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.num_cpus = num_cpus
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
        with connect(self.address, self.num_cpus) as ray:
            needs = [dict(resources(j)) if resources is not None else {} for j in jobs]
            check_resources(ray, needs, self.address)
            return self._run(ray, jobs, run_one, setup, needs, on_done)

    def _run(
        self,
        ray: Any,
        jobs: Sequence[Any],
        run_one: Callable[[Any], Any],
        setup: Callable[[], None] | None,
        needs: Sequence[Mapping[str, float]],
        on_done: OnDone,
    ) -> list[Outcome[Any]]:
        check = getattr(setup, "check_picklable", None)
        if callable(check):
            check(ray.cloudpickle.dumps)
        try:
            shared = ray.put(setup), ray.put(run_one)
        except Exception as exc:  # noqa: BLE001 - cloudpickle raises many kinds
            raise ClusterError(
                f"the sweep's setup or run_one cannot be sent to Ray: {type(exc).__name__}: {exc}"
            ) from None
        task = ray.remote(_task)
        timeout = self.timeout or 0.0
        starts = ray.remote(num_cpus=0)(_Starts).remote() if timeout else None
        pending: dict[Any, int] = {}
        submitted: dict[int, float] = {}
        started: dict[int, float] = {}
        attempts = [0] * len(jobs)
        results: list[Outcome[Any] | None] = [None] * len(jobs)

        def finish(i: int, outcome: Outcome[Any]) -> None:
            results[i] = outcome
            on_done(i, outcome)

        try:
            for i, job in enumerate(jobs):
                opts = {"num_cpus": 1, "max_retries": self.max_retries, "retry_exceptions": False}
                try:
                    ref = task.options(resources=dict(needs[i]), **opts).remote(*shared, job, i, starts)
                except Exception as exc:  # noqa: BLE001 - a job that cannot be pickled
                    raise ClusterError(f"case {i} cannot be sent to Ray: {type(exc).__name__}: {exc}") from None
                pending[ref] = i
                submitted[i] = time.monotonic()
            while pending:
                wait_s = None
                if starts is not None:
                    due = [started[i] + timeout for i in pending.values() if i in started]
                    wait_s = max(0.0, min([*due, time.monotonic() + _POLL_S]) - time.monotonic())
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
                if ready:
                    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in ready:
                    i = pending.pop(ref)
                    t = time.monotonic() - started.get(i, submitted[i])
                    n = max(attempts[i], 1)
                    try:
                        finish(i, Outcome("ok", ray.get(ref), seconds=t, attempts=n))
                    except Exception as exc:  # noqa: BLE001 - a Ray error is the case's outcome
                        why = _failure(ray, exc, self.max_retries + 1)  # a lost worker: Ray retried them all
                        finish(i, Outcome("error", error=why, seconds=t, attempts=n))
                if starts is None:
                    continue
                now = time.monotonic()
                for key in ray.get(starts.take.remote()):
                    started[key] = now
                    attempts[key] += 1
                for ref, i in list(pending.items()):
                    if i in started and now - started[i] >= timeout:
                        ray.cancel(ref, force=True)
                        del pending[ref]
                        finish(
                            i,
                            Outcome(
                                "timeout",
                                error=f"timed out after {timeout:g} s",
                                seconds=now - started[i],
                                attempts=attempts[i],
                            ),
                        )
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if starts is not None:
                ray.kill(starts)
        return [r for r in results if r is not None]
