"""The BFC arena (ep_cuda_numba.allocator) against onnxruntime's BFCArena rules: 256-byte rounding,
21 size bins and best fit, split/merge, region sizes per extend strategy and options, the memory
limit, Shrink (whole free regions only, and only when the run option asks), stream-aware reuse,
thread safety, stats; the arena options a session passes, the pinned allocator and pinned IO
binding targets, one arena shared by two sessions with its stats in the profile."""

from __future__ import annotations

import gc
import json
import threading
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from .conftest import EP, session

KB = 1024


def _arena(**cfg: object):
    from ep_cuda_numba.allocator import DeviceArena
    from ep_cuda_numba.arena_config import ArenaConfig

    return DeviceArena(0, ArenaConfig(**cfg))  # type: ignore[arg-type]


def _f32(nbytes: int) -> tuple[int]:
    return (nbytes // 4,)


def test_rounding_and_bins() -> None:
    from ep_cuda_numba.allocator import bin_for, rounded_bytes

    assert [rounded_bytes(n) for n in (1, 256, 257, 1000)] == [256, 256, 512, 1024]
    assert [bin_for(n) for n in (256, 511, 512, 1024, 4096)] == [0, 0, 1, 2, 4]
    assert bin_for(256 << 30) == 20  # everything huge shares the last bin


def test_split_on_alloc_and_merge_with_free_neighbours_is_exact() -> None:
    arena = _arena(initial_chunk_size_bytes=4 * KB)
    a, b, c = (arena.empty(_f32(1000), np.float32) for _ in range(3))  # 1000 B -> 1024 B chunks
    assert arena.chunk_layout() == [[(0, 1024, True), (1024, 1024, True), (2048, 1024, True), (3072, 1024, False)]]
    del b
    gc.collect()
    assert arena.chunk_layout() == [[(0, 1024, True), (1024, 1024, False), (2048, 1024, True), (3072, 1024, False)]]
    del c  # merges with both free neighbours
    gc.collect()
    assert arena.chunk_layout() == [[(0, 1024, True), (1024, 3072, False)]]
    del a
    gc.collect()
    assert arena.chunk_layout() == [[(0, 4096, False)]]
    stats = arena.stats()
    assert stats["num_allocs"] == 3 and stats["bytes_in_use"] == 0 and stats["max_bytes_in_use"] == 3072
    assert stats["max_alloc_size"] == 1024 and stats["num_free_chunks"] == 1


def test_best_fit_takes_the_smallest_free_chunk_that_fits() -> None:
    arena = _arena(initial_chunk_size_bytes=8 * KB)
    big, keep1, small, keep2 = (arena.empty(_f32(n), np.float32) for n in (2048, 256, 512, 256))
    del big, small
    gc.collect()  # free: 2048 B at 0, 512 B at 2304, the tail
    c = arena.empty(_f32(400), np.float32)
    layout = arena.chunk_layout()[0]
    assert (2304, 512, True) in layout, layout  # the 512-byte hole, not the 2048-byte one
    del c, keep1, keep2


def test_a_chunk_is_split_only_when_the_rest_is_worth_it() -> None:
    # 4096 B free, 2304 B wanted: the rest (1792 B) is below half, kept unless max_dead_bytes_per_chunk says
    for max_dead, expected in ((128 * KB * KB, 4096), (1024, 2304)):
        arena = _arena(initial_chunk_size_bytes=4 * KB, max_dead_bytes_per_chunk=max_dead)
        x = arena.empty(_f32(2304), np.float32)
        assert arena.stats()["bytes_in_use"] == expected
        del x


def test_next_power_of_two_region_sizes_follow_onnxruntime() -> None:
    arena = _arena(initial_chunk_size_bytes=4 * KB, max_power_of_two_extend_bytes=32 * KB)
    held = [arena.empty(_f32(4 * KB), np.float32)]  # fills region 1 (4 KiB); the next one will be 8 KiB
    held.append(arena.empty(_f32(256), np.float32))  # region 2: 8 KiB, next 16 KiB
    held.append(arena.empty(_f32(40 * KB), np.float32))  # doubles until it fits: 64 KiB (past the cap)
    held.append(arena.empty(_f32(40 * KB), np.float32))  # 64 KiB again; the next is capped at 32 KiB
    held.append(arena.empty(_f32(30 * KB), np.float32))
    sizes = sorted(sum(c[1] for c in r) for r in arena.chunk_layout())
    assert sizes == sorted([4 * KB, 8 * KB, 64 * KB, 64 * KB, 32 * KB])
    assert arena.stats()["num_arena_extensions"] == 5


def test_same_as_requested_regions_are_the_request() -> None:
    arena = _arena(extend_strategy="kSameAsRequested", initial_chunk_size_bytes=64 * KB)
    held = [arena.empty(_f32(n), np.float32) for n in (1000, 3000, 300)]
    assert sorted(sum(c[1] for c in r) for r in arena.chunk_layout()) == [512, 1024, 3072]
    del held


def test_limit_clips_extensions_and_fails_with_a_typed_error_naming_the_option() -> None:
    from ep_core.sdk.errors import Fail

    arena = _arena(max_mem=6 * KB, initial_chunk_size_bytes=4 * KB)
    a = arena.empty(_f32(4 * KB), np.float32)
    b = arena.empty(_f32(1 * KB), np.float32)  # the 8 KiB next region is clipped to the 2 KiB left
    assert arena.stats()["total_allocated_bytes"] == 6 * KB and arena.stats()["bytes_limit"] == 6 * KB
    with pytest.raises(Fail, match=r"available memory of 0 bytes.*gpu_mem_limit \(or arena.max_mem\)"):
        arena.empty(_f32(2 * KB), np.float32)
    del a, b


def test_region_allocation_backs_off_when_the_device_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    arena = _arena(initial_chunk_size_bytes=64 * KB)
    real = arena._new_memory
    tried: list[int] = []

    def scarce(nbytes: int):
        tried.append(nbytes)
        if nbytes > 40 * KB:
            raise MemoryError("out of device memory")
        return real(nbytes)

    monkeypatch.setattr(arena, "_new_memory", scarce)
    x = arena.empty(_f32(1 * KB), np.float32)
    assert tried[0] == 64 * KB and tried[-1] <= 40 * KB and arena.stats()["total_allocated_bytes"] == tried[-1]
    del x


def test_shrink_frees_only_whole_free_regions_and_restarts_growth() -> None:
    arena = _arena(initial_chunk_size_bytes=4 * KB, initial_growth_chunk_size_bytes=16 * KB)
    first = arena.empty(_f32(4 * KB), np.float32)
    second = arena.empty(_f32(1 * KB), np.float32)  # region 2 (8 KiB), partly used
    third = arena.empty(_f32(12 * KB), np.float32)  # region 3 (16 KiB)
    del third
    gc.collect()
    assert arena.shrink() == 16 * KB  # region 3 only: region 2 holds `second`, region 1 is kept anyway
    stats = arena.stats()
    assert stats["num_arena_shrinkages"] == 1 and stats["total_allocated_bytes"] == 12 * KB
    del first, second
    gc.collect()
    assert arena.shrink() == 8 * KB  # kNextPowerOfTwo never gives the first region back
    assert arena.stats()["num_regions"] == 1
    arena.empty(_f32(8 * KB), np.float32)  # growth restarts at initial_growth_chunk_size_bytes
    assert sorted(sum(c[1] for c in r) for r in arena.chunk_layout()) == [4 * KB, 16 * KB]
    same = _arena(extend_strategy="kSameAsRequested")
    x = same.empty(_f32(1 * KB), np.float32)
    del x
    gc.collect()
    assert same.shrink() == KB and same.stats()["total_allocated_bytes"] == 0  # its first region too


def test_region_ids_never_repeat_so_shrink_keeps_only_the_first_region() -> None:
    """Shrinking lowers num_arena_extensions; a region id taken from it would be reissued to a live
    region. Ids only grow: exactly one region is the first, and shrink keeps only it."""
    arena = _arena(initial_chunk_size_bytes=4 * KB, initial_growth_chunk_size_bytes=8 * KB)
    first = arena.empty(_f32(4 * KB), np.float32)  # region 0 (4 KiB)
    second = arena.empty(_f32(8 * KB), np.float32)  # region 1 (8 KiB)
    third = arena.empty(_f32(16 * KB), np.float32)  # region 2 (16 KiB)
    del second
    gc.collect()
    assert arena.shrink() == 8 * KB  # region 1; regions 0 and 2 are in use
    fourth = arena.empty(_f32(8 * KB), np.float32)  # a new region beside the live region 2
    rids = sorted(r.rid for r in arena._regions)
    assert len(set(rids)) == len(rids) == 3 and rids[0] == 0, rids
    del first, third, fourth
    gc.collect()
    arena.shrink()
    assert [r.rid for r in arena._regions] == [0] and arena.stats()["total_allocated_bytes"] == 4 * KB
    assert arena.release_unused() == 4 * KB  # no session uses it: the first region goes too
    x = arena.empty(_f32(1 * KB), np.float32)  # and the arena starts over: a new first region
    assert [r.rid for r in arena._regions] == [0]
    del x


def test_stream_aware_reuse_waits_for_the_other_stream() -> None:
    from ep_cuda_numba.device import device_memory_info
    from ep_cuda_numba.factory import factory

    s1 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    s2 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    arena = _arena(initial_chunk_size_bytes=1 * KB)
    a = arena.empty(_f32(1 * KB), np.float32, s1)  # the whole region, last used on s1
    del a
    gc.collect()
    b = arena.empty(_f32(1 * KB), np.float32, s1)  # same stream: no wait
    assert arena.stats()["num_stream_waits"] == 0
    del b
    gc.collect()
    c = arena.empty(_f32(1 * KB), np.float32, s2)  # only s1's chunk fits: s2 waits for s1 first
    assert arena.stats()["num_stream_waits"] == 1 and arena.stats()["num_arena_extensions"] == 1
    del c
    gc.collect()
    arena.reset_stream(s2)  # after s2 was synchronized (run end): the chunk is free for every stream
    d = arena.empty(_f32(1 * KB), np.float32, s1)
    assert arena.stats()["num_stream_waits"] == 1
    del d


def test_chunks_of_different_streams_do_not_merge_until_reset() -> None:
    from ep_cuda_numba.device import device_memory_info
    from ep_cuda_numba.factory import factory

    s1 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    s2 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    arena = _arena(initial_chunk_size_bytes=2 * KB)
    a = arena.empty(_f32(1 * KB), np.float32, s1)
    b = arena.empty(_f32(1 * KB), np.float32, s2)
    del a, b
    gc.collect()
    assert arena.chunk_layout() == [[(0, 1024, False), (1024, 1024, False)]]
    arena.reset_stream(s1)
    assert arena.chunk_layout() == [[(0, 2048, False)]]


def test_thread_safety_with_raw_buffers_and_typed_arrays() -> None:
    arena = _arena(initial_chunk_size_bytes=16 * KB)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(150):
                n = int(rng.integers(1, 3000))
                if rng.random() < 0.5:
                    arena.free(arena.alloc(n))
                else:
                    arr = arena.empty((n,), np.uint8)
                    del arr
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not errors
    stats = arena.stats()
    assert stats["bytes_in_use"] == 0 and stats["num_allocs"] == 600
    assert all(len(r) == 1 and not r[0][2] for r in arena.chunk_layout()), "every region merged back whole"


def test_reserve_bypasses_the_regions_and_counts() -> None:
    arena = _arena()
    buf = arena.reserve(1000)
    stats = arena.stats()
    assert stats["num_reserves"] == 1 and stats["bytes_in_use"] == 1000 and stats["num_regions"] == 0
    arena.free(buf)
    assert arena.stats()["bytes_in_use"] == 0 and arena.stats()["total_allocated_bytes"] == 0


def test_broken_views_fall_back_to_numba_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    arena = _arena()

    def broken(*args: object) -> None:
        raise AttributeError("numba moved something")

    monkeypatch.setattr(arena, "_typed_view", broken)
    with pytest.warns(RuntimeWarning, match="allocating directly from numba"):
        x = arena.empty((4,), np.float32)
    y = arena.empty((4,), np.float32)
    assert x.shape == y.shape == (4,) and arena.stats()["num_allocs"] == 1


# ------------------------------------------------------------------------------ options
def test_arena_options_parse_as_onnxruntime_and_bad_ones_are_refused() -> None:
    from ep_core.sdk.errors import ConfigError
    from ep_cuda_numba.options import parse_options

    opts = parse_options(
        {
            "gpu_mem_limit": "1048576",
            "arena.extend_strategy": "1",
            "arena.initial_chunk_size_bytes": "4096",
            "arena.max_dead_bytes_per_chunk": "1024",
            "arena.initial_growth_chunk_size_bytes": "8192",
            "arena.max_power_of_two_extend_bytes": "65536",
        }
    )
    assert opts.arena == {
        "max_mem": 1048576,
        "extend_strategy": "kSameAsRequested",
        "initial_chunk_size_bytes": 4096,
        "max_dead_bytes_per_chunk": 1024,
        "initial_growth_chunk_size_bytes": 8192,
        "max_power_of_two_extend_bytes": 65536,
    }
    assert parse_options({}).arena == {}
    for raw, match in (
        ({"arena.extend_strategy": "kSameAsRequested"}, r"arena.extend_strategy='kSameAsRequested' is invalid"),
        ({"arena.initial_chunk_size_bytes": "0"}, "allowed: integer 1..2147483647"),
        ({"arena.max_mem": "-1"}, "arena.max_mem='-1' is invalid"),
        ({"arena.use_cuda_mempool": "1"}, "has no option"),
        ({"gpu_mem_limit": "100", "arena.max_mem": "200"}, "disagree; give one of them"),
        ({"arena_extend_strategy": "kSameAsRequested", "arena.extend_strategy": "0"}, "disagree"),
    ):
        with pytest.raises(ConfigError, match=match):
            parse_options(raw)


def _relu_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (4, 64)).astype(np.float32)


