// The CPU backend's spatial index and its exact searches.
//
// A balanced k-d tree over the finite points, stored implicitly: node i (1-based) has children
// 2i and 2i+1, every leaf sits at the same depth, and node (level d, position j) covers the
// points [j*n >> d, (j+1)*n >> d) of the tree order. Nothing but the tight bounding box and the
// smallest original index of each node is stored, so the shape costs no memory and subtrees can
// be built by different threads without coordination.
//
// Queries are searched in groups that start from the same leaf (a self-search's leaf, separate
// queries sorted by the leaf they fall in): a group walks the tree once, and each of its queries
// scans the leaves its own bound admits.
//
// The tree stores the coordinates in the type they were given (float or double: Tree<T>), so
// that both are searched exactly as given; queries of either type are read as doubles.
//
// Exactness rests on three facts:
// - every distance is the contract's formula, (dx*dx + dy*dy) + dz*dz in double from the
//   coordinates as given (compile with -ffp-contract=off so that no FMA changes a rounding);
// - a box's lower bound uses the same operations on the box's faces; correctly rounded
//   subtraction, multiplication and addition are monotone, so the bound never exceeds the
//   distance of any point inside the box;
// - results are ordered by the pair (d, index), and a node is skipped only when the best pair it
//   could hold, (bound, smallest index), is not smaller than the current k-th pair. A node whose
//   bound merely equals the k-th distance is still visited when it may hold a smaller index;
//   comparing indices too keeps clouds of identical points from turning quadratic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn::detail::cpu {

/// Most points in a leaf. Leaves hold between half of this and this many points.
inline constexpr int kLeafSize = 16;
static_assert(kLeafSize % 2 == 0 && kLeafSize < 32, "leaf scans use a 32-bit mask, two at a time");
/// Deepest tree: 2^27 leaves of >= 8 points cover every count up to INT32_MAX, plus one level.
inline constexpr int kMaxDepth = 28;
/// A traversal stack holds at most one deferred sibling per level, plus the root.
inline constexpr int kStackSize = kMaxDepth + 2;

/// The contract's squared distance: operation order and rounding are part of the result.
inline double sqdist(double ax, double ay, double az, double bx, double by, double bz) {
  const double dx = ax - bx;
  const double dy = ay - by;
  const double dz = az - bz;
  return (dx * dx + dy * dy) + dz * dz;
}

/// A node's tight bounding box and the smallest original index below it (building only), in
/// the coordinates' own type: a box in float around double points would have to be rounded
/// outward, by half a meter around UTM coordinates, and would stop pruning dense clouds.
template <class T>
struct Box {
  T lo[3];
  T hi[3];
  std::int32_t min_index;
};

/// Siblings 2i and 2i+1, stored together as pair i (one cache line for float, two for double),
/// axis by axis, so that one traversal step computes both bounds at once.
template <class T>
struct alignas(64) NodePair {
  T lo[3][2];  // [axis][child]
  T hi[3][2];
  std::int32_t min_index[2];
  std::int32_t unused[2];
};

