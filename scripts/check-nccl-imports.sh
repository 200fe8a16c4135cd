#!/usr/bin/env bash
# Lists the NCCL functions that a client library or program imports and libshunt does not
# define; exits 1 if there is one (the client would fail to load with shunt preloaded).
# Usage: scripts/check-nccl-imports.sh [--shunt LIBSHUNT] ELF...
#   e.g. scripts/check-nccl-imports.sh "$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so"
# LIBSHUNT defaults to build/libshunt.so, then the installed lib/libshunt.so beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
shunt=""
if [ "${1:-}" = "--shunt" ]; then shunt=$2; shift 2; fi
if [ $# -eq 0 ]; then
  echo "usage: $0 [--shunt LIBSHUNT] ELF..." >&2
  exit 2
fi
if [ -z "$shunt" ]; then
  for c in "$here/build/libshunt.so" "$here/lib/libshunt.so"; do
    [ -f "$c" ] && { shunt=$c; break; }
  done
fi
[ -f "$shunt" ] || { echo "libshunt.so not found (build it, or pass --shunt PATH)" >&2; exit 2; }
command -v nm >/dev/null || { echo "nm not found: install binutils" >&2; exit 2; }

defined=$(nm -D --defined-only "$shunt" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sed 's/@.*//' | sort -u)
status=0
for elf in "$@"; do
  if ! imports=$(nm -D --undefined-only "$elf" 2>/dev/null); then
    echo "$elf: not a dynamic ELF file (nm cannot read its symbols)" >&2
    status=2
    continue
  fi
  wanted=$(echo "$imports" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^p?nccl' | sort -u || true)
  missing=$(comm -23 <(echo "$wanted") <(echo "$defined") | sed '/^$/d')
  n_wanted=$(echo "$wanted" | sed '/^$/d' | wc -l)
  if [ -n "$missing" ]; then
    echo "$elf: imports $n_wanted NCCL functions; libshunt ($shunt) lacks $(echo "$missing" | wc -l):"
    echo "$missing" | sed 's/^/  /'
    [ $status -eq 0 ] && status=1
  else
    echo "$elf: imports $n_wanted NCCL functions; libshunt defines every one"
  fi
done
exit $status
