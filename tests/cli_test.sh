#!/usr/bin/env bash
# The pcnn command's exit codes, messages and outputs. Usage: cli_test.sh PCNN DATA_DIR
set -u
pcnn=$1
data=$2
src=$(cd "$data/.." && pwd)  # the source tree (docs/schema, tests/json_schema_check.py)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
# Under AddressSanitizer the process reserves terabytes of address space: no ulimit -v there
# (as in bad_inputs.sh).
asan=0
grep -q __asan_init "$pcnn" && asan=1

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
expect 2 "--exclude-self applies to a self-search" -- knn "$sample" --query "$tmp/c.pcd" --exclude-self --device cpu
expect 2 "device" -- knn "$sample" --device tpu
expect 2 "required" -- knn
# An empty value is refused, not taken for an option left out or for 0 (an unset shell variable).
expect 2 "--query: the value is empty" -- knn "$sample" --query "" --device cpu -o "$tmp/e.npy"
expect 2 "--out: the value is empty" -- knn "$sample" -o "" --device cpu
expect 2 "--radius: the value is empty" -- radius "$sample" -r "" --device cpu -o "$tmp/e"
expect 2 "--devices: the value is empty" -- knn "$sample" --devices "" --device cpu -o "$tmp/e.npy"
expect 2 "input: the value is empty" -- stats ""
[ ! -e "$tmp/e.npy" ] && [ ! -e "$tmp/e.offsets.npy" ] || { echo "FAIL: an output of a refused command"; fails=$((fails + 1)); }
expect 5 "cannot write '$tmp/nodir/i.npy'" -- knn "$sample" --device cpu -o "$tmp/nodir/i.npy"
[ ! -e "$tmp/nodir" ] || { echo "FAIL: partial output"; fails=$((fails + 1)); }
expect 0 "centroid" -- stats "$sample" --device cpu
expect 0 "kept +4[0-9],[0-9]{3}" -- filter sor "$sample" -o "$tmp/f.pcd" --device cpu --kept-indices "$tmp/kept.csv"
expect 0 "points +4[0-9],[0-9]{3}" -- knn "$tmp/f.pcd" -k 2 --device cpu
expect 0 "removed" -- filter ror "$sample" -o "$tmp/r.ply" --radius 0.3 --min-neighbors 3 --device cpu
expect 2 "needs --radius" -- filter ror "$sample" -o "$tmp/r.ply"
# A cloud of no points (and one of no finite points) in, a cloud of no points out, with the
# input's fields, and nothing on stderr under -q: they failed to write ("the cloud has no
# fields"), and PCL printed its empty-tree error.
printf 'VERSION 0.7\nFIELDS x y z intensity\nSIZE 4 4 4 2\nTYPE F F F U\nCOUNT 1 1 1 1\nWIDTH 0\nHEIGHT 1\nPOINTS 0\nDATA binary\n' >"$tmp/none.pcd"
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\nnan nan nan\nnan 1 2\n' >"$tmp/nan2.pcd"
for run in "filter ror none.pcd --radius 0.5" "smooth none.pcd --laplacian 0.5" "normals none.pcd -k 8" "filter ror nan2.pcd --radius 0.5"; do
  set -- $run
  cmd=$1 && [ "$cmd" = filter ] && cmd="filter $2" && shift
  in=$2
  shift 2
  "$pcnn" $cmd "$tmp/$in" -o "$tmp/none_out.pcd" "$@" --device cpu -q >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 0 ] || [ -s "$tmp/err" ] || ! grep -q '^POINTS 0' "$tmp/none_out.pcd" ||
    { [ "$in" = none.pcd ] && ! grep -q '^FIELDS x y z intensity' "$tmp/none_out.pcd"; }; then
    echo "FAIL: pcnn $cmd $in (no points) -> exit $rc, stderr:"; cat "$tmp/err"; fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
done
expect 2 "mean_k must be between" -- filter sor "$sample" -o "$tmp/f.pcd" --mean-k 0
expect 0 "neighbors found" -- radius "$sample" -r 0.3 --device cpu -o "$tmp/rad"
for f in offsets indices sqdist; do
  [ -s "$tmp/rad.$f.npy" ] || { echo "FAIL: no rad.$f.npy"; fails=$((fails + 1)); }
done
# 1-D results are 1-D arrays: offsets (n + 1,), indices and sqdist (pairs,), counts and kept (m,).
grep -q "'<i8', 'fortran_order': False, 'shape': (50001,)" "$tmp/rad.offsets.npy" || { echo "FAIL: offsets header"; fails=$((fails + 1)); }
grep -q "'<i4', 'fortran_order': False, 'shape': ([0-9]*,)" "$tmp/rad.indices.npy" || { echo "FAIL: indices header"; fails=$((fails + 1)); }
expect 0 "pairs written to" -- radius "$sample" -r 0.05 --exclude-self --device cpu -o "$tmp/rad.csv"
[ "$(head -1 "$tmp/rad.csv")" = "query,neighbor,sqdist" ] || { echo "FAIL: pairs csv header"; fails=$((fails + 1)); }
expect 0 "counts written to" -- radius "$sample" -r 0.3 --max-nn 8 --device cpu -o "$tmp/h.npy" --counts "$tmp/hc.csv"
[ "$(wc -l <"$tmp/hc.csv")" -eq 50001 ] || { echo "FAIL: counts csv rows"; fails=$((fails + 1)); }
expect 2 "radius must be a finite number >= 0" -- radius "$sample" -r -1 --device cpu
expect 2 "max-nn must be between 1 and 128" -- radius "$sample" -r 1 --max-nn 0
expect 2 "--max-nn must be between 1 and 128, got 500" -- radius "$sample" -r 1 --max-nn 500 --device cpu
expect 2 "go with --max-nn" -- radius "$sample" -r 1 --counts "$tmp/x.csv"
expect 2 "required" -- radius "$sample"
# same_files A B [WHAT]: the files are byte for byte the same
same_files() {
  cmp -s "$1" "$2" || { echo "FAIL: $1 and $2 differ${3:+ ($3)}"; fails=$((fails + 1)); }
}
# radius results planned from the counts: filled range by range and streamed to the outputs,
# they are the one-fill results byte for byte (npy and csv; self, exclude-self, queries)
radius_streams_equal() {  # DEVICE EXTRA_ARGS...
  local dev=$1
  shift
  for args in "" "--exclude-self" "--query $tmp/c.pcd"; do
    # shellcheck disable=SC2086
    expect 0 "neighbors found" -- radius "$sample" -r 0.2 $args --device "$dev" -o "$tmp/one" "$@"
    # shellcheck disable=SC2086
    expect 0 "streamed to the outputs range by range" -- radius "$sample" -r 0.2 $args --device "$dev" --chunk-rows 7777 -o "$tmp/str" "$@"
    for f in offsets indices sqdist; do same_files "$tmp/one.$f.npy" "$tmp/str.$f.npy" "radius $args"; done
    # shellcheck disable=SC2086
    expect 0 "pairs written to" -- radius "$sample" -r 0.2 $args --device "$dev" -o "$tmp/one.csv" "$@"
    # shellcheck disable=SC2086
    expect 0 "pairs written to" -- radius "$sample" -r 0.2 $args --device "$dev" --chunk-rows 10000 -o "$tmp/str.csv" "$@"
    same_files "$tmp/one.csv" "$tmp/str.csv" "radius $args"
  done
  expect 0 "counts written to" -- radius "$sample" -r 0.2 --max-nn 8 --device "$dev" -o "$tmp/h1.npy" --distances "$tmp/h1d.csv" --counts "$tmp/h1c.npy" "$@"
  expect 0 "streamed to the outputs chunk by chunk" -- radius "$sample" -r 0.2 --max-nn 8 --device "$dev" --chunk-rows 9999 -o "$tmp/h2.npy" --distances "$tmp/h2d.csv" --counts "$tmp/h2c.npy" "$@"
  for f in h.npy hd.csv hc.npy; do same_files "$tmp/${f/h/h1}" "$tmp/${f/h/h2}" hybrid; done
}
radius_streams_equal cpu
# results host memory cannot hold are streamed without being asked (here an address-space
# limit leaves too little for 25 million pairs, 200 MB), and are the held results
expect 0 "wrote 5,000 points" -- generate uniform -n 5000 -o "$tmp/u5k.pcd"
expect 0 "neighbors found +25,000,000" -- radius "$tmp/u5k.pcd" -r 1e6 --device cpu -o "$tmp/all_held"
if [ "$asan" -eq 0 ]; then
  # One malloc arena, and 8 MB of stack per CPU-backend thread on top of 300 MB: glibc reserves
  # 64 MB of address space per thread's arena, which on a 16-core host is more than the limit.
  # The rows are held when half the room the limit leaves above the process's own size holds
  # them: 300 MB leaves less than 400 MB whatever that size, and they stream (400 MB left enough
  # on a 16-core host once PCL's search libraries were loaded only to compare).
  (ulimit -v $((300000 + $(nproc) * 8192)) && MALLOC_ARENA_MAX=1 "$pcnn" radius "$tmp/u5k.pcd" -r 1e6 --device cpu -o "$tmp/all_streamed" >"$tmp/out" 2>"$tmp/err")
  grep -q "streamed to the outputs range by range" "$tmp/err" || { echo "FAIL: not streamed under ulimit -v"; cat "$tmp/err"; fails=$((fails + 1)); }
  for f in offsets indices sqdist; do same_files "$tmp/all_held.$f.npy" "$tmp/all_streamed.$f.npy" "streamed under ulimit -v"; done
