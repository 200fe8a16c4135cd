#!/usr/bin/env bash
# What in-job tuning costs a short job: a 1,000-call allreduce job (shunt-perf --random: 200
# sizes drawn from MIN to MAX, 5 calls each, ranks as processes) with SHUNT_TUNING=auto and an
# empty cache (it tunes every bucket it meets) against the same job with the decisions already
# cached (it tunes nothing), the two taking turns ROUNDS times; the median wall time of each,
# their ratio, and the calls each bucket spent before its decision.
# Usage: bench/tune_cost.sh [RANKS=4] [MIN=1K] [MAX=16M] [ROUNDS=3]   (after a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4} min=${2:-1K} max=${3:-16M} rounds=${4:-3}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0 SHUNT_TUNING=auto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() { # cache-dir log
  local t0 t1
  t0=$(date +%s.%N)
  SHUNT_TUNING_CACHE=$1 SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=TUNE \
    "$perf" -np "$np" -b "$min" -e "$max" --random 200,7 -n 5 -w 0 -c 0 --coll allreduce >"$2" 2>&1 ||
    { tail -5 "$2" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
job "$tmp/warm" "$tmp/seed.log" >/dev/null # the cache the "cached" side reads
fresh=() cached=()
for ((r = 0; r < rounds; r++)); do
  fresh+=("$(job "$tmp/fresh$r" "$tmp/fresh$r.log")")
  cached+=("$(job "$tmp/warm" "$tmp/cached$r.log")")
  echo "round $((r + 1)): tuning ${fresh[-1]} s, cached ${cached[-1]} s" >&2
done
grep -c "slowest rank's median" "$tmp/cached0.log" >/dev/null &&
  echo "note: the cached run still tuned $(grep -c "slowest rank's median" "$tmp/cached0.log") bucket(s)"
python3 - "$tmp/fresh0.log" "${fresh[@]}" -- "${cached[@]}" <<'EOF'
import re, statistics, sys
log = sys.argv[1]
args = sys.argv[2:]
cut = args.index("--")
fresh = [float(x) for x in args[:cut]]
cached = [float(x) for x in args[cut + 1:]]
f, c = statistics.median(fresh), statistics.median(cached)
print("1000 allreduce calls: tuning %.2f s, cached %.2f s (medians), extra %.1f %%" % (f, c, 100 * (f / c - 1)))
calls = []
for line in open(log):
    m = re.search(r"sizes \d+-\d+ on \d+ ranks: (.*) \(slowest rank's median\)", line)
    if m:
        calls.append(len(m.group(1).split(", ")))
if calls:
    print("buckets decided: %d; candidates per bucket %s; calls before each decision: candidates x (1 + 5) + 1"
          % (len(calls), sorted(set(calls))))
EOF
