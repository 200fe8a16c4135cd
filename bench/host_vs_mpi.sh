#!/usr/bin/env bash
# The host backend against Open MPI on this machine, side by side in one run: for each rank
# count and collective, every size from MIN to MAX (doubling), shunt-perf (ranks as processes,
# the shipped plans, out of place) and MPI_Allreduce / MPI_Allgather (mpirun, shared memory),
# each the mean of ITERS calls after warm-up, and the ratio shunt / MPI (below 1: shunt faster).
# Sizes as nccl-tests counts them: allreduce the buffer, allgather the whole output.
# Usage: bench/host_vs_mpi.sh [RANKS="4 8"] [MIN=1K] [MAX=16M] [ITERS=20]   (after a build in build/)
# Needs Open MPI (scripts/setup.sh --bench installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-"4 8"} min=${2:-1K} max=${3:-16M} iters=${4:-20}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "Open MPI is missing: scripts/setup.sh --bench (or apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
bytes() { numfmt --from=iec "$1"; }
lo=$(bytes "$min") hi=$(bytes "$max")
mpibin=$(dirname "$perf")/mpi_coll
mpicc -O2 -o "$mpibin" bench/mpi/mpi_coll.c
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0
mpiflags=(--oversubscribe --mca btl self,vader)
[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
printf '%-10s %5s %10s %12s %12s %8s  %s\n' coll ranks bytes shunt_us mpi_us ratio plan
for np in $ranks; do
  for coll in allreduce allgather; do
    "$perf" -np "$np" -b "$lo" -e "$hi" -f 2 -n "$iters" -w 3 --coll "$coll" >"$tmp/shunt" 2>&1 || {
      tail -5 "$tmp/shunt" >&2
      status=1
      continue
    }
    mpirun "${mpiflags[@]}" -np "$np" "$mpibin" "$coll" "$lo" "$hi" 2 "$iters" 3 >"$tmp/mpi" 2>&1 || {
      tail -5 "$tmp/mpi" >&2
      status=1
      continue
    }
    # shunt-perf rows: size count type redop root time(out of place) ... plan (last column).
    awk 'NR == FNR { if ($1 ~ /^[0-9]+$/ && NF == 2) mpi[$1] = $2; next }
         $1 ~ /^[0-9]+$/ && NF > 10 && ($1 in mpi) {
           printf "%-10s %5d %10d %12.1f %12.1f %8.2f  %s\n", coll, np, $1, $6, mpi[$1], $6 / mpi[$1], $NF }' \
      coll="$coll" np="$np" "$tmp/mpi" "$tmp/shunt"
  done
done
exit $status
