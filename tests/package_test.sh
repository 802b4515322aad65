#!/usr/bin/env bash
# Installs pcnn from BUILD_DIR into a temporary prefix, builds examples/ against the installed
# package with find_package(pcnn), runs them, and checks that the README's C++ example is
# examples/knn_vector.cpp as written. Usage: package_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples" -B "$tmp/ex" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/ex" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
for ex in knn_vector frame_loop pcl_cloud; do
  echo "== $ex"
  "$tmp/ex/$ex"
done
# The README shows examples/knn_vector.cpp; it must be the same code.
awk '/<!-- example: knn_vector -->/{f=1; getline; next} f && /^```/{exit} f' "$src/README.md" >"$tmp/readme.cpp"
diff -u "$src/examples/knn_vector.cpp" "$tmp/readme.cpp"
"$tmp/prefix/bin/pcnn" --version
echo "package test passed"
