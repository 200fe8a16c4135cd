#!/usr/bin/env bash
# A preloaded libshunt must cost nothing in a process that never calls NCCL (torchrun's agent, a
# compiler, a shell under `python -m shunt run`): the dynamic linker loads only libshunt's own
# dependencies, nothing is opened with dlopen (the real NCCL, the CUDA driver, verbs), no thread
# starts and nothing is logged, whatever the configuration says. Everything shunt does waits for
# the first NCCL call.
# Usage: check_idle.sh LIBSHUNT
set -euo pipefail
lib=$(readlink -f "$1")
# A sanitizer build cannot be preloaded into a program its runtime does not come first in.
if readelf -d "$lib" | grep -qE "NEEDED.*lib(a|t|ub)san"; then
  echo "sanitizer build: not preloadable into /bin/true"
  exit 77
fi
fail=0
cfg=(SHUNT_DEBUG=TRACE SHUNT_DEBUG_SUBSYS=ALL SHUNT_PLAN_DIR=/nonexistent SHUNT_NCCL_LIB=/nonexistent/libnccl.so.2)

# What the dynamic linker loads: libshunt's dependencies, and nothing "dynamically loaded".
log=$(env "${cfg[@]}" LD_DEBUG=files LD_PRELOAD="$lib" /bin/true 2>&1)
if grep -q "dynamically loaded" <<<"$log"; then
  echo "a library was opened with dlopen at start-up:"
  grep "dynamically loaded" <<<"$log"
  fail=1
fi
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
loaded=$(sed -n 's/.*file=\([^ ]*\) .*needed by.*/\1/p' <<<"$log" | xargs -r -n1 basename | sort -u)
allowed=$( (echo "$needed"; basename "$lib"; readelf -d /bin/true | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p') | sort -u)
extra=$(comm -13 <(echo "$allowed") <(echo "$loaded") | grep -v '^$' || true)
if [ -n "$extra" ]; then
  echo "libraries loaded beyond libshunt's and /bin/true's dependencies: $extra"
  fail=1
fi

# Nothing logged (SHUNT_DEBUG=TRACE would print anything shunt did) and no thread started: the
# process reads its own thread count.
out=$(env "${cfg[@]}" LD_PRELOAD="$lib" grep '^Threads:' /proc/self/status 2>&1)
if [ "$(tr -d ' \t' <<<"$out")" != "Threads:1" ]; then
  echo "with libshunt preloaded, a process that makes no NCCL call reports: $out"
  fail=1
fi

# Every file opened, where strace is installed: the libraries and the linker's cache only.
if command -v strace >/dev/null; then
  trace=$(mktemp)
  trap 'rm -f "$trace"' EXIT
  env "${cfg[@]}" strace -f -qq -o "$trace" -e trace=open,openat,clone,clone3,socket -E LD_PRELOAD="$lib" /bin/true
  other=$(grep -vE 'open(at)?\(.*"(/etc/ld\.so\.cache|[^"]*\.so[.0-9]*)"|^[0-9]+ +\+\+\+ exited' "$trace" || true)
  if [ -n "$other" ]; then
    echo "start-up made calls beyond loading libraries:"
    echo "$other"
    fail=1
  fi
fi
[ $fail = 0 ] && echo "preloaded libshunt: no dlopen, no extra library, no thread, no file, no log line"
exit $fail
