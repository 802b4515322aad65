#!/usr/bin/env bash
# `mpirun -np N pcnn knn` writes the same bytes as one process, on the CPU backend (the CI path).
# Usage: mpi_test.sh PCNN DATA_DIR. Exits 77 (CTest: skipped) without mpirun.
set -u
pcnn=$1
data=$2
src=$(cd "$data/.." && pwd)  # the source tree (docs/schema, tests/json_schema_check.py)
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun is not installed (openmpi-bin)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)  # containers and CI runners often run as root

# run NP CODE PATTERN -- ARGS...: mpirun -np NP pcnn ARGS exits with CODE, stderr matches PATTERN.
run() {
  local np=$1 code=$2 pattern=$3
  shift 4
  "${mpi[@]}" -np "$np" "$pcnn" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" "$tmp/err"; then
    echo "FAIL: mpirun -np $np pcnn $* -> exit $rc (want $code), stderr:"; sed 's/^/    /' "$tmp/err"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
same() {  # same A B WHAT
  cmp -s "$1" "$2" || { echo "FAIL: $3: $1 and $2 differ"; fails=$((fails + 1)); }
}

# Adversarial clouds: an integer lattice (exact ties everywhere, cuts on lattice planes) and the
# same points twice (duplicates on both sides of a cut), as ascii PCD.
lattice() {
  local n=$(( $1 * $1 * $1 * $2 ))
  printf 'VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH %d\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS %d\nDATA ascii\n' $n $n
  for c in $(seq "$2"); do
    for i in $(seq 0 $(($1 - 1))); do for j in $(seq 0 $(($1 - 1))); do for l in $(seq 0 $(($1 - 1))); do
      echo "$l $j $i"
    done; done; done
  done
}
lattice 10 1 >"$tmp/lattice.pcd"
lattice 8 2 >"$tmp/twice.pcd"
"$pcnn" generate clustered -n 3000 --seed 4 -o "$tmp/q.pcd" 2>/dev/null

sample=$data/sample.pcd
for cloud in "$sample" "$tmp/lattice.pcd" "$tmp/twice.pcd"; do
  for args in "-k 8 --exclude-self" "-k 27" "-k 1"; do
    tag=$(basename "$cloud" .pcd)_$(echo "$args" | tr -cd 'a-z0-9')
    # shellcheck disable=SC2086
    "$pcnn" knn "$cloud" $args --device cpu -o "$tmp/$tag.one.npy" --distances "$tmp/$tag.one_d.npy" 2>/dev/null
    for np in 2 3; do
      # shellcheck disable=SC2086
      run $np 0 "ranks +$np" -- knn "$cloud" $args --device cpu -o "$tmp/$tag.$np.npy" --distances "$tmp/$tag.${np}_d.npy"
      same "$tmp/$tag.one.npy" "$tmp/$tag.$np.npy" "$tag, $np ranks, indices"
      same "$tmp/$tag.one_d.npy" "$tmp/$tag.${np}_d.npy" "$tag, $np ranks, distances"
    done
  done
done
# Radius (CSR, counted first) and hybrid under mpirun: the same bytes as one process.
for cloud in "$sample" "$tmp/lattice.pcd" "$tmp/twice.pcd"; do
  tag=$(basename "$cloud" .pcd)
  r=0.05
  [ "$cloud" = "$sample" ] || r=1
  "$pcnn" radius "$cloud" -r $r --device cpu -o "$tmp/${tag}_r1" 2>/dev/null
  "$pcnn" radius "$cloud" -r $r --max-nn 9 --exclude-self --device cpu -o "$tmp/$tag.h1.npy" --distances "$tmp/$tag.h1_d.npy" --counts "$tmp/$tag.h1_c.npy" 2>/dev/null
  for np in 2 3; do
    run $np 0 "ranks +$np" -- radius "$cloud" -r $r --device cpu -o "$tmp/${tag}_r$np"
    for f in offsets indices sqdist; do same "$tmp/${tag}_r1.$f.npy" "$tmp/${tag}_r$np.$f.npy" "$tag radius, $np ranks, $f"; done
    run $np 0 "ranks +$np" -- radius "$cloud" -r $r --max-nn 9 --exclude-self --device cpu -o "$tmp/$tag.h$np.npy" --distances "$tmp/$tag.h${np}_d.npy" --counts "$tmp/$tag.h${np}_c.npy"
    for f in "" _d _c; do same "$tmp/$tag.h1$f.npy" "$tmp/$tag.h$np$f.npy" "$tag hybrid, $np ranks, $f"; done
  done
done
# float64 coordinates no float offset keeps (UTM-scale, 0.1 mm apart), as stored on every rank.
{
  printf 'VERSION 0.7\nFIELDS x y z\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2000\nHEIGHT 1\nPOINTS 2000\nDATA ascii\n'
  awk 'BEGIN { srand(5); for (i = 0; i < 2000; i++) { if (i % 25 == 0) { cx = 2500000 + 100 * rand(); cy = 5400000 + 100 * rand(); cz = 1000 + 10 * rand() }
    printf "%.10f %.10f %.10f\n", cx + 2e-4 * rand(), cy + 2e-4 * rand(), cz + 2e-4 * rand() } }'
} >"$tmp/f64.pcd"
"$pcnn" knn "$tmp/f64.pcd" -k 7 --exclude-self --device cpu -o "$tmp/f64.one.npy" --distances "$tmp/f64.one_d.npy" 2>/dev/null
"$pcnn" radius "$tmp/f64.pcd" -r 1.5e-4 --query "$tmp/f64.pcd" --device cpu -o "$tmp/f64r.one.csv" 2>/dev/null
"$pcnn" radius "$tmp/f64.pcd" -r 1.5e-4 --device cpu -o "$tmp/f64r_one" 2>/dev/null
for np in 2 3; do
  run $np 0 "ranks +$np" -- knn "$tmp/f64.pcd" -k 7 --exclude-self --device cpu -o "$tmp/f64.$np.npy" --distances "$tmp/f64.${np}_d.npy"
  same "$tmp/f64.one.npy" "$tmp/f64.$np.npy" "float64, $np ranks, indices"
  same "$tmp/f64.one_d.npy" "$tmp/f64.${np}_d.npy" "float64, $np ranks, distances"
  run $np 0 "ranks +$np" -- radius "$tmp/f64.pcd" -r 1.5e-4 --device cpu -o "$tmp/f64r_$np"
  for f in offsets indices sqdist; do same "$tmp/f64r_one.$f.npy" "$tmp/f64r_$np.$f.npy" "float64 radius, $np ranks, $f"; done
