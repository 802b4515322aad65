"""Tests of the pcnn Python module against a NumPy brute force, compared strictly.

The reference follows the library's contract: squared distances ((dx*dx + dy*dy) + dz*dz) in
float64 from the coordinates as given (float32 or float64), each row sorted by (distance, index),
the first k
kept, padded with -1 / inf; reported distances are the float64 value rounded to float32; radius
membership is d <= r*r in float64. Results must equal the reference exactly.

Runs on the CPU backend everywhere and, where pcnn.cuda_available(), on the CUDA backend too.
"""

import concurrent.futures
import gc
import os
import threading

import numpy as np
import pytest

import pcnn

GPU = pcnn.cuda_available()
DEVICES = ["cpu", "cuda"] if GPU else ["cpu"]


# ---- the reference ----

def sqdist_matrix(points, queries):
    """float64 squared distances (queries x points) from the coordinates as given (float32,
    float64 or integers, all exact in float64); inf where either row is not finite."""
    p = np.asarray(points).astype(np.float64).reshape(-1, 3)
    q = np.asarray(queries).astype(np.float64).reshape(-1, 3)
    with np.errstate(invalid="ignore"):  # inf - inf where rows are not finite
        dx = q[:, None, 0] - p[None, :, 0]
        dy = q[:, None, 1] - p[None, :, 1]
        dz = q[:, None, 2] - p[None, :, 2]
        d = (dx * dx + dy * dy) + dz * dz
    valid = np.isfinite(q).all(axis=1)[:, None] & np.isfinite(p).all(axis=1)[None, :]
    return np.where(valid, d, np.inf), valid


def reference_rows(points, queries, exclude_self=False, r=None):
    """For each query: (candidate indices, float64 distances) sorted by (distance, index)."""
    d, valid = sqdist_matrix(points, queries)
    rows = []
    for i in range(d.shape[0]):
        cand = np.nonzero(valid[i])[0]
        if exclude_self:
            cand = cand[cand != i]
        if r is not None:
            cand = cand[d[i, cand] <= r * r]  # r * r in float64, as the library
        order = cand[np.lexsort((cand, d[i, cand]))]
        rows.append((order, d[i, order]))
    return rows


def reference_knn(points, queries, k, exclude_self=False, r=None):
    rows = reference_rows(points, queries, exclude_self, r)
    idx = np.full((len(rows), k), -1, np.int32)
    dist = np.full((len(rows), k), np.inf, np.float32)
    for i, (order, d) in enumerate(rows):
        m = min(k, len(order))
        idx[i, :m] = order[:m]
        with np.errstate(over="ignore"):  # beyond float32: inf, as the library reports
            dist[i, :m] = d[:m].astype(np.float32)
    return idx, dist


def reference_radius(points, queries, r, exclude_self=False):
    rows = reference_rows(points, queries, exclude_self, r)
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(o) for o, _ in rows])
    indices = np.concatenate([o for o, _ in rows] + [np.zeros(0)]).astype(np.int32)
    with np.errstate(over="ignore"):
        sqdist = np.concatenate([d for _, d in rows] + [np.zeros(0)]).astype(np.float32)
    return offsets, indices, sqdist


def check_knn(result, expected):
    indices, sqdist = result
    ref_i, ref_d = expected
    assert indices.dtype == np.int32 and sqdist.dtype == np.float32
    assert indices.shape == ref_i.shape and sqdist.shape == ref_d.shape
    np.testing.assert_array_equal(indices, ref_i)
    np.testing.assert_array_equal(sqdist, ref_d)


def check_radius(result, expected, device=None):
    """Radius rows equal the reference exactly: offsets, indices in (float64 distance, index)
    order, and distances, on every backend."""
    del device  # every backend is held to the same contract
    offsets, indices, sqdist = result
    assert offsets.dtype == np.int64 and indices.dtype == np.int32 and sqdist.dtype == np.float32
    assert offsets.ndim == indices.ndim == sqdist.ndim == 1
    for got, ref in zip(result, expected):
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def check_hybrid(result, points, queries, r, max_nn, exclude_self=False):
    indices, sqdist, counts = result
    check_knn((indices, sqdist), reference_knn(points, queries, max_nn, exclude_self, r))
    assert counts.dtype == np.int32 and counts.shape == (indices.shape[0],)
    np.testing.assert_array_equal(counts, (indices >= 0).sum(axis=1))


def test_reference_rejects_wrong_answers():
    # The comparison is strict: a tie broken the other way, or a distance one float32 ulp off,
    # fails it.
    pts = lattice(3, 1.0)
    idx, dist = pcnn.knn(pts, 7)
    expected = reference_knn(pts, pts, 7)
    check_knn((idx, dist), expected)
    assert dist[13, 1] == dist[13, 2]  # the lattice's center: six neighbors at distance 1
    swapped = idx.copy()
    swapped[13, [1, 2]] = swapped[13, [2, 1]]
    with pytest.raises(AssertionError):
        check_knn((swapped, dist), expected)
    nudged = dist.copy()
    nudged[13, 1] = np.nextafter(nudged[13, 1], np.float32(np.inf))
    with pytest.raises(AssertionError):
        check_knn((idx, nudged), expected)


