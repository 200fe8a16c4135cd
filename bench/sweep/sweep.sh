#!/usr/bin/env bash
# Random message sizes through the NCCL API on the host backend: for each rank count, N sizes
# drawn log-uniformly from one element to MAX (every dtype in turn, allreduce and allgather, or
# the collectives COLL names as shunt-perf's --coll does, in place and out of place, every result
# checked), then the share of calls that plans served and the wrong elements. SHUNT_FALLBACK=0:
# a call no plan serves fails the run.
# Usage: bench/sweep/sweep.sh [N=200] [MAX=64M] [RANKS="2 4 8"] [COLL]   (after a build in build/)
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200} max=${2:-64M} ranks=${3:-"2 4 8"} coll=${4:-}
perf=build/tools/shunt-perf/shunt-perf
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0
printf '%-6s %8s %8s %10s %8s %8s\n' ranks calls plans share wrong seconds
status=0
for np in $ranks; do
  log=$(mktemp)
  t0=$SECONDS
  "$perf" -np "$np" --random "$n" -b 1 -e "$max" -d all -n 1 -w 0 ${coll:+--coll "$coll"} >"$log" 2>&1 || status=1
  # Each row is two calls (out of place, in place); the last column names what served each.
  rows=$(grep -cE '^ +[0-9]+ ' "$log")
  nccl=$(grep -E '^ +[0-9]+ ' "$log" | awk '{print $NF}' | tr '|' '\n' | grep -c '^nccl$')
  wrong=$(grep -E '^ +[0-9]+ ' "$log" | awk '{w += $9 + $13} END {print w + 0}')
  calls=$((rows * 2))
  share=$(awk -v c="$calls" -v x="$nccl" 'BEGIN {printf "%.1f%%", c ? 100 * (c - x) / c : 0}')
  printf '%-6s %8d %8d %10s %8d %8d\n' "$np" "$calls" $((calls - nccl)) "$share" "$wrong" $((SECONDS - t0))
  grep -q "max #wrong over ranks: 0: OK" "$log" || { tail -5 "$log"; status=1; }
  rm -f "$log"
done
exit $status
