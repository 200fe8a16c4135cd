#!/usr/bin/env python3
"""The start-up cost of a preloaded shunt in processes that never call NCCL (torchrun's agent, a
compiler, a shell): each command is started in pairs, without and with LD_PRELOAD (the order
alternating from pair to pair), and the medians and the median paired difference are reported.

  bench/preload/startup.py [--lib LIBSHUNT] [-n PAIRS] [--torch] [--python PY]

LIBSHUNT defaults to the installed package's library, else build/libshunt.so. The preloaded runs
get what `python -m shunt run` sets (LD_PRELOAD, SHUNT_NCCL_LIB, SHUNT_PLAN_DIR), though a process
that makes no NCCL call reads none of it. --torch adds `python -c "import torch"` (PyTorch installed
for PY)."""

import argparse
import os
import statistics
import subprocess
import sys
import time


def default_lib():
    try:
        import shunt

        return shunt.library_path()
    except (ImportError, FileNotFoundError):
        here = os.path.dirname(os.path.abspath(__file__))
        return os.path.join(here, "..", "..", "build", "libshunt.so")


def one(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("%s failed (exit %d): %s" % (" ".join(cmd), r.returncode, r.stderr.decode()[-400:]))
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None)
    ap.add_argument("-n", type=int, default=20, help="pairs per command (default 20)")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    lib = os.path.abspath(a.lib or default_lib())
    if not os.path.isfile(lib):
        sys.exit("no library at %s (build it, or pass --lib)" % lib)
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    loaded = dict(plain, LD_PRELOAD=lib, SHUNT_PLAN_DIR="/nonexistent-plans", SHUNT_NCCL_LIB="/nonexistent-nccl")
    cmds = [["/bin/true"], [a.python, "-c", "pass"]]
    if a.torch:
        cmds.append([a.python, "-c", "import torch"])
    print("# preloaded: %s; %d pairs per command, medians in ms" % (lib, a.n))
    print("%-34s %10s %10s %12s %8s" % ("command", "without", "with", "paired diff", "share"))
    for cmd in cmds:
        one(cmd, plain), one(cmd, loaded)  # warm the page cache for both
        without, with_, diff = [], [], []
        for i in range(a.n):
            if i % 2:
                w = one(cmd, loaded)
                p = one(cmd, plain)
            else:
                p = one(cmd, plain)
                w = one(cmd, loaded)
            without.append(p)
            with_.append(w)
            diff.append(w - p)
        m0, m1, md = (statistics.median(x) * 1e3 for x in (without, with_, diff))
        name = " ".join(cmd if len(" ".join(cmd)) < 34 else [os.path.basename(cmd[0])] + cmd[1:])
        print("%-34s %10.2f %10.2f %+12.2f %+7.1f%%" % (name, m0, m1, md, 100.0 * md / m0))


if __name__ == "__main__":
    main()