done
run 2 0 "ranks +2" -- radius "$tmp/f64.pcd" -r 1.5e-4 --query "$tmp/f64.pcd" --device cpu -o "$tmp/f64r.2.csv"
same "$tmp/f64r.one.csv" "$tmp/f64r.2.csv" "float64 radius with queries (CSV), 2 ranks"
[ "$(wc -l <"$tmp/f64r.2.csv")" -gt 2000 ] || { echo "FAIL: float64 radius with queries found too few pairs"; fails=$((fails + 1)); }
run 2 0 "queries forwarded" -- radius "$sample" -r 0.05 --device cpu --json
grep -q '"ranks": 2' "$tmp/out" && grep -q '"per_rank": \[{"index": 0, ' "$tmp/out" || { echo "FAIL: radius --json lacks ranks / per_rank"; fails=$((fails + 1)); }
if [ -x /usr/bin/python3 ] && [ -f "$src/tests/json_schema_check.py" ]; then
  /usr/bin/python3 "$src/tests/json_schema_check.py" "$src/docs/schema" radius "$tmp/out" \
    || { echo "FAIL: the mpirun radius --json summary does not match docs/schema/radius.json"; fails=$((fails + 1)); }
fi
# Regular .npy outputs: every rank writes its block of rows at its offset (rank 0 commits them
# all); .csv and standard output: rank 0 gathers and writes. The same bytes either way.
run 3 0 "every rank wrote its block of rows" -- knn "$sample" -k 8 --exclude-self --device cpu -o "$tmp/blk.npy" --distances "$tmp/blk_d.npy"
same "$tmp/sample_k8excludeself.one.npy" "$tmp/blk.npy" "blocks written by 3 ranks, indices"
same "$tmp/sample_k8excludeself.one_d.npy" "$tmp/blk_d.npy" "blocks written by 3 ranks, distances"
run 2 0 "gathered and written by rank 0" -- knn "$sample" -k 8 --exclude-self --device cpu -o "$tmp/blk.csv"
"$pcnn" knn "$sample" -k 8 --exclude-self --device cpu -o "$tmp/blk1.csv" 2>/dev/null
same "$tmp/blk1.csv" "$tmp/blk.csv" "CSV gathered by rank 0"
run 2 0 "every rank wrote its block of rows" -- radius "$sample" -r 0.05 --max-nn 6 --device cpu -o "$tmp/hb.npy" --counts "$tmp/hb_c.npy"
"$pcnn" radius "$sample" -r 0.05 --max-nn 6 --device cpu -o "$tmp/hb1.npy" --counts "$tmp/hb1_c.npy" 2>/dev/null
same "$tmp/hb1.npy" "$tmp/hb.npy" "hybrid blocks, indices"
same "$tmp/hb1_c.npy" "$tmp/hb_c.npy" "hybrid blocks, counts"
run 3 0 "every rank wrote its block of rows" -- radius "$sample" -r 0.05 --device cpu -o "$tmp/rb"
for f in offsets indices sqdist; do same "$tmp/sample_r1.$f.npy" "$tmp/rb.$f.npy" "radius blocks written by 3 ranks, $f"; done
grep -qE "neighbors found +118,774" "$tmp/err" || { echo "FAIL: radius blocks: no neighbor count in the summary"; fails=$((fails + 1)); }
"$pcnn" radius "$sample" -r 0.05 --device cpu -o "$tmp/rb1.csv" 2>/dev/null
run 2 0 "gathered and written by rank 0" -- radius "$sample" -r 0.05 --device cpu -o "$tmp/rb.csv"
same "$tmp/rb1.csv" "$tmp/rb.csv" "radius CSV gathered by rank 0"
[ -z "$(ls -A "$tmp" | grep pcnn-)" ] || { echo "FAIL: temporaries left behind"; fails=$((fails + 1)); }
# A separate query set, and the JSON summary: rank 0 alone prints it.
"$pcnn" knn "$sample" --query "$tmp/q.pcd" -k 5 --device cpu -o "$tmp/q.one.npy" 2>/dev/null
run 2 0 "queries forwarded" -- knn "$sample" --query "$tmp/q.pcd" -k 5 --device cpu -o "$tmp/q.2.npy" --json
same "$tmp/q.one.npy" "$tmp/q.2.npy" "query set, 2 ranks"
[ "$(grep -c '"command": "knn"' "$tmp/out")" -eq 1 ] || { echo "FAIL: not exactly one JSON summary"; fails=$((fails + 1)); }
grep -q '"ranks": 2' "$tmp/out" && grep -q '"per_rank": \[{"index": 0, .*}, {"index": 1, ' "$tmp/out" && grep -q '"queries_forwarded"' "$tmp/out" \
  || { echo "FAIL: --json lacks ranks / per_rank / queries_forwarded"; fails=$((fails + 1)); }
