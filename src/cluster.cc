#include "gpushare/cluster.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/utility/utility.h"
#include "src/internal/cluster_state.h"
#include "src/internal/node_race.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"
#include "src/topology/node_gpus.h"

namespace gpushare {
namespace {

using internal::ClusterState;

// An id no user request carries (users cannot easily write NUL bytes), used
// for the scratch copies that Capacity() places.
std::string ScratchId(int64_t n) {
  return absl::StrCat(std::string("\0capacity-", 10), n);
}

// How many copies of `demand` fit on `node` alone when the policy keeps
// choosing GPUs on it, starting from its current state (a scratch copy).
int64_t FillNode(NodeStatus node, const Demand& demand, const Request& request,
                 Policy& policy, const Cluster& cluster, int64_t limit) {
  std::vector<int> fitting;
  int64_t copies = 0;
  Placement p;
  p.node = node.name;
  p.memory_per_gpu = demand.memory_per_gpu;
  p.compute_per_gpu = demand.compute_per_gpu;
  p.exclusive = demand.kind == Demand::Kind::kExclusive;
  p.cpu = demand.cpu;
  p.host_memory = demand.host_memory;
  while (copies < limit && !internal::CheckNode(node, demand, request, &fitting)) {
    // A CPU-only copy on a node that tracks neither CPU nor memory, or a copy
    // that takes nothing, would fit forever.
    if (demand.kind == Demand::Kind::kCpuOnly &&
        (node.cpu == 0 || demand.cpu == 0) &&
        (node.host_memory == 0 || demand.host_memory == 0)) {
      return limit;
    }
    NodeChoice choice = policy.Evaluate(demand, node, fitting, cluster);
    internal::ApplyTopology(node, demand, request, fitting, &choice);
    p.gpus = std::move(choice.gpus);
    p.request_id = ScratchId(copies);
    internal::ApplyToNode(node, p);
    node.requests.pop_back();  // Keep the scratch node small.
    ++copies;
  }
  return copies;
}

}  // namespace

Cluster::Cluster(ClusterOptions options) : state_(std::make_unique<ClusterState>()) {
  state_->options = options;
}
Cluster::~Cluster() = default;
Cluster::Cluster(const Cluster& other)
    : state_(std::make_unique<ClusterState>(*other.state_)) {}
Cluster& Cluster::operator=(const Cluster& other) {
  if (this != &other) state_ = std::make_unique<ClusterState>(*other.state_);
  return *this;
}
Cluster::Cluster(Cluster&& other) noexcept = default;
Cluster& Cluster::operator=(Cluster&& other) noexcept = default;

const ClusterOptions& Cluster::options() const { return state_->options; }

// ---- Nodes -------------------------------------------------------------------

namespace internal {
namespace {

// Cluster::AddNode(), copying (const Node&) or moving (Node&&, for the
// loaders) the node's strings, labels and GPUs into its status.
template <typename N>
absl::Status AddNodeTo(ClusterState& state, N&& node) {
  GPUSHARE_RETURN_IF_ERROR(ValidateNode(node));
  if (state.node_index.contains(node.name)) {
    return absl::AlreadyExistsError(absl::StrCat("node '", Echo(node.name), "' already exists"));
  }
  for (const Gpu& gpu : node.gpus) {  // (Repeats within the node: ValidateNode.)
    if (gpu.uuid.empty()) continue;
    if (auto it = state.gpu_uuids.find(gpu.uuid); it != state.gpu_uuids.end()) {
      return absl::AlreadyExistsError(absl::StrCat("node '", Echo(node.name), "': GPU UUID '",
                                                   Echo(gpu.uuid), "' already belongs to node '",
                                                   Echo(it->second), "'"));
    }
  }
  for (const Gpu& gpu : node.gpus) {
    if (!gpu.uuid.empty()) state.gpu_uuids.emplace(gpu.uuid, node.name);
  }
  state.node_index.emplace(node.name, static_cast<uint32_t>(state.nodes.size()));
  state.tie_keys.push_back(
      TieKey(state.options.tie_break_seed, node.name, state.next_sequence++));
  state.max_gpus_per_node = std::max(state.max_gpus_per_node, static_cast<int>(node.gpus.size()));
  state.nodes.push_back(MakeNodeStatus(std::forward<N>(node)));
  state.generation.Bump();
  state.index.Link(state, static_cast<uint32_t>(state.nodes.size() - 1), nullptr);
  return absl::OkStatus();
}

}  // namespace

absl::Status ClusterAccess::AddNodeMoved(Cluster& cluster, Node&& node) {
  return AddNodeTo(*cluster.state_, std::move(node));
}

const std::vector<NodeStatus>& ClusterAccess::Nodes(const Cluster& cluster) {
  return cluster.state_->nodes;
}

uint64_t ClusterAccess::NodeSetGenerationOf(const Cluster& cluster) {
  return cluster.state_->generation.value();
}

uint64_t NodeSetGeneration::Next() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace internal

absl::Status Cluster::AddNode(const Node& node) { return internal::AddNodeTo(*state_, node); }

absl::Status Cluster::RemoveNode(std::string_view name) {
  auto it = state_->node_index.find(internal::Sv(name));
  if (it == state_->node_index.end()) {
    return absl::NotFoundError(absl::StrCat("unknown node '", internal::Echo(name), "'"));
  }
  const uint32_t index = it->second;
  const NodeStatus& node = state_->nodes[index];
  if (!node.requests.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node '", internal::Echo(name), "' still holds ", node.requests.size(),
        " placed requests (e.g. '", internal::Echo(node.requests.front()), "'); release them first"));
  }
  for (const GpuStatus& g : node.gpus) {
    if (!g.uuid.empty()) state_->gpu_uuids.erase(g.uuid);
  }
  state_->index.RemoveNode(*state_, index);  // While the node is still there.
  state_->node_index.erase(it);
  state_->nodes.erase(state_->nodes.begin() + index);
  state_->generation.Bump();
  state_->tie_keys.erase(state_->tie_keys.begin() + index);
  for (auto& [n, i] : state_->node_index) {
    if (i > index) --i;
  }
  state_->placements.NodeRemoved(index);
  state_->max_gpus_per_node = 0;
  for (const NodeStatus& n : state_->nodes) {
    state_->max_gpus_per_node =
        std::max(state_->max_gpus_per_node, static_cast<int>(n.gpus.size()));
  }
  return absl::OkStatus();
}