#if defined(__SSE2__)
/// Two adjacent coordinates as doubles (exact for float).
inline __m128d load2(const float* p) {
  return _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m128d load2(const double* p) { return _mm_loadu_pd(p); }
#endif

/// Lower bounds of the squared distance from q to any point inside each box of the pair,
/// computed with the very operations of sqdist: correctly rounded operations are monotone, so
/// a bound never exceeds the distance of a point inside its box. (max(lo - q, q - hi, 0) is the
/// gap along an axis; its rounding is the rounding of the point's own difference at the face.)
template <class T>
inline void pair_bounds(const NodePair<T>& p, double qx, double qy, double qz, double out[2]) {
#if defined(__SSE2__)
  const __m128d zero = _mm_setzero_pd();
  const double q[3] = {qx, qy, qz};
  __m128d sq[3];
  for (int a = 0; a < 3; ++a) {
    const __m128d qa = _mm_set1_pd(q[a]);
    const __m128d lo = load2(p.lo[a]);
    const __m128d hi = load2(p.hi[a]);
    const __m128d g = _mm_max_pd(_mm_max_pd(_mm_sub_pd(lo, qa), _mm_sub_pd(qa, hi)), zero);
    sq[a] = _mm_mul_pd(g, g);
  }
  _mm_storeu_pd(out, _mm_add_pd(_mm_add_pd(sq[0], sq[1]), sq[2]));
#else
  const double q[3] = {qx, qy, qz};
  for (int c = 0; c < 2; ++c) {
    double g[3];
    for (int a = 0; a < 3; ++a)
      g[a] = std::max(std::max(double(p.lo[a][c]) - q[a], q[a] - double(p.hi[a][c])), 0.0);
    out[c] = (g[0] * g[0] + g[1] * g[1]) + g[2] * g[2];
  }
#endif
}

template <class T>
inline bool finite_xyz(const T* p) {
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

/// The coordinates of a view, in the type T they must have (the caller checked).
template <class T>
const T* coordinates(const PointsView& v);
template <>
inline const float* coordinates<float>(const PointsView& v) {
  return v.data;
}
template <>
inline const double* coordinates<double>(const PointsView& v) {
  return v.data64;
}

/// Point i of a view of either coordinate type, as doubles (exact).
struct Xyz {
  double x, y, z;
  bool finite() const { return std::isfinite(x) && std::isfinite(y) && std::isfinite(z); }
};
inline Xyz read_point(const PointsView& v, std::int64_t i) {
  if (v.data64) {
    const double* p = v.data64 + i * v.stride;
    return {p[0], p[1], p[2]};
  }
  const float* p = v.data + i * v.stride;
  return {p[0], p[1], p[2]};
}

/// An array whose contents are left uninitialized on growth (every entry is written before it
/// is read), reused across rebuilds: zero-filling and first touches would otherwise be a
/// single-threaded pass over memory the parallel build writes anyway.
template <class T>
class Buffer {
 public:
  void resize(std::size_t n) {
    if (n > capacity_) {
      data_.reset();  // give the old block back before taking the new one
      data_.reset(new T[n]);
      capacity_ = n;
    }
    size_ = n;
  }
  void release() {
    data_.reset();
    capacity_ = size_ = 0;
  }
  std::size_t size() const { return size_; }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

 private:
  std::unique_ptr<T[]> data_;
  std::size_t capacity_ = 0, size_ = 0;
};

/// The tree over points whose coordinates are of type T (float or double).
template <class T>
class Tree {
 public:
  /// Rebuilds over `points` (host memory, coordinates of type T), reusing storage.
  /// `threads` >= 1.
  void build(const PointsView& points, int threads);

  std::int64_t size() const { return size_; }
  std::int64_t finite_size() const { return n_; }
  /// The tree position of original index i, -1 for a non-finite point.
  std::int32_t position(std::int64_t i) const { return position_[i]; }
  /// Original indices of the non-finite points, ascending.
  const std::vector<std::int32_t>& nonfinite() const { return nonfinite_; }

  // Tree order: position p holds point id(p) at (x(p), y(p), z(p)).
  const T* xs() const { return x_.data(); }
  const T* ys() const { return y_.data(); }
  const T* zs() const { return z_.data(); }
  const std::int32_t* ids() const { return id_.data(); }

  /// Children 2i and 2i+1 of node i (also: node s is child s & 1 of pair s >> 1).
  const NodePair<T>& pair(std::uint32_t i) const { return nodes_[i]; }
  std::uint32_t first_leaf() const { return std::uint32_t{1} << depth_; }
  int depth() const { return depth_; }
  std::int64_t leaves() const { return std::int64_t{1} << depth_; }
  /// First tree position of leaf `leaf` (0-based); leaf_begin(leaves()) == finite_size().
  std::int64_t leaf_begin(std::int64_t leaf) const { return (leaf * n_) >> depth_; }

  /// The leaf holding tree position p.
  std::int64_t leaf_of(std::int64_t p) const { return (((p + 1) << depth_) - 1) / n_; }

  /// The leaf (0-based) a finite query falls in, or next to: the child with the smaller bound
  /// at every level. Used only to order queries, so any choice would be correct.
  std::int64_t locate(double qx, double qy, double qz) const {
    std::uint32_t i = 1;
    while (i < first_leaf()) {
      double b[2];
      pair_bounds(pair(i), qx, qy, qz, b);
      i = 2 * i + (b[1] < b[0]);
    }
    return i - first_leaf();
  }

 private:
  // 16-byte aligned so that copies move it whole: a copy split into smaller stores, read back
  // at once by the next step of a partition, stalls on store forwarding.
  struct alignas(16) Point {
    T c[3];
    std::int32_t id;
  };
  void split(std::uint32_t i, int level, const Box<T>& box, int parallel_levels);
  void set_node(std::uint32_t i, const Box<T>& b);
  Box<T> get_node(std::uint32_t i) const;

  std::int64_t size_ = 0;
  std::int64_t n_ = 0;
  int depth_ = 0;
  std::vector<std::int32_t> nonfinite_;
  Buffer<Point> work_;   // the finite points while building
  Buffer<T> x_, y_, z_;  // padded by kLeafSize so leaf scans run a fixed trip count
  Buffer<std::int32_t> id_;
  Buffer<std::int32_t> position_;  // original index -> tree position, -1: not finite
  Buffer<NodePair<T>> nodes_;      // pair i: the children of node i; pair 0 holds the root
};

/// The k best (distance, index) pairs seen so far, for k <= K, sorted, and the pair a newcomer
/// must beat. Slots past the filled ones hold (limit, INT32_MAX), which every qualifying pair
/// beats, so that the k-th slot is always the bar.
template <int K>
class Best {
 public:
  /// `limit`: only pairs with d <= limit qualify (+inf for plain kNN). `self`: an original
  /// index that never qualifies (-1: none).
  void reset(int k, double limit, std::int32_t self) {
    k_ = k;
    n_ = 0;
    self_ = self;
    for (int j = 0; j < k; ++j) {
      d_[j] = limit;
      id_[j] = kNone;
    }
  }
  /// Whether a node whose points are all at >= bound and have indices >= min_index may hold
  /// a pair that would enter.
  bool may_enter(double bound, std::int32_t min_index) const {
    const double wd = d_[k_ - 1];
    return bound < wd || (bound == wd && min_index < id_[k_ - 1]);
  }
  /// The distance a newcomer must not exceed (ties are then settled by index).
  double bar() const { return d_[k_ - 1]; }
  /// The index that settles a tie at bar() (INT32_MAX while slots are free).
  std::int32_t bar_index() const { return id_[k_ - 1]; }
  void offer(double d, std::int32_t id) {
    const double wd = d_[k_ - 1];
    if (d > wd) return;  // the usual case, decided by one branch
    if ((d == wd && id >= id_[k_ - 1]) || id == self_) return;
    // Start past the filled slots: shifting the padding along would cost k steps a newcomer.
    int pos = n_ < k_ ? n_++ : k_ - 1;
    while (pos > 0 && (d_[pos - 1] > d || (d_[pos - 1] == d && id_[pos - 1] > id))) {
      d_[pos] = d_[pos - 1];
      id_[pos] = id_[pos - 1];
      --pos;
    }
    d_[pos] = d;
    id_[pos] = id;
  }
  /// Writes the row (k entries), padding with -1 / +inf.
  void write(std::int32_t* indices, float* sqdist) const {
    for (int j = 0; j < k_; ++j) {
      const bool used = id_[j] != kNone;
      indices[j] = used ? id_[j] : -1;
      sqdist[j] = used ? static_cast<float>(d_[j]) : std::numeric_limits<float>::infinity();
    }
  }

 private:
  static constexpr std::int32_t kNone = std::numeric_limits<std::int32_t>::max();
  int k_ = 1;
  int n_ = 0;  // filled slots
  std::int32_t self_ = -1;
  alignas(64) double d_[K];
  alignas(64) std::int32_t id_[K];
};

/// Squared distances from q to the points at tree positions [b, b + kLeafSize) into `out`, and
/// the mask of those among the first `cnt` with d <= bar. Positions past the leaf read padding.
/// The mask lets a leaf whose points are all too far cost one branch instead of one each.
template <class T>
inline std::uint32_t leaf_distances(const Tree<T>& t, std::int64_t b, int cnt, double qx, double qy,
                                    double qz, double bar, double* out) {
  const T* x = t.xs() + b;
  const T* y = t.ys() + b;
  const T* z = t.zs() + b;
  for (int j = 0; j < kLeafSize; ++j)
    out[j] = sqdist(double(x[j]), double(y[j]), double(z[j]), qx, qy, qz);
  std::uint32_t mask = 0;
#if defined(__SSE2__)
  const __m128d barv = _mm_set1_pd(bar);
  for (int j = 0; j < kLeafSize; j += 2)
    mask |= static_cast<std::uint32_t>(_mm_movemask_pd(_mm_cmple_pd(_mm_load_pd(out + j), barv)))
            << j;
#else
  for (int j = 0; j < kLeafSize; ++j) mask |= static_cast<std::uint32_t>(out[j] <= bar) << j;
#endif
  return mask & ((std::uint32_t{1} << cnt) - 1);
}

inline int lowest_bit(std::uint32_t m) {
#if defined(__GNUC__)
  return __builtin_ctz(m);
#else
  int j = 0;
  while (!(m & 1u)) m >>= 1, ++j;
  return j;
#endif
}

/// Queries searched together: the ones that start in the same leaf (a self-search's leaf, or
/// separate queries located there). They share one walk through the tree.
struct GroupQuery {
  double x, y, z;
  std::int32_t self;  // original index excluded from the results, -1: none
};
inline constexpr int kMaxGroup = 32;

/// A group's queries axis by axis (padded to an even count) and their box, so that the bounds
/// of all of them to a box are computed two at a time without branches.
class Group {
 public:
  void load(const GroupQuery* q, int m) {
    m_ = m;
    const int padded = (m + 1) & ~1;
    for (int j = 0; j < padded; ++j) {
      const GroupQuery& g = q[j < m ? j : m - 1];  // the odd slot repeats the last query
      x_[j] = g.x;
      y_[j] = g.y;
      z_[j] = g.z;
    }
    lo_[0] = hi_[0] = x_[0];
    lo_[1] = hi_[1] = y_[0];
    lo_[2] = hi_[2] = z_[0];
    for (int j = 1; j < m; ++j) {
      lo_[0] = std::min(lo_[0], x_[j]);
      hi_[0] = std::max(hi_[0], x_[j]);
      lo_[1] = std::min(lo_[1], y_[j]);
      hi_[1] = std::max(hi_[1], y_[j]);
      lo_[2] = std::min(lo_[2], z_[j]);
      hi_[2] = std::max(hi_[2], z_[j]);
    }
  }

  /// Lower bounds of the squared distance between any query of the group and any point of
  /// each box of pair `p`. Along an axis the gap max(lo - g.hi, g.lo - hi, 0) is rounded like
  /// the difference of any two points on either side, and roundings are monotone.
  template <class T>
  void pair_bounds(const NodePair<T>& p, double out[2]) const {
#if defined(__SSE2__)
    const __m128d zero = _mm_setzero_pd();
    __m128d sq[3];
    for (int a = 0; a < 3; ++a) {
      const __m128d lo = load2(p.lo[a]);
      const __m128d hi = load2(p.hi[a]);
      const __m128d gap = _mm_max_pd(
          _mm_max_pd(_mm_sub_pd(lo, _mm_set1_pd(hi_[a])), _mm_sub_pd(_mm_set1_pd(lo_[a]), hi)),
          zero);
      sq[a] = _mm_mul_pd(gap, gap);
    }
    _mm_storeu_pd(out, _mm_add_pd(_mm_add_pd(sq[0], sq[1]), sq[2]));
#else
    for (int c = 0; c < 2; ++c) {
      double gap[3];
      for (int a = 0; a < 3; ++a)
        gap[a] = std::max(std::max(double(p.lo[a][c]) - hi_[a], lo_[a] - double(p.hi[a][c])), 0.0);
      out[c] = (gap[0] * gap[0] + gap[1] * gap[1]) + gap[2] * gap[2];
    }
#endif
  }

  /// Each query's own bound to box c of pair p (as ::pair_bounds computes it), into out[0..m).
  template <class T>
  void query_bounds(const NodePair<T>& p, int c, double* out) const {
#if defined(__SSE2__)
    const __m128d zero = _mm_setzero_pd();
    const __m128d lo[3] = {_mm_set1_pd(p.lo[0][c]), _mm_set1_pd(p.lo[1][c]),
                           _mm_set1_pd(p.lo[2][c])};
    const __m128d hi[3] = {_mm_set1_pd(p.hi[0][c]), _mm_set1_pd(p.hi[1][c]),
                           _mm_set1_pd(p.hi[2][c])};
    const double* q[3] = {x_, y_, z_};
    for (int j = 0; j < m_; j += 2) {
      __m128d sq[3];
      for (int a = 0; a < 3; ++a) {
        const __m128d qa = _mm_load_pd(q[a] + j);
        const __m128d g =
            _mm_max_pd(_mm_max_pd(_mm_sub_pd(lo[a], qa), _mm_sub_pd(qa, hi[a])), zero);
        sq[a] = _mm_mul_pd(g, g);
      }
      _mm_storeu_pd(out + j, _mm_add_pd(_mm_add_pd(sq[0], sq[1]), sq[2]));
    }
#else
    const double* q[3] = {x_, y_, z_};
    for (int j = 0; j < m_; ++j) {
      double g[3];
      for (int a = 0; a < 3; ++a)
        g[a] = std::max(std::max(double(p.lo[a][c]) - q[a][j], q[a][j] - double(p.hi[a][c])), 0.0);
      out[j] = (g[0] * g[0] + g[1] * g[1]) + g[2] * g[2];
    }
#endif
  }

 private:
  int m_ = 0;
  alignas(16) double x_[kMaxGroup];
  alignas(16) double y_[kMaxGroup];
  alignas(16) double z_[kMaxGroup];
  double lo_[3], hi_[3];
};

/// Walks the subtree of node `root` (group bound `root_bound`) depth-first, nearer child first
/// (at equal bounds the one with the smaller index, so that ties settle early on the smallest
/// indices and the rest is pruned), calling leaf(leaf_index) for every leaf `want(bound,
/// min_index)` accepts. `want` is asked again when a deferred node is resumed, so that a
/// shrinking search region prunes it then.
template <class T, class Want, class Leaf>
void descend(const Tree<T>& t, const Group& g, std::uint32_t root, double root_bound, Want& want,
             Leaf& leaf) {
  struct Entry {
    std::uint32_t node;
    std::int32_t min_index;
    double bound;
  };
  Entry stack[kStackSize];
  int sp = 0;
  stack[sp++] = {root, t.pair(root >> 1).min_index[root & 1], root_bound};
  const std::uint32_t first_leaf = t.first_leaf();
  while (sp > 0) {
    const Entry e = stack[--sp];
    if (!want(e.bound, e.min_index)) continue;
    std::uint32_t i = e.node;
    bool go = true;
    while (i < first_leaf) {
      const NodePair<T>& p = t.pair(i);
      double b[2];
      g.pair_bounds(p, b);
      const int nc = b[1] < b[0] || (b[1] == b[0] && p.min_index[1] < p.min_index[0]);
      const int fc = 1 - nc;
      if (want(b[fc], p.min_index[fc])) stack[sp++] = {2 * i + fc, p.min_index[fc], b[fc]};
      if (!want(b[nc], p.min_index[nc])) {
        go = false;
        break;
      }
      i = 2 * i + nc;
    }
    if (go) leaf(i);
  }
}

/// Visits every leaf `want` accepts for the group: `home` first (the leaf the queries start
/// from; any leaf would be correct), then, going up, the sibling subtree at every level. Nodes
/// are skipped only by `want`, and what it accepts only shrinks, so nothing it would accept at
/// the end is missed. leaf() gets the leaf's node number.
template <class T, class Want, class Leaf>
void traverse(const Tree<T>& t, const Group& g, std::int64_t home, Want&& want, Leaf&& leaf) {
  std::uint32_t i = t.first_leaf() + static_cast<std::uint32_t>(home);
  leaf(i);
  for (; i > 1; i >>= 1) {
    const std::uint32_t s = i ^ 1u;
    const NodePair<T>& p = t.pair(s >> 1);
    double b[2];
    g.pair_bounds(p, b);
    if (want(b[s & 1], p.min_index[s & 1])) descend(t, g, s, b[s & 1], want, leaf);
  }
}

/// Scans one leaf for `best`.
template <class T, class BestK>
int scan_leaf(const Tree<T>& t, std::int64_t leaf, const GroupQuery& q, BestK& best) {
  alignas(16) double d[kLeafSize];
  const std::int64_t b = t.leaf_begin(leaf);
  const int cnt = static_cast<int>(t.leaf_begin(leaf + 1) - b);
  const std::int32_t* ids = t.ids() + b;
  // Entries over the bar as it stands now can only fail it later: the bar only falls.
  for (std::uint32_t m = leaf_distances(t, b, cnt, q.x, q.y, q.z, best.bar(), d); m; m &= m - 1) {
    const int j = lowest_bit(m);
    best.offer(d[j], ids[j]);
  }
  return cnt;
}

/// kNN (limit = +inf) or hybrid (limit = r²) rows of a group of m <= kMaxGroup queries that
/// start at leaf `home`, into best[0..m). Returns the distances evaluated.
///
/// The group walks the tree once, pruned by the bound from the queries' box and by the worst
/// of their k-th (distance, index) pairs; at each leaf it reaches, every query whose own bound
/// still admits the leaf scans it. The walk's decisions are shared by the group, and the
/// queries' own bounds are computed together.
template <class T, class BestK>
std::int64_t knn_group(const Tree<T>& t, const GroupQuery* q, int m, std::int64_t home, int k,
                       double limit, BestK* best, Group& g) {
  std::int64_t evaluated = 0;
  g.load(q, m);
  // Every query's bar, axis-free and padded: the leaf's bounds are checked against all of them
  // at once. A padding slot's bar of -1 admits nothing.
  alignas(16) double bar_d[kMaxGroup];
  std::int32_t bar_i[kMaxGroup];
  const int padded = (m + 1) & ~1;
  for (int j = 0; j < m; ++j) {
    best[j].reset(k, limit, q[j].self);
    bar_d[j] = limit;
    bar_i[j] = std::numeric_limits<std::int32_t>::max();
  }
  for (int j = m; j < padded; ++j) {
    bar_d[j] = -1.0;
    bar_i[j] = 0;
  }
  double worst_d = limit;
  std::int32_t worst_i = std::numeric_limits<std::int32_t>::max();
  auto find_worst = [&] {  // the largest bar, and the largest index among those at it
    worst_d = -1.0;
    for (int j = 0; j < m; ++j) worst_d = std::max(worst_d, bar_d[j]);
    worst_i = std::numeric_limits<std::int32_t>::min();
    for (int j = 0; j < m; ++j)
      if (bar_d[j] == worst_d) worst_i = std::max(worst_i, bar_i[j]);
  };
  alignas(16) double own[kMaxGroup];
  const std::uint32_t first_leaf = t.first_leaf();
  traverse(
      t, g, home,
      [&](double b, std::int32_t mi) { return b < worst_d || (b == worst_d && mi < worst_i); },
      [&](std::uint32_t node) {
        const NodePair<T>& p = t.pair(node >> 1);
        const int c = node & 1;
        const std::int32_t min_index = p.min_index[c];
        g.query_bounds(p, c, own);
        // The queries whose own (bound, smallest index) beats their bar.
        std::uint32_t scan = 0, tie = 0;
#if defined(__SSE2__)
        for (int j = 0; j < padded; j += 2) {
          const __m128d o = _mm_load_pd(own + j);
          const __m128d w = _mm_load_pd(bar_d + j);
          scan |= static_cast<std::uint32_t>(_mm_movemask_pd(_mm_cmplt_pd(o, w))) << j;
          tie |= static_cast<std::uint32_t>(_mm_movemask_pd(_mm_cmpeq_pd(o, w))) << j;
        }
#else
        for (int j = 0; j < padded; ++j) {
          scan |= static_cast<std::uint32_t>(own[j] < bar_d[j]) << j;
          tie |= static_cast<std::uint32_t>(own[j] == bar_d[j]) << j;
        }
#endif
        for (; tie; tie &= tie - 1) {
          const int j = lowest_bit(tie);
          if (min_index < bar_i[j]) scan |= std::uint32_t{1} << j;
        }
        if (!scan) return;
        const std::int64_t leaf = node - first_leaf;
        for (; scan; scan &= scan - 1) {
          const int j = lowest_bit(scan);
          evaluated += scan_leaf(t, leaf, q[j], best[j]);
          bar_d[j] = best[j].bar();
          bar_i[j] = best[j].bar_index();
        }
        find_worst();
      });
  return evaluated;
}

/// Radius search of a group of m <= kMaxGroup queries that start at leaf `home`: hit(j, d,
/// index) for every point with d <= r2 of query j, except its `self`, in no particular order.
template <class T, class Hit>
std::int64_t radius_group(const Tree<T>& t, const GroupQuery* q, int m, std::int64_t home,
                          double r2, Group& g, Hit&& hit) {
  std::int64_t evaluated = 0;
  g.load(q, m);
  alignas(16) double own[kMaxGroup];
  alignas(16) double d[kLeafSize];
  const std::uint32_t first_leaf = t.first_leaf();
  traverse(
      t, g, home, [&](double b, std::int32_t) { return b <= r2; },
      [&](std::uint32_t node) {
        const NodePair<T>& p = t.pair(node >> 1);
        g.query_bounds(p, node & 1, own);
        const std::int64_t leaf = node - first_leaf;
        const std::int64_t begin = t.leaf_begin(leaf);
        const int cnt = static_cast<int>(t.leaf_begin(leaf + 1) - begin);
        const std::int32_t* ids = t.ids() + begin;
        for (int j = 0; j < m; ++j) {
          if (!(own[j] <= r2)) continue;
          for (std::uint32_t mk = leaf_distances(t, begin, cnt, q[j].x, q[j].y, q[j].z, r2, d); mk;
               mk &= mk - 1) {
            const int i = lowest_bit(mk);
            if (ids[i] != q[j].self) hit(j, d[i], ids[i]);
          }
          evaluated += cnt;
        }
      });
  return evaluated;
}

}  // namespace pcnn::detail::cpu