fi
rm -f "$tmp"/all_*.npy
# kNN rows too, above a quarter of the host memory available (not radius's half: a search may
# stage a second copy of them): 150,000 x 128 rows, 154 MB, held without the limit and streamed
# under it, the same bytes
expect 0 "wrote 150,000 points" -- generate uniform -n 150000 -o "$tmp/u150k.pcd"
expect 0 "indices written to" -- knn "$tmp/u150k.pcd" -k 128 --device cpu -o "$tmp/knn_held.npy" --distances "$tmp/knn_held_d.npy"
grep -q "streamed" "$tmp/err" && { echo "FAIL: 154 MB of kNN rows streamed without a limit"; fails=$((fails + 1)); }
if [ "$asan" -eq 0 ]; then
  (ulimit -v $((400000 + $(nproc) * 8192)) && MALLOC_ARENA_MAX=1 "$pcnn" knn "$tmp/u150k.pcd" -k 128 --device cpu -o "$tmp/knn_streamed.npy" --distances "$tmp/knn_streamed_d.npy" >"$tmp/out" 2>"$tmp/err")
  grep -q "streamed to the outputs chunk by chunk" "$tmp/err" || { echo "FAIL: kNN rows not streamed under ulimit -v"; cat "$tmp/err"; fails=$((fails + 1)); }
  same_files "$tmp/knn_held.npy" "$tmp/knn_streamed.npy" "kNN indices streamed under ulimit -v"
  same_files "$tmp/knn_held_d.npy" "$tmp/knn_streamed_d.npy" "kNN distances streamed under ulimit -v"
fi
rm -f "$tmp"/knn_*.npy "$tmp/u150k.pcd"
# results that fit nowhere fail after the count, before any pair is stored: 20,000 points all
# within r are 400 million pairs (3.2 GB)
expect 0 "wrote 20,000 points" -- generate uniform -n 20000 -o "$tmp/u20k.pcd"
start=$SECONDS
(ulimit -f 100000 && "$pcnn" radius "$tmp/u20k.pcd" -r 1e6 --device cpu -o "$tmp/all" >"$tmp/out" 2>"$tmp/err")
rc=$?
[ $rc -eq 5 ] && grep -q "cannot write '$tmp/all.indices.npy': the radius results (400000000 pairs) need 1.6 GB (1600000128 bytes) in this file, over the file size limit of 0.102 GB (102400000 bytes)" "$tmp/err" ||
  { echo "FAIL: too large for the disk: exit $rc"; cat "$tmp/err"; fails=$((fails + 1)); }