absl::Status Cluster::SetGpuHealthy(std::string_view node_name, int gpu, bool healthy) {
  auto it = state_->node_index.find(internal::Sv(node_name));
  if (it == state_->node_index.end()) {
    return absl::NotFoundError(absl::StrCat("unknown node '", internal::Echo(node_name), "'"));
  }
  NodeStatus& node = state_->nodes[it->second];
  if (gpu < 0 || gpu >= static_cast<int>(node.gpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat("node '", internal::Echo(node_name), "' has no GPU ",
                                                   gpu, " (it has ", node.gpus.size(), ")"));
  }
  if (node.gpus[gpu].healthy != healthy) {
    state_->index.Unlink(*state_, it->second, nullptr);
    node.gpus[gpu].healthy = healthy;
    ++node.version;
    state_->index.Link(*state_, it->second, nullptr);
  }
  return absl::OkStatus();
}

absl::Status Cluster::SetNodeSchedulable(std::string_view node_name, bool schedulable) {
  auto it = state_->node_index.find(internal::Sv(node_name));
  if (it == state_->node_index.end()) {
    return absl::NotFoundError(absl::StrCat("unknown node '", internal::Echo(node_name), "'"));
  }
  NodeStatus& node = state_->nodes[it->second];
  if (node.schedulable != schedulable) {
    state_->index.Unlink(*state_, it->second, nullptr);
    node.schedulable = schedulable;
    ++node.version;
    state_->index.Link(*state_, it->second, nullptr);
  }
  return absl::OkStatus();
}

int Cluster::num_nodes() const { return static_cast<int>(state_->nodes.size()); }

std::vector<std::string> Cluster::node_names() const {
  std::vector<std::string> names;
  names.reserve(state_->nodes.size());
  for (const NodeStatus& n : state_->nodes) names.push_back(n.name);
  return names;
}

