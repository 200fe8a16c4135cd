#!/usr/bin/env bash
# Checks that libshunt exports every nccl*/pnccl* function the real libnccl.so.2 exports and
# every one the nccl.h used for the build declares, every name in each LIST file (the exports
# of a release, the NCCL imports of a client such as PyTorch), and nothing but nccl*/pnccl*
# symbols and shunt's own shunt<Name> calls.
# Usage: check_exports.sh LIBSHUNT REAL_LIBNCCL|"" NCCL_H [LIST...]
set -euo pipefail
shunt=$1 real=$2 header=$3
shift 3
fail=0
exported=$(nm -D --defined-only "$shunt" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u)

if [ -n "$real" ] && [ -f "$real" ]; then
  want=$(nm -D --defined-only "$real" | awk '$2 ~ /^[TW]$/ && $3 ~ /^p?nccl/ {print $3}' | sort -u)
  missing=$(comm -23 <(echo "$want") <(echo "$exported"))
  if [ -n "$missing" ]; then echo "exported by $real but not by shunt:"; echo "$missing"; fail=1; fi
  echo "real library: $(echo "$want" | wc -l) symbols compared"
else
  echo "no real libnccl.so.2 to compare with; header only"
fi

declared=$(grep -oE '\bp?nccl[A-Za-z0-9_]+[[:space:]]*\(' "$header" | tr -d '( \t' | sort -u |
           grep -vE '^(ncclConfig|ncclSimInfo|ncclUniqueId)' || true)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then echo "declared in $header but not exported by shunt:"; echo "$missing"; fail=1; fi
echo "header: $(echo "$declared" | wc -l) declarations compared"

for list in "$@"; do
  want=$(grep -vE '^(#|$)' "$list" | sort -u)
  missing=$(comm -23 <(echo "$want") <(echo "$exported"))
  if [ -n "$missing" ]; then echo "named in $list but not exported by shunt:"; echo "$missing"; fail=1; fi
  echo "$(basename "$list"): $(echo "$want" | wc -l) names compared, $(echo "$missing" | sed '/^$/d' | wc -l) missing"
done

extra=$(echo "$exported" | grep -vE '^(p?nccl|shunt[A-Z])' || true)
if [ -n "$extra" ]; then echo "shunt exports symbols outside the NCCL namespace:"; echo "$extra"; fail=1; fi
exit $fail
