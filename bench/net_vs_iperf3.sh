#!/usr/bin/env bash
# The socket transport against iperf3 between the same two hosts, side by side in one run.
# Two network namespaces joined by a veth pair are the hosts. Everything moves data both ways
# at once, and the figure is the rate of one direction:
#  - iperf3 --bidir (one TCP stream each way): the mean of the two directions;
#  - put: bench/net/net_put_bench, the transport alone: each rank's proxy puts SIZE bytes with
#    a flag into the other's output (cut across SHUNT_SOCKET_NSOCKS sockets), ITERS times;
#  - allgather: shunt-perf, 2 ranks one per host, over the port-channel plan: half the output
#    over the call's time (out of place, ITERS calls after warm-up), the plan's staging copies
#    included.
# The three take turns, ROUNDS times; the table shows each round, the medians and the ratios.
# Usage: bench/net_vs_iperf3.sh [SIZE=256M] [ITERS=10] [ROUNDS=3] [SECONDS=5]
#        (after a build in build/; needs root, iproute2 and iperf3: scripts/setup.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-256M} iters=${2:-10} rounds=${3:-3} secs=${4:-5}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
putb=build/bench/net/net_put_bench
[ -x "$perf" ] && [ -x "$putb" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null && command -v iperf3 >/dev/null ||
  { echo "iproute2 or iperf3 is missing: scripts/setup.sh --bench" >&2; exit 2; }
bytes=$(numfmt --from=iec "$size")
[ "$bytes" -gt $((64 << 20)) ] || { echo "SIZE must exceed 64M (the port plans' range)" >&2; exit 2; }
tag=nb$$
tmp=$(mktemp -d)
cleanup() {
  ip netns pids "$tag-b" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$tag-a" 2>/dev/null || true
  ip netns del "$tag-b" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$tag-a"
ip netns add "$tag-b"
ip link add eth0 netns "$tag-a" type veth peer name eth0 netns "$tag-b"
for h in a b; do
  ip -n "$tag-$h" link set lo up
  ip -n "$tag-$h" link set eth0 up
done
ip -n "$tag-a" addr add 10.78.0.1/24 dev eth0
ip -n "$tag-b" addr add 10.78.0.2/24 dev eth0

iperf_round() {
  ip netns exec "$tag-b" iperf3 -s -1 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  ip netns exec "$tag-a" iperf3 -c 10.78.0.2 -t "$secs" --bidir -J >"$tmp/iperf.json"
  wait "$srv" || true
  python3 - "$tmp/iperf.json" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
up, down = e["sum_received"]["bits_per_second"], e["sum_received_bidir_reverse"]["bits_per_second"]
print("%.0f" % ((up + down) / 2 / 8))  # bytes per second, one direction
EOF
}

shunt_round() {
  local port=$((20000 + RANDOM % 30000)) pids=()
  # shunt-perf's own small exchange (no plan serves 2 ranks on 2 hosts below 64 MiB) goes to
  # the build's NCCL test double: without a GPU no real NCCL makes a communicator.
  local common=(SHUNT_PERF_NRANKS=2 SHUNT_PERF_ROOT=10.78.0.1:$port SHUNT_SOCKET_IFNAME=eth0
                SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=1
                SHUNT_NCCL_LIB=${SHUNT_NCCL_LIB:-$PWD/build/tests/fakenccl/libfakenccl.so})
  for r in 0 1; do
    local h=a
    [ $r = 1 ] && h=b
    ip netns exec "$tag-$h" env "${common[@]}" SHUNT_PERF_RANK=$r SHUNT_HOSTID=host$r \
      "$perf" --coll allgather -b "$size" -e "$size" -n "$iters" -w 2 -c 1 -d int8 >"$tmp/shunt.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/shunt.*.log >&2; return 1; }; done
  # The out-of-place time (us) of the row; it must name the port plan.
  awk -v b="$bytes" '$1 == b && $3 == "int8" {
      if ($NF !~ /^allgather_2r_port_/) { print "row not served by the port plan: " $0 > "/dev/stderr"; exit 1 }
      printf "%.0f\n", b / 2 / ($6 * 1e-6); exit }' "$tmp/shunt.0.log"
}

# The transport alone: each rank's proxy puts SIZE into the other's output ITERS times.
put_round() {
  local port=$((20000 + RANDOM % 30000))
  ip netns exec "$tag-b" env SHUNT_SOCKET_IFNAME=eth0 "$putb" 1 10.78.0.1:$port "$bytes" "$iters" >"$tmp/put.1" 2>&1 &
  local p1=$!
  ip netns exec "$tag-a" env SHUNT_SOCKET_IFNAME=eth0 "$putb" 0 10.78.0.1:$port "$bytes" "$iters" >"$tmp/put.0" 2>&1 ||
    { cat "$tmp"/put.* >&2; return 1; }
  wait "$p1" || { cat "$tmp"/put.* >&2; return 1; }
  cat "$tmp/put.0"
}

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
mb() { awk -v x="$1" 'BEGIN {printf "%.0f", x / 1048576}'; }

echo "# socket transport vs iperf3 between two namespaces (veth), both directions at once, MiB/s of one direction"
echo "# put: the transport alone (net_put_bench: $size puts, ${SHUNT_SOCKET_NSOCKS:-2} socket(s) per peer)"
echo "# allgather: shunt-perf, 2 ranks on 2 hosts, $size total (the plan, staging copies included)"
printf "%-7s %10s %10s %10s\n" round iperf3 put allgather
: >"$tmp/i" && : >"$tmp/p" && : >"$tmp/s"
for k in $(seq 1 "$rounds"); do
  i=$(iperf_round)
  p=$(put_round)
  s=$(shunt_round)
  echo "$i" >>"$tmp/i"
  echo "$p" >>"$tmp/p"
  echo "$s" >>"$tmp/s"
  printf "%-7s %10s %10s %10s\n" "$k" "$(mb "$i")" "$(mb "$p")" "$(mb "$s")"
done
mi=$(median <"$tmp/i") mp=$(median <"$tmp/p") ms=$(median <"$tmp/s")
printf "%-7s %10s %10s %10s\n" median "$(mb "$mi")" "$(mb "$mp")" "$(mb "$ms")"
awk -v p="$mp" -v s="$ms" -v i="$mi" 'BEGIN {printf "ratio put / iperf3: %.2f   allgather / iperf3: %.2f\n", p / i, s / i}'
