#!/usr/bin/env python3
"""Generate shunt's conformance corpus: plans of the classes real MSCCL++ plans use, written
for testing the executor (not shipped). CI writes them into the build folder and verifies
each with `shunt-plan verify` at several sizes, and the GPU check runs them on a GPU.

    python3 scripts/gen_corpus.py --out DIR      write every corpus plan into DIR
    python3 scripts/gen_corpus.py --list         print the plan names and what each exercises

Classes (each at 2, 4 and 8 ranks, in place and out of place; the memory and NVLS allreduce and
the memory allgather also at 16 and 32 ranks in place, every peer named in one op; the NVLS
allreduce through scratch at 2 and 4 ranks only):
  zc_mem_allreduce   zero-copy allreduce over memory channels naming the input buffer `i`:
                     rank r reads chunk r of every peer's input (rre), keeps the sum in its own
                     input, then writes it into every peer's input (put). In place, `i` is the
                     user's output buffer on every rank: results written through `i` must land
                     in the output, and peers' `i` must be their output (docs/plan-format.md §4.4).
  zc_port_allreduce  as zc_mem_allreduce, but the sums go to the peers' inputs through port
                     channels (put-with-signal, then flush): the proxy must address a peer's
                     `i` the same way.
  zc_nvls_allreduce  switch channels bound to `i` over every rank: rank r multicast
                     load-reduce-stores chunk r (glres) of every member's input.
  zc_mem_allgather   zero-copy allgather: rank r reads every peer's input (get) into its
                     output. In place, a peer's `i` is its slice of its output (at peer·size).
  zc_nvls_allgather  switch channels bound to `o`: rank r multicast-stores its slice (gstore).
  bar_allreduce      blocks of a rank meet at a device-wide barrier: each reduces its slice of
                     chunk r (rre), and after the barrier sends another block's slice (put).
  sem_allreduce      semaphores order blocks of a rank: block 0 reduces chunk r and releases one
                     semaphore per other block, each of which acquires its own and sends a slice.
  sem_nvls_allreduce MSCCL++'s NVLS allreduce through a single scratch, three blocks a rank in
                     stages that semaphores order: block 0 copies the input into scratch and
                     meets every peer; block 1 multicast-reduces chunk r of every member's
                     scratch (glres over a switch channel bound to `s`) and signals; block 2
                     waits for those signals and copies the scratch out. A peer's glres of the
                     next call comes after its block 0 met this rank in that call: only the
                     semaphore orders it after this rank's copy out.
  pipe_nvls_allreduce  the same with every block's stages as a `pipeline` body, one window of
                     every chunk per iteration, as MSCCL++'s DSL writes it.
  pipe_allreduce     a `pipeline` (iter_context) with reuse_resources: every window of every chunk
                     goes through peers' scratch only (put, re, put, copy), a signal round per
                     window, so scratch holds one window at a time.
  pkt_port_allgather LL packets carried by the proxy: rank r packs its slice into its own scratch
                     (cpkt), puts those packets into its slot of every peer's scratch over port
                     channels (ppkt), unpacks the peers' slots (upkt), and flushes before it leaves. No signal: the packets' flags
                     are the only sync, so the proxy (or the network) must land whole words.
  zc_mem_reducescatter  zero-copy reducescatter over memory channels: rank r sums chunk r+1 of
                     every rank's input (rre) and puts the sum straight into the output of its
                     owner. In place a peer's output is its input's own chunk (docs/plan-format.md §4.4).
  port_reducescatter as zc_mem_reducescatter, the sum carried into the owner's output by the
                     proxy (put-with-signal, the owner waits on it, then flush).
  tbg_pkt_reducescatter  MSCCL++'s DSL shape (LL): every rank sends its peers' chunks as packets
                     (ppkt); a thread-block group of two reduces half of the peers' packets into
                     the chunk and into a packet copy of it (recpkt), then the group of every
                     block unpacks its slice of that copy (upkt) and adds the other peers'
                     packets (repkt), with no nop in between (the flags order them).
  zc_mem_alltoall    rank r reads chunk r of every peer's input (get) into its output; in place
                     each rank first stages its input in scratch, chunk by chunk with the same
                     slices its peers read, and they read that.
  port_alltoall      rank r puts its chunk p into peer p's output through the proxy (pws), waits
                     for its own n-1 chunks and flushes; in place from a scratch copy, after a
                     round that tells every peer has made its copy.
  chain_reduce       NCCL's chain to the root: the last rank puts its input into the next one's
                     scratch, each rank between adds its input and passes the partial sum on
                     (res), the root adds its own into its output and releases every rank.
  pkt_port_reduce    every rank but the root sends its input as packets through the proxy
                     (cpkt, ppkt over a port channel) into its slot on the root's scratch; the
                     root adds them to its input into its output (repkt) and signals every rank.
  zc_mem_broadcast   every rank but the root reads the root's input (get) into its output; one
                     plan for both modes, as every broadcast plan (verify runs it both ways).
  port_broadcast     the root puts its input into every peer's output through the proxy (pws),
                     once each peer signalled that it is inside the call.
  mn_reducescatter   two nodes of n/2 ranks (4 and 8 ranks): inside a node the peers' chunks go
                     as packets over memory channels, the node's partial sum of the other
                     node's counterpart chunk goes as packets through the proxy (rppkt over a
                     port channel), and the owner adds both (repkt).
Standard library only; the builder is scripts/gen_plans.py's.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_plans as gp  # noqa: E402

RANKS = (2, 4, 8)
BLOCKS = 4  # threadblocks per rank; chunk r of every buffer is cut into BLOCKS tbg slices


class SwitchGpu(gp.Gpu):
    """A Gpu that can also declare switch channels (multicast groups over every rank)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.switch = []  # [buffer_type]

    def switch_channel(self, btype, nth):
        ids = [i for i, t in enumerate(self.switch) if t == btype]
        while len(ids) <= nth:
            self.switch.append(btype)
            ids.append(len(self.switch) - 1)
        return ids[nth]

    def to_json(self):
        j = super().to_json()
        j["semaphores"] = getattr(self, "semaphores", [])
        n = len(self.plan_ranks)
        for t in self.switch:
            j["channels"].append({"channel_type": "switch", "buffer_type": t,
                                  "rank_groups": [{"size": n, "ranks": list(self.plan_ranks)}]})
        return j


