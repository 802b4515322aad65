// The CPU backend of pcnn::Index: exact in double precision, multi-threaded with std::thread.
//
// Must be compiled with -ffp-contract=off (and without -ffast-math): a fused multiply-add would
// round the squared distances differently from the contract's formula.
//
// Threads take blocks of query groups from a shared counter; every row is a function of its
// query alone (the contract leaves no choice), so results do not depend on the thread count or
// on which thread did what.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../core/cpus.hpp"
#include "../core/parallel_blocks.hpp"
#include "core/backend.hpp"
#include "core/normal_math.hpp"
#include "cpu/cpu_tree.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace detail {
namespace cpu {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

[[noreturn]] void throw_oom(const char* what, std::int64_t bytes) {
  throw out_of_memory_error(std::string("pcnn CPU backend: out of host memory ") + what, bytes, 0);
}

/// detail::parallel_blocks, a failed allocation in any block reported as the search's.
template <class Body>
void parallel_blocks(int threads, std::int64_t count, std::int64_t block, Body&& body) {
  try {
    ::pcnn::detail::parallel_blocks(threads, count, block, body);
  } catch (const std::bad_alloc&) {
    throw_oom("for the search's work arrays", 0);
  }
}

// Orders floats as their values, -0 and +0 alike, in an unsigned integer.
inline std::uint32_t sortable(float f) {
  f += 0.0f;  // -0 becomes +0
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline std::uint64_t sortable(double f) {
  f += 0.0;
  std::uint64_t u;
  std::memcpy(&u, &f, sizeof u);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

// The partition's key: (coordinate, index) as one integer for float, two for double; compared
// without branches.
inline std::uint64_t split_key(float c, std::int32_t id) {
  return (std::uint64_t{sortable(c)} << 32) | static_cast<std::uint32_t>(id);
}
struct Key96 {
  std::uint64_t coordinate;
  std::uint32_t id;
  bool operator<(const Key96& o) const {
    return (coordinate < o.coordinate) | ((coordinate == o.coordinate) & (id < o.id));
  }
};
inline Key96 split_key(double c, std::int32_t id) {
  return {sortable(c), static_cast<std::uint32_t>(id)};
}

// Swaps two points (16 bytes for float, 32 for double) with whole 16-byte moves. Copying field
// by field makes the next step's 16-byte load wait for several smaller stores to retire (a
// failed store forward), which made the partition below several times slower.
template <std::size_t Bytes>
inline void swap_whole(void* a, void* b) {
  static_assert(Bytes % 16 == 0, "points are padded to 16 bytes");
#if defined(__GNUC__)
  typedef long long Raw __attribute__((vector_size(16), may_alias));
  Raw* ra = static_cast<Raw*>(a);
  Raw* rb = static_cast<Raw*>(b);
  for (std::size_t i = 0; i < Bytes / 16; ++i) {
    const Raw t = ra[i];
    ra[i] = rb[i];
    rb[i] = t;
  }
#else
  unsigned char t[Bytes];
  std::memcpy(t, a, Bytes);
  std::memmove(a, b, Bytes);
  std::memcpy(b, t, Bytes);
#endif
}

/// Rearranges [first, last) so that the element of rank nth by (coordinate `dim`, index) is at
/// nth, smaller ones before it and larger ones after, like std::nth_element. Keys are distinct
/// (indices are), and the partition is branchless: the comparisons of random coordinates would
/// mispredict half the time.
template <class P>
void select_along(P* first, P* nth, P* last, int dim) {
  auto key = [dim](const P& p) { return split_key(p.c[dim], p.id); };
  std::uint64_t seed = 0x9E3779B97F4A7C15ull;
  int rounds = 0;
  while (last - first > 32) {
    const std::int64_t n = last - first;
    if (++rounds > 64) break;  // a pathological run: leave the rest to the library
    // Median of three pseudo-random samples (fixed seed: the same tree every time).
    std::int64_t s[3];
    for (auto& v : s) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(n));
    }
    const auto k0 = key(first[s[0]]), k1 = key(first[s[1]]), k2 = key(first[s[2]]);
    const std::int64_t m = (k0 < k1) == (k1 < k2) ? s[1] : ((k1 < k0) == (k0 < k2) ? s[0] : s[2]);
    std::swap(first[m], last[-1]);
    const auto pivot = key(last[-1]);
    P* j = first;
    for (P* i = first; i < last - 1; ++i) {
      const bool less = key(*i) < pivot;
      swap_whole<sizeof(P)>(i, j);
      j += less;
    }
    std::swap(*j, last[-1]);
    if (j == nth) return;
    if (nth < j)
      last = j;
    else
      first = j + 1;
  }
  std::nth_element(first, nth, last, [&](const P& a, const P& b) { return key(a) < key(b); });
}

}  // namespace

template <class T>
void Tree<T>::split(std::uint32_t i, int level, const Box<T>& box, int parallel_levels) {
  if (level == depth_) return;
  const std::int64_t j = static_cast<std::int64_t>(i) - (std::int64_t{1} << level);
  const std::int64_t b = (j * n_) >> level;
  const std::int64_t e = ((j + 1) * n_) >> level;
  const std::int64_t m = ((2 * j + 1) * n_) >> (level + 1);
  // `box` is the parent's box cut at the split planes: close enough to choose the axis, and
  // free. Ties in the coordinate split by index, so that identical points end up in index order
  // across leaves and tie-aware pruning can skip them.
  int dim = 0;
  double widest = -1;
  for (int a = 0; a < 3; ++a) {
    const double extent = double(box.hi[a]) - double(box.lo[a]);
    if (extent > widest) {
      widest = extent;
      dim = a;
    }
  }
  select_along(work_.data() + b, work_.data() + m, work_.data() + e, dim);
  const T s = work_[m].c[dim];
  Box<T> left = box, right = box;
  left.hi[dim] = s;
  right.lo[dim] = s;
  if (parallel_levels > 0) {
    std::thread other;
    try {
      other = std::thread([&] { split(2 * i, level + 1, left, parallel_levels - 1); });
    } catch (const std::system_error&) {
      split(2 * i, level + 1, left, 0);
    }
    split(2 * i + 1, level + 1, right, parallel_levels - 1);
    if (other.joinable()) other.join();
  } else {
    split(2 * i, level + 1, left, 0);
    split(2 * i + 1, level + 1, right, 0);
  }
}

