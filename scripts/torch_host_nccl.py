"""torchrun's workers calling NCCL on host buffers through a shunt preloaded by `python -m shunt
run`, on a machine with or without a GPU:

  python -m shunt run -- torchrun --nproc-per-node 4 scripts/torch_host_nccl.py

Each worker joins torch.distributed's gloo group (what torchrun sets up), rank 0 makes an NCCL
unique id and the group broadcasts it, and every worker makes an NCCL communicator with it and
calls ncclAllReduce and ncclAllGather through ctypes on host memory (the host backend: no GPU
is needed; SHUNT_FALLBACK=0 is set, as a real NCCL takes no host buffers). Every element is
checked and every call must have been served by a plan (shuntLastPlan). Exits non-zero on any
wrong element, an unserved call, or when shunt is not the NCCL in the process."""

import ctypes
import os
import sys

import torch
import torch.distributed as dist

NCCL_UNIQUE_ID_BYTES = 128
ncclFloat32, ncclSum = 7, 0


def main():
    os.environ.setdefault("SHUNT_FALLBACK", "0")
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    # shunt is preloaded under the soname libnccl.so.2, so this finds it rather than a real NCCL.
    nccl = ctypes.CDLL("libnccl.so.2")
    if not hasattr(nccl, "shuntVersion"):
        print("rank %d: the libnccl.so.2 in this process is not shunt (not started by shunt run?)" % rank)
        return 1
    nccl.shuntVersion.restype = ctypes.c_char_p
    uid = ctypes.create_string_buffer(NCCL_UNIQUE_ID_BYTES)
    if rank == 0 and nccl.ncclGetUniqueId(uid) != 0:
        print("rank 0: ncclGetUniqueId failed")
        return 1
    t = torch.frombuffer(bytearray(uid.raw), dtype=torch.uint8).clone()
    dist.broadcast(t, src=0)  # over gloo
    ctypes.memmove(uid, bytes(t.tolist()), NCCL_UNIQUE_ID_BYTES)
    comm = ctypes.c_void_p()

    class UniqueId(ctypes.Structure):  # ncclCommInitRank takes it by value (a ctypes array would be a pointer)
        _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]

    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    rc = nccl.ncclCommInitRank(ctypes.byref(comm), size, UniqueId.from_buffer_copy(uid.raw), rank)
    if rc != 0:
        print("rank %d: ncclCommInitRank: %d" % (rank, rc))
        return 1
    plan = ctypes.c_char_p()
    served, wrong = [], 0
    for n in (1, 256, 4096 + 3, 1 << 18):
        send = (ctypes.c_float * n)(*[float(rank + 1 + i % 7) for i in range(n)])
        recv = (ctypes.c_float * n)()
        rc = nccl.ncclAllReduce(send, recv, ctypes.c_size_t(n), ncclFloat32, ncclSum, comm, None)
        nccl.shuntLastPlan(comm, ctypes.byref(plan))
        served.append(("allreduce", n, rc, plan.value))
        want = [float(size * (size + 1) // 2 + size * (i % 7)) for i in range(n)]
        wrong += sum(1 for a, b in zip(recv, want) if a != b)
        gathered = (ctypes.c_float * (n * size))()
        rc = nccl.ncclAllGather(send, gathered, ctypes.c_size_t(n), ncclFloat32, comm, None)
        nccl.shuntLastPlan(comm, ctypes.byref(plan))
        served.append(("allgather", n, rc, plan.value))
        want = [float(r + 1 + i % 7) for r in range(size) for i in range(n)]
        wrong += sum(1 for a, b in zip(gathered, want) if a != b)
    nccl.ncclCommDestroy(comm)
    bad = [s for s in served if s[2] != 0 or not s[3]]
    if rank == 0:
        print("shunt %s, %d ranks: %d calls, every element checked" % (nccl.shuntVersion().decode(), size, len(served)))
        for coll, n, rc, p in served:
            print("  %-9s %7d floats: %s" % (coll, n, p.decode() if p else "not served by a plan (rc %d)" % rc))
    if wrong or bad:
        print("rank %d: %d wrong elements, %d calls failed or not served by a plan" % (rank, wrong, len(bad)))
    dist.destroy_process_group()
    return 1 if wrong or bad else 0


if __name__ == "__main__":
    sys.exit(main())
