"""Collectives over the chip-to-chip link on ``model:chips=N``: bit-identical to the host-staged algorithms,
every size and chunk, typed errors on every rank for a cut link, a dead chip and CRC errors past the retries."""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import regs

from dx1_bringup.collectives import (
    CollectiveRefused,
    CollectiveTimeout,
    DeviceGroup,
    RankFailed,
    segment,
)
from dx1_bringup.spec import ChipLinkConfig


def inputs(n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-2**31, 2**31, count, dtype=np.int64).astype(np.int32) for _ in range(n)]


def run_all(g: DeviceGroup, ins: list[np.ndarray], algorithm: str, chunk: int, root: int) -> dict[str, list]:
    """Every collective's results (out of place, and all-reduce in place) with ``algorithm``."""
    n, count = g.size, ins[0].size
    got: dict[str, list] = {}
    opts = {"algorithm": algorithm, "chunk_bytes": chunk}
    b = g.alloc(count)
    g.write(b, ins)
    g.all_reduce(b, **opts)
    got["all_reduce in place"] = g.read(b)
    g.write(b, ins)
    out = g.alloc(count)
    g.all_reduce(b, out, **opts)
    got["all_reduce"] = g.read(out)
    parts = g.alloc(0, shapes=[segment(count, n, r)[1] - segment(count, n, r)[0] for r in range(n)])
    g.reduce_scatter(b, parts, **opts)
    got["reduce_scatter"] = g.read(parts)
    g.write(parts, [ins[r][slice(*segment(count, n, r))] for r in range(n)])
    g.all_gather(parts, out, **opts)
    got["all_gather"] = g.read(out)
    g.broadcast(b, out, root=root, **opts)
    got["broadcast"] = g.read(out)
    g.reduce(b, out, root=root, **opts)
    got["reduce"] = g.read(out)[root]
    g.free([*parts, *out, *b])
    return got


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_link_results_are_bit_identical_to_the_host_ring_for_every_size_and_chunk(n: int):
    with DeviceGroup.open(f"model:chips={n}", timeout=5) as g:
        assert g.has_link
        for count in sorted({0, 1, max(n - 1, 1), 2 * n + 1, 1001}):
            ins = inputs(n, count, count + n)
            want = run_all(g, ins, "ring", 1 << 16, n - 1)
            expect = np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)
            assert all(np.array_equal(x, expect) for x in want["all_reduce"])
            for chunk in (8, 12, 256, 1 << 16):
                got = run_all(g, ins, "link", chunk, n - 1)
                for op, values in want.items():
                    pairs = zip(got[op], values, strict=True) if isinstance(values, list) else [(got[op], values)]
                    assert all(np.array_equal(a, e) for a, e in pairs), (op, count, chunk)


def test_the_link_is_the_default_on_a_board_and_int8_falls_back_to_the_host_ring():
    with DeviceGroup.open("model:chips=2") as g, DeviceGroup.open("model*2") as host:
        assert g.has_link and not host.has_link
        b = g.alloc(64)
        before = [d.cycles() for d in g.devs]
        g.all_reduce(b)
        assert all(d.cycles() > c for d, c in zip(g.devs, before, strict=True))  # the devices moved the data
        b8 = g.alloc(64, "int8")
        g.write(b8, [np.full(64, 3, np.int8)] * 2)
        still = [d.cycles() for d in g.devs]
        g.all_reduce(b8)
        assert [d.cycles() for d in g.devs] == still and np.all(g.read(b8)[1] == 6)
        with pytest.raises(CollectiveRefused, match="the link algorithm reduces int32 sums only"):
            g.all_reduce(b8, algorithm="link")
        hb = host.alloc(8)
        with pytest.raises(CollectiveRefused, match="needs every rank to be a chip of one ring board"):
            host.all_reduce(hb, algorithm="link")