template <class T>
void Tree<T>::set_node(std::uint32_t i, const Box<T>& b) {
  NodePair<T>& p = nodes_[i >> 1];
  for (int a = 0; a < 3; ++a) {
    p.lo[a][i & 1] = b.lo[a];
    p.hi[a][i & 1] = b.hi[a];
  }
  p.min_index[i & 1] = b.min_index;
}

template <class T>
Box<T> Tree<T>::get_node(std::uint32_t i) const {
  const NodePair<T>& p = nodes_[i >> 1];
  Box<T> b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = p.lo[a][i & 1];
    b.hi[a] = p.hi[a][i & 1];
  }
  b.min_index = p.min_index[i & 1];
  return b;
}

template <class T>
void Tree<T>::build(const PointsView& points, int threads) {
  const T* const data = coordinates<T>(points);
  size_ = points.count;
  n_ = 0;
  depth_ = 0;
  // The finite points and their box, in two parallel passes: count per block, then copy.
  constexpr std::int64_t kGather = 1 << 15;
  const std::int64_t blocks = (size_ + kGather - 1) / kGather;
  std::vector<std::int64_t> finite_before(static_cast<std::size_t>(blocks) + 1, 0);
  std::vector<Box<T>> block_box(static_cast<std::size_t>(blocks));
  parallel_blocks(threads, size_, kGather, [&](std::int64_t b, std::int64_t e) {
    Box<T> box;
    for (int a = 0; a < 3; ++a) {
      box.lo[a] = std::numeric_limits<T>::infinity();
      box.hi[a] = -std::numeric_limits<T>::infinity();
    }
    std::int64_t finite = 0;
    for (std::int64_t i = b; i < e; ++i) {
      const T* p = data + i * points.stride;
      if (!finite_xyz(p)) continue;
      ++finite;
      for (int a = 0; a < 3; ++a) {
        box.lo[a] = std::min(box.lo[a], p[a]);
        box.hi[a] = std::max(box.hi[a], p[a]);
      }
    }
    finite_before[b / kGather + 1] = finite;
    block_box[b / kGather] = box;
  });
  for (std::int64_t blk = 0; blk < blocks; ++blk) finite_before[blk + 1] += finite_before[blk];
  n_ = finite_before[blocks];
  work_.resize(static_cast<std::size_t>(n_));
  nonfinite_.resize(static_cast<std::size_t>(size_ - n_));
  // The caller's memory is read a second time: where it changed in between (another thread
  // writing the points during the call), a block's finite points no longer fill its share. Each
  // point is read once here, no block writes beyond its share, and the build is refused.
  std::atomic<bool> changed{false};
  parallel_blocks(threads, size_, kGather, [&](std::int64_t b, std::int64_t e) {
    std::int64_t f = finite_before[b / kGather];
    const std::int64_t f_end = finite_before[b / kGather + 1];
    std::int64_t nf = b - f;
    const std::int64_t nf_end = e - f_end;
    for (std::int64_t i = b; i < e; ++i) {
      const T* q = data + i * points.stride;
      const T p[3] = {q[0], q[1], q[2]};
      if (finite_xyz(p) ? f == f_end : nf == nf_end) {
        changed = true;
        return;
      }
      if (finite_xyz(p))
        work_[f++] = {{p[0], p[1], p[2]}, static_cast<std::int32_t>(i)};
      else
        nonfinite_[nf++] = static_cast<std::int32_t>(i);
    }
  });
  if (changed)
    throw invalid_argument_error(
        "pcnn CPU backend: the points changed while the index was built (another thread wrote "
        "them during the call)");
  Box<T> root;
  for (int a = 0; a < 3; ++a) {
    root.lo[a] = std::numeric_limits<T>::infinity();
    root.hi[a] = -std::numeric_limits<T>::infinity();
  }
  for (const Box<T>& box : block_box)
    for (int a = 0; a < 3; ++a) {
      root.lo[a] = std::min(root.lo[a], box.lo[a]);
      root.hi[a] = std::max(root.hi[a], box.hi[a]);
    }

  while (((n_ + (std::int64_t{1} << depth_) - 1) >> depth_) > kLeafSize) ++depth_;
  nodes_.resize(std::size_t{1} << depth_);
  for (auto* v : {&x_, &y_, &z_}) {
    v->resize(static_cast<std::size_t>(n_ + kLeafSize));
    std::fill(v->data() + n_, v->data() + n_ + kLeafSize, T(0));
  }
  id_.resize(static_cast<std::size_t>(n_));
  position_.resize(static_cast<std::size_t>(size_));
  for (std::int32_t i : nonfinite_) position_[i] = -1;
  if (n_ == 0) {
    work_.release();
    return;
  }

  int parallel_levels = 0;
  while ((1 << parallel_levels) < threads && parallel_levels < depth_) ++parallel_levels;
  split(1, 0, root, parallel_levels);

  // Tree order to SoA, and the leaves' tight boxes; then every inner node from its children.
  parallel_blocks(threads, leaves(), 1024, [&](std::int64_t l0, std::int64_t l1) {
    for (std::int64_t leaf = l0; leaf < l1; ++leaf) {
      const std::int64_t b = leaf_begin(leaf), e = leaf_begin(leaf + 1);
      Box<T> box;
      box.min_index = std::numeric_limits<std::int32_t>::max();
      for (int a = 0; a < 3; ++a) box.lo[a] = box.hi[a] = work_[b].c[a];
      for (std::int64_t p = b; p < e; ++p) {
        const Point& q = work_[p];
        x_[p] = q.c[0];
        y_[p] = q.c[1];
        z_[p] = q.c[2];
        id_[p] = q.id;
        position_[q.id] = static_cast<std::int32_t>(p);
        box.min_index = std::min(box.min_index, q.id);
        for (int a = 0; a < 3; ++a) {
          box.lo[a] = std::min(box.lo[a], q.c[a]);
          box.hi[a] = std::max(box.hi[a], q.c[a]);
        }
      }
      set_node(static_cast<std::uint32_t>(first_leaf() + leaf), box);
    }
  });
  for (std::uint32_t i = first_leaf() - 1; i >= 1; --i) {
    const Box<T> l = get_node(2 * i), r = get_node(2 * i + 1);
    Box<T> box;
    for (int a = 0; a < 3; ++a) {
      box.lo[a] = std::min(l.lo[a], r.lo[a]);
      box.hi[a] = std::max(l.hi[a], r.hi[a]);
    }
    box.min_index = std::min(l.min_index, r.min_index);
    set_node(i, box);
  }
  work_.release();  // the SoA copy is all the searches need
}

