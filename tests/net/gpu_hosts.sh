#!/usr/bin/env bash
# Device buffers on ranks of several hosts: the GPU backend over the CUDA stand-in, ranks as
# processes on loopback, each host its own identity (SHUNT_HOSTID), its ranks' memory channels
# over (stand-in) CUDA IPC and port channels between hosts as RDMA writes over the verbs
# stand-in, into device regions registered by their dma-buf (the CUDA stand-in's memfd). Checks: every row of 2 hosts x 1 rank served by the port-only plans and of 2 x 2 by
# the multi-node plans, exactly; a completion error in the middle of the calls (the self-check
# skipped) fails the ranks, naming the peer and the status; the same plans over TCP
# (SHUNT_NET=socket, and auto when no rank has an active verbs port, reducescatter too), exactly.
# No stream operation stands between a kernel and the data it waits for (the kernel stages data
# for other hosts in mapped host memory and reads arrivals from there: transport/gpu_fifo.h), so
# the stand-in's hardware queues are strict: each shape runs with one queue per device
# (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM sets), the 2-rank ones also with the default
# of 8 (verbs and TCP), and shunt-perf
# records an event on the user's stream after every call, as PyTorch does. A kernel that waits
# for data stuck behind it in a queue gives up after SHUNT_GPU_TIMEOUT and fails its rank (a
# proxy that copied on its own stream hung so at either setting). The runs take
# SHUNT_GPU_ACROSS_HOSTS at its default (on), and a first run checks the knob's refusal (off):
# every call goes to NCCL with the reason in the CALL log.
# Usage: gpu_hosts.sh SHUNT_PERF FAKEIBV FAKECUDA_DIR (SHUNT_PLAN_DIR: the shipped plans)
set -u
perf=$1 iblib=$2 cudadir=$3
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
# run NAME NRANKS PER [VAR=VALUE...] -- [shunt-perf args]
# The id comes from `shunt-perf --make-id` (its bootstrap root on a port the system picks, so
# that runs beside other tests never collide), which lives until the ranks are done.
run() {
  local name=$1 n=$2 per=$3 pids=() fail=0 extra=() id idpid
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
  shift
  local base=(LD_LIBRARY_PATH="$cudadir" FAKECUDA_DEVICES=1 SHUNT_GPU_CHECK_TIMEOUT=60 SHUNT_FALLBACK=0
              SHUNT_NCCL_LIB=/nonexistent/libnccl.so.2 SHUNT_IB_LIB="$iblib" FAKEIBV_ADDR=127.0.0.1
              SHUNT_BOOTSTRAP_TIMEOUT=60 SHUNT_GPU_TIMEOUT=40 SHUNT_SOCKET_IFNAME=lo SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT,NET
              "${extra[@]}")
  exec {idfd}< <(env "${base[@]}" "$perf" --make-id 2>"$out/$name.id.log")
  idpid=$!
  read -r -t 30 id <&$idfd || { echo "$name: no id from shunt-perf --make-id"; cat "$out/$name.id.log"; return 1; }
  for r in $(seq 0 $((n - 1))); do
    env "${base[@]}" SHUNT_PERF_NRANKS=$n SHUNT_PERF_RANK=$r SHUNT_PERF_ID="$id" SHUNT_HOSTID=host$((r / per)) \
      "$perf" "$@" >"$out/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || fail=1; done
  kill "$idpid" 2>/dev/null
  exec {idfd}<&-
  return $fail
}
rows() { grep -cE '^ +[0-9]+ +[0-9]+ +(float|int8) ' "$1"; }
served() { grep -cE "^ +[0-9]+ +[0-9]+ +(float|int8) .* $2" "$1"; }
fail=0
# SHUNT_GPU_ACROSS_HOSTS=off: no plan serves device calls across hosts; without an NCCL each call
# fails, naming why.
for gpu in auto on; do
  if run refuse$gpu 2 1 SHUNT_GPU_ACROSS_HOSTS=off SHUNT_GPU=$gpu SHUNT_DEBUG_SUBSYS=INIT,CALL \
    -- -b 4K -e 4K -n 1 -w 0 -d float -o sum --coll allreduce; then
    echo "refuse$gpu: a device call across hosts succeeded with no NCCL to serve it"; fail=1
  fi
  grep -q " -> nccl (GPU buffers on ranks of several hosts" "$out/refuse$gpu.0.log" ||
    { echo "refuse$gpu: no CALL line gives the refusal"; tail -n 20 "$out/refuse$gpu.0.log"; fail=1; }
  grep -q "GPU self-check" "$out/refuse$gpu.0.log" && { echo "refuse$gpu: a self-check ran across hosts"; fail=1; }
