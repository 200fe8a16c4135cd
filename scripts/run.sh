#!/usr/bin/env bash
# shunt's main job: build, then benchmark the shipped plans through the NCCL API (on the
# GPU when there is one, else on the host backend). Until the benchmark is built, it reports
# what the build found: the real NCCL, the GPUs and the plans.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans}

if [ -x build/tools/shunt-perf/shunt-perf ]; then
  exec build/tools/shunt-perf/shunt-perf "$@"
fi
build/tools/shunt-info/shunt-info
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPUs:"; nvidia-smi -L | sed 's/^/             /'
else
  echo "GPUs:        none (the host backend serves plans)"
fi
if [ -x build/tools/shunt-plan/shunt-plan ]; then
  build/tools/shunt-plan/shunt-plan list "$SHUNT_PLAN_DIR"
fi
