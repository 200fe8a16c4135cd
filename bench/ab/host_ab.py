#!/usr/bin/env python3
"""Two builds of shunt side by side on the host backend: shunt-perf of each, taking turns (the
order swapped every round, so that drift in the machine's load falls on both), allreduce and
allgather on 4 ranks as processes, 1 KiB to 16 MiB, out-of-place times. Prints per size the
median time of each build and their ratio, and the geometric mean of the ratios (B over A).

  bench/ab/host_ab.py BUILD_A BUILD_B [ROUNDS]   (default 10 rounds)

BUILD_A and BUILD_B are CMake build folders holding tools/shunt-perf/shunt-perf (configure them
with -DSHUNT_ENABLE_CUDA=OFF to build quickly, e.g. from `git worktree add` of the older commit);
both run the shipped plans of this tree. Every element of every call is checked by shunt-perf."""
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PLANS = os.path.join(HERE, "..", "..", "plans")
COLLS = ("allreduce", "allgather")


def run(build, coll, times):
    perf = os.path.join(build, "tools", "shunt-perf", "shunt-perf")
    env = dict(os.environ, SHUNT_PLAN_DIR=PLANS, SHUNT_FALLBACK="0", SHUNT_NCCL_LIB="/nonexistent")
    env.pop("SHUNT_TUNING", None)
    args = [perf, "-np", "4", "-b", "1K", "-e", "16M", "-f", "4", "-n", "20", "-w", "5", "--coll", coll, "-d", "float"]
    r = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    rows = 0
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) > 8 and f[0].isdigit() and f[2] == "float":
            if f[8] != "0":
                sys.exit("%s: %s bytes: %s wrong elements" % (perf, f[0], f[8]))
            times.setdefault(int(f[0]), []).append(float(f[5]))
            rows += 1
    if r.returncode != 0 or rows == 0:
        sys.exit("%s failed (exit %d):\n%s" % (perf, r.returncode, r.stdout[-2000:]))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    builds = sys.argv[1:3]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    res = {(c, b): {} for c in COLLS for b in builds}
    for r in range(rounds):
        for coll in COLLS:
            for b in builds if r % 2 == 0 else builds[::-1]:
                run(b, coll, res[(coll, b)])
        print("round %d of %d done" % (r + 1, rounds), file=sys.stderr)
    ratios = []
    print("%-10s %10s %10s %10s %7s" % ("coll", "bytes", "A us", "B us", "B/A"))
    for coll in COLLS:
        a, b = res[(coll, builds[0])], res[(coll, builds[1])]
        for size in sorted(a):
            ta, tb = statistics.median(a[size]), statistics.median(b[size])
            ratios.append(tb / ta)
            print("%-10s %10d %10.1f %10.1f %7.3f" % (coll, size, ta, tb, tb / ta))
    print("geometric mean B/A over %d sizes, %d rounds: %.3f" % (len(ratios), rounds,
          math.exp(sum(map(math.log, ratios)) / len(ratios))))


if __name__ == "__main__":
    main()