def test_session_arena_options_reach_the_allocator_and_shrink_runs_only_when_asked() -> None:
    from ep_core import RunOptions

    gc.collect()  # earlier sessions release the shared arena, so this session's settings apply
    opts = {"arena.extend_strategy": "1", "arena.initial_chunk_size_bytes": "256"}
    sess = session(_relu_model(), providers=[(EP, opts)])
    arena = sess.execution_providers[0].allocator
    assert arena.config.extend_strategy == "kSameAsRequested" and arena.config.initial_chunk_size_bytes == 256
    (y,) = sess.run(None, {"x": _x()})
    np.testing.assert_array_equal(y, np.maximum(_x(), 0))
    gc.collect()
    regions = arena.stats()["num_regions"]
    assert regions >= 1 and arena.stats()["num_arena_shrinkages"] == 0, "no shrink unless asked"
    ro = RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:1")  # another device: not this arena
    sess.run(None, {"x": _x()}, ro)
    assert arena.stats()["num_arena_shrinkages"] == 0
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0;gpu:0")
    sess.run(None, {"x": _x()}, ro)
    stats = arena.stats()
    assert stats["num_arena_shrinkages"] >= 1
    assert all(any(c[2] for c in r) for r in arena.chunk_layout()), "only regions in use are left"
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "tpu:0")
    from ep_core.sdk.errors import InvalidArgument

    transfer = sess.execution_providers[0].data_transfer
    before = dict(transfer.copies)
    with pytest.raises(InvalidArgument, match="Unsupported device specified in the memory arena shrink list: tpu"):
        sess.run(None, {"x": _x()}, ro)
    assert transfer.copies == before, "refused at run start: the run did not execute"
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:x")
    with pytest.raises(InvalidArgument, match=r"memory.enable_memory_arena_shrinkage='gpu:x'"):
        sess.run(None, {"x": _x()}, ro)
    assert transfer.copies == before
    sess.close()


