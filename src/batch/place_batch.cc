// Cluster::PlaceBatch(): one-by-one placement as the floor, then a min-cost
// flow (identical single-GPU shared requests) or a bounded branch and bound
// (anything else) for a result that places more. See cluster.h.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/successive_shortest_path_nonnegative_weights.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "src/batch/candidates.h"
#include "src/internal/cluster_state.h"

namespace gpushare {
namespace {

using Assignment = std::vector<std::optional<Placement>>;

int CountPlaced(const Assignment& a) {
  int n = 0;
  for (const auto& p : a) n += p.has_value() ? 1 : 0;
  return n;
}

void Block(internal::GpuSet& set, const Placement& p) {
  for (int g : p.gpus) set.insert({p.node, g});
}
void Unblock(internal::GpuSet& set, const Placement& p) {
  for (int g : p.gpus) set.erase({p.node, g});
}
bool Touches(const internal::GpuSet& set, const Placement& p) {
  for (int g : p.gpus) {
    if (set.count({p.node, g}) > 0) return true;
  }
  return false;
}

// One-by-one placement in the given order on a copy: the policy's choice,
// or with a gang, the first candidate that shares no GPU with the gang when
// the policy's choice does.
Assignment Sequential(const Cluster& cluster, const std::vector<Request>& requests,
                      const std::vector<Demand>& demands, Policy& policy, bool gang) {
  Cluster scratch(cluster);
  internal::GpuSet held;
  Assignment out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<Placement> p = scratch.Plan(requests[i], policy);
    std::optional<Placement> chosen;
    if (p.ok() && !(gang && Touches(held, *p))) {
      chosen = *std::move(p);
    } else if (p.ok()) {
      std::vector<Placement> c =
          internal::CandidatePlacements(scratch, requests[i], demands[i], &held);
      if (!c.empty()) chosen = std::move(c.front());
    }
    if (chosen.has_value() && scratch.Commit(*chosen).ok()) {
      if (gang) Block(held, *chosen);
      out[i] = std::move(chosen);
    }
  }
  return out;
}

// Identical single-GPU shared requests: the same shape and constraints.
bool IdenticalSingleGpu(const std::vector<Request>& requests,
                        const std::vector<Demand>& demands) {
  if (requests.empty()) return false;
  const Demand& d0 = demands[0];
  const Request& r0 = requests[0];
  std::vector<std::string> models0 = r0.gpu_models;
  std::sort(models0.begin(), models0.end());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Demand& d = demands[i];
    if (d.kind != Demand::Kind::kShared || d.gpu_count != 1) return false;
    if (std::tie(d.memory_per_gpu, d.compute_per_gpu, d.cpu, d.host_memory) !=
        std::tie(d0.memory_per_gpu, d0.compute_per_gpu, d0.cpu, d0.host_memory)) {
      return false;
    }
    std::vector<std::string> models = requests[i].gpu_models;
    std::sort(models.begin(), models.end());
    if (models != models0 || requests[i].node_selector != r0.node_selector) return false;
  }
  return true;
}

// How many copies of `need` fit in `free` (`need` 0: unlimited, capped).
int64_t Copies(int64_t free, int64_t need, int64_t cap) {
  if (need <= 0) return cap;
  return std::min(cap, std::max<int64_t>(0, free / need));
}