class SwitchBlock(gp.Block):
    def switch(self, btype, nth, index, size=1):
        gid = self.gpu.switch_channel(btype, nth)
        table = self.channels.setdefault("switch", [])
        if gid not in table:
            table.append(gid)
        return {"switch_channel_id": table.index(gid), "index": index, "size": size}

    def to_json(self):
        j = super().to_json()
        if "switch" in self.channels:
            j["channels"].append({"channel_type": "switch", "channel_ids": self.channels["switch"]})
        return j


def make_plan(family, collective, inplace, n, chunks):
    name = "%s_%dr_%s" % (family, n, "inplace" if inplace else "outofplace")
    plan = gp.Plan(name, collective, "Simple", inplace, n, chunks)
    plan.gpus = []
    for r in range(n):
        g = SwitchGpu(r, *chunks)
        g.plan_ranks = range(n)
        g.block = (lambda g=g: _block(g))
        plan.gpus.append(g)
    plan.min_size = 0
    plan.max_size = 1 << 40
    return plan


def _block(g):
    b = SwitchBlock(g, len(g.blocks))
    g.blocks.append(b)
    return b


def rounds(b, ps, j, relaxed=False):
    b.sync("rlxsignal" if relaxed else "signal", "memory", ps, j)
    b.sync("rlxwait" if relaxed else "wait", "memory", ps, j)
    b.nop()


def reduce_chunk(b, x, dst, r, ps, j, tbg=None):
    """dst = chunk r of buffer x, here and on every peer, summed (rre over memory channels)."""
    b.data("rre", [gp.local(x, r)] + [b.remote("memory", p, x, r) for p in ps], [gp.local(dst, r)],
           "memory", ps, j, tbg=tbg)


def zc_mem_allreduce(n, inplace):
    plan = make_plan("zc_mem_allreduce", "allreduce", inplace, n, (n, n, 0))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            # The sum of chunk r, kept in this rank's own input (as MSCCL++'s DSL writes it).
            reduce_chunk(b, "i", "i", r, ps, j, tbg=(j, BLOCKS))
            b.nop()
            b.data("put", [gp.local("i", r) for _ in ps], [b.remote("memory", p, "i", r) for p in ps],
                   "memory", ps, j, tbg=(j, BLOCKS))
            if not inplace:
                b.data("copy", [gp.local("i", r)], [gp.local("o", r)], tbg=(j, BLOCKS))
            b.nop()
            rounds(b, ps, j)
            if not inplace:
                # The peers' sums arrived in our input: move them to the output.
                for p in ps:
                    b.data("copy", [gp.local("i", p)], [gp.local("o", p)], tbg=(j, BLOCKS))
    return plan


