#!/usr/bin/env bash
# How well in-job tuning (SHUNT_TUNING=auto) chooses, against the untuned shipped ranges and
# against shunt-tune's offline choice, on this machine's host backend (ranks as processes).
#
# Three sides each serve every size with some plan: untuned (SHUNT_TUNING=none), offline (the
# tuning file shunt-tune writes) and auto (the decisions a SHUNT_TUNING=auto job cached). Which
# plan each side serves at each size and placement is read from shunt-perf's plan column. The
# plans are then timed side by side, not in separate jobs: a reference run (shunt-tune with every
# plan a candidate and none cut, so every plan timed ITERS times in a row at each size, one
# process) gives each plan's median there, and a side's time at a size is the reference time of
# the plan it serves. Where two sides serve the same plan their ratio is exactly 1; where they
# differ it compares two plans timed within seconds of each other in one process, which takes
# out the drift between separate jobs (on a host with fewer cores than ranks one job's figures
# move by tens of percent from the next's). The reference runs ROUNDS times; the table shows the
# median over rounds of each ratio, and how far the ratios moved between rounds.
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

# The plan a side serves per size: appends "COLL BYTES OUT_OF_PLACE_PLAN IN_PLACE_PLAN" to $3.
plans_of() { # np tuning out
  local coll
  for coll in $colls; do
    SHUNT_TUNING=$2 "$perf" -np "$1" -b "$min" -e "$max" -f 2 -n 1 -w 0 -c 0 --coll "$coll" >"$tmp/raw" 2>&1 ||
      { tail -5 "$tmp/raw" >&2; return 1; }
    awk -v c="$coll" '$1 ~ /^[0-9]+$/ && NF > 10 { n = split($NF, p, "|"); print c, $1, p[1], p[n] }' "$tmp/raw" >>"$3"
  done
}

for np in $ranks; do
  : >"$tmp/off.$np.tuning"
  for coll in $colls; do
    echo "$np ranks, $coll: shunt-tune (the offline choice) ..." >&2
    "$tune" -np "$np" -b "$min" -e "$max" -n "$iters" --coll "$coll" -o "$tmp/off.$np.$coll.tuning" \
      --plot "$tmp/off.$np.$coll.png" >"$tmp/tune.log" 2>&1 || { tail -20 "$tmp/tune.log" >&2; exit 1; }
    cat "$tmp/off.$np.$coll.tuning" >>"$tmp/off.$np.tuning" # plans of one collective each: no rule collides
    echo "$np ranks, $coll: SHUNT_TUNING=auto, tuning every size into a fresh cache ..." >&2
    # Enough calls in each placement for every candidate's screen and samples, then the decision.
    SHUNT_TUNING=auto SHUNT_TUNING_CACHE=$tmp/cache.$np "$perf" -np "$np" -b "$min" -e "$max" -f 2 -n 60 -w 0 -c 0 \
      --coll "$coll" >"$tmp/first.log" 2>&1 || { tail -5 "$tmp/first.log" >&2; exit 1; }
  done
  echo "$np ranks: the plan each side serves ..." >&2
  : >"$tmp/plans.untuned" && : >"$tmp/plans.offline" && : >"$tmp/plans.auto"
  plans_of "$np" none "$tmp/plans.untuned"
  plans_of "$np" "$tmp/off.$np.tuning" "$tmp/plans.offline"
  SHUNT_TUNING_CACHE=$tmp/cache.$np plans_of "$np" auto "$tmp/plans.auto"
  for ((r = 0; r < rounds; r++)); do
    for coll in $colls; do
      echo "$np ranks, $coll: reference timing of every plan, round $((r + 1)) of $rounds ..." >&2
      "$tune" -np "$np" -b "$min" -e "$max" -n "$iters" --cut 1000 --coll "$coll" -o "$tmp/ref.tuning" \
        >"$tmp/ref.$r.$coll" 2>"$tmp/tune.log" || { tail -20 "$tmp/tune.log" >&2; exit 1; }
    done
  done
  python3 - "$tmp" "$np" "$rounds" "$colls" <<'EOF'
