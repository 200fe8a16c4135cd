"""PyTorch on shunt's GPU executor: torch.distributed with the nccl backend, shunt preloaded,
four processes sharing GPU 0 (as MPS clients: scripts/gpu-check.sh starts the daemon), every
call served by shunt (run with SHUNT_FALLBACK=0, so a call shunt cannot serve raises).

all_reduce, all_gather_into_tensor, reduce_scatter_tensor (in place and out of place, sum, and
avg in floating point), broadcast from every root and all_to_all_single (when the plan folder
holds alltoall plans; NCCL's alone otherwise, which SHUNT_FALLBACK=0 refuses) of many sizes and
dtypes, eagerly and (all_reduce, all_gather_into_tensor, reduce_scatter_tensor) captured in a
CUDA graph replayed 100 times with new inputs, each result compared exactly with what the inputs
imply; then one thread holds a global-mode capture (torch.cuda.graph's default) open while
another thread's communicator keeps working: the capture must end valid and every call be
exact. Run it with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True too (VMM memory).

  LD_PRELOAD=build-gpu/libshunt.so SHUNT_FALLBACK=0 SHUNT_PLAN_DIR=plans python3 scripts/torch_gpu.py [NPROCS]
Exits non-zero on any wrong result, error or missing libshunt."""
import glob
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.int8,
          torch.uint8]
SIZES = [1, 7, 1000, 4099, 1 << 16, (1 << 20) + 5, 1 << 23]
REPLAYS = 100


def pattern(rank, n, dtype, salt=0):
    # small integers: every sum over ranks is exact in every dtype here (int8 included)
    return ((torch.arange(n, device="cuda") % 13) + (rank + 1) * 3 + salt).to(dtype)


def expect_sum(world, n, dtype, salt=0):
    total = torch.zeros(n, device="cuda", dtype=torch.int64)
    for r in range(world):
        total += pattern(r, n, torch.int64, salt)
    return total.to(dtype)


def expect_gather(world, n, dtype, salt=0):
    return torch.cat([pattern(r, n, dtype, salt) for r in range(world)])


def expect_scatter(world, rank, n, dtype, salt=0):
    # rank's slice of the sum of every rank's input of n x world elements
    return expect_sum(world, n * world, dtype, salt)[rank * n:(rank + 1) * n]


def expect_alltoall(world, rank, n, dtype):
    # block j of rank's output: block `rank` of rank j's input
    return torch.cat([pattern(j, n * world, dtype)[rank * n:(rank + 1) * n] for j in range(world)])


def serves_alltoall():
    return bool(glob.glob(os.path.join(os.environ.get("SHUNT_PLAN_DIR", "plans"), "alltoall_*.json")))


def more_collectives(rank, world):
    """reduce_scatter_tensor, broadcast from every root, all_to_all_single: (runs, wrong)."""
    bad, runs = [], 0
    a2a = serves_alltoall()
    for dtype in DTYPES:
        for n in SIZES:
            if n * world > (1 << 23):
                continue
            src = pattern(rank, n * world, dtype)
            out = torch.empty(n, device="cuda", dtype=dtype)
            dist.reduce_scatter_tensor(out, src)
            runs += 1
            if not torch.equal(out, expect_scatter(world, rank, n, dtype)):
                bad.append("reduce_scatter_tensor %s x %d" % (dtype, n))
            # in place, NCCL's rule: the output is the rank's slice of the input
            dist.reduce_scatter_tensor(src[rank * n:(rank + 1) * n], src)
            runs += 1
            if not torch.equal(src[rank * n:(rank + 1) * n], expect_scatter(world, rank, n, dtype)):
                bad.append("reduce_scatter_tensor in place %s x %d" % (dtype, n))
            if dtype.is_floating_point and world in (1, 2, 4, 8):  # a power of two: avg is exact
                dist.reduce_scatter_tensor(out, pattern(rank, n * world, dtype), op=dist.ReduceOp.AVG)
                runs += 1
                if not torch.equal(out, (expect_scatter(world, rank, n, torch.float64) / world).to(dtype)):
                    bad.append("reduce_scatter_tensor avg %s x %d" % (dtype, n))
            for root in range(world):
                x = pattern(rank, n, dtype, root)
                dist.broadcast(x, src=root)
                runs += 1
                if not torch.equal(x, pattern(root, n, dtype, root)):
                    bad.append("broadcast %s x %d from %d" % (dtype, n, root))
            if a2a:
                got = torch.empty(n * world, device="cuda", dtype=dtype)
                dist.all_to_all_single(got, pattern(rank, n * world, dtype))
                runs += 1
                if not torch.equal(got, expect_alltoall(world, rank, n, dtype)):
                    bad.append("all_to_all_single %s x %d" % (dtype, n))
    return runs, bad


