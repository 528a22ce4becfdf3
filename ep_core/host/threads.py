"""``intra_op_num_threads`` with its real effect: the thread pools of the libraries an EP calls.

Before every run the session sets its size on every BLAS and OpenMP library loaded in the process
(through threadpoolctl) and on Numba's threading layer (``numba.set_num_threads``, only when
Numba is already imported: the core never imports it). n means n threads, the calling thread
included, up to the CPUs the process may use (more is capped there, logged at info);
``use_per_session_threads=False`` takes the process-wide size of ``set_global_thread_pool_sizes``. 0 (the default) lets the engine choose, as in onnxruntime: the
CPUs this process may run on (its affinity mask, capped by a cgroup CPU quota) that other
processes are not keeping busy, sampled from ``/proc/stat`` at most every 0.25 s. onnxruntime's
own pool can take the default of every core on a busy machine because its calling thread takes
over the work a descheduled worker has not started; OpenBLAS splits a product between its threads
up front and waits for each (spinning), so one worker without a core stalls every call: on 2
cores with 2 CPU-bound processes beside it, a 2-thread BLAS made the reference EP 5-30x slower
than at 1 thread (docs/benchmarks.md, contention).

Nothing is restored after a run. The libraries' sizes are process state that every run sets again
before it computes, so a run never computes at another session's size (a session with 1 thread
never runs a 2-thread BLAS), and restoring would double the per-run cost for no run's benefit.
Code outside ep-core that calls BLAS between runs sees the last run's size (at most the CPUs the
process may use). Limits: OpenBLAS (pthreads) and MKL sizes are process-wide, so sessions of
different sizes run concurrently from several Python threads see the size set last; OpenMP and
Numba sizes are per thread, so those are exact. A size is written only when it differs from the
library's current one: the per-run cost is a C call per library, about a microsecond in all."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable

from ep_core.sdk.errors import InvalidArgument

_Control = tuple[Callable[[], object], Callable[[int], object]]  # (get size, set size) of one library

_global_sizes: list[int] = [0, 0]  # set_global_thread_pool_sizes; 0: the default
_controls: list[_Control] | None = None  # None until the first session: threadpoolctl is imported then
_scanned_at = -1  # len(sys.modules) when the loaded libraries were last listed
_lock = threading.Lock()
_SAMPLE_S = 0.25  # how old the free-CPU estimate of the default size may be
_load: list[float] = [-1.0, 0.0, 0.0, 0.0, 0.0]  # sampled at, busy ticks, all ticks, own CPU s, free CPUs


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, capped by the cgroup CPU quota (a
    container limited to 1.5 CPUs on a 2-core machine gets 2; one limited to 1 gets 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cpus, quota)) if quota is not None else max(1, cpus)


def _cgroup_quota() -> int | None:
    """``ceil(quota / period)`` of cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``; None without one."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        try:
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", encoding="ascii") as fh:
                quota = fh.read().strip()
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us", encoding="ascii") as fh:
                period = fh.read().strip()
        except OSError:
            return None
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return math.ceil(q / p) if q > 0 and p > 0 else None


def free_cpus(stat: str = "/proc/stat") -> float:
    """CPUs of this process's affinity set that other processes left idle since the previous
    sample (this process's own use counts as free); the first sample reads the 1-minute load
    average instead. Where ``/proc/stat`` cannot be read, every CPU counts as free."""
    now = time.monotonic()
    if now - _load[0] < _SAMPLE_S:
        return _load[4]
    try:
        mine = {f"cpu{i}".encode() for i in os.sched_getaffinity(0)}
        busy = total = 0
        with open(stat, "rb") as fh:
            for line in fh:
                fields = line.split()
                if fields and fields[0] in mine:  # user nice system idle iowait irq softirq steal
                    ticks = [int(f) for f in fields[1:9]]
                    busy += ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
                    total += sum(ticks)
        own = time.process_time()
        if _load[0] < 0 or total <= _load[2]:
            free = len(mine) - max(0.0, os.getloadavg()[0])
        else:
            used = (busy - _load[1]) / (total - _load[2]) * len(mine)
            free = len(mine) - used + (own - _load[3]) / (now - _load[0])
    except (AttributeError, OSError, ValueError, IndexError):  # not Linux: every CPU counts as free
        busy, total, own, free = 0, 0, 0.0, float(available_cpus())
    _load[:] = [now, busy, total, own, free]
    return free


