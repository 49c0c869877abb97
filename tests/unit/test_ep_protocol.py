"""A step model of the expert-parallel kernels' signalling (include/moegemm/ep/dispatch.cuh,
combine.cuh), run on CPU under random interleavings: each rank is a stream of kernels
(dispatch -> the experts' GEMMs -> combine, forward after forward, a kernel's CTAs starting
once the previous kernel's have all finished), each CTA a generator that yields at every store
and every spin of a wait, and a scheduler that picks a random runnable CTA of any rank. Every
written row carries the epoch it was written in; every read asserts it is the current one, so a
protocol that let a rank overwrite a peer's buffer before the peer consumed it, or consume it
before it was complete, fails here. Ranks get different T per forward, 0 included. A rank that
never runs makes the others' bounded waits record a timeout naming it, without hanging.

What it does not model: the memory ordering itself (release/acquire at system scope, checked in
the SASS by tests/compile/test_compile_ep.py) and the row placement (tests/unit/test_ep_model.py)."""

from __future__ import annotations

import random

import pytest
import torch

from moegemm.ep import dispatch_placement
from moegemm.ep.status import STATUS_TIMEOUT, encode_status

SPIN_LIMIT = 20_000  # the timeout, in spins of one waiting thread


class Rank:
    def __init__(self, world: int, e: int, el: int, max_m: int, slots: int) -> None:
        self.count_flag = [0] * world
        self.counts = [[0] * e for _ in range(world)]
        self.dispatch_arrive = [0] * world
        self.combine_arrive = [0] * world
        self.x_recv: dict[tuple[int, int], tuple[int, int, int]] = {}  # (le, row): (ep, s, slot)
        self.combine_recv: dict[int, tuple[int, int, int]] = {}  # slot: (ep, owner, index)
        self.masked_m = [0] * el
        self.slot_dest = [-1] * slots
        self.epoch = 0
        self.status = 0


def record(mem: Rank, word: int) -> None:
    if mem.status == 0:
        mem.status = word


def wait_all(mem: Rank, signals: list[int], target: int, phase: int):
    for r in range(len(signals)):
        spins = 0
        while signals[r] < target:
            spins += 1
            if mem.status >> 24 == STATUS_TIMEOUT:
                return False
            if spins > SPIN_LIMIT:
                record(mem, encode_status(STATUS_TIMEOUT, phase, r))
                return False
            yield
    return True