[ -z "$(ls -A "$tmp" | grep -E '^(all|\.all)')" ] || { echo "FAIL: too large for the disk left files"; fails=$((fails + 1)); }
# (The host-memory refusal of --compare-cpu needs the GPU path, which cannot start under an
# address-space limit: it is covered by bad_inputs.sh's out_of_host_memory cases.)
[ $((SECONDS - start)) -lt 60 ] || { echo "FAIL: the refusals took $((SECONDS - start)) s"; fails=$((fails + 1)); }
expect 2 "not a memory size" -- knn "$sample" --max-device-memory lots
expect 0 "organized 160 x 120" -- generate depth --width 160 --height 120 -o "$tmp/depth.pcd"
expect 0 "organized, every field" -- smooth "$tmp/depth.pcd" -o "$tmp/depth_s.pcd" --stencil gaussian:3:1.5 --depth-jump 0.1 --device cpu
expect 0 "organized +160 x 120" -- stats "$tmp/depth_s.pcd" --device cpu
expect 0 "Taubin, k = 8" -- smooth "$sample" -o "$tmp/s.ply" --taubin 0.5,-0.53 -k 8 --iterations 3 --device cpu
expect 2 "radius must be 0..7" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" --stencil box:9
expect 2 "positive sum" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" --stencil list:1,-3,1
expect 2 "excludes" -- smooth "$sample" -o "$tmp/x.pcd" --laplacian 0.5 --taubin 0.5,-0.53
expect 2 "Taubin needs" -- smooth "$sample" -o "$tmp/x.pcd" --taubin 0.5,-0.2 --device cpu
expect 2 "--taubin needs two numbers LAMBDA,MU, got .0.5,-0.53,1." -- smooth "$sample" -o "$tmp/x.pcd" --taubin 0.5,-0.53,1 --device cpu
expect 2 "--taubin needs two numbers" -- smooth "$sample" -o "$tmp/x.pcd" --taubin 0.5x,-0.53 --device cpu
[ ! -e "$tmp/x.pcd" ] || { echo "FAIL: output left after an error"; fails=$((fails + 1)); }
# normals: every input field kept, normal_x normal_y normal_z curvature added (replaced when the
# input already has them), .pcd and .ply; the neighborhood and viewpoint options checked.
expect 0 "points with a normal +50,000" -- normals "$sample" -k 10 --device cpu -o "$tmp/n.pcd"
grep -aq "^FIELDS x y z normal_x normal_y normal_z curvature$" "$tmp/n.pcd" || { echo "FAIL: normals fields"; fails=$((fails + 1)); }
{
  printf '# .PCD v0.7\nVERSION 0.7\nFIELDS x y z intensity label\nSIZE 4 4 4 4 4\nTYPE F F F F U\nCOUNT 1 1 1 1 1\n'
  printf 'WIDTH 25\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 25\nDATA ascii\n'
  for i in 0 1 2 3 4; do for j in 0 1 2 3 4; do echo "$i $j 2 0.$i$j $((i * 5 + j))"; done; done
} >"$tmp/fields.pcd"
expect 0 "points without a normal +0" -- normals "$tmp/fields.pcd" -k 4 --device cpu -o "$tmp/fields_n.pcd"
grep -aq "^FIELDS x y z intensity label normal_x normal_y normal_z curvature$" "$tmp/fields_n.pcd" || { echo "FAIL: normals must keep every field"; fails=$((fails + 1)); }
expect 0 "written to" -- normals "$tmp/fields_n.pcd" -r 1.5 --device cpu -o "$tmp/fields_nn.ply"
# Normals in .ply as nx ny nz (what Open3D, CloudCompare and MeshLab read; PCL names them
# normal_x ... again), once: replaced, not repeated.
grep -aq "^property float curvature$" "$tmp/fields_nn.ply" && [ "$(grep -ac "^property float nx$" "$tmp/fields_nn.ply")" -eq 1 ] && ! grep -aq "normal_x" "$tmp/fields_nn.ply" || { echo "FAIL: normals .ply (fields replaced, not repeated)"; fails=$((fails + 1)); }
"$pcnn" filter sor "$tmp/fields_nn.ply" -o "$tmp/fields_nn_back.pcd" --std-mul 1000 --device cpu -q
grep -aq "^FIELDS x y z intensity label normal_x normal_y normal_z curvature$" "$tmp/fields_nn_back.pcd" || { echo "FAIL: nx ny nz read back as normal_x ..."; fails=$((fails + 1)); }
# A packed color in .ply as uchar red green blue (alpha with rgba), read back as the same field.
for alpha in "" " alpha"; do
  {
    printf 'ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n'
    for c in red green blue$alpha; do printf 'property uchar %s\n' "$c"; done
    printf 'end_header\n0 0 0 255 10 20%s\n1 0 0 1 2 3%s\n0 1 0 5 6 7%s\n0 0 1 9 10 11%s\n' "${alpha:+ 30}" "${alpha:+ 4}" "${alpha:+ 8}" "${alpha:+ 12}"
  } >"$tmp/color.ply"
  "$pcnn" filter sor "$tmp/color.ply" -o "$tmp/color_direct.pcd" --mean-k 1 --std-mul 1000 --device cpu -q &&
    "$pcnn" filter sor "$tmp/color.ply" -o "$tmp/color_out.ply" --mean-k 1 --std-mul 1000 --device cpu -q &&
    "$pcnn" filter sor "$tmp/color_out.ply" -o "$tmp/color_back.pcd" --mean-k 1 --std-mul 1000 --device cpu -q &&
    grep -aq "^property uchar blue$" "$tmp/color_out.ply" && cmp -s "$tmp/color_direct.pcd" "$tmp/color_back.pcd" &&
    { [ -z "$alpha" ] || grep -aq "^property uchar alpha$" "$tmp/color_out.ply"; } || { echo "FAIL: colors${alpha} through .ply"; fails=$((fails + 1)); }
done
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  # Values: the input's intensity and label as they were; the plane z = 2 seen from (0, 0, 10).
  /usr/bin/python3 - "$tmp/fields_n.pcd" <<'PY' || { echo "FAIL: normals values"; fails=$((fails + 1)); }
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
body = raw[raw.index(b"DATA binary\n") + 12:]
t = np.dtype([(n, "<f4") for n in ("x", "y", "z", "intensity")] + [("label", "<u4")] +
             [(n, "<f4") for n in ("nx", "ny", "nz", "curvature")])
a = np.frombuffer(body, t)
i, j = np.divmod(np.arange(25), 5)
assert np.allclose(a["intensity"], np.array([float(f"0.{p}{q}") for p, q in zip(i, j)], "f4"))
assert (a["label"] == np.arange(25)).all() and (a["x"] == i).all() and (a["z"] == 2).all()
assert (a["nz"] == -1).all() and (a["curvature"] == 0).all(), (a["nz"], a["curvature"])
PY
fi
expect 0 "normal" -- normals "$tmp/fields.pcd" -k 4 --viewpoint 0,0,10 --device cpu -o "$tmp/up.pcd"
cmp -s "$tmp/up.pcd" "$tmp/fields_n.pcd" && { echo "FAIL: the viewpoint must turn the normals"; fails=$((fails + 1)); }
expect 2 "give a neighborhood: k .* or a radius" -- normals "$sample" -o "$tmp/x.pcd" --device cpu
expect 2 "excludes" -- normals "$sample" -k 8 -r 1 -o "$tmp/x.pcd"
expect 2 "--radius: the radius must be a finite number > 0, got 0" -- normals "$sample" -r 0 -o "$tmp/x.pcd" --device cpu
expect 2 "requires" -- normals "$sample" -k 8 --max-nn 8 -o "$tmp/x.pcd"
expect 2 "k must be between 3 and 128, got 2" -- normals "$sample" -k 2 -o "$tmp/x.pcd"
expect 2 "max_nn must be 0 .* or between 3 and 128, got 2" -- normals "$sample" -r 1 --max-nn 2 -o "$tmp/x.pcd"
expect 2 "viewpoint needs three finite numbers" -- normals "$sample" -k 8 --viewpoint 1,2 -o "$tmp/x.pcd"
expect 2 "required" -- normals "$sample" -k 8
expect 5 "cannot write '$tmp/x.npy'" -- normals "$sample" -k 8 -o "$tmp/x.npy"
[ ! -e "$tmp/x.pcd" ] || { echo "FAIL: normals left an output after an error"; fails=$((fails + 1)); }
if "$pcnn" devices >/dev/null 2>&1; then
  # The CUDA and CPU backends compute the same bits.
  expect 0 "device +NVIDIA" -- normals "$sample" -k 10 --device cuda -o "$tmp/n_gpu.pcd"
  cmp -s "$tmp/n.pcd" "$tmp/n_gpu.pcd" || { echo "FAIL: normals differ between cuda and cpu"; fails=$((fails + 1)); }
  expect 0 "normals" -- normals "$sample" -r 0.4 --device cuda -o "$tmp/nr_gpu.ply"
  expect 0 "normals" -- normals "$sample" -r 0.4 --device cpu -o "$tmp/nr_cpu.ply"
  cmp -s "$tmp/nr_gpu.ply" "$tmp/nr_cpu.ply" || { echo "FAIL: radius normals differ between cuda and cpu"; fails=$((fails + 1)); }
fi
# Spatial parts (--devices with the CPU backend: one part per entry) and tiles: the same bytes.
expect 0 "indices written to" -- knn "$sample" -k 8 --exclude-self --device cpu -o "$tmp/one.npy" --distances "$tmp/one_d.npy"
expect 0 "parts +3" -- knn "$sample" -k 8 --exclude-self --device cpu --devices 0,1,2 -o "$tmp/parts.npy" --distances "$tmp/parts_d.npy"
expect 0 "tiles +4" -- knn "$sample" -k 8 --exclude-self --device cpu --tiles 4 -o "$tmp/tiles.npy" --distances "$tmp/tiles_d.npy"
for f in parts tiles; do
  cmp -s "$tmp/one.npy" "$tmp/$f.npy" && cmp -s "$tmp/one_d.npy" "$tmp/${f}_d.npy" || { echo "FAIL: --$f rows differ from one index"; fails=$((fails + 1)); }
