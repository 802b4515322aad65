#!/usr/bin/env bash
# Installs pcnn from BUILD_DIR into a temporary prefix, builds examples/ against the installed
# package with find_package(pcnn), runs them, and checks that the README's C++ example is
# examples/knn_vector.cpp as written. Usage: package_test.sh SOURCE_DIR BUILD_DIR
#
# knn_vector, cpu_only and frame_loop run on any machine (the CPU backend where no GPU is usable).
# device_output is built only where CMake finds a CUDA compiler and exits 0 with "skipped: ..."
# where no GPU is usable; pcl_cloud is built only where PCL is found.
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; exit 1; }
cmake -S "$src/examples" -B "$tmp/ex" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/ex" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
# pcnn::io from a LANGUAGES CXX project: exported targets name no library by absolute path.
if grep -nE '"[^"]*(/usr|/lib)[^"]*\.so' "$tmp/prefix/lib/cmake/pcnn/"pcnnIoTargets*.cmake; then
  echo "absolute library paths in the exported io targets"; exit 1
fi
for ex in knn_vector cpu_only frame_loop load_cloud device_output pcl_cloud; do
  if [ ! -x "$tmp/ex/$ex" ]; then
    case $ex in
      device_output | pcl_cloud)
        echo "== $ex: not built here (no CUDA compiler or no PCL)"
        continue
        ;;
      load_cloud)
        [ ! -e "$tmp/prefix/lib/cmake/pcnn/pcnnIoTargets.cmake" ] ||
          { echo "== load_cloud: pcnn has its io component but the example was not built"; exit 1; }
        echo "== load_cloud: not built (pcnn without its io component)"
        continue
        ;;
      *) echo "== $ex: missing from the build"; exit 1 ;;
    esac
  fi
  echo "== $ex"
  if [ "$ex" = load_cloud ]; then
    "$tmp/ex/$ex" "$tmp"
    [ -s "$tmp/nearest.npy" ] && [ -s "$tmp/counts.npy" ] || { echo "load_cloud wrote nothing"; exit 1; }
    continue
  fi
  "$tmp/ex/$ex"
done
# The README shows examples/knn_vector.cpp; it must be the same code.
awk '/<!-- example: knn_vector -->/{f=1; getline; next} f && /^```/{exit} f' "$src/README.md" >"$tmp/readme.cpp"
diff -u "$src/examples/knn_vector.cpp" "$tmp/readme.cpp"
# The command-line program is installed only with the io library (PCNN_BUILD_IO).
# Its CPU baseline (PCL) is a module it loads from the installed library directory: a filter on
# the CPU runs PCL's.
if [ -e "$tmp/prefix/bin/pcnn" ]; then
  "$tmp/prefix/bin/pcnn" --version
  "$tmp/prefix/bin/pcnn" filter sor "$src/data/sample.pcd" -o "$tmp/sor.pcd" --device cpu -q
  [ -s "$tmp/sor.pcd" ] || { echo "the installed pcnn's filter wrote nothing"; exit 1; }
fi
echo "package test passed"