absl::StatusOr<NodeStatus> Cluster::GetNode(std::string_view name) const {
  const NodeStatus* node = FindNode(name);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("unknown node '", internal::Echo(name), "'"));
  return *node;
}

const NodeStatus* Cluster::FindNode(std::string_view name) const {
  auto it = state_->node_index.find(internal::Sv(name));
  return it == state_->node_index.end() ? nullptr : &state_->nodes[it->second];
}

// ---- Requests ------------------------------------------------------------------

// Only the request's own rules: whether any node is large enough depends on
// the cluster's state and is ResourceExhausted in Plan().
absl::StatusOr<Demand> Cluster::Validate(const Request& request) const {
  return internal::ValidateRequest(request, kMaxGpusPerNode);
}

absl::StatusOr<std::vector<FitResult>> Cluster::Fit(const Request& request) const {
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, Validate(request));
  std::vector<FitResult> results;
  results.reserve(state_->nodes.size());
  std::vector<int> fitting;
  for (const NodeStatus& node : state_->nodes) {
    FitResult r;
    r.node = node.name;
    std::optional<std::string> why = internal::CheckNode(node, demand, request, &fitting);
    r.feasible = !why.has_value();
    if (why) r.reason = std::move(*why);
    results.push_back(std::move(r));
  }
  return results;
}

namespace internal {
namespace {

// Fetches ahead, once a place has chosen the node at `slot`, what filling the
// placement and committing it read and write beside the node's status (which
// the score memo fetches as it offers the node, PrefetchNode()): the node's
// name, the memo's record of the node, and the buffers of the store slot the
// placement goes to (Place() fetched the slot itself first). In a large
// cluster each is likely out of cache; fetched together, the misses overlap
// instead of coming one after the other.
void PrefetchCommit(const ClusterState& state, uint32_t slot) {
  __builtin_prefetch(state.nodes[slot].name.data());
  state.index.PrefetchLink(slot);
  state.placements.PrefetchNextSlotBuffers();
}

// Cluster::Plan(): fills `*out` (a default Placement) and gives the position
// of the chosen node (`slot`). Filling the caller's placement, rather than
// returning one, spares Place() two moves of it (its strings and GPU list).
// `committing`: the caller commits the placement next (Place(),
// PlaceReplicas()), and no Plan() runs at the same time.
absl::Status PlanIn(const Cluster& cluster, const ClusterState& state, const Request& request,
                    Policy& policy, Placement* out, uint32_t* slot, bool committing) {
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(request));
  if (state.placements.contains(request.id)) {
    return absl::AlreadyExistsError(absl::StrCat("request '", Echo(request.id), "' is already placed"));
  }
  if (demand.gpu_count > state.max_gpus_per_node) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no node can host request '", Echo(request.id), "' (", state.nodes.size(),
        " nodes): it needs ", demand.gpu_count, " GPUs on one node but the largest node has ",
        state.max_gpus_per_node));
  }
  std::vector<int> fitting;
  int best = -1;
  NodeChoice best_choice;
  NodeRace race(state.tie_keys, TopologyKeyCap(demand, request));
  std::string reasons;
  int infeasible = 0;
  // The built-in policies are answered from the ordered indexes (the same
  // winner, see src/internal/placement_index.h); everything else, and every
  // request that fits nowhere, takes the scan below.
  // When the indexes know that no node is feasible, the scan stops once it
  // has the reasons it reports.
  bool none_feasible = false;
  const bool indexed = state.index.Plan(state, cluster, request, demand, policy, &best,
                                        &best_choice, &none_feasible);
  for (size_t i = 0; !indexed && i < state.nodes.size(); ++i) {
    const NodeStatus& node = state.nodes[i];
    if (std::optional<std::string> why = CheckNode(node, demand, request, &fitting)) {
      if (++infeasible <= 5) absl::StrAppend(&reasons, "; ", node.name, ": ", *why);
      if (none_feasible && infeasible == 5) {
        infeasible = static_cast<int>(state.nodes.size());
        break;
      }
      continue;
    }
    NodeChoice choice = policy.Evaluate(demand, node, fitting, cluster);
    if (static_cast<int>(choice.gpus.size()) != demand.gpu_count ||
        !std::is_sorted(choice.gpus.begin(), choice.gpus.end()) ||
        std::adjacent_find(choice.gpus.begin(), choice.gpus.end()) != choice.gpus.end() ||
        !std::all_of(choice.gpus.begin(), choice.gpus.end(), [&](int g) {
          return std::binary_search(fitting.begin(), fitting.end(), g);
        })) {
      return absl::InternalError(absl::StrCat(
          "policy '", policy.Name(), "' chose ", choice.gpus.size(),
          " GPUs on node '", Echo(node.name), "' that are not ", demand.gpu_count,
          " distinct fitting GPUs in ascending order"));
    }
    ApplyTopology(node, demand, request, fitting, &choice);
    race.Offer(static_cast<uint32_t>(i), std::move(choice));
  }
  if (!indexed) race.Finish(&best, &best_choice);
  if (best < 0) {
    if (infeasible > 5) absl::StrAppend(&reasons, "; and ", infeasible - 5, " more");
    return absl::ResourceExhaustedError(absl::StrCat(
        "no node can host request '", Echo(request.id), "' (", state.nodes.size(),
        " nodes)", reasons));
  }
  if (committing) PrefetchCommit(state, static_cast<uint32_t>(best));
  Placement& p = *out;
  p.request_id = request.id;
  p.node = state.nodes[best].name;
  p.gpus = std::move(best_choice.gpus);
  // The GPUs are those the node's topology chose (ApplyTopology()).
  if (const NodeStatus& node = state.nodes[best];
      node.topology != nullptr && request.topology.mode != TopologyNeed::Mode::kNone) {
    p.weakest_link = WeakestLinkOf(node, p.gpus);
  }
  p.memory_per_gpu = demand.memory_per_gpu;
  p.compute_per_gpu = demand.compute_per_gpu;
  p.exclusive = demand.kind == Demand::Kind::kExclusive;
  p.cpu = demand.cpu;
  p.host_memory = demand.host_memory;
  *slot = static_cast<uint32_t>(best);
  return absl::OkStatus();
}

}  // namespace
}  // namespace internal

