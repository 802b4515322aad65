#!/usr/bin/env bash
# The standard kNN benchmark set (issue 3): uniform, clustered and LiDAR-like clouds of 10k to
# 10M points, k = 1, 8, 16, 32, 64, the grid always, brute force up to 1M points (k = 8 above
# 100k), and PCL's k-d tree on all cores up to 1M points. Usage:
#   bench/run_standard.sh PCNN_BENCH_KNN OUT_DIR [extra options]
set -euo pipefail
bench=$1
out=$2
shift 2
mkdir -p "$out"
"$bench" --sizes 10000,100000,1000000,10000000 --ks 1,8,16,32,64 \
  --kinds uniform,clustered,lidar --algorithms grid,brute --brute-max 1000000 \
  --cpu-max 1000000 --repeats 5 --csv "$out/knn_standard.csv" "$@" | tee "$out/knn_standard.txt"
