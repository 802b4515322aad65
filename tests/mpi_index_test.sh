#!/usr/bin/env bash
# Runs test_mpi_index on 2 and 3 ranks (oversubscribed). Exits 77 (CTest: skipped) without mpirun.
set -u
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun is not installed (openmpi-bin)"
  exit 77
fi
mpi=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)  # containers and CI runners often run as root
for np in 2 3; do
  "${mpi[@]}" -np "$np" "$1" || { echo "FAIL: test_mpi_index on $np ranks"; exit 1; }
done