if [ -x /usr/bin/python3 ] && [ -f "$src/tests/json_schema_check.py" ]; then
  /usr/bin/python3 "$src/tests/json_schema_check.py" "$src/docs/schema" knn "$tmp/out" \
    || { echo "FAIL: the mpirun --json summary does not match docs/schema/knn.json"; fails=$((fails + 1)); }
fi
# Errors: every rank stops with the same code, nothing is left behind.
run 2 3 "cannot read cloud" -- knn "$tmp/missing.pcd" --device cpu -o "$tmp/m.npy"
run 2 5 "cannot write" -- knn "$sample" --device cpu -o "$tmp/nodir/i.npy"
[ ! -e "$tmp/m.npy" ] && [ ! -e "$tmp/nodir" ] || { echo "FAIL: partial output"; fails=$((fails + 1)); }
run 2 2 "for one process" -- knn "$sample" --device cpu --devices 0,1
run 2 2 "only 'pcnn knn' and 'pcnn radius' run distributed" -- stats "$sample" --device cpu
run 2 2 "for one process" -- radius "$sample" -r 0.1 --device cpu --tiles 2
run 2 2 "--devices, --tiles and --max-device-memory are for one process" -- knn "$sample" --device cpu --max-device-memory 1G
run 2 2 "layout" -- knn "$sample" --device cpu --layout tiles
# Replicas (--layout replicated): every rank indexes the whole cloud and answers its block of
# the rows, no exchange; the same bytes as one process, written at their offsets or gathered.
for cloud in "$sample" "$tmp/lattice.pcd" "$tmp/twice.pcd"; do
  tag=$(basename "$cloud" .pcd)_k8excludeself
  for np in 2 3; do
    run $np 0 "layout +replicated" -- knn "$cloud" -k 8 --exclude-self --device cpu --layout replicated -o "$tmp/$tag.rep$np.npy" --distances "$tmp/$tag.rep${np}_d.npy"
    same "$tmp/$tag.one.npy" "$tmp/$tag.rep$np.npy" "$tag, $np replicas, indices"
    same "$tmp/$tag.one_d.npy" "$tmp/$tag.rep${np}_d.npy" "$tag, $np replicas, distances"
  done
  tag=$(basename "$cloud" .pcd)
  r=0.05
  [ "$cloud" = "$sample" ] || r=1
  run 3 0 "layout +replicated" -- radius "$cloud" -r $r --device cpu --layout replicated -o "$tmp/${tag}_rrep"
  for f in offsets indices sqdist; do same "$tmp/${tag}_r1.$f.npy" "$tmp/${tag}_rrep.$f.npy" "$tag radius, 3 replicas, $f"; done
  run 2 0 "layout +replicated" -- radius "$cloud" -r $r --max-nn 9 --exclude-self --device cpu --layout replicated -o "$tmp/$tag.hrep.npy" --distances "$tmp/$tag.hrep_d.npy" --counts "$tmp/$tag.hrep_c.npy"
  for f in "" _d _c; do same "$tmp/$tag.h1$f.npy" "$tmp/$tag.hrep$f.npy" "$tag hybrid, 2 replicas, $f"; done