template class Tree<float>;
template class Tree<double>;

namespace {

/// Queries of one search in the order they are searched, in groups that start from the same
/// leaf: self-searches walk the tree order (a group is a leaf), separate queries are sorted by
/// the leaf they fall in. Neighboring queries then share the walk through the tree and the
/// cache. Non-finite queries are not searched; their rows are padded.
template <class T>
class QueryOrder {
 public:
  /// Separate `queries`, or (queries == nullptr) the indexed points of original indices
  /// [first_row, first_row + rows); rows < 0: all of them.
  QueryOrder(const Tree<T>& tree, const PointsView* queries, std::int64_t first_row,
             std::int64_t rows, bool exclude_self, int threads)
      : tree_(tree), queries_(queries), first_row_(first_row), exclude_self_(exclude_self) {
    if (!queries) {
      rows_ = rows < 0 ? tree.size() : rows;
      if (first_row == 0 && rows_ == tree.size()) {
        all_ = true;
        searched_ = tree.finite_size();
        return;
      }
      // A slice of the rows: its points in tree order.
      for (std::int64_t r = 0; r < rows_; ++r) {
        const std::int32_t p = tree.position(first_row + r);
        if (p < 0)
          padded_.push_back(static_cast<std::int32_t>(r));
        else
          order_.push_back(p);
      }
      std::sort(order_.begin(), order_.end());
      searched_ = static_cast<std::int64_t>(order_.size());
      std::vector<std::int32_t> leaf(order_.size());
      for (std::size_t i = 0; i < order_.size(); ++i)
        leaf[i] = static_cast<std::int32_t>(tree.leaf_of(order_[i]));
      make_groups(leaf);
      return;
    }
    rows_ = queries->count;
    order_.reserve(static_cast<std::size_t>(rows_));
    // With nothing indexed every row is padding.
    const bool searchable = tree.finite_size() > 0;
    for (std::int64_t q = 0; q < rows_; ++q) {
      if (searchable && read_point(*queries, q).finite())
        order_.push_back(static_cast<std::int32_t>(q));
      else
        padded_.push_back(static_cast<std::int32_t>(q));
    }
    searched_ = static_cast<std::int64_t>(order_.size());
    if (searched_ == 0) return;
    std::vector<std::int32_t> leaf(order_.size());
    parallel_blocks(threads, searched_, 4096, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const Xyz p = read_point(*queries_, order_[i]);
        leaf[i] = static_cast<std::int32_t>(tree.locate(p.x, p.y, p.z));
      }
    });
    std::vector<std::int32_t> sorted(order_.size()), sorted_leaf(order_.size());
    if (searched_ * 4 >= tree.leaves()) {  // counting sort
      std::vector<std::int64_t> start(static_cast<std::size_t>(tree.leaves()) + 1, 0);
      for (std::int32_t l : leaf) ++start[l + 1];
      for (std::size_t l = 1; l < start.size(); ++l) start[l] += start[l - 1];
      for (std::size_t i = 0; i < order_.size(); ++i) {
        const std::int64_t at = start[leaf[i]]++;
        sorted[at] = order_[i];
        sorted_leaf[at] = leaf[i];
      }
    } else {
      std::vector<std::pair<std::int32_t, std::int32_t>> by_leaf(order_.size());
      for (std::size_t i = 0; i < order_.size(); ++i) by_leaf[i] = {leaf[i], order_[i]};
      std::sort(by_leaf.begin(), by_leaf.end());
      for (std::size_t i = 0; i < order_.size(); ++i) {
        sorted_leaf[i] = by_leaf[i].first;
        sorted[i] = by_leaf[i].second;
      }
    }
    order_.swap(sorted);
    make_groups(sorted_leaf);
  }

  std::int64_t rows() const { return rows_; }
  /// Queries searched (the finite ones).
  std::int64_t searched() const { return searched_; }
  /// Rows of non-finite queries.
  const std::vector<std::int32_t>& padded() const { return all_ ? tree_.nonfinite() : padded_; }

  /// Groups of at most kMaxGroup queries with the same starting leaf.
  std::int64_t groups() const {
    if (all_) return searched_ > 0 ? tree_.leaves() : 0;
    return static_cast<std::int64_t>(group_leaf_.size());
  }
  /// Group g: queries [begin, end) of the search order, starting at `leaf`.
  void group(std::int64_t g, std::int64_t& begin, std::int64_t& end, std::int64_t& leaf) const {
    if (all_) {
      begin = tree_.leaf_begin(g);
      end = tree_.leaf_begin(g + 1);
      leaf = g;
      return;
    }
    begin = group_start_[g];
    end = group_start_[g + 1];
    leaf = group_leaf_[g];
  }

  struct Query {
    std::int32_t row;  // output row
    GroupQuery q;
  };
  /// The i-th query searched (i < searched()).
  Query get(std::int64_t i) const {
    if (!queries_) {
      const std::int64_t p = all_ ? i : order_[i];
      const std::int32_t id = tree_.ids()[p];
      return {static_cast<std::int32_t>(id - first_row_),
              {tree_.xs()[p], tree_.ys()[p], tree_.zs()[p], exclude_self_ ? id : -1}};
    }
    const std::int32_t row = order_[i];
    const Xyz p = read_point(*queries_, row);
    return {row, {p.x, p.y, p.z, -1}};
  }

 private:
  // Runs of equal leaves in search order, each cut into groups of at most kMaxGroup.
  void make_groups(const std::vector<std::int32_t>& leaf) {
    for (std::size_t b = 0, e = 0; b < leaf.size(); b = e) {
      while (e < leaf.size() && leaf[e] == leaf[b]) ++e;
      split_run(static_cast<std::int64_t>(b), static_cast<std::int64_t>(e), leaf[b]);
    }
    group_start_.push_back(static_cast<std::int64_t>(leaf.size()));
  }

  // Groups of the separate queries [b, e) of the search order, all located in `leaf`. A group
  // walks the tree pruned by its box and its worst bound, so its queries must be close together
  // and near the leaf. A run is halved along the widest axis of its box until each part holds at
  // most kMaxGroup queries, spans no more than the leaf's box, and, unless its queries coincide,
  // lies within half the leaf's size of it: far queries go alone. Queries off the cloud (in the
  // air above a scan, between clusters) locate by the thousand to the same nearest leaf, tens of
  // metres apart, and a far query's sphere grazes the cloud, so a box around several of them
  // pruned nothing: cut in arrival order into groups of 32, 100k uniform queries against a
  // 1M-point LiDAR-like cloud took 10.9-12.6 s on two cores (bench/results/2026-11-28-round18.md).
  // Copies of one far query share their walk exactly, so they stay together.
  void split_run(std::int64_t b, std::int64_t e, std::int32_t leaf) {
    if (!queries_ || e - b <= 1) return add_groups(b, e, leaf);  // slices of a self-search: leaves
    const std::uint32_t node = tree_.first_leaf() + static_cast<std::uint32_t>(leaf);
    const NodePair<T>& pair = tree_.pair(node >> 1);
    const int c = node & 1;
    double side = 0, lo[3], hi[3], far2 = 0;  // far2: the largest squared gap to the leaf's box
    for (int a = 0; a < 3; ++a) {
      side = std::max(side, double(pair.hi[a][c]) - double(pair.lo[a][c]));
      lo[a] = HUGE_VAL;
      hi[a] = -HUGE_VAL;
    }
    for (std::int64_t i = b; i < e; ++i) {
      const Xyz p = read_point(*queries_, order_[i]);
      const double q[3] = {p.x, p.y, p.z};
      double gap2 = 0;
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], q[a]);
        hi[a] = std::max(hi[a], q[a]);
        const double gap =
            std::max({double(pair.lo[a][c]) - q[a], q[a] - double(pair.hi[a][c]), 0.0});
        gap2 += gap * gap;
      }
      far2 = std::max(far2, gap2);
    }
    int axis = 0;
    for (int a = 1; a < 3; ++a)
      if (hi[a] - lo[a] > hi[axis] - lo[axis]) axis = a;
    if (e - b > kMaxGroup || hi[axis] - lo[axis] > side ||
        (4 * far2 > side * side && hi[axis] > lo[axis])) {
      const auto coord = [&](std::int32_t row) {
        const Xyz p = read_point(*queries_, row);
        return axis == 0 ? p.x : axis == 1 ? p.y : p.z;
      };
      const std::int64_t mid = b + (e - b) / 2;
      std::nth_element(order_.begin() + b, order_.begin() + mid, order_.begin() + e,
                       [&](std::int32_t r, std::int32_t s) { return coord(r) < coord(s); });
      split_run(b, mid, leaf);
      split_run(mid, e, leaf);
      return;
    }
    add_groups(b, e, leaf);
  }

  // Queries [b, e) in groups of kMaxGroup, from `leaf`.
  void add_groups(std::int64_t b, std::int64_t e, std::int32_t leaf) {
    for (std::int64_t g = b; g < e; g += kMaxGroup) {
      group_start_.push_back(g);
      group_leaf_.push_back(leaf);
    }
  }

  const Tree<T>& tree_;
  const PointsView* queries_;
  std::int64_t first_row_ = 0;
  bool exclude_self_;
  bool all_ = false;  // every indexed point, in tree order, a group per leaf
  std::int64_t rows_ = 0, searched_ = 0;
  // Separate queries: query indices in search order. A slice of a self-search: tree positions.
  std::vector<std::int32_t> order_, padded_;
  std::vector<std::int64_t> group_start_, group_leaf_;
};