done
# More parts than threads can be made under ulimit -v (each thread reserves its stack): fewer
# threads take them (it aborted: std::terminate with threads left joinable).
if [ "$asan" = 0 ]; then
  (ulimit -v 2000000 && "$pcnn" knn "$sample" -k 8 --exclude-self --device cpu --tiles 512 -o "$tmp/many.npy" --distances "$tmp/many_d.npy" >"$tmp/out" 2>"$tmp/err")
  rc=$?
  [ "$rc" -eq 0 ] && cmp -s "$tmp/one.npy" "$tmp/many.npy" && cmp -s "$tmp/one_d.npy" "$tmp/many_d.npy" || { echo "FAIL: --tiles 512 under ulimit -v: exit $rc"; cat "$tmp/err"; fails=$((fails + 1)); }
fi
expect 0 "queries forwarded" -- knn "$sample" --query "$tmp/c.pcd" -k 5 --device cpu --devices 0,1 --json
grep -q '"per_part": \[{"index": 0, .*}, {"index": 1, ' "$tmp/out" || { echo "FAIL: --devices --json has no per_part list of 2"; fails=$((fails + 1)); }
expect 2 "--devices: '0,x' is not" -- knn "$sample" --device cpu --devices 0,x
expect 2 "the replicated layout needs CUDA devices" -- knn "$sample" -k 2 --device cpu --devices 0,1 --layout replicated
expect 2 "the replicated layout needs CUDA devices" -- radius "$sample" -r 0.3 --device cpu --devices 0,1 --layout replicated
expect 2 "--layout applies to --devices" -- knn "$sample" -k 2 --layout spatial
expect 2 "--layout applies to --devices" -- radius "$sample" -r 0.3 --layout replicated
# float64 coordinates no float offset keeps exactly (UTM-scale, 0.1 mm apart): parts and tiles
# search them as stored, the same bytes as one index: kNN, radius and hybrid.
{
  printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 3000\nHEIGHT 1\nPOINTS 3000\nDATA ascii\n'
  awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { if (i % 30 == 0) { cx = 2500000 + 100 * rand(); cy = 5400000 + 100 * rand(); cz = 1000 + 10 * rand() }
    printf "%.10f %.10f %.10f\n", cx + 2e-4 * rand(), cy + 2e-4 * rand(), cz + 2e-4 * rand() } }'
} >"$tmp/f64.pcd"
expect 0 "indices written to" -- knn "$tmp/f64.pcd" -k 6 --exclude-self --device cpu -o "$tmp/f64one.npy" --distances "$tmp/f64one_d.npy"
expect 0 "offsets written to" -- radius "$tmp/f64.pcd" -r 1e-4 --device cpu -o "$tmp/f64r_one"
expect 0 "counts written to" -- radius "$tmp/f64.pcd" -r 2e-4 --max-nn 5 --exclude-self --device cpu -o "$tmp/f64h_one.npy" --distances "$tmp/f64h_one_d.npy" --counts "$tmp/f64h_one_c.npy"
for parts in "--devices 0,1,2" "--tiles 4"; do
  expect 0 "(parts|tiles) +[34]" -- knn "$tmp/f64.pcd" -k 6 --exclude-self --device cpu $parts -o "$tmp/f64p.npy" --distances "$tmp/f64p_d.npy"
  cmp -s "$tmp/f64one.npy" "$tmp/f64p.npy" && cmp -s "$tmp/f64one_d.npy" "$tmp/f64p_d.npy" || { echo "FAIL: float64 kNN $parts differs from one index"; fails=$((fails + 1)); }
  expect 0 "(parts|tiles) +[34]" -- radius "$tmp/f64.pcd" -r 1e-4 --device cpu $parts -o "$tmp/f64r_p"
  for f in offsets indices sqdist; do
    cmp -s "$tmp/f64r_one.$f.npy" "$tmp/f64r_p.$f.npy" || { echo "FAIL: float64 radius $parts: $f differ"; fails=$((fails + 1)); }
  done
  expect 0 "(parts|tiles) +[34]" -- radius "$tmp/f64.pcd" -r 2e-4 --max-nn 5 --exclude-self --device cpu $parts -o "$tmp/f64h_p.npy" --distances "$tmp/f64h_p_d.npy" --counts "$tmp/f64h_p_c.npy"
  for f in "" _d _c; do
    cmp -s "$tmp/f64h_one$f.npy" "$tmp/f64h_p$f.npy" || { echo "FAIL: float64 hybrid $parts: $f differ"; fails=$((fails + 1)); }
  done
done
# Radius and hybrid in parts on float32 clouds, with a query set: the same bytes as one index.
expect 0 "pairs written to" -- radius "$sample" -r 0.4 --query "$tmp/c.pcd" --device cpu -o "$tmp/r_one.csv"
expect 0 "parts +3" -- radius "$sample" -r 0.4 --query "$tmp/c.pcd" --device cpu --devices 0,1,2 -o "$tmp/r_p.csv" --json
cmp -s "$tmp/r_one.csv" "$tmp/r_p.csv" || { echo "FAIL: radius --devices differs from one index"; fails=$((fails + 1)); }
if [ -x /usr/bin/python3 ] && [ -f "$src/tests/json_schema_check.py" ]; then
  /usr/bin/python3 "$src/tests/json_schema_check.py" "$src/docs/schema" radius "$tmp/out" \
    || { echo "FAIL: radius --devices --json does not match docs/schema/radius.json"; fails=$((fails + 1)); }
fi
# Radius results in parts are held: too many pairs for host memory are refused before any is found.
# (25 million pairs of u5k.pcd under an address-space limit of about 400 MB, as above; one index
# streams them.)
if [ "$asan" -eq 0 ]; then
  (ulimit -v $((400000 + $(nproc) * 8192)) && MALLOC_ARENA_MAX=1 "$pcnn" radius "$tmp/u5k.pcd" -r 1e6 --device cpu --devices 0,1 -o "$tmp/all_parts" >"$tmp/out" 2>"$tmp/err")
  rc=$?
  [ $rc -eq 4 ] && grep -q "the radius results (25000000 pairs) need .*--devices hold the pairs in host memory; one index streams them" "$tmp/err" \
    || { echo "FAIL: radius --devices over host memory -> exit $rc:"; sed 's/^/    /' "$tmp/err"; fails=$((fails + 1)); }
  [ ! -e "$tmp/all_parts.offsets.npy" ] || { echo "FAIL: output left after a refusal"; fails=$((fails + 1)); }
