#!/usr/bin/env bash
# The pcnn command's exit codes, messages and outputs. Usage: cli_test.sh PCNN DATA_DIR
set -u
pcnn=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

# expect CODE PATTERN -- ARGS...: pcnn ARGS exits with CODE and its stderr matches PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  "$pcnn" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" "$tmp/err"; then
    echo "FAIL: pcnn $* -> exit $rc (want $code), stderr:"; sed 's/^/    /' "$tmp/err"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

sample=$data/sample.pcd
expect 0 "indices written to" -- knn "$sample" -k 4 --device cpu -o "$tmp/i.npy" --distances "$tmp/d.csv"
[ -s "$tmp/i.npy" ] && [ "$(head -c 6 "$tmp/i.npy" | tail -c 5)" = "NUMPY" ] || { echo "FAIL: no .npy"; fails=$((fails + 1)); }
[ "$(wc -l <"$tmp/d.csv")" -eq 50001 ] || { echo "FAIL: csv rows"; fails=$((fails + 1)); }
expect 0 "points +50,000" -- knn "$sample" -k 1 --device cpu --json
grep -q '"command": "knn"' "$tmp/out" || { echo "FAIL: --json"; fails=$((fails + 1)); }
expect 0 "wrote 1,000 points" -- generate clustered -n 1000 -o "$tmp/c.pcd"
expect 0 "queries" -- knn "$sample" --query "$tmp/c.pcd" -k 3 --device cpu
expect 3 "cannot read cloud '$tmp/missing.pcd': no such file" -- knn "$tmp/missing.pcd"
echo "1 2 3" >"$tmp/c.txt"
expect 3 "unknown extension" -- knn "$tmp/c.txt"
expect 2 "k must be between 1 and 128" -- knn "$sample" -k 0 --device cpu
expect 2 "exclude_self applies to a self-search" -- knn "$sample" --query "$tmp/c.pcd" --exclude-self --device cpu
expect 2 "device" -- knn "$sample" --device tpu
expect 2 "required" -- knn
expect 5 "cannot write '$tmp/nodir/i.npy'" -- knn "$sample" --device cpu -o "$tmp/nodir/i.npy"
[ ! -e "$tmp/nodir" ] || { echo "FAIL: partial output"; fails=$((fails + 1)); }
expect 0 "centroid" -- stats "$sample" --device cpu
expect 0 "kept +4[0-9],[0-9]{3}" -- filter sor "$sample" -o "$tmp/f.pcd" --device cpu --kept-indices "$tmp/kept.csv"
expect 0 "points +4[0-9],[0-9]{3}" -- knn "$tmp/f.pcd" -k 2 --device cpu
expect 0 "removed" -- filter ror "$sample" -o "$tmp/r.ply" --radius 0.3 --min-neighbors 3 --device cpu
expect 2 "needs --radius" -- filter ror "$sample" -o "$tmp/r.ply"
expect 2 "mean_k must be between" -- filter sor "$sample" -o "$tmp/f.pcd" --mean-k 0
expect 0 "neighbors found" -- radius "$sample" -r 0.3 --device cpu -o "$tmp/rad"
for f in offsets indices sqdist; do
  [ -s "$tmp/rad.$f.npy" ] || { echo "FAIL: no rad.$f.npy"; fails=$((fails + 1)); }
done
grep -q "'<i8', 'fortran_order': False, 'shape': (50001, 1)" "$tmp/rad.offsets.npy" || { echo "FAIL: offsets header"; fails=$((fails + 1)); }
expect 0 "pairs written to" -- radius "$sample" -r 0.05 --exclude-self --device cpu -o "$tmp/rad.csv"
[ "$(head -1 "$tmp/rad.csv")" = "query,neighbor,sqdist" ] || { echo "FAIL: pairs csv header"; fails=$((fails + 1)); }
expect 0 "counts written to" -- radius "$sample" -r 0.3 --max-nn 8 --device cpu -o "$tmp/h.npy" --counts "$tmp/hc.csv"
[ "$(wc -l <"$tmp/hc.csv")" -eq 50001 ] || { echo "FAIL: counts csv rows"; fails=$((fails + 1)); }
expect 2 "radius must be a finite number >= 0" -- radius "$sample" -r -1 --device cpu
expect 2 "max-nn must be between 1 and 128" -- radius "$sample" -r 1 --max-nn 0
expect 2 "k must be between 1 and 128, got 500" -- radius "$sample" -r 1 --max-nn 500 --device cpu
expect 2 "go with --max-nn" -- radius "$sample" -r 1 --counts "$tmp/x.csv"
expect 2 "required" -- radius "$sample"
expect 2 "not a memory size" -- knn "$sample" --max-device-memory lots
expect 0 "organized 160 x 120" -- generate depth --width 160 --height 120 -o "$tmp/depth.pcd"
expect 0 "organized, every field" -- smooth "$tmp/depth.pcd" -o "$tmp/depth_s.pcd" --stencil gaussian:3:1.5 --depth-jump 0.1 --device cpu
expect 0 "organized +160 x 120" -- stats "$tmp/depth_s.pcd" --device cpu
expect 0 "Taubin, k = 8" -- smooth "$sample" -o "$tmp/s.ply" --taubin 0.5,-0.53 -k 8 --iterations 3 --device cpu
expect 2 "radius must be 0..7" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" --stencil box:9
expect 2 "positive sum" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" --stencil list:1,-3,1
expect 2 "excludes" -- smooth "$sample" -o "$tmp/x.pcd" --laplacian 0.5 --taubin 0.5,-0.53
expect 2 "Taubin needs" -- smooth "$sample" -o "$tmp/x.pcd" --taubin 0.5,-0.2 --device cpu
[ ! -e "$tmp/x.pcd" ] || { echo "FAIL: output left after an error"; fails=$((fails + 1)); }
# Spatial parts (--devices with the CPU backend: one part per entry) and tiles: the same bytes.
expect 0 "indices written to" -- knn "$sample" -k 8 --exclude-self --device cpu -o "$tmp/one.npy" --distances "$tmp/one_d.npy"
expect 0 "parts +3" -- knn "$sample" -k 8 --exclude-self --device cpu --devices 0,1,2 -o "$tmp/parts.npy" --distances "$tmp/parts_d.npy"
expect 0 "tiles +4" -- knn "$sample" -k 8 --exclude-self --device cpu --tiles 4 -o "$tmp/tiles.npy" --distances "$tmp/tiles_d.npy"
for f in parts tiles; do
  cmp -s "$tmp/one.npy" "$tmp/$f.npy" && cmp -s "$tmp/one_d.npy" "$tmp/${f}_d.npy" || { echo "FAIL: --$f rows differ from one index"; fails=$((fails + 1)); }
