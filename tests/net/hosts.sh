#!/usr/bin/env bash
# Ranks on several hosts, each host a network namespace of its own (its own address on a
# bridge, its own host identity through SHUNT_HOSTID), joined by shunt-perf from the
# environment: rank 0 hands out the id at its host's address, the bootstrap crosses the
# namespaces. Host buffers on a communicator spanning the hosts are served by the multi-node
# plans (memory channels inside a host, port channels between hosts over the socket
# transport), exactly; uneven hosts (no multi-node plan for that placement) by the port-only
# plans, which need no placement; the same ranks under one host
# identity are served by the one-host plans. Last, a host's link goes down in the middle of a
# run: every rank must end, with an error, within the timeout. The port channels between hosts
# go over TCP (socket; SHUNT_NET=auto finding no verbs library) or over verbs (ib: IBLIB names
# the verbs stand-in, whose wire runs between the namespaces too; and once with host 1's NIC
# down under SHUNT_NET=auto, where every rank must agree on TCP). Needs root and iproute2
# (skips otherwise, exit 77).
# Usage: hosts.sh SHUNT_PERF NHOSTS RANKS_PER_HOST [socket|ib IBLIB]
set -u
perf=$1 hosts=$2 per=$3 net=${4:-socket} iblib=${5:-}
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "skipped: needs root and iproute2 (ip)"
  exit 77
fi
n=$((hosts * per))
tag=s$$
sw=$tag-sw
out=$(mktemp -d)
cleanup() {
  for h in $(seq 0 $((hosts - 1))); do ip netns del "$tag-h$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
# A switch namespace holding a bridge; each host namespace is cabled to it by a veth pair.
ip netns add "$sw" && ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || exit 1
for h in $(seq 0 $((hosts - 1))); do
  ns=$tag-h$h
  ip netns add "$ns" &&
    ip link add "$tag-e$h" netns "$ns" type veth peer name "p$h" netns "$sw" &&
    ip -n "$sw" link set "p$h" master br0 && ip -n "$sw" link set "p$h" up &&
    ip -n "$ns" link set lo up && ip -n "$ns" link set "$tag-e$h" name eth0 &&
    ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev eth0 && ip -n "$ns" link set eth0 up || exit 1
done
port=$((20000 + RANDOM % 30000))
# Every collective with plans for several hosts: allreduce, allgather, reducescatter, broadcast.
args=(-b 2K -e 32K -f 4 -n 1 -w 0 -d float,int32 -o sum --coll allreduce,allgather,reducescatter,broadcast)
colls="allreduce|allgather|reducescatter|broadcast"
common=(SHUNT_PERF_NRANKS=$n SHUNT_PERF_ROOT=10.77.0.1:$port SHUNT_BOOTSTRAP_TIMEOUT=60
        SHUNT_SOCKET_IFNAME=eth0 SHUNT_DEBUG=INFO SHUNT_DEBUG_SUBSYS=INIT,CALL,NET)
# TCP: SHUNT_NET=auto finding no verbs library must fall back to sockets. Verbs: the stand-in's
# NIC takes its host's address (eth0's, the first one up); a QP waits 268 ms per try
# (SHUNT_IB_TIMEOUT 16), four times, before the peer counts as gone: 8 ranks of 2-core CI
# machines, busy with other tests, can leave an acknowledgement unsent for over 100 ms.
if [ "$net" = ib ]; then
  common+=(SHUNT_NET=ib SHUNT_IB_LIB="$iblib" SHUNT_IB_TIMEOUT=16 SHUNT_IB_RETRY_CNT=3)
else
  common+=(SHUNT_NET=auto SHUNT_IB_LIB=/nonexistent/libibverbs.so.1)
fi
transport=$([ "$net" = ib ] && echo verbs || echo socket)
# run NAME [ONE_ID|uneven]: every rank r on host r / per, in that host's namespace, with the
# host's own identity, or ONE_ID on every host, or (uneven) one identity for the last rank and
# another for all the others.
# ALLENV: more VAR=VALUE words for every rank; H1ENV: for the ranks of host 1 only.
run() {
  local name=$1 one=${2:-} pids=() fail=0 id more
  for r in $(seq 0 $((n - 1))); do
    h=$((r / per))
    id=${one:-host$h}
    [ "$one" = uneven ] && { [ $r = $((n - 1)) ] && id=last || id=rest; }
    read -r -a more <<<"${ALLENV:-} $([ $h = 1 ] && echo "${H1ENV:-}")"
    ip netns exec "$tag-h$h" env "${common[@]}" "${more[@]}" SHUNT_PERF_RANK=$r SHUNT_HOSTID="$id" \
      "$perf" "${args[@]}" >"$out/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    if ! wait "${pids[$r]}"; then
      echo "$name: rank $r failed:"
      tail -20 "$out/$name.$r.log"
      fail=1
    fi
  done
  return $fail
}
fail=0
# Every rank its host's identity: the communicator spans $hosts hosts.
if run spread; then
  log=$out/spread.0.log
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +(float|int32) ' "$log")
  served=$(grep -cE "^ +[0-9]+ +[0-9]+ +(float|int32) .* (${colls})_${hosts}x${per}_hier_" "$log")
  [ "$rows" -gt 0 ] && [ "$rows" = "$served" ] ||
    { echo "spread over $hosts hosts: $served of $rows rows served by the ${hosts}x${per} plans (all must be)"; cat "$log"; fail=1; }
  grep -q "node 0 of $hosts, local rank 0 of $per, $per ranks per node" "$log" ||
    { echo "rank 0 did not see $hosts hosts of $per ranks"; grep "node" "$log"; fail=1; }
  grep -q "$transport transport connected to $((n - per)) rank(s) of other hosts" "$log" ||
    { echo "rank 0 did not connect to the $((n - per)) ranks of other hosts"; grep "NET" "$log"; fail=1; }
  grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "wrong results"; fail=1; }
