#!/usr/bin/env bash
# A/B on the GPU machine: the same benchmark command with two builds, interleaved in one lease
# (old, new, old, new ...), so that both are timed on the same card in the same state.
#   bench/ab_device.sh OLD_BUNDLE_DIR NEW_BUNDLE_DIR OUT_DIR TAG RUNS PROGRAM [ARGS...]
# Each *_BUNDLE_DIR holds a gpu-bundle (../shared/tools/gpu-bundle): bundle.tar.xz. They unpack to
# /tmp/ab-old and /tmp/ab-new; PROGRAM's output goes to OUT_DIR/TAG.{old,new}.N.txt.
set -uo pipefail
old=$1 new=$2 out=$3 tag=$4 runs=$5 prog=$6
shift 6
mkdir -p "$out"
for side in old new; do
  dir=/tmp/ab-$side
  src=$old
  [ "$side" = new ] && src=$new
  if [ ! -f "$dir/.stamp" ] || [ "$src/bundle.tar.xz" -nt "$dir/.stamp" ]; then
    rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf "$src/bundle.tar.xz" && touch "$dir/.stamp"
  fi
done
status=0
for ((r = 1; r <= runs; ++r)); do
  for side in old new; do
    b=/tmp/ab-$side/gpu-bundle
    LD_LIBRARY_PATH="$b/lib" "$b/bin/$prog" "$@" >"$out/$tag.$side.$r.txt" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || status=$rc
    echo "== $tag $side run $r (exit $rc)"
    tail -n 40 "$out/$tag.$side.$r.txt"
  done
done
exit $status
