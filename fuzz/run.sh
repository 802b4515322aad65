#!/usr/bin/env bash
# Builds the fuzzers with clang and runs each for SECONDS (default 60) from its seed corpus
# (fuzz/seeds, fuzz/seeds-number) with its grammar dictionary (fuzz/*.dict: header keywords,
# whole header lines and line orders, elements, types, separators, number edges). Crashes are
# saved under BUILD_DIR/crashes and fail the run; commit them under fuzz/regressions (they are
# replayed on every run, before fuzzing).
# Usage: fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]
#   TARGET: pcd, ply (the loaders: the default, as CI runs them) or number (the ascii number
#   grammar against PCL's own conversions).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
seconds=${2:-60}
shift $(($# >= 2 ? 2 : $#))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pcd ply)
CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" >/dev/null
mkdir -p "$build/crashes"
for fmt in "${targets[@]}"; do
  corpus="$build/corpus-$fmt"
  mkdir -p "$corpus"
  if [ "$fmt" = number ]; then cp "$here"/seeds-number/* "$corpus/"; else cp "$here"/seeds/*."$fmt" "$corpus/"; fi
  # Replay the regressions first: every crash found so far must stay fixed.
  if ls "$here"/regressions/*."$fmt" >/dev/null 2>&1; then
    "$build/${fmt}_fuzzer" "$here"/regressions/*."$fmt" >"$build/regressions-$fmt.log" 2>&1 ||
      { cat "$build/regressions-$fmt.log"; exit 1; }
  fi
  echo "fuzzing the $fmt target for ${seconds}s"
  max_len=4096
  [ "$fmt" = number ] && max_len=65
  "$build/${fmt}_fuzzer" "$corpus" -dict="$here/$fmt.dict" -max_total_time="$seconds" \
    -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$build/crashes/$fmt-" \
    -print_final_stats=1 >"$build/fuzz-$fmt.log" 2>&1 || { tail -40 "$build/fuzz-$fmt.log"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz-$fmt.log" | sed "s/^/  $fmt: /"
done
echo "fuzzing passed"
