#!/usr/bin/env bash
# In-job tuning on the host backend, ranks as processes (SHUNT_TUNING=auto, api/tune.h):
# 1. A folder whose plan selection prefers everywhere is slow at 1-2 MiB (allpairs, tied to the
#    placement, its range widened to every size) beside faster plans of narrower ranges: the
#    tuned bucket must end on a faster plan, and every rank's decision table must be the same.
# 2. The same with one rank slowed on purpose (it shares a core with a busy loop): the tables
#    are still the same on every rank.
# 3. A second run with the cache: the decisions are read, nothing is sampled again, and every
#    call is served by the winner.
# 4. Bad caches: a truncated file and an unwritable folder each give a WARN and the job runs.
# 5. Candidates: plans made for larger sizes at any smaller one, those made for smaller sizes
#    only within SHUNT_TUNING_REACH classes above their range.
# Usage: auto_host.sh SHUNT_PERF PLAN_DIR SHUNT_PLAN
set -u
perf=$1 plans=$2 plantool=$3
out=$(mktemp -d)
busy=""
trap '[ -n "$busy" ] && kill $busy 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
fail=0
dir=$out/plans
mkdir -p "$dir"
cp "$plans"/allreduce_4r_simple_outofplace.json "$plans"/allreduce_4r_scratch_outofplace.json \
  "$plans"/allreduce_4r_simple_inplace.json "$plans"/allgather_4r_*.json "$dir"/
# allpairs reads every peer's whole input: at 1 MiB and more it is the slowest of the three.
sed -E 's/"max_message_size": *[0-9]+/"max_message_size": 1073741824/' \
  "$plans"/allreduce_4r_allpairs_outofplace.json >"$dir"/allreduce_4r_allpairs_outofplace.json
sed -i -E 's/"max_message_size": *[0-9]+/"max_message_size": 1073741824/; s/"min_message_size": *[0-9]+/"min_message_size": 1/' \
  "$dir"/allreduce_4r_simple_inplace.json
grep -q '"max_message_size": 1073741824' "$dir"/allreduce_4r_allpairs_outofplace.json ||
  { echo "could not widen the allpairs plan's range"; exit 1; }
export SHUNT_PLAN_DIR=$dir SHUNT_TUNING=auto SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT,TUNE,CALL
# 44 out-of-place calls per size: 3 candidates' screen (3 calls each), their samples, a second round
# of samples for two (which a loaded machine can need), and the swaps fit with room to spare.
args=(-np 4 -b 1M -e 2M -f 2 -w 40 -n 4 --coll allreduce -d float)

# The last decision table each rank logged: "RANK HASH" lines.
tables() { grep -oE "rank [0-9]+: decision table [0-9a-f]+" "$1" | awk '{t[$2]=$5} END {for (r in t) print r, t[r]}' | sort; }
same_tables() {
  local n
  n=$(tables "$1" | awk '{print $2}' | sort -u | wc -l)
  [ "$(tables "$1" | wc -l)" = 4 ] && [ "$n" = 1 ] ||
    { echo "$2: the ranks' decision tables differ or are missing:"; tables "$1"; fail=1; }
  tables "$1" | sed "s/^/$2: rank /"
}
untuned='allreduce out-of-place sum sizes 1048576-2097151 on 4 ranks: .* winner allreduce_4r_(simple|scratch)_outofplace'

# 1. The slow plan selection prefers loses.
grep_run() { grep -qE "$untuned" "$1" || { echo "$2: the slow plan was not beaten:"; grep -E "TUNE|slowest" "$1"; fail=1; }; }
SHUNT_TUNING_CACHE=$out/cache "$perf" "${args[@]}" >"$out/first.log" 2>&1 || { echo "first: failed"; tail -20 "$out/first.log"; fail=1; }
grep_run "$out/first.log" first
grep -q "CALL AllReduce 1048576 bytes float sum -> plan allreduce_4r_allpairs_outofplace" "$out/first.log" ||
  { echo "first: untuned selection never picked the allpairs plan (the test's premise)"; fail=1; }
same_tables "$out/first.log" first
ls "$out"/cache/shunt-*.tuning >/dev/null 2>&1 || { echo "first: no cache file written"; fail=1; }
# The cache file is a tuning file: shunt-plan lists its ranges and its decisions.
first_winner=$(grep -oE "sizes 1048576-2097151 on 4 ranks: .* winner [a-z0-9_]+" "$out/first.log" | awk '{print $NF}')
"$plantool" list --tuning "$(ls "$out"/cache/shunt-*.tuning | head -n 1)" "$dir" >"$out/list.log" 2>&1 ||
  { echo "shunt-plan list --tuning CACHE failed"; cat "$out/list.log"; fail=1; }
grep -qE "allreduce +out-of-place sum +1M\.\.2097151 +-> $first_winner" "$out/list.log" ||
  { echo "shunt-plan list does not show the 1 MiB decision ($first_winner)"; cat "$out/list.log"; fail=1; }

