#!/usr/bin/env bash
# The GPU tier end to end on a machine with a GPU, in stages, so that a few minutes of GPU time
# go first to the library path as users meet it:
#   stage 1 (at most SHUNT_GPU_CHECK_STAGE1 s, default 300): a Release build of what the stage
#     runs, for this GPU's architecture only; the driver probes (scripts/gpu_probes.c: a copy
#     behind another stream's event at one hardware queue and at the default, pageable
#     asynchronous copies, a copy during a global capture, VMM ids across a remap, descriptors
#     passed by pidfd_getfd and SCM_RIGHTS, memory kept by an open descriptor); port plans (the
#     GPU proxy) on GPU 0; two processes of different host identities over TCP at one hardware
#     queue and at the default; PyTorch with SHUNT_ZERO_COPY=1 and tensor registration (default
#     and expandable allocators); shunt-perf on device buffers (2, 4 and 8 ranks as
#     threads on GPU 0, eager and with CUDA graphs, every call checked, the self-check's verdict);
#     the speed ratios; PyTorch on the GPU executor (all_reduce, all_gather_into_tensor,
#     reduce_scatter_tensor, broadcast from every root, all_to_all_single when alltoall plans
#     are shipped; processes under MPS, graphs replayed 100 times, a global-mode capture on
#     one thread while another thread's communicator works, the caching allocator with
#     expandable segments);
#   stage 2 (what is left of SHUNT_GPU_CHECK_BUDGET s, default 570, in all): the rest of the
#     build, in-job tuning of device calls against NCCL, the tests labelled gpu, the library path and a few plans under compute-sanitizer,
#     the conformance corpus, nccl-tests when NCCL_TESTS_DIR names its source (all_reduce,
#     all_gather, reduce_scatter, alltoall, broadcast from roots 0-3), the host tests.
#   scripts/gpu-check.sh [LOGDIR] [--stage 1|2|all]     (default: all)
# Every step's timeout is cut to what is left of its stage's budget, a step that no longer fits
# is skipped with a line saying so, and summary.txt is written after every step, so that a run
# cut off from outside still leaves what it found. The build warns but never fails on a
# compiler's warning (SHUNT_WERROR is off): a GPU draw must not be spent on one.
# Dependencies that the machine lacks can be supplied as Debian packages in .deps/
# (e.g. libcjson-dev and libcjson1); they are unpacked into .deps/root.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$PWD stages="1 2"
while [ $# -gt 0 ]; do
  case $1 in
    --stage) case ${2:-} in 1 | 2) stages=$2 ;; all) stages="1 2" ;; *) echo "gpu-check: --stage 1|2|all" >&2; exit 2 ;; esac; shift 2 ;;
    *) logs=$1; shift ;;
  esac
