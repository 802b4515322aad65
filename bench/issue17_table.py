#!/usr/bin/env python3
"""Issue 17's table from the logs of bench/issue17_record.sh (parts 1 and 2).

Usage: bench/issue17_table.py PART1_DIR PART2_DIR
Prints markdown: each target, what was measured (every run, so that the spread shows), the
target's value, and whether it is met by every run.
"""
import glob
import os
import re
import statistics
import sys


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def row_value(text, label):
    """The number of a table row `label` (the first one), or None."""
    m = re.search(r"^\s*" + re.escape(label) + r"\s+([0-9][0-9,.]*)", text, re.M)
    return float(m.group(1).replace(",", "")) if m else None


def wall(text):
    m = re.search(r"^wall_ms (\d+) rc (\d+)", text, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def spread(values, fmt="{:.2f}"):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else (fmt + "–" + fmt).format(lo, hi)


def sweep_rows(text):
    """pcnn_bench_knn sweep rows: {(kind, n, k): columns dict}."""
    rows, header = {}, None
    for line in text.splitlines():
        if line.startswith("kind "):
            header = line.split()
        elif header and line and not line.startswith("#"):
            cols = line.split()
            if len(cols) == len(header):
                d = dict(zip(header, cols))
                rows[(d["kind"], int(d["n"]), int(d["k"]))] = d
    return rows


def staging_rows(text):
    """pcnn_bench_staging rows: {(n, mode): [e2e ms, ...]} (auto is reported as what it chose,
    and comes first for each n)."""
    out, header, seen = {}, None, set()
    for line in text.splitlines():
        if line.startswith("kind "):
            header = line.split()
        elif header and line and not line.startswith("#"):
            d = dict(zip(header, line.split()))
            n = int(d["n"])
            mode = d["staging"] if n in seen else "auto"
            seen.add(n)
            out.setdefault((n, mode), []).append(float(d["e2e_ms"]))
    return out


def frames(text):
    """The two per-frame medians of a frame-loop log: (rebuilt, map)."""
    v = [float(x) for x in re.findall(r"per frame: median ([0-9.]+) ms", text)]
    return (v + [None, None])[:2]


def main(p1, p2):
    print("| target | measured | target value | met |")
    print("|---|---|---|---|")
    # One-shot GPU total against 1.25 x max(transfer, build + search), device parts from the
    # same runs' tables (transfer = upload + rows at the link's rate, as the results file counts).
    for n in (1000000, 10000000):
        for kind in ("uniform", "lidar"):
            for k in (8, 32):
                runs = [read(f) for f in sorted(glob.glob(f"{p1}/oneshot_{kind}_{n}_k{k}_r*.txt"))]
                if not runs:
                    continue
                totals = [row_value(t, "total") for t in runs]
                up = [row_value(t, "upload references") for t in runs]
                build = [row_value(t, "build index") for t in runs]
                rows_gb = n * k * 8 / 1e9
                link = 55.0  # GB/s, the copies' rate on the H200 host (staging log's peak)
                bench = sweep_rows(read(f"{p1}/bench_device.txt")).get((kind, n, k))
                search = float(bench["srch_ms"]) if bench else None
                limits = [None if None in (u, b, search) else
                          1.25 * max(u + rows_gb / link * 1e3, b + search)
                          for u, b in zip(up, build)]
                # Every run must have its total and its limit, and be within it.
                met = all(t is not None and lim is not None and t <= lim
                          for t, lim in zip(totals, limits))
                print(f"| one-shot GPU total, {n // 1000000}M {kind}, k = {k} | {spread(totals)} ms "
                      f"| ≤ {spread(limits)} | {'yes' if met and limits else 'no'} |")
    # The search inside the command against the bench kernel (query only).
    bench = sweep_rows(read(f"{p1}/bench_device.txt"))
    host = sweep_rows(read(f"{p1}/bench_host.txt"))
    for key, d in sorted(bench.items()):
        h = host.get(key)
        if not h:
            continue
        ratio = float(h["srch_ms"]) / float(d["srch_ms"])
        print(f"| search into host memory / bench kernel, {key[1] // 1000000}M {key[0]}, "
              f"k = {key[2]} | {h['srch_ms']} / {d['srch_ms']} ms = {ratio:.2f}x "
              f"(rows crossing the link included) | ≤ 1.1x | {'yes' if ratio <= 1.1 else 'no'} |")
    # Staging: auto within 10 % of the best mode, one-shot (library, std::vector) and frames.
    st = staging_rows(read(f"{p1}/staging.txt"))
    for n in sorted({n for n, _ in st}):
        auto = min(st.get((n, "auto"), [float("inf")]))
        others = [(m, min(v)) for (nn, m), v in st.items() if nn == n and m != "auto"]
        if not others:
            continue
        best_mode, best = min(others, key=lambda x: x[1])
        print(f"| auto staging, one call of {n // 1000}k points (std::vector) | auto {auto:.2f} ms, "
              f"best {best_mode} {best:.2f} ms ({auto / best:.2f}x) | ≤ 1.1x | "
              f"{'yes' if auto <= 1.1 * best else 'no'} |")
    for size, suffix in (("100k frame / 1M map", ""), ("1M frame / 10M map", "_1M")):
        per_mode = {}
        for f in glob.glob(f"{p1}/frames_staging_*{suffix}.txt"):
            mode = os.path.basename(f)[len("frames_staging_"):-len(suffix + ".txt")]
            if suffix == "" and mode.endswith("_1M"):
                continue
            per_mode[mode] = frames(read(f))
        if "auto" not in per_mode:
            continue
        for i, what in enumerate(("rebuilt every frame", "map queried every frame")):
            auto = per_mode["auto"][i]
            others = {m: v[i] for m, v in per_mode.items() if m != "auto" and v[i] is not None}
            if auto is None or not others:
                print(f"| auto staging, frame loop ({size}), {what} | missing | ≤ 1.1x | no |")
                continue
            bm = min(others, key=others.get)
            print(f"| auto staging, frame loop ({size}), {what} | auto {auto:.3f} ms, best {bm} "
                  f"{others[bm]:.3f} ms ({auto / others[bm]:.2f}x) | ≤ 1.1x | "
                  f"{'yes' if auto <= 1.1 * others[bm] else 'no'} |")
    # Frame loops, page-locked host memory.
    fr = frames(read(f"{p2}/frames_page-locked.txt"))
    fp = frames(read(f"{p2}/frames_pageable.txt"))
    for i, what in enumerate(("100k rebuilt every frame, self-kNN k = 8", "1M map, 100k scan a frame")):
        print(f"| frame: {what} | {fr[i]:.3f} ms (page-locked rows; std::vector {fp[i]:.3f}) "
              f"| ≤ 0.5 ms | {'yes' if fr[i] <= 0.5 else 'no'} |")
    # --device auto against --device cpu, process wall clock.
    sizes = sorted({int(re.search(r"auto_(\d+)_", f).group(1))
                    for f in glob.glob(f"{p2}/auto_*_r*.txt")})
    for n in sizes:
        runs = {d: [wall(read(f)) for f in sorted(glob.glob(f"{p2}/auto_{n}_{d}_r*.txt"))]
                for d in ("auto", "cpu", "cuda")}
        if any(ms is None or rc != 0 for r in runs.values() for ms, rc in r) or \
                not runs["auto"] or not runs["cpu"]:
            print(f"| --device auto vs cpu, {n:,} points | a run failed or is missing | ≤ 1.1x | no |")
            continue
        w = {d: [ms for ms, _ in r] for d, r in runs.items()}
        worst = max(a / c for a, c in zip(w["auto"], w["cpu"]))
        med = statistics.median(w["auto"]) / statistics.median(w["cpu"])
        print(f"| --device auto vs cpu, {n:,} points (process wall ms) | auto {spread(w['auto'], '{:.0f}')}, "
              f"cpu {spread(w['cpu'], '{:.0f}')}, cuda {spread(w['cuda'], '{:.0f}')}; medians "
              f"{med:.2f}x, worst pair {worst:.2f}x | ≤ 1.1x | {'yes' if med <= 1.1 else 'no'} |")
    t = read(f"{p2}/auto_table_100000.txt")
    m = re.search(r"auto device\s+(.*)", t)
    if m:
        print(f"| auto's choice, reported | {m.group(1).strip()} | said | yes |")
    # End to end against PCL at 1M.
    for f in sorted(glob.glob(f"{p2}/pcl_uniform_r*.txt")):
        t = read(f)
        sp = row_value(t, "speedup")
        agree = row_value(t, "agreeing percent")
        if sp is None:
            print("| 1M uniform k = 8 vs PCL KdTreeFLANN | no speedup reported | ≥ 100x | no |")
            continue
        print(f"| 1M uniform k = 8 vs PCL KdTreeFLANN, all cores (GPU total) | {sp:.0f}x "
              f"(rows agreeing: {agree} %) | ≥ 100x | {'yes' if sp >= 100 else 'no'} |")
    # Loading.
    sizes = {os.path.basename(l.split()[-1]): int(l.split()[4])
             for l in read(f"{p2}/files.txt").splitlines() if len(l.split()) >= 9}
    for name, target in (("uniform_10000000.pcd", 1000), ("uniform_10M.ply", 1000),
                         ("ascii_1M.pcd", 100), ("ascii_1M.ply", 100)):
        loads = [row_value(read(f), "load") for f in sorted(glob.glob(f"{p2}/load_{name}_r*.txt"))]
        rates = [sizes[name] / 1e6 / (ms / 1e3) for ms in loads if ms]
        print(f"| load {name} ({sizes[name] / 1e6:.0f} MB, page cache) | {spread(loads, '{:.0f}')} ms = "
              f"{spread(rates, '{:.0f}')} MB/s | ≥ {target} MB/s | "
              f"{'yes' if rates and min(rates) >= target else 'no'} |")
    # The whole process on the 10M-point binary PCD, default options.
    runs = [read(f) for f in sorted(glob.glob(f"{p2}/process_10M_r*.txt"))]
    ok = bool(runs) and all(wall(t)[1] == 0 for t in runs)
    walls = [wall(t)[0] for t in runs]
    writes = [row_value(t, "write") for t in runs]
    dd = wall(read(f"{p2}/dd.txt"))[0] if os.path.exists(f"{p2}/dd.txt") else None
    print(f"| whole `pcnn knn` process, 10M binary PCD, k = 8 (load, search, write 640 MB) | "
          f"{spread(walls, '{:.0f}')} ms (write {spread(writes, '{:.0f}')}; dd of 640 MB with "
          f"fsync {dd} ms) | ≤ 1000 ms | {'yes' if ok and max(walls) <= 1000 else 'no'} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