# ---- clouds ----

def random_cloud(n, seed, scale=10.0):
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * scale).astype(np.float32)


def lattice(m, step):
    """An m^3 integer lattice scaled by step: many exact ties; plus exact duplicates."""
    g = np.arange(m)
    pts = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3) * step
    pts = pts.astype(np.float32)
    return np.concatenate([pts, pts[::7]])


def with_nan_rows(pts, seed):
    pts = pts.copy()
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(pts), size=max(1, len(pts) // 10), replace=False)
    pts[rows[::2], 0] = np.nan
    pts[rows[1::2], 2] = np.inf
    return pts


# ---- kNN ----

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed,n,k", [(0, 1, 1), (1, 7, 3), (2, 500, 8), (3, 300, 32),
                                      (4, 200, 128)])
def test_knn_self_random(device, seed, n, k):
    pts = random_cloud(n, seed)
    check_knn(pcnn.knn(pts, k, device=device), reference_knn(pts, pts, k))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [10, 11])
def test_knn_queries(device, seed):
    pts = random_cloud(400, seed)
    queries = random_cloud(150, seed + 100, scale=12.0) - 1.0
    queries[5] = np.nan
    check_knn(pcnn.knn(pts, 10, queries=queries, device=device),
              reference_knn(pts, queries, 10))


@pytest.mark.parametrize("device", DEVICES)
def test_knn_exclude_self(device):
    pts = np.concatenate([random_cloud(200, 20), random_cloud(20, 20)])  # exact duplicates
    check_knn(pcnn.knn(pts, 6, exclude_self=True, device=device),
              reference_knn(pts, pts, 6, exclude_self=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step", [0.1, 1.0])
def test_knn_ties_lattice(device, step):
    pts = lattice(6, step)
    for k in (1, 7, 27, 33):
        check_knn(pcnn.knn(pts, k, device=device), reference_knn(pts, pts, k))
        check_knn(pcnn.knn(pts, k, exclude_self=True, device=device),
                  reference_knn(pts, pts, k, exclude_self=True))
    queries = (lattice(4, step)[:64] + np.float32(step / 2)).astype(np.float32)
    check_knn(pcnn.knn(pts, 9, queries=queries, device=device), reference_knn(pts, queries, 9))


@pytest.mark.parametrize("device", DEVICES)
def test_knn_nan_rows(device):
    pts = with_nan_rows(random_cloud(300, 30), 31)
    idx, dist = pcnn.knn(pts, 5, device=device)
    check_knn((idx, dist), reference_knn(pts, pts, 5))
    bad = ~np.isfinite(pts).all(axis=1)
    assert (idx[bad] == -1).all() and np.isinf(dist[bad]).all()
    assert not np.isin(idx, np.nonzero(bad)[0]).any()


@pytest.mark.parametrize("device", DEVICES)
def test_knn_k_greater_than_n(device):
    pts = random_cloud(5, 40)
    idx, dist = pcnn.knn(pts, 8, device=device)
    check_knn((idx, dist), reference_knn(pts, pts, 8))
    assert (idx[:, 5:] == -1).all() and np.isinf(dist[:, 5:]).all()
    check_knn(pcnn.knn(pts, 8, exclude_self=True, device=device),
              reference_knn(pts, pts, 8, exclude_self=True))


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    empty = np.zeros((0, 3), np.float32)
    pts = random_cloud(10, 50)
    idx, dist = pcnn.knn(empty, 4, device=device)
    assert idx.shape == (0, 4) and dist.shape == (0, 4)
    check_knn(pcnn.knn(empty, 4, queries=pts, device=device), reference_knn(empty, pts, 4))
    check_knn(pcnn.knn(pts, 4, queries=empty, device=device), reference_knn(pts, empty, 4))
    offsets, indices, sqdist = pcnn.radius(empty, 1.0, device=device)
    assert offsets.tolist() == [0] and indices.size == 0 and sqdist.size == 0
    check_radius(pcnn.radius(empty, 1.0, queries=pts, device=device),
                 reference_radius(empty, pts, 1.0), device)
    idx, dist, counts = pcnn.hybrid(empty, 1.0, 3, device=device)
    assert idx.shape == (0, 3) and counts.shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_large_coordinates(device):
    # Far from the origin (as unprojected survey data): exact for the float32 values given.
    pts = (random_cloud(300, 60, scale=50.0).astype(np.float64) + 1e6).astype(np.float32)
    check_knn(pcnn.knn(pts, 8, device=device), reference_knn(pts, pts, 8))
    check_radius(pcnn.radius(pts, 5.0, device=device), reference_radius(pts, pts, 5.0),
                 device)


# ---- radius ----

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed,n,r", [(70, 1, 1.0), (71, 400, 1.5), (72, 300, 0.0),
                                      (73, 200, 4.0)])
