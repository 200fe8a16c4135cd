#!/usr/bin/env bash
# The GPU tier end to end on a machine with a GPU: a fresh build in build-gpu/, the tests
# labelled gpu, the whole test suite, the benchmark when it is built, and a summary.
# Dependencies that the machine lacks can be supplied as Debian packages in .deps/
# (e.g. libcjson-dev and libcjson1); they are unpacked into .deps/root.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 4)
summary=()
note() { summary+=("$*"); printf '\n== %s\n' "$*"; }

prefix_args=()
if ! [ -f /usr/include/cjson/cJSON.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p .deps/root
  for d in .deps/*.deb; do dpkg -x "$d" .deps/root; done
  prefix_args+=(-DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DCMAKE_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu")
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export PATH=/usr/local/cuda/bin:$PATH

nvidia-smi -L 2>/dev/null | sed 's/^/GPU: /' || echo "GPU: nvidia-smi unavailable"
rm -rf build-gpu
if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release "${prefix_args[@]}" ${SHUNT_GPU_CMAKE_ARGS:-} >build-gpu.log 2>&1 &&
   cmake --build build-gpu -j"$jobs" >>build-gpu.log 2>&1; then
  note "build: ok ($(grep -E 'NCCL headers|real NCCL|GPU code' build-gpu.log | tr '\n' ' '))"
else
  tail -40 build-gpu.log
  note "build: FAILED"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

rc=0
if ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee ctest-gpu.log; [ "${PIPESTATUS[0]}" = 0 ]; then
  # On a machine with a GPU a skipped gpu test is a failure of this check: it proved nothing.
  if grep -q "Skipped" ctest-gpu.log; then
    note "gpu tests: some SKIPPED on a GPU machine ($(grep -o '[a-z_]* (Skipped)' ctest-gpu.log | tr '\n' ' '))"; rc=1
  else
    note "gpu tests: passed ($(grep -c 'Passed' ctest-gpu.log) tests)"
  fi
else
  note "gpu tests: FAILED"; rc=1
fi
if ctest --test-dir build-gpu -LE gpu --output-on-failure -j"$jobs" >ctest-host.log 2>&1; then
  note "host tests on the GPU machine: passed"
else
  tail -30 ctest-host.log; note "host tests on the GPU machine: FAILED"; rc=1
fi
if [ -x build-gpu/tools/shunt-perf/shunt-perf ]; then
  # shunt-perf's buffers are host memory (its CUDA device layer is not written yet), so no
  # call may reach the real NCCL: plans on the host backend only.
  if SHUNT_PLAN_DIR=$PWD/plans SHUNT_FALLBACK=0 build-gpu/tools/shunt-perf/shunt-perf \
      ${SHUNT_PERF_ARGS:--np 8 -b 2K -e 16M -f 4 -n 5 -w 1}; then
    note "shunt-perf: ran"
  else
    note "shunt-perf: FAILED"; rc=1
  fi
fi
printf '\n== summary\n'
printf '%s\n' "${summary[@]}"
exit $rc
