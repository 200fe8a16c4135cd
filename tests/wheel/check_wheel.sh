#!/usr/bin/env bash
# Installs a wheel into a fresh virtual environment and checks what a user gets from it:
#   - the installed library and tools resolve nothing outside the wheel but the C library and
#     what every Linux has (ldd), so the wheel runs where the build's packages are absent;
#   - `python -m shunt doctor` says shunt can serve, naming the real NCCL and the plan table;
#   - `python -m shunt run -- shunt-perf -np 4` on host buffers: every collective, every element
#     checked, every call served by a plan (the last column never `nccl` or `-`);
#   - the launcher and helpers (tests/wheel/test_launcher.py, bad input included).
# Usage: check_wheel.sh WHEEL REAL-LIBNCCL
set -euo pipefail
whl=$(readlink -f "$1")
nccl=$(readlink -f "$2")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/shunt-wheel-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" # away from the source tree: `import shunt` must find the installed package
fail=0
bad() {
  echo "FAILED: $*"
  fail=1
}

python3 -m venv venv
venv/bin/pip install -q --disable-pip-version-check --no-index "$whl"
py=venv/bin/python
pkg=$($py -c 'import os, shunt; print(os.path.dirname(shunt.__file__))')
venv_dir=$(readlink -f venv)

# What the installed ELF files resolve: inside the environment, or the C library (libc, libm,
# the dynamic linker), or zlib (shunt-tune), which manylinux counts as part of every Linux.
for f in "$pkg"/lib/libshunt.so "$pkg"/lib/shunt/libnccl.so.2 "$pkg"/bin/*; do
  deps=$(ldd "$f")
  if grep -q "not found" <<<"$deps"; then bad "$f: $(grep 'not found' <<<"$deps")"; fi
  outside=$(grep "=>" <<<"$deps" | grep -v "=> $venv_dir/" |
    grep -vE "^\s*(libc\.so\.6|libm\.so\.6|libz\.so\.1|ld-linux[^ ]*) =>" || true)
  [ -n "$outside" ] && bad "${f#$pkg/} resolves outside the wheel: $outside"
done
lib_deps=$(ldd "$pkg/lib/libshunt.so")
grep -q "libcjson[^ ]* => $venv_dir/" <<<"$lib_deps" || bad "libshunt.so does not take cJSON from the wheel: $lib_deps"
echo "ldd: libshunt.so, lib/shunt/libnccl.so.2 and the tools resolve only the wheel's files and the C library"

# The doctor, with the real NCCL the tests use.
if SHUNT_NCCL_LIB=$nccl $py -m shunt doctor --no-gpu-check >doctor.log 2>&1; then
  for want in "^shunt: +[0-9.]+ at $pkg" "^real NCCL: +$nccl, NCCL 2\." "^plans: +$pkg/share/shunt/plans: ([0-9]+) of \1 usable" \
    "^ +allreduce +2r" "^network: +SHUNT_NET=auto" "^verdict: +shunt can serve this machine"; do
    grep -qE "$want" doctor.log || bad "doctor's report lacks /$want/"
  done
else
  bad "python -m shunt doctor exited $?"
fi
cat doctor.log

# Four ranks as processes on host buffers, every collective, through the launcher. No GPU is
# used (SHUNT_PERF_DEVICE=host), so there is no NCCL communicator behind shunt's
# (SHUNT_FALLBACK=0): a call no plan served would fail the run, and the plan column says which.
if SHUNT_NCCL_LIB=$nccl SHUNT_FALLBACK=0 SHUNT_PERF_DEVICE=host SHUNT_HOST_TIMEOUT_MS=600000 \
  $py -m shunt run -- venv/bin/shunt-perf -np 4 -b 1K -e 1M -f 32 -n 2 -w 1 --coll all >perf.log 2>perf.err; then
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' perf.log || true)
  [ "$rows" -ge 15 ] || bad "shunt-perf printed $rows result rows, not 3 sizes x 5 collectives"
  unserved=$(grep -E '^ +[0-9]+ +[0-9]+ ' perf.log | awk '$NF == "nccl" || $NF == "-"' || true)
  [ -z "$unserved" ] && [ "$rows" -ge 15 ] || bad "calls not served by a plan: $unserved"
  grep -q "max #wrong over ranks: 0: OK" perf.log || bad "shunt-perf found wrong elements"
  grep -q "^shunt-run: LD_PRELOAD=$pkg/lib/libshunt.so; SHUNT_NCCL_LIB=$nccl (yours)" perf.err ||
    bad "shunt-run's line: $(cat perf.err)"
  echo "shunt run -- shunt-perf -np 4 (host buffers): $rows rows, every call served by a plan, 0 wrong"
else
  bad "python -m shunt run -- shunt-perf exited $?: $(tail -5 perf.err)"
  tail -20 perf.log
fi

SHUNT_TEST_NCCL=$nccl $py "$here/test_launcher.py" || bad "test_launcher.py"
[ $fail = 0 ] && echo "wheel checks passed: $(basename "$whl")"
exit $fail
