#!/usr/bin/env bash
# The GPU record of this round (issues 13 and 14), run on the GPU machine from a bundle made by
# ../shared/tools/gpu-bundle: the GPU test suites, compute-sanitizer, per-kernel device time of the
# search and its exact refinement (ncu), the kNN sweep and frame loop, exactness at scale, and the
# command line. Writes logs under $OUT (or ./gpu-record) and prints a summary. The bundle lists
# build/app/libpcnn_pcl_baseline.so among its programs: --compare-cpu loads it from beside pcnn.
set -u
OUT=${OUT:-gpu-record}; mkdir -p "$OUT"
B=/tmp/gpu-bundle/bin
bash "$(dirname "$0")/run.sh" >/dev/null 2>&1  # unpacks the bundle
export LD_LIBRARY_PATH=/tmp/gpu-bundle/lib PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in test_index test_index_gpu test_smooth test_filters; do
  $B/$t --gtest_brief=1 >"$OUT/$t.log" 2>&1; echo "$t rc=$? $(grep -E 'PASSED|FAILED' "$OUT/$t.log" | tr '\n' ' ')"
done
echo "== compute-sanitizer"
compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $B/test_index_gpu \
  --gtest_filter='-*ARealDeviceAllocationFailure*' --gtest_brief=1 >"$OUT/memcheck.log" 2>&1
echo "memcheck test_index_gpu rc=$? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$OUT/memcheck.log" | tr '\n' ' ')"
compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_index --gtest_filter='*cuda*' \
  --gtest_brief=1 >"$OUT/memcheck_index.log" 2>&1
echo "memcheck test_index (cuda) rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_index.log")"
compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_index \
  --gtest_filter='*cuda*near_ties*:*cuda*lattice*:*cuda*identical*:*cuda*uniform_n2500*' \
  --gtest_brief=1 >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/racecheck.log")"
compute-sanitizer --tool synccheck --error-exitcode 9 $B/test_index_gpu --gtest_filter='*IndexOutputs*' \
  --gtest_brief=1 >"$OUT/synccheck.log" 2>&1
echo "synccheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/synccheck.log")"
cd /tmp
echo "== per-kernel device time, 1M uniform self-kNN (ncu, --clock-control none, one timed run)"
for k in 7 8 32; do
  ncu --clock-control none --metrics gpu__time_duration.sum --csv $B/pcnn_bench_knn --device cuda \
    --memory device --sizes 1000000 --ks $k --kinds uniform --cpu-max 0 --repeats 1 \
    >"$OUT/ncu_k$k.csv" 2>/dev/null
  echo "k=$k"; python3 - "$OUT/ncu_k$k.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
t = collections.OrderedDict(); c = collections.Counter()
scale = {'nsecond': 1e-6, 'usecond': 1e-3, 'msecond': 1.0}
for r in rows[1:]:
    n = r[ki].split('(')[0].split('<')[0].replace('void ', '').strip()[-34:]
    t[n] = t.get(n, 0) + float(r[vi].replace(',', '')) * scale[r[ui]]; c[n] += 1
for n, v in t.items():
    print(f"  {n:36s} {c[n]:3d} launches  mean {v / c[n]:8.4f} ms")
PY
done
echo "== sweep (host memory, median of 5 after a warm-up)"
$B/pcnn_bench_knn --device cuda --sizes 1000000,10000000 --ks 1,8,32 --kinds uniform,clustered,lidar \
  --cpu-max 0 --repeats 5 --csv "$OUT/sweep.csv" >"$OUT/sweep.txt" 2>&1; tail -20 "$OUT/sweep.txt"
echo "== sweep (device memory)"
$B/pcnn_bench_knn --device cuda --memory device --sizes 1000000,10000000 --ks 8 --kinds uniform \
  --cpu-max 0 --repeats 5 >"$OUT/sweep_dev.txt" 2>&1; tail -3 "$OUT/sweep_dev.txt"
echo "== frame loop"
$B/pcnn_bench_knn --device cuda --mode frame-loop --frames 50 >"$OUT/frame.txt" 2>&1; tail -12 "$OUT/frame.txt"
echo "== exactness at scale"
$B/pcnn_bench_exact_check --sizes 1000000,10000000 -k 8 >"$OUT/exact.txt" 2>&1; cat "$OUT/exact.txt"
echo "== command line"
$B/pcnn knn /tmp/gpu-bundle/extra/sample.pcd -k 8 --exclude-self --compare-cpu >"$OUT/cli_sample.txt" 2>&1; cat "$OUT/cli_sample.txt"
