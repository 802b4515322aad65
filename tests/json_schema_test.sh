#!/usr/bin/env bash
# Every command's --json output (and --json errors) against its schema in docs/schema/.
# Usage: json_schema_test.sh PCNN SOURCE_DIR. Runs the CPU paths (and the GPU ones where present).
set -u
pcnn=$1
src=$2
schemas=$src/docs/schema
check=(/usr/bin/python3 "$src/tests/json_schema_check.py" "$schemas")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
passes=0

# The validator itself rejects wrong documents (a number as a string, an unknown key...).
"${check[@]}" --self-test || fails=$((fails + 1))

# Every command pcnn registers has a schema (a new command needs one).
for cmd in $("$pcnn" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}'); do
  [ -f "$schemas/$cmd.json" ] || { echo "FAIL: no docs/schema/$cmd.json for 'pcnn $cmd'"; fails=$((fails + 1)); }
done

# run SCHEMA WANT_RC ARGS...: pcnn ARGS --json exits WANT_RC and its stdout is one object of SCHEMA.
run() {
  local schema=$1 want=$2
  shift 2
  "$pcnn" "$@" --json >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: pcnn $* --json -> exit $rc (want $want)"; sed 's/^/    /' "$tmp/err"; fails=$((fails + 1))
  elif ! "${check[@]}" "$schema" "$tmp/out"; then
    echo "    from: pcnn $* --json"; sed 's/^/    /' "$tmp/out"; fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

sample=$src/data/sample.pcd
run generate 0 generate clustered -n 2000 -o "$tmp/c.pcd"
run generate 0 generate depth --width 64 --height 48 -o "$tmp/depth.pcd"
if "$pcnn" devices >/dev/null 2>&1; then run devices 0 devices; else run devices 4 devices; fi
run knn 0 knn "$sample" -k 4 -o "$tmp/i.npy"  # --device auto: on the CPU, saying why (auto_device)
devices=(cpu)
"$pcnn" devices >/dev/null 2>&1 && devices+=(cuda)
for dev in "${devices[@]}"; do
  run knn 0 knn "$sample" -k 4 --device "$dev" -o "$tmp/i.npy" --distances "$tmp/d.csv"
  run knn 0 knn "$sample" --query "$tmp/c.pcd" -k 3 --device "$dev"
  run knn 0 knn "$sample" -k 2 --chunk-rows 7000 --device "$dev" -o "$tmp/s.npy"
  parts=0,1
  [ "$dev" = cuda ] && parts=all  # the GPUs present
  run knn 0 knn "$sample" -k 4 --exclude-self --device "$dev" --devices "$parts" -o "$tmp/p.npy"
  run knn 0 knn "$sample" --query "$tmp/c.pcd" -k 3 --device "$dev" --tiles 3
  run radius 0 radius "$sample" -r 0.2 --device "$dev" -o "$tmp/r"
  run radius 0 radius "$sample" -r 0.2 --exclude-self --device "$dev" -o "$tmp/r.csv"
  run radius 0 radius "$sample" -r 0.3 --max-nn 8 --device "$dev" -o "$tmp/h.npy" --counts "$tmp/hc.npy"
  run stats 0 stats "$sample" --device "$dev"
  run stats 0 stats "$tmp/depth.pcd" --device "$dev"
  run filter 0 filter sor "$sample" -o "$tmp/f.pcd" --device "$dev" --kept-indices "$tmp/k.npy"
  run filter 0 filter ror "$sample" -o "$tmp/f.ply" --radius 0.3 --min-neighbors 3 --device "$dev"
  run smooth 0 smooth "$tmp/depth.pcd" -o "$tmp/ds.pcd" --depth-jump 0.1 --device "$dev"
  run smooth 0 smooth "$tmp/c.pcd" -o "$tmp/cs.pcd" --taubin 0.5,-0.53 -k 6 --iterations 2 --device "$dev"
  run normals 0 normals "$sample" -k 8 -o "$tmp/n.pcd" --device "$dev"
  run normals 0 normals "$sample" -r 0.3 --max-nn 16 --viewpoint=0,0,2 -o "$tmp/n.ply" --device "$dev"
done
if [ "${#devices[@]}" -gt 1 ]; then  # the GPU with the CPU comparisons
  run knn 0 knn "$sample" -k 8 --compare-cpu --max-device-memory 1G
  run knn 0 knn "$sample" -k 8 --max-device-memory 1M  # references over the cap: tiles by themselves
  run knn 0 knn "$sample" -k 8 --devices all --compare-cpu
  run radius 0 radius "$sample" -r 0.3 --compare-cpu
  run radius 0 radius "$sample" -r 0.3 --max-nn 16 --exclude-self --compare-cpu
  run filter 0 filter sor "$sample" -o "$tmp/g.pcd" --compare-cpu
  run filter 0 filter ror "$sample" -o "$tmp/g.pcd" --radius 0.3 --compare-cpu
  run smooth 0 smooth "$tmp/depth.pcd" -o "$tmp/g.pcd" --compare-cpu
  run smooth 0 smooth "$sample" -o "$tmp/g.pcd" --laplacian 0.5 -k 8 --compare-cpu
fi

# Errors are one JSON object too, with the exit code the command returns.
run error 3 knn "$tmp/missing.pcd"
run error 3 stats "$tmp/c.pcd.nope"
# A file name that is not UTF-8 (byte 0xff) still gives valid JSON (U+FFFD in its place).
run error 3 knn "$tmp/$(printf 'bad\377name').pcd"
cp "$sample" "$tmp/$(printf 'n\377').pcd" && run stats 0 stats "$tmp/$(printf 'n\377').pcd" --device cpu
run error 2 knn "$sample" -k 0 --device cpu
run error 2 knn --no-such-option
run error 2 filter sor "$sample" -o "$tmp/x.pcd" --radius 1
run error 5 knn "$sample" --device cpu -o "$tmp/nodir/x.npy"
run error 5 generate uniform -n 10 -o -
run error 2 smooth "$sample" -o "$tmp/x.pcd" --stencil box:1 --device cpu
"$pcnn" knn "$tmp/missing.pcd" --json 2>/dev/null | grep -qF "\"file\": \"$tmp/missing.pcd\"" || { echo "FAIL: the error names no file"; fails=$((fails + 1)); }

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
