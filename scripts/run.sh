#!/usr/bin/env bash
# shunt's main job: build, then report what shunt finds on this machine (its version, the
# real NCCL, the GPUs, and the shipped plans as the library loads them). The benchmark,
# build/tools/shunt-perf/shunt-perf, runs the NCCL API in the style of nccl-tests; it takes
# over this job once the plans have a backend to run on.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans}

build/tools/shunt-info/shunt-info
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPUs:"; nvidia-smi -L | sed 's/^/             /'
else
  echo "GPUs:        none (the host backend serves plans)"
fi
if [ -x build/tools/shunt-plan/shunt-plan ]; then
  build/tools/shunt-plan/shunt-plan list "$SHUNT_PLAN_DIR"
fi