fi
rm -f "$tmp"/all_*.npy
if "$pcnn" devices >/dev/null 2>&1; then
  # References larger than the device memory allowed: tiles, the same rows as the CPU.
  expect 0 "tiles +[0-9]+" -- knn "$sample" -k 8 --exclude-self --max-device-memory 1M -o "$tmp/gtiles.npy" --distances "$tmp/gtiles_d.npy"
  cmp -s "$tmp/one.npy" "$tmp/gtiles.npy" && cmp -s "$tmp/one_d.npy" "$tmp/gtiles_d.npy" || { echo "FAIL: GPU tiles differ from one index"; fails=$((fails + 1)); }
  expect 0 "tiles +4" -- knn "$sample" -k 8 --exclude-self --tiles 4 -o "$tmp/gtiles4.npy"
  expect 0 "layout +replicated" -- knn "$sample" -k 8 --exclude-self --devices all --layout replicated -o "$tmp/gall.npy"
  expect 0 "layout +spatial" -- knn "$sample" -k 8 --exclude-self --devices all --layout spatial -o "$tmp/gspatial.npy"
  for f in gtiles4 gall gspatial; do
    cmp -s "$tmp/one.npy" "$tmp/$f.npy" || { echo "FAIL: $f differs from one index"; fails=$((fails + 1)); }
  done
  # Radius and hybrid on every GPU in both layouts, float32 and float64 clouds, self-searches and a
  # query set: the same bytes as one CPU index.
  expect 0 "counts written to" -- radius "$sample" -r 0.4 --max-nn 7 --query "$tmp/c.pcd" --device cpu -o "$tmp/hq_one.npy" --distances "$tmp/hq_one_d.npy" --counts "$tmp/hq_one_c.npy"
  for layout in replicated spatial; do
    expect 0 "layout +$layout" -- knn "$tmp/f64.pcd" -k 6 --exclude-self --devices all --layout $layout -o "$tmp/f64g.npy" --distances "$tmp/f64g_d.npy"
    cmp -s "$tmp/f64one.npy" "$tmp/f64g.npy" && cmp -s "$tmp/f64one_d.npy" "$tmp/f64g_d.npy" || { echo "FAIL: float64 kNN --layout $layout differs from one index"; fails=$((fails + 1)); }
    expect 0 "layout +$layout" -- radius "$sample" -r 0.4 --query "$tmp/c.pcd" --devices all --layout $layout -o "$tmp/gr.csv"
    cmp -s "$tmp/r_one.csv" "$tmp/gr.csv" || { echo "FAIL: radius --layout $layout differs from one index"; fails=$((fails + 1)); }
    expect 0 "layout +$layout" -- radius "$tmp/f64.pcd" -r 1e-4 --devices all --layout $layout -o "$tmp/f64r_g"
    for f in offsets indices sqdist; do
      cmp -s "$tmp/f64r_one.$f.npy" "$tmp/f64r_g.$f.npy" || { echo "FAIL: float64 radius --layout $layout: $f differ"; fails=$((fails + 1)); }
    done
    expect 0 "layout +$layout" -- radius "$tmp/f64.pcd" -r 2e-4 --max-nn 5 --exclude-self --devices all --layout $layout -o "$tmp/f64h_g.npy" --distances "$tmp/f64h_g_d.npy" --counts "$tmp/f64h_g_c.npy"
    for f in "" _d _c; do
      cmp -s "$tmp/f64h_one$f.npy" "$tmp/f64h_g$f.npy" || { echo "FAIL: float64 hybrid --layout $layout: $f differ"; fails=$((fails + 1)); }
    done
    expect 0 "layout +$layout" -- radius "$sample" -r 0.4 --max-nn 7 --query "$tmp/c.pcd" --devices all --layout $layout -o "$tmp/hq_g.npy" --distances "$tmp/hq_g_d.npy" --counts "$tmp/hq_g_c.npy"
    for f in "" _d _c; do
      cmp -s "$tmp/hq_one$f.npy" "$tmp/hq_g$f.npy" || { echo "FAIL: hybrid queries --layout $layout: $f differ"; fails=$((fails + 1)); }
    done
  done
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$tmp/depth.pcd" -o "$tmp/g.pcd" --stencil gaussian:2:1 --depth-jump 0.1 --compare-cpu
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$tmp/depth.pcd" -o "$tmp/g.pcd" --stencil gaussian:2:1 --compare-cpu
  expect 0 "values differing by more than 1e-5 \(relative\) +0" -- smooth "$sample" -o "$tmp/g.pcd" --taubin 0.5,-0.53 -k 10 --compare-cpu
  expect 0 "agreeing percent +100 %" -- radius "$sample" -r 0.3 --compare-cpu
  expect 0 "agreeing percent +100 %" -- radius "$sample" -r 0.3 --max-nn 16 --exclude-self --compare-cpu
  expect 0 "passes" -- radius "$sample" -r 0.3 --max-device-memory 24M
  # ranges streamed, each in device passes under the cap, equal the one-fill results
  radius_streams_equal cuda --max-device-memory 24M
  expect 4 "out of device memory: .* needs .* available under the limit" -- knn "$sample" --max-device-memory 1K
  expect 0 "agreeing percent +100 %" -- knn "$sample" -k 8 --compare-cpu
  for staging in pageable pinned registered mapped; do
    expect 0 "staging +$staging" -- knn "$sample" -k 8 --staging $staging --compare-cpu -o "$tmp/s_$staging.npy"
  done
  cmp -s "$tmp/s_pageable.npy" "$tmp/s_mapped.npy" && cmp -s "$tmp/s_pageable.npy" "$tmp/s_registered.npy" || { echo "FAIL: staging modes differ"; fails=$((fails + 1)); }
  expect 0 "streamed to the outputs chunk by chunk" -- knn "$sample" -k 8 --device cuda --chunk-rows 5000 -o "$tmp/s_stream.npy" --distances "$tmp/s_stream_d.csv"
  expect 0 "squared distances written to" -- knn "$sample" -k 8 --staging pinned --distances "$tmp/s_pinned_d.csv"
  cmp -s "$tmp/s_pageable.npy" "$tmp/s_stream.npy" && cmp -s "$tmp/s_pinned_d.csv" "$tmp/s_stream_d.csv" || { echo "FAIL: streamed outputs differ"; fails=$((fails + 1)); }
  expect 0 "same points kept +yes" -- filter sor "$sample" -o "$tmp/g.pcd" --compare-cpu
  expect 0 "same points kept +yes" -- filter ror "$sample" -o "$tmp/g.pcd" --radius 0.3 --min-neighbors 3 --compare-cpu
else
  expect 4 "no usable CUDA device" -- knn "$sample" --device cuda
  expect 0 "running on the CPU" -- radius "$sample" -r 0.3
fi
# --device auto runs a small kNN search on the CPU backend on any machine: a GPU's start-up would
# cost more than the whole search (50,000 points: about 0.1 s on one thread).
expect 0 "auto device +cpu: about [0-9]+ ms on [0-9]+ threads?," -- knn "$sample" -k 2
"$pcnn" knn "$sample" -k 2 --json 2>/dev/null | grep -qF '"device": {"backend": "cpu"' || { echo "FAIL: --device auto on a small cloud is not the CPU backend"; fails=$((fails + 1)); }

