#!/usr/bin/env bash
# Installs the build into a temporary prefix and checks what a user relies on: the library,
# the libnccl.so.2 link in its own folder, headers, tools, pkg-config file and plans.
# Usage: check_install.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d /tmp/shunt-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib* | head -n1)
fail=0
need() { if [ ! -e "$1" ]; then echo "missing after install: ${1#$prefix/}"; fail=1; fi; }
need "$libdir/libshunt.so"
need "$libdir/shunt/libnccl.so.2"
need "$prefix/include/shunt/shunt.h"
need "$prefix/bin/shunt-info"
need "$libdir/pkgconfig/shunt.pc"
if [ -L "$libdir/shunt/libnccl.so.2" ] && [ "$(readlink -f "$libdir/shunt/libnccl.so.2")" != "$(readlink -f "$libdir/libshunt.so")" ]; then
  echo "libnccl.so.2 does not lead to libshunt.so"; fail=1
fi
soname=$(readelf -d "$libdir/libshunt.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || { echo "soname is '$soname', not libnccl.so.2"; fail=1; }
# The installed tool must find the installed library through its RPATH.
out=$("$prefix/bin/shunt-info")
# ldd's output is taken whole first, and grep reads it without a pipe: with pipefail, grep -q
# leaving at the first match could make ldd die of SIGPIPE and fail the check although the line
# was there.
deps=$(ldd "$prefix/bin/shunt-info")
grep -qE "libnccl.so.2 => $prefix/(bin/\.\./)?lib[^ ]*/shunt/" <<<"$deps" ||
  { echo "installed shunt-info does not load the installed library:"; echo "$deps"; fail=1; }
grep -q "^shunt:" <<<"$out" || { echo "installed shunt-info did not run: $out"; fail=1; }
grep -q "Libs: .*-lshunt" "$libdir/pkgconfig/shunt.pc" || { echo "pkg-config file lacks -lshunt"; fail=1; }
exit $fail