def test_a_busy_shared_arena_refuses_other_settings_and_two_sessions_share_it(tmp_path) -> None:
    from ep_core import SessionOptions
    from ep_core.sdk.errors import ConfigError

    gc.collect()
    opts = SessionOptions(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    a = session(_relu_model(), providers=[(EP, {"gpu_mem_limit": str(64 << 20)})], sess_options=opts)
    b = session(_relu_model())  # asks for nothing: shares the arena as it is
    arena = a.execution_providers[0].allocator
    assert b.execution_providers[0].allocator is arena and arena.users >= 2 and arena.limit == 64 << 20
    with pytest.raises(ConfigError, match=r"shared by every session.*max_mem=1024 \(is 67108864\)"):
        session(_relu_model(), providers=[(EP, {"gpu_mem_limit": "1024"})])
    a.run(None, {"x": _x()})
    b.run(None, {"x": _x()})
    events = json.load(open(a.end_profiling()))
    counters = {e["name"]: e["args"] for e in events if e.get("cat") == EP}
    assert counters["arena"]["num_allocs"] > 0 and counters["arena"]["bytes_limit"] == 64 << 20
    assert {"total_allocated_bytes", "num_arena_extensions", "max_bytes_in_use"} <= set(counters["arena"])
    a.close()
    b.close()


# ------------------------------------------------------------------------------- pinned
def test_pinned_arena_gives_host_arrays_and_waits_for_streams_before_reuse() -> None:
    from ep_cuda_numba.device import device_memory_info
    from ep_cuda_numba.factory import factory
    from ep_cuda_numba.pinned import PinnedArena

    pinned = PinnedArena(0)
    x = pinned.empty((256,), np.float32)
    assert isinstance(x, np.ndarray) and pinned.holds(x) and pinned.holds(x[10:])
    assert not pinned.holds(np.zeros(4)) and pinned.stats()["bytes_in_use"] == 1024
    s1 = factory.ep_factory_create_sync_stream_for_device(device_memory_info(0), {})
    pinned.mark_used_on(x, s1)  # an async copy on s1 reads x
    del x
    gc.collect()
    y = pinned.empty((256,), np.float32)  # the host writes at once: it waits for s1 first
    assert pinned.stats()["num_stream_waits"] == 1
    del y


def test_the_pinned_arena_gives_its_free_regions_back_when_the_device_arena_is_released() -> None:
    """No session option reaches the pinned arena (defaults, no limit, and its error says so); its
    free regions go back when the last session using the device arena leaves."""
    from ep_cuda_numba.device import device_memory_info
    from ep_cuda_numba.factory import NumbaCudaFactory

    f = NumbaCudaFactory()  # its own arenas: nothing shared with other tests
    device = f.ep_factory_create_allocator(device_memory_info(0), {})
    pinned = f.pinned(0)
    assert pinned.config.max_mem == 0 and "no limit" in pinned.limit_option
    kept = pinned.empty((64,), np.float32)
    x = pinned.empty((4 * KB * KB,), np.float32)  # 16 MiB: a second region
    del x
    gc.collect()
    assert pinned.stats()["num_regions"] == 2
    f.ep_factory_release_allocator(device)
    assert pinned.stats()["num_regions"] == 1 and pinned.holds(kept)  # the region in use stays
    del kept
    gc.collect()
    again = f.ep_factory_create_allocator(device_memory_info(0), {})
    f.ep_factory_release_allocator(again)
    assert pinned.stats()["total_allocated_bytes"] == 0


def test_pinned_allocator_from_the_factory_and_io_binding_to_pinned_memory() -> None:
    from ep_core.sdk.memory import MemType
    from ep_cuda_numba.device import pinned_memory_info
    from ep_cuda_numba.factory import factory

    pinned = factory.ep_factory_create_allocator(pinned_memory_info(0), {"arena.initial_chunk_size_bytes": "4096"})
    try:
        assert pinned is factory.pinned(0) and pinned.memory_name == "CudaPinned"
        sess = session(_relu_model())
        transfer = sess.execution_providers[0].data_transfer
        x = pinned.empty((4, 64), np.float32)
        x[...] = _x()
        before = dict(transfer.copies)
        binding = sess.io_binding()
        binding.bind_input("x", x, "cuda_pinned:0")
        binding.bind_output("y", "cuda_pinned:0")
        sess.run_with_iobinding(binding)
        (out,) = binding.get_outputs()
        assert out.memory_info.name == "CudaPinned" and out.memory_info.mem_type is MemType.HOST_ACCESSIBLE
        assert pinned.holds(out.data), "the output landed in the pinned arena"
        np.testing.assert_array_equal(out.numpy(), np.maximum(_x(), 0))
        assert transfer.copies["h2d"] == before["h2d"] + 1 and transfer.copies["d2h"] == before["d2h"] + 1
        with pinned._lock:  # the input went up by one DMA on the session's stream, marked on its chunk
            assert pinned._chunk_at(x.ctypes.data).stream is sess.execution_providers[0].stream
        del out, binding
        sess.close()
    finally:
        factory.ep_factory_release_allocator(pinned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gc.collect()
