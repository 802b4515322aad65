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
run 2 2 "only 'pcnn knn' runs distributed" -- stats "$sample" --device cpu
# With --json an error is one JSON object on stdout, printed by the rank that failed first.
run 2 3 "cannot read cloud" -- knn "$tmp/missing.pcd" --device cpu --json
[ "$(grep -c '"error"' "$tmp/out")" -eq 1 ] || { echo "FAIL: not exactly one JSON error"; fails=$((fails + 1)); }
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
