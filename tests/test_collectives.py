"""The host-staged collectives on golden-model devices (and one run on two simulators).

Every result is checked against numpy, computed here from the inputs: wrapping int32 sums, int8 sums
requantised with the POSTOP's arithmetic, segments as ``np.array_split`` cuts them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
from dx1_driver import Device, OutOfDeviceMemory

from dx1_bringup.argtypes import device_group
from dx1_bringup.cli import main
from dx1_bringup.collectives import (
    Buffer,
    CollectiveMismatch,
    CollectiveRefused,
    CollectiveTimeout,
    DeviceGroup,
    GroupClosed,
    RankFailed,
)
from dx1_bringup.model.tile import requantize
from dx1_bringup.runtime.quant import requant_multiplier
from dx1_bringup.sim import verilator_missing
from dx1_bringup.spec import PostOpParams

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


@pytest.fixture(scope="module")
def groups():
    opened: dict[int, DeviceGroup] = {}

    def get(n: int) -> DeviceGroup:
        if n not in opened:
            opened[n] = DeviceGroup.open(f"model*{n}", timeout=5.0)
        return opened[n]

    yield get
    for g in opened.values():
        g.close()


def _inputs(rng, n: int, count: int, dtype: str) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, count, endpoint=True).astype(dtype) for _ in range(n)]


def _sum(parts: list[np.ndarray], dtype: str, scale: float | None) -> np.ndarray:
    total = np.sum(np.stack(parts).astype(np.int64), axis=0) if parts[0].size else np.zeros(0, np.int64)
    wrapped = (total % 2**32).astype(np.uint32).view(np.int32)
    if dtype == "int32":
        return wrapped
    mult, shift = requant_multiplier(1.0 if scale is None else scale)
    return requantize(wrapped, 0, PostOpParams(mult, shift))


def _run(g: DeviceGroup, op: str, count: int, dtype: str, *, in_place: bool, root: int, rng, **options):
    """Run ``op`` on fresh buffers; return (every rank's result, every rank's expected result or None)."""
    n = g.size
    parts = np.array_split(np.arange(count), n)
    scale = options.get("scale")
    if op == "all_gather":
        inputs = [rng.integers(-100, 100, len(parts[r])).astype(dtype) for r in range(n)]
        whole = np.concatenate(inputs) if count else np.zeros(0, dtype)
        bufs = g.alloc(count, dtype) if in_place else g.alloc(0, dtype, shapes=[len(p) for p in parts])
        if in_place:
            g.write(bufs, [np.where(np.isin(np.arange(count), parts[r]), whole, 0).astype(dtype) for r in range(n)])
        else:
            g.write(bufs, inputs)
        expected = [whole] * n
    else:
        inputs = _inputs(rng, n, count, dtype)
        bufs = g.alloc(count, dtype)
        g.write(bufs, inputs)
        total = _sum(inputs, dtype, scale) if op != "broadcast" else None
        if op == "all_reduce":
            expected = [total] * n
        elif op == "reduce_scatter":
            expected = [total[p[0]:p[-1] + 1] if len(p) else total[:0] for p in parts]
        elif op == "broadcast":
            expected = [inputs[root]] * n
        else:
            expected = [total if r == root else None for r in range(n)]
    outs = None
    if not in_place:
        size = {"reduce_scatter": [len(p) for p in parts]}.get(op, [count] * n)
        outs = g.alloc(0, dtype, shapes=size)
    kwargs = dict(options)
    if op in ("broadcast", "reduce"):
        kwargs["root"] = root
    getattr(g, op)(bufs, outs, **kwargs)
    results = g.read(outs if outs is not None else bufs)
    if in_place and op == "reduce_scatter":
        results = [res[p[0]:p[-1] + 1] if len(p) else res[:0] for res, p in zip(results, parts, strict=True)]
    g.free(bufs)
    if outs is not None:
        g.free(outs)
    return results, expected


def _check(results, expected, what: str) -> None:
    for r, (got, want) in enumerate(zip(results, expected, strict=True)):
        if want is not None:
            assert got.dtype == want.dtype and np.array_equal(got, want), f"{what}: rank {r} got {got}, want {want}"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_op_is_bit_identical_across_algorithms_chunks_and_sizes(groups, n):
    """Sizes 0, 1, fewer than the ranks and not divisible by them; ring with several chunks and direct; in place and
    out of place; int32 everywhere, int8 (requantised) for the reducing ones: every rank equals numpy."""
    g = groups(n)
    rng = np.random.default_rng(n)
    counts = sorted({0, 1, max(n - 1, 1), 3 * n + 1, 101})
    for op in OPS:
        for dtype in ("int32", "int8"):
            for count in counts:
                for algorithm, chunk in (("ring", 4), ("ring", 12), ("ring", 16384), ("direct", 16384)):
                    for in_place in (False, True):
                        root = count % n
                        what = f"{op} {dtype}[{count}] on {n} ranks, {algorithm} chunk {chunk}, in place {in_place}"
                        results, expected = _run(g, op, count, dtype, in_place=in_place, root=root, rng=rng,
                                                 algorithm=algorithm, chunk_bytes=chunk)
                        _check(results, expected, what)


def test_int8_average_requantises_like_the_postop(groups):
    g = groups(4)
    rng = np.random.default_rng(7)
    for algorithm in ("ring", "direct"):
        results, expected = _run(g, "all_reduce", 50, "int8", in_place=False, root=0, rng=rng, algorithm=algorithm,
                                 redop="sum", scale=0.25)
        _check(results, expected, algorithm)
    bufs = g.alloc(5, "int8")
    g.write(bufs, [np.array([1, 2, -2, 127, -128], np.int8)] * 4)
    g.all_reduce(bufs, redop="avg")
    assert [list(a) for a in g.read(bufs)] == [[1, 2, -2, 127, -128]] * 4
    with pytest.raises(CollectiveRefused, match="rank 0 refused its arguments: int32 reduces only by sum") as e:
        g.all_reduce(g.alloc(1), redop="avg")
    assert set(e.value.per_rank) == {0, 1, 2, 3}
    with pytest.raises(CollectiveRefused, match="rank 2 refused its arguments: .* is in rank 0's device memory"):
        g.run(lambda rank: rank.all_reduce(bufs[0] if rank.rank == 2 else bufs[rank.rank]))
    with pytest.raises(CollectiveRefused, match="rank 1 refused its arguments: the algorithm must be one of ring, "
                                                "direct, link, not 'tree'"):
        g.run(lambda rank: rank.all_reduce(bufs[rank.rank], algorithm="tree" if rank.rank == 1 else "ring"))


def test_send_recv_and_barrier(groups):
    g = groups(3)
    src = g.alloc(37, "int32")
    dst = g.alloc(37, "int32")
    data = np.arange(37, dtype=np.int32) * 3 - 50
    g.write(src, [data] * 3)
    with pytest.raises(ValueError, match="cannot hold these values: int64 values outside int32's range"):
        g.write(src[:1], [np.full(37, 2**40)])
    used = [dev.allocator.used for dev in g.devs]
    with pytest.raises(OutOfDeviceMemory):
        g.alloc(0, "int8", shapes=[16, 16, 1 << 24])
    assert [dev.allocator.used for dev in g.devs] == used  # ranks 0 and 1 gave theirs back
    g.send_recv(src[0], dst[2], chunk_bytes=16)
    assert np.array_equal(g.read([dst[2]])[0], data)
    g.barrier()
    wrong = g.alloc(36, "int32")
    with pytest.raises(CollectiveMismatch, match=r"send/recv #0: the ranks' fingerprints differ in shape \(rank 0 "
                                                 r"differs\): rank 1 \(37,\), rank 0 \(36,\)") as e:
        g.send_recv(src[1], wrong[0])
    assert set(e.value.per_rank) == {0, 1} and all(isinstance(x, CollectiveMismatch) for x in e.value.per_rank.values())
    g.send_recv(src[1], dst[0])  # a refused pair leaves the group usable
    assert np.array_equal(g.read([dst[0]])[0], data)


def test_shapes_that_differ_across_ranks_fail_on_every_rank(groups):
    g = groups(4)
    bufs = g.alloc(0, "int32", shapes=[8, 8, 9, 8])
    with pytest.raises(CollectiveMismatch) as e:
        g.all_reduce(bufs)
    assert set(e.value.per_rank) == {0, 1, 2, 3}
    for r, error in e.value.per_rank.items():
        assert isinstance(error, CollectiveMismatch) and error.field == "shape" and error.rank == 2
        assert error.observer == r
    assert "differ in shape (rank 2 differs): rank 0 (8,), rank 1 (8,), rank 2 (9,), rank 3 (8,)" in str(e.value)
    # Ops that differ: named too; the group stays usable after a mismatch (no data had moved).
    same = g.alloc(8, "int32")
    with pytest.raises(CollectiveMismatch, match="differ in op .*rank 3 broadcast"):
        g.run(lambda rank: rank.broadcast(same[rank.rank]) if rank.rank == 3 else rank.all_reduce(same[rank.rank]))
    with pytest.raises(CollectiveMismatch, match="differ in root"):
        g.run(lambda rank: rank.broadcast(same[rank.rank], root=1 if rank.rank else 0))
    parts = g.alloc(0, "int32", shapes=[3, 2, 2, 2])
    with pytest.raises(CollectiveMismatch, match="parts do not match") as e:
        g.all_gather(parts, g.alloc(8, "int32"))
    assert e.value.field == "part"
    g.all_reduce(same)


def test_a_rank_that_never_calls_times_out_on_every_rank_naming_it():
    with DeviceGroup.open("model*4", timeout=0.5) as g:
        bufs = g.alloc(16, "int32")
        start = time.monotonic()
        with pytest.raises(CollectiveTimeout) as e:
            g.run(lambda rank: rank.all_reduce(bufs[rank.rank]), ranks=[0, 1, 2])
        assert time.monotonic() - start < 2.0
        assert e.value.rank == 3 and e.value.op == "all_reduce"
        assert "all_reduce #0 timed out: rank 3 never called it (it has called no collective yet)" in str(e.value)
        assert set(e.value.per_rank) == {0, 1, 2}
        assert all(isinstance(x, CollectiveTimeout) and x.rank == 3 for x in e.value.per_rank.values())
        with pytest.raises(CollectiveTimeout):  # the group stays failed: rank 3's schedule is out of step
            g.all_reduce(bufs)


@pytest.mark.parametrize("how", ["closed", "bus-error", "stuck-bit"])
def test_a_failed_rank_is_a_typed_error_on_every_rank_and_teardown_returns(how):
    names = ["model"] * 4
    if how == "bus-error":
        names[1] = "model:bus-error=0x8000+0x1000"
    if how == "stuck-bit":
        names[1] = "model:stuck-bit=3,stuck-at=0"
    g = DeviceGroup.open(names, timeout=1.0)
    bufs = g.alloc(256, "int32")
    g.write(bufs, [np.full(256, 2, np.int32)] * 4)  # the sum, 8, cannot be stored on the stuck-bit rank
    outs = [Buffer(r, 0x8000, np.int32, (256,)) for r in range(4)]  # in the window on rank 1
    if how == "closed":
        g.devs[1].close()
    start = time.monotonic()
    with pytest.raises(RankFailed) as e:
        g.all_reduce(bufs, outs, chunk_bytes=64)
    assert time.monotonic() - start < 1.5
    assert e.value.rank == 1 and e.value.op == "all_reduce"
    assert set(e.value.per_rank) == {0, 1, 2, 3}
    assert all(isinstance(x, RankFailed) and x.rank == 1 for x in e.value.per_rank.values())
    assert "rank 1 (" in str(e.value) and "step" in str(e.value) or "ring" in str(e.value)
    with pytest.raises(RankFailed):  # every later collective fails at once with the same error
        g.barrier()
    start = time.monotonic()
    g.close()
    assert time.monotonic() - start < 1.5
    with pytest.raises(ValueError, match="closed"):
        g.barrier()


def test_close_wakes_a_waiting_rank():
    """SPMD use: rank 0 calls from a thread of its own, rank 1 never does; closing the group ends the wait at once."""
    g = DeviceGroup.open("model*2", timeout=30.0)
    bufs = g.alloc(4, "int32")
    raised: list[BaseException] = []

    def rank0() -> None:
        try:
            g.rank(0).all_reduce(bufs[0])
        except GroupClosed as e:
            raised.append(e)

    thread = threading.Thread(target=rank0)
    thread.start()
    time.sleep(0.05)
    start = time.monotonic()
    g.close()
    thread.join(1.0)
    assert not thread.is_alive() and time.monotonic() - start < 1.0
    assert len(raised) == 1 and "the group was closed" in str(raised[0])


def test_a_hundred_back_to_back_collectives_alternating_ops_sizes_and_roots(groups):
    g = groups(3)
    rng = np.random.default_rng(100)
    for i in range(100):
        op = OPS[i % len(OPS)]
        count = int(rng.integers(0, 40))
        algorithm = ("ring", "direct")[i // 5 % 2]
        results, expected = _run(g, op, count, "int32", in_place=bool(i % 3 == 0), root=i % 3, rng=rng,
                                 algorithm=algorithm, chunk_bytes=int(rng.integers(4, 64)))
        _check(results, expected, f"collective {i}: {op}[{count}] {algorithm}")
    g.barrier()
    assert [rank.seq for rank in g.ranks][0] == [rank.seq for rank in g.ranks][-1]


def test_group_device_strings():
    assert device_group("model*2,model:tiles=2,banks=4") == ["model", "model", "model:tiles=2,banks=4"]
    with pytest.raises(argparse.ArgumentTypeError, match="N at least 1"):
        device_group("model*0")
    with pytest.raises(ValueError, match="group 'nope\\*2': unknown device 'nope'"):
        DeviceGroup.open("nope*2")
    dev = Device.open("model")
    with pytest.raises(ValueError, match="one device cannot be two ranks"):
        DeviceGroup([dev, dev])
    with pytest.raises(ValueError, match="algorithm must be one of ring, direct, link, not 'tree'"):
        DeviceGroup([dev], algorithm="tree")
    dev.close()


def test_the_command_prints_nccl_tests_tables_and_writes_json(tmp_path, capsys):
    out = tmp_path / "c.json"
    status = main(["collectives", "--device", "model*3", "--op", "all", "--bytes", "0,4,100", "--iters", "1",
                   "--algorithm", "both", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    assert text.count("# Out of bounds values : 0 OK") == 11  # five collectives on two algorithms, and sendrecv
    assert "# dx1 collectives: all_reduce, host-staged, algorithm ring, 3 ranks: model, model, model" in text
    assert "busbw factor 1.333" in text and "busbw factor 0.667" in text
    assert "     time     cycles   algbw   busbw  %peak #wrong" in text
    report = json.loads(out.read_text())
    assert report["ranks"] == 3 and len(report["tables"]) == 11
    row = report["tables"][0]["rows"][2]
    assert (row["size"], row["count"], row["dtype"], row["redop"]) == (100, 25, "int32", "sum")
    assert row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] == 0
    status = main(["collectives", "--device", "model,model:stuck-bit=3,stuck-at=0", "--bytes", "4096",
                   "--iters", "1"])
    captured = capsys.readouterr()
    assert status == 1 and "RankFailed: rank 1 (model:stuck-bit=3,stuck-at=0) failed in all_reduce" in captured.err


@pytest.mark.verilator
def test_two_simulators_all_reduce_and_a_stopped_or_killed_one_fails_every_rank():
    """Two sim ranks (two simulator processes): ring and direct give numpy's sum on both.  Then one simulator is
    stopped (SIGSTOP): a CollectiveTimeout naming it on both ranks within the deadline, and teardown returns; and
    one is killed: RankFailed (its link lost) on both ranks."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    rng = np.random.default_rng(2)
    with DeviceGroup.open("sim*2", timeout=30.0) as g:
        for algorithm in ("ring", "direct"):
            results, expected = _run(g, "all_reduce", 301, "int32", in_place=False, root=0, rng=rng,
                                     algorithm=algorithm, chunk_bytes=256)
            _check(results, expected, algorithm)
    with DeviceGroup.open("model,sim,model", timeout=30.0) as g:  # a mixed group
        for op in ("reduce_scatter", "all_gather"):
            results, expected = _run(g, op, 100, "int8", in_place=True, root=0, rng=rng, chunk_bytes=16)
            _check(results, expected, f"{op} on model,sim,model")
    for how in ("stop", "kill"):
        g = DeviceGroup.open("sim*2", timeout=1.0)
        process = g.devs[1].transport.process
        try:
            bufs = g.alloc(1000, "int32")
            os.kill(process.pid, signal.SIGSTOP if how == "stop" else signal.SIGKILL)
            start = time.monotonic()
            with pytest.raises(RankFailed if how == "kill" else CollectiveTimeout) as e:
                g.all_reduce(bufs, chunk_bytes=400)
            assert time.monotonic() - start < 2.5
            assert e.value.rank == 1 and set(e.value.per_rank) == {0, 1}
            if how == "stop":
                assert "rank 1 is stuck in a device call at ring reduce-scatter step 1 of 1" in str(e.value)
            start = time.monotonic()
            g.close()
            assert time.monotonic() - start < 1.5
        finally:
            process.kill()
            process.wait(10)