absl::StatusOr<Placement> Cluster::Plan(const Request& request, Policy& policy) const {
  absl::StatusOr<Placement> planned(absl::in_place);
  uint32_t slot;
  if (absl::Status s = internal::PlanIn(*this, *state_, request, policy, &*planned, &slot,
                                        /*committing=*/false);
      !s.ok()) {
    planned = std::move(s);
  }
  return planned;
}

absl::StatusOr<Placement> Cluster::Plan(const Request& request,
                                        std::string_view policy) const {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(policy));
  return Plan(request, *p);
}

namespace internal {
namespace {

// Applies `placement` to the node at position `slot` and stores it (a copy,
// or the placement itself for Placement&&): Commit() once it has found the
// node, and Place() with the node its plan chose.
template <typename P>
absl::Status CommitAt(ClusterState& state, uint32_t slot, P&& placement, bool running = false) {
  NodeStatus& node = state.nodes[slot];
  GPUSHARE_RETURN_IF_ERROR(CheckCommit(node, placement, running));
  state.index.Unlink(state, slot, &placement.gpus);
  ApplyToNode(node, placement);
  state.index.Link(state, slot, &placement.gpus);
  Placement& stored = state.placements.Insert(std::forward<P>(placement), slot);
  stored.weakest_link = WeakestLinkOf(node, stored.gpus);
  return absl::OkStatus();
}

// Cluster::Commit(), storing a copy (const Placement&) or the placement
// itself (Placement&&, for the loaders).
template <typename P>
absl::Status CommitTo(ClusterState& state, P&& placement, bool running = false) {
  if (state.placements.contains(placement.request_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request '", Echo(placement.request_id), "' is already placed"));
  }
  auto it = state.node_index.find(placement.node);
  if (it == state.node_index.end()) {
    return absl::NotFoundError(absl::StrCat("placement of '", placement.request_id,
                                            "' names unknown node '", Echo(placement.node), "'"));
  }
  return CommitAt(state, it->second, std::forward<P>(placement), running);
}

// Undoes `stored` (a placement of the store) on its node and removes it;
// returns its id. Release(), and PlaceReplicas()' rollback.
std::string ReleaseStored(ClusterState& state, const Placement& stored) {
  const uint32_t slot = state.placements.NodeOf(stored);
  state.index.Unlink(state, slot, &stored.gpus);
  UndoOnNode(state.nodes[slot], stored);
  state.index.Link(state, slot, &stored.gpus);
  return state.placements.Erase(stored);
}

}  // namespace

absl::Status ClusterAccess::CommitMoved(Cluster& cluster, Placement&& placement) {
  return CommitTo(*cluster.state_, std::move(placement));
}

absl::Status ClusterAccess::CommitRunning(Cluster& cluster, const Placement& placement) {
  return CommitTo(*cluster.state_, placement, /*running=*/true);
}

absl::Status ClusterAccess::CommitRunning(Cluster& cluster, Placement&& placement) {
  return CommitTo(*cluster.state_, std::move(placement), /*running=*/true);
}

}  // namespace internal

absl::Status Cluster::Commit(const Placement& placement) {
  return internal::CommitTo(*state_, placement);
}

absl::StatusOr<Placement> Cluster::Place(const Request& request, Policy& policy) {
  // The placement is built where it is returned (one named StatusOr), and
  // the store keeps a copy of it.
  state_->placements.PrefetchNextSlot();
  absl::StatusOr<Placement> placed(absl::in_place);
  uint32_t slot;
  absl::Status s = internal::PlanIn(*this, *state_, request, policy, &*placed, &slot,
                                    /*committing=*/true);
  // Plan() has checked the id and found the node: commit there directly.
  if (s.ok()) s = internal::CommitAt(*state_, slot, *placed);
  if (s.ok()) {
    policy.OnCommitted(*placed);
  } else {
    placed = std::move(s);
  }
  return placed;
}

absl::StatusOr<Placement> Cluster::Place(const Request& request, std::string_view policy) {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(policy));
  return Place(request, *p);
}