def zc_port_allreduce(n, inplace):
    plan = make_plan("zc_port_allreduce", "allreduce", inplace, n, (n, n, 0))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j)
            reduce_chunk(b, "i", "i", r, ps, j, tbg=(j, BLOCKS))
            b.nop()
            # Every peer has read our chunk r before we overwrite theirs: a memory round.
            rounds(b, ps, j)
            b.data("pws", [gp.local("i", r) for _ in ps], [b.remote("port", p, "i", r) for p in ps],
                   "port", ps, j, tbg=(j, BLOCKS))
            b.sync("wait", "port", ps, j)
            b.sync("flush", "port", ps, j)
            b.nop()
            if not inplace:
                for q in range(n):
                    b.data("copy", [gp.local("i", q)], [gp.local("o", q)], tbg=(j, BLOCKS))
    return plan


def zc_nvls_allreduce(n, inplace):
    plan = make_plan("zc_nvls_allreduce", "allreduce", inplace, n, (n, n, 0))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            sw = b.switch("i", j, r)
            op = {"name": "glres", "src_buff": [sw], "dst_buff": [dict(sw)], "channel_type": "switch",
                  "reduce_op": "sum", "tbg_info": {"tb_id": j, "tbg_size": BLOCKS}}
            b.ops.append(op)
            b.nop()
            rounds(b, ps, j)
            if not inplace:
                for q in range(n):
                    b.data("copy", [gp.local("i", q)], [gp.local("o", q)], tbg=(j, BLOCKS))
    return plan


def zc_mem_allgather(n, inplace):
    plan = make_plan("zc_mem_allgather", "allgather", inplace, n, (1, n, 0))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            if not inplace:
                b.data("copy", [gp.local("i", 0)], [gp.local("o", r)], tbg=(j, BLOCKS))
            b.data("get", [b.remote("memory", p, "i", 0) for p in ps], [gp.local("o", p) for p in ps],
                   "memory", ps, j, tbg=(j, BLOCKS))
            b.nop()
            # Nobody leaves (and lets its input change) before every peer has read it.
            rounds(b, ps, j)
    return plan


def zc_nvls_allgather(n, inplace):
    plan = make_plan("zc_nvls_allgather", "allgather", inplace, n, (1, n, 0))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            src = gp.local("o", r) if inplace else gp.local("i", 0)
            op = {"name": "gstore", "src_buff": [src], "dst_buff": [b.switch("o", j, r)],
                  "channel_type": "switch", "tbg_info": {"tb_id": j, "tbg_size": BLOCKS}}
            b.ops.append(op)
            b.nop()
            rounds(b, ps, j)
    return plan


def bar_allreduce(n, inplace):
    plan = make_plan("bar_allreduce", "allreduce", inplace, n, (n, n, 0))
    x = gp.user_buf(inplace)
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j)
            reduce_chunk(b, x, "o", r, ps, j, tbg=(j, BLOCKS))
            # Every block's slice of o[r] is complete past the barrier: send another block's.
            b.ops.append({"name": "barrier", "barrier_id": 0, "num_threadblocks": BLOCKS})
            k = (j + 1) % BLOCKS
            b.data("put", [gp.local("o", r) for _ in ps], [b.remote("memory", p, "o", r) for p in ps],
                   "memory", ps, j, tbg=(k, BLOCKS))
            b.nop()
            rounds(b, ps, j)
    return plan


PIPE_UNIT = 4096  # bytes per pipeline window


