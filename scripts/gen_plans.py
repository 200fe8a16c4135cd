#!/usr/bin/env python3
"""Generate shunt's shipped execution plans (MSCCL++ JSON format) into plans/.

    python3 scripts/gen_plans.py              write every plan into plans/
    python3 scripts/gen_plans.py --out DIR    write them into DIR
    python3 scripts/gen_plans.py --check      exit 1 if plans/ differs from what this script writes
    python3 scripts/gen_plans.py --summary    print each plan's size range, blocks and chunks

Output is deterministic (fixed key order, indent 2, trailing newline), so CI regenerates the
plans and compares. Op semantics are those of the plan format (docs/plan-format.md);
the algorithms and size ranges are described in plans/README.md. Standard library only.
"""

import argparse
import json
import os
import sys
import tempfile

MiB = 1 << 20
GiB = 1 << 30

ALIGN = 16  # buffer_alignment: every offset and size is a multiple of it
THREADS = 1024
RANKS = (2, 4, 8)

# Size ranges (total bytes: allreduce = buffer size, allgather = output size). Per
# (collective, ranks, in-place) the memory families take disjoint ranges: for allreduce the
# one-hop packet family up to ALLPAIRS_MAX, LL up to LL_MAX,
# then for allreduce the scratch family up to SCRATCH_MAX, memory Simple above up to SIMPLE_MAX. Port Simple plans serve every size up to PORT_MAX:
# they need no placement, so they are what ranks each on a host of its own (or hosts of
# different sizes) run; on one host selection prefers the memory plans where they serve, so
# there the port plans take the sizes above SIMPLE_MAX. SHUNT_TUNING retunes them.
ALLPAIRS_MAX = 16 * 1024
LL_MAX = 1 * MiB
SCRATCH_MAX = 8 * MiB
SIMPLE_MAX = 64 * MiB
# Alltoall (out of place, in place): its Simple plans take over from LL lower down, in place
# the direct plan up to A2A_DIRECT_INPLACE_MAX (its scratch holds the whole message).
A2A_LL_MAX = {False: 16 * 1024, True: 16 * 1024}
A2A_DIRECT_INPLACE_MAX = 1 * MiB
# Alltoall LL serves small sizes only (up to A2A_LL_MAX): one block per peer, fewer blocks to
# schedule (measured on the host backend: 0.8x the time of 2-8 blocks per peer at 1-16 KiB).
A2A_LL_BLOCKS_PER_PEER = 1
PORT_MAX = 1 * GiB

# Threadblocks. LL plans give each peer a group of blocks; memory Simple and port plans
# cut every transfer into slices, one block per slice, each block talking to every peer.
LL_BLOCKS_PER_PEER = {2: 8, 4: 4, 8: 2}
# The one-hop packet allreduce moves little data: few blocks, each sending its slice of the
# whole buffer to every peer.
ALLPAIRS_BLOCKS = 2
SIMPLE_BLOCKS = {2: 16, 4: 24, 8: 32}
# Alltoall Simple: a group of blocks per peer, each moving its slice of the peer's block in
# A2A_ROUNDS rounds through one scratch slot per peer.
A2A_SIMPLE_BLOCKS_PER_PEER = {2: 8, 4: 4, 8: 2}
A2A_ROUNDS = 4
# Alltoall out of place: blocks each moving its slice of every peer's block.
A2A_DIRECT_BLOCKS = 8
# Broadcast Simple: block j of every rank moves slice j (the root's copy, the peers' reads).
BCAST_SIMPLE_BLOCKS = 8
PORT_BLOCKS = 8
# Alltoall port plans: rounds through scratch (16 ranks: fewer, to keep MSCCL++'s 64 ops per block
# with twice the ops per round).
A2A_PORT_ROUNDS = {2: 4, 4: 4, 8: 4, 16: 2}
# Ranks of the alltoall port plan for two nodes of 8 (placement free: port channels only).
A2A_PORT_MULTI = 16
SCRATCH_BLOCKS = {2: 8, 4: 8, 8: 8}
# Port allreduce reduces in rounds so that scratch holds one round, not the whole message.
PORT_ROUNDS = 4
# Multi-node plans: (nodes, ranks per node). Memory channels inside a node, port channels
# between nodes; one plan per collective and mode serves every size up to PORT_MAX.
MULTI = ((2, 2), (2, 4), (4, 2), (2, 8))
HIER_BLOCKS = 4


# ---------------------------------------------------------------------------------------
# Plan builder
# ---------------------------------------------------------------------------------------

def local(btype, index, size=1):
    return {"type": btype, "index": index, "size": size}


class Block:
    """One threadblock: its op list and its local channel and remote-buffer tables."""

    def __init__(self, gpu, tb_id):
        self.gpu = gpu
        self.id = tb_id
        self.ops = []
        self.channels = {}  # channel type -> [global channel id]
        self.rbufs = {}     # access channel type -> [global remote buffer id]

    def _chan(self, ctype, peer, nth):
        gid = self.gpu.channel_id(ctype, peer, nth)
        table = self.channels.setdefault(ctype, [])
        if gid not in table:
            table.append(gid)
        return table.index(gid)

    def remote(self, ctype, peer, btype, index, size=1):
        """Entry for buffer `btype` of rank `peer`, reached over `ctype`."""
        gid = self.gpu.remote_buffer(peer, btype, ctype)
        table = self.rbufs.setdefault(ctype, [])
        if gid not in table:
            table.append(gid)
        return {"buffer_id": table.index(gid), "index": index, "size": size}

    def nop(self):
        # One block barrier separates dependent ops; never two in a row.
        if self.ops and self.ops[-1]["name"] != "nop":
            self.ops.append({"name": "nop"})

    def sync(self, name, ctype, peers, nth):
        """signal / wait / flush on this block's `nth` channel to each of `peers`."""
        ids = [self._chan(ctype, p, nth) for p in peers]
        self.ops.append({"name": name, "channel_ids": ids, "channel_type": ctype})

    def round(self, peers, nth):
        """signal then wait on this block's `nth` memory channel to each of `peers`: every
        peer has reached the same point."""
        self.sync("signal", "memory", peers, nth)
        self.sync("wait", "memory", peers, nth)

    def data(self, name, src, dst, ctype=None, peers=None, nth=0, tbg=None):
        """A data op. `peers` (with `ctype`) names the channel of each remote entry: the
        block declares it, and port ops list it in channel_ids (thread i drives entry i)."""
        op = {"name": name, "src_buff": src, "dst_buff": dst}
        if peers is not None:
            ids = [self._chan(ctype, p, nth) for p in peers]
            if ctype == "port":
                op["channel_ids"] = ids
        if ctype is not None:
            op["channel_type"] = ctype
        if tbg is not None and tbg[1] > 1:
            op["tbg_info"] = {"tb_id": tbg[0], "tbg_size": tbg[1]}
        self.ops.append(op)

    def to_json(self):
        order = ("memory", "port")
        return {
            "id": self.id,
            "ops": self.ops,
            "channels": [{"channel_type": t, "channel_ids": self.channels[t]}
                         for t in order if t in self.channels],
            "remote_buffer_refs": [{"access_channel_type": t, "remote_buffer_ids": self.rbufs[t]}
                                   for t in order if t in self.rbufs],
        }