done
args=(-b 1K -e 64K -f 8 -n 2 -w 1 -d float,int8 -o sum)
# One hardware queue for every shape; the default of 8 for the 2-rank one (the time CI has).
for shape in "2 1 (allreduce|allgather)_2r_port_ 1" "4 2 (allreduce|allgather)_2x2_hier_ 1" \
             "2 1 (allreduce|allgather)_2r_port_ 8"; do
  read -r n per want q <<<"$shape"
  name=gpu${n}x${per}q$q
  if run "$name" "$n" "$per" SHUNT_NET=ib CUDA_DEVICE_MAX_CONNECTIONS=$q -- "${args[@]}"; then
    log=$out/$name.0.log
    total=$(rows "$log") hit=$(served "$log" "$want")
    [ "$total" -gt 0 ] && [ "$total" = "$hit" ] ||
      { echo "$name: $hit of $total rows served by $want (all must be)"; cat "$log"; fail=1; }
    grep -q "GPU region of .* bytes registered" "$log" || { echo "$name: no GPU region registered for verbs"; fail=1; }
    grep -q "GPU region registered by its dma-buf: yes" "$log" || { echo "$name: not registered by its dma-buf"; fail=1; }
    grep -q "GPU self-check passed" "$log" || { echo "$name: the self-check did not pass"; grep WARN "$log"; fail=1; }
    grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "$name: wrong results"; fail=1; }
  else
    echo "$name: a rank failed"; tail -n 20 "$out/$name".*.log; fail=1
  fi
done
# A completion error in the middle of the calls (the self-check skipped, so that it is a call
# that meets it): every rank ends with an error; a failure names the peer and the status.
if run fault 2 1 SHUNT_NET=ib SHUNT_GPU=on FAKEIBV_FAULT=wc_error:25 SHUNT_IB_TIMEOUT=14 SHUNT_IB_RETRY_CNT=1 \
  -- -b 64K -e 64K -n 20 -w 1 -d float -o sum --coll allreduce; then
  echo "fault: the ranks succeeded through a completion error"; fail=1
fi
grep -qE "verbs transport: fakeibv0:1 to rank [01] at 127\.0\.0\.1 \(queue pair [0-9]+\): remote access error" \
  "$out"/fault.*.log || { echo "fault: no failure named the peer and the status"; grep -h WARN "$out"/fault.*.log; fail=1; }
# Over TCP (SHUNT_NET=socket; and auto with no active verbs port anywhere): the kernel stages
# what leaves in mapped host memory, the proxy sends it, the receiving thread writes arrivals
# into the mapped mirror and the kernel's wait copies them in, exactly. The port-only run takes
# reducescatter too (its device calls across hosts on its port plans); its calls count the
# receiving side's flags past 255, where a count seen above its value would pass a wait early.
# One hardware queue for both shapes, the default for the 2-rank one.
for shape in "socket 4 2 SHUNT_NET=socket (allreduce|allgather)_2x2_hier_ allreduce,allgather 1" \
             "fallback 2 1 FAKEIBV_DOWN=fakeibv0 (allreduce|allgather|reducescatter)_2r_port_ allreduce,allgather,reducescatter 1" \
             "fallback 2 1 FAKEIBV_DOWN=fakeibv0 (allreduce|allgather|reducescatter)_2r_port_ allreduce,allgather,reducescatter 8"; do
  read -r name n per env want colls q <<<"$shape"
  name=$name$q
  if run "$name" "$n" "$per" "$env" CUDA_DEVICE_MAX_CONNECTIONS=$q -- "${args[@]}" --coll "$colls"; then
    log=$out/$name.0.log
    total=$(rows "$log") hit=$(served "$log" "$want")
    [ "$total" -gt 0 ] && [ "$total" = "$hit" ] ||
      { echo "$name: $hit of $total rows served by $want (all must be)"; cat "$log"; fail=1; }
    grep -q "GPU port channels to other hosts use TCP sockets" "$log" || { echo "$name: not over TCP"; fail=1; }
    grep -q "socket transport connected to $((n - per)) rank(s)" "$log" || { echo "$name: no TCP connections"; fail=1; }
    grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "$name: wrong results"; fail=1; }
  else
    echo "$name: a rank failed"; tail -n 20 "$out/$name".*.log; fail=1
  fi
done
[ $fail = 0 ] && echo "device buffers on 2 hosts: refused with SHUNT_GPU_ACROSS_HOSTS=off; port-only and multi-node plans over verbs and over TCP, one hardware queue and eight, an event after every call, exact; a completion error fails the ranks"
exit $fail
