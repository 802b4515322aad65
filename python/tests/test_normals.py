"""pcnn.normals against a NumPy reference: brute-force neighborhoods (sorted by (distance,
index), the point itself included), the covariance about their mean in float64, numpy.linalg.eigh,
oriented towards the viewpoint. Runs on the CPU backend and, where a GPU is usable, on CUDA too
(which must give the same bits as the CPU).
"""

import numpy as np
import pytest

import pcnn

GPU = pcnn.cuda_available()
DEVICES = ["cpu", "cuda"] if GPU else ["cpu"]


def neighborhoods(p, k=None, radius=None, max_nn=None):
    """Index lists per point, by the library's rule (exact float64 distances, ties to the
    smaller index); empty for non-finite points."""
    q = p.astype(np.float64)
    finite = np.isfinite(q).all(axis=1)
    with np.errstate(invalid="ignore"):
        d = ((q[:, None, 0] - q[None, :, 0]) ** 2 + (q[:, None, 1] - q[None, :, 1]) ** 2) + (
            q[:, None, 2] - q[None, :, 2]) ** 2
    lists = []
    for i in range(len(q)):
        if not finite[i]:
            lists.append(np.empty(0, np.int64))
            continue
        cand = np.nonzero(finite)[0]
        if radius is not None:
            cand = cand[d[i, cand] <= radius * radius]
        order = cand[np.lexsort((cand, d[i, cand]))]
        lists.append(order[: (k or max_nn or len(order))])
    return lists


def reference_normals(p, lists, viewpoint):
    n = np.full((len(p), 3), np.nan)
    c = np.full(len(p), np.nan)
    gap = np.zeros(len(p))
    for i, ids in enumerate(lists):
        if len(ids) < 3:
            continue
        x = p[ids].astype(np.float64)
        cov = np.cov(x.T, bias=True)
        w, v = np.linalg.eigh(cov)
        normal = v[:, 0]
        if normal @ (np.asarray(viewpoint, np.float64) - p[i].astype(np.float64)) < 0:
            normal = -normal
        n[i] = normal
        c[i] = abs(w[0]) / np.trace(cov)
        gap[i] = (w[1] - w[0]) / w[2]
    return n, c, gap


def cloud(n, seed, bad=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-5, 5, (6, 3))
    p = (centers[rng.integers(0, 6, n)] + rng.normal(0, 0.6, (n, 3))).astype(np.float32)
    p[rng.random(n) < bad, 1] = np.nan
    return p


CASES = [
    dict(k=3),
    dict(k=10, viewpoint=(0.5, -3.0, 20.0)),
    dict(radius=0.5),
    dict(radius=0.8, max_nn=12, viewpoint=(-10, 0, 0)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{a}={b}" for a, b in c.items()))
def test_normals_match_the_reference(device, case):
    p = cloud(600, 3, bad=0.03)
    viewpoint = case.get("viewpoint", (0, 0, 0))
    nb = {key: case[key] for key in ("k", "radius", "max_nn") if key in case}
    normals, curvature = pcnn.normals(p, device=device, **case)
    assert normals.shape == (600, 3) and normals.dtype == np.float32
    assert curvature.shape == (600,) and curvature.dtype == np.float32
    ref_n, ref_c, gap = reference_normals(p, neighborhoods(p, **nb), viewpoint)
    assert np.array_equal(np.isnan(normals[:, 0]), np.isnan(ref_n[:, 0]))
    assert np.array_equal(np.isnan(curvature), np.isnan(ref_c))
    ok = ~np.isnan(ref_n[:, 0])
    assert ok.sum() > 300
    np.testing.assert_allclose(curvature[ok], ref_c[ok], rtol=1e-5, atol=1e-9)
    sharp = ok & (gap > 1e-6)  # normals that are well defined
    got = normals[sharp].astype(np.float64)
    sin = np.linalg.norm(np.cross(got, ref_n[sharp]), axis=1)  # float32 output: ~1e-7
    assert (sin < 1e-6).all(), sin.max()
    assert (np.einsum("ij,ij->i", got, ref_n[sharp]) > 0).all()  # the same side


def test_plane_and_orientation():
    rng = np.random.default_rng(1)
    xy = rng.uniform(-1, 1, (500, 2))
    p = np.column_stack([xy, np.full(500, 3.0)]).astype(np.float32)
    down, c = pcnn.normals(p, k=8, device="cpu")  # the origin is below the plane
    assert (down[:, 2] == -1).all() and (c == 0).all()
    up, _ = pcnn.normals(p, k=8, viewpoint=[0, 0, 10], device="cpu")
    assert (up[:, 2] == 1).all()


def test_degenerate_neighborhoods_give_nan():
    p = np.array([[0, 0, 0], [1, 0, 0], [np.nan, 0, 0]], np.float32)
    n, c = pcnn.normals(p, k=3, device="cpu")
    assert np.isnan(n).all() and np.isnan(c).all()
    same = np.ones((4, 3), np.float32)
    n, c = pcnn.normals(same, k=4, device="cpu")
    assert np.isnan(n).all() and (c == 0).all()
    n, c = pcnn.normals(np.empty((0, 3), np.float32), k=3)
    assert n.shape == (0, 3) and c.shape == (0,)


def test_index_normals_and_float64_input():
    p = cloud(300, 8)
    index = pcnn.Index(p, device="cpu")
    a = index.normals(k=6)
    b = pcnn.normals(p.astype(np.float64), k=6, device="cpu")  # converted to float32 first
    assert np.array_equal(a[0], b[0], equal_nan=True) and np.array_equal(a[1], b[1], equal_nan=True)


@pytest.mark.skipif(not GPU, reason="no usable CUDA device")
def test_cuda_gives_the_cpu_bits():
    p = cloud(20000, 5, bad=0.01)
    for case in CASES:
        g = pcnn.normals(p, device="cuda", **case)
        c = pcnn.normals(p, device="cpu", **case)
        assert g[0].tobytes() == c[0].tobytes() and g[1].tobytes() == c[1].tobytes(), case


@pytest.mark.parametrize("kwargs, message", [
    (dict(), "give a neighborhood"),
    (dict(k=2), "k must be between 3 and 128"),
    (dict(k=8, radius=1.0), "not both"),
    (dict(k=8, max_nn=8), "max_nn goes with a radius"),
    (dict(radius=-1.0), "radius must be a finite number > 0"),
    (dict(radius=1.0, max_nn=200), "max_nn must be 0"),
    (dict(k=8, viewpoint=(0, 0)), "viewpoint must be 3 numbers"),
    (dict(k=8, viewpoint=(0, 0, float("nan"))), "viewpoint must be finite"),
])
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pcnn.normals(np.zeros((10, 3), np.float32), device="cpu", **kwargs)