class Gpu:
    def __init__(self, rank, input_chunks, output_chunks, scratch_chunks):
        self.rank = rank
        self.chunks = (input_chunks, output_chunks, scratch_chunks)
        self.blocks = []
        self.connected = {}   # channel type -> connected_to list
        self.rbuf_list = []   # [{"rank", "type", "access_channel_types"}]

    def block(self):
        b = Block(self, len(self.blocks))
        self.blocks.append(b)
        return b

    def channel_id(self, ctype, peer, nth):
        """Global id of this rank's `nth` channel of `ctype` to `peer`, declared on first use.
        The k-th channel from a to b pairs with the k-th from b to a, so a block that uses
        channel nth=k on every rank talks to the blocks using nth=k on its peers."""
        lst = self.connected.setdefault(ctype, [])
        while lst.count(peer) <= nth:
            lst.append(peer)
        seen = -1
        for gid, p in enumerate(lst):
            if p == peer:
                seen += 1
                if seen == nth:
                    return gid
        raise AssertionError("unreachable")

    def remote_buffer(self, peer, btype, ctype):
        for gid, rb in enumerate(self.rbuf_list):
            if rb["rank"] == peer and rb["type"] == btype:
                if ctype not in rb["access_channel_types"]:
                    rb["access_channel_types"].append(ctype)
                return gid
        self.rbuf_list.append({"rank": peer, "type": btype, "access_channel_types": [ctype]})
        return len(self.rbuf_list) - 1

    def to_json(self):
        order = ("memory", "port")
        return {
            "id": self.rank,
            "input_chunks": self.chunks[0],
            "output_chunks": self.chunks[1],
            "scratch_chunks": self.chunks[2],
            "threadblocks": [b.to_json() for b in self.blocks],
            "channels": [{"channel_type": t, "connected_to": self.connected[t]}
                         for t in order if t in self.connected],
            "remote_buffers": self.rbuf_list,
            "semaphores": [],
        }


class Plan:
    def __init__(self, name, collective, protocol, inplace, nranks, chunks):
        self.name = name
        self.collective = collective
        self.protocol = protocol
        self.inplace = inplace
        self.nranks = nranks
        self.gpus = [Gpu(r, *chunks) for r in range(nranks)]
        self.min_size = 0
        self.max_size = 0

    def to_json(self):
        # Key order as the MSCCL++ DSL writes it.
        return {
            "name": self.name,
            "collective": self.collective,
            "protocol": self.protocol,
            "inplace": self.inplace,
            "reuse_resources": getattr(self, "reuse_resources", False),
            **({"root": self.root} if getattr(self, "root", 0) else {}),
            "gpus": [g.to_json() for g in self.gpus],
            "num_threads_per_block": THREADS,
            "use_double_scratch_buffer": self.protocol == "LL",
            "buffer_alignment": ALIGN,
            "min_message_size": self.min_size,
            "max_message_size": self.max_size,
        }


# ---------------------------------------------------------------------------------------
# Helpers shared by the algorithms
# ---------------------------------------------------------------------------------------

def peers(rank, n):
    """Other ranks in ring order starting after `rank`: every rank's first block group
    talks to a different peer, which spreads the traffic."""
    return [(rank + k) % n for k in range(1, n)]


def slot(owner, sender, n):
    """Scratch slot on `owner` that receives data from `sender` (one slot per peer)."""
    return (sender - owner) % n - 1


def user_buf(inplace):
    """Buffer holding a rank's contribution. In-place plans name only the output buffer
    (allreduce: input and output are the same memory; allgather: the input is the
    rank's slice of the output), so one buffer per rank is ever registered or staged."""
    return "o" if inplace else "i"


def own_slice(rank, inplace):
    """Allgather (one input chunk): a rank's own contribution."""
    return local("o", rank) if inplace else local("i", 0)


# ---------------------------------------------------------------------------------------
# Allgather
# ---------------------------------------------------------------------------------------