done
expect 0 "queries forwarded" -- knn "$sample" --query "$tmp/c.pcd" -k 5 --device cpu --devices 0,1 --json
grep -q '"part_1": {' "$tmp/out" || { echo "FAIL: --devices --json has no part_1"; fails=$((fails + 1)); }
expect 2 "--devices: '0,x' is not" -- knn "$sample" --device cpu --devices 0,x
if "$pcnn" devices >/dev/null 2>&1; then
  # References larger than the device memory allowed: tiles, the same rows as the CPU.
  expect 0 "tiles +[0-9]+" -- knn "$sample" -k 8 --exclude-self --max-device-memory 1M -o "$tmp/gtiles.npy" --distances "$tmp/gtiles_d.npy"
  cmp -s "$tmp/one.npy" "$tmp/gtiles.npy" && cmp -s "$tmp/one_d.npy" "$tmp/gtiles_d.npy" || { echo "FAIL: GPU tiles differ from one index"; fails=$((fails + 1)); }
  expect 0 "tiles +4" -- knn "$sample" -k 8 --exclude-self --tiles 4 -o "$tmp/gtiles4.npy"
  expect 0 "parts +[0-9]+" -- knn "$sample" -k 8 --exclude-self --devices all -o "$tmp/gall.npy"
  for f in gtiles4 gall; do
    cmp -s "$tmp/one.npy" "$tmp/$f.npy" || { echo "FAIL: $f differs from one index"; fails=$((fails + 1)); }
  done
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$tmp/depth.pcd" -o "$tmp/g.pcd" --stencil gaussian:2:1 --depth-jump 0.1 --compare-cpu
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$tmp/depth.pcd" -o "$tmp/g.pcd" --stencil gaussian:2:1 --compare-cpu
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$sample" -o "$tmp/g.pcd" --taubin 0.5,-0.53 -k 10 --compare-cpu
  expect 0 "agreeing percent +100 %" -- radius "$sample" -r 0.3 --compare-cpu
  expect 0 "agreeing percent +100 %" -- radius "$sample" -r 0.3 --max-nn 16 --exclude-self --compare-cpu
  expect 0 "passes" -- radius "$sample" -r 0.3 --max-device-memory 24M
  expect 4 "out of device memory: .* needs .* available under the limit" -- knn "$sample" --max-device-memory 1K
  expect 0 "agreeing percent +100 %" -- knn "$sample" -k 8 --compare-cpu
  for staging in pageable pinned registered mapped; do
    expect 0 "staging +$staging" -- knn "$sample" -k 8 --staging $staging --compare-cpu -o "$tmp/s_$staging.npy"
  done
  cmp -s "$tmp/s_pageable.npy" "$tmp/s_mapped.npy" && cmp -s "$tmp/s_pageable.npy" "$tmp/s_registered.npy" || { echo "FAIL: staging modes differ"; fails=$((fails + 1)); }
  expect 0 "streamed to the outputs chunk by chunk" -- knn "$sample" -k 8 --chunk-rows 5000 -o "$tmp/s_stream.npy" --distances "$tmp/s_stream_d.csv"
  expect 0 "squared distances written to" -- knn "$sample" -k 8 --staging pinned --distances "$tmp/s_pinned_d.csv"
  cmp -s "$tmp/s_pageable.npy" "$tmp/s_stream.npy" && cmp -s "$tmp/s_pinned_d.csv" "$tmp/s_stream_d.csv" || { echo "FAIL: streamed outputs differ"; fails=$((fails + 1)); }
  expect 0 "same points kept +yes" -- filter sor "$sample" -o "$tmp/g.pcd" --compare-cpu
  expect 0 "same points kept +yes" -- filter ror "$sample" -o "$tmp/g.pcd" --radius 0.3 --min-neighbors 3 --compare-cpu
else
  expect 4 "no usable CUDA device" -- knn "$sample" --device cuda
  expect 0 "running on the CPU" -- knn "$sample" -k 2
fi
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