constexpr std::int64_t kGroupBlock = 16;  // groups handed to a thread at a time

void pad_row(std::int32_t* indices, float* sqdist, std::int64_t k) {
  std::fill(indices, indices + k, -1);
  std::fill(sqdist, sqdist + k, std::numeric_limits<float>::infinity());
}

void expect_host(Memory memory, const char* what) {
  PCNN_EXPECTS(memory == Memory::host, std::string("the CPU backend takes host memory only, and ") +
                                           what + " is in device memory");
}

/// Per-thread work arrays, kept for the thread's life so that searches allocate nothing per
/// query or per block once warm.
struct Scratch {
  Group group;
  std::vector<GroupQuery> queries;
  std::vector<std::int32_t> rows;
  std::vector<std::int32_t> ids;
  std::vector<float> d2;
  std::vector<std::pair<double, std::int32_t>> found;
  std::vector<std::int64_t> counts;
  struct Hit {
    double d;
    std::int32_t id;
    std::int32_t query;
  };
  std::vector<Hit> hits;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/// Gathers group g's queries into s.queries and their output rows into s.rows (appended).
/// Returns the group's start leaf.
template <class T>
std::int64_t load_group(const QueryOrder<T>& order, std::int64_t g, Scratch& s) {
  std::int64_t begin, end, leaf;
  order.group(g, begin, end, leaf);
  s.queries.clear();
  for (std::int64_t i = begin; i < end; ++i) {
    const auto q = order.get(i);
    s.queries.push_back(q.q);
    s.rows.push_back(q.row);
  }
  return leaf;
}

/// Radius rows of group g: s.rows gets the group's output rows, s.counts[j] the number of hits
/// of its j-th query and s.found the hits, query after query, each run sorted by (d, index).
/// Returns the distances evaluated.
template <class T>
std::int64_t radius_rows(const Tree<T>& tree, const QueryOrder<T>& order, std::int64_t g, double r2,
                         Scratch& s) {
  s.rows.clear();
  const std::int64_t leaf = load_group(order, g, s);
  const int m = static_cast<int>(s.queries.size());
  s.hits.clear();
  const std::int64_t evaluated = radius_group(tree, s.queries.data(), m, leaf, r2, s.group,
                                              [&](int j, double d, std::int32_t id) {
                                                s.hits.push_back({d, id, j});
                                              });
  // The hits come leaf by leaf: bucket them by query, then sort each query's run.
  s.counts.assign(static_cast<std::size_t>(m) + 1, 0);
  for (const auto& h : s.hits) ++s.counts[h.query + 1];
  for (int j = 0; j < m; ++j) s.counts[j + 1] += s.counts[j];
  s.found.resize(s.hits.size());
  for (const auto& h : s.hits) s.found[s.counts[h.query]++] = {h.d, h.id};
  // counts[j] is now where run j ends: shift to where it starts, sort, then keep the sizes.
  for (int j = m; j > 0; --j) s.counts[j] = s.counts[j - 1];
  s.counts[0] = 0;
  for (int j = 0; j < m; ++j) {
    std::sort(s.found.begin() + s.counts[j], s.found.begin() + s.counts[j + 1]);
  }
  for (int j = 0; j < m; ++j) s.counts[j] = s.counts[j + 1] - s.counts[j];
  s.counts.resize(static_cast<std::size_t>(m));
  return evaluated;
}

/// The searches over a tree of coordinates of type T, with the backend's thread count.
template <class T>
class Searches {
 public:
  Searches(const Tree<T>& tree, int threads) : tree_(tree), threads_(threads) {}