def default_size(cpus: int) -> int:
    """What 0 means now for a process that may use ``cpus`` CPUs: those others leave free."""
    return max(1, min(cpus, int(free_cpus() + 0.5)))


def resolve(num_threads: int) -> int:
    """A pool size as onnxruntime means it: 0 lets the engine choose (``default_size``)."""
    return num_threads if num_threads > 0 else default_size(available_cpus())


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0, inter_op_num_threads: int = 0) -> None:
    """onnxruntime's process-wide pool sizes, used by sessions whose options set
    ``use_per_session_threads=False`` (from their next run). 0 lets the engine choose."""
    for name, value in (("intra_op_num_threads", intra_op_num_threads), ("inter_op_num_threads", inter_op_num_threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(
                f"set_global_thread_pool_sizes: {name} must be an int >= 0 (0: the engine chooses), got {value!r}"
            )
    _global_sizes[:] = [intra_op_num_threads, inter_op_num_threads]


def global_thread_pool_sizes() -> tuple[int, int]:
    """The process-wide (intra, inter) sizes as set (0: the engine chooses at each run)."""
    return _global_sizes[0], _global_sizes[1]


def scan_libraries() -> None:
    """List the BLAS/OpenMP libraries loaded now (threadpoolctl, about a millisecond). Done at
    session creation when modules were imported since the last listing: the EPs a session creates
    load their libraries then."""
    global _controls, _scanned_at
    if _controls is not None and _scanned_at == len(sys.modules):
        return
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    with _lock:
        _scanned_at = len(sys.modules)
        controls: list[_Control] = []
        for lib in ThreadpoolController().lib_controllers:
            if lib.get_num_threads() is None:  # no size to read or write
                continue
            # threadpoolctl lets only the first Python thread that sized OpenBLAS size it again; a
            # session run from another thread must still get its size, so its raw setter is used
            controls.append((lib.get_num_threads, getattr(lib, "_real_set_num_threads", lib.set_num_threads)))
        _controls = controls


def limit_threads(num_threads: int) -> None:
    """Size every BLAS/OpenMP library and Numba's layer (this thread's) at ``num_threads``,
    writing only the sizes that differ."""
    controls = _controls
    if controls is None:
        scan_libraries()
        controls = _controls or []
    for get, set_ in controls:
        if get() != num_threads:
            set_(num_threads)
    numba = sys.modules.get("numba")
    # another thread may be importing numba (a Numba EP's session beside this one): a half-made
    # module has no config yet, and nothing of it runs on this thread until its import is done
    if numba is not None and not getattr(numba.__spec__, "_initializing", False):
        _limit_numba(numba, num_threads)


def _limit_numba(numba: object, num_threads: int) -> None:
    """Numba's size is per thread and at most ``NUMBA_NUM_THREADS``; an unlaunched pool starts at
    that maximum, so it is launched here only when the size is below it."""
    cap = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    n = min(num_threads, cap)
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if n >= cap and not getattr(parallel, "_is_initialized", True):
        return
    if numba.get_num_threads() != n:  # type: ignore[attr-defined]
        numba.set_num_threads(n)  # type: ignore[attr-defined]


class SessionThreads:
    """The size a session's runs use: its own, or the process-wide one; 0 is chosen per run."""

    __slots__ = ("intra", "per_session", "cpus")

    def __init__(self, intra_op_num_threads: int, use_per_session_threads: bool) -> None:
        self.per_session = use_per_session_threads
        self.intra = intra_op_num_threads
        self.cpus = available_cpus()  # read once: affinity and quota do not change under a session

    @property
    def size(self) -> int:
        """The size the next run gets: at most the CPUs the process may use, since a BLAS worker
        without a core stalls every product (100x at 4 threads on 2 CPUs, where onnxruntime's own
        pool lost 2.5x); ``capped`` says so in the session's log."""
        n = self.intra if self.per_session else _global_sizes[0]
        return min(n, self.cpus) if n > 0 else default_size(self.cpus)

    def capped(self) -> str | None:
        """Why the asked size is not the size runs get, or None."""
        n = self.intra if self.per_session else _global_sizes[0]
        if n <= self.cpus:
            return None
        return (
            f"intra_op_num_threads={n} is more than the {self.cpus} CPU(s) this process may use (affinity, "
            f"cgroup quota): runs use {self.cpus}, as a BLAS thread without a core stalls every product"
        )

    def apply(self) -> None:
        """Called before every run of the session."""
        limit_threads(self.size)
