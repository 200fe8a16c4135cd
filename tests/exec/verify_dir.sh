#!/bin/sh
# Verifies every *.json plan of a folder, found when the test runs (an empty folder passes).
# VERIFY_GLOB, a shell pattern, takes only the files it matches (default *.json); VERIFY_SKIP,
# another, passes over the plans whose file name matches it.
# usage: verify_dir.sh SHUNT_PLAN DIR [verify options...]
tool=$1
dir=$2
shift 2
failed=0
n=0
# shellcheck disable=SC2231
for f in "$dir"/${VERIFY_GLOB:-*.json}; do
  [ -e "$f" ] || continue
  # shellcheck disable=SC2254
  case "${f##*/}" in ${VERIFY_SKIP:-/}) continue ;; esac
  n=$((n + 1))
  if ! "$tool" verify "$f" "$@"; then
    failed=$((failed + 1))
  fi
done
echo "verified $n plan(s) in $dir: $failed failed"
[ "$failed" -eq 0 ]