# Typed JSON and JSON errors (the schemas are checked by tests/json_schema_test.sh).
"$pcnn" knn "$tmp/missing.pcd" --json >"$tmp/out" 2>/dev/null
rc=$?
[ "$rc" -eq 3 ] && grep -qF '{"error": {"message": "cannot read cloud' "$tmp/out" && grep -qF '"exit_code": 3, "file": "'"$tmp/missing.pcd"'"}}' "$tmp/out" || { echo "FAIL: JSON error (rc $rc)"; cat "$tmp/out"; fails=$((fails + 1)); }
"$pcnn" knn "$sample" -k 0 --json >"$tmp/out" 2>/dev/null
[ $? -eq 2 ] && grep -qF '"exit_code": 2' "$tmp/out" || { echo "FAIL: JSON usage error"; fails=$((fails + 1)); }
"$pcnn" knn --json >"$tmp/out" 2>/dev/null
[ $? -eq 2 ] && grep -qF '{"error": {"message": ' "$tmp/out" || { echo "FAIL: JSON parse error"; fails=$((fails + 1)); }
"$pcnn" knn "$sample" -k 2 --device cpu --json --quiet >"$tmp/out" 2>"$tmp/err"
[ ! -s "$tmp/err" ] && grep -qF '"exclude_self": false' "$tmp/out" && grep -qF '"origin": [0, 0, 0]' "$tmp/out" && grep -qF '"device": {"backend": "cpu"' "$tmp/out" || { echo "FAIL: --quiet / typed JSON"; fails=$((fails + 1)); }
"$pcnn" filter sor "$sample" -o "$tmp/f2.pcd" --device cpu --json -q >"$tmp/out"
grep -qE '"mean_distance": 0\.[0-9]+, "stddev": 0\.[0-9]+, "threshold": 0\.[0-9]+' "$tmp/out" || { echo "FAIL: SOR statistics"; cat "$tmp/out"; fails=$((fails + 1)); }

# Options that do not apply are refused before anything is loaded (the input does not exist).
expect 2 "--radius applies to filter ror, not to filter sor" -- filter sor "$tmp/missing.pcd" -o "$tmp/x.pcd" --radius 1
expect 2 "--mean-k applies to filter sor, not to filter ror" -- filter ror "$tmp/missing.pcd" -o "$tmp/x.pcd" --radius 1 --mean-k 4
expect 2 "--staging applies to GPU transfers; not with --device cpu" -- knn "$tmp/missing.pcd" --device cpu --staging pinned
expect 2 "--max-device-memory applies to the GPU" -- radius "$tmp/missing.pcd" -r 1 --device cpu --max-device-memory 1G
expect 2 "--compare-cpu compares the GPU's search with the CPU's; with --device cpu" -- knn "$tmp/missing.pcd" --device cpu --compare-cpu
expect 2 "--compare-cpu compares the GPU's filter" -- filter sor "$tmp/missing.pcd" -o "$tmp/x.pcd" --device cpu --compare-cpu
expect 2 "--stencil applies to organized clouds; '.*sample.pcd' is unorganized" -- smooth "$sample" -o "$tmp/x.pcd" --stencil box:1 --device cpu
expect 2 "-k applies to unorganized clouds; '.*depth.pcd' is organized \(160 x 120\)" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" -k 4 --device cpu
[ ! -e "$tmp/x.pcd" ] || { echo "FAIL: output left after a refused option"; fails=$((fails + 1)); }

# Messages carry no source paths or expressions.
for args in "knn $sample -k 500 --device cpu" "radius $sample -r -1 --device cpu" "filter sor $sample -o $tmp/x.pcd --mean-k 0" "knn $sample --max-device-memory 0"; do
  "$pcnn" $args >/dev/null 2>"$tmp/err"
  if grep -qE '\.(cu|cpp|hpp|cuh):[0-9]|failed at|&&|\|\|' "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    echo "FAIL: message of pcnn $args:"; cat "$tmp/err"; fails=$((fails + 1))
  fi
done

