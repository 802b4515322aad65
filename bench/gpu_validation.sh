#!/usr/bin/env bash
# What the GPU machine must show for a change to device code, in one call: every GPU suite, the
# kNN suites under compute-sanitizer (memcheck, racecheck), the exactness check at 1M points,
# and the kNN sweep at 1M and 10M points with its frame loop.
# Runs the programs of a gpu-bundle made here with
#   ../shared/tools/gpu-bundle .gpu build/app/pcnn build/bench/pcnn_bench_knn \
#     build/bench/pcnn_bench_exact_check build/tests/test_{curve_key,index_gpu,index,index_f64,\
#     distributed,normals,filters,smooth}
# Usage (on the GPU machine, repository root): bash bench/gpu_validation.sh OUT_DIR
# Each step has a time limit, so that one call stays inside a lease's 10 minutes.
set -uo pipefail
out=$1
mkdir -p "$out"
bash .gpu/run.sh test_curve_key --gtest_brief=1 >"$out/test_curve_key.log" 2>&1
bin=/tmp/gpu-bundle/bin
export LD_LIBRARY_PATH=/tmp/gpu-bundle/lib
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
status=0
summary() { grep -E "$2" "$out/$1" | tr '\n' ' '; }
for t in test_curve_key test_index_gpu test_index test_index_f64 test_distributed test_normals \
  test_filters test_smooth; do
  timeout 120 "$bin/$t" --gtest_brief=1 >"$out/$t.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  echo "$t: exit $rc ($(summary "$t.log" '^\[  (PASSED|FAILED|SKIPPED)'))"
done
# The sanitizers are slow: the kNN cases that cover every search path, at k = 1 and 8.
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_index_gpu" \
  --gtest_brief=1 --gtest_filter='IndexOutliers*:IndexBuild*:IndexFrameLoop*:IndexStaging*' \
  >"$out/memcheck_index_gpu.log" 2>&1 || status=1
echo "memcheck test_index_gpu: $(summary memcheck_index_gpu.log 'ERROR SUMMARY')"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_index" \
  --gtest_brief=1 --gtest_filter='*cuda_*_k8_*:*cuda_*_k1_*' >"$out/memcheck_index.log" 2>&1 ||
  status=1
echo "memcheck test_index: $(summary memcheck_index.log 'ERROR SUMMARY')"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_index" \
  --gtest_brief=1 --gtest_filter='*cuda_uniform_n*_k8_*:*cuda_outliers_n4000_k8*' \
  >"$out/racecheck_index.log" 2>&1 || status=1
echo "racecheck test_index: $(summary racecheck_index.log 'RACECHECK SUMMARY')"
for k in 1 8 32; do
  timeout 60 "$bin/pcnn_bench_exact_check" --sizes 1000000 -k "$k" >"$out/exact_k$k.log" 2>&1 ||
    status=1
  echo "exact check 1M, k = $k: $(tail -n 1 "$out/exact_k$k.log")"
done
timeout 150 "$bin/pcnn_bench_knn" --device cuda --memory device --cpu-max 0 --repeats 5 \
  --sizes 1000000 --kinds uniform,clustered,lidar --ks 1,8,16,32,64 >"$out/knn_1m.txt" 2>&1 ||
  status=1
timeout 60 "$bin/pcnn_bench_knn" --device cuda --memory device --cpu-max 0 --repeats 5 \
  --sizes 10000000 --kinds uniform --ks 8,32 >"$out/knn_10m.txt" 2>&1 || status=1
timeout 60 "$bin/pcnn_bench_knn" --mode frame-loop --device cuda --frames 100 \
  --host-memory page-locked >"$out/knn_frame_loop.txt" 2>&1 || status=1
cat "$out/knn_1m.txt" "$out/knn_10m.txt" "$out/knn_frame_loop.txt"
exit $status
