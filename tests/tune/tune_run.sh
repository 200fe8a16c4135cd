#!/bin/sh
# shunt-tune end to end on the host backend, 2 ranks as processes, a few sizes:
#  - 4 ranks of one host: only plans made for one host are candidates;
#  - it writes the tuning file and a PNG, prints the table;
#  - shunt-plan list --tuning takes every 2-rank plan's range from the file, no WARN;
#  - shunt-perf with the file runs each size on the plan the file gives that size;
#  - --coll reduce: one group of rules for both modes, every reduce plan in it;
#  - interrupted, it exits 130 and leaves neither the file nor a temporary one, nor ranks running.
# usage: tune_run.sh SHUNT_TUNE SHUNT_PLAN SHUNT_PERF PLAN_DIR
set -u
tune=$1 plan=$2 perf=$3 dir=$4
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SHUNT_PLAN_DIR="$dir" SHUNT_FALLBACK=0 TMPDIR="$t"
"$tune" -np 2 -b 1K -e 256K -f 16 -n 3 -w 1 --perf "$perf" -o "$t/c.tuning" >"$t/out" 2>"$t/err" ||
  { cat "$t/out" "$t/err"; fail "shunt-tune failed"; }
cat "$t/out"
[ -s "$t/c.tuning" ] || fail "no tuning file"
grep -q '^# allreduce, 2 ranks, out of place: median' "$t/out" || fail "no table"
[ "$(od -An -tx1 -N8 "$t/c.tuning.png" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "the plot is not a PNG"
python3 - "$t/c.tuning.png" <<'PY' || fail "the PNG does not decode"
import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
i, idat, w = 8, b'', 0
while i < len(d):
    n, = struct.unpack('>I', d[i:i+4]); ty = d[i+4:i+8]; body = d[i+8:i+8+n]
    if zlib.crc32(ty + body) != struct.unpack('>I', d[i+8+n:i+12+n])[0]: sys.exit('bad CRC in ' + ty.decode())
    if ty == b'IHDR': w, h = struct.unpack('>II', body[:8])
    if ty == b'IDAT': idat += body
    i += 12 + n
raw = zlib.decompress(idat)
assert len(raw) == h * (w * 3 + 1), 'size'
PY
list=$("$plan" list --tuning "$t/c.tuning" "$dir" 2>&1)
echo "$list" | grep -q WARN && { echo "$list"; fail "the file makes warnings"; }
n2=$(echo "$list" | grep -c '_2r_')
nf=$(echo "$list" | grep '_2r_' | grep -c 'c.tuning:')
[ "$n2" -gt 0 ] && [ "$n2" = "$nf" ] || { echo "$list"; fail "$nf of $n2 2-rank plans take their range from the file"; }
# Each size runs on the plan whose range in the file holds it.
SHUNT_TUNING="$t/c.tuning" "$perf" -np 2 -b 1K -e 256K -f 16 -n 1 -w 0 >"$t/perf" 2>&1 || { cat "$t/perf"; fail "shunt-perf with the file failed"; }
awk '$1 ~ /^[0-9]+$/ && NF > 10 { print $1, $NF }' "$t/perf" | while read -r size plans; do
  for p in $(echo "$plans" | tr '|' ' '); do
    line=$(grep "^$p " "$t/c.tuning") || fail "$p served $size but is not in the file"
    set -- $line
    lo=$(numfmt --from=iec "$3")
    hi=$4
    [ "$hi" = max ] && hi=18446744073709551615 || hi=$(numfmt --from=iec "$hi")
    python3 -c "import sys; sys.exit(0 if $lo <= $size <= $hi else 1)" || fail "$p served $size outside its range $3..$4"
  done
done || exit 1
# One collective with a root: its plans serve both modes, so the file has one group of rules
# for it, and every one of its 2-rank plans is in it.
"$tune" -np 2 -b 1K -e 64K -f 8 -n 2 -w 1 --coll reduce --perf "$perf" -o "$t/r.tuning" \
  >"$t/outr" 2>"$t/errr" || { cat "$t/outr" "$t/errr"; fail "shunt-tune --coll reduce failed"; }
grep -q '^# reduce, 2 ranks, in place: median' "$t/outr" || { cat "$t/outr"; fail "no reduce table"; }
grep -q '^# reduce, 2 ranks, both modes$' "$t/r.tuning" || { cat "$t/r.tuning"; fail "no reduce rules"; }
for p in reduce_2r_ll reduce_2r_simple reduce_2r_port; do
  grep -q "^$p " "$t/r.tuning" || { cat "$t/r.tuning"; fail "$p is not in the reduce rules"; }
done
grep -v '^#' "$t/r.tuning" | grep -v '^$' | grep -vq '^reduce_' && { cat "$t/r.tuning"; fail "rules for other collectives"; }
# Four ranks of one host: the candidates are the plans for one host (the plans for two hosts of two
# ranks cannot serve it, and a pass forcing one would fail the run).
"$tune" -np 4 -b 64K -e 64K -n 2 -w 1 --coll allreduce --perf "$perf" -o "$t/4.tuning" \
  >"$t/out4" 2>"$t/err4" || { cat "$t/out4" "$t/err4"; fail "shunt-tune on 4 ranks failed"; }
grep -q 'allreduce_4r_scratch_outofplace' "$t/out4" || { cat "$t/out4"; fail "4 ranks: a one-host plan is no candidate"; }
grep -q '_hier_' "$t/out4" "$t/4.tuning" && { cat "$t/out4"; fail "4 ranks of one host: a multi-host plan is a candidate"; }
# Interrupted: no file, no temporary file.
"$tune" -np 2 -b 1K -e 64M -f 2 -n 200 --perf "$perf" -o "$t/i.tuning" >/dev/null 2>"$t/ierr" &
pid=$!
sleep 2
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || { cat "$t/ierr"; fail "interrupted: exit $rc, wanted 130"; }
ls "$t" | grep -q '^i\.tuning' && fail "interrupted: $(ls "$t" | grep '^i\.tuning') left behind"
ls "$t" | grep -q 'shunt-tune\.' && fail "interrupted: temporary file left behind"
# ... and no rank of the shunt-perf it drove still runs.
sleep 1
pgrep -f "shunt-perf -np 2 -b 1K -e 64M" >/dev/null && { pkill -f "shunt-perf -np 2 -b 1K -e 64M"; fail "interrupted: shunt-perf's ranks still run"; }
echo "ok: shunt-tune wrote a file that loads and selects as it says; interrupted, it left nothing"
