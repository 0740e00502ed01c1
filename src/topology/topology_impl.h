// Internal: what a Topology keeps beside its public fields (the Boost.Graph
// graph, the classes of interchangeable GPUs, the well-connected groups and
// the memo of chosen sets). Not part of the public API.

#ifndef GPUSHARE_TOPOLOGY_TOPOLOGY_IMPL_H_
#define GPUSHARE_TOPOLOGY_TOPOLOGY_IMPL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "boost/graph/adjacency_list.hpp"
#include "gpushare/topology.h"

namespace gpushare {

// One vertex per GPU; one edge per pair, weighted by the link's bandwidth.
using TopologyGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property,
                          boost::property<boost::edge_weight_t, double>>;

struct Topology::Impl {
  TopologyGraph graph;
  // twin[i]: the smallest GPU with the same links as GPU i to every other GPU
  // (GPUs of one twin class can be swapped without changing any link).
  std::vector<int> twin;
  // For each group size in kGroupSizes that is <= the GPU count: the weakest
  // link of the best group of that size, and every group of that size that
  // good as a bit mask (unless there are more than kMaxGroups; then
  // `all_groups` says whether every such subset qualifies, as on uniform
  // topologies, or the size is left out).
  struct GroupLevel {
    int size = 0;
    double threshold = 0;
    std::vector<uint64_t> groups;
    bool all_groups = false;  // Every subset of `size` GPUs qualifies.
    bool skipped = false;     // Too many groups to list, not all: ignored.
  };
  std::vector<GroupLevel> levels;

  mutable std::mutex memo_mutex;
  mutable absl::flat_hash_map<std::string, GpuSetChoice> memo;

  // IdealMeasure() per (objective, k), filled on first use; < 0: not yet.
  mutable std::array<std::array<std::atomic<double>, 65>, 2> ideal;
  Impl() {
    for (auto& row : ideal) {
      for (auto& v : row) v.store(-1, std::memory_order_relaxed);
    }
  }
};

// The measure `objective` ranks sets by first (Topology::IdealMeasure()).
inline double MeasureOf(const GpuSetChoice& set, TopologyObjective objective) {
  return objective == TopologyObjective::kWeakestLink ? set.weakest_weight : set.total_weight;
}

// Group sizes the leftover rule counts, most important first.
inline constexpr int kGroupSizes[] = {8, 4, 2};
inline constexpr size_t kMaxGroups = 4096;
inline constexpr size_t kMaxMemo = 65536;
// Topology::Choose()'s search extends at most kMaxChooseSteps partial sets
// and judges at most kMaxChooseSets complete ones (see its comment). Enough
// for every set of a node of up to 16 GPUs: its search tree has fewer than
// 2^17 nodes, and C(16, 8) = 12,870 sets at most.
inline constexpr int64_t kMaxChooseSteps = int64_t{1} << 17;
inline constexpr int64_t kMaxChooseSets = int64_t{1} << 14;

}  // namespace gpushare

#endif  // GPUSHARE_TOPOLOGY_TOPOLOGY_IMPL_H_
