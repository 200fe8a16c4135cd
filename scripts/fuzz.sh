#!/usr/bin/env bash
# Builds the plan fuzzer (fuzz/plan_fuzz.c) with clang in build-fuzz and runs it for a bounded
# time on a corpus seeded from plans/*.json and the test plans. Exit status: 0 when no crash,
# leak or hang was found; the fuzzer's own status otherwise (reproducers in build-fuzz/artifacts).
#   scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
secs=${1:-60}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz

src=$root
args=(-DSHUNT_FUZZ=ON -DSHUNT_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF)
if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${args[@]}" >/dev/null
cmake --build "$build" --target plan_fuzz -j2 >/dev/null
fuzzer=$(find "$build" -name plan_fuzz -type f -perm -u+x | head -n 1)

corpus=$build/corpus
mkdir -p "$corpus" "$build/artifacts"
for f in "$root"/plans/*.json "$root"/tests/plan/data/*.json; do
  [ -f "$f" ] && cp "$f" "$corpus/"
done

exec "$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -dict="$root/fuzz/plan.dict" -artifact_prefix="$build/artifacts/" -print_final_stats=1 "$corpus"
