#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh --tests), builds shunt and runs every test: the
# normal build, the AddressSanitizer + UBSan build of
# the host tests, the GPU kernel built for the CPU and the verbs transport under ThreadSanitizer, and, when clang is present, a bounded
# fuzzing run. GPU tests skip themselves (exit 77) where there is no GPU.
#   scripts/test.sh            everything
#   SHUNT_TEST_QUICK=1 scripts/test.sh   normal build only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

# Each stage's time is printed as it ends and again in a table at the end.
stages=()
stage="" stage_t0=$SECONDS
end_stage() {
  [ -n "$stage" ] && stages+=("$(printf '%5ds  %s' $((SECONDS - stage_t0)) "$stage")")
  stage=""
}
step() {
  end_stage
  stage="$*" stage_t0=$SECONDS
  printf '\n== %s\n' "$*"
}

step "set-up (scripts/setup.sh --tests)"
scripts/setup.sh --tests
step "build (RelWithDebInfo) in build/"
# Without a GPU, the kernels for one generation (Hopper) only: each architecture is a minute and
# more of nvcc on a core, and the front end that finds nearly every error is the same for all.
# With one, every generation Dependencies.cmake lists, as users' builds and the wheel take.
arch_opt=()
nvidia-smi -L >/dev/null 2>&1 || arch_opt=(-DCMAKE_CUDA_ARCHITECTURES=90)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHUNT_WERROR=ON -DSHUNT_REQUIRE_NCCL_NEWER=ON \
  "${arch_opt[@]}" >/dev/null
cmake --build build -j"$jobs"
step "tests"
ctest --test-dir build --output-on-failure -j"$jobs"

# A Release build (-O3, where GCC finds more to warn about) of the library and the forwarding tests.
step "Release build against NCCL 2.32.3's headers in build-nccl232/ (the forwarding tests)"
nccl232_opts=(SHUNT_WERROR=ON SHUNT_ENABLE_CUDA=OFF NCCL_INCLUDE_DIR="$PWD/.deps/nccl-2.32.3/nvidia/nccl/include"
  SHUNT_REQUIRE_NCCL_NEWER=ON)
cmake -S . -B build-nccl232 -DCMAKE_BUILD_TYPE=Release "${nccl232_opts[@]/#/-D}" >/dev/null
cmake --build build-nccl232 -j"$jobs" --target shunt test_forward fakenccl fakenccl_partial notnccl \
  test_newer_real test_preload_real api_config_read import_client_good import_client_bad >/dev/null
ctest --test-dir build-nccl232 --output-on-failure -j"$jobs" -R "^(fallback_|api_config_read)"

summary() {
  end_stage
  printf '\n== time per stage\n'
  printf '%s\n' "${stages[@]}"
}
if [ "${SHUNT_TEST_QUICK:-0}" = 1 ]; then summary; exit 0; fi

# Stages that run beside others, each in a process group of its own (setsid), ended whole if a
# stage fails and ends the script.
bg_pids=()
trap 'for p in "${bg_pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT

# The wheel (pyproject.toml, scripts/wheel.sh): built in build-nccl232/ with that build's options
# (so only the tools and the libnccl.so.2 stub are left to compile), repaired by auditwheel,
# installed into a fresh virtual environment and checked there (tests/wheel/check_wheel.sh). It
# runs beside the sanitizer stages at a lower priority, in the time their tests leave a core idle;
# its result is collected at the end.
wheel_log=$(mktemp)
wheel_t0=$SECONDS
setsid -w nice -n 10 bash -c '
  set -e
  CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=$1 scripts/wheel.sh -C build-dir=build-nccl232 \
    "${@:3}"
  tests/wheel/check_wheel.sh .whl/shunt-*.whl "$2"
' wheel "$jobs" "$PWD/.deps/nccl-2.32.3/nvidia/nccl/lib/libnccl.so.2" "${nccl232_opts[@]/#/-Ccmake.define.}" \
  >"$wheel_log" 2>&1 &
wheel_pid=$!
bg_pids+=("$wheel_pid")

step "build with AddressSanitizer + UBSan in build-asan/"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHUNT_WERROR=ON -DSHUNT_SANITIZE=ON -DSHUNT_ENABLE_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
step "tests under sanitizers"
# Sanitized code runs several times slower: plans get longer before they count as hung.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  SHUNT_HOST_TIMEOUT_MS=${SHUNT_HOST_TIMEOUT_MS:-600000} \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE "gpu|long"

# Fuzzing is one process on one core for a fixed time: it runs beside the ThreadSanitizer stage
# rather than after it; its result is collected below.
fuzz_pid="" fuzz_log="" fuzz_t0=0
if [ -x scripts/fuzz.sh ] && command -v clang >/dev/null; then
  fuzz_log=$(mktemp)
  fuzz_t0=$SECONDS
  setsid -w scripts/fuzz.sh "${SHUNT_FUZZ_SECONDS:-30}" >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
  bg_pids+=("$fuzz_pid") # a stage that fails ends the script: the fuzzer does not outlive it
fi

step "the GPU kernel built for the CPU, and the verbs transport, under ThreadSanitizer in build-tsan/"
# Only what the kernel-cpu and tsan tests run (shunt-plan, kcpu_wait, exec_host_abort, the verbs
# stand-in); the other suites run under ASan above.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHUNT_WERROR=ON -DSHUNT_TSAN=ON -DSHUNT_ENABLE_CUDA=OFF >/dev/null
tsan_targets=(shunt-plan kcpu_wait exec_host_abort)
grep -q "^SHUNT_IBVERBS_INCLUDE_DIR:PATH=/" build-tsan/CMakeCache.txt && tsan_targets+=(fakeibv)
cmake --build build-tsan -j"$jobs" --target "${tsan_targets[@]}"
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L "kernel-cpu|tsan"

if [ -n "$fuzz_pid" ]; then
  step "fuzzing the plan parser (${SHUNT_FUZZ_SECONDS:-30} s, started beside the ThreadSanitizer stage)"
  if ! wait "$fuzz_pid"; then
    tail -60 "$fuzz_log"
    echo "fuzzing failed (reproducers in build-fuzz/artifacts)"
    exit 1
  fi
  tail -8 "$fuzz_log"
  echo "fuzzing took $((SECONDS - fuzz_t0)) s from its start"
  rm -f "$fuzz_log"
fi
step "the wheel: built, repaired, installed in a fresh virtual environment and run (started after the Release build)"
if ! wait "$wheel_pid"; then
  tail -80 "$wheel_log"
  echo "the wheel stage failed"
  exit 1
fi
grep -E "^(wheel:|ldd:|shunt run|verdict|wheel checks)" "$wheel_log" || true
grep -E "^(Ran|OK)" "$wheel_log" | tr '\n' ' '
echo
echo "the wheel stage took $((SECONDS - wheel_t0)) s from its start"
rm -f "$wheel_log"
summary
printf '\n== all tests passed (%d s)\n' "$SECONDS"