namespace internal {

void ClusterState::RememberRelease(std::string id) {
  if (options.remembered_releases <= 0) return;
  released.push_back(std::move(id));
  if (static_cast<int64_t>(released.size()) > options.remembered_releases) {
    released.pop_front();
    ++released_base;
  }
}

bool ClusterState::WasReleased(std::string_view id) {
  const uint64_t end = released_base + released.size();
  // Forgotten entries pile up in the lookup; start afresh when they outnumber
  // the remembered ones, so that it stays within twice the limit.
  if (released_lookup.size() > 2 * released.size() + 64) {
    released_lookup.clear();
    released_synced = released_base;
  }
  for (uint64_t n = std::max(released_synced, released_base); n < end; ++n) {
    released_lookup.insert_or_assign(released[n - released_base], n);
  }
  released_synced = end;
  auto it = released_lookup.find(Sv(id));
  return it != released_lookup.end() && it->second >= released_base;
}

}  // namespace internal

absl::Status Cluster::Release(std::string_view id) {
  const Placement* p = state_->placements.Find(id);
  if (p == nullptr) {
    if (state_->WasReleased(id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("request '", internal::Echo(id), "' was already released"));
    }
    return absl::NotFoundError(absl::StrCat("unknown request '", internal::Echo(id), "'"));
  }
  state_->RememberRelease(internal::ReleaseStored(*state_, *p));
  return absl::OkStatus();
}

absl::StatusOr<Placement> Cluster::GetPlacement(std::string_view id) const {
  const Placement* p = FindPlacement(id);
  if (p == nullptr) return absl::NotFoundError(absl::StrCat("unknown request '", internal::Echo(id), "'"));
  return *p;
}

const Placement* Cluster::FindPlacement(std::string_view id) const {
  return state_->placements.Find(id);
}

std::vector<Placement> Cluster::placements() const {
  std::vector<Placement> all;
  all.reserve(state_->placements.size());
  state_->placements.ForEach([&](const Placement& p) { all.push_back(p); });
  std::sort(all.begin(), all.end(), [](const Placement& a, const Placement& b) {
    return a.request_id < b.request_id;
  });
  return all;
}