import math, re, statistics, sys
tmp, np, rounds, colls = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
def size_of(s):
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)
def plans(side):  # (coll, mode, bytes) -> plan
    out = {}
    for line in open(f"{tmp}/plans.{side}"):
        c, b, oop, ip = line.split()
        out[(c, 0, int(b))], out[(c, 1, int(b))] = oop, ip
    return out
def reference(r, coll):  # (coll, mode, bytes) -> {plan: us}, from shunt-tune's tables
    out, mode, rows = {}, None, []
    for line in open(f"{tmp}/ref.{r}.{coll}"):
        m = re.match(r"# (\w+), \d+ ranks, (out of place|in place):", line)
        if m:
            mode, rows = (1 if m.group(2) == "in place" else 0), []
            continue
        m = re.match(r"# \[(\d+)\] (\S+)", line)
        if m and mode is not None:
            k, name = int(m.group(1)), m.group(2)
            for size, cols in rows:
                if k < len(cols) and cols[k] != "-":
                    out.setdefault((coll, mode, size), {})[name] = float(cols[k].rstrip("*"))
            continue
        f = line.split()
        if mode is not None and f and re.match(r"^\d+[KMG]?$", f[0]):
            rows.append((size_of(f[0]), [x for x in f[1:] if re.match(r"^[-0-9.]+\*?$", x)]))
    return out
ref = [{} for _ in range(rounds)]
for r in range(rounds):
    for coll in colls:
        ref[r].update(reference(r, coll))
un, off, au = plans("untuned"), plans("offline"), plans("auto")
def short(p):
    return re.sub(r"_(outofplace|inplace)$", "", re.sub(r"^[a-z]+_\d+r_", "", p))
print("# %s ranks: per size and placement, the plan each side serves and the reference time of each (us, the"
      " median over %d rounds); ratios are medians over rounds of paired ratios" % (np, rounds))
print("%-13s %-3s %9s %-22s %-22s %-22s %9s %9s %9s %8s %8s" % ("coll", "ip", "bytes", "untuned", "offline", "auto",
      "t_unt", "t_off", "t_auto", "auto/off", "auto/unt"))
ro, ru, moved = [], [], []
for key in sorted(au):
    p = (un.get(key), off.get(key), au[key])
    if None in p:
        continue
    per = [[rf[key][q] for q in p] for rf in ref if key in rf and all(q in rf[key] for q in p)]
    if not per:
        print("%-13s %-3d %9d  (no reference time for %s)" % (key[0], key[1], key[2], ", ".join(p)))
        continue
    t = [statistics.median(x[i] for x in per) for i in range(3)]
    a_o = [x[2] / x[1] for x in per]
    a_u = [x[2] / x[0] for x in per]
    mo, mu = statistics.median(a_o), statistics.median(a_u)
    ro.append(mo)
    ru.append(mu)
    if p[2] != p[1] and len(a_o) > 1:
        moved.append(max(a_o) / min(a_o) - 1)
    print("%-13s %-3d %9d %-22s %-22s %-22s %9.1f %9.1f %9.1f %8.2f %8.2f" % (key[0], key[1], key[2], short(p[0]),
          short(p[1]), short(p[2]), t[0], t[1], t[2], mo, mu))
if ro:
    g = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))
    print("# %s ranks, %d sizes x placements: auto/offline geomean %.3f, worst %.2f, at most 1.05 in %d; "
          "auto/untuned geomean %.3f, worst %.2f, at most 1.0 in %d" % (np, len(ro), g(ro), max(ro),
          sum(x <= 1.05 for x in ro), g(ru), max(ru), sum(x <= 1.0 for x in ru)))
    print("# %s ranks: auto served the offline plan in %d of %d, the untuned plan in %d" % (np,
          sum(1 for k in au if off.get(k) == au[k]), len(au), sum(1 for k in au if un.get(k) == au[k])))
if moved:
    moved.sort()
    print("# %s ranks: where auto and offline differ, their ratio moved between rounds by %.1f %% (median), "
          "%.1f %% (75th percentile)" % (np, 100 * moved[len(moved) // 2], 100 * moved[(3 * len(moved)) // 4]))
EOF
done
