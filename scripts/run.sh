#!/usr/bin/env bash
# shunt's main job: install what is missing (scripts/setup.sh), build, report what shunt finds (its version, the real NCCL, the GPUs,
# the shipped plans), then benchmark the shipped plans through the NCCL API with shunt-perf.
# With a GPU: device buffers on the GPU executor, four ranks as threads sharing GPU 0 (one
# process: processes sharing a GPU need MPS), eager and with CUDA graphs. Without one: host
# buffers on the host backend, ranks as processes. The default sizes are ones the shipped
# plans serve. Arguments replace the default benchmark flags, e.g. scripts/run.sh -np 8 -b 1K -e 64M -f 2
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >/dev/null
export SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans}

build/tools/shunt-info/shunt-info
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "GPUs:"; nvidia-smi -L | sed 's/^/             /'
  gpu=1
else
  echo "GPUs:        none (the host backend serves plans)"
  # host buffers, which a real NCCL cannot take: no fallback by default
  export SHUNT_FALLBACK=${SHUNT_FALLBACK:-0}
fi
if [ -x build/tools/shunt-plan/shunt-plan ]; then
  build/tools/shunt-plan/shunt-plan list "$SHUNT_PLAN_DIR"
fi

args=("$@")
echo
if [ ${#args[@]} -gt 0 ]; then
  exec build/tools/shunt-perf/shunt-perf "${args[@]}"
elif [ $gpu = 1 ]; then
  build/tools/shunt-perf/shunt-perf -t 4 -b 1K -e 256M -f 4 -n 20 -w 5
  echo
  exec build/tools/shunt-perf/shunt-perf -t 4 -b 1K -e 256M -f 4 -n 20 -w 5 -G 10
else
  exec build/tools/shunt-perf/shunt-perf -np 4 -b 1K -e 16M -f 4 -n 5 -w 1
fi