else
  fail=1
fi
# Verbs under SHUNT_NET=auto, but host 1's NIC is down: every rank must agree on TCP instead.
if [ "$net" = ib ] && [ "$hosts" = 2 ]; then
  if ALLENV="SHUNT_NET=auto" H1ENV="FAKEIBV_DOWN=fakeibv0" run mixed; then
    log=$out/mixed.0.log
    grep -q "use TCP sockets (SHUNT_NET=auto; rank $per has no verbs transport)" "$log" ||
      { echo "mixed: rank 0 did not fall back to TCP for rank $per's sake"; grep "NET" "$log"; fail=1; }
    grep -q "socket transport connected to $((n - per)) rank(s) of other hosts" "$log" ||
      { echo "mixed: rank 0 did not connect over TCP"; fail=1; }
    served=$(grep -cE "^ +[0-9]+ +[0-9]+ +(float|int32) .* (${colls})_${hosts}x${per}_hier_" "$log")
    [ "$served" -gt 0 ] || { echo "mixed: no row served by the ${hosts}x${per} plans"; fail=1; }
    grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "mixed: wrong results"; fail=1; }
  else
    fail=1
  fi
fi
# Hosts of different sizes (n-1 ranks and 1): no uniform ranks per node, the same answer on
# every rank, and the port-only plans serve every row. (Two hosts only: the topology logic is
# the same for more.)
if [ "$hosts" != 2 ]; then
  :
elif run uneven uneven; then
  log=$out/uneven.0.log
  grep -q "node 0 of 2, local rank 0 of $((n - 1)), 0 ranks per node" "$log" ||
    { echo "uneven hosts: rank 0 saw another topology"; grep "node" "$log"; fail=1; }
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +(float|int32) ' "$log")
  served=$(grep -cE "^ +[0-9]+ +[0-9]+ +(float|int32) .* (${colls})_${n}r_port" "$log")
  [ "$rows" -gt 0 ] && [ "$rows" = "$served" ] ||
    { echo "uneven hosts: $served of $rows rows served by the port-only plans (all must be)"; cat "$log"; fail=1; }
  grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "wrong results"; fail=1; }
else
  fail=1
fi
# The same namespaces under one host identity: the plans serve every row (the shared-memory
# transport reaches across namespaces that share /dev/shm, as containers of one machine can).
if run together one-host; then
  log=$out/together.0.log
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +(float|int32) ' "$log")
  plans=$(grep -cE "^ +[0-9]+ +[0-9]+ +(float|int32) .* (${colls})_${n}r_" "$log")
  [ "$rows" -gt 0 ] && [ "$rows" = "$plans" ] ||
    { echo "one host: $plans of $rows rows served by plans (all must be)"; cat "$log"; fail=1; }
  grep -qE '#wrong over ranks: [1-9]|FAILED' "$log" && { echo "wrong results"; fail=1; }
else
  fail=1
fi
# A link down in the middle of a run: host 1's cable is pulled while every rank loops on
# allreduce over it. Every rank must end within the timeout plus set-up, and not with success.
if [ "$hosts" = 2 ]; then
  pids=()
  for r in $(seq 0 $((n - 1))); do
    h=$((r / per))
    ip netns exec "$tag-h$h" env "${common[@]}" SHUNT_PERF_RANK=$r SHUNT_HOSTID="host$h" SHUNT_HOST_TIMEOUT_MS=3000 \
      "$perf" -b 256K -e 256K -n 100000 -w 1 -c 0 -d float -o sum >"$out/down.$r.log" 2>&1 &
    pids+=($!)
  done
  # Wait until the run is under way (a row is being timed), then pull the cable.
  for _ in $(seq 1 100); do grep -q "$transport transport connected" "$out/down.0.log" && break; sleep 0.1; done
  sleep 1
  ip -n "$tag-h1" link set eth0 down
  t0=$(date +%s)
  ended=0
  for _ in $(seq 1 300); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && { ended=1; break; }
    sleep 0.1
  done
  took=$(($(date +%s) - t0))
  if [ $ended = 0 ]; then
    echo "link down: ranks still running 30 s later"
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    fail=1
  fi
  for r in "${!pids[@]}"; do
    if wait "${pids[$r]}"; then
      echo "link down: rank $r exited with success"
      tail -5 "$out/down.$r.log"
      fail=1
    fi
  done
  grep -h "WARN" "$out"/down.*.log | head -2
  # The failure names where the ranks of the other host are.
  grep -qE "ranks of other hosts:.* at 10\.77\.0\.[0-9]+|$transport transport: .* to rank [0-9]+ at 10\.77\.0\." \
    "$out"/down.*.log || { echo "link down: no failure named the peer's rank and address"; fail=1; }
  echo "link down: every rank ended in ${took} s"
fi
[ $fail = 0 ] && echo "ranks on $hosts hosts x $per: every call on the ${hosts}x${per} plans over $transport, exact; uneven: the port-only plans; on one host: every call on a plan"
exit $fail
