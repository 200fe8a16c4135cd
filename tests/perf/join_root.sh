#!/usr/bin/env bash
# shunt-perf ranks started one by one, as on several machines, that find each other from
# SHUNT_PERF_RANK / _NRANKS / _ROOT alone; a stray connection to the root's port is refused
# without disturbing the run. Every rank must exit 0, rank 0 must print both tables with a plan
# named in each row, and a rank given the wrong size must be refused.
# Usage: join_root.sh SHUNT_PERF NRANKS
set -u
perf=$1
n=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SHUNT_PERF_NRANKS=$n SHUNT_BOOTSTRAP_TIMEOUT=60
args=(-b 2K -e 32K -f 4 -n 1 -w 0)
# A random port may be taken by another test's socket: rank 0 then says so, and a new one is
# drawn (three times at most).
for _ in 1 2 3; do
  port=$((20000 + RANDOM % 30000))
  export SHUNT_PERF_ROOT=127.0.0.1:$port
  SHUNT_PERF_RANK=0 "$perf" "${args[@]}" >"$out/0.log" 2>&1 &
  pids=($!)
  # A stray peer: connects, sends garbage and leaves, before any real rank asks.
  for _ in $(seq 50); do
    if (echo "not a rank of this run" >/dev/tcp/127.0.0.1/$port) 2>/dev/null; then break; fi
    grep -q "Address already in use" "$out/0.log" && break
    sleep 0.1
  done
  grep -q "Address already in use" "$out/0.log" || break
  wait "${pids[0]}"
done
# A rank of another run (wrong size) must be refused, not served.
SHUNT_PERF_NRANKS=$((n + 1)) SHUNT_PERF_RANK=1 SHUNT_BOOTSTRAP_TIMEOUT=2 "$perf" "${args[@]}" >"$out/wrong.log" 2>&1
wrong=$?
for r in $(seq 1 $((n - 1))); do
  SHUNT_PERF_RANK=$r "$perf" "${args[@]}" >"$out/$r.log" 2>&1 &
  pids+=($!)
done
fail=0
for r in "${!pids[@]}"; do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed:"; cat "$out/$r.log"; fail=1
  fi
done
if [ "$wrong" = 0 ]; then echo "a rank of another size was served"; cat "$out/wrong.log"; fail=1; fi
grep -q "refused a connection" "$out/0.log" || { echo "the stray connection was not reported"; fail=1; }
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float .* (allreduce|allgather)_[0-9]+r_' "$out/0.log")
[ "$rows" = 6 ] || { echo "expected 6 rows served by plans, saw $rows"; cat "$out/0.log"; fail=1; }
if grep -qE '#wrong over ranks: [1-9]|FAILED' "$out/0.log"; then fail=1; fi
exit $fail