def worker(rank, world, results):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", 0))
    bad, runs = [], 0
    for dtype in DTYPES:
        for n in SIZES:
            x = pattern(rank, n, dtype)
            dist.all_reduce(x)
            runs += 1
            if not torch.equal(x, expect_sum(world, n, dtype)):
                bad.append("all_reduce %s x %d" % (dtype, n))
            out = torch.empty(n * world, device="cuda", dtype=dtype)
            dist.all_gather_into_tensor(out, pattern(rank, n, dtype))
            runs += 1
            if not torch.equal(out, expect_gather(world, n, dtype)):
                bad.append("all_gather_into_tensor %s x %d" % (dtype, n))
    r, b = more_collectives(rank, world)
    runs += r
    bad += b
    # CUDA graphs: captured once, replayed with new inputs.
    for dtype, n in ((torch.float32, 4096), (torch.bfloat16, (1 << 20) + 5), (torch.int32, 1000)):
        a = pattern(rank, n, dtype)
        src = pattern(rank, n, dtype)
        out = torch.empty(n * world, device="cuda", dtype=dtype)
        rs_in = pattern(rank, n * world, dtype)
        rs_out = torch.empty(n, device="cuda", dtype=dtype)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm: programs uploaded outside the capture
            dist.all_reduce(a)
            dist.all_gather_into_tensor(out, src)
            dist.reduce_scatter_tensor(rs_out, rs_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dist.all_reduce(a)
            dist.all_gather_into_tensor(out, src)
            dist.reduce_scatter_tensor(rs_out, rs_in)
        for it in range(REPLAYS):
            a.copy_(pattern(rank, n, dtype, it))
            src.copy_(pattern(rank, n, dtype, it))
            rs_in.copy_(pattern(rank, n * world, dtype, it))
            g.replay()
            torch.cuda.synchronize()
            runs += 3
            if not torch.equal(rs_out, expect_scatter(world, rank, n, dtype, it)):
                bad.append("graph reduce_scatter_tensor %s x %d replay %d" % (dtype, n, it))
            if not torch.equal(a, expect_sum(world, n, dtype, it)):
                bad.append("graph all_reduce %s x %d replay %d" % (dtype, n, it))
            if not torch.equal(out, expect_gather(world, n, dtype, it)):
                bad.append("graph all_gather_into_tensor %s x %d replay %d" % (dtype, n, it))
    r, b = capture_beside(rank, world)
    runs += r
    bad += b
    torch.cuda.synchronize()
    dist.destroy_process_group()
    results[rank] = (runs, bad[:10])


def capture_beside(rank, world):
    """One thread captures a graph in global mode and holds the capture open; meanwhile this
    thread runs collectives on a second communicator. Nothing shunt does for them may break
    the capture (an unsafe call from any thread would invalidate it)."""
    group = dist.new_group(list(range(world)))
    n, dtype = 1 << 16, torch.float32
    x = pattern(rank, n, dtype)
    dist.all_reduce(x, group=group)  # the communicator and its programs exist before the capture
    torch.cuda.synchronize()
    a = torch.ones(1024, device="cuda")  # one replay of the captured doubling: 2
    started, done, errors = threading.Event(), threading.Event(), []

    def capturer():
        try:
            s = torch.cuda.Stream()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(s):
                with torch.cuda.graph(g, stream=s):
                    a.mul_(2)
                    started.set()
                    done.wait(30)
            g.replay()
            torch.cuda.synchronize()
        except Exception as e:  # an invalidated capture raises here
            errors.append("capture beside a communicator: %s" % e)
        finally:
            started.set()

    # Every tensor exists before the capture: this thread allocates nothing (an allocation of
    # PyTorch's own while another thread captures is not what is tested here) and reads its
    # results only once the capture has ended.
    xs = [pattern(rank, n, dtype, it) for it in range(20)]
    torch.cuda.synchronize()
    t = threading.Thread(target=capturer)
    t.start()
    started.wait(30)
    for x in xs:
        dist.all_reduce(x, group=group)
    done.set()
    t.join()
    torch.cuda.synchronize()
    bad = ["all_reduce beside a capture, call %d" % it for it, x in enumerate(xs)
           if not torch.equal(x, expect_sum(world, n, dtype, it))]
    if not errors and not torch.equal(a, torch.full_like(a, 2)):
        errors.append("the graph captured beside a communicator computed %s" % a[:4].tolist())
    runs = len(xs)
    dist.destroy_process_group(group)
    return runs, bad + errors


def main():
    with open("/proc/self/maps") as f:
        if "libshunt" not in f.read():
            print("torch_gpu: libshunt is not loaded (LD_PRELOAD missing?)")
            return 1
    if not torch.cuda.is_available():
        print("torch_gpu: no GPU")
        return 1
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    print("torch", torch.__version__, "world", world, "on GPU 0")
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(worker, args=(world, results), nprocs=world, join=True)
        runs = sum(results[r][0] for r in range(world))
        bad = [b for r in range(world) for b in results[r][1]]
    print("torch_gpu: %d collectives, %s" % (runs, "all exact" if not bad else "wrong: " + "; ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
