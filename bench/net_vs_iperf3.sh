#!/usr/bin/env bash
# The socket transport against iperf3 between the same two hosts, side by side in one run.
# Two network namespaces joined by a veth pair are the hosts. Both sides move data both ways
# at once: iperf3 --bidir (one TCP stream each way, or -P streams), and shunt-perf's allgather
# of 2 ranks, one per host, over the port-channel plan (each rank puts its half of the output
# into the other's, cut across SHUNT_SOCKET_NSOCKS sockets). The figure is the rate of one
# direction: iperf3's mean over both directions, and for shunt half the output bytes over the
# call's time (out of place, the mean of ITERS calls after warm-up). The sides take turns,
# ROUNDS times; the table shows each round, the medians and their ratio (shunt / iperf3).
# Usage: bench/net_vs_iperf3.sh [SIZE=256M] [ITERS=10] [ROUNDS=3] [SECONDS=5]
#        (after a build in build/; needs root, iproute2 and iperf3: scripts/setup.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-256M} iters=${2:-10} rounds=${3:-3} secs=${4:-5}
perf=${SHUNT_PERF:-build/tools/shunt-perf/shunt-perf}
[ -x "$perf" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 2; }
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
  local common=(SHUNT_PERF_NRANKS=2 SHUNT_PERF_ROOT=10.78.0.1:$port SHUNT_SOCKET_IFNAME=eth0
                SHUNT_PLAN_DIR=${SHUNT_PLAN_DIR:-$PWD/plans} SHUNT_FALLBACK=0)
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
      printf "%.0f\n", b / 2 / ($5 * 1e-6); exit }' "$tmp/shunt.0.log"
}

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
mb() { awk -v x="$1" 'BEGIN {printf "%.0f", x / 1048576}'; }

echo "# socket transport vs iperf3 between two namespaces (veth), both directions at once"
echo "# shunt: allgather of $size over 2 ranks, ${SHUNT_SOCKET_NSOCKS:-2} socket(s) per peer; iperf3 --bidir ${secs} s"
printf "%-7s %14s %14s\n" round "iperf3 MiB/s" "shunt MiB/s"
: >"$tmp/i" && : >"$tmp/s"
for k in $(seq 1 "$rounds"); do
  i=$(iperf_round)
  s=$(shunt_round)
  echo "$i" >>"$tmp/i"
  echo "$s" >>"$tmp/s"
  printf "%-7s %14s %14s\n" "$k" "$(mb "$i")" "$(mb "$s")"
done
mi=$(median <"$tmp/i") ms=$(median <"$tmp/s")
printf "%-7s %14s %14s\n" median "$(mb "$mi")" "$(mb "$ms")"
awk -v s="$ms" -v i="$mi" 'BEGIN {printf "ratio shunt / iperf3: %.2f\n", s / i}'