int Cluster::num_placements() const { return static_cast<int>(state_->placements.size()); }

// ---- Replicas and capacity ---------------------------------------------------------

absl::StatusOr<std::vector<Placement>> Cluster::PlaceReplicas(const Request& request,
                                                              int count, Policy& policy,
                                                              ReplicaMode mode) {
  GPUSHARE_RETURN_IF_ERROR(Validate(request).status());
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("replica count ", count, " is negative"));
  }
  std::vector<Request> copies(count, request);
  for (int i = 0; i < count; ++i) {
    copies[i].id = absl::StrCat(request.id, "-", i);
    if (state_->placements.contains(copies[i].id)) {
      return absl::AlreadyExistsError(absl::StrCat("request '", copies[i].id, "' is already placed"));
    }
  }
  // Versions are restored on rollback so that a failed call changes nothing.
  std::vector<std::pair<uint32_t, uint64_t>> versions;
  std::vector<Placement> placed;
  auto roll_back = [&](const absl::Status& why) {
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) {
      internal::ReleaseStored(*state_, *state_->placements.Find(it->request_id));
    }
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
      state_->nodes[it->first].version = it->second;
    }
    return absl::Status(why.code(), absl::StrCat("placed ", placed.size(), " of ", count,
                                                 " replicas, then: ", why.message()));
  };
  for (const Request& copy : copies) {
    uint32_t index;
    Placement p;
    if (absl::Status s = internal::PlanIn(*this, *state_, copy, policy, &p, &index,
                                          /*committing=*/true);
        !s.ok()) {
      if (mode == ReplicaMode::kAsManyAsFit && s.code() == absl::StatusCode::kResourceExhausted) {
        break;
      }
      return roll_back(s);
    }
    versions.emplace_back(index, state_->nodes[index].version);
    if (absl::Status s = internal::CommitAt(*state_, index, p); !s.ok()) return roll_back(s);
    policy.OnCommitted(p);
    placed.push_back(std::move(p));
  }
  return placed;
}

absl::StatusOr<std::vector<Placement>> Cluster::PlaceReplicas(const Request& request,
                                                              int count,
                                                              std::string_view policy,
                                                              ReplicaMode mode) {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(policy));
  return PlaceReplicas(request, count, *p, mode);
}

absl::StatusOr<int64_t> Cluster::Capacity(const Request& request, std::string_view policy,
                                          int64_t limit) const {
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, Validate(request));
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(policy));
  // Copies placed on one node never change what fits on another, so filling
  // each node alone gives the same count as placing copies one by one.
  int64_t total = 0;
  for (const NodeStatus& node : state_->nodes) {
    if (total >= limit) break;
    total += FillNode(node, demand, request, *p, *this, limit - total);
  }
  return total;
}

absl::StatusOr<int64_t> Cluster::NodesNeeded(const Request& request, int64_t count,
                                             const Node& shape,
                                             std::string_view policy) const {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("replica count ", count, " is negative"));
  }
  GPUSHARE_RETURN_IF_ERROR(internal::ValidateNode(shape));
  GPUSHARE_ASSIGN_OR_RETURN(
      const Demand demand,
      internal::ValidateRequest(request, kMaxGpusPerNode));
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> p, MakePolicy(policy));
  int64_t now = 0;
  for (const NodeStatus& node : state_->nodes) {
    if (now >= count) break;
    now += FillNode(node, demand, request, *p, *this, count - now);
  }
  if (now >= count) return 0;
  NodeStatus fresh = internal::MakeNodeStatus(shape);
  fresh.name = absl::StrCat(shape.name, "-0");
  const int64_t per_node = FillNode(fresh, demand, request, *p, *this, count - now);
  if (per_node == 0) {
    std::vector<int> fitting;
    std::optional<std::string> why = internal::CheckNode(fresh, demand, request, &fitting);
    return absl::ResourceExhaustedError(absl::StrCat(
        "an empty node shaped like '", internal::Echo(shape.name), "' cannot host request '", request.id,
        "': ", why.value_or("the policy chose no GPUs")));
  }
  const int64_t missing = count - now;
  return (missing + per_node - 1) / per_node;
}

