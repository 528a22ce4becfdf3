"""The sweep layer's data and entry point: :class:`Outcome`, the :class:`Executor` protocol, the
in-process executor, ``run_cases`` and ``make_executor`` (what ``--cluster`` and
``--case-timeout`` select)."""

from __future__ import annotations

import argparse
import pickle
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ep_core.sdk.errors import InvalidArgument

J = TypeVar("J")
R = TypeVar("R")

DEFAULT_CASE_TIMEOUT = 120.0
CLUSTER_HELP = (
    "run every case as a Ray task: 'local' starts a Ray cluster on this machine, 'auto' joins the one "
    "`ray start` runs here, 'ray://HOST:PORT' connects to a remote one (needs `pip install 'ep-core[ray]'`)"
)
OnDone = Callable[[int, "Outcome[Any]"], None]
Resources = Callable[[Any], Mapping[str, float]]


class ClusterError(InvalidArgument):
    """A cluster that cannot run the sweep as asked: Ray missing, unreachable, or lacking a resource."""


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What became of one case: ``ok`` with ``value``, ``error`` with the reason (an exception
    ``run_one`` raised, or the worker died on every attempt), or ``timeout``."""

    status: str
    value: R | None = None
    error: str = ""
    seconds: float = 0.0
    attempts: int = 1


class Executor(Protocol):
    """Runs ``run_one`` over jobs and calls ``on_done(index, outcome)`` as each finishes.

    ``setup`` (a picklable callable, or None) prepares a fresh worker process before its first job;
    ``resources(job)`` names the Ray resources a job needs. In-process executors ignore both."""

    in_process: bool

    def run(
        self,
        jobs: Sequence[Any],
        run_one: Callable[[Any], Any],
        *,
        setup: Callable[[], None] | None,
        resources: Resources | None,
        on_done: OnDone,
    ) -> list[Outcome[Any]]: ...


def describe_exception(exc: BaseException, limit: int = 2000) -> str:
    """``Type: message`` and the innermost frame, for an exception a case raised in a worker."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    text = f"{type(exc).__name__}: {exc}{where}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InProcessExecutor:
    """One case after another in this process, no timeout: a case that hangs stalls the sweep."""

    in_process = True

    def run(
        self,
        jobs: Sequence[J],
        run_one: Callable[[J], R],
        *,
        setup: Callable[[], None] | None = None,
        resources: Resources | None = None,
        on_done: OnDone,
    ) -> list[Outcome[R]]:
        out: list[Outcome[R]] = []
        for i, job in enumerate(jobs):
            t0 = time.perf_counter()
            try:
                outcome: Outcome[R] = Outcome("ok", run_one(job), seconds=time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - a case's failure is its outcome, not the sweep's
                outcome = Outcome("error", error=describe_exception(exc), seconds=time.perf_counter() - t0)
            out.append(outcome)
            on_done(i, outcome)
        return out


def run_cases(
    cases: Sequence[J],
    run_one: Callable[[J], R],
    executor: Executor | None = None,
    *,
    setup: Callable[[], None] | None = None,
    resources: Resources | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    label: Callable[[J], str] = str,
    on_done: OnDone | None = None,
) -> list[Outcome[R]]:
    """``run_one(case)`` for every case on ``executor`` (default: in this process); one outcome
    per case, in order. As each finishes: ``on_done(index, outcome)`` and ``progress(done,
    total, label(case))``."""
    executor = executor or InProcessExecutor()
    done = 0
    hook = on_done

    def finished(i: int, outcome: Outcome[Any]) -> None:
        nonlocal done
        done += 1
        if hook is not None:
            hook(i, outcome)
        if progress is not None:
            progress(done, len(cases), label(cases[i]))

    if not cases:
        return []
    return executor.run(cases, run_one, setup=setup, resources=resources, on_done=finished)


@dataclass(frozen=True)
class RegisterEps:
    """A worker's setup: register the EPs this process registered by hand (``module:attr`` targets
    by name, factory objects by pickle), so a fresh worker sees the same EPs as this process."""

    entries: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_registry(cls, registry: Any = None) -> RegisterEps:
        from ep_core.runtime.discover import get_registry

        registry = registry or get_registry()
        entries = []
        for h in registry.handles():
            if h.distribution is None and h.load() is not None:
                entries.append((h.name, h.target if ":" in h.target else h.factory))
        return cls(tuple(entries))

    def check_picklable(self, dumps: Callable[[Any], bytes] = pickle.dumps) -> None:
        """Raise a ``ClusterError`` naming the EP whose factory cannot be sent to a worker."""
        for name, target in self.entries:
            try:
                dumps(target)
            except Exception as exc:  # noqa: BLE001 - pickle raises many kinds
                raise ClusterError(
                    f"execution provider {name!r} was registered in this process as a {type(target).__name__} object "
                    f"that cannot be sent to worker processes ({type(exc).__name__}: {exc}); register it as "
                    "'package.module:attribute' so workers import it, or run the cases in this process "
                    "(case_timeout=0 / --case-timeout 0, no cluster)"
                ) from None

    def __call__(self) -> None:
        from ep_core.runtime.discover import get_registry

        registry = get_registry()
        known = set(registry.names())
        for name, target in self.entries:
            if name not in known:
                registry.register_library(name, target)


def check_cluster(cluster: str) -> str:
    """``local``, ``auto`` or ``ray://HOST:PORT``; anything else is an ``InvalidArgument``."""
    if cluster in ("local", "auto") or (cluster.startswith("ray://") and len(cluster) > len("ray://")):
        return cluster
    raise InvalidArgument(f"--cluster {cluster!r} must be 'local', 'auto' or 'ray://HOST:PORT'")


def make_executor(
    cluster: str | Executor | None = None,
    case_timeout: float | None = None,
    *,
    num_cpus: int | None = None,
    workers: int = 1,
    max_retries: int = 2,
) -> Executor:
    """The executor for a sweep. Without a cluster: in this process when ``case_timeout`` is None
    or 0, else worker processes on this machine. With one (``local``/``auto``/``ray://HOST:PORT``):
    Ray tasks, timed out after ``case_timeout`` seconds (None: the default, 0: never). An
    executor object is returned as it is."""
    if cluster is not None and not isinstance(cluster, str):
        return cluster
    if case_timeout is not None and case_timeout < 0:
        raise InvalidArgument(f"--case-timeout must be 0 (no timeout) or a number of seconds, got {case_timeout}")
    if max_retries < 0 or workers < 1:
        raise InvalidArgument(f"max_retries must be >= 0 and workers >= 1, got {max_retries} and {workers}")
    if cluster is None:
        if num_cpus is not None:
            raise InvalidArgument("--cluster-cpus sizes a local Ray cluster: add --cluster local")
        if not case_timeout:
            return InProcessExecutor()
        from ep_core.tools.sweep.local import LocalProcessExecutor

        return LocalProcessExecutor(case_timeout, workers=workers, max_retries=max_retries)
    from ep_core.tools.sweep.ray_executor import RayExecutor, import_ray

    address = check_cluster(cluster)
    import_ray()  # say now, not after the cases are built, that it is missing
    if num_cpus is not None and (num_cpus < 1 or address != "local"):
        raise InvalidArgument(f"--cluster-cpus {num_cpus}: a positive count, and only with --cluster local")
    timeout = DEFAULT_CASE_TIMEOUT if case_timeout is None else case_timeout
    return RayExecutor(address, timeout or None, num_cpus=num_cpus, max_retries=max_retries)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags both sweeping commands share."""
    parser.add_argument("--cluster", metavar="local|auto|ray://HOST:PORT", help=CLUSTER_HELP)
    parser.add_argument(
        "--case-timeout",
        type=float,
        metavar="SECONDS",
        help=f"a case still running after this long is stopped and reported as 'timeout' (default "
        f"{DEFAULT_CASE_TIMEOUT:g}; 0: no timeout, cases then run in this process unless --cluster)",
    )
    parser.add_argument("--cluster-cpus", type=int, metavar="N", help="CPUs of the --cluster local Ray cluster")


def placement_flags(args: argparse.Namespace) -> list[str]:
    """The placement flags given on the command line (for 'they do nothing here' errors)."""
    given = (("--cluster", args.cluster), ("--case-timeout", args.case_timeout), ("--cluster-cpus", args.cluster_cpus))
    return [flag for flag, value in given if value is not None]


def executor_from_args(args: argparse.Namespace) -> Executor:
    """The command line's executor: worker processes with the default timeout unless told otherwise."""
    timeout = DEFAULT_CASE_TIMEOUT if args.case_timeout is None else args.case_timeout
    return make_executor(args.cluster, timeout, num_cpus=args.cluster_cpus)