class Model:
    def __init__(self, world: int, e: int, max_m: int, slots: int, grid: int) -> None:
        self.world, self.e, self.el, self.max_m, self.grid = world, e, e // world, max_m, grid
        self.mem = [Rank(world, e, self.el, max_m, slots) for _ in range(world)]

    def dispatch_cta(self, s: int, c: int, ids: list[int]):
        me, ep = self.mem[s], self.mem[s].epoch + 1
        counts = [sum(1 for x in ids if x == ex) for ex in range(self.e)]
        if c == 0:
            for r in range(self.world):
                self.mem[r].counts[s] = list(counts)
                yield
            for r in range(self.world):
                self.mem[r].count_flag[s] = ep
                yield
        ok = yield from wait_all(me, me.count_flag, ep, 1)
        if c == 0:  # 0 rows after a timeout: counts that never came are not trusted
            for le in range(self.el):
                ex = s * self.el + le
                total = sum(me.counts[r][ex] for r in range(self.world)) if ok else 0
                me.masked_m[le] = min(total, self.max_m)
        seen = [0] * self.e
        for slot, ex in enumerate(ids):  # the model gives CTA c every grid-th slot
            if not 0 <= ex < self.e:
                continue
            row = sum(me.counts[r][ex] for r in range(s)) + seen[ex]
            seen[ex] += 1
            if slot % self.grid != c:
                continue
            if not ok or row >= self.max_m:
                me.slot_dest[slot] = -1
                continue
            me.slot_dest[slot] = row
            owner, le = divmod(ex, self.el)
            self.mem[owner].x_recv[(le, row)] = (ep, s, slot)
            yield
        for r in range(self.world):
            self.mem[r].dispatch_arrive[s] += 1
            yield
        if c == self.grid - 1:
            yield from wait_all(me, me.dispatch_arrive, ep * self.grid, 2)
            me.epoch = ep

    def gemm_cta(self, s: int, c: int):
        me = self.mem[s]
        for le in range(self.el):
            for row in range(c, me.masked_m[le], self.grid):
                if me.status == 0:
                    assert me.x_recv[(le, row)][0] == me.epoch, "a row of another forward"
                yield

    def combine_cta(self, s: int, c: int, ids: list[int], k: int):
        me, ep = self.mem[s], self.mem[s].epoch
        for le in range(self.el):
            for row in range(c, me.masked_m[le], self.grid):
                got_ep, src, slot = me.x_recv[(le, row)]
                if me.status == 0:
                    assert got_ep == ep, "row source overwritten before the combine read it"
                self.mem[src].combine_recv[slot] = (ep, s, le * self.max_m + row)
                yield
        for r in range(self.world):
            self.mem[r].combine_arrive[s] += 1
            yield
        ok = yield from wait_all(me, me.combine_arrive, ep * self.grid, 3)
        for slot in range(c, len(ids), self.grid):  # the sum reads every kept slot's row
            if ok and me.status == 0 and me.slot_dest[slot] >= 0:
                got = me.combine_recv[slot]
                assert got[0] == ep, "a slot's row is stale or was overwritten early"
                self.mem[s].combine_recv[slot] = got  # read
            yield

    def run(self, routings: list[list[list[int]]], k: int, rng: random.Random, absent=()):
        """routings[s][f]: rank s's flat ids in forward f. Returns each rank's per-forward
        (slot_dest, the combine rows' owners) for the ranks that ran."""
        streams = {}
        for s in range(self.world):
            if s in absent:
                continue
            kernels = []
            for ids in routings[s]:
                kernels.append(lambda c, s=s, ids=ids: self.dispatch_cta(s, c, ids))
                kernels.append(lambda c, s=s: self.gemm_cta(s, c))
                kernels.append(lambda c, s=s, ids=ids: self.combine_cta(s, c, ids, k))
            streams[s] = kernels
        running = {s: [] for s in streams}
        position = dict.fromkeys(streams, -1)
        seen: dict[int, list] = {s: [] for s in streams}
        while True:
            for s, kernels in streams.items():
                if not running[s] and position[s] + 1 < len(kernels):
                    if position[s] >= 0 and position[s] % 3 == 2:  # a forward ended
                        seen[s].append(self.snapshot(s))
                    position[s] += 1
                    running[s] = [kernels[position[s]](c) for c in range(self.grid)]
            live = [(s, g) for s in streams for g in running[s]]
            if not live:
                break
            s, g = rng.choice(live)
            try:
                next(g)
            except StopIteration:
                running[s].remove(g)
        for s in streams:
            seen[s].append(self.snapshot(s))
        return seen

    def snapshot(self, s: int) -> tuple:
        me = self.mem[s]
        return list(me.slot_dest), {slot: v[1:] for slot, v in me.combine_recv.items()}


@pytest.mark.parametrize("seed", range(6))
def test_forwards_in_random_interleavings(seed: int) -> None:
    rng = random.Random(seed)
    world, e, k, tmax, forwards = rng.choice([(2, 4, 2, 5, 3), (3, 6, 2, 4, 3), (4, 8, 3, 3, 2)])
    grid = rng.choice([1, 2, 3])
    model = Model(world, e, world * tmax, tmax * k, grid)
    routings = [[[x for _ in range(rng.choice([0, 1, tmax])) for x in rng.sample(range(e), k)]
                 for _ in range(forwards)] for _ in range(world)]  # fmt: skip
    seen = model.run(routings, k, rng)
    for f in range(forwards):
        place = dispatch_placement(
            [torch.tensor(routings[s][f], dtype=torch.int32).reshape(-1, k) for s in range(world)],
            e, world * tmax,
        )  # fmt: skip
        for s in range(world):
            dest, _ = seen[s][f]
            want = place.dest[s][..., 2].reshape(-1).tolist()
            assert dest[: len(want)] == want
    for mem in model.mem:
        assert mem.status == 0 and mem.epoch == forwards


@pytest.mark.parametrize("seed", range(3))
def test_an_absent_rank_is_named_not_waited_for(seed: int) -> None:
    rng = random.Random(seed)
    world, e, k = 3, 6, 2
    model = Model(world, e, 12, 8, 2)
    routings = [[[x for _ in range(3) for x in rng.sample(range(e), k)]] * 2 for _ in range(world)]
    model.run(routings, k, rng, absent=(2,))  # returns: no hang
    for s in (0, 1):
        assert model.mem[s].status == encode_status(STATUS_TIMEOUT, 1, 2)