// The maximum flow of least cost: source -> GPU (capacity: copies its free
// memory and compute hold; 1 for a gang; cost: its free memory, so the
// fullest GPUs are filled first) -> node (capacity: copies its free host CPU
// and memory hold) -> sink, with the source's supply capped at the batch size
// by a first edge. Returns the assignment of requests, in order, to GPUs.
Assignment FlowAssignment(const Cluster& cluster, const std::vector<Request>& requests,
                          const Demand& demand, bool gang) {
  using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
  using Graph = boost::adjacency_list<
      boost::vecS, boost::vecS, boost::directedS, boost::no_property,
      boost::property<boost::edge_capacity_t, int64_t,
          boost::property<boost::edge_residual_capacity_t, int64_t,
              boost::property<boost::edge_reverse_t, Traits::edge_descriptor,
                  boost::property<boost::edge_weight_t, int64_t>>>>>;
  using Edge = Traits::edge_descriptor;
  const int64_t n = static_cast<int64_t>(requests.size());
  Graph g;
  auto capacity = boost::get(boost::edge_capacity, g);
  auto reverse = boost::get(boost::edge_reverse, g);
  auto weight = boost::get(boost::edge_weight, g);
  auto add = [&](size_t from, size_t to, int64_t cap, int64_t cost) {
    Edge e = boost::add_edge(from, to, g).first;
    Edge r = boost::add_edge(to, from, g).first;
    capacity[e] = cap;
    capacity[r] = 0;
    weight[e] = cost;
    weight[r] = -cost;
    reverse[e] = r;
    reverse[r] = e;
    return e;
  };
  const size_t super = boost::add_vertex(g), source = boost::add_vertex(g),
               sink = boost::add_vertex(g);
  add(super, source, n, 0);
  struct GpuEdge {
    Edge edge;
    std::string node;
    int gpu;
  };
  std::vector<GpuEdge> gpu_edges;
  std::vector<int> fitting;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus& node = *cluster.FindNode(name);
    if (internal::CheckNode(node, demand, requests[0], &fitting).has_value()) continue;
    int64_t host = n;
    if (node.cpu > 0) host = Copies(node.cpu - node.cpu_used, demand.cpu, host);
    if (node.host_memory > 0) {
      host = Copies(node.host_memory - node.host_memory_used, demand.host_memory, host);
    }
    const size_t v = boost::add_vertex(g);
    add(v, sink, host, 0);
    for (int i : fitting) {
      const GpuStatus& gpu = node.gpus[i];
      int64_t slots = Copies(gpu.memory_free(), demand.memory_per_gpu, n);
      slots = Copies(gpu.compute_free(), demand.compute_per_gpu, slots);
      if (gang) slots = std::min<int64_t>(slots, 1);
      if (slots == 0) continue;
      const size_t u = boost::add_vertex(g);
      gpu_edges.push_back({add(source, u, slots, gpu.memory_free()), name, i});
      add(u, v, slots, 0);
    }
  }
  boost::successive_shortest_path_nonnegative_weights(g, super, sink);
  auto residual = boost::get(boost::edge_residual_capacity, g);
  Assignment out(requests.size());
  size_t next = 0;
  for (const GpuEdge& e : gpu_edges) {
    for (int64_t f = capacity[e.edge] - residual[e.edge]; f > 0 && next < out.size(); --f) {
      out[next] = internal::MakePlacementOn(requests[next], demand, e.node, {e.gpu});
      ++next;
    }
  }
  return out;
}

// Depth-first branch and bound over the requests in `order`.
class Search {
 public:
  Search(const Cluster& cluster, const std::vector<Request>& requests,
         const std::vector<Demand>& demands, const BatchOptions& options, int floor)
      : scratch_(cluster), requests_(requests), demands_(demands), options_(options),
        best_count_(floor), current_(requests.size()) {
    order_.resize(requests.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    auto size = [&](size_t i) {
      const Demand& d = demands_[i];
      return std::make_tuple(d.kind == Demand::Kind::kExclusive, d.gpu_count,
                             d.memory_per_gpu, d.compute_per_gpu, d.cpu, d.host_memory);
    };
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return size(a) > size(b); });
  }

  // Runs the search; returns whether it finished within the budget.
  bool Run() {
    Visit(0, 0);
    return !aborted_;
  }
  // The best assignment found that places more than the floor, if any.
  const std::optional<Assignment>& best() const { return best_; }

 private:
  void Visit(size_t pos, int placed) {
    const int n = static_cast<int>(order_.size());
    if (aborted_ || best_count_ == n) return;
    if (placed + (n - static_cast<int>(pos)) <= best_count_) return;
    if (static_cast<int>(pos) == n) {
      best_count_ = placed;
      best_ = current_;
      return;
    }
    const size_t i = order_[pos];
    const bool gang = options_.gang_anti_sharing;
    std::vector<Placement> candidates = internal::CandidatePlacements(
        scratch_, requests_[i], demands_[i], gang ? &held_ : nullptr);
    for (Placement& c : candidates) {
      if (++tried_ > options_.search_budget) {
        aborted_ = true;
        return;
      }
      if (!scratch_.Commit(c).ok()) continue;
      if (gang) Block(held_, c);
      current_[i] = c;
      Visit(pos + 1, placed + 1);
      current_[i].reset();
      if (gang) Unblock(held_, c);
      scratch_.Release(c.request_id).IgnoreError();
      if (aborted_ || best_count_ == n) return;
    }
    if (!options_.all_or_nothing) Visit(pos + 1, placed);
  }

  Cluster scratch_;
  const std::vector<Request>& requests_;
  const std::vector<Demand>& demands_;
  const BatchOptions& options_;
  std::vector<size_t> order_;
  int best_count_;
  std::optional<Assignment> best_;
  Assignment current_;
  internal::GpuSet held_;
  int64_t tried_ = 0;
  bool aborted_ = false;
};

}  // namespace

