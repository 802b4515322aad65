#!/usr/bin/env bash
# Everything the GPU machine must show for a change to device code, in one call:
# the GPU tests, the same tests under compute-sanitizer (memcheck, racecheck, synccheck), the
# standard kNN benchmark (sweep, frame loop, CPU backend against PCL) and a 50M-point run.
# Runs the programs of a gpu-bundle (.gpu/run.sh).
# Usage (on the GPU machine, repository root): bash bench/gpu_validation.sh OUT_DIR
set -uo pipefail
out=$1
mkdir -p "$out"
run=".gpu/run.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
bash "$run" test_gpu_knn >"$out/test_gpu_knn.log" 2>&1
echo "test_gpu_knn: exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/test_gpu_knn.log" | tr '\n' ' '))"
lib=/tmp/gpu-bundle/lib
bin=/tmp/gpu-bundle/bin
export LD_LIBRARY_PATH=$lib
heavy='-GpuKnnAlgorithms.*:*_n20000_*:*_n50000_*:*_n60000_*'
for tool in memcheck racecheck synccheck; do
  filter=""
  [ "$tool" = memcheck ] || filter="--gtest_filter=$heavy"
  compute-sanitizer --tool "$tool" $([ "$tool" = memcheck ] && echo --leak-check full) \
    "$bin/test_gpu_knn" $filter >"$out/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|^\[  PASSED' "$out/sanitizer_$tool.log" | tr '\n' ' '))"
done
bash bench/run_standard.sh "$bin/pcnn_bench_knn" "$out" --device cuda >/dev/null \
  2>"$out/knn_standard.err"
echo "standard set: exit $?"
"$bin/pcnn_bench_knn" --mode sweep --device cuda --sizes 50000000 --ks 8 --kinds uniform,lidar \
  --cpu-max 0 --repeats 3 --csv "$out/knn_50m.csv" >"$out/knn_50m.txt" 2>&1
echo "50M: exit $?"
cat "$out/knn_standard.txt" "$out/knn_frame_loop.txt" "$out/knn_cpu_vs_pcl.txt" "$out/knn_50m.txt"
