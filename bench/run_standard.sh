#!/usr/bin/env bash
# The standard kNN benchmark set (issue 3), through pcnn::Index: uniform, clustered and LiDAR-like
# clouds of 10k to 10M points, k = 1, 8, 16, 32, 64, self-kNN with points and results in host
# memory, PCL's k-d tree on all cores up to 1M points; then the frame loop (an index rebuilt from
# a 100k-point cloud every frame, and a 1M-point map queried by 100k points per frame) and the
# CPU backend against PCL on 1M uniform points. Usage:
#   bench/run_standard.sh PCNN_BENCH_KNN OUT_DIR [extra options for every run, e.g. --device cpu]
set -euo pipefail
bench=$1
out=$2
shift 2
mkdir -p "$out"
"$bench" --mode sweep --sizes 10000,100000,1000000,10000000 --ks 1,8,16,32,64 \
  --kinds uniform,clustered,lidar --cpu-max 1000000 --repeats 5 \
  --csv "$out/knn_standard.csv" "$@" | tee "$out/knn_standard.txt"
"$bench" --mode frame-loop --frames 50 "$@" | tee "$out/knn_frame_loop.txt"
"$bench" --mode cpu-vs-pcl --pcl-n 1000000 --repeats 5 --csv "$out/knn_cpu_vs_pcl.csv" "$@" |
  tee "$out/knn_cpu_vs_pcl.txt"