# 2. One rank slowed: ranks started one by one, rank 1 beside a busy loop on its core.
cpu=$(($(nproc) - 1))
(taskset -c $cpu sh -c 'while :; do :; done') &
busy=$!
exec {idfd}< <("$perf" --make-id 2>/dev/null)
idpid=$!
read -r -t 30 id <&$idfd || { echo "slowed: no id"; exit 1; }
pids=()
for r in 0 1 2 3; do
  pin=()
  [ $r = 1 ] && pin=(taskset -c $cpu)
  SHUNT_TUNING_CACHE=$out/cache-slow SHUNT_PERF_NRANKS=4 SHUNT_PERF_RANK=$r SHUNT_PERF_ID="$id" \
    "${pin[@]}" "$perf" "${args[@]:2}" >"$out/slow.$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { echo "slowed: a rank failed"; fail=1; }; done
kill $idpid $busy 2>/dev/null
busy=""
cat "$out"/slow.*.log >"$out/slow.log"
same_tables "$out/slow.log" slowed

# 3. The cache read back: no sampling, every timed call on the winner.
SHUNT_TUNING_CACHE=$out/cache "$perf" "${args[@]}" >"$out/second.log" 2>&1 || { echo "second: failed"; fail=1; }
grep -q "cache .*(1 decisions)\|cache .*([2-9] decisions)" "$out/second.log" || { echo "second: the cache was not read"; grep TUNE "$out/second.log"; fail=1; }
grep -q "slowest rank's median" "$out/second.log" && { echo "second: a bucket was tuned again"; fail=1; }
# The 1 MiB bucket's own winner: the 2 MiB calls form a bucket of their own, decided apart.
winner=$first_winner
served=$(grep -oE "CALL AllReduce 1048576 bytes float sum -> plan [a-z0-9_]+outofplace" "$out/second.log" | awk '{print $NF}' | sort -u)
[ "$served" = "$winner" ] || { echo "second: 1 MiB calls served by '$served', the winner was '$winner'"; fail=1; }

# 4. Bad caches: a truncated file, an unwritable folder.
f=$(ls "$out"/cache/shunt-*.tuning | head -n 1)
head -c 40 "$f" >"$f.cut" && mv "$f.cut" "$f"
SHUNT_TUNING_CACHE=$out/cache "$perf" "${args[@]}" >"$out/cut.log" 2>&1 || { echo "truncated: the job failed"; fail=1; }
grep -q "WARN tuning cache: .*tuning afresh" "$out/cut.log" || { echo "truncated: no WARN"; fail=1; }
grep_run "$out/cut.log" truncated
mkdir -p "$out/ro" && chmod 500 "$out/ro"
if [ "$(id -u)" != 0 ]; then
  SHUNT_TUNING_CACHE=$out/ro/sub "$perf" "${args[@]}" >"$out/ro.log" 2>&1 || { echo "unwritable: the job failed"; fail=1; }
  grep -q "WARN tuning cache: cannot use the folder" "$out/ro.log" || { echo "unwritable: no WARN"; fail=1; }
fi
printf 'x' >"$out/afile"
SHUNT_TUNING_CACHE=$out/afile "$perf" "${args[@]}" >"$out/notdir.log" 2>&1 || { echo "not a folder: the job failed"; fail=1; }
grep -q "WARN tuning cache: cannot use the folder" "$out/notdir.log" || { echo "not a folder: no WARN"; fail=1; }
# 5. Which plans are candidates: one made for larger sizes at any smaller size (simple, ranged
#    from 8 MiB, screened at 16 KiB); one made for smaller sizes only up to SHUNT_TUNING_REACH
#    classes above its range (scratch, ranged to 8 MiB, at 16 MiB: out with REACH 0, in with 1).
screen_of() { grep -E "allreduce out-of-place sum sizes $2-[0-9]+ on 4 ranks: screen" "$1" | head -n 1; }
SHUNT_TUNING_CACHE=$out/cache-16k "$perf" -np 4 -b 16K -e 16K -w 30 -n 1 --coll allreduce -d float \
  >"$out/reach16k.log" 2>&1 || { echo "reach, 16 KiB: the job failed"; fail=1; }
screen_of "$out/reach16k.log" 16384 | grep -q "allreduce_4r_simple_outofplace" ||
  { echo "reach: the plan ranged from 8 MiB was not screened at 16 KiB:"; screen_of "$out/reach16k.log" 16384; fail=1; }
for reach in 0 1; do
  SHUNT_TUNING_REACH=$reach SHUNT_TUNING_CACHE=$out/cache-r$reach "$perf" -np 4 -b 16M -e 16M -w 16 -n 1 \
    --coll allreduce -d float >"$out/reach$reach.log" 2>&1 || { echo "reach $reach: the job failed"; fail=1; }
  line=$(screen_of "$out/reach$reach.log" 16777216)
  has=0
  grep -q "allreduce_4r_scratch_outofplace" <<<"$line" && has=1
  [ -n "$line" ] && [ $has = $reach ] ||
    { echo "reach $reach: the plan ranged to 8 MiB is $([ $has = 1 ] || echo "not ")a candidate at 16 MiB: $line"; fail=1; }
done
grep -qE '#wrong over ranks: [1-9]|FAILED' "$out"/*.log && { echo "wrong results"; fail=1; }
[ $fail = 0 ] && echo "in-job tuning: the slow preferred plan lost, ranks agreed (also with one slowed), the cache was reused, bad caches warned, candidates as the reach rule says"
exit $fail
