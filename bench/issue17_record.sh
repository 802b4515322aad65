#!/usr/bin/env bash
# Issue 17's targets (speed where the user looks), measured on the GPU machine in one lease from a
# bundle of pcnn, app/libpcnn_pcl_baseline.so (--compare-cpu loads it from beside pcnn),
# pcnn_bench_knn and pcnn_bench_staging made by ../shared/tools/gpu-bundle (run
# `bash .gpu/run.sh pcnn --help` first: it unpacks the bundle under /tmp/gpu-bundle). Writes one
# log per step under $OUT (or ./issue17; many small files: tar them to bring them back);
# bench/issue17_table.py turns them into the table.
# Two parts, each within one device call of 10 minutes:
#   bench/issue17_record.sh 1   the one-shot command (1M and 10M, k = 8 and 32, uniform and
#                               LiDAR-like), the same searches in the bench (query only), and the
#                               staging modes (one-shot and frame loop) at 100k, 1M and 10M
#   bench/issue17_record.sh 2   the frame loops, --device auto against --device cpu by process
#                               wall clock, the speedup against PCL at 1M, loading rates and the
#                               whole process on the 10M-point binary PCD
set -u
part=${1:?usage: issue17_record.sh 1|2}
OUT=${OUT:-issue17}
mkdir -p "$OUT"
B=${B:-/tmp/gpu-bundle/bin}
export LD_LIBRARY_PATH=/tmp/gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=${D:-/tmp/issue17}  # the clouds, generated here (not carried)
mkdir -p "$D"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device_$part.txt"

gen() {  # gen KIND N FILE
  [ -f "$3" ] || "$B/pcnn" generate "$1" -n "$2" --seed 1 -o "$3" -q
}
# Commands that write outputs fsync them, which may also wait for other files' dirty pages (the
# clouds just generated): timed steps start after a sync.
settle() { sync; }
# The wall clock of a whole command in ms (date before and after: the process from exec to exit).
wall() {
  local t0 t1
  t0=$(date +%s%N)
  "$@"
  local rc=$?
  t1=$(date +%s%N)
  echo "wall_ms $(((t1 - t0) / 1000000)) rc $rc"
}

if [ "$part" = 1 ]; then
  for n in 1000000 10000000; do
    for kind in uniform lidar; do gen "$kind" "$n" "$D/${kind}_$n.pcd"; done
  done
  settle
  # One-shot: two runs of each, alternated; rows into .npy files on the local disk.
  for round in 1 2; do
    for n in 1000000 10000000; do
      for kind in uniform lidar; do
        for k in 8 32; do
          log="$OUT/oneshot_${kind}_${n}_k${k}_r$round.txt"
          rm -f "$D/o.npy" "$D/d.npy"
          wall "$B/pcnn" knn "$D/${kind}_$n.pcd" -k "$k" --device cuda -o "$D/o.npy" \
            --distances "$D/d.npy" >"$log" 2>&1
          settle
        done
      done
    done
  done
  # The same searches in the bench: query only (points and rows in device memory), and with the
  # rows into host memory.
  "$B/pcnn_bench_knn" --device cuda --memory device --cpu-max 0 --sizes 1000000,10000000 \
    --kinds uniform,lidar --ks 8,32 --repeats 5 >"$OUT/bench_device.txt" 2>&1
  "$B/pcnn_bench_knn" --device cuda --cpu-max 0 --sizes 1000000,10000000 \
    --kinds uniform,lidar --ks 8,32 --repeats 5 >"$OUT/bench_host.txt" 2>&1
  # Staging: one-shot (Index::build + self_knn from and into std::vector) ...
  "$B/pcnn_bench_staging" --sizes 100000,1000000,10000000 --ks 8 \
    --modes auto,pageable,pinned,registered,mapped --repeats 3 >"$OUT/staging.txt" 2>&1
  # ... and the frame loop, by mode (100k rebuilt a frame; a 1M map queried by 100k a frame).
  for mode in auto pageable pinned registered mapped; do
    "$B/pcnn_bench_knn" --device cuda --mode frame-loop --frames 50 --staging "$mode" \
      >"$OUT/frames_staging_$mode.txt" 2>&1
  done
  "$B/pcnn_bench_knn" --device cuda --mode frame-loop --frames 50 --staging auto \
    --frame-points 1000000 --scan-points 1000000 --map-points 10000000 \
    >"$OUT/frames_staging_auto_1M.txt" 2>&1
  for mode in pageable pinned registered mapped; do
    "$B/pcnn_bench_knn" --device cuda --mode frame-loop --frames 50 --staging "$mode" \
      --frame-points 1000000 --scan-points 1000000 --map-points 10000000 \
      >"$OUT/frames_staging_${mode}_1M.txt" 2>&1
  done
fi