# Pipes: '-' as an output (stdout) and as an input (stdin, with --format).
"$pcnn" knn "$sample" -k 3 --device cpu -q -o - >"$tmp/pipe.npy"
"$pcnn" knn "$sample" -k 3 --device cpu -q -o "$tmp/file.npy"
cmp -s "$tmp/pipe.npy" "$tmp/file.npy" || { echo "FAIL: -o - differs from a file"; fails=$((fails + 1)); }
"$pcnn" knn "$sample" -k 2 --device cpu -q --distances - --stream-format csv -o "$tmp/x.csv" | head -2 | grep -q '^row,d0,d1$' || { echo "FAIL: csv to stdout"; fails=$((fails + 1)); }
rm -f "$tmp/x.csv"
# A reader that stops early (| head): the command ends silently by SIGPIPE (141), as Unix
# commands do, though the library reports the write's EPIPE instead of dying of it.
"$pcnn" knn "$sample" -k 8 --device cpu -q -o - 2>"$tmp/err" | head -c 1 >/dev/null
status=${PIPESTATUS[0]}
[ "$status" = 141 ] && [ ! -s "$tmp/err" ] || { echo "FAIL: | head gave exit $status and: $(cat "$tmp/err")"; fails=$((fails + 1)); }
expect 5 "stdout is taken by --json" -- knn "$sample" -k 2 --device cpu --json -o -
expect 5 "it is also the output '-'" -- knn "$sample" -k 2 --device cpu -o - --distances -
"$pcnn" generate uniform -n 300 -o - -q | "$pcnn" knn - --format pcd -k 2 --device cpu -q -o "$tmp/stdin.npy" || { echo "FAIL: generate | knn -"; fails=$((fails + 1)); }
"$pcnn" generate uniform -n 300 -o "$tmp/u300.pcd" -q
"$pcnn" knn "$tmp/u300.pcd" -k 2 --device cpu -q -o "$tmp/file300.npy"
cmp -s "$tmp/stdin.npy" "$tmp/file300.npy" || { echo "FAIL: stdin input differs from the file"; fails=$((fails + 1)); }
expect 2 "needs --format pcd or --format ply" -- knn - --device cpu </dev/null
printf 'not a cloud\n' >"$tmp/garbage"
"$pcnn" stats - --format ply --device cpu <"$tmp/garbage" >/dev/null 2>"$tmp/err"
[ $? -eq 3 ] && grep -q "cannot read cloud '<stdin>'" "$tmp/err" || { echo "FAIL: bad stdin names <stdin>"; cat "$tmp/err"; fails=$((fails + 1)); }
# A stream that is no cloud is refused at its first line, not held in memory to its end (yes
# never ends); a header that arrives in pieces is read whole.
yes | timeout 60 "$pcnn" stats - --format ply --device cpu >/dev/null 2>"$tmp/err"
rc=${PIPESTATUS[1]}
[ "$rc" = 3 ] && grep -q "no 'ply' line first" "$tmp/err" || { echo "FAIL: yes | stats - (exit $rc)"; fails=$((fails + 1)); }
{ printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA asc'; sleep 0.3; printf 'ii\n1 2 3\n'; } | "$pcnn" stats - --format pcd --device cpu --json -q >"$tmp/out" && grep -q '"points": 1,' "$tmp/out" || { echo "FAIL: a header in two pieces"; fails=$((fails + 1)); }
# Nor is a valid header followed by an endless stream: it is read no further than a cloud with
# that header can reach (binary: its points and PCL's padding; ascii: its rows at their longest
# and 1 MiB of blank lines). A stream that ends in blank lines is a cloud.
{ printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 1000\nHEIGHT 1\nPOINTS 1000\nDATA binary\n'; cat /dev/zero; } | timeout 60 "$pcnn" stats - --format pcd --device cpu >/dev/null 2>"$tmp/err"
rc=${PIPESTATUS[1]}
[ "$rc" = 3 ] && grep -q "it goes on past the 16198 bytes a cloud with its header can hold" "$tmp/err" || { echo "FAIL: binary header then /dev/zero (exit $rc)"; cat "$tmp/err"; fails=$((fails + 1)); }
{ printf 'ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n'; yes '1 2 3'; } | timeout 60 "$pcnn" stats - --format ply --device cpu >/dev/null 2>"$tmp/err"
rc=${PIPESTATUS[1]}
[ "$rc" = 3 ] && grep -q "it goes on past the" "$tmp/err" || { echo "FAIL: ascii header then endless rows (exit $rc)"; cat "$tmp/err"; fails=$((fails + 1)); }
{ printf 'ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n4 5 6\n'; head -c 100000 /dev/zero | tr '\0' '\n'; } | "$pcnn" stats - --format ply --device cpu --json -q >"$tmp/out" && grep -q '"points": 2,' "$tmp/out" || { echo "FAIL: stdin ending in blank lines"; fails=$((fails + 1)); }
if command -v script >/dev/null; then  # binary .npy to a terminal is refused
  script -qec "$pcnn knn $sample -k 2 --device cpu -q -o -" /dev/null >"$tmp/tty" 2>&1
  grep -q "it is a terminal, and this output is binary" "$tmp/tty" || { echo "FAIL: npy to a terminal"; fails=$((fails + 1)); }
fi

# Zero-padded integers are decimal (CLI11 read 016 as octal 14, and checked ranges so).
"$pcnn" filter sor "$sample" -o "$tmp/f16.pcd" --mean-k 016 --device cpu --json -q >"$tmp/out"
grep -q '"mean_k": 16' "$tmp/out" || { echo "FAIL: --mean-k 016 is 16"; fails=$((fails + 1)); }
expect 2 "not in range 1 to 100000" -- generate depth --width 0200000 -o "$tmp/g.pcd"
# An option's value is not read as an option: an output named -k010.npy keeps its name.
(in=$(cd "$data" && pwd)/sample.pcd && exe=$(cd "$(dirname "$pcnn")" && pwd)/$(basename "$pcnn") &&
  cd "$tmp" && "$exe" knn "$in" -k 2 --device cpu -q -o -k010.npy) && [ -f "$tmp/-k010.npy" ] || { echo "FAIL: -o -k010.npy"; fails=$((fails + 1)); }
for k in "-k010" "-qk 010" "-qk010"; do  # attached, after a flag
  "$pcnn" knn "$sample" $k --device cpu --json -o "$tmp/k.npy" >"$tmp/out" 2>/dev/null
  grep -q '"k": 10' "$tmp/out" || { echo "FAIL: knn $k is k = 10"; fails=$((fails + 1)); }
done
# generate refuses the options of the other kind of cloud, and seeds JSON cannot print exactly.
expect 2 "--width applies to generate depth" -- generate uniform -n 10 --width 5 -o "$tmp/g.pcd"
expect 2 "--points applies to generate of an unorganized" -- generate depth -n 10 -o "$tmp/g.pcd"
expect 2 "not in range 0 to 9007199254740992" -- generate uniform -n 3 --seed -1 -o "$tmp/g.pcd"
expect 0 "a 6 x 1 depth scene" -- generate depth --width 6 --height 1 -o "$tmp/g1.pcd" --json
grep -q '"organized": false' "$tmp/out" || { echo "FAIL: a depth scene of one row is not organized"; fails=$((fails + 1)); }
# JSON data read back as the doubles they are (0.10000000149011612 was printed as 0.1), and the
# spacing in double (spacings of 1e-25 were 0 from float squared distances).
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n0.10000000149011612 0.25 0.5\n0.5 0.25 0.5\n' >"$tmp/f64.pcd"
"$pcnn" stats "$tmp/f64.pcd" --device cpu --json -q >"$tmp/out"
grep -q '"min": \[0.10000000149011612, 0.25, 0.5\]' "$tmp/out" && grep -q '"nearest_neighbor_spacing": {"min": 0.3999999985098839,' "$tmp/out" || { echo "FAIL: stats JSON values"; cat "$tmp/out"; fails=$((fails + 1)); }
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 3\nHEIGHT 1\nPOINTS 3\nDATA ascii\n0 0 0\n1e-25 0 0\n3e-25 0 0\n' >"$tmp/tiny.pcd"
"$pcnn" stats "$tmp/tiny.pcd" --device cpu --json -q >"$tmp/out"
grep -q '"nearest_neighbor_spacing": {"min": 1e-25,' "$tmp/out" || { echo "FAIL: spacing of 1e-25"; cat "$tmp/out"; fails=$((fails + 1)); }
# normals reads standard input and refuses GPU options on the CPU, as the other commands do.
"$pcnn" normals - --format pcd -k 8 --device cpu -q -o "$tmp/n_stdin.pcd" <"$tmp/u300.pcd" &&
  "$pcnn" normals "$tmp/u300.pcd" -k 8 --device cpu -q -o "$tmp/n_file.pcd" &&
  cmp -s "$tmp/n_stdin.pcd" "$tmp/n_file.pcd" || { echo "FAIL: normals from stdin"; fails=$((fails + 1)); }
expect 2 "--staging applies to GPU transfers" -- normals "$tmp/u300.pcd" -k 8 -o "$tmp/n.pcd" --device cpu --staging pinned
# Normal fields of an integer type in the input are written as float32 (they were clamped).
{
  printf 'VERSION 0.7\nFIELDS x y z normal_x\nSIZE 4 4 4 1\nTYPE F F F U\nCOUNT 1 1 1 1\nWIDTH 25\nHEIGHT 1\nPOINTS 25\nDATA ascii\n'
  for i in 0 1 2 3 4; do for j in 0 1 2 3 4; do echo "$i $j 2 7"; done; done
} >"$tmp/int_normals.pcd"
expect 0 "written to" -- normals "$tmp/int_normals.pcd" -k 4 --viewpoint 0,0,10 --device cpu -o "$tmp/int_normals_n.pcd"
grep -aq "^FIELDS x y z normal_x normal_y normal_z curvature$" "$tmp/int_normals_n.pcd" && grep -aq "^TYPE F F F F F F F$" "$tmp/int_normals_n.pcd" || { echo "FAIL: integer normal_x not replaced by float32"; fails=$((fails + 1)); }
# smooth keeps the stored record of a point it does not move: float64 coordinates far from the
# origin, and a point with one non-finite coordinate, came back rounded or all NaN.
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 4\nHEIGHT 1\nPOINTS 4\nDATA ascii\n500000.123456789 4200000.987654321 12.3456789\n500100.5 4200050.25 13\n500050.0000001 4200020.1 12.5\nnan 0.75 0.125\n' >"$tmp/utm64.pcd"
expect 0 "written to" -- smooth "$tmp/utm64.pcd" -o "$tmp/utm64_s.pcd" --iterations 0 --device cpu
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 4\nHEIGHT 1\nPOINTS 4\nDATA binary\n' >"$tmp/utm64_want.pcd"
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<12d', 500000.123456789, 4200000.987654321, 12.3456789, 500100.5, 4200050.25, 13, 500050.0000001, 4200020.1, 12.5, float('nan'), 0.75, 0.125))" >>"$tmp/utm64_want.pcd"
  tail -c 96 "$tmp/utm64_s.pcd" | cmp -s - <(tail -c 96 "$tmp/utm64_want.pcd") || { echo "FAIL: smooth rewrote points it did not move"; fails=$((fails + 1)); }
fi
# Huge or tiny stencil coefficients smooth: their float products overflowed (every point NaN)
# or underflowed (no point moved).
"$pcnn" smooth "$tmp/depth.pcd" -o "$tmp/st_id.pcd" --stencil list:0,1,0 --device cpu -q
"$pcnn" stats "$tmp/depth.pcd" --device cpu --json -q | grep -o '"finite_points": [0-9]*' >"$tmp/finite_in"
for st in list:1,2,1 list:1e20,2e20,1e20 list:1e-24,2e-24,1e-24; do
  "$pcnn" smooth "$tmp/depth.pcd" -o "$tmp/st.pcd" --stencil "$st" --device cpu -q
  "$pcnn" stats "$tmp/st.pcd" --device cpu --json -q | grep -o '"finite_points": [0-9]*' >"$tmp/finite_out"
  cmp -s "$tmp/finite_in" "$tmp/finite_out" && ! cmp -s "$tmp/st.pcd" "$tmp/st_id.pcd" || { echo "FAIL: smooth --stencil $st"; fails=$((fails + 1)); }
done

# A list that ends in ',' misses a number; MU 0 is not Taubin; SOR says what the cloud lacks.
expect 2 "a number is missing after the last ','" -- smooth "$tmp/depth.pcd" -o "$tmp/x.pcd" --stencil list:1,2,1, --device cpu
expect 2 "viewpoint needs three finite numbers" -- normals "$tmp/u300.pcd" -k 8 -o "$tmp/n.pcd" --viewpoint 1,2,3, --device cpu
expect 2 "MU 0 is --laplacian" -- smooth "$sample" -o "$tmp/x.pcd" --taubin 0.5,0 --device cpu
"$pcnn" generate uniform -n 5 -o "$tmp/five.pcd" -q
expect 2 "needs more than mean_k \(8\) finite points, it has 5" -- filter sor "$tmp/five.pcd" -o "$tmp/x.pcd" --mean-k 8 --device cpu


# Outputs when the process or its streams fail. A signal (Ctrl-C, kill, a closed terminal)
# removes the temporary and keeps the old file: the indices' temporary is made first, then the
# command waits to open the distances' FIFO (no reader) until the signal comes.
echo old >"$tmp/sig.npy"
mkfifo "$tmp/sig_fifo.npy"
"$pcnn" knn "$sample" -k 2 --device cpu -q -o "$tmp/sig.npy" --distances "$tmp/sig_fifo.npy" &
pid=$!
seen=no
for _ in $(seq 100); do ls -A "$tmp" | grep -q '^\.sig\.npy\.pcnn-' && seen=yes && break; sleep 0.1; done
sleep 0.3
kill -TERM $pid
wait $pid
rc=$?
[ "$seen" = yes ] && [ "$rc" = 143 ] && [ "$(cat "$tmp/sig.npy")" = old ] && [ -z "$(ls -A "$tmp" | grep '\.pcnn-')" ] || { echo "FAIL: SIGTERM (exit $rc, temporary seen: $seen) left a temporary or changed the output"; ls -A "$tmp" | grep pcnn-; fails=$((fails + 1)); }
# The report on stdout is checked like any output: a full disk or a closed stdout is exit 5.
"$pcnn" stats "$sample" --device cpu --json -q >/dev/full 2>"$tmp/err"
[ $? = 5 ] && grep -q "cannot write to standard output: No space left on device" "$tmp/err" || { echo "FAIL: --json to a full disk"; fails=$((fails + 1)); }
"$pcnn" stats "$sample" --device cpu --json -q >&- 2>"$tmp/err"
[ $? = 5 ] && grep -q "cannot write to standard output" "$tmp/err" || { echo "FAIL: --json to a closed stdout"; fails=$((fails + 1)); }
# Closed standard descriptors are no output: the temporary does not take their number.
"$pcnn" radius "$sample" -r 0.2 --device cpu -o "$tmp/closed.csv" >&- 2>&-
head -1 "$tmp/closed.csv" | grep -q "^query,neighbor,sqdist$" || { echo "FAIL: with stdout and stderr closed"; head -c 100 "$tmp/closed.csv"; fails=$((fails + 1)); }
# Standard error is no output; a link to /dev/stdout writes to stdout, not over the shell's file.
"$pcnn" knn "$sample" -k 2 --device cpu -o /dev/stderr 2>"$tmp/err.npy"
[ $? = 5 ] && grep -q "it is standard error" "$tmp/err.npy" || { echo "FAIL: -o /dev/stderr"; fails=$((fails + 1)); }
ln -s /dev/stdout "$tmp/to_stdout.npy"
echo head >"$tmp/log"
{ "$pcnn" knn "$sample" -k 2 --device cpu -q -o "$tmp/to_stdout.npy"; echo "rc=$?"; } >>"$tmp/log"
[ "$(head -1 "$tmp/log")" = head ] && [ "$(tail -c 5 "$tmp/log")" = "rc=0" ] && [ "$(head -c 11 "$tmp/log" | tail -c 5)" = NUMPY ] || { echo "FAIL: a link to /dev/stdout replaced the shell's file"; fails=$((fails + 1)); }
expect 2 "radius results \(without --max-nn\) go to a stream as CSV pairs" -- radius "$sample" -r 0.2 --device cpu -o - --stream-format npy
expect 0 "written to" -- radius "$sample" -r 0.2 --device cpu -o "$tmp/r_sf.npy" --stream-format npy  # a file: the option has nothing to say
# What the shell's > could not write is not replaced (as another user than root: as nobody).
if [ "$(id -u)" -ne 0 ] || command -v setpriv >/dev/null; then
  as_user() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; else "$@"; fi; }
  mkdir -m 1777 "$tmp/sticky" && cp "$sample" "$tmp/sticky/in.pcd" && chmod 644 "$tmp/sticky/in.pcd" && chmod 755 "$tmp"
  echo kept >"$tmp/sticky/ro.npy" && chmod 444 "$tmp/sticky/ro.npy"
  [ "$(id -u)" -eq 0 ] && chown nobody "$tmp/sticky/ro.npy"
  as_user "$pcnn" knn "$tmp/sticky/in.pcd" -k 2 --device cpu -q -o "$tmp/sticky/ro.npy" 2>"$tmp/err"
  [ $? = 5 ] && grep -q "it exists and is not writable" "$tmp/err" && [ "$(cat "$tmp/sticky/ro.npy")" = kept ] || { echo "FAIL: a read-only output was replaced"; cat "$tmp/err"; fails=$((fails + 1)); }
  if [ "$(id -u)" -eq 0 ]; then  # another user's file in a sticky directory: refused before the work
    echo other >"$tmp/sticky/other.npy" && chmod 666 "$tmp/sticky/other.npy"
    as_user "$pcnn" knn "$tmp/sticky/in.pcd" -k 2 --device cpu -q -o "$tmp/sticky/other.npy" 2>"$tmp/err"
    [ $? = 5 ] && grep -q "belongs to another user in a sticky directory" "$tmp/err" && [ -z "$(ls -A "$tmp/sticky" | grep pcnn-)" ] || { echo "FAIL: sticky directory"; cat "$tmp/err"; fails=$((fails + 1)); }
  fi
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
