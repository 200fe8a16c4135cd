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
# The conformance corpus (zero-copy memory, port and switch-channel plans, in place and out of
# place) on the GPU executor.
if [ -x build-gpu/tests/gpu/test_exec_gpu ] && python3 scripts/gen_corpus.py --out build-gpu/corpus >/dev/null; then
  if build-gpu/tests/gpu/test_exec_gpu build-gpu/corpus >corpus-gpu.log 2>&1; then
    note "corpus on the GPU: passed ($(grep -c '^PASS' corpus-gpu.log) plans)"
  else
    grep -E '^FAIL|also:' corpus-gpu.log | head -20; note "corpus on the GPU: FAILED (corpus-gpu.log)"; rc=1
  fi
fi
# Plans of the caller's own, when SHUNT_GPU_EXTRA_PLANS names a folder of them.
if [ -n "${SHUNT_GPU_EXTRA_PLANS:-}" ] && [ -x build-gpu/tests/gpu/test_exec_gpu ]; then
  if build-gpu/tests/gpu/test_exec_gpu "$SHUNT_GPU_EXTRA_PLANS" >extra-gpu.log 2>&1; then
    note "extra plans on the GPU: passed ($(grep -c '^PASS' extra-gpu.log) plans)"
  else
    grep -E '^FAIL|also:' extra-gpu.log | head -20; note "extra plans on the GPU: FAILED (extra-gpu.log)"; rc=1
  fi
fi
# A few plans under compute-sanitizer (memcheck, racecheck, synccheck): one LL plan with the
# scaling kernels, one port-channel plan (proxy and FIFO), one allgather. Light shapes, since
# the tools slow kernels down; every tool's log is kept in sanitizer-<tool>.log.
if command -v compute-sanitizer >/dev/null && [ -x build-gpu/tests/gpu/test_exec_gpu ]; then
  san_plans=(plans/allreduce_2r_ll_inplace.json plans/allreduce_2r_port_outofplace.json
             plans/allgather_4r_simple_outofplace.json)
  mkdir -p build-gpu/empty
  for tool in memcheck racecheck synccheck; do
    SHUNT_GPU_TEST_QUICK=1 timeout ${SHUNT_SANITIZER_TIMEOUT:-240} compute-sanitizer --tool "$tool" \
      --error-exitcode 3 build-gpu/tests/gpu/test_exec_gpu build-gpu/empty "${san_plans[@]}" \
      >"sanitizer-$tool.log" 2>&1
    st=$?
    if [ $st = 0 ]; then
      note "compute-sanitizer $tool: clean ($(grep -c '^PASS' "sanitizer-$tool.log") plans)"
    else
      tail -20 "sanitizer-$tool.log"
      note "compute-sanitizer $tool: FAILED (exit $st, see sanitizer-$tool.log)"; rc=1
    fi
  done
else
  note "compute-sanitizer: not run (no compute-sanitizer or no test_exec_gpu)"; rc=1
fi
# PyTorch with shunt preloaded: every NCCL function torch imports is defined, and a one-rank
# NCCL process group runs collectives on CUDA tensors exactly (they go to NCCL: GPU buffers).
if python3 -c 'import torch' >/dev/null 2>&1; then
  torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  if scripts/check-nccl-imports.sh --shunt build-gpu/libshunt.so "$torch_lib" &&
     LD_PRELOAD=$PWD/build-gpu/libshunt.so SHUNT_NCCL_LIB=$nccl_lib SHUNT_PLAN_DIR=$PWD/plans SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT,CALL \
       timeout 300 python3 scripts/torch_smoke.py >torch-smoke.log 2>&1; then
    note "PyTorch with shunt preloaded: passed ($(head -1 torch-smoke.log))"
  else
    tail -20 torch-smoke.log; note "PyTorch with shunt preloaded: FAILED (torch-smoke.log)"; rc=1
  fi
else
  note "PyTorch: not installed, not run"
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