if [ "$part" = 2 ]; then
  for n in 1000 10000 30000 100000 300000 1000000 10000000; do gen uniform "$n" "$D/uniform_$n.pcd"; done
  gen lidar 1000000 "$D/lidar_1000000.pcd"
  # Frame loops with the rows in page-locked host memory (the frame loop a pipeline runs) and in
  # std::vector.
  for mem in page-locked pageable; do
    "$B/pcnn_bench_knn" --device cuda --mode frame-loop --frames 100 --host-memory "$mem" \
      >"$OUT/frames_$mem.txt" 2>&1
  done
  # --device auto against --device cpu: the process from exec to exit, 20 pairs alternated (the
  # first of a pair swapped each time), apart from --device cuda's three runs. Interleaved with
  # --device cuda processes, three or even twelve rounds left the two ±5 ms apart at 20-30 ms a
  # process (round 41: medians 1.10-1.20x at 1k-300k points, then 1.01x and 0.98x at 1k and 100k
  # over 30 alternated pairs, the same system calls; bench/results/2026-12-01-round41.md). A
  # warm-up run goes first: the loop's first process took 362-416 ms in three leases of round 40.
  settle
  "$B/pcnn" knn "$D/uniform_1000.pcd" -k 8 --device cpu -o "$D/o.npy" -q
  for n in 1000 10000 30000 100000 300000 1000000; do
    for round in 1 2 3; do
      wall "$B/pcnn" knn "$D/uniform_$n.pcd" -k 8 --device cuda -o "$D/o.npy" -q \
        >"$OUT/auto_${n}_cuda_r$round.txt" 2>&1
    done
    for round in $(seq 1 20); do
      pair="auto cpu"
      [ $((round % 2)) -eq 0 ] && pair="cpu auto"
      for dev in $pair; do
        wall "$B/pcnn" knn "$D/uniform_$n.pcd" -k 8 --device "$dev" -o "$D/o.npy" -q \
          >"$OUT/auto_${n}_${dev}_r$(printf %02d "$round").txt" 2>&1
      done
    done
  done
  # The context start-up as the command reports it, and the default device's choice, at 100k.
  "$B/pcnn" knn "$D/uniform_100000.pcd" -k 8 -o "$D/o.npy" >"$OUT/auto_table_100000.txt" 2>&1
  # End to end at 1M against PCL's k-d tree on all cores (two runs).
  for round in 1 2; do
    "$B/pcnn" knn "$D/uniform_1000000.pcd" -k 8 --device cuda --compare-cpu -o "$D/o.npy" \
      >"$OUT/pcl_uniform_r$round.txt" 2>&1
  done
  # Loading: the same 10M/1M points as binary PCD, binary PLY and ascii PCD and PLY, each read
  # once to warm the page cache, then timed by the command's own "load" row (3 runs).
  "$B/pcnn" generate uniform -n 10000000 --seed 1 -o "$D/uniform_10M.ply" -q
  awk 'BEGIN { srand(1); n = 1000000
    print "# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1"
    print "WIDTH " n "\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " n "\nDATA ascii"
    for (i = 0; i < n; ++i) printf "%.4f %.4f %.4f\n", 100 * rand(), 100 * rand(), 100 * rand() }' \
    >"$D/ascii_1M.pcd"
  awk 'BEGIN { srand(1); n = 1000000
    print "ply\nformat ascii 1.0\nelement vertex " n
    print "property float x\nproperty float y\nproperty float z\nend_header"
    for (i = 0; i < n; ++i) printf "%.4f %.4f %.4f\n", 100 * rand(), 100 * rand(), 100 * rand() }' \
    >"$D/ascii_1M.ply"
  ls -l "$D" >"$OUT/files.txt"
  for f in uniform_10000000.pcd uniform_10M.ply ascii_1M.pcd ascii_1M.ply; do
    cat "$D/$f" >/dev/null
    for round in 1 2 3; do
      "$B/pcnn" stats "$D/$f" >"$OUT/load_${f}_r$round.txt" 2>&1
    done
  done
  # The whole process on the 10M-point binary PCD (load, search, write), default options, three
  # runs; the rows written to the local disk.
  for round in 1 2 3; do
    rm -f "$D/o.npy" "$D/d.npy"  # not timed: the last run's 640 MB of rows
    settle
    wall "$B/pcnn" knn "$D/uniform_10000000.pcd" -o "$D/o.npy" --distances "$D/d.npy" \
      >"$OUT/process_10M_r$round.txt" 2>&1
  done
  # The disk, for the write's share: 640 MB written and fsynced by dd.
  settle
  wall dd if=/dev/zero of="$D/dd.bin" bs=1M count=640 conv=fsync >"$OUT/dd.txt" 2>&1
  rm -f "$D/dd.bin"
fi
