#!/usr/bin/env bash
# What in-job tuning costs a short job: a 1,000-call allreduce job (shunt-perf cycling CYCLES
# times over the powers of two from MIN to MAX, one out-of-place and one in-place call each: 33
# cycles of 1 KiB-16 MiB make 990 calls, ranks as processes) with SHUNT_TUNING=auto and an empty
# cache (it tunes every bucket it meets) against the same job with the decisions already cached
# (it tunes nothing), the two taking turns ROUNDS times; the median wall time of each, their
# ratio, how the buckets were decided, and the least that serving every candidate once would cost.
# Usage: bench/tune_cost.sh [RANKS=4] [MIN=1K] [MAX=16M] [ROUNDS=3] [CYCLES=33]   (after a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-4} min=${2:-1K} max=${3:-16M} rounds=${4:-3} cycles=${5:-33}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0 SHUNT_TUNING=auto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() { # cache-dir log [cycles]
  local t0 t1
  t0=$(date +%s.%N)
  SHUNT_TUNING_CACHE=$1 SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=TUNE \
    "$perf" -np "$np" -b "$min" -e "$max" -f 2 -n 1 -w 0 -N "${3:-$cycles}" -c 0 --coll allreduce >"$2" 2>&1 ||
    { tail -5 "$2" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
# The cache the "cached" side reads: a job long enough to decide every bucket.
job "$tmp/warm" "$tmp/seed.log" $((cycles > 60 ? cycles : 60)) >/dev/null
fresh=() cached=()
for ((r = 0; r < rounds; r++)); do
  fresh+=("$(job "$tmp/fresh$r" "$tmp/fresh$r.log")")
  cached+=("$(job "$tmp/warm" "$tmp/cached$r.log")")
  echo "round $((r + 1)): tuning ${fresh[-1]} s, cached ${cached[-1]} s" >&2
done
grep -q "ranks: screen" "$tmp/cached0.log" &&
  echo "note: the cached run still tuned $(grep -c "ranks: screen" "$tmp/cached0.log") bucket(s)"
W=${SHUNT_TUNING_WARMUP:-2} S=${SHUNT_TUNING_SAMPLES:-4} python3 - "$tmp/fresh0.log" "$(ls "$tmp"/fresh0/shunt-*.tuning | head -n 1)" "${fresh[@]}" -- "${cached[@]}" <<'EOF'
import os, re, statistics, sys
W, S = int(os.environ["W"]), int(os.environ["S"])
log, cache = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
cut = args.index("--")
fresh = [float(x) for x in args[:cut]]
cached = [float(x) for x in args[cut + 1:]]
f, c = statistics.median(fresh), statistics.median(cached)
calls = sum(1 for line in open(log) if re.match(r"^ +[0-9]+ +[0-9]+ +float ", line)) * 2
print("%d allreduce calls: tuning %.2f s, cached %.2f s (medians), extra %.1f %%" % (calls, f, c, 100 * (f / c - 1)))
screened = kept = decided = again = 0
cands, until = [], {}  # candidates per bucket; calls of a bucket up to and with its deciding call
for line in open(log):
    m = re.search(r"INFO (.*) on \d+ ranks: screen (.*) \([a-z'/ ]+\); (\d+) kept", line)
    if m:
        screened += 1
        n, k = len(m.group(2).split(", ")), int(m.group(3))
        cands.append(n)
        kept += k
        until[m.group(1)] = n * (W + 1) + 1 + k * S + 1
        continue
    m = re.search(r"INFO (.*) on \d+ ranks: screen (.*) \([a-z'/ ]+\); winner", line)
    if m:
        screened += 1
        decided += 1
        n = len(m.group(2).split(", "))
        cands.append(n)
        until[m.group(1)] = n * (W + 1) + 1
        continue
    m = re.search(r"INFO (.*) on \d+ ranks: .* more samples each", line)
    if m and m.group(1) in until:
        again += 1
        until[m.group(1)] += 2 * S + 1
until = list(until.values())
if screened:
    print("buckets: %d; candidates per bucket %s; decided at the screen %d; survivors sampled in the other %d: %d;"
          " a second round of samples in %d" % (screened, sorted(set(cands)), decided, screened - decided, kept, again))
    print("calls of a bucket up to its decision (none put off): median %d, most %d, least %d"
          % (statistics.median(until), max(until), min(until)))
# The least any schedule that serves every candidate once could cost: per bucket, each other
# candidate's time beyond the winner's, once (the times the cache kept: the slowest rank's median,
# or the screen's figure for those it left out), against the cached job's time.
floor, times, winner = 0.0, {}, None
def close():
    global floor
    if winner in times:
        floor += sum(t - times[winner] for n, t in times.items() if n != winner and t > times[winner])
for line in open(cache):
    f = line.split()
    if line.startswith("#@ bucket"):
        close()
        times, winner = {}, f[-1]
    elif line.startswith("#= time"):
        times[f[2]] = float(f[3])
close()
print("one call of every other candidate beyond its bucket's winner: %.0f ms, %.1f %% of the cached job"
      % (floor / 1000, 100 * floor / 1e6 / c))
EOF