def test_radius_self_random(device, seed, n, r):
    pts = random_cloud(n, seed)
    check_radius(pcnn.radius(pts, r, device=device), reference_radius(pts, pts, r), device)


@pytest.mark.parametrize("device", DEVICES)
def test_radius_queries_and_exclude_self(device):
    pts = with_nan_rows(random_cloud(300, 80), 81)
    queries = random_cloud(100, 82)
    queries[3] = np.nan
    check_radius(pcnn.radius(pts, 2.0, queries=queries, device=device),
                 reference_radius(pts, queries, 2.0), device)
    check_radius(pcnn.radius(pts, 2.0, exclude_self=True, device=device),
                 reference_radius(pts, pts, 2.0, exclude_self=True), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step,r", [(1.0, 1.0), (1.0, 2.0 ** 0.5), (0.1, 0.1), (0.1, 0.2)])
def test_radius_lattice_boundary(device, step, r):
    # Neighbors exactly at distance r (and float32 lattices whose distances straddle it): the
    # boundary is inclusive and decided in float64.
    pts = lattice(5, step)
    check_radius(pcnn.radius(pts, 0.0, exclude_self=True, device=device),
                 reference_radius(pts, pts, 0.0, exclude_self=True), device)
    check_radius(pcnn.radius(pts, r, device=device), reference_radius(pts, pts, r), device)


# ---- hybrid ----

@pytest.mark.parametrize("device", DEVICES)
def test_hybrid(device):
    pts = with_nan_rows(random_cloud(400, 90), 91)
    queries = random_cloud(120, 92)
    check_hybrid(pcnn.hybrid(pts, 1.5, 6, device=device), pts, pts, 1.5, 6)
    check_hybrid(pcnn.hybrid(pts, 1.5, 6, exclude_self=True, device=device), pts, pts, 1.5, 6,
                 exclude_self=True)
    check_hybrid(pcnn.hybrid(pts, 2.5, 16, queries=queries, device=device), pts, queries, 2.5,
                 16)
    lat = lattice(5, 1.0)
    check_hybrid(pcnn.hybrid(lat, 1.0, 4, device=device), lat, lat, 1.0, 4)


# ---- the Index class ----

@pytest.mark.parametrize("device", DEVICES)
def test_index_reused(device):
    pts = with_nan_rows(random_cloud(500, 100), 101)
    index = pcnn.Index(pts, device=device, threads=2)
    assert index.backend == device and index.size == len(pts) == len(index)
    assert index.finite_size == int(np.isfinite(pts).all(axis=1).sum())
    assert device in repr(index)
    for seed in range(3):
        queries = random_cloud(50 + seed * 40, 110 + seed)
        check_knn(index.knn(queries, 4 + seed), reference_knn(pts, queries, 4 + seed))
        check_radius(index.radius(queries, 1.0 + seed), reference_radius(pts, queries, 1.0 + seed),
                     device)
        check_hybrid(index.hybrid(queries, 1.5, 5), pts, queries, 1.5, 5)
    check_knn(index.self_knn(7), reference_knn(pts, pts, 7))
    check_knn(index.self_knn(7, exclude_self=True), reference_knn(pts, pts, 7, exclude_self=True))
    check_radius(index.self_radius(1.2), reference_radius(pts, pts, 1.2), device)
    check_radius(index.self_radius(1.2, exclude_self=True),
                 reference_radius(pts, pts, 1.2, exclude_self=True), device)
    check_hybrid(index.self_hybrid(1.2, 3, exclude_self=True), pts, pts, 1.2, 3,
                 exclude_self=True)
    t = index.last_timings
    assert t["backend"] == device
    for key in ("total_ms", "build_ms", "search_ms", "upload_ms", "download_ms", "passes",
                "distance_evaluations", "upload_bytes", "download_bytes", "staging"):
        assert key in t
    assert t["total_ms"] >= 0


@pytest.mark.parametrize("device", DEVICES)
def test_index_keeps_its_own_copy_and_rebuilds(device):
    pts = random_cloud(200, 120)
    queries = random_cloud(30, 121)
    expected = reference_knn(pts, queries, 5)
    index = pcnn.Index(pts.copy(), device=device)
    gc.collect()  # the array it was built from is gone
    check_knn(index.knn(queries, 5), expected)
    other = random_cloud(80, 122)
    index.build(other)
    assert index.size == 80
    check_knn(index.knn(queries, 5), reference_knn(other, queries, 5))


def test_index_auto_backend():
    index = pcnn.Index(random_cloud(10, 130))
    assert index.backend == ("cuda" if GPU else "cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_index_shared_between_threads(device):
    pts = random_cloud(2000, 140)
    index = pcnn.Index(pts, device=device)
    queries = [random_cloud(300, 141 + i) for i in range(8)]
    expected = [reference_knn(pts, q, 6) for q in queries]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda q: index.knn(q, 6), queries))
    for got, ref in zip(results, expected):
        check_knn(got, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_index_searched_while_another_thread_rebuilds_it(device):
    a, b = random_cloud(3000, 142), random_cloud(5000, 143)
    index = pcnn.Index(a, device=device)
    want = {3000: reference_knn(a, a, 4), 5000: reference_knn(b, b, 4)}
    stop = threading.Event()

    def rebuild():
        i = 0
        while not stop.is_set():
            index.build(b if i % 2 else a)
            i += 1

    t = threading.Thread(target=rebuild)
    t.start()
    try:
        for _ in range(150):
            got = index.self_knn(4)  # one index or the other, whole: never a size mismatch
            check_knn(got, want[len(got[0])])
            n, c = index.normals(k=4)
            assert len(n) in want and len(c) == len(n)
            idx, d2, counts = index.self_hybrid(1.0, 4)
            assert len(idx) in want and len(d2) == len(idx) == len(counts)
    finally:
        stop.set()
        t.join()


def test_points_written_during_a_build_are_refused_not_a_crash():
    pts = random_cloud(100_000, 144).astype(np.float64)
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            pts[::1000, 0] = np.nan
            pts[::1000, 0] = 0.5

    # Made before the writer starts: its rows are among those written (row 0), so a build of
    # them during the writes may be refused too (the test failed so, now and then).
    index = pcnn.Index(pts[:10], device="cpu")
    t = threading.Thread(target=flip)
    t.start()
    refused = 0
    try:
        for _ in range(300):
            try:
                index.build(pts)
            except ValueError as e:
                assert "changed while the index was built" in str(e)
                refused += 1
    finally:
        stop.set()
        t.join()
    # The CPU build reads the points twice: it either saw them the same both times or refused.
    # Once nothing writes them, the same index builds and searches them exactly.
    index.build(pts)
    assert index.size == len(pts)
    q = pts[:5]
    check_knn(index.knn(q, 3), reference_knn(pts, q, 3))


def test_index_made_without_init_is_refused_not_a_crash():
    # pybind11 2.10 lets __new__ make a wrapper whose C++ index was never constructed; every
    # method and property used to read its raw storage (a segfault or an abort).
    index = pcnn.Index.__new__(pcnn.Index)
    q = random_cloud(3, 1)
    calls = [
        lambda: len(index),
        lambda: repr(index),
        lambda: index.backend,
        lambda: index.size,
        lambda: index.finite_size,
        lambda: index.last_timings,
        lambda: index.build(q),
        lambda: index.knn(q, 1),
        lambda: index.self_knn(1),
        lambda: index.radius(q, 1.0),
        lambda: index.self_radius(1.0),
        lambda: index.hybrid(q, 1.0, 2),
        lambda: index.self_hybrid(1.0, 2),
        lambda: index.normals(k=3),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="without __init__"):
            call()
    del index
    gc.collect()
    # A constructed index is unaffected.
    assert len(pcnn.Index(q, device="cpu")) == 3


@pytest.mark.parametrize("device", DEVICES)
def test_results_own_their_memory(device):
    pts = random_cloud(100, 150)
    index = pcnn.Index(pts, device=device)
    idx, dist = index.self_knn(4)
    offsets, indices, sqdist = index.self_radius(2.0)
    del index
    gc.collect()
    check_knn((idx, dist), reference_knn(pts, pts, 4))
    check_radius((offsets, indices, sqdist), reference_radius(pts, pts, 2.0), device)
    for a in (idx, dist, offsets, indices, sqdist):
        assert a.flags.c_contiguous and a.flags.writeable
    assert idx.flags.owndata and dist.flags.owndata
    idx[0, 0] = 12345  # writable, and no one else's memory
    assert idx[0, 0] == 12345


# ---- inputs: views, conversions, shapes ----

def test_zero_copy_layouts():
    pts = random_cloud(300, 160)
    expected = reference_knn(pts, pts, 6)

    assert pcnn._view_info(pts) == {"copied": False, "stride": 3, "dtype": "float32"}

    wide = np.zeros((300, 8), np.float32)
    wide[:, :3] = pts
    assert pcnn._view_info(wide[:, :3]) == {"copied": False, "stride": 8, "dtype": "float32"}
    check_knn(pcnn.knn(wide[:, :3], 6), expected)

    huge = np.zeros((300, 20_000), np.float32)  # rows 80 kB apart
    huge[:, :3] = pts
    assert pcnn._view_info(huge[:, :3]) == {"copied": False, "stride": 20_000,
                                             "dtype": "float32"}
    check_knn(pcnn.knn(huge[:, :3], 6), expected)

    read_only = pts.copy()
    read_only.setflags(write=False)
    assert not pcnn._view_info(read_only)["copied"]
    check_knn(pcnn.knn(read_only, 6), expected)

    fortran = np.asfortranarray(pts)
    assert pcnn._view_info(fortran)["copied"]
    check_knn(pcnn.knn(fortran, 6), expected)

    every_other = np.repeat(pts, 2, axis=0)[::2]
    assert pcnn._view_info(every_other) == {"copied": False, "stride": 6, "dtype": "float32"}
    check_knn(pcnn.knn(every_other, 6), expected)

    reversed_rows = pts[::-1]
    assert pcnn._view_info(reversed_rows)["copied"]
    check_knn(pcnn.knn(reversed_rows, 6), reference_knn(pts[::-1], pts[::-1], 6))

    big_endian = pts.astype(">f4")
    assert pcnn._view_info(big_endian)["copied"]
    check_knn(pcnn.knn(big_endian, 6), expected)

    check_knn(pcnn.knn(pts.tolist(), 6), expected)  # any array-like (float64 values here)


# ---- float64 coordinates ----

def utm_cloud(n, seed):
    """Georeferenced float64 points: clusters 0.1 mm across, spread over 100 m near
    (2.5e6, 5.4e6, 1e3). float32 has a 0.25-0.5 m grid there, so rounding changes the answers."""
    rng = np.random.default_rng(seed)
    centers = np.array([2.5e6, 5.4e6, 1e3]) + rng.uniform(-50, 50, (n // 20 + 1, 3)) * [1, 1, 0.2]
    return np.repeat(centers, 20, axis=0)[:n] + rng.uniform(-1e-4, 1e-4, (n, 3))


def rows_differing(a, b):
    return int((a[0] != b[0]).any(axis=1).sum())


@pytest.mark.parametrize("device", DEVICES)
def test_float64_is_searched_as_given(device):
    pts = utm_cloud(600, 170)
    assert pcnn._view_info(pts) == {"copied": False, "stride": 3, "dtype": "float64"}
    expected = reference_knn(pts, pts, 8)
    rounded = pts.astype(np.float32)
    assert rows_differing(expected, reference_knn(rounded, rounded, 8)) > 0  # the test can fail
    check_knn(pcnn.knn(pts, 8, device=device), expected)
    check_knn(pcnn.knn(pts, 8, exclude_self=True, device=device),
              reference_knn(pts, pts, 8, exclude_self=True))
    check_radius(pcnn.radius(pts, 1e-4, device=device), reference_radius(pts, pts, 1e-4), device)
    check_hybrid(pcnn.hybrid(pts, 1e-4, 6, device=device), pts, pts, 1e-4, 6)
    # Column slices and row steps of float64 arrays are read in place too.
    wide = np.zeros((600, 4))
    wide[:, :3] = pts
    assert pcnn._view_info(wide[:, :3]) == {"copied": False, "stride": 4, "dtype": "float64"}
    check_knn(pcnn.knn(wide[:, :3], 8, device=device), expected)
    # Other layouts are copied as float64, not rounded to float32.
    for other in (np.asfortranarray(pts), pts.astype(">f8")):
        assert pcnn._view_info(other) == {"copied": True, "stride": 3, "dtype": "float64"}
        check_knn(pcnn.knn(other, 8, device=device), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_and_float64_mixed(device):
    pts64 = utm_cloud(500, 171)
    pts32 = pts64.astype(np.float32)
    q64 = utm_cloud(200, 172)
    q32 = q64.astype(np.float32)
    for pts, queries in ((pts32, q64), (pts64, q32), (pts64, q64)):
        expected = reference_knn(pts, queries, 6)
        check_knn(pcnn.knn(pts, 6, queries=queries, device=device), expected)
        check_radius(pcnn.radius(pts, 0.3, queries=queries, device=device),
                     reference_radius(pts, queries, 0.3), device)
    # The same queries in the other type give other rows: the types are read as given.
    assert rows_differing(reference_knn(pts64, q64, 6), reference_knn(pts64, q32, 6)) > 0
    index = pcnn.Index(pts32, device=device)
    check_knn(index.knn(q64, 6), reference_knn(pts32, q64, 6))
    index.build(pts64)  # a float64 rebuild
    check_knn(index.knn(q32, 6), reference_knn(pts64, q32, 6))
    check_knn(index.self_knn(6, exclude_self=True), reference_knn(pts64, pts64, 6, True))


@pytest.mark.parametrize("device", DEVICES)
def test_float64_beyond_float32_range_and_non_finite(device):
    rng = np.random.default_rng(173)
    for scale in (1e150, 1e-150):
        pts = rng.random((300, 3)) * scale
        pts[::17, 1] = np.nan
        pts[5::23, 2] = -np.inf
        index = pcnn.Index(pts, device=device)
        assert index.finite_size == int(np.isfinite(pts).all(axis=1).sum())
        check_knn(index.self_knn(5, exclude_self=True), reference_knn(pts, pts, 5, True))
        check_radius(index.self_radius(0.1 * scale), reference_radius(pts, pts, 0.1 * scale),
                     device)


@pytest.mark.parametrize("device", DEVICES)
def test_other_dtypes_are_converted_exactly(device):
    rng = np.random.default_rng(174)
    # Integers past 2^24 with unit spacing: float32 would round them to even numbers.
    ints = rng.integers(0, 40, size=(300, 3)) + (1 << 25) + 1
    assert pcnn._view_info(ints) == {"copied": True, "stride": 3, "dtype": "float64"}
    check_knn(pcnn.knn(ints, 5, device=device), reference_knn(ints, ints, 5))
    small = rng.integers(-50, 50, size=(100, 3)).astype(np.int16)
    assert pcnn._view_info(small) == {"copied": True, "stride": 3, "dtype": "float32"}
    check_knn(pcnn.knn(small, 5, device=device), reference_knn(small, small, 5))
    half = rng.random((100, 3)).astype(np.float16)
    assert pcnn._view_info(half)["dtype"] == "float32"
    check_knn(pcnn.knn(half, 5, device=device), reference_knn(half, half, 5))


def test_values_float64_cannot_hold_are_refused():
    exact = np.array([[2**60, 0, 0], [2**60 + 2**8, 0, 0], [0, 0, 0]], np.int64)
    check_knn(pcnn.knn(exact, 2), reference_knn(exact, exact, 2))  # multiples of 2^8: exact
    for dtype in (np.int64, np.uint64):
        wide = np.array([[2**53 + 1, 0, 0], [2**53, 0, 0], [0, 0, 0]], dtype)
        with pytest.raises(ValueError, match="row 0 .*float64 cannot hold"):
            pcnn.knn(wide, 1)
        with pytest.raises(ValueError, match="queries: row 0"):
            pcnn.knn(exact, 1, queries=wide)
    with pytest.raises(ValueError, match="row 2"):
        pcnn.Index(np.array([[0, 0, 0], [1, 1, 1], [0, 0, np.iinfo(np.int64).max]], np.int64))
    if np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant:
        fine = np.array([[1, 0, 0], [0, 0, 0]], np.longdouble)
        check_knn(pcnn.knn(fine, 1), reference_knn(fine.astype(np.float64),
                                                   fine.astype(np.float64), 1))
        eps = np.longdouble(2) ** -60
        with pytest.raises(ValueError, match="float64 cannot hold"):
            pcnn.knn(np.array([[1 + eps, 0, 0], [0, 0, 0]], np.longdouble), 1)


@pytest.mark.parametrize("shape", [(10, 2), (10, 4), (3,), (10, 3, 1), (1, 10, 3), ()])
def test_wrong_shape_raises_value_error(shape):
    bad = np.zeros(shape, np.float32)
    good = random_cloud(10, 180)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        pcnn.knn(bad, 2)
    with pytest.raises(ValueError, match="queries"):
        pcnn.knn(good, 2, queries=bad)
    with pytest.raises(ValueError):
        pcnn.radius(bad, 1.0)
    with pytest.raises(ValueError):
        pcnn.Index(bad)
    index = pcnn.Index(good)
    with pytest.raises(ValueError):
        index.knn(bad, 2)
    with pytest.raises(ValueError):
        index.radius(bad, 1.0)
    with pytest.raises(ValueError):
        pcnn.stats(bad)


def test_non_numeric_raises_type_error():
    with pytest.raises(TypeError):
        pcnn.knn(np.array([["a", "b", "c"]]), 1)
    with pytest.raises(TypeError):
        pcnn.knn(np.zeros((4, 3), np.complex64), 1)


# ---- invalid arguments ----

@pytest.mark.parametrize("device", DEVICES)
def test_invalid_arguments_raise_value_error(device):
    pts = random_cloud(20, 190)
    index = pcnn.Index(pts, device=device)
    for k in (0, -1, 129):
        with pytest.raises(ValueError, match="k must be"):
            pcnn.knn(pts, k, device=device)
        with pytest.raises(ValueError, match="k must be"):
            index.knn(pts, k)
        with pytest.raises(ValueError, match="k must be"):
            index.self_knn(k)
        with pytest.raises(ValueError, match="max_nn"):
            pcnn.hybrid(pts, 1.0, k, device=device)
    for r in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="radius"):
            pcnn.radius(pts, r, device=device)
        with pytest.raises(ValueError, match="radius"):
            index.self_radius(r)
        with pytest.raises(ValueError, match="radius"):
            pcnn.hybrid(pts, r, 4, device=device)
    with pytest.raises(ValueError, match="exclude_self"):
        pcnn.knn(pts, 2, queries=pts, exclude_self=True, device=device)
    with pytest.raises(ValueError, match="exclude_self"):
        pcnn.radius(pts, 1.0, queries=pts, exclude_self=True, device=device)
    with pytest.raises(ValueError):
        pcnn.knn(pts, 2, device="tpu")
    with pytest.raises(ValueError):
        pcnn.Index(pts, threads=-1)
    # The index is still usable after rejected calls.
    check_knn(index.self_knn(3), reference_knn(pts, pts, 3))


def test_argument_types():
    pts = random_cloud(20, 191)
    index = pcnn.Index(pts)
    for call in (lambda k: pcnn.knn(pts, k), lambda k: index.self_knn(k),
                 lambda k: index.knn(pts, k), lambda k: pcnn.hybrid(pts, 1.0, k),
                 lambda k: index.self_hybrid(1.0, k), lambda k: pcnn.normals(pts, k=k)):
        for k in (2**31, -2**31 - 1, 2**70):
            with pytest.raises(ValueError, match="out of range"):
                call(k)
        for k in (3.5, "3"):
            with pytest.raises(TypeError):
                call(k)
        assert call(np.int64(4)) is not None  # NumPy integers are integers
    with pytest.raises(ValueError, match="got -1e-300"):
        pcnn.radius(pts, -1e-300)
    with pytest.raises(ValueError, match="k must be between 3 and 128, got 0"):
        pcnn.normals(pts, k=0, radius=1.0)
    with pytest.raises(ValueError, match="radius must be a finite number > 0, got 0"):
        pcnn.normals(pts, radius=0)
    with pytest.raises(TypeError):
        pcnn.normals(pts, radius="a")
    for vp in (np.zeros((1, 3)), (0, 0)):
        with pytest.raises(ValueError, match="viewpoint must be 3 numbers"):
            pcnn.normals(pts, k=4, viewpoint=vp)
    for vp in ("abc", None, ("1", "2", "3")):
        with pytest.raises(TypeError):
            pcnn.normals(pts, k=4, viewpoint=vp)
    with pytest.raises(OverflowError):
        pcnn.normals(pts, k=4, viewpoint=(0, 0, 10**400))
    # Views of any stride read their own elements: the same normals as the plain tuple.
    base = np.array([5.0, -3, 9, 7, 0, 11, 1, 100, 2])
    want = pcnn.normals(pts, k=4, viewpoint=(-3.0, 0.0, 100.0))
    for vp in (base[1::3], np.array([100.0, 0, -3])[::-1], [np.float32(-3), 0, np.int64(100)]):
        got = pcnn.normals(pts, k=4, viewpoint=vp)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.skipif(GPU, reason="a CUDA device is present")
def test_cuda_without_device_raises_runtime_error():
    pts = random_cloud(20, 200)
    with pytest.raises(RuntimeError, match="CUDA"):
        pcnn.knn(pts, 2, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA"):
        pcnn.Index(pts, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA"):
        pcnn.stats(pts, device="cuda")
    assert pcnn.device_info()["available"] is False
    assert pcnn.device_info()["reason"]


# ---- statistics ----

@pytest.mark.parametrize("device", DEVICES)
def test_stats(device):
    pts = with_nan_rows((random_cloud(1000, 210) + 100.0).astype(np.float32), 211)
    s = pcnn.stats(pts, device=device)
    finite = pts[np.isfinite(pts).all(axis=1)].astype(np.float64)
    assert s["count"] == len(pts) and s["finite"] == len(finite)
    assert s["backend"] == device
    np.testing.assert_array_equal(s["min"], finite.min(axis=0))
    np.testing.assert_array_equal(s["max"], finite.max(axis=0))
    np.testing.assert_allclose(s["centroid"], finite.mean(axis=0), rtol=1e-12)
    cov = np.cov(finite.T, bias=True)
    assert s["covariance"].shape == (3, 3)
    np.testing.assert_allclose(s["covariance"], cov, rtol=1e-9, atol=1e-9)

    empty = pcnn.stats(np.zeros((0, 3), np.float32), device=device)
    assert empty["count"] == 0 and empty["finite"] == 0
    assert np.isnan(empty["centroid"]).all() and np.isnan(empty["covariance"]).all()


def test_stats_auto():
    s = pcnn.stats(random_cloud(50, 220))
    assert s["backend"] == ("cuda" if GPU else "cpu")


def test_stats_float64():
    # Described as given (on the CPU: the GPU reduction takes float32 only).
    pts = with_nan_rows(utm_cloud(500, 221), 222)
    s = pcnn.stats(pts)
    finite = pts[np.isfinite(pts).all(axis=1)]
    assert s["backend"] == "cpu" and s["finite"] == len(finite)
    np.testing.assert_array_equal(s["min"], finite.min(axis=0))
    np.testing.assert_array_equal(s["max"], finite.max(axis=0))
    np.testing.assert_allclose(s["centroid"], finite.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(s["covariance"], np.cov(finite.T, bias=True), rtol=1e-9)


# ---- loading ----

needs_io = pytest.mark.skipif(not hasattr(pcnn, "load"), reason="built without the io library")


@needs_io
def test_load(tmp_path):
    stored = np.array([[500000.25, 4100000.5, 12.0],
                       [500001.75, 4100002.0, 13.5],
                       [np.nan, np.nan, np.nan],
                       [500000.5, 4100001.25, 12.25]])
    path = tmp_path / "cloud.pcd"
    lines = ["# .PCD v0.7", "VERSION 0.7", "FIELDS x y z", "SIZE 8 8 8", "TYPE F F F",
             "COUNT 1 1 1", f"WIDTH {len(stored)}", "HEIGHT 1", "VIEWPOINT 0 0 0 1 0 0 0",
             f"POINTS {len(stored)}", "DATA ascii"]
    lines += [" ".join("nan" if np.isnan(v) else repr(float(v)) for v in row) for row in stored]
    path.write_text("\n".join(lines) + "\n")

    xyz, info = pcnn.load(str(path))
    assert xyz.dtype == np.float64 and xyz.shape == (4, 3)
    assert np.isnan(xyz[2]).all()
    good = [0, 1, 3]
    np.testing.assert_array_equal(xyz[good], stored[good])
    assert info["exact"] and info["finite"] == 3 and info["coordinate_type"] == "float64"
    assert info["field_names"][:3] == ["x", "y", "z"]
    assert info["local"].dtype == np.float32 and info["local"].shape == (4, 3)
    np.testing.assert_array_equal(xyz[good], info["local"][good].astype(np.float64) +
                                  info["origin"])
    # The re-centered coordinates are what to search.
    local = info["local"]
    check_knn(pcnn.knn(local, 2), reference_knn(local, local, 2))


def write_ascii_pcd(path, stored):
    lines = ["# .PCD v0.7", "VERSION 0.7", "FIELDS x y z", "SIZE 8 8 8", "TYPE F F F",
             "COUNT 1 1 1", f"WIDTH {len(stored)}", "HEIGHT 1", "VIEWPOINT 0 0 0 1 0 0 0",
             f"POINTS {len(stored)}", "DATA ascii"]
    lines += [" ".join(repr(float(v)) for v in row) for row in stored]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


@needs_io
def test_load_keeps_doubles_that_no_float_offset_holds(tmp_path):
    # Georeferenced points ~100 m apart with 0.1 mm detail: no float32 offset from one origin
    # holds them, so `local` is rounded, and xyz must still be the stored values, bit for bit.
    rng = np.random.default_rng(7)
    stored = np.round(np.array([2.5e6, 5.4e6, 1e3]) + rng.random((200, 3)) * 100, 4)
    path = tmp_path / "utm.pcd"
    write_ascii_pcd(path, stored)
    xyz, info = pcnn.load(path)
    assert not info["exact"]
    np.testing.assert_array_equal(xyz, stored)
    check_knn(pcnn.knn(xyz, 3), reference_knn(stored, stored, 3))


@needs_io
def test_load_takes_every_kind_of_path(tmp_path):
    stored = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    plain = tmp_path / "plain.pcd"
    write_ascii_pcd(plain, stored)
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9.pcd")  # not UTF-8
    write_ascii_pcd(odd, stored)
    for path in (plain, str(plain), os.fsencode(plain), odd, os.fsdecode(odd)):
        xyz, info = pcnn.load(path)
        np.testing.assert_array_equal(xyz, stored)
        assert os.fsencode(info["path"]) == os.fsencode(path)
    with pytest.raises(ValueError, match="null"):
        pcnn.load(str(plain) + "\0/etc/passwd.pcd")
    # A failing file with such a name is still named in the message.
    with pytest.raises(OSError, match=r"missing\\xe9"):
        pcnn.load(os.path.join(os.fsencode(tmp_path), b"missing\xe9.pcd"))


@needs_io
def test_load_missing_file_raises_os_error(tmp_path):
    with pytest.raises(OSError):
        pcnn.load(str(tmp_path / "missing.pcd"))


# ---- the module itself ----

def test_docstrings():
    for f in (pcnn.knn, pcnn.radius, pcnn.hybrid, pcnn.stats, pcnn.cuda_available,
              pcnn.device_info, pcnn.Index, pcnn.Index.knn, pcnn.Index.self_knn,
              pcnn.Index.radius, pcnn.Index.self_radius, pcnn.Index.hybrid,
              pcnn.Index.self_hybrid, pcnn.Index.build):
        assert f.__doc__ and len(f.__doc__) > 20, f
    assert "exact" in pcnn.__doc__
    assert isinstance(pcnn.cuda_available(), bool)