done
# More ranks than rows: a rank with an empty block writes nothing, and the rows are still whole.
printf 'VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 2\nDATA ascii\n0 0 0\n1 0 0\n' >"$tmp/two.pcd"
"$pcnn" knn "$tmp/two.pcd" -k 2 --device cpu -o "$tmp/two.one.npy" --distances "$tmp/two.one_d.npy" 2>/dev/null
for lay in replicated spatial; do
  run 3 0 "layout +$lay" -- knn "$tmp/two.pcd" -k 2 --device cpu --layout $lay -o "$tmp/two.$lay.npy" --distances "$tmp/two.${lay}_d.npy"
  same "$tmp/two.one.npy" "$tmp/two.$lay.npy" "2 points on 3 ranks ($lay), indices"
  same "$tmp/two.one_d.npy" "$tmp/two.${lay}_d.npy" "2 points on 3 ranks ($lay), distances"
done
run 2 0 "layout +replicated" -- knn "$tmp/f64.pcd" -k 7 --exclude-self --device cpu --layout replicated -o "$tmp/f64.rep.npy" --distances "$tmp/f64.rep_d.npy"
same "$tmp/f64.one.npy" "$tmp/f64.rep.npy" "float64, 2 replicas, indices"
same "$tmp/f64.one_d.npy" "$tmp/f64.rep_d.npy" "float64, 2 replicas, distances"
run 3 0 "gathered and written by rank 0" -- knn "$sample" -k 8 --exclude-self --device cpu --layout replicated -o "$tmp/rep.csv"
same "$tmp/blk1.csv" "$tmp/rep.csv" "CSV gathered from 3 replicas"
run 2 0 "gathered and written by rank 0" -- radius "$sample" -r 0.05 --device cpu --layout replicated -o "$tmp/rrep.csv"
same "$tmp/rb1.csv" "$tmp/rrep.csv" "radius CSV gathered from 2 replicas"
run 3 0 "layout +replicated" -- knn "$sample" --query "$tmp/q.pcd" -k 5 --device cpu --layout replicated -o "$tmp/q.rep.npy" --json
same "$tmp/q.one.npy" "$tmp/q.rep.npy" "query set, 3 replicas"
grep -q '"layout": "replicated"' "$tmp/out" || { echo "FAIL: --json lacks the replicated layout"; fails=$((fails + 1)); }
if [ -x /usr/bin/python3 ] && [ -f "$src/tests/json_schema_check.py" ]; then
  /usr/bin/python3 "$src/tests/json_schema_check.py" "$src/docs/schema" knn "$tmp/out" \
    || { echo "FAIL: the replicated --json summary does not match docs/schema/knn.json"; fails=$((fails + 1)); }
fi
# With --json an error is one JSON object on stdout, printed by the rank that failed first.
run 2 3 "cannot read cloud" -- knn "$tmp/missing.pcd" --device cpu --json
[ "$(grep -c '"error"' "$tmp/out")" -eq 1 ] || { echo "FAIL: not exactly one JSON error"; fails=$((fails + 1)); }
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