done
mkdir -p "$logs"
jobs=$(nproc 2>/dev/null || echo 4)
summary=()
: >"$logs/summary.txt"
note() {
  summary+=("$*")
  printf '\n== %s\n' "$*"
  printf '%s\n' "$*" >>"$logs/summary.txt"
}
total_deadline=$((SECONDS + ${SHUNT_GPU_CHECK_BUDGET:-570}))
deadline=$total_deadline
# t N: a step's timeout, N seconds or what is left of the stage's budget (20 s kept for the summary).
t() {
  local left=$((deadline - SECONDS - 20))
  [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
# fits N "what": true when at least N seconds are left; otherwise notes the skip.
fits() {
  [ $((deadline - SECONDS - 20)) -ge "$1" ] && return 0
  note "$2: SKIPPED (the stage's budget is spent)"
  return 1
}

prefix_args=()
if ! [ -f /usr/include/cjson/cJSON.h ] && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p .deps/root
  for d in .deps/*.deb; do dpkg -x "$d" .deps/root; done
  prefix_args+=(-DCMAKE_PREFIX_PATH="$PWD/.deps/root/usr" -DCMAKE_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu")
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export PATH=/usr/local/cuda/bin:$PATH

nvidia-smi -L 2>/dev/null | sed 's/^/GPU: /' || echo "GPU: nvidia-smi unavailable"
# This GPU's architecture only: the fat binary for every architecture is CI's to build.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
configure() {
  [ -f build-gpu/CMakeCache.txt ] && return 0
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} "${prefix_args[@]}" \
    ${SHUNT_GPU_CMAKE_ARGS:-} >build-gpu.log 2>&1
}
# build WHAT [TARGET...]: builds the targets (all of them when none is named).
build() {
  local what=$1; shift
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  if configure && timeout "$(t 240)" cmake --build build-gpu -j"$jobs" "${targets[@]}" >>build-gpu.log 2>&1; then
    note "build ($what): ok ($(grep -E 'NCCL headers|real NCCL|GPU code' build-gpu.log | sort -u | tr '\n' ' '))"
  else
    tail -40 build-gpu.log
    note "build ($what): FAILED"
    return 1
  fi
}
rm -rf build-gpu
rc=0
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
perf=build-gpu/tools/shunt-perf/shunt-perf
gpu_env=(SHUNT_PLAN_DIR=$PWD/plans SHUNT_FALLBACK=0 SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT)

# A step's outcome from its exit status: 124 (timeout) is a hang, not a failure.
outcome() { case $1 in 0) echo ok ;; 124) echo HUNG ;; *) echo "FAILED (exit $1)" ;; esac; }

# The driver facts the executor relies on (scripts/gpu_probes.c), each under its own timeout.
probes() {
  local bin=build-gpu/gpu_probes p st log
  if ! gcc -std=gnu11 -O1 -o "$bin" scripts/gpu_probes.c -I/usr/local/cuda/include \
       -L/usr/local/cuda/lib64/stubs -lcuda -lpthread >"$logs/probes-build.log" 2>&1; then
    note "driver probes: not built ($(tail -1 "$logs/probes-build.log"))"; rc=1; return
  fi
  for p in "queue CUDA_DEVICE_MAX_CONNECTIONS=1" "queue" pageable capture remap fdpass release; do
    set -- $p
    fits 15 "probe $*" || continue
    log="$logs/probe-$1${2:+-1conn}.log"
    env ${2:+"$2"} timeout "$(t 15)" "$bin" "$1" >"$log" 2>&1
    st=$?
    note "probe $1${2:+ ($2)}: $(outcome $st): $(grep -h '^PROBE' "$log" | head -1 | cut -d: -f2-)"
  done
}

# The paths the CUDA stand-in cannot prove: port channels through the GPU proxy on one GPU, a
# world spanning two host identities over TCP (the proxy's stream copies, at one hardware queue
# and at the default), registered buffers reached in place by peers.
risky_paths() {
  local dir=build-gpu/port-plans log st id idpid conn pids r envx
  if [ -x "$perf" ] && fits 30 "port plans on GPU 0"; then
    mkdir -p "$dir" && cp plans/*_port_*.json "$dir"/
    log="$logs/perf-gpu-port.log"
    env "${gpu_env[@]}" SHUNT_PLAN_DIR=$PWD/$dir SHUNT_DEBUG_SUBSYS=INIT,CALL timeout "$(t 45)" \
      "$perf" -t 4 -b 1K -e 16M -f 4 -n 5 -w 1 --coll allreduce,allgather,reducescatter >"$log" 2>&1
    st=$?
    if [ $st = 0 ] && grep -q "max #wrong over ranks: 0: OK" "$log" && ! grep -q "host backend" "$log"; then
      note "port plans (the GPU proxy), 4 ranks on GPU 0: ok ($(grep -c ' -> plan .*_port_' "$log") calls on port plans)"
    else
      grep -E "WARN|wrong" "$log" | head -5; note "port plans, 4 ranks on GPU 0: $(outcome $st) ($log)"; rc=1
    fi
  fi
  for conn in 1 default; do
    [ -x "$perf" ] && fits 30 "two host identities over TCP, connections $conn" || continue
    log="$logs/perf-gpu-hosts-$conn"
    exec {idfd}< <("$perf" --make-id 2>/dev/null)
    idpid=$!
    read -r -t 20 id <&$idfd || { note "two host identities, connections $conn: no id"; continue; }
    pids=() envx=()
    [ "$conn" = 1 ] && envx=(CUDA_DEVICE_MAX_CONNECTIONS=1)
    for r in 0 1; do
      env "${gpu_env[@]}" "${envx[@]}" SHUNT_GPU_ACROSS_HOSTS=on SHUNT_NET=socket SHUNT_SOCKET_IFNAME=lo SHUNT_HOSTID=host$r SHUNT_PERF_NRANKS=2 \
        SHUNT_PERF_RANK=$r SHUNT_PERF_ID="$id" SHUNT_GPU_CHECK_TIMEOUT=5 timeout "$(t 25)" \
        "$perf" -b 1K -e 1M -f 16 -n 3 -w 1 --coll allreduce >"$log.$r.log" 2>&1 &
      pids+=($!)
    done
    st=0
    for r in "${pids[@]}"; do wait "$r" || st=$?; done
    kill "$idpid" 2>/dev/null
    exec {idfd}<&-
    v=$(grep -ho "GPU self-check [a-z]*:.*" "$log.0.log" | head -1)
    note "two host identities over TCP on GPU 0, CUDA_DEVICE_MAX_CONNECTIONS=$conn (SHUNT_GPU_ACROSS_HOSTS=on): $(outcome $st); ${v:-no self-check verdict}"
  done
  if python3 -c 'import torch' >/dev/null 2>&1; then
    for alloc in default expandable; do
      fits 60 "PyTorch, zero-copy, $alloc allocator" || continue
      log="$logs/torch-gpu-zc-$alloc.log"
      env PYTORCH_CUDA_ALLOC_CONF=$([ $alloc = expandable ] && echo expandable_segments:True) \
        TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 SHUNT_ZERO_COPY=1 LD_PRELOAD=$PWD/build-gpu/libshunt.so \
        SHUNT_NCCL_LIB=$nccl_lib "${gpu_env[@]}" SHUNT_DEBUG_SUBSYS=INIT,ALLOC timeout "$(t 90)" \
        python3 scripts/torch_gpu.py 2 >"$log" 2>&1
      st=$?
      note "PyTorch, 2 processes, SHUNT_ZERO_COPY=1 with tensor registration, $alloc allocator: $(outcome $st): $(tail -1 "$log")"
      [ $st = 0 ] || { grep -E "WARN|Error|wrong" "$log" | head -5; rc=1; }
    done
  fi
}

stage1() {
  deadline=$((SECONDS + ${SHUNT_GPU_CHECK_STAGE1:-300}))
  [ $deadline -gt $total_deadline ] && deadline=$total_deadline
  build "stage 1" shunt shunt-perf gpu_ratios || { rc=1; return; }
  probes
  risky_paths
  # The library path: shunt-perf on device buffers, every call on shunt's GPU executor (no NCCL
  # behind it, so a call shunt cannot serve fails the run). The self-check's verdict and cost come
  # from its INFO lines.
  if [ -x "$perf" ]; then
    for n in 2 4 8; do
      for g in 0 10; do
        log="$logs/perf-gpu-t$n-G$g.log"
        fits 20 "shunt-perf $n ranks on GPU 0, graphs $g" || continue
        # "host backend" in the device list: shunt-perf found no GPU and measured host memory.
        if env "${gpu_env[@]}" timeout "$(t 90)" "$perf" -t $n -b 1K -e 64M -f 4 -n 10 -w 2 -G $g >"$log" 2>&1 &&
           grep -q "max #wrong over ranks: 0: OK" "$log" && ! grep -q "host backend" "$log"; then
          note "shunt-perf $n ranks on GPU 0, graphs $g: ok; $(grep -o 'Avg bus bandwidth.*' "$log" | tr '\n' ' ')"
        else
          grep -E "WARN|FAILED|wrong|host backend" "$log" | head -5; note "shunt-perf $n ranks on GPU 0, graphs $g: FAILED ($log)"; rc=1
        fi
      done
      v=$(grep -ho "GPU self-check [a-z]*:.*" "$logs/perf-gpu-t$n-G0.log" 2>/dev/null | head -1)
      [ -f "$logs/perf-gpu-t$n-G0.log" ] && note "self-check, $n ranks: ${v:-no verdict logged}"
    done
    # Several ranks driven by one thread (-g): each call one NCCL group of four, graphs captured
    # on four streams at once.
    for g in 0 10; do
      log="$logs/perf-gpu-g4-G$g.log"
      fits 20 "shunt-perf -g 4, graphs $g" || continue
      if env "${gpu_env[@]}" timeout "$(t 60)" "$perf" -g 4 -b 1K -e 16M -f 4 -n 10 -w 2 -G $g >"$log" 2>&1 &&
         grep -q "max #wrong over ranks: 0: OK" "$log" && ! grep -q "host backend" "$log"; then
        note "shunt-perf -g 4 (one thread, 4 ranks on GPU 0), graphs $g: ok; $(grep -o 'Avg bus bandwidth.*' "$log" | tr '\n' ' ')"
      else
        grep -E "WARN|FAILED|wrong|host backend" "$log" | head -5; note "shunt-perf -g 4, graphs $g: FAILED ($log)"; rc=1
      fi
    done
  fi
  # The speed targets, each beside its reference in one run (bench/gpu/gpu_ratios.c): enqueue
  # time against NCCL's, 8-rank 256 MiB bandwidth against cuMemcpyDtoD, 8-rank 1 KiB LL in a graph
  # against empty kernels.
  if [ -x build-gpu/bench/gpu/gpu_ratios ] && fits 30 "gpu_ratios"; then
    if SHUNT_PLAN_DIR=$PWD/plans SHUNT_NCCL_LIB=$nccl_lib timeout "$(t 180)" build-gpu/bench/gpu/gpu_ratios all \
         >"$logs/gpu-ratios.log" 2>&1; then
      while read -r line; do note "ratio: $line"; done <"$logs/gpu-ratios.log"
    else
      tail -10 "$logs/gpu-ratios.log"; note "gpu_ratios: FAILED (gpu-ratios.log)"; rc=1
    fi
  fi

  # PyTorch on the GPU executor: processes sharing GPU 0 need MPS (without it their kernels
  # never run together, and the executor refuses them); the daemon is started for these runs
  # and stopped after, leaving the device as it was. The second run uses the caching
  # allocator's expandable segments (VMM memory, which CUDA IPC cannot export).
  if python3 -c 'import torch' >/dev/null 2>&1 && fits 60 "PyTorch, processes on GPU 0"; then
    mps=0
    export CUDA_MPS_PIPE_DIRECTORY=$PWD/build-gpu/mps-pipe CUDA_MPS_LOG_DIRECTORY=$PWD/build-gpu/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>/dev/null; then mps=1; fi
    for how in "4 default" "2 expandable"; do
      set -- $how
      log="$logs/torch-gpu-$2.log" alloc=""
      [ "$2" = expandable ] && alloc=expandable_segments:True
      fits 40 "PyTorch, $1 processes on GPU 0, $2 allocator" || continue
      # (env: assignments that come from an array's expansion are arguments, not the environment)
      if env PYTORCH_CUDA_ALLOC_CONF=$alloc LD_PRELOAD=$PWD/build-gpu/libshunt.so SHUNT_NCCL_LIB=$nccl_lib "${gpu_env[@]}" \
           timeout "$(t 150)" python3 scripts/torch_gpu.py "$1" >"$log" 2>&1; then
        v=$(grep -ho "GPU self-check [a-z]*:.*" "$log" | head -1)
        note "PyTorch, $1 processes on GPU 0 (MPS $mps), $2 allocator, every call on shunt: $(tail -1 "$log"); ${v:-no self-check verdict logged}"
      else
        grep -E "WARN|Error|wrong|self-check" "$log" | head -8
        note "PyTorch, $1 processes on GPU 0 (MPS $mps), $2 allocator: FAILED ($log)"; rc=1
      fi
    done
    [ $mps = 1 ] && echo quit | nvidia-cuda-mps-control
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi

  # PyTorch with shunt preloaded: every NCCL function torch imports is defined, and a one-rank
  # NCCL process group runs collectives on CUDA tensors exactly (no 1-rank plan: NCCL serves).
  if ! python3 -c 'import torch' >/dev/null 2>&1; then
    note "PyTorch: not installed, not run"
  elif fits 30 "PyTorch with shunt preloaded, one rank"; then
    torch_lib=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib/libtorch_cuda.so
    if scripts/check-nccl-imports.sh --shunt build-gpu/libshunt.so "$torch_lib" &&
       LD_PRELOAD=$PWD/build-gpu/libshunt.so SHUNT_NCCL_LIB=$nccl_lib SHUNT_PLAN_DIR=$PWD/plans SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT,CALL \
         timeout "$(t 120)" python3 scripts/torch_smoke.py >"$logs/torch-smoke.log" 2>&1; then
      note "PyTorch with shunt preloaded, one rank: passed ($(head -1 "$logs/torch-smoke.log"))"
    else
      tail -20 "$logs/torch-smoke.log"; note "PyTorch with shunt preloaded, one rank: FAILED (torch-smoke.log)"; rc=1
    fi
  fi

}

# In-job tuning of device calls (SHUNT_TUNING=auto, a fresh cache): 4 ranks as threads on GPU
# 0, the real NCCL a candidate; the decisions (TUNE lines) and whether every rank's decision
# table is the same, then a second run reading the cache back.
tuning_gpu() {
  [ -x "$perf" ] && [ -n "$nccl_lib" ] || { note "in-job tuning on the GPU: SKIPPED (no shunt-perf or no NCCL)"; return; }
  fits 40 "in-job tuning on the GPU" || return
  local cache log=$logs/tuning-gpu.log
  cache=$(mktemp -d)
  if env "${gpu_env[@]}" SHUNT_NCCL_LIB="$nccl_lib" SHUNT_TUNING=auto SHUNT_TUNING_CACHE="$cache" SHUNT_DEBUG=INFO \
       SHUNT_DEBUG_SUBSYS=TUNE timeout "$(t 90)" "$perf" -t 4 -b 1K -e 64M -f 2 -n 60 -w 0 >"$log" 2>&1 &&
     grep -q "max #wrong over ranks: 0: OK" "$log"; then
    local tables won
    tables=$(grep -oE "rank [0-9]+: decision table [0-9a-f]+" "$log" | awk '{t[$2]=$5} END {for (r in t) print t[r]}' | sort -u | wc -l)
    won=$(grep -oE "winner [a-z0-9_]+" "$log" | sort | uniq -c | tr '\n' ' ')
    note "in-job tuning on the GPU, 4 ranks: ok; $( [ "$tables" = 1 ] && echo "one decision table on every rank" || echo "RANKS DIFFER ($tables tables)"); winners: $won"
    [ "$tables" = 1 ] || rc=1
    if env "${gpu_env[@]}" SHUNT_NCCL_LIB="$nccl_lib" SHUNT_TUNING=auto SHUNT_TUNING_CACHE="$cache" SHUNT_DEBUG=INFO \
         SHUNT_DEBUG_SUBSYS=TUNE timeout "$(t 60)" "$perf" -t 4 -b 1K -e 64M -f 2 -n 20 -w 0 >"$log.cached" 2>&1 &&
       ! grep -q "ranks: screen" "$log.cached"; then
      note "in-job tuning, cache read back: nothing tuned again"
    else
      note "in-job tuning, cache read back: FAILED ($log.cached)"; rc=1
    fi
  else
    grep -E "WARN|FAILED|wrong" "$log" | head -5; note "in-job tuning on the GPU: FAILED ($log)"; rc=1
  fi
  rm -rf "$cache"
}

stage2() {
  deadline=$total_deadline
  build "stage 2" || { rc=1; return; }
  tuning_gpu
  if timeout "$(t 240)" ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$logs/ctest-gpu.log"; [ "${PIPESTATUS[0]}" = 0 ]; then
    # On a machine with a GPU a skipped gpu test is a failure of this check: it proved nothing.
    if grep -q "Skipped" "$logs/ctest-gpu.log"; then
      note "gpu tests: some SKIPPED on a GPU machine ($(grep -o '[a-z_]* (Skipped)' "$logs/ctest-gpu.log" | tr '\n' ' '))"; rc=1
    else
      note "gpu tests: passed ($(grep -c 'Passed' "$logs/ctest-gpu.log") tests)"
    fi
  else
    note "gpu tests: FAILED"; rc=1
  fi
  if [ -x "$perf" ]; then
    # The library path under compute-sanitizer: small sizes, two ranks as threads.
    if command -v compute-sanitizer >/dev/null; then
      for tool in memcheck racecheck synccheck; do
        fits 30 "compute-sanitizer $tool, library path" || continue
        env "${gpu_env[@]}" timeout "$(t ${SHUNT_SANITIZER_TIMEOUT:-120})" compute-sanitizer --tool "$tool" --error-exitcode 3 \
          "$perf" -t 2 -b 1K -e 64K -f 8 -n 1 -w 0 -G 1 >"$logs/sanitizer-perf-$tool.log" 2>&1
        st=$?
        if [ $st = 0 ]; then note "compute-sanitizer $tool, library path: clean"
        else tail -20 "$logs/sanitizer-perf-$tool.log"; note "compute-sanitizer $tool, library path: FAILED (exit $st)"; rc=1; fi
      done
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
      fits 30 "compute-sanitizer $tool" || continue
      SHUNT_GPU_TEST_QUICK=1 timeout "$(t ${SHUNT_SANITIZER_TIMEOUT:-120})" compute-sanitizer --tool "$tool" \
        --error-exitcode 3 build-gpu/tests/gpu/test_exec_gpu build-gpu/empty "${san_plans[@]}" \
        >"$logs/sanitizer-$tool.log" 2>&1
      st=$?
      if [ $st = 0 ]; then
        note "compute-sanitizer $tool: clean ($(grep -c '^PASS' "$logs/sanitizer-$tool.log") plans)"
      else
        tail -20 "$logs/sanitizer-$tool.log"
        note "compute-sanitizer $tool: FAILED (exit $st, see sanitizer-$tool.log)"; rc=1
      fi
    done
  else
    note "compute-sanitizer: not run (no compute-sanitizer or no test_exec_gpu)"; rc=1
  fi
  # The conformance corpus (zero-copy memory, port and switch-channel plans, in place and out of
  # place) on the GPU executor.
  if [ -x build-gpu/tests/gpu/test_exec_gpu ] && fits 30 "corpus on the GPU" &&
     python3 scripts/gen_corpus.py --out build-gpu/corpus >/dev/null; then
    if timeout "$(t 180)" build-gpu/tests/gpu/test_exec_gpu build-gpu/corpus >"$logs/corpus-gpu.log" 2>&1; then
      note "corpus on the GPU: passed ($(grep -c '^PASS' "$logs/corpus-gpu.log") plans)"
    else
      grep -E '^FAIL|also:' "$logs/corpus-gpu.log" | head -20; note "corpus on the GPU: FAILED (corpus-gpu.log)"; rc=1
    fi
  fi
  # Plans of the caller's own, when SHUNT_GPU_EXTRA_PLANS names a folder of them.
  if [ -n "${SHUNT_GPU_EXTRA_PLANS:-}" ] && [ -x build-gpu/tests/gpu/test_exec_gpu ] && fits 30 "extra plans on the GPU"; then
    if timeout "$(t 180)" build-gpu/tests/gpu/test_exec_gpu "$SHUNT_GPU_EXTRA_PLANS" >"$logs/extra-gpu.log" 2>&1; then
      note "extra plans on the GPU: passed ($(grep -c '^PASS' "$logs/extra-gpu.log") plans)"
    else
      grep -E '^FAIL|also:' "$logs/extra-gpu.log" | head -20; note "extra plans on the GPU: FAILED (extra-gpu.log)"; rc=1
    fi
  fi
  # nccl-tests under LD_PRELOAD, when its source is at hand (ranks as threads on GPU 0).
  if [ -n "${NCCL_TESTS_DIR:-}" ] && [ -d "$NCCL_TESTS_DIR" ] && fits 60 "nccl-tests"; then
    nccl_home=$(dirname "$(dirname "$nccl_lib")")
    if timeout "$(t 200)" make -C "$NCCL_TESTS_DIR" -j"$jobs" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" >"$logs/nccl-tests-build.log" 2>&1; then
      # broadcast_perf once per root (-r); alltoall_perf on shunt alone only when the plans hold
      # alltoall plans, else with NCCL behind shunt (SHUNT_FALLBACK=1: the calls go to NCCL).
      a2a_env=(SHUNT_FALLBACK=0)
      ls plans/alltoall_*.json >/dev/null 2>&1 || a2a_env=(SHUNT_FALLBACK=1 SHUNT_NCCL_LIB="$nccl_lib")
      for run in all_reduce_perf all_gather_perf reduce_scatter_perf alltoall_perf \
                 broadcast_perf:0 broadcast_perf:1 broadcast_perf:2 broadcast_perf:3; do
        nt=${run%%:*} extra=() env_nt=() name=$nt
        [ "$run" != "$nt" ] && extra=(-r "${run#*:}") name="$nt-root${run#*:}"
        [ "$nt" = alltoall_perf ] && env_nt=("${a2a_env[@]}")
        fits 20 "nccl-tests $name" || continue
        if env LD_PRELOAD=$PWD/build-gpu/libshunt.so "${gpu_env[@]}" "${env_nt[@]}" timeout "$(t 120)" \
             "$NCCL_TESTS_DIR/build/$nt" -b 1K -e 64M -f 4 -t 4 -g 1 -c 1 "${extra[@]}" >"$logs/nccl-tests-$name.log" 2>&1 &&
           grep -q "Out of bounds values : 0 OK" "$logs/nccl-tests-$name.log"; then
          note "nccl-tests $name under LD_PRELOAD${env_nt[*]:+ (${env_nt[0]})}: ok, $(grep -o 'Avg bus bandwidth.*' "$logs/nccl-tests-$name.log")"
        else
          tail -5 "$logs/nccl-tests-$name.log"; note "nccl-tests $name: FAILED"; rc=1
        fi
      done
    else
      note "nccl-tests: build FAILED (nccl-tests-build.log)"; rc=1
    fi
  fi
  # The whole host test suite on this machine last: CI runs it on every change anyway.
  if fits 60 "host tests on the GPU machine"; then
    if timeout "$(t 400)" ctest --test-dir build-gpu -LE gpu --output-on-failure -j"$jobs" >"$logs/ctest-host.log" 2>&1; then
      note "host tests on the GPU machine: passed"
    else
      tail -30 "$logs/ctest-host.log"; note "host tests on the GPU machine: FAILED or cut off by the budget (ctest-host.log)"; rc=1
    fi
  fi
}

for st in $stages; do
  note "stage $st"
  stage$st
done
note "gpu-check took $SECONDS s (budget ${SHUNT_GPU_CHECK_BUDGET:-570} s)"
printf '\n== summary\n'
printf '%s\n' "${summary[@]}"
exit $rc
