#!/usr/bin/env bash
# The host backend against Open MPI on this machine, side by side in one run: for each rank
# count and collective, every size from MIN to MAX (doubling), shunt-perf (ranks as processes,
# the shipped plans, out of place) and MPI_Allreduce / MPI_Allgather / MPI_Reduce_scatter_block /
# MPI_Alltoall / MPI_Bcast (mpirun, shared memory).
# The two sides take turns, ROUNDS times (shunt, MPI, shunt, MPI, ...), so that a slow spell of
# the machine falls on both; each round's figure per size is the mean of ITERS calls after
# warm-up (sizes below 64 KiB: 10 x ITERS calls, where one call is a few microseconds and the
# clock and the scheduler would dominate), and the table shows each side's median over the
# rounds and the ratio of the medians, shunt / MPI (below 1: shunt faster).
# Sizes as nccl-tests counts them: allreduce and broadcast the buffer, allgather the whole
# output, reducescatter the whole input, alltoall each rank's whole send buffer.
# Usage: bench/host_vs_mpi.sh [RANKS="4 8"] [MIN=1K] [MAX=16M] [ITERS=100] [ROUNDS=3]
#        [COLLS="allreduce allgather reducescatter alltoall broadcast"]
#        (after a build in build/; SHUNT_TUNING applies to the shunt side)
# Needs Open MPI (scripts/setup.sh --bench installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-"4 8"} min=${2:-1K} max=${3:-16M} iters=${4:-100} rounds=${5:-3}
colls=${6:-"allreduce allgather reducescatter alltoall broadcast"}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "Open MPI is missing: scripts/setup.sh --bench (or apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
bytes() { numfmt --from=iec "$1"; }
lo=$(bytes "$min") hi=$(bytes "$max")
small=65536 # below this, 10 x ITERS calls per figure
mpibin=$(dirname "$perf")/mpi_coll
mpicc -O2 -o "$mpibin" bench/mpi/mpi_coll.c
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0
mpiflags=(--oversubscribe --mca btl self,vader)
[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# The size bands: [from, to, calls per figure].
bands=()
if [ "$lo" -lt "$small" ]; then
  top=$((hi < small ? hi : small / 2))
  bands+=("$lo $top $((10 * iters))")
fi
if [ "$hi" -ge "$small" ]; then
  bands+=("$((lo > small ? lo : small)) $hi $iters")
fi

# One round of one side over every band; appends "BYTES USEC [PLAN]" lines to $3.
run_shunt() { # np coll out
  local b from to n
  for b in "${bands[@]}"; do
    read -r from to n <<<"$b"
    "$perf" -np "$1" -b "$from" -e "$to" -f 2 -n "$n" -w 3 --coll "$2" >"$tmp/raw" 2>&1 || {
      tail -5 "$tmp/raw" >&2
      return 1
    }
    # shunt-perf rows: size count type redop root time(out of place) ... plan (last column).
    awk '$1 ~ /^[0-9]+$/ && NF > 10 { print $1, $6, $NF }' "$tmp/raw" >>"$3"
  done
}
run_mpi() { # np coll out
  local b from to n
  for b in "${bands[@]}"; do
    read -r from to n <<<"$b"
    mpirun "${mpiflags[@]}" -np "$1" "$mpibin" "$2" "$from" "$to" 2 "$n" 3 >"$tmp/raw" 2>&1 || {
      tail -5 "$tmp/raw" >&2
      return 1
    }
    awk '$1 ~ /^[0-9]+$/ && NF == 2 { print $1, $2 }' "$tmp/raw" >>"$3"
  done
}

echo "# $rounds rounds per side, taking turns; medians over the rounds; ratio = shunt / MPI"
printf '%-10s %5s %10s %12s %12s %8s  %s\n' coll ranks bytes shunt_us mpi_us ratio plan
for np in $ranks; do
  for coll in $colls; do
    : >"$tmp/shunt" && : >"$tmp/mpi"
    ok=1
    for ((r = 0; r < rounds && ok; r++)); do
      run_shunt "$np" "$coll" "$tmp/shunt" && run_mpi "$np" "$coll" "$tmp/mpi" || ok=0
    done
    if [ $ok = 0 ]; then
      status=1
      continue
    fi
    python3 - "$tmp/shunt" "$tmp/mpi" "$coll" "$np" <<'EOF'
import statistics, sys
def load(path):
    times, plans = {}, {}
    for line in open(path):
        f = line.split()
        times.setdefault(int(f[0]), []).append(float(f[1]))
        if len(f) > 2:
            plans[int(f[0])] = f[2]
    return times, plans
shunt, plans = load(sys.argv[1])
mpi, _ = load(sys.argv[2])
for size in sorted(shunt):
    if size not in mpi:
        continue
    s, m = statistics.median(shunt[size]), statistics.median(mpi[size])
    print("%-10s %5s %10d %12.1f %12.1f %8.2f  %s" % (sys.argv[3], sys.argv[4], size, s, m, s / m, plans.get(size, "")))
EOF
  done
done
exit $status
