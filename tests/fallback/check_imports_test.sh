#!/usr/bin/env bash
# scripts/check-nccl-imports.sh on two clients: one importing only functions libshunt
# defines (exit 0) and one importing a function it lacks (exit 1, naming it).
# Usage: check_imports_test.sh SCRIPT LIBSHUNT GOOD_CLIENT BAD_CLIENT
set -uo pipefail
script=$1 shunt=$2 good=$3 bad=$4
fail=0
if ! out=$("$script" --shunt "$shunt" "$good"); then echo "good client refused: $out"; fail=1; fi
out=$("$script" --shunt "$shunt" "$bad"); rc=$?
if [ $rc -ne 1 ] || ! grep -q ncclNoSuchFunction <<<"$out"; then
  echo "bad client: expected exit 1 naming ncclNoSuchFunction, got $rc: $out"; fail=1
fi
echo "$out"
exit $fail
