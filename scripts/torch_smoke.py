"""PyTorch with shunt preloaded, on a GPU: a one-rank NCCL process group (NCCL refuses two
ranks on one GPU) runs all_reduce and all_gather on CUDA tensors, and the results are exact.

Run by scripts/gpu-check.sh as
  LD_PRELOAD=build-gpu/libshunt.so SHUNT_NCCL_LIB=<torch's libnccl.so.2> python3 scripts/torch_smoke.py
Exits non-zero if shunt is not in the process, or any result is wrong."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    with open("/proc/self/maps") as f:
        if "libshunt" not in f.read():
            print("torch_smoke: libshunt is not loaded (LD_PRELOAD missing?)")
            return 1
    if not torch.cuda.is_available():
        print("torch_smoke: no GPU")
        return 1
    print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version())
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    bad = 0
    for n in (1, 1000, 1 << 20, (1 << 22) + 3):
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        y = x.clone()
        dist.all_reduce(y)
        bad += int(not torch.equal(x, y))
        out = [torch.empty_like(x)]
        dist.all_gather(out, x)
        bad += int(not torch.equal(out[0], x))
        z = x.to(torch.bfloat16)
        dist.all_reduce(z, op=dist.ReduceOp.MAX)
        bad += int(not torch.equal(z, x.to(torch.bfloat16)))
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("torch_smoke:", "all results exact" if bad == 0 else "%d wrong results" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
