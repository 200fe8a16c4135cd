#!/bin/sh
# Verifies every *.json plan of a folder, found when the test runs (an empty folder passes).
# VERIFY_GLOB, shell patterns separated by spaces, takes only the files they match (default *.json); VERIFY_SKIP,
# patterns separated by spaces, passes over the plans whose file name matches one of them. The plans go to one shunt-plan
# process, which keeps what it made for one plan for the next (the CPU-built kernel's device
# threads above all: under ThreadSanitizer, making them again per plan cost more than running).
# usage: verify_dir.sh SHUNT_PLAN DIR [verify options...]
tool=$1
dir=$2
shift 2
n=0
pats=""
for g in ${VERIFY_GLOB:-*.json}; do pats="$pats $dir/$g"; done
# shellcheck disable=SC2086
for f in $pats; do
  [ -e "$f" ] || continue
  skip=0
  set -f # the patterns are split at spaces, not expanded here
  # shellcheck disable=SC2254
  for pat in ${VERIFY_SKIP:-/}; do
    case "${f##*/}" in $pat) skip=1 ;; esac
  done
  set +f
  [ "$skip" -eq 1 ] && continue
  n=$((n + 1))
  set -- "$@" "$f"
done
if [ "$n" -eq 0 ]; then
  echo "verified 0 plan(s) in $dir: 0 failed"
  exit 0
fi
out=$(mktemp)
trap 'rm -f "$out" "$out.rc"' EXIT
{
  "$tool" verify "$@"
  echo $? >"$out.rc"
} | tee "$out"
rc=$(cat "$out.rc" 2>/dev/null || echo 1)
# The tool's last line: "verified DONE of N plan(s) in T s: F failed"; plans it did not reach
# (it stops after a hang, whose world it cannot tear down) count as failed.
summary=$(grep -E '^verified [0-9]+ of [0-9]+ plan\(s\) in .* s: [0-9]+ failed$' "$out" | tail -1)
if [ -n "$summary" ]; then
  done_n=$(echo "$summary" | cut -d' ' -f2)
  failed=$(echo "$summary" | sed -E 's/.*: ([0-9]+) failed$/\1/')
  failed=$((failed + n - done_n))
elif [ "$rc" -eq 0 ]; then
  failed=0 # one plan: no summary line
else
  failed=$n
fi
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "verified $n plan(s) in $dir: $failed failed"
[ "$failed" -eq 0 ]
