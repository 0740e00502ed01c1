#include "src/sim/migrate.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpushare/policy.h"

namespace gpushare::sim {
namespace {

// Removal sets are searched up to this size (see MoveLimits).
constexpr int kMaxRemoved = 3;
// Removal sets are searched on this many nodes per donor node wanted.
constexpr size_t kExaminedPerNode = 4;

// How far node `i` is from taking task `t`: (GPU compute, CPU, host memory
// missing), or nullopt when it could not take it even empty.
std::optional<std::tuple<int64_t, int64_t, int64_t>> Missing(const Prepared& p, const Task& t,
                                                            int i, const NodeStatus& n) {
  if (!n.schedulable) return std::nullopt;
  if (t.k.kind == Demand::Kind::kShared && !n.gpu_sharing) return std::nullopt;
  if (n.cpu > 0 && t.k.cpu > n.cpu) return std::nullopt;
  if (n.host_memory > 0 && t.host_memory > n.host_memory) return std::nullopt;
  const int64_t cpu = n.cpu > 0 ? std::max<int64_t>(0, t.k.cpu - (n.cpu - n.cpu_used)) : 0;
  const int64_t mem =
      n.host_memory > 0
          ? std::max<int64_t>(0, t.host_memory - (n.host_memory - n.host_memory_used))
          : 0;
  int64_t gpu = 0;
  if (t.k.kind != Demand::Kind::kCpuOnly) {
    if (static_cast<int>(n.gpus.size()) < t.k.gpu_count) return std::nullopt;
    if (t.spec >= 0 && !p.spec_allows[t.spec][p.node_model[i]]) return std::nullopt;
    std::vector<int64_t> left;
    for (const GpuStatus& g : n.gpus) left.push_back(g.compute_free());
    std::sort(left.rbegin(), left.rend());
    for (int j = 0; j < t.k.gpu_count; ++j) gpu += std::max<int64_t>(0, t.k.compute - left[j]);
  }
  return std::make_tuple(gpu, cpu, mem);
}

// A placed task on a donor node.
struct Held {
  int64_t slot;
  const Placement* placement;
};

// Whether task `t` fits on node `n` once the tasks `removed` have left it.
bool FitsWithout(const Task& t, const NodeStatus& n, const std::vector<const Placement*>& removed) {
  int64_t cpu = n.cpu - n.cpu_used, mem = n.host_memory - n.host_memory_used;
  std::vector<int64_t> used(n.gpus.size()), holders(n.gpus.size());
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    used[g] = n.gpus[g].compute_used;
    holders[g] = n.gpus[g].holders;
  }
  for (const Placement* q : removed) {
    cpu += q->cpu;
    mem += q->host_memory;
    for (int g : q->gpus) {
      used[g] -= q->exclusive ? kGpuCompute : q->compute_per_gpu;
      --holders[g];
    }
  }
  if (n.cpu > 0 && cpu < t.k.cpu) return false;
  if (n.host_memory > 0 && mem < t.host_memory) return false;
  if (t.k.kind == Demand::Kind::kCpuOnly) return true;
  int fitting = 0;
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    fitting += t.k.kind == Demand::Kind::kExclusive ? holders[g] == 0
                                                    : kGpuCompute - used[g] >= t.k.compute;
  }
  return fitting >= t.k.gpu_count;
}

// The fewest of `held` (at most `most`) whose removal lets `t` fit on `n`,
// or 0 when no such set exists; `pods` gets the slots of every set of that
// size, each once, in slot order.
int FewestRemovals(const Task& t, const NodeStatus& n, const std::vector<Held>& held, int most,
                   std::vector<int64_t>* pods) {
  const int h = static_cast<int>(held.size());
  std::vector<uint8_t> in(held.size(), 0);
  for (int size = 1; size <= std::min(most, h); ++size) {
    // Every set of `size` indices, as an increasing sequence.
    std::vector<int> pick(size);
    for (int j = 0; j < size; ++j) pick[j] = j;
    bool any = false;
    std::vector<const Placement*> removed(size);
    while (true) {
      for (int j = 0; j < size; ++j) removed[j] = held[pick[j]].placement;
      if (FitsWithout(t, n, removed)) {
        any = true;
        for (int j : pick) in[j] = 1;
      }
      int j = size - 1;
      while (j >= 0 && pick[j] == h - size + j) --j;
      if (j < 0) break;
      ++pick[j];
      for (int k = j + 1; k < size; ++k) pick[k] = pick[k - 1] + 1;
    }
    if (any) {
      for (int j = 0; j < h; ++j) {
        if (in[j]) pods->push_back(held[j].slot);
      }
      return size;
    }
  }
  return 0;
}

}  // namespace

std::string SlotId(int64_t slot) { return absl::StrCat("#", slot); }