  void normals(const NormalParams& p, MatrixView<float> normals, ArrayView<float> curvature,
               SearchTimings& search, NormalTimings& t) {
    const std::int64_t n = tree_.size();
    const double vp[3] = {p.viewpoint[0], p.viewpoint[1], p.viewpoint[2]};
    const TreeCoords at{tree_};
    // The normal and curvature of `row` from its neighbors ids[0 .. count).
    const auto write = [&](std::int64_t row, const std::int32_t* ids, std::int64_t count) {
      double self[3];
      at.self(row, self);
      float out[4];
      point_normal(at, ids, count, self, vp, out);
      std::memcpy(normals.data + row * 3, out, 3 * sizeof(float));
      curvature.data[row] = out[3];
    };
    // Rows [first, first + rows): row i's neighbors are ids(i)[0 .. count(i)).
    auto compute = [&](std::int64_t first, std::int64_t rows, auto&& ids, auto&& count) {
      const auto t0 = Clock::now();
      parallel_blocks(threads_, rows, 2048, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) write(first + i, ids(i), count(i));
      });
      t.normals_ms += ms_since(t0);
    };
    t.passes = 0;
    if (p.k > 0 || p.max_nn > 0) {
      // Dense rows (kNN, or the max_nn nearest within the radius), at most 256 MB of them at once.
      const int k = p.k > 0 ? p.k : p.max_nn;
      const double limit = p.k > 0 ? std::numeric_limits<double>::infinity() : p.radius * p.radius;
      const std::int64_t per =
          std::max<std::int64_t>(1, std::min<std::int64_t>(n, (std::int64_t{256} << 20) / (8 * k)));
      std::vector<std::int32_t> idx;
      std::vector<float> d2;
      try {
        idx.resize(static_cast<std::size_t>(per * k));
        d2.resize(idx.size());
      } catch (const std::bad_alloc&) {
        throw_oom("for the neighbor lists of the normals", per * k * 8);
      }
      for (std::int64_t first = 0; first < n; first += per) {
        const std::int64_t rows = std::min(per, n - first);
        dense(nullptr, first, rows, k, limit, false, {idx.data(), rows, k}, {d2.data(), rows, k},
              search);
        t.search_ms += search.total_ms;
        ++t.passes;
        compute(
            first, rows, [&](std::int64_t i) { return idx.data() + i * k; },
            [&](std::int64_t) { return std::int64_t{k}; });
      }
    } else {
      // Every neighbor within the radius, each group of queries' rows turned into normals as
      // soon as they are found: memory for one group's neighbors a thread, not for every pair
      // of the cloud at once (a large radius was an allocation that ended the process, or a
      // late out-of-memory error). The rows and their order are radius()'s: the same normals.
      const auto t0 = Clock::now();
      search = SearchTimings{};
      search.backend = Backend::cpu;
      QueryOrder<T> order(tree_, nullptr, 0, -1, false, threads_);
      const auto t1 = Clock::now();
      const double r2 = p.radius * p.radius;
      std::atomic<std::int64_t> evaluated{0}, pca_ns{0};
      parallel_blocks(threads_, order.groups(), kGroupBlock, [&](std::int64_t gb, std::int64_t ge) {
        Scratch& sc = scratch();
        std::vector<std::int32_t> ids;
        std::int64_t ev = 0, ns = 0;
        for (std::int64_t g = gb; g < ge; ++g) {
          ev += radius_rows(tree_, order, g, r2, sc);
          const auto tp = Clock::now();
          auto f = sc.found.begin();
          for (std::size_t j = 0; j < sc.rows.size(); ++j) {
            const std::int64_t c = sc.counts[j];
            ids.resize(static_cast<std::size_t>(c));
            for (std::int64_t m = 0; m < c; ++m) ids[m] = (f + m)->second;
            write(sc.rows[j], ids.data(), c);
            f += c;
          }
          ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tp).count();
        }
        evaluated += ev;
        pca_ns += ns;
      });
      for (const std::int32_t row : order.padded()) write(row, nullptr, 0);  // not finite
      finish(search, t0, t1, evaluated);
      // One loop: the covariances' share of its wall clock is their thread time over the
      // threads, the search the rest.
      const std::int64_t blocks = (order.groups() + kGroupBlock - 1) / kGroupBlock;
      const int used = static_cast<int>(std::clamp<std::int64_t>(threads_, 1, blocks));
      t.normals_ms = static_cast<double>(pca_ns.load()) / 1e6 / used;
      t.search_ms = std::max(0.0, search.total_ms - t.normals_ms);
      t.passes = 1;
    }
  }

 private:
  // Coordinates of indexed points by original index, for core/normal_math.hpp.
  struct TreeCoords {
    const Tree<T>& tree;
    void operator()(std::int32_t id, double c[3]) const {
      const std::int32_t p = tree.position(id);
      c[0] = tree.xs()[p];
      c[1] = tree.ys()[p];
      c[2] = tree.zs()[p];
    }
    // Point i's own coordinates; NaN when it is not finite (it is not in the tree).
    void self(std::int64_t i, double c[3]) const {
      if (tree.position(i) < 0) {
        c[0] = c[1] = c[2] = std::numeric_limits<double>::quiet_NaN();
        return;
      }
      (*this)(static_cast<std::int32_t>(i), c);
    }
  };

 public:
  RadiusResult radius(const PointsView* queries, const RadiusParams& params, SearchTimings& t) {
    const auto t0 = Clock::now();
    begin(queries, t);
    QueryOrder<T> order(tree_, queries, 0, -1, params.exclude_self, threads_);
    const auto t1 = Clock::now();
    RadiusResult r;
    r.rows = order.rows();
    const double r2 = params.radius * params.radius;
    std::atomic<std::int64_t> evaluated{0};
    try {
      // Rows are found in search order into per-block buffers, then copied to their CSR place.
      const std::int64_t groups = order.groups();
      const std::int64_t blocks = (groups + kGroupBlock - 1) / kGroupBlock;
      // Held as the float the result keeps (the order is settled before), and sized from the
      // hits per query so far: big results are mostly memory traffic.
      struct Found {
        float d;
        std::int32_t id;
      };
      std::vector<std::vector<Found>> found(static_cast<std::size_t>(blocks));
      std::vector<std::int64_t> counts(static_cast<std::size_t>(r.rows), 0);
      std::atomic<std::int64_t> hits_so_far{0}, queries_so_far{0};
      parallel_blocks(threads_, groups, kGroupBlock, [&](std::int64_t gb, std::int64_t ge) {
        auto& out = found[static_cast<std::size_t>(gb / kGroupBlock)];
        std::int64_t first, last, leaf;
        order.group(gb, first, last, leaf);
        order.group(ge - 1, last, last, leaf);
        const std::int64_t done = queries_so_far.load(std::memory_order_relaxed);
        const std::int64_t per_query =
            done > 0 ? hits_so_far.load(std::memory_order_relaxed) / done + 1 : 8;
        out.reserve(static_cast<std::size_t>((last - first) * per_query * 5 / 4));
        Scratch& s = scratch();
        std::int64_t ev = 0;
        for (std::int64_t g = gb; g < ge; ++g) {
          ev += radius_rows(tree_, order, g, r2, s);
          for (const auto& f : s.found) out.push_back({static_cast<float>(f.first), f.second});
          for (std::size_t j = 0; j < s.rows.size(); ++j) counts[s.rows[j]] = s.counts[j];
        }
        hits_so_far += static_cast<std::int64_t>(out.size());
        queries_so_far += last - first;
        evaluated += ev;
      });
      r.offsets.assign(static_cast<std::size_t>(r.rows) + 1, 0);
      for (std::int64_t q = 0; q < r.rows; ++q) r.offsets[q + 1] = r.offsets[q] + counts[q];
      const std::int64_t total = r.offsets[r.rows];
      r.indices.resize(static_cast<std::size_t>(total));
      r.sqdist.resize(static_cast<std::size_t>(total));
      parallel_blocks(threads_, blocks, 1, [&](std::int64_t blk, std::int64_t) {
        const auto& in = found[static_cast<std::size_t>(blk)];
        std::size_t at = 0;
        const std::int64_t g_end = std::min(groups, (blk + 1) * kGroupBlock);
        for (std::int64_t g = blk * kGroupBlock; g < g_end; ++g) {
          std::int64_t begin, end, leaf;
          order.group(g, begin, end, leaf);
          for (std::int64_t i = begin; i < end; ++i) {
            const std::int32_t row = order.get(i).row;
            std::int64_t o = r.offsets[row];
            for (std::int64_t c = 0; c < counts[row]; ++c, ++at, ++o) {
              r.indices[o] = in[at].id;
              r.sqdist[o] = in[at].d;
            }
          }
        }
        std::vector<Found>().swap(found[blk]);
      });
    } catch (const std::bad_alloc&) {
      throw_oom("for the radius result", 0);
    }
    finish(t, t0, t1, evaluated);
    return r;
  }

  std::int64_t radius_count(const PointsView* queries, const RadiusParams& params,
                            ArrayView<std::int64_t> offsets, SearchTimings& t) {
    const auto t0 = Clock::now();
    begin(queries, t);
    expect_host(offsets.memory, "the offsets");
    QueryOrder<T> order(tree_, queries, 0, -1, params.exclude_self, threads_);
    PCNN_EXPECTS(offsets.size == order.rows() + 1,
                 "radius_count: the offsets must have one entry per query plus one");
    const auto t1 = Clock::now();
    const double r2 = params.radius * params.radius;
    std::atomic<std::int64_t> evaluated{0};
    std::int64_t* counts = offsets.data + 1;  // counts first, prefix-summed in place after
    for (std::int32_t row : order.padded()) counts[row] = 0;
    parallel_blocks(threads_, order.groups(), kGroupBlock, [&](std::int64_t gb, std::int64_t ge) {
      Scratch& s = scratch();
      std::int64_t ev = 0;
      for (std::int64_t g = gb; g < ge; ++g) {
        s.rows.clear();
        const std::int64_t leaf = load_group(order, g, s);
        const int m = static_cast<int>(s.queries.size());
        s.counts.assign(static_cast<std::size_t>(m), 0);
        ev += radius_group(tree_, s.queries.data(), m, leaf, r2, s.group,
                           [&](int j, double, std::int32_t) { ++s.counts[j]; });
        for (int j = 0; j < m; ++j) counts[s.rows[j]] = s.counts[j];
      }
      evaluated += ev;
    });
    offsets.data[0] = 0;
    for (std::int64_t q = 1; q <= order.rows(); ++q) offsets.data[q] += offsets.data[q - 1];
    finish(t, t0, t1, evaluated);
    return offsets.data[order.rows()];
  }

  void radius_fill(const PointsView* queries, std::int64_t first_row, const RadiusParams& params,
                   ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                   ArrayView<float> sqdist, SearchTimings& t) {
    const auto t0 = Clock::now();
    begin(queries, t);
    expect_host(offsets.memory, "the offsets");
    expect_host(indices.memory, "the indices");
    expect_host(sqdist.memory, "the distances");
    const std::int64_t rows = offsets.size - 1;
    const bool range = !queries && !(first_row == 0 && rows == tree_.size());
    QueryOrder<T> order(tree_, queries, range ? first_row : 0, range ? rows : -1,
                        params.exclude_self, threads_);
    PCNN_EXPECTS(order.rows() == rows,
                 "radius_fill: the offsets must have one entry per query plus one");
    const std::int64_t* off = offsets.data;
    const std::int64_t base = off[0];
    PCNN_EXPECTS(base >= 0, "radius_fill: offsets[0] must be >= 0");
    for (std::int64_t q = 0; q < rows; ++q)
      PCNN_EXPECTS(off[q + 1] >= off[q], "radius_fill: the offsets must not decrease");
    PCNN_EXPECTS(indices.size == off[rows] - base && sqdist.size == off[rows] - base,
                 "radius_fill: the outputs must hold offsets[rows] - offsets[0] entries");
    const char* mismatch =
        "radius_fill: the offsets do not match these queries and parameters (call radius_count "
        "with them first)";
    for (std::int32_t row : order.padded()) PCNN_EXPECTS(off[row + 1] == off[row], mismatch);
    const auto t1 = Clock::now();
    const double r2 = params.radius * params.radius;
    std::atomic<std::int64_t> evaluated{0};
    parallel_blocks(threads_, order.groups(), kGroupBlock, [&](std::int64_t gb, std::int64_t ge) {
      Scratch& s = scratch();
      std::int64_t ev = 0;
      for (std::int64_t g = gb; g < ge; ++g) {
        ev += radius_rows(tree_, order, g, r2, s);
        auto at = s.found.begin();
        for (std::size_t j = 0; j < s.rows.size(); ++j) {
          const std::int32_t row = s.rows[j];
          const std::int64_t c = s.counts[j];
          PCNN_EXPECTS(c == off[row + 1] - off[row], mismatch);
          std::int64_t o = off[row] - base;
          for (auto it = at; it != at + c; ++it, ++o) {
            indices.data[o] = it->second;
            sqdist.data[o] = static_cast<float>(it->first);
          }
          at += c;
        }
      }
      evaluated += ev;
    });
    finish(t, t0, t1, evaluated);
  }

  // kNN (limit = +inf) and hybrid (limit = r²) rows.
  void dense(const PointsView* queries, std::int64_t first_row, std::int64_t rows, int k,
             double limit, bool exclude_self, MatrixView<std::int32_t> indices,
             MatrixView<float> sqdist, SearchTimings& t) {
    const auto t0 = Clock::now();
    begin(queries, t);
    expect_host(indices.memory, "the indices");
    expect_host(sqdist.memory, "the distances");
    PCNN_EXPECTS(k >= 1 && k <= kMaxK, "k must be in 1..128");
    PCNN_EXPECTS(queries || rows < 0 || (first_row >= 0 && first_row + rows <= tree_.size()),
                 "self-search rows out of range");
    QueryOrder<T> order(tree_, queries, first_row, rows, exclude_self, threads_);
    PCNN_EXPECTS(indices.rows == order.rows() && indices.cols == k && sqdist.rows == order.rows() &&
                     sqdist.cols == k,
                 "the outputs must be rows x k");
    const auto t1 = Clock::now();
    for (std::int32_t row : order.padded())
      pad_row(indices.data + std::int64_t{row} * k, sqdist.data + std::int64_t{row} * k, k);
    std::atomic<std::int64_t> evaluated{0};
    if (k <= 8)
      dense_rows<Best<8>>(order, k, limit, indices, sqdist, evaluated);
    else if (k <= 16)
      dense_rows<Best<16>>(order, k, limit, indices, sqdist, evaluated);
    else if (k <= 32)
      dense_rows<Best<32>>(order, k, limit, indices, sqdist, evaluated);
    else
      dense_rows<Best<kMaxK>>(order, k, limit, indices, sqdist, evaluated);
    finish(t, t0, t1, evaluated);
  }

 private:
  void begin(const PointsView* queries, SearchTimings& t) const {
    t = SearchTimings{};
    t.backend = Backend::cpu;
    if (queries) expect_host(queries->memory, "the queries");
  }

  static void finish(SearchTimings& t, Clock::time_point t0, Clock::time_point t1,
                     const std::atomic<std::int64_t>& evaluated) {
    t.build_ms = static_cast<float>(std::chrono::duration<double, std::milli>(t1 - t0).count());
    t.search_ms = static_cast<float>(ms_since(t1));
    t.total_ms = ms_since(t0);
    t.distance_evaluations = evaluated.load();
  }

  template <class BestK>
  void dense_rows(const QueryOrder<T>& order, int k, double limit, MatrixView<std::int32_t> indices,
                  MatrixView<float> sqdist, std::atomic<std::int64_t>& evaluated) const {
    parallel_blocks(threads_, order.groups(), kGroupBlock, [&](std::int64_t gb, std::int64_t ge) {
      // Rows are found in search order but live in query order: written as found, each row
      // is a cache miss that stalls the search, while a burst of them afterwards overlaps.
      thread_local std::vector<BestK> best(kMaxGroup);
      Scratch& s = scratch();
      s.rows.clear();
      s.ids.resize(static_cast<std::size_t>(kGroupBlock * kMaxGroup * k));
      s.d2.resize(s.ids.size());
      std::int64_t ev = 0;
      for (std::int64_t g = gb; g < ge; ++g) {
        const std::size_t first = s.rows.size();
        const std::int64_t leaf = load_group(order, g, s);
        const int m = static_cast<int>(s.queries.size());
        ev += knn_group(tree_, s.queries.data(), m, leaf, k, limit, best.data(), s.group);
        for (int j = 0; j < m; ++j)
          best[j].write(s.ids.data() + (first + j) * k, s.d2.data() + (first + j) * k);
      }
      for (std::size_t i = 0; i < s.rows.size(); ++i) {
        std::memcpy(indices.data + std::int64_t{s.rows[i]} * k, s.ids.data() + i * k,
                    sizeof(std::int32_t) * k);
        std::memcpy(sqdist.data + std::int64_t{s.rows[i]} * k, s.d2.data() + i * k,
                    sizeof(float) * k);
      }
      evaluated += ev;
    });
  }

  const Tree<T>& tree_;
  const int threads_;
};