// ---- Totals and invariants -------------------------------------------------------------

Usage Cluster::TotalUsage() const {
  Usage u;
  for (const NodeStatus& node : state_->nodes) {
    for (const GpuStatus& g : node.gpus) {
      u.gpu_memory += g.memory;
      u.gpu_memory_used += g.memory_used;
      u.compute_used += g.compute_used;
      ++u.gpus;
      u.idle_gpus += g.idle() ? 1 : 0;
    }
    u.cpu += node.cpu;
    u.cpu_used += node.cpu_used;
    u.host_memory += node.host_memory;
    u.host_memory_used += node.host_memory_used;
  }
  u.placements = static_cast<int64_t>(state_->placements.size());
  return u;
}

absl::Status Cluster::CheckInvariants() const {
  std::vector<NodeStatus> expect;
  expect.reserve(state_->nodes.size());
  for (const NodeStatus& node : state_->nodes) {
    NodeStatus e = node;
    for (GpuStatus& g : e.gpus) g.memory_used = g.compute_used = g.holders = 0;
    e.cpu_used = e.host_memory_used = 0;
    e.requests.clear();
    expect.push_back(std::move(e));
  }
  if (state_->node_index.size() != state_->nodes.size()) {
    return absl::InternalError("node index size differs from the node list");
  }
  for (size_t i = 0; i < state_->nodes.size(); ++i) {
    auto it = state_->node_index.find(state_->nodes[i].name);
    if (it == state_->node_index.end() || it->second != i) {
      return absl::InternalError(absl::StrCat("node index wrong for '", state_->nodes[i].name, "'"));
    }
  }
  absl::Status placements_ok;
  state_->placements.ForEach([&](const Placement& p) {
    auto it = state_->node_index.find(p.node);
    if (it == state_->node_index.end() || state_->placements.Find(p.request_id) != &p ||
        state_->placements.NodeOf(p) != it->second) {
      placements_ok.Update(
          absl::InternalError(absl::StrCat("placement '", p.request_id, "' is inconsistent")));
      return;
    }
    internal::ApplyToNode(expect[it->second], p);
  });
  GPUSHARE_RETURN_IF_ERROR(placements_ok);
  for (size_t i = 0; i < expect.size(); ++i) {
    const NodeStatus& have = state_->nodes[i];
    const NodeStatus& want = expect[i];
    for (size_t g = 0; g < have.gpus.size(); ++g) {
      const GpuStatus& h = have.gpus[g];
      const GpuStatus& w = want.gpus[g];
      if (h.memory_used != w.memory_used || h.compute_used != w.compute_used ||
          h.holders != w.holders) {
        return absl::InternalError(absl::StrCat("node '", have.name, "' GPU ", g,
                                                " counters differ from its placements"));
      }
      if (h.memory_used < 0 || h.memory_used > h.memory || h.compute_used < 0 ||
          h.compute_used > kGpuCompute) {
        return absl::InternalError(absl::StrCat("node '", have.name, "' GPU ", g,
                                                " is over capacity: ", h.memory_used, "/",
                                                h.memory, " units, ", h.compute_used,
                                                " compute"));
      }
    }
    if (have.cpu_used != want.cpu_used || have.host_memory_used != want.host_memory_used) {
      return absl::InternalError(absl::StrCat("node '", have.name, "' host counters differ"));
    }
    if ((have.cpu > 0 && have.cpu_used > have.cpu) ||
        (have.host_memory > 0 && have.host_memory_used > have.host_memory)) {
      return absl::InternalError(absl::StrCat("node '", have.name, "' host resources over capacity"));
    }
    std::vector<std::string> a = have.requests, b = want.requests;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      return absl::InternalError(absl::StrCat("node '", have.name, "' request list differs"));
    }
  }
  if (!state_->index.Consistent(*state_)) {
    return absl::InternalError("placement indexes differ from the node states");
  }
  return absl::OkStatus();
}

}  // namespace gpushare
