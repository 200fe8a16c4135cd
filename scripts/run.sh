#!/usr/bin/env bash
# shunt's main job: install what is missing (scripts/setup.sh), build, report what shunt finds (its version, the real NCCL, the GPUs,
# the shipped plans), then benchmark the shipped plans through the NCCL API with shunt-perf,
# ranks as processes on this machine. Plans run on the host backend (the GPU executor is not
# part of the library yet), and the default sizes are ones the shipped plans serve.
# Arguments replace the default benchmark flags, e.g. scripts/run.sh -np 8 -b 1K -e 64M -f 2
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans}
# shunt-perf's buffers are host memory, which a real NCCL cannot take: no fallback by default.
export SHUNT_FALLBACK=${SHUNT_FALLBACK:-0}

build/tools/shunt-info/shunt-info
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPUs:"; nvidia-smi -L | sed 's/^/             /'
else
  echo "GPUs:        none (the host backend serves plans)"
fi
if [ -x build/tools/shunt-plan/shunt-plan ]; then
  build/tools/shunt-plan/shunt-plan list "$SHUNT_PLAN_DIR"
fi

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-np 4 -b 1K -e 16M -f 4 -n 5 -w 1)
echo
exec build/tools/shunt-perf/shunt-perf "${args[@]}"