class CpuBackend final : public Index::Backend_ {
  // f(searches over the tree that holds the points). Defined first: its return type is deduced.
  template <class F>
  decltype(auto) with_searches(F&& f) const {
    if (double_) return f(Searches<double>(tree64_, threads_));
    return f(Searches<float>(tree32_, threads_));
  }

 public:
  explicit CpuBackend(const IndexOptions& options) {
    PCNN_EXPECTS(options.threads >= 0, "IndexOptions::threads must be >= 0 (0: every core)");
    threads_ = options.threads > 0 ? options.threads : detail::usable_cpus();
    threads_ = std::max(threads_, 1);
  }

  void build(PointsView points, cudaStream_t, SearchTimings& t) override {
    const auto t0 = Clock::now();
    t = SearchTimings{};
    t.backend = Backend::cpu;
    expect_host(points.memory, "the points");
    // A failed build leaves an empty index, never a half-built one. The tree of the other
    // coordinate type gives its memory back.
    try {
      double_ = points.is_double();
      if (double_) {
        tree32_ = Tree<float>{};
        tree64_.build(points, threads_);
      } else {
        tree64_ = Tree<double>{};
        tree32_.build(points, threads_);
      }
    } catch (const std::bad_alloc&) {
      clear();
      throw_oom("to build the index", points.count * (points.is_double() ? 80 : 48));
    } catch (...) {
      clear();
      throw;
    }
    t.build_ms = static_cast<float>(ms_since(t0));
    t.total_ms = ms_since(t0);
  }