absl::StatusOr<MigrationPlan> PlanRescue(const Cluster& cluster, const Prepared& p, int task,
                                         const Request& request,
                                         const SlotTasks& slot_task,
                                         const MoveLimits& limits) {
  const Task& t = p.tasks[task];
  const int most = std::min(limits.max_moves, kMaxRemoved);
  // The nodes that could take the task and miss the least of it: (missing
  // GPU compute, CPU, host memory, node index).
  std::vector<std::tuple<int64_t, int64_t, int64_t, int>> close;
  const std::vector<Node>& nodes = *p.nodes;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    const NodeStatus* n = cluster.FindNode(nodes[i].name);
    if (n == nullptr || n->requests.empty()) continue;
    if (const auto m = Missing(p, t, i, *n)) {
      close.emplace_back(std::get<0>(*m), std::get<1>(*m), std::get<2>(*m), i);
    }
  }
  const size_t examined =
      std::min<size_t>(close.size(), kExaminedPerNode * static_cast<size_t>(limits.nodes));
  std::partial_sort(close.begin(), close.begin() + static_cast<std::ptrdiff_t>(examined),
                    close.end());
  // Per donor among those: (fewest removals, missing GPU compute, CPU, host
  // memory, node index), and the requests of its smallest removal sets.
  std::vector<std::tuple<int, int64_t, int64_t, int64_t, int>> donors;
  absl::flat_hash_map<int, std::vector<int64_t>> removable;
  for (size_t c = 0; c < examined; ++c) {
    const auto [gpu, cpu, mem, i] = close[c];
    const NodeStatus* n = cluster.FindNode(nodes[i].name);
    std::vector<Held> held;
    for (const std::string& id : n->requests) {
      int64_t slot = 0;
      const Placement* placed = cluster.FindPlacement(id);
      if (id.size() > 1 && absl::SimpleAtoi(id.substr(1), &slot) && slot_task.contains(slot) &&
          placed != nullptr) {
        held.push_back({slot, placed});
      }
    }
    std::sort(held.begin(), held.end(),
              [](const Held& a, const Held& b) { return a.slot < b.slot; });
    std::vector<int64_t> pods;
    const int need = FewestRemovals(t, *n, held, most, &pods);
    if (need == 0) continue;
    donors.emplace_back(need, gpu, cpu, mem, i);
    removable[i] = std::move(pods);
  }
  const size_t keep = std::min<size_t>(donors.size(), static_cast<size_t>(limits.nodes));
  std::partial_sort(donors.begin(), donors.begin() + static_cast<std::ptrdiff_t>(keep),
                    donors.end());
  // Of those, only the tasks that fit somewhere now (a move needs a place to
  // go; one that frees room for another is a chain, not searched), and only
  // the nodes that need the fewest of them: the planner deepens move by move,
  // so nodes that need more would only cost it tries.
  std::shared_ptr<Policy> binpack = *MakePolicy("binpack");
  std::vector<Request> movable;
  int least = 0;
  for (size_t d = 0; d < keep; ++d) {
    const int need = std::get<0>(donors[d]);
    if (least > 0 && need > least) break;
    std::vector<Request> from_node;
    for (int64_t slot : removable[std::get<4>(donors[d])]) {
      Request r = (*p.requests)[slot_task.at(slot).first];
      r.id = absl::StrCat(SlotId(slot), "'");
      if (!cluster.Plan(r, *binpack).ok()) continue;
      r.id = SlotId(slot);
      from_node.push_back(std::move(r));
    }
    if (static_cast<int>(from_node.size()) < need) continue;
    least = need;
    for (Request& r : from_node) movable.push_back(std::move(r));
  }
  if (movable.empty()) {
    MigrationPlan none;
    none.request = request;
    none.reason = absl::StrCat("no node could take the request after removing at most ", most,
                               " of its requests");
    return none;
  }
  return cluster.PlanMigrations(request, limits.max_moves, movable, limits.search_budget);
}

std::vector<Engine::Moved> MoveForTask(Cluster& cluster, const Prepared& p, int task,
                                       int64_t slot,
                                       const SlotTasks& slot_task,
                                       const absl::flat_hash_map<std::string, int>& node_index,
                                       const MoveLimits& limits) {
  Request request = (*p.requests)[task];
  request.id = SlotId(slot);
  absl::StatusOr<MigrationPlan> plan = PlanRescue(cluster, p, task, request, slot_task, limits);
  std::vector<Engine::Moved> moved;
  if (!plan.ok() || !plan->found || plan->moves.empty() || !cluster.ApplyMigrations(*plan).ok()) {
    return moved;
  }
  for (const Migration& m : plan->moves) {
    int64_t moved_slot = 0;
    if (!absl::SimpleAtoi(m.pod.id.substr(1), &moved_slot)) continue;  // Ids are SlotId()s.
    uint64_t gpus = 0;
    for (int g : m.to.gpus) gpus |= uint64_t{1} << g;
    moved.push_back({moved_slot, node_index.at(m.from.node), node_index.at(m.to.node), gpus});
  }
  return moved;
}

}  // namespace gpushare::sim
