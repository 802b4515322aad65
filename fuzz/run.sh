#!/usr/bin/env bash
# Builds the fuzzers with clang and runs each for SECONDS (default 60) from the seed corpus in
# fuzz/seeds plus seeds generated here. Crashes are saved under BUILD_DIR/crashes and fail the
# run; commit them under fuzz/regressions (they are replayed on every run).
# Usage: fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
seconds=${2:-60}
CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" >/dev/null
mkdir -p "$build/crashes"
for fmt in pcd ply; do
  corpus="$build/corpus-$fmt"
  mkdir -p "$corpus"
  cp "$here"/seeds/*."$fmt" "$corpus/"
  # Replay the regressions first: every crash found so far must stay fixed.
  if ls "$here"/regressions/*."$fmt" >/dev/null 2>&1; then
    "$build/${fmt}_fuzzer" "$here"/regressions/*."$fmt" >"$build/regressions-$fmt.log" 2>&1 ||
      { cat "$build/regressions-$fmt.log"; exit 1; }
  fi
  echo "fuzzing the $fmt loader for ${seconds}s"
  "$build/${fmt}_fuzzer" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="$build/crashes/$fmt-" -print_final_stats=1 \
    >"$build/fuzz-$fmt.log" 2>&1 || { tail -40 "$build/fuzz-$fmt.log"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz-$fmt.log" | sed "s/^/  $fmt: /"
done
echo "fuzzing passed"