  Backend kind() const override { return Backend::cpu; }
  std::int64_t size() const override { return double_ ? tree64_.size() : tree32_.size(); }
  std::int64_t finite_size() const override {
    return double_ ? tree64_.finite_size() : tree32_.finite_size();
  }

  void knn(const PointsView* queries, std::int64_t first_row, const KnnParams& params,
           MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t, bool,
           SearchTimings& t) override {
    with_searches([&](auto s) {
      s.dense(queries, queries ? 0 : first_row, queries ? -1 : indices.rows, params.k,
              std::numeric_limits<double>::infinity(), params.exclude_self, indices, sqdist, t);
    });
  }

  void hybrid(const PointsView* queries, std::int64_t first_row, const HybridParams& params,
              MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t,
              SearchTimings& t) override {
    with_searches([&](auto s) {
      s.dense(queries, queries ? 0 : first_row, queries ? -1 : indices.rows, params.max_nn,
              params.radius * params.radius, params.exclude_self, indices, sqdist, t);
    });
  }

  RadiusResult radius(const PointsView* queries, const RadiusParams& params, cudaStream_t,
                      SearchTimings& t) override {
    return with_searches([&](auto s) { return s.radius(queries, params, t); });
  }

  std::int64_t radius_count(const PointsView* queries, const RadiusParams& params,
                            ArrayView<std::int64_t> offsets, cudaStream_t,
                            SearchTimings& t) override {
    return with_searches([&](auto s) { return s.radius_count(queries, params, offsets, t); });
  }

  void normals(const NormalParams& p, MatrixView<float> normals, ArrayView<float> curvature,
               cudaStream_t, SearchTimings& search, NormalTimings& t) override {
    with_searches([&](auto s) { s.normals(p, normals, curvature, search, t); });
  }

  void radius_fill(const PointsView* queries, std::int64_t first_row, const RadiusParams& params,
                   ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                   ArrayView<float> sqdist, cudaStream_t, SearchTimings& t) override {
    with_searches(
        [&](auto s) { s.radius_fill(queries, first_row, params, offsets, indices, sqdist, t); });
  }

 private:
  void clear() {
    tree32_ = Tree<float>{};
    tree64_ = Tree<double>{};
    double_ = false;
  }

  int threads_ = 1;
  bool double_ = false;  // the points are float64: tree64_ holds them, else tree32_
  Tree<float> tree32_;
  Tree<double> tree64_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Index::Backend_> make_cpu_backend(const IndexOptions& options) {
  return std::make_unique<cpu::CpuBackend>(options);
}

}  // namespace detail
}  // namespace pcnn