def pipe_allreduce(n, inplace):
    plan = make_plan("pipe_allreduce", "allreduce", inplace, n, (n, n, 2 * (n - 1)))
    plan.reuse_resources = True
    x = gp.user_buf(inplace)
    res = n - 1  # scratch slots [0, n-1): contributions; [n-1, 2n-2): results
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        b = g.block()
        body = gp.Block(g, -1)  # collects the pipeline's ops with the block's tables
        body.channels, body.rbufs = b.channels, b.rbufs
        rounds(body, ps, 0)  # the peers are done with the last window's scratch
        body.data("put", [gp.local(x, p) for p in ps], [body.remote("memory", p, "s", gp.slot(p, r, n)) for p in ps],
                  "memory", ps, 0)
        body.nop()
        rounds(body, ps, 0)
        body.data("re", [gp.local(x, r)] + [gp.local("s", gp.slot(r, q, n)) for q in ps], [gp.local("o", r)])
        body.nop()
        body.data("put", [gp.local("o", r) for _ in ps],
                  [body.remote("memory", p, "s", res + gp.slot(p, r, n)) for p in ps], "memory", ps, 0)
        body.nop()
        rounds(body, ps, 0)
        for q in ps:
            body.data("copy", [gp.local("s", res + gp.slot(r, q, n))], [gp.local("o", q)])
        body.nop()
        b.ops.append({"name": "pipeline", "iter_context": {"unit_size": PIPE_UNIT, "num_chunks": 1},
                      "ops": body.ops})
    return plan


def sem_allreduce(n, inplace):
    plan = make_plan("sem_allreduce", "allreduce", inplace, n, (n, n, 0))
    x = gp.user_buf(inplace)
    senders = BLOCKS - 1
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        g.semaphores = [{"init_value": 0} for _ in range(senders)]
        b = g.block()
        rounds(b, ps, 0)
        reduce_chunk(b, x, "o", r, ps, 0)
        b.nop()
        b.ops.append({"name": "sem_release", "semaphore_ids": list(range(senders))})
        b.nop()
        rounds(b, ps, 0)
        for j in range(1, BLOCKS):
            b = g.block()
            b.ops.append({"name": "sem_acquire", "semaphore_ids": [j - 1]})
            b.nop()
            b.data("put", [gp.local("o", r) for _ in ps], [b.remote("memory", p, "o", r) for p in ps],
                   "memory", ps, j, tbg=(j - 1, senders))
            b.nop()
            rounds(b, ps, j)
    return plan


def nvls_scratch_allreduce(n, inplace, pipe):
    """MSCCL++'s NVLS allreduce through scratch, three blocks a rank in stages that semaphores
    order: block 0 copies the input into scratch and meets every peer; block 1, after it,
    multicast-reduces chunk r of every member's scratch (glres) and signals; block 2, after
    that, waits for every peer's signal and copies the scratch out. `pipe`: the stages as the
    body of a `pipeline` (one window of every chunk per iteration), as its DSL writes them."""
    family = "pipe_nvls_allreduce" if pipe else "sem_nvls_allreduce"
    plan = make_plan(family, "allreduce", inplace, n, (n, n, n))
    x = gp.user_buf(inplace)
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        g.semaphores = [{"init_value": 0}, {"init_value": 0}]
        blocks = [g.block() for _ in range(3)]
        bodies = blocks
        if pipe:  # each body collects its ops with its block's tables
            bodies = []
            for b in blocks:
                body = SwitchBlock(g, -1)
                body.channels, body.rbufs = b.channels, b.rbufs
                bodies.append(body)
        b0, b1, b2 = bodies
        for q in range(n):
            b0.data("copy", [gp.local(x, q)], [gp.local("s", q)])
        b0.nop()
        rounds(b0, ps, 0)
        b0.ops.append({"name": "sem_release", "semaphore_ids": [0]})
        b1.ops.append({"name": "sem_acquire", "semaphore_ids": [0]})
        b1.nop()
        sw = b1.switch("s", 0, r)
        b1.ops.append({"name": "glres", "src_buff": [sw], "dst_buff": [dict(sw)], "channel_type": "switch",
                       "reduce_op": "sum"})
        b1.nop()
        b1.sync("signal", "memory", ps, 1)
        b1.ops.append({"name": "sem_release", "semaphore_ids": [1]})
        b2.ops.append({"name": "sem_acquire", "semaphore_ids": [1]})
        b2.sync("wait", "memory", ps, 1)
        b2.nop()
        for q in range(n):
            b2.data("copy", [gp.local("s", q)], [gp.local("o", q)])
        b2.nop()
        if pipe:
            for b, body in zip(blocks, bodies):
                b.ops.append({"name": "pipeline", "iter_context": {"unit_size": PIPE_UNIT, "num_chunks": 1},
                              "ops": body.ops})
    return plan


