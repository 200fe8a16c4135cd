#!/bin/sh
# Verifies every *.json plan of a folder, found when the test runs (an empty folder passes).
# usage: verify_dir.sh SHUNT_PLAN DIR [verify options...]
tool=$1
dir=$2
shift 2
failed=0
n=0
for f in "$dir"/*.json; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  if ! "$tool" verify "$f" "$@"; then
    failed=$((failed + 1))
  fi
done
echo "verified $n plan(s) in $dir: $failed failed"
[ "$failed" -eq 0 ]