absl::StatusOr<BatchResult> Cluster::PlaceBatch(const std::vector<Request>& requests,
                                                std::string_view policy,
                                                const BatchOptions& options) {
  absl::StatusOr<std::unique_ptr<Policy>> p = MakePolicy(policy);
  if (!p.ok()) return p.status();
  return PlaceBatch(requests, **p, options);
}

absl::StatusOr<BatchResult> Cluster::PlaceBatch(const std::vector<Request>& requests,
                                                Policy& policy,
                                                const BatchOptions& options) {
  if (options.search_budget < 1 || options.search_budget > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search budget ", options.search_budget, " is outside 1..2^40"));
  }
  std::vector<Demand> demands;
  demands.reserve(requests.size());
  absl::flat_hash_set<std::string_view> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<Demand> d = Validate(requests[i]);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          absl::StrCat("requests[", i, "]: ", d.status().message()));
    }
    if (!ids.insert(requests[i].id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "requests[", i, "]: id '", requests[i].id, "' appears twice in the batch"));
    }
    if (FindPlacement(requests[i].id) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat(
          "requests[", i, "]: request '", requests[i].id, "' is already placed"));
    }
    demands.push_back(*d);
  }
  const int n = static_cast<int>(requests.size());
  const bool gang = options.gang_anti_sharing;

  BatchResult result;
  Assignment chosen = Sequential(*this, requests, demands, policy, gang);
  result.method = "sequential";
  int placed = CountPlaced(chosen);
  bool optimal = placed == n;
  if (!optimal && IdenticalSingleGpu(requests, demands)) {
    Assignment flow = FlowAssignment(*this, requests, demands[0], gang);
    // Check the flow's assignment with the cluster's own rules.
    Cluster scratch(*this);
    bool holds = true;
    for (const auto& a : flow) {
      if (a.has_value() && !scratch.Commit(*a).ok()) holds = false;
    }
    if (holds) {
      optimal = true;
      if (CountPlaced(flow) > placed) {
        chosen = std::move(flow);
        placed = CountPlaced(chosen);
        result.method = "flow";
      }
    }
  }
  if (!optimal) {
    Search search(*this, requests, demands, options, placed);
    optimal = search.Run();
    if (search.best().has_value()) {
      chosen = *search.best();
      placed = CountPlaced(chosen);
      result.method = "search";
      optimal = optimal || placed == n;
    }
  }
  if (options.all_or_nothing && placed < n) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not all ", n, " requests of the batch fit: ",
        optimal ? "at most " : "the best found places ", placed,
        optimal ? " do" : " (search budget reached)"));
  }
  // Commit in the given order; the state is the one the assignment was
  // computed on, so this succeeds, but a failure still undoes everything.
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (!chosen[i].has_value()) continue;
    if (absl::Status s = Commit(*chosen[i]); !s.ok()) {
      for (size_t j = 0; j < i; ++j) {
        if (chosen[j].has_value()) Release(chosen[j]->request_id).IgnoreError();
      }
      return absl::InternalError(absl::StrCat("requests[", i, "]: ", s.message()));
    }
  }
  for (const auto& a : chosen) {
    if (a.has_value()) policy.OnCommitted(*a);
  }
  result.placements = std::move(chosen);
  result.placed = placed;
  result.proven_optimal = optimal;
  return result;
}

}  // namespace gpushare
