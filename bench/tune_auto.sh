#!/usr/bin/env bash
# In-job tuning (SHUNT_TUNING=auto) against the untuned shipped ranges and against the offline
# tuning of shunt-tune, side by side on this machine's host backend (ranks as processes).
# For each rank count: shunt-tune writes its tuning file (the best candidate per size, measured
# offline); one shunt-perf run with SHUNT_TUNING=auto tunes every size into a fresh cache; then
# three sides take turns ROUNDS times, each ITERS timed calls per size: untuned
# (SHUNT_TUNING=none), offline (SHUNT_TUNING=the file) and auto (the cache read back, so after
# tuning). The table shows each side's median out-of-place time per size and the ratios
# auto / offline and auto / untuned (below 1: auto faster), then the worst of each.
# Usage: bench/tune_auto.sh [RANKS="4 8"] [MIN=1K] [MAX=16M] [ITERS=20] [ROUNDS=3]
#        [COLLS="allreduce allgather reducescatter"]   (after a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-"4 8"} min=${2:-1K} max=${3:-16M} iters=${4:-20} rounds=${5:-3}
colls=${6:-"allreduce allgather reducescatter"}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
tune=${SHUNT_TUNE:-build/tools/shunt-tune/shunt-tune}
[ -x "$perf" ] && [ -x "$tune" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One side's round: appends "COLL BYTES USEC PLAN" lines to $3.
run_side() { # np tuning out
  local coll
  for coll in $colls; do
    SHUNT_TUNING=$2 "$perf" -np "$1" -b "$min" -e "$max" -f 2 -n "$iters" -w 3 --coll "$coll" >"$tmp/raw" 2>&1 ||
      { tail -5 "$tmp/raw" >&2; return 1; }
    awk -v c="$coll" '$1 ~ /^[0-9]+$/ && NF > 10 { print c, $1, $6, $NF }' "$tmp/raw" >>"$3"
  done
}

echo "# per size: median out-of-place time (us) over $rounds rounds of $iters calls, sides taking turns"
printf '%-13s %5s %10s %10s %10s %10s %8s %8s  %s\n' coll ranks bytes untuned offline auto auto/off auto/unt auto_plan
for np in $ranks; do
  echo "shunt-tune -np $np ..." >&2
  : >"$tmp/off.$np.tuning"
  for coll in $colls; do
    "$tune" -np "$np" -b "$min" -e "$max" -n "$iters" --coll "$coll" -o "$tmp/off.$np.$coll.tuning" \
      --plot "$tmp/off.$np.$coll.png" >"$tmp/tune.$np.log" 2>&1 || { tail -20 "$tmp/tune.$np.log" >&2; exit 1; }
    cat "$tmp/off.$np.$coll.tuning" >>"$tmp/off.$np.tuning" # plans of one collective each: no rule collides
  done
  echo "auto, tuning every size into a fresh cache ..." >&2
  export SHUNT_TUNING_CACHE=$tmp/cache.$np
  for coll in $colls; do
    # Enough calls per size for every candidate's warm-up and samples, then the decision.
    SHUNT_TUNING=auto "$perf" -np "$np" -b "$min" -e "$max" -f 2 -n 5 -w 60 --coll "$coll" >"$tmp/first.$np.$coll" 2>&1 ||
      { tail -5 "$tmp/first.$np.$coll" >&2; exit 1; }
  done
  : >"$tmp/untuned" && : >"$tmp/offline" && : >"$tmp/auto"
  for ((r = 0; r < rounds; r++)); do
    echo "round $((r + 1)) of $rounds ..." >&2
    run_side "$np" none "$tmp/untuned" && run_side "$np" "$tmp/off.$np.tuning" "$tmp/offline" &&
      run_side "$np" auto "$tmp/auto" || exit 1
  done
  python3 - "$tmp" "$np" <<'EOF'
import statistics, sys
tmp, np = sys.argv[1], sys.argv[2]
def load(side):
    t, plan = {}, {}
    for line in open(f"{tmp}/{side}"):
        c, b, us, p = line.split()
        t.setdefault((c, int(b)), []).append(float(us))
        plan[(c, int(b))] = p.split("|")[0]
    return t, plan
u, _ = load("untuned"); o, _ = load("offline"); a, ap = load("auto")
worst_o = worst_u = 0
for key in sorted(a):
    if key not in u or key not in o:
        continue
    mu, mo, ma = (statistics.median(x[key]) for x in (u, o, a))
    worst_o, worst_u = max(worst_o, ma / mo), max(worst_u, ma / mu)
    print("%-13s %5s %10d %10.1f %10.1f %10.1f %8.2f %8.2f  %s" % (key[0], np, key[1], mu, mo, ma, ma / mo, ma / mu, ap[key]))
print("# %s ranks: worst auto/offline %.2f, worst auto/untuned %.2f" % (np, worst_o, worst_u))
# Noise: how far one side's figure for one size moves between rounds (max / min - 1), over every
# size and side; what a margin must exceed for a decision not to follow noise.
spread = sorted(max(v) / min(v) - 1 for x in (u, o, a) for v in x.values() if len(v) > 1 and min(v) > 0)
if spread:
    print("# %s ranks: round-to-round spread of one figure: median %.1f %%, 75th percentile %.1f %%"
          % (np, 100 * spread[len(spread) // 2], 100 * spread[(3 * len(spread)) // 4]))
EOF
done