def sem_nvls_allreduce(n, inplace):
    return nvls_scratch_allreduce(n, inplace, False)


def pipe_nvls_allreduce(n, inplace):
    return nvls_scratch_allreduce(n, inplace, True)


def pkt_port_allgather(n, inplace):
    mine = n - 1  # scratch slot of our own packets; slots 0..n-2 receive the peers'
    plan = make_plan("pkt_port_allgather", "allgather", inplace, n, (1, n, n))
    plan.protocol = "LL"
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            if not inplace:
                b.data("copy", [gp.local("i", 0)], [gp.local("o", r)], tbg=(j, BLOCKS))
            b.data("cpkt", [gp.own_slice(r, inplace)], [gp.local("s", mine)], tbg=(j, BLOCKS))
            b.nop()
            b.data("ppkt", [gp.local("s", mine) for _ in ps],
                   [b.remote("port", p, "s", gp.slot(p, r, n)) for p in ps], "port", ps, 0, tbg=(j, BLOCKS))
            for p in ps:
                b.data("upkt", [gp.local("s", gp.slot(r, p, n))], [gp.local("o", p)], tbg=(j, BLOCKS))
            b.sync("flush", "port", ps, 0)
    return plan


def rs_round(b, ps, j, ctype="memory"):
    b.sync("signal", ctype, ps, j)
    b.sync("wait", ctype, ps, j)
    b.nop()


def zc_mem_reducescatter(n, inplace):
    plan = make_plan("zc_mem_reducescatter", "reducescatter", inplace, n, (n, 1, 1))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        q = (r + 1) % n  # the chunk this rank reduces, and its owner
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            b.data("rre", [gp.local("i", q)] + [b.remote("memory", p, "i", q) for p in ps], [gp.local("s", 0)],
                   "memory", ps, j, tbg=(j, BLOCKS))
            b.nop()
            # The owner's output: in place, chunk q of its input.
            out = ("i", q) if inplace else ("o", 0)
            b.data("put", [gp.local("s", 0)], [b.remote("memory", q, *out)], "memory", [q], j, tbg=(j, BLOCKS))
            b.nop()
            # Nobody leaves (its output complete, its input read) before every peer is done.
            rounds(b, ps, j)
    return plan


def port_reducescatter(n, inplace):
    plan = make_plan("port_reducescatter", "reducescatter", inplace, n, (n, 1, 1))
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        q, prev = (r + 1) % n, (r - 1) % n
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            b.data("rre", [gp.local("i", q)] + [b.remote("memory", p, "i", q) for p in ps], [gp.local("s", 0)],
                   "memory", ps, j, tbg=(j, BLOCKS))
            b.nop()
            out = ("i", q) if inplace else ("o", 0)
            b.data("pws", [gp.local("s", 0)], [b.remote("port", q, *out)], "port", [q], j, tbg=(j, BLOCKS))
            b.sync("wait", "port", [prev], j)
            b.sync("flush", "port", [q], j)
            b.nop()
            rounds(b, ps, j)
    return plan