def test_a_hundred_back_to_back_link_collectives_alternating_ops_sizes_and_roots():
    rng = np.random.default_rng(7)
    with DeviceGroup.open("model:chips=3", timeout=5) as g:
        for i in range(100):
            count = int(rng.integers(0, 300))
            ins = inputs(3, count, i)
            b = g.alloc(count)
            g.write(b, ins)
            root = i % 3
            kind = ("all_reduce", "broadcast", "reduce", "all_gather")[i % 4]
            if kind == "all_reduce":
                g.all_reduce(b, chunk_bytes=int(rng.choice([8, 64, 4096])))
                expect = [np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)] * 3
            elif kind == "broadcast":
                g.broadcast(b, root=root)
                expect = [ins[root]] * 3
            elif kind == "reduce":
                g.reduce(b, root=root)
                expect = [np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)
                          if r == root else ins[r] for r in range(3)]
            else:
                g.write(b, [np.where((np.arange(count) >= segment(count, 3, r)[0])
                                     & (np.arange(count) < segment(count, 3, r)[1]), ins[0], 0).astype(np.int32)
                            for r in range(3)])
                g.all_gather(b)
                expect = [ins[0]] * 3
            assert all(np.array_equal(x, e) for x, e in zip(g.read(b), expect, strict=True)), (i, kind)
            g.free(b)


def cut(g: DeviceGroup, rank: int, port: int) -> None:
    dev = g.devs[rank]
    dev.write_reg(dev.link_base, regs.Link.CONTROL + 4 * port, 1 << regs.Link.CONTROL_FORCE_DOWN[0])


def test_a_cut_link_fails_every_rank_with_link_down():
    with DeviceGroup.open("model:chips=4", timeout=1) as g:
        b = g.alloc(4096)
        cut(g, 2, 0)
        with pytest.raises(RankFailed, match="LINK_DOWN") as e:
            g.all_reduce(b)
        assert set(e.value.per_rank) == {0, 1, 2, 3}
        assert all(isinstance(err, (RankFailed, CollectiveTimeout)) for err in e.value.per_rank.values())
        assert e.value.per_rank[2].rank == 2 and e.value.per_rank[2].op == "all_reduce"


def test_a_dead_chip_is_a_timeout_naming_the_rank_the_op_and_the_step_on_every_rank():
    with DeviceGroup.open("model:chips=3", timeout=0.5) as g:
        b = g.alloc(1024)
        g.all_reduce(b)  # the queues exist
        dead = g.devs[1].queue(0)
        dead.set_enabled(False)
        with pytest.raises(CollectiveTimeout) as e:
            g.all_reduce(b)
        errors = e.value.per_rank
        assert set(errors) == {0, 1, 2}
        assert all(err.op == "all_reduce" for err in errors.values())
        stuck = [err for err in errors.values() if isinstance(err, CollectiveTimeout) and err.observer == err.rank]
        assert stuck and all("link reduce-scatter" in err.step or "link all-gather" in err.step for err in stuck)
        assert "timed out after 0.5 s in all_reduce" in str(stuck[0])


def test_crc_errors_within_the_retries_change_nothing_and_past_them_fail_every_rank():
    retries = ChipLinkConfig().retries
    with DeviceGroup.open("model:chips=2", timeout=1) as g:
        b = g.alloc(1000)
        ins = inputs(2, 1000, 3)
        g.write(b, ins)
        dev = g.devs[0]
        dev.write_reg(dev.link_base, regs.Link.CONTROL, retries << regs.Link.CONTROL_CORRUPT[0])
        g.all_reduce(b)
        expect = np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)
        assert all(np.array_equal(x, expect) for x in g.read(b))
        assert dev.read_reg(dev.link_base, regs.Link.RETRIES) == retries
        dev.write_reg(dev.link_base, regs.Link.CONTROL, (retries + 1) << regs.Link.CONTROL_CORRUPT[0])
        with pytest.raises(RankFailed, match="LINK_CRC") as e:
            g.all_reduce(b)
        assert set(e.value.per_rank) == {0, 1}