def allgather_ll(n, inplace):
    """Each rank writes its slice as packets straight into every peer's scratch; each rank
    unpacks what its peers sent. One hop, no signals: the packet flags are the sync."""
    g = LL_BLOCKS_PER_PEER[n]
    plan = Plan(name("allgather", n, "ll", inplace), "allgather", "LL", inplace, n, (1, n, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        for pi, p in enumerate(peers(r, n)):
            for j in range(g):
                b = gpu.block()
                if not inplace and pi == 0:
                    b.data("copy", [local("i", 0)], [local("o", r)], tbg=(j, g))
                b.data("ppkt", [own_slice(r, inplace)],
                       [b.remote("memory", p, "s", slot(p, r, n))],
                       "memory", [p], tbg=(j, g))
                b.data("upkt", [local("s", slot(r, p, n))], [local("o", p)], tbg=(j, g))
    return plan


def allgather_simple(n, inplace):
    """Each rank puts its slice into every peer's output. A signal/wait round before the
    puts makes sure the peer is inside the call (its output may be written), one after
    them that every peer's data has landed in ours."""
    t = SIMPLE_BLOCKS[n]
    plan = Plan(name("allgather", n, "simple", inplace), "allgather", "Simple", inplace, n,
                (1, n, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.round(ps, j)
            b.nop()
            if not inplace:
                # Our own slice; after the nop so that no signal is taken to publish it.
                b.data("copy", [local("i", 0)], [local("o", r)], tbg=(j, t))
            b.data("put", [own_slice(r, inplace) for _ in ps],
                   [b.remote("memory", p, "o", r) for p in ps], "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)
    return plan


def allgather_port(n, inplace):
    """As the memory Simple plan, but the proxy moves the data: one put-with-signal per
    peer, then wait for every peer's data and flush so that the proxy has finished reading
    our buffer before the call returns."""
    t = PORT_BLOCKS
    plan = Plan(name("allgather", n, "port", inplace), "allgather", "Simple", inplace, n,
                (1, n, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.sync("signal", "port", ps, j)
            b.sync("wait", "port", ps, j)
            b.nop()
            b.data("pws", [own_slice(r, inplace) for _ in ps],
                   [b.remote("port", p, "o", r) for p in ps], "port", ps, j, tbg=(j, t))
            if not inplace:
                # Our own slice, copied while the proxy sends; after the pws so that the
                # pws is not taken to publish it.
                b.data("copy", [local("i", 0)], [local("o", r)], tbg=(j, t))
            b.sync("wait", "port", ps, j)
            b.sync("flush", "port", ps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Allreduce
# ---------------------------------------------------------------------------------------

def allreduce_ll(n, inplace):
    """Two packet hops. Chunk p belongs to rank p. (1) every rank sends chunk p of its
    input as packets to rank p's scratch; (2) rank r adds its own chunk r to the n-1
    packet streams, keeps the sum and sends it as packets to every peer's scratch;
    (3) every rank unpacks the peers' sums into its output."""
    g = LL_BLOCKS_PER_PEER[n]
    total = g * (n - 1)
    x = user_buf(inplace)
    recv_base = n - 1  # scratch slots [0, n-1): contributions; [n-1, 2n-2): results
    plan = Plan(name("allreduce", n, "ll", inplace), "allreduce", "LL", inplace, n,
                (n, n, 2 * (n - 1)))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for pi, p in enumerate(ps):
            for j in range(g):
                b = gpu.block()
                b.data("ppkt", [local(x, p)], [b.remote("memory", p, "s", slot(p, r, n))],
                       "memory", [p], tbg=(j, g))
                # The reduction of the own chunk is spread over all blocks of the rank.
                b.data("respkt",
                       [local(x, r)] + [local("s", slot(r, q, n)) for q in ps],
                       [local("o", r)] + [b.remote("memory", q, "s", recv_base + slot(q, r, n))
                                          for q in ps],
                       "memory", ps, tbg=(pi * g + j, total))
                # In place, chunk p of the output was the source of this block's ppkt.
                b.nop()
                b.data("upkt", [local("s", recv_base + slot(r, p, n))], [local("o", p)],
                       tbg=(j, g))
    return plan


def allreduce_allpairs(n, inplace):
    """One packet hop: every rank sends its whole input as packets to every peer's scratch,
    then adds the n-1 packet streams to its own input. n-1 times the data of the two-hop LL
    plan per rank, but one hop of latency: what small messages want."""
    g = ALLPAIRS_BLOCKS
    x = user_buf(inplace)
    plan = Plan(name("allreduce", n, "allpairs", inplace), "allreduce", "LL", inplace, n,
                (1, 1, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(g):
            b = gpu.block()
            b.data("ppkt", [local(x, 0) for _ in ps],
                   [b.remote("memory", p, "s", slot(p, r, n)) for p in ps],
                   "memory", ps, tbg=(j, g))
            if inplace:
                # The sum overwrites what the ppkt above read.
                b.nop()
            b.data("repkt", [local(x, 0)] + [local("s", slot(r, q, n)) for q in ps],
                   [local("o", 0)], tbg=(j, g))
    return plan


def allreduce_simple(n, inplace):
    """Reduce-scatter then allgather, reading and writing peers' buffers directly. After a
    signal/wait round (every peer is inside the call), rank r reads chunk r of every
    peer's input and adds it to its own (rre), then puts the sum into chunk r of every
    peer's output; a final signal/wait round waits for the peers' sums."""
    t = SIMPLE_BLOCKS[n]
    x = user_buf(inplace)
    plan = Plan(name("allreduce", n, "simple", inplace), "allreduce", "Simple", inplace, n,
                (n, n, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.round(ps, j)
            b.nop()
            b.data("rre", [local(x, r)] + [b.remote("memory", p, x, r) for p in ps],
                   [local("o", r)], "memory", ps, j, tbg=(j, t))
            b.nop()
            # In place, the peers' chunk r read above is overwritten here: the same block
            # reads and then writes the same slice, so the nop orders them.
            b.data("put", [local("o", r) for _ in ps],
                   [b.remote("memory", p, "o", r) for p in ps], "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)
    return plan


def allreduce_scratch(n, inplace):
    """Reduce-scatter then allgather through scratch only: no peer ever touches a rank's
    input or output, so nothing is staged around the call (the host backend, or device
    buffers not registered for zero-copy). After an entry round, rank r puts chunk p of its
    input into its slot on rank p's scratch; once the peers' chunks r have landed it reduces
    them with its own into chunk r of its output and copies the sum into its result chunk of
    scratch; once every peer's sum is there it reads them (get) into its output. A last
    round keeps a rank's scratch unchanged until every peer has read its sum."""
    t = SCRATCH_BLOCKS[n]
    x = user_buf(inplace)
    res = n - 1  # scratch chunks [0, n-1): the peers' contributions; n-1: this rank's sum
    plan = Plan(name("allreduce", n, "scratch", inplace), "allreduce", "Simple", inplace, n,
                (n, n, n))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.round(ps, j)  # every peer is inside the call: its scratch is free
            b.nop()
            b.data("put", [local(x, p) for p in ps],
                   [b.remote("memory", p, "s", slot(p, r, n)) for p in ps], "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)  # the peers' contributions to chunk r
            b.nop()
            b.data("re", [local(x, r)] + [local("s", slot(r, q, n)) for q in ps], [local("o", r)],
                   tbg=(j, t))
            b.nop()
            b.data("copy", [local("o", r)], [local("s", res)], tbg=(j, t))
            b.nop()
            b.round(ps, j)  # the peers' sums
            b.nop()
            # In place, chunk p of the output was put above, before this block's signal.
            b.data("get", [b.remote("memory", p, "s", res) for p in ps], [local("o", p) for p in ps],
                   "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)  # every peer has read this rank's sum
    return plan


def allreduce_port(n, inplace):
    """Reduce-scatter then allgather through the proxy, in PORT_ROUNDS rounds. Chunk
    (p, k) = index p*K + k is rank p's part of round k. In round k rank r put-with-signals
    chunk (q, k) into its scratch slot on every peer q, waits for the peers' chunk (r, k),
    reduces it and put-with-signals the sum into chunk (r, k) of every peer's output. That
    sum doubles as the notice that r has consumed round k, so round k+1 first waits for
    it before reusing the peer's slot. The final flush keeps the call from returning
    while the proxy still reads our buffers."""
    t, k_rounds = PORT_BLOCKS, PORT_ROUNDS
    x = user_buf(inplace)
    nchunks = n * k_rounds
    plan = Plan(name("allreduce", n, "port", inplace), "allreduce", "Simple", inplace, n,
                (nchunks, nchunks, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            for k in range(k_rounds):
                if k > 0:
                    b.sync("wait", "port", ps, j)  # sums of round k-1: our slots are free
                    b.nop()
                b.data("pws", [local(x, q * k_rounds + k) for q in ps],
                       [b.remote("port", q, "s", slot(q, r, n)) for q in ps],
                       "port", ps, j, tbg=(j, t))
                b.sync("wait", "port", ps, j)  # peers' contributions to chunk (r, k)
                b.nop()
                mine = r * k_rounds + k
                b.data("re", [local(x, mine)] + [local("s", slot(r, q, n)) for q in ps],
                       [local("o", mine)], tbg=(j, t))
                b.nop()
                b.data("pws", [local("o", mine) for _ in ps],
                       [b.remote("port", q, "o", mine) for q in ps], "port", ps, j, tbg=(j, t))
            b.sync("wait", "port", ps, j)  # sums of the last round
            b.sync("flush", "port", ps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Reducescatter (input: one chunk per rank, output: one chunk)
# ---------------------------------------------------------------------------------------

def rs_out(rank, inplace):
    """Where a rank's result goes. In place the output is chunk `rank` of the input, and the
    plan names only the input, so one buffer per rank is ever registered or staged."""
    return local("i", rank) if inplace else local("o", 0)


def reducescatter_ll(n, inplace):
    """One packet hop: rank r sends chunk p of its input as packets to its slot on rank p's
    scratch, then adds the n-1 packet streams of its own chunk to its input chunk r, keeping
    the sum. No peer touches a rank's input or output: nothing is staged around the call."""
    g = LL_BLOCKS_PER_PEER[n]
    total = g * (n - 1)
    plan = Plan(name("reducescatter", n, "ll", inplace), "reducescatter", "LL", inplace, n,
                (n, 1, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for pi, p in enumerate(ps):
            for j in range(g):
                b = gpu.block()
                b.data("ppkt", [local("i", p)], [b.remote("memory", p, "s", slot(p, r, n))],
                       "memory", [p], tbg=(j, g))
                # The reduction of the own chunk is spread over all blocks of the rank. In
                # place it rewrites chunk r, which only this op reads, position by position.
                b.data("repkt", [local("i", r)] + [local("s", slot(r, q, n)) for q in ps],
                       [rs_out(r, inplace)], tbg=(pi * g + j, total))
    return plan


def reducescatter_simple(n, inplace):
    """After a signal/wait round (every peer is inside the call), rank r reads chunk r of
    every peer's input and adds it to its own (rre) into its output; a final round keeps
    every rank's input unchanged until its peers have read it."""
    t = SIMPLE_BLOCKS[n]
    plan = Plan(name("reducescatter", n, "simple", inplace), "reducescatter", "Simple", inplace, n,
                (n, 1, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.round(ps, j)
            b.nop()
            # In place the sum rewrites chunk r of the input, which no peer reads.
            b.data("rre", [local("i", r)] + [b.remote("memory", p, "i", r) for p in ps],
                   [rs_out(r, inplace)], "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)
    return plan


def reducescatter_port(n, inplace):
    """Through the proxy, for ranks that share no memory: rank r put-with-signals chunk p of
    its input into its slot on rank p's scratch, waits for the n-1 chunks of its own, adds
    them to its input chunk r into its output, then a last signal/wait round: a peer's next
    call writes into our scratch only after we have read this call's contributions. The
    final flush keeps the call from returning while the proxy still reads our input."""
    t = PORT_BLOCKS
    plan = Plan(name("reducescatter", n, "port", inplace), "reducescatter", "Simple", inplace, n,
                (n, 1, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            b.data("pws", [local("i", p) for p in ps],
                   [b.remote("port", p, "s", slot(p, r, n)) for p in ps], "port", ps, j, tbg=(j, t))
            b.sync("wait", "port", ps, j)
            b.nop()
            # In place the sum rewrites chunk r of the input, which no peer reads.
            b.data("re", [local("i", r)] + [local("s", slot(r, q, n)) for q in ps],
                   [rs_out(r, inplace)], tbg=(j, t))
            b.nop()
            b.sync("signal", "port", ps, j)
            b.sync("wait", "port", ps, j)
            b.sync("flush", "port", ps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Broadcast (root 0; shunt renames the ranks for any other root). One plan serves both
# in-place modes (only the root's buffers say which a call is), so every plan is exact when
# the root's input is its output: the root copies its input to its output (nothing when they
# are one buffer) and only ever reads its input or writes what it read; no peer writes it.
# Other ranks never touch their input.
# ---------------------------------------------------------------------------------------

BCAST_ROOT = 0
# The packet plan serves broadcasts up to here per rank count, the Simple plan above. Measured
# on the host backend (shunt-perf, each plan over the other's range, two rounds): the Simple
# plan, whose peers pull the root's output in one round, is faster from 8 KiB at 2 ranks and at
# 8, and from 2 KiB at 4; a packet doubles the bytes written.
BCAST_LL_MAX = {2: 4 << 10, 4: 1 << 10, 8: 4 << 10}
# Threadblocks of the packet plan on every rank (each root block writes its slice to every
# peer): on the host backend 1 to 4 blocks take half the time of 12 to 14 at these sizes.
BCAST_LL_BLOCKS = 4


def broadcast_name(n, family):
    return "broadcast_%dr_%s" % (n, family)


def broadcast_ll(n):
    """One packet hop: the root writes its input as packets into every peer's scratch, each
    peer unpacks them into its output. Every peer block first signals the root, and each root
    block waits for all the peers before it writes any packet: a peer's packets then come after
    every rank entered the call, so no rank can finish a call before all have entered it (with
    only the root sending, a peer that heard from nobody else could run two calls ahead and the
    next plan's packets would land in the scratch half a slower peer still polls)."""
    t = BCAST_LL_BLOCKS
    plan = Plan(broadcast_name(n, "ll"), "broadcast", "LL", False, n, (1, 1, 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            if r != BCAST_ROOT:
                b.sync("signal", "memory", [BCAST_ROOT], j)
                b.data("upkt", [local("s", 0)], [local("o", 0)], tbg=(j, t))
                continue
            b.data("copy", [local("i", 0)], [local("o", 0)], tbg=(j, t))
            b.sync("wait", "memory", ps, j)
            b.nop()
            b.data("ppkt", [local("i", 0) for _ in ps], [b.remote("memory", p, "s", 0) for p in ps],
                   "memory", ps, j, tbg=(j, t))
    return plan


def broadcast_simple(n):
    """The peers pull from the root: every peer tells the root that it is inside the call; the
    root copies its input into its output slice by slice (block j slice j), waits for the peers
    and tells each that its slice is there; each peer reads the root's slice into its own output
    and tells the root that it has read it; the root leaves once every peer has read (its next
    call writes its output again). The root's copy overlaps the peers' arrival and the peers
    read in parallel. No rank writes another's memory but the signals, and a peer leaves only
    after every rank has entered the call (the root waited for all before it told the peer):
    a fast peer's next call cannot reach a slow rank still in the previous one. The peers read
    the root's output, not its input: a peer places a rank's input by its own in-place mode,
    which is not the root's."""
    t = BCAST_SIMPLE_BLOCKS
    plan = Plan(broadcast_name(n, "simple"), "broadcast", "Simple", False, n, (1, 1, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            if r == BCAST_ROOT:
                b.data("copy", [local("i", 0)], [local("o", 0)], tbg=(j, t))
                b.nop()
                b.sync("wait", "memory", ps, j)
                b.sync("signal", "memory", ps, j)
                b.sync("wait", "memory", ps, j)
            else:
                b.sync("signal", "memory", [BCAST_ROOT], j)
                b.sync("wait", "memory", [BCAST_ROOT], j)
                b.nop()
                b.data("get", [b.remote("memory", BCAST_ROOT, "o", 0)], [local("o", 0)],
                       "memory", [BCAST_ROOT], j, tbg=(j, t))
                b.nop()
                b.sync("signal", "memory", [BCAST_ROOT], j)
    return plan


def broadcast_port(n):
    """Through the proxy, for ranks that share no memory: every peer tells the root that it is
    inside the call (its output may be written); the root copies its input to its output and
    put-with-signals it into every peer's output; the peers wait for it. The flush keeps the
    root from returning while the proxy still reads its input."""
    t = PORT_BLOCKS
    plan = Plan(broadcast_name(n, "port"), "broadcast", "Simple", False, n, (1, 1, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            if r != BCAST_ROOT:
                b.sync("signal", "port", [BCAST_ROOT], j)
                b.sync("wait", "port", [BCAST_ROOT], j)
                continue
            b.data("copy", [local("i", 0)], [local("o", 0)], tbg=(j, t))
            b.sync("wait", "port", ps, j)
            b.nop()
            b.data("pws", [local("i", 0) for _ in ps], [b.remote("port", p, "o", 0) for p in ps],
                   "port", ps, j, tbg=(j, t))
            b.sync("flush", "port", ps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Reduce (root 0; shunt renames the ranks for any other root). As for broadcast, one plan
# serves both in-place modes, decided by the root's buffers alone: the other ranks have no
# output (shunt binds it to its own staging), so no rank writes another's input or output but
# the root's output, and only once the root has read its input there (in place its output is
# its input). No peer reads a rank's input either: a rank places a peer's input by its own
# in-place mode, which is not the root's. Everything else goes through scratch.
# ---------------------------------------------------------------------------------------

REDUCE_ROOT = 0
# The packet plan serves reduces up to here, the Simple plans above.
REDUCE_LL_MAX = 16 * 1024
REDUCE_LL_BLOCKS = 4


def reduce_name(n, family):
    return "reduce_%dr_%s" % (n, family)


def reduce_ll(n):
    """One packet hop, the reducescatter packet plan's with one destination: every other rank
    writes its input as packets into its slot on the root's scratch; the root adds the n-1 packet
    streams to its input into its output, then signals every peer, which waits for it: a peer
    leaves only after every rank has entered the call (the root has read all their packets)."""
    t = REDUCE_LL_BLOCKS
    root = REDUCE_ROOT
    plan = Plan(reduce_name(n, "ll"), "reduce", "LL", False, n, (1, 1, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            if r != root:
                b.data("ppkt", [local("i", 0)], [b.remote("memory", root, "s", slot(root, r, n))],
                       "memory", [root], j, tbg=(j, t))
                b.sync("wait", "memory", [root], j)
                continue
            b.data("repkt", [local("i", 0)] + [local("s", slot(root, q, n)) for q in ps], [local("o", 0)],
                   tbg=(j, t))
            b.nop()
            b.sync("signal", "memory", ps, j)
    return plan


def reduce_direct(n, ctype):
    """A reduce-scatter, then each rank's chunk to the root: rank r puts chunk p of its input
    into its slot on rank p's scratch and signals p; once it has every peer's chunk r it adds
    them to its own; the root keeps its sum in its output chunk, every other rank writes it into
    chunk r of the root's output (rank r has the root's chunk r then, so the root has read that
    part of its input); a last signal/wait round keeps each rank's scratch until it has read it
    and the root in the call until every chunk has landed. Memory channels (one host) or port
    channels through the proxy (any placement; the flush keeps a rank from returning while the
    proxy still reads its buffers)."""
    t = PORT_BLOCKS if ctype == "port" else SIMPLE_BLOCKS[n]
    root = REDUCE_ROOT
    family = "port" if ctype == "port" else "simple"
    plan = Plan(reduce_name(n, family), "reduce", "Simple", False, n, (n, n, n))
    mine = n - 1  # scratch chunk of a non-root's sum
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            put = "pws" if ctype == "port" else "put"
            b.data(put, [local("i", p) for p in ps], [b.remote(ctype, p, "s", slot(p, r, n)) for p in ps],
                   ctype, ps, j, tbg=(j, t))
            if ctype == "memory":
                b.nop()
                b.sync("signal", "memory", ps, j)
            b.sync("wait", ctype, ps, j)
            b.nop()
            src = [local("i", r)] + [local("s", slot(r, q, n)) for q in ps]
            if r == root:
                b.data("re", src, [local("o", r)], tbg=(j, t))
            elif ctype == "memory":
                b.data("res", src, [local("s", mine), b.remote("memory", root, "o", r)], "memory", [root], j,
                       tbg=(j, t))
            else:
                b.data("re", src, [local("s", mine)], tbg=(j, t))
                b.nop()
                b.data("put", [local("s", mine)], [b.remote("port", root, "o", r)], "port", [root], j,
                       tbg=(j, t))
            b.nop()
            b.sync("signal", ctype, ps, j)
            b.sync("wait", ctype, ps, j)
            if ctype == "port":
                b.sync("flush", "port", ps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Alltoall (input and output: one block per rank; block p of the input goes to rank p, block p
# of the output comes from rank p)
# ---------------------------------------------------------------------------------------

def alltoall_ll(n, inplace):
    """One packet hop, as MSCCL++'s packet alltoall: A2A_LL_BLOCKS_PER_PEER blocks per peer p
    send block p of the input as packets to this rank's slot on p's scratch and unpack p's
    packets into block p of the output. No peer touches a rank's input or output: nothing is
    staged."""
    g = A2A_LL_BLOCKS_PER_PEER
    total = g * (n - 1)
    x = user_buf(inplace)
    plan = Plan(name("alltoall", n, "ll", inplace), "alltoall", "LL", inplace, n, (n, n, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        for pi, p in enumerate(peers(r, n)):
            for j in range(g):
                b = gpu.block()
                if not inplace:
                    # The own block, spread over every block of the rank.
                    b.data("copy", [local("i", r)], [local("o", r)], tbg=(pi * g + j, total))
                b.data("ppkt", [local(x, p)], [b.remote("memory", p, "s", slot(p, r, n))],
                       "memory", [p], tbg=(j, g))
                if inplace:
                    # The unpack overwrites what the ppkt above read.
                    b.nop()
                b.data("upkt", [local("s", slot(r, p, n))], [local("o", p)], tbg=(j, g))
    return plan


def groups(ps, size=8):
    """Peers cut into runs of at most `size`: an op lists at most 8 channels (MSCCL++'s limit)."""
    return [ps[i:i + size] for i in range(0, len(ps), size)]


def alltoall_port(n, inplace):
    """Through the proxy, for ranks that share no memory, in rounds (block (p, k) = index p*K + k
    is round k's part of block p; K = A2A_PORT_ROUNDS). Per round, rank r put-with-signals part
    (p, k) of its input into its slot on p's scratch, flushes (in place its output parts are the
    sources), waits for the peers' parts, copies them into its output and signals each peer
    that its slot is free; the next round, and at the end the call, first waits for the
    peers' notices, so no rank writes a slot its owner has not read. The own block is copied
    into the output while the first round is in flight. Ops on more than 8 peers are cut in
    runs of 8 (16 ranks: two nodes of 8, placed anywhere)."""
    t, k_rounds = PORT_BLOCKS, A2A_PORT_ROUNDS[n]
    x = user_buf(inplace)
    nchunks = n * k_rounds
    plan = Plan(name("alltoall", n, "port", inplace), "alltoall", "Simple", inplace, n,
                (nchunks, nchunks, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        gs = groups(ps)

        def sync(b, op, j):
            for g in gs:
                b.sync(op, "port", g, j)
        for j in range(t):
            b = gpu.block()
            for k in range(k_rounds):
                if k > 0:
                    sync(b, "wait", j)  # the peers have read round k-1's slots
                    b.nop()
                for gi, g in enumerate(gs):
                    if gi:
                        b.nop()  # the race check takes a pws as publishing what the last one sent
                    b.data("pws", [local(x, p * k_rounds + k) for p in g],
                           [b.remote("port", p, "s", slot(p, r, n)) for p in g], "port", g, j, tbg=(j, t))
                if not inplace and k == 0:
                    b.data("copy", [local("i", r * k_rounds, k_rounds)], [local("o", r * k_rounds, k_rounds)],
                           tbg=(j, t))
                sync(b, "flush", j)
                sync(b, "wait", j)
                b.nop()
                for q in ps:
                    b.data("copy", [local("s", slot(r, q, n))], [local("o", q * k_rounds + k)], tbg=(j, t))
                b.nop()
                sync(b, "signal", j)
            sync(b, "wait", j)
            sync(b, "flush", j)
    return plan


def alltoall_direct(n, inplace):
    """Every rank puts block p of its input straight into block r of rank p's output, as the
    allgather Simple plan does with its one slice: a signal/wait round with every peer (each is
    inside the call: its output may be written), the puts, a second round (every peer's block
    has landed here). Block j of every rank moves slice j of every block and talks to every peer
    on its channel j. Out of place the own block is copied first (it needs no peer). In place a
    peer's put would overwrite a block before this rank sent it, so block j first copies slice j
    of every peer's block into scratch (the same slices the peers' puts write, so the round that
    follows publishes them) and puts from there; only this rank touches its scratch, and a peer
    leaves the call only after every block's puts (the second round), before any next call can
    write the scratch. No peer touches a rank's input."""
    t = A2A_DIRECT_BLOCKS
    family = "direct" if inplace else "simple"
    plan = Plan(name("alltoall", n, family, inplace), "alltoall", "Simple", inplace, n,
                (n, n, n - 1 if inplace else 0))
    for gpu in plan.gpus:
        r = gpu.rank
        ps = peers(r, n)
        for j in range(t):
            b = gpu.block()
            if inplace:
                for p in ps:
                    b.data("copy", [local("o", p)], [local("s", slot(r, p, n))], tbg=(j, t))
                src = [local("s", slot(r, p, n)) for p in ps]
            else:
                # The own block first: it needs no peer.
                b.data("copy", [local("i", r)], [local("o", r)], tbg=(j, t))
                src = [local("i", p) for p in ps]
            b.nop()
            b.round(ps, j)
            b.nop()
            b.data("put", src, [b.remote("memory", p, "o", r) for p in ps], "memory", ps, j, tbg=(j, t))
            b.nop()
            b.round(ps, j)
    return plan


def alltoall_simple_or_direct(n, inplace):
    return alltoall_simple(n, inplace) if inplace else alltoall_direct(n, False)


def alltoall_simple(n, inplace):
    """Through scratch, in A2A_ROUNDS rounds so that scratch holds one round, not the whole
    message: block (p, k) = index p*K + k is round k's part of block p. A group of blocks per
    peer p: a signal/wait round (p is inside the call, and has copied the previous round out of
    its scratch), a put of part (p, k) into this rank's slot on p's scratch, a second round
    (p's part has landed here), a copy of it into part (p, k) of the output; a barrier of the
    rank's blocks and a last round keep every rank in the call until its peers have copied all
    their scratch out. No peer touches a
    rank's input or output, so in place needs nothing more and nothing is staged."""
    g, k_rounds = A2A_SIMPLE_BLOCKS_PER_PEER[n], A2A_ROUNDS
    total = g * (n - 1)
    x = user_buf(inplace)
    nchunks = n * k_rounds
    plan = Plan(name("alltoall", n, "simple", inplace), "alltoall", "Simple", inplace, n,
                (nchunks, nchunks, n - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        for pi, p in enumerate(peers(r, n)):
            for j in range(g):
                b = gpu.block()
                for k in range(k_rounds):
                    part = p * k_rounds + k
                    b.round([p], j)
                    b.nop()
                    if not inplace and k == 0:
                        # The own block, spread over every block of the rank; after the nop
                        # so that no signal is taken to publish it.
                        b.data("copy", [local("i", r * k_rounds, k_rounds)],
                               [local("o", r * k_rounds, k_rounds)], tbg=(pi * g + j, total))
                    b.data("put", [local(x, part)], [b.remote("memory", p, "s", slot(p, r, n))],
                           "memory", [p], j, tbg=(j, g))
                    b.nop()
                    b.round([p], j)
                    b.nop()
                    # In place, part (p, k) was read by the put above, before the round.
                    b.data("copy", [local("s", slot(r, p, n))], [local("o", part)], tbg=(j, g))
                    b.nop()
                # Every block of this rank has copied its slot out (the barrier), and then so has
                # every block of p (the round): no rank leaves the call while a peer still reads
                # its scratch, which the next plan may write with no round first (a packet plan,
                # whose slots lie elsewhere).
                b.ops.pop()  # the nop: the barrier is a block barrier too
                b.ops.append({"name": "barrier", "barrier_id": 0, "num_threadblocks": total})
                b.round([p], j)
    return plan


# ---------------------------------------------------------------------------------------
# Multi-node (N nodes x M ranks, rank = node * M + local rank)
# ---------------------------------------------------------------------------------------

def local_peers(rank, m):
    """The other ranks of this rank's node, in ring order."""
    base = rank - rank % m
    return [base + (rank % m + k) % m for k in range(1, m)]


def counterparts(rank, nodes, m):
    """The ranks with the same local rank on the other nodes, in ring order."""
    node = rank // m
    return [((node + k) % nodes) * m + rank % m for k in range(1, nodes)]


def node_slot(owner, sender, nodes, m):
    """Scratch slot on `owner` receiving from the counterpart `sender` (one per other node)."""
    return (sender // m - owner // m) % nodes - 1


def allgather_hier(nodes, m, inplace):
    """Across nodes first, then inside: rank r put-with-signals its slice into the output of
    its counterpart on every other node; once their slices are in, it puts its own and
    theirs into the output of every rank of its node over memory channels. Each slice
    crosses the network once per other node. Ready rounds on both kinds of channel first:
    every peer written to is inside the call."""
    n, t = nodes * m, HIER_BLOCKS
    plan = Plan(name_multi("allgather", nodes, m, inplace), "allgather", "Simple", inplace, n, (1, n, 0))
    for gpu in plan.gpus:
        r = gpu.rank
        lps, cps = local_peers(r, m), counterparts(r, nodes, m)
        for j in range(t):
            b = gpu.block()
            b.sync("signal", "port", cps, j)
            b.sync("wait", "port", cps, j)
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.nop()
            b.data("pws", [own_slice(r, inplace) for _ in cps],
                   [b.remote("port", c, "o", r) for c in cps], "port", cps, j, tbg=(j, t))
            if not inplace:
                b.data("copy", [local("i", 0)], [local("o", r)], tbg=(j, t))
            b.sync("wait", "port", cps, j)  # the counterparts' slices are in our output
            b.nop()
            for s in [r] + cps:
                b.data("put", [local("o", s) for _ in lps],
                       [b.remote("memory", p, "o", s) for p in lps], "memory", lps, j, tbg=(j, t))
            b.nop()
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.sync("flush", "port", cps, j)
    return plan


def allreduce_hier(nodes, m, inplace):
    """Reduce-scatter inside the node, allreduce across nodes, allgather inside the node.
    Chunk c = l * N + k belongs to local rank l (its group) and, across nodes, to node k.
    (1) Rank (node, l) reads group l of every rank of its node and sums it (rre).
    (2) It put-with-signals chunk l*N + k of that sum into a scratch slot of its counterpart
        on node k, reduces the counterparts' contributions to its own chunk l*N + node, and
        put-with-signals the result into every counterpart's output. Only 1/M of the
        buffer crosses the network per rank, twice.
    (3) It puts group l, now complete, into the output of every rank of its node.
    A counterpart's contribution arriving is the proof that it is inside the call, so
    the port channels need no ready round."""
    n, t = nodes * m, HIER_BLOCKS
    x = user_buf(inplace)
    plan = Plan(name_multi("allreduce", nodes, m, inplace), "allreduce", "Simple", inplace, n,
                (n, n, nodes - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        node, l = r // m, r % m
        lps, cps = local_peers(r, m), counterparts(r, nodes, m)
        group = [l * nodes + k for k in range(nodes)]
        mine = l * nodes + node
        for j in range(t):
            b = gpu.block()
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.nop()
            for c in group:
                b.data("rre", [local(x, c)] + [b.remote("memory", p, x, c) for p in lps],
                       [local("o", c)], "memory", lps, j, tbg=(j, t))
            b.nop()
            b.data("pws", [local("o", l * nodes + c // m) for c in cps],
                   [b.remote("port", c, "s", node_slot(c, r, nodes, m)) for c in cps],
                   "port", cps, j, tbg=(j, t))
            b.sync("wait", "port", cps, j)  # the counterparts' contributions to our chunk
            b.nop()
            b.data("re", [local("o", mine)] + [local("s", node_slot(r, c, nodes, m)) for c in cps],
                   [local("o", mine)], tbg=(j, t))
            b.nop()
            b.data("pws", [local("o", mine) for _ in cps],
                   [b.remote("port", c, "o", mine) for c in cps], "port", cps, j, tbg=(j, t))
            b.sync("wait", "port", cps, j)  # the counterparts' sums of the group's other chunks
            b.nop()
            for c in group:
                b.data("put", [local("o", c) for _ in lps],
                       [b.remote("memory", p, "o", c) for p in lps], "memory", lps, j, tbg=(j, t))
            b.nop()
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.sync("flush", "port", cps, j)
    return plan


def reducescatter_hier(nodes, m, inplace):
    """Reduce inside the node, then across nodes. Rank (node, l) owns chunk node*M + l.
    (1) It sums, over the ranks of its node, chunk k*M + l for every node k (rre over its
        local peers' inputs): its own node's sum goes to its output, the others' to scratch
        slots 0..N-1.
    (2) It put-with-signals the sum for node k into a receive slot (N + node_slot) of its
        counterpart on node k, waits for the counterparts' sums for its own chunk and adds
        them to its output. Each rank sends (N-1)/N of one chunk per other node.
    A last round on both kinds of channel: local peers have read our input, and a
    counterpart's next call writes into our receive slots only after we have read them."""
    n, t = nodes * m, HIER_BLOCKS
    plan = Plan(name_multi("reducescatter", nodes, m, inplace), "reducescatter", "Simple", inplace, n,
                (n, 1, 2 * nodes - 1))
    for gpu in plan.gpus:
        r = gpu.rank
        node, l = r // m, r % m
        lps, cps = local_peers(r, m), counterparts(r, nodes, m)
        for j in range(t):
            b = gpu.block()
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.nop()
            for k in range(nodes):
                c = k * m + l
                # In place, chunk r of the input is read by this rank only.
                into = rs_out(r, inplace) if k == node else local("s", k)
                b.data("rre", [local("i", c)] + [b.remote("memory", p, "i", c) for p in lps],
                       [into], "memory", lps, j, tbg=(j, t))
            b.nop()
            b.data("pws", [local("s", c // m) for c in cps],
                   [b.remote("port", c, "s", nodes + node_slot(c, r, nodes, m)) for c in cps],
                   "port", cps, j, tbg=(j, t))
            b.sync("wait", "port", cps, j)
            b.nop()
            mine = rs_out(r, inplace)
            b.data("re", [mine] + [local("s", nodes + node_slot(r, c, nodes, m)) for c in cps],
                   [mine], tbg=(j, t))
            b.nop()
            b.sync("signal", "memory", lps, j)
            b.sync("wait", "memory", lps, j)
            b.sync("signal", "port", cps, j)
            b.sync("wait", "port", cps, j)
            b.sync("flush", "port", cps, j)
    return plan


def broadcast_hier(nodes, m, root):
    """The root's data crosses the network once per other node, then NVLink inside each node.
    The leader of a node is its rank with the root's local rank. (1) The root put-with-signals
    its input into the output of every other node's leader, copies it to its own output and
    puts it into the outputs of its node's ranks; (2) each other leader, once the data is in,
    puts its output into the outputs of its node's ranks. Every rank first tells the one that
    writes its output that it is inside the call (a leader only once its node's ranks told it);
    every written rank waits for the writer's signal. A plan serves the roots at its local rank
    (renaming ranks by whole nodes): the set holds one per local rank."""
    n, t = nodes * m, HIER_BLOCKS
    plan = Plan("broadcast_%dx%d_hier_root%d" % (nodes, m, root), "broadcast", "Simple", False, n,
                (1, 1, 0))
    plan.root = root
    for gpu in plan.gpus:
        r = gpu.rank
        node, l = r // m, r % m
        leader = node * m + root % m
        lps = local_peers(r, m)
        for j in range(t):
            b = gpu.block()
            if r != leader:
                b.sync("signal", "memory", [leader], j)
                b.sync("wait", "memory", [leader], j)
                continue
            cps = counterparts(r, nodes, m)
            if r == root:
                b.data("copy", [local("i", 0)], [local("o", 0)], tbg=(j, t))
                b.sync("wait", "port", cps, j)
                b.sync("wait", "memory", lps, j)
                b.nop()
                b.data("pws", [local("i", 0) for _ in cps], [b.remote("port", c, "o", 0) for c in cps],
                       "port", cps, j, tbg=(j, t))
                b.data("put", [local("i", 0) for _ in lps], [b.remote("memory", p, "o", 0) for p in lps],
                       "memory", lps, j, tbg=(j, t))
                b.nop()
                b.sync("signal", "memory", lps, j)
                b.sync("flush", "port", cps, j)
            else:
                # Tell the root only once this node's ranks are in: the root then waits for
                # every rank before it writes, so no rank finishes a call before all entered it.
                b.sync("wait", "memory", lps, j)
                b.sync("signal", "port", [root], j)
                b.sync("wait", "port", [root], j)
                b.nop()
                b.data("put", [local("o", 0) for _ in lps], [b.remote("memory", p, "o", 0) for p in lps],
                       "memory", lps, j, tbg=(j, t))
                b.nop()
                b.sync("signal", "memory", lps, j)
    return plan


# ---------------------------------------------------------------------------------------
# Size ranges
# ---------------------------------------------------------------------------------------

def granule(plan):
    """Total sizes a plan can serve are the multiples of this: the send buffer must be a
    multiple of alignment x input_chunks (§4.1); allgather totals are nranks x that
    (reducescatter and alltoall totals are their input)."""
    g = ALIGN * plan.gpus[0].chunks[0]
    return g * plan.nranks if plan.collective == "allgather" else g


def slices_nonempty(plan, total):
    """True when every tbg slice of every op has at least one alignment unit at this size."""
    send = total // plan.nranks if plan.collective == "allgather" else total
    unit = send // plan.gpus[0].chunks[0]
    for gpu in plan.gpus:
        for b in gpu.blocks:
            for op in b.ops:
                tbg = op.get("tbg_info")
                if not tbg:
                    continue
                for e in op["src_buff"] + op["dst_buff"]:
                    if e["size"] * unit // ALIGN < tbg["tbg_size"]:
                        return False
    return True


def set_range(plan, above, upto):
    """Serve (above, upto]: shunt runs a call of any size on a plan (the part its chunk rule
    does not take runs as a padded tail), so a range starts right above the previous one, the
    first at one byte."""
    assert upto % granule(plan) == 0, plan.name
    assert upto < 1 << 32, "device offsets are 32-bit"
    plan.min_size, plan.max_size = above + 1, upto
    return plan


# ---------------------------------------------------------------------------------------
# The plan set
# ---------------------------------------------------------------------------------------

def name(collective, n, family, inplace):
    return "%s_%dr_%s_%s" % (collective, n, family, "inplace" if inplace else "outofplace")


def name_multi(collective, nodes, m, inplace):
    return "%s_%dx%d_hier_%s" % (collective, nodes, m, "inplace" if inplace else "outofplace")


def all_plans():
    builders = {"allgather": (None, allgather_ll, None, allgather_simple, allgather_port),
                "allreduce": (allreduce_allpairs, allreduce_ll, allreduce_scratch, allreduce_simple,
                              allreduce_port),
                "reducescatter": (None, reducescatter_ll, None, reducescatter_simple, reducescatter_port),
                "alltoall": (None, alltoall_ll, None, alltoall_simple_or_direct, alltoall_port)}
    plans = []
    for collective in sorted(builders):
        allpairs, ll, scratch, simple, port = builders[collective]
        for n in RANKS:
            for inplace in (False, True):
                low = 0
                if allpairs:
                    plans.append(set_range(allpairs(n, inplace), 0, ALLPAIRS_MAX))
                    low = ALLPAIRS_MAX
                top = A2A_LL_MAX[inplace] if collective == "alltoall" else LL_MAX
                plans.append(set_range(ll(n, inplace), low, top))
                if scratch:
                    plans.append(set_range(scratch(n, inplace), top, SCRATCH_MAX))
                    top = SCRATCH_MAX
                if collective == "alltoall" and inplace:
                    plans.append(set_range(alltoall_direct(n, True), top, A2A_DIRECT_INPLACE_MAX))
                    top = A2A_DIRECT_INPLACE_MAX
                if port:
                    plans.append(set_range(simple(n, inplace), top, SIMPLE_MAX))
                    plans.append(set_range(port(n, inplace), 0, PORT_MAX))
                else:
                    # No port plan: the memory Simple plan serves every size above.
                    plans.append(set_range(simple(n, inplace), top, PORT_MAX))
    for n in RANKS:
        plans.append(set_range(broadcast_ll(n), 0, BCAST_LL_MAX[n]))
        plans.append(set_range(broadcast_simple(n), BCAST_LL_MAX[n], PORT_MAX))
        plans.append(set_range(broadcast_port(n), 0, PORT_MAX))
    for n in RANKS:
        plans.append(set_range(reduce_ll(n), 0, REDUCE_LL_MAX))
        plans.append(set_range(reduce_direct(n, "memory"), REDUCE_LL_MAX, PORT_MAX))
        plans.append(set_range(reduce_direct(n, "port"), 0, PORT_MAX))
    for inplace in (False, True):
        plans.append(set_range(alltoall_port(A2A_PORT_MULTI, inplace), 0, PORT_MAX))
    hier = {"allgather": allgather_hier, "allreduce": allreduce_hier, "reducescatter": reducescatter_hier}
    for collective in sorted(hier):
        for nodes, m in MULTI:
            for inplace in (False, True):
                plans.append(set_range(hier[collective](nodes, m, inplace), 0, PORT_MAX))
    for nodes, m in MULTI:
        for root in range(m):
            plans.append(set_range(broadcast_hier(nodes, m, root), 0, PORT_MAX))
    return plans


def check_limits(plan):
    """MSCCL++'s executor limits (docs/plan-format.md §9), narrower than shunt's: the shipped plans
    keep to them so that they run on MSCCL++ too."""
    for gpu in plan.gpus:
        for b in gpu.blocks:
            assert len(b.ops) <= 64, (plan.name, "ops")
            assert all(len(v) <= 16 for v in b.channels.values()), (plan.name, "channels")
            assert all(len(v) <= 16 for v in b.rbufs.values()), (plan.name, "remote buffers")
            for op in b.ops:
                assert len(op.get("channel_ids", [])) <= 8, (plan.name, "channel_ids")
                assert len(op.get("src_buff", [])) <= 10, (plan.name, "src_buff")
                assert len(op.get("dst_buff", [])) <= 10, (plan.name, "dst_buff")


def render(plan):
    return json.dumps(plan.to_json(), indent=2) + "\n"


def write_all(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    names = set()
    for plan in all_plans():
        check_limits(plan)
        assert plan.name not in names, plan.name
        names.add(plan.name)
        with open(os.path.join(out_dir, plan.name + ".json"), "w", newline="\n") as f:
            f.write(render(plan))
    return sorted(n + ".json" for n in names)


def check(out_dir):
    """Regenerate into a temporary folder and compare with `out_dir`."""
    with tempfile.TemporaryDirectory() as tmp:
        expected = write_all(tmp)
        present = sorted(f for f in os.listdir(out_dir) if f.endswith(".json")) \
            if os.path.isdir(out_dir) else []
        problems = []
        for f in expected:
            if f not in present:
                problems.append("missing: " + f)
                continue
            with open(os.path.join(tmp, f), "rb") as a, open(os.path.join(out_dir, f), "rb") as b:
                if a.read() != b.read():
                    problems.append("differs: " + f)
        problems += ["extra: " + f for f in present if f not in expected]
    for p in problems:
        print(p)
    if problems:
        print("plans are out of date: run python3 scripts/gen_plans.py")
        return 1
    return 0


def placement(p):
    """Ranks per node a plan needs, as shunt derives it (src/plan/resolve.c): ranks joined by
    memory channels share a node; consecutive groups of M > 1 give M, none 0, others all."""
    n = len(p["gpus"])
    up = list(range(n))

    def find(a):
        while up[a] != a:
            a = up[a]
        return a
    for g in p["gpus"]:
        for ch in g.get("channels", []):
            if ch["channel_type"] == "memory":
                for q in ch["connected_to"]:
                    a, b = find(g["id"]), find(q)
                    up[max(a, b)] = min(a, b)
    m = 1
    while m < n and find(m) == 0:
        m += 1
    if m == 1:
        return 0 if all(find(r) == r for r in range(n)) else n
    if n % m or any(find(r) != r - r % m for r in range(n)):
        return n
    return m


def coverage(folder):
    """Every total size from 1 byte to 1 GiB lies in some plan's range, per (collective, ranks,
    in-place, placement): one node of 2, 4, 8 ranks and each multi-node shape; a plan free of
    placement (port channels only) serves any. Ranges are inclusive and any size in a range
    runs (exec/split.h)."""
    ranges = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".json"):
            continue
        with open(os.path.join(folder, f)) as fh:
            p = json.load(fh)
        key = (p["collective"], len(p["gpus"]), bool(p["inplace"]), placement(p))
        ranges.setdefault(key, []).append((p.get("min_message_size", 0),
                                           p.get("max_message_size", (1 << 64) - 1), f))
    gaps = 0
    shapes = [(n, n) for n in RANKS] + [(nodes * m, m) for nodes, m in MULTI]
    for coll in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce"):
        for n, rpn in shapes:
            if coll == "reduce" and n not in RANKS:
                continue  # reduce plans are for 2, 4 and 8 ranks (on one host or any placement)
            for inplace in (False, True):
                # Broadcast and reduce plans serve both modes and are written out of place.
                key = False if coll in ("broadcast", "reduce") else inplace
                rs = sorted(ranges.get((coll, n, key, rpn), []) + ranges.get((coll, n, key, 0), []))
                covered = 0  # every size in [1, covered] is served
                for lo, hi, f in rs:
                    if lo > covered + 1:
                        break
                    covered = max(covered, hi)
                if covered < GiB:
                    print("gap: %s %d ranks (%d per node) %s: sizes from %d bytes are served by no plan" %
                          (coll, n, rpn, "in place" if inplace else "out of place", covered + 1))
                    gaps += 1
    print("coverage: %s" % ("no gaps from 1 byte to 1 GiB" if gaps == 0 else "%d gap(s)" % gaps))
    return 1 if gaps else 0


def summary():
    print("%-32s %-6s %12s %12s %7s %7s %6s" %
          ("plan", "proto", "min bytes", "max bytes", "blocks", "chunks", "scratch"))
    for plan in all_plans():
        g = plan.gpus[0]
        print("%-32s %-6s %12d %12d %7d %7d %6d" %
              (plan.name, plan.protocol, plan.min_size, plan.max_size, len(g.blocks),
               g.chunks[0], g.chunks[2]))
    return 0


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "plans"), help="output folder")
    ap.add_argument("--check", action="store_true",
                    help="compare the output folder with a fresh generation; exit 1 on any difference")
    ap.add_argument("--summary", action="store_true", help="print the plan table and exit")
    ap.add_argument("--coverage", metavar="DIR",
                    help="check that the plans in DIR leave no size from one byte to 1 GiB unserved for "
                         "every collective, in and out of place, at 2, 4 and 8 ranks on one node and on the "
                         "multi-node shapes; exit 1 on a gap")
    args = ap.parse_args()
    if args.summary:
        return summary()
    if args.coverage:
        return coverage(args.coverage)
    if args.check:
        return check(args.out)
    for f in write_all(args.out):
        print(os.path.join(args.out, f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