def tbg_pkt_reducescatter(n, inplace):
    own = n - 1  # scratch slot of the packet copy of this rank's partial sum
    plan = make_plan("tbg_pkt_reducescatter", "reducescatter", inplace, n, (n, 1, n))
    plan.protocol = "LL"
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        first, rest = ps[:max(1, len(ps) // 2)], ps[max(1, len(ps) // 2):]
        out = gp.rs_out(r, inplace)
        for j in range(BLOCKS):
            b = g.block()
            b.data("ppkt", [gp.local("i", p) for p in ps], [b.remote("memory", p, "s", gp.slot(p, r, n)) for p in ps],
                   "memory", ps, 0, tbg=(j, BLOCKS))
            if j < 2:
                b.data("recpkt", [gp.local("i", r)] + [gp.local("s", gp.slot(r, p, n)) for p in first],
                       [out, gp.local("s", own)], tbg=(j, 2))
            b.data("upkt", [gp.local("s", own)], [out], tbg=(j, BLOCKS))
            if rest:
                b.data("repkt", [out] + [gp.local("s", gp.slot(r, p, n)) for p in rest], [out], tbg=(j, BLOCKS))
    return plan


def mn_reducescatter(n, inplace):
    m = n // 2  # ranks per node; rank = node * m + local rank; 2 ranks: one per node
    # Scratch: packets [0, m-1) the node peers' pieces of this rank's chunk, [m-1, 2m-2) their
    # pieces of the counterpart's chunk, 2m-2 the node's partial of that chunk, 2m-1 the
    # counterpart's partial of this rank's chunk; data at 4m (clear of the packets' bytes) the
    # partial as data.
    part, recv, tmp = 2 * m - 2, 2 * m - 1, 4 * m
    plan = make_plan("mn_reducescatter", "reducescatter", inplace, n, (n, 1, tmp + 1))
    plan.protocol = "LL"

    def node_peers(r):
        return [r - r % m + (r % m + k) % m for k in range(1, m)]

    def counterpart(r):
        return (r + m) % n

    def slot(owner, sender):
        return (sender % m - owner % m) % m - 1

    for g in plan.gpus:
        r = g.rank
        lps, cp = node_peers(r), counterpart(r)
        out = gp.rs_out(r, inplace)
        for j in range(BLOCKS):
            b = g.block()
            if lps:
                src, dst, chans = [], [], []
                for p in lps:
                    src += [gp.local("i", p), gp.local("i", counterpart(p))]
                    dst += [b.remote("memory", p, "s", slot(p, r)), b.remote("memory", p, "s", m - 1 + slot(p, r))]
                    chans += [p, p]
                b.data("ppkt", src, dst, "memory", chans, 0, tbg=(j, BLOCKS))
            if lps:
                b.data("recpkt", [gp.local("i", cp)] + [gp.local("s", m - 1 + slot(r, p)) for p in lps],
                       [gp.local("s", tmp), gp.local("s", part)], tbg=(j, BLOCKS))
            else:  # one rank per node: the partial is this rank's own piece
                b.data("cpkt", [gp.local("i", cp)], [gp.local("s", part)], tbg=(j, BLOCKS))
            b.data("rppkt", [gp.local("s", part)], [b.remote("port", cp, "s", recv)], "port", [cp], 0,
                   tbg=(j, BLOCKS))
            b.data("repkt", [gp.local("i", r)] + [gp.local("s", slot(r, p)) for p in lps] + [gp.local("s", recv)],
                   [out], tbg=(j, BLOCKS))
            # The proxy reads our packets: they must not change before it is done.
            b.sync("flush", "port", [cp], 0)
    return plan

def zc_mem_broadcast(n, inplace=False):
    """Every rank but the root reads the root's input (get) into its output."""
    plan = make_plan("zc_mem_broadcast", "broadcast", False, n, (1, 1, 0))
    plan.name = "zc_mem_broadcast_%dr" % n
    root = gp.BCAST_ROOT
    for g in plan.gpus:
        r = g.rank
        ps = gp.peers(r, n) if r == root else [root]
        for j in range(BLOCKS):
            b = g.block()
            rounds(b, ps, j, relaxed=True)
            if r == root:
                b.data("copy", [gp.local("i", 0)], [gp.local("o", 0)], tbg=(j, BLOCKS))
            else:
                b.data("get", [b.remote("memory", root, "i", 0)], [gp.local("o", 0)], "memory", [root], j,
                       tbg=(j, BLOCKS))
            b.nop()
            # The root's input stays unchanged until every peer has read it.
            rounds(b, ps, j)
    return plan


def port_broadcast(n, inplace=False):
    """The root puts its input into every peer's output through the proxy, once each peer said
    it is inside the call; the put's signal tells the peer the data has landed."""
    plan = make_plan("port_broadcast", "broadcast", False, n, (1, 1, 0))
    plan.name = "port_broadcast_%dr" % n
    root = gp.BCAST_ROOT
    for g in plan.gpus:
        r = g.rank
        for j in range(BLOCKS):
            b = g.block()
            if r == root:
                ps = gp.peers(r, n)
                b.sync("wait", "port", ps, j)
                b.nop()
                b.data("copy", [gp.local("i", 0)], [gp.local("o", 0)], tbg=(j, BLOCKS))
                b.nop()
                b.data("pws", [gp.local("i", 0) for _ in ps], [b.remote("port", p, "o", 0) for p in ps], "port",
                       ps, j, tbg=(j, BLOCKS))
                b.sync("flush", "port", ps, j)
            else:
                b.sync("signal", "port", [root], j)
                b.sync("wait", "port", [root], j)
                b.nop()
    return plan


def zc_mem_alltoall(n, inplace):
    """Rank r reads chunk r of every peer's input (get) into its output chunk of that peer. In
    place a rank's output overwrites the input its peers read: each first stages its input in
    scratch, and the peers read that."""
    plan = make_plan("zc_mem_alltoall", "alltoall", inplace, n, (n, n, n if inplace else 0))
    src = "s" if inplace else "i"
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            if inplace:
                # Chunk by chunk, so that this block stages the very slices it sends.
                for q in range(n):
                    b.data("copy", [gp.local("i", q)], [gp.local("s", q)], tbg=(j, BLOCKS))
                b.nop()
            rounds(b, ps, j, relaxed=not inplace)
            b.data("get", [b.remote("memory", p, src, r) for p in ps], [gp.local("o", p) for p in ps], "memory", ps,
                   j, tbg=(j, BLOCKS))
            if not inplace:
                b.data("copy", [gp.local("i", r)], [gp.local("o", r)], tbg=(j, BLOCKS))
            b.nop()
            # Nobody leaves (and lets its source change) before every peer has read it.
            rounds(b, ps, j)
    return plan


def port_alltoall(n, inplace):
    """Rank r puts its chunk p into peer p's output chunk r through the proxy (pws), waits for
    the n-1 chunks of its own, then flushes. In place the chunks leave from a scratch copy, and
    a first round makes sure every peer has made its copy before its output is written."""
    plan = make_plan("port_alltoall", "alltoall", inplace, n, (n, n, n if inplace else 0))
    src = "s" if inplace else "i"
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            if inplace:
                # Chunk by chunk, so that this block stages the very slices it sends.
                for q in range(n):
                    b.data("copy", [gp.local("i", q)], [gp.local("s", q)], tbg=(j, BLOCKS))
                b.nop()
            rounds(b, ps, j, relaxed=not inplace)
            if not inplace:
                b.data("copy", [gp.local("i", r)], [gp.local("o", r)], tbg=(j, BLOCKS))
                b.nop()
            b.data("pws", [gp.local(src, p) for p in ps], [b.remote("port", p, "o", r) for p in ps], "port", ps, j,
                   tbg=(j, BLOCKS))
            b.sync("wait", "port", ps, j)
            b.sync("flush", "port", ps, j)
            b.nop()
    return plan


def chain_reduce(n, inplace=False):
    """NCCL's chain: rank n-1 sends its input to rank n-2's scratch, each rank between adds its
    input to what arrived and sends the partial sum on (res), the root adds its own into its
    output. Every rank first tells the one that sends to it that its scratch is free; the root
    ends the call for all with a signal once the sum is in its output."""
    plan = make_plan("chain_reduce", "reduce", False, n, (1, 1, 1))
    plan.name = "chain_reduce_%dr" % n
    root = gp.REDUCE_ROOT
    for g in plan.gpus:
        r = g.rank
        prev = r + 1 if r + 1 < n else None  # sends to this rank
        nxt = r - 1 if r > 0 else None       # this rank sends to it
        for j in range(BLOCKS):
            b = g.block()
            if prev is not None:
                b.sync("rlxsignal", "memory", [prev], j)
            if nxt is not None:
                b.sync("rlxwait", "memory", [nxt], j)
            if prev is not None:
                b.sync("wait", "memory", [prev], j)
            b.nop()
            if r == root:
                b.data("re", [gp.local("i", 0), gp.local("s", 0)], [gp.local("o", 0)], tbg=(j, BLOCKS))
                b.nop()
                b.sync("signal", "memory", gp.peers(r, n), j)
                continue
            if prev is None:
                b.data("put", [gp.local("i", 0)], [b.remote("memory", nxt, "s", 0)], "memory", [nxt], j,
                       tbg=(j, BLOCKS))
            else:
                b.data("res", [gp.local("i", 0), gp.local("s", 0)],
                       [gp.local("s", 0), b.remote("memory", nxt, "s", 0)], "memory", [nxt], j, tbg=(j, BLOCKS))
            b.nop()
            b.sync("signal", "memory", [nxt], j)
            b.sync("wait", "memory", [root], j)
    return plan


def pkt_port_reduce(n, inplace=False):
    """LL packets carried by the proxy to the root: every other rank packs its input into its own
    scratch (cpkt) and puts the packets into its slot on the root's scratch (ppkt over a port
    channel); the root adds the packet streams to its input into its output (repkt) and then
    signals every rank, which flushes and waits for it."""
    mine = n - 1  # a non-root's own packets; the root's slots 0..n-2 receive the peers'
    plan = make_plan("pkt_port_reduce", "reduce", False, n, (1, 1, n))
    plan.name = "pkt_port_reduce_%dr" % n
    plan.protocol = "LL"
    root = gp.REDUCE_ROOT
    for g in plan.gpus:
        r, ps = g.rank, gp.peers(g.rank, n)
        for j in range(BLOCKS):
            b = g.block()
            if r == root:
                b.data("repkt", [gp.local("i", 0)] + [gp.local("s", gp.slot(r, q, n)) for q in ps],
                       [gp.local("o", 0)], tbg=(j, BLOCKS))
                b.nop()
                b.sync("signal", "port", ps, j)
                continue
            b.data("cpkt", [gp.local("i", 0)], [gp.local("s", mine)], tbg=(j, BLOCKS))
            b.nop()
            b.data("ppkt", [gp.local("s", mine)], [b.remote("port", root, "s", gp.slot(root, r, n))], "port",
                   [root], j, tbg=(j, BLOCKS))
            b.sync("flush", "port", [root], j)
            b.sync("wait", "port", [root], j)
    return plan


CLASSES = (zc_mem_allreduce, zc_port_allreduce, zc_nvls_allreduce, zc_mem_allgather, zc_nvls_allgather,
           bar_allreduce, sem_allreduce, pipe_allreduce, pkt_port_allgather, zc_mem_reducescatter,
           port_reducescatter, tbg_pkt_reducescatter, mn_reducescatter, zc_mem_alltoall, port_alltoall)


# Rank counts whose ops name more peers than MSCCL++'s own executor takes (8 channels per op):
# every peer in one op, as its DSL writes plans for 16 and 32 ranks.
LARGE_RANKS = (16, 32)
LARGE_CLASSES = (zc_mem_allreduce, zc_nvls_allreduce, zc_mem_allgather)


# MSCCL++'s NVLS allreduce through scratch, its stages ordered by semaphores: at 2 and 4 ranks
# (more ranks add peers to the same ops).
NVLS_SCRATCH_RANKS = (2, 4)
NVLS_SCRATCH_CLASSES = (sem_nvls_allreduce, pipe_nvls_allreduce)


# One broadcast or reduce plan serves both modes (verify runs it in place and out of place,
# from every root).
BCAST_CLASSES = (zc_mem_broadcast, port_broadcast, chain_reduce, pkt_port_reduce)


def all_plans():
    plans = []
    for cls in CLASSES:
        for n in RANKS:
            for inplace in (True, False):
                plans.append(cls(n, inplace))
    for cls in NVLS_SCRATCH_CLASSES:
        for n in NVLS_SCRATCH_RANKS:
            for inplace in (True, False):
                plans.append(cls(n, inplace))
    for cls in BCAST_CLASSES:
        for n in RANKS:
            plans.append(cls(n))
    for cls in LARGE_CLASSES:
        for n in LARGE_RANKS:
            plans.append(cls(n, True))
    return plans


def check_limits(plan):
    """shunt's executor limits (src/plan/check.h), wider than MSCCL++'s that the shipped plans
    keep to (gen_plans.check_limits)."""
    for gpu in plan.gpus:
        for b in gpu.blocks:
            assert len(b.ops) <= 256, (plan.name, "ops")
            assert all(len(v) <= 64 for v in b.channels.values()), (plan.name, "channels")
            assert all(len(v) <= 64 for v in b.rbufs.values()), (plan.name, "remote buffers")
            for op in b.ops:
                for key in ("channel_ids", "src_buff", "dst_buff"):
                    assert len(op.get(key, [])) <= 64, (plan.name, key)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--list", action="store_true", help="print the plan names")
    args = ap.parse_args()
    plans = all_plans()
    if args.list or not args.out:
        for p in plans:
            print(p.name)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for p in plans:
        check_limits(p)
        with open(os.path.join(args.out, p.name + ".json"), "w", newline="\n") as f:
            f.write(gp.render(p))
    print("wrote %d plans into %s" % (len(plans), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
