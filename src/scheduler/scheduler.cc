// The thread-safe scheduler core: a Cluster behind a writer-preferring
// reader/writer mutex (src/internal/rw_mutex.h), plus
// reservations with a time-to-live (see gpushare/scheduler.h).

#include "gpushare/scheduler.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/internal/cluster_state.h"
#include "src/internal/rw_mutex.h"
#include "src/internal/status_macros.h"
#include "src/topology/node_gpus.h"

namespace gpushare {

struct Scheduler::State {
  // Writers first: overlapping readers cannot hold a bind back.
  mutable internal::WriterPreferringMutex mu;
  Cluster cluster;                                           // Guarded by mu.
  absl::flat_hash_map<std::string, Reservation> reserved;   // Guarded by mu.
  std::deque<std::string> expired_order;                     // Guarded by mu.
  absl::flat_hash_set<std::string> expired;                  // Guarded by mu.
  uint64_t last_token = 0;                                   // Guarded by mu.
};

namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The placement `policy` chooses for `request` on `node`, which
// CheckNode() found able to host it (`fitting`).
Placement ChooseOnNode(Policy& policy, const Demand& demand, const Request& request,
                       const NodeStatus& node, const std::vector<int>& fitting,
                       const Cluster& cluster) {
  NodeChoice choice = policy.Evaluate(demand, node, fitting, cluster);
  internal::ApplyTopology(node, demand, request, fitting, &choice);
  Placement p;
  p.request_id = request.id;
  p.node = node.name;
  p.gpus = std::move(choice.gpus);
  p.memory_per_gpu = demand.memory_per_gpu;
  p.compute_per_gpu = demand.compute_per_gpu;
  p.exclusive = demand.kind == Demand::Kind::kExclusive;
  p.cpu = demand.cpu;
  p.host_memory = demand.host_memory;
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(Cluster cluster,
                                                            SchedulerOptions options) {
  GPUSHARE_RETURN_IF_ERROR(MakePolicy(options.policy, options.policy_options).status());
  if (options.reservation_ttl_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reservation ttl ", options.reservation_ttl_ms,
        " ms must be at least 0 (0: reservations never expire)"));
  }
  if (!options.clock) options.clock = SteadyNowNs;
  auto state = std::make_unique<State>();
  state->cluster = std::move(cluster);
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(state), std::move(options)));
}

Scheduler::Scheduler(std::unique_ptr<State> state, SchedulerOptions options)
    : options_(std::move(options)), state_(std::move(state)) {}

Scheduler::~Scheduler() = default;

// ---- Read side ---------------------------------------------------------------

absl::StatusOr<std::vector<FitResult>> Scheduler::Filter(
    const Request& request, const std::vector<std::string>& nodes) const {
  std::shared_lock lock(state_->mu);
  const Cluster& cluster = state_->cluster;
  if (nodes.empty()) return cluster.Fit(request);
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(request));
  std::vector<FitResult> out;
  out.reserve(nodes.size());
  std::vector<int> fitting;
  for (const std::string& name : nodes) {
    FitResult r;
    r.node = name;
    const NodeStatus* node = cluster.FindNode(name);
    if (node == nullptr) {
      r.reason = absl::StrCat("node '", name, "' is unknown to gpushare");
    } else if (std::optional<std::string> why =
                   internal::CheckNode(*node, demand, request, &fitting)) {
      r.reason = *std::move(why);
    } else {
      r.feasible = true;
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<FitResult> Scheduler::FitAfter(const Request& request, std::string_view node,
                                              const NodeEdits& edits, bool* unresolvable) const {
  if (unresolvable != nullptr) *unresolvable = false;
  std::unique_ptr<Policy> policy;
  if (!edits.added.empty()) {
    GPUSHARE_ASSIGN_OR_RETURN(policy, MakePolicy(options_.policy, options_.policy_options));
  }
  std::shared_lock lock(state_->mu);
  const Cluster& cluster = state_->cluster;
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(request));
  std::vector<Demand> added;
  added.reserve(edits.added.size());
  for (const Request& a : edits.added) {
    absl::StatusOr<Demand> d = cluster.Validate(a);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          absl::StrCat("added request '", a.id, "': ", d.status().message()));
    }
    added.push_back(*d);
  }
  FitResult r;
  r.node = std::string(node);
  const NodeStatus* status = cluster.FindNode(node);
  if (status == nullptr) {
    // Not unresolvable: the host may not have applied the node yet.
    r.reason = absl::StrCat("node '", internal::Sv(node), "' is unknown to gpushare");
    return r;
  }
  std::vector<int> fitting;
  std::optional<std::string> why;
  if (edits.removed.empty() && edits.added.empty()) {
    why = internal::CheckNode(*status, demand, request, &fitting);
  } else {
    // Edited on a copy: the cluster is only read.
    NodeStatus edited = *status;
    for (const std::string& id : edits.removed) {
      const Placement* p = cluster.FindPlacement(id);
      if (p != nullptr && p->node == edited.name &&
          std::find(edited.requests.begin(), edited.requests.end(), id) != edited.requests.end()) {
        internal::UndoOnNode(edited, *p);
      }
    }
    for (size_t i = 0; i < edits.added.size() && !why; ++i) {
      const Request& a = edits.added[i];
      const Placement* placed = cluster.FindPlacement(a.id);
      if (placed != nullptr &&
          (placed->node != edited.name ||
           std::find(edited.requests.begin(), edited.requests.end(), a.id) !=
               edited.requests.end())) {
        continue;  // Counted where it is placed.
      }
      if (std::optional<std::string> no = internal::CheckNode(edited, added[i], a, &fitting)) {
        why = absl::StrCat("the node's GPUs are held for request '", a.id,
                           "', nominated to it (", *no, ")");
      } else {
        internal::ApplyToNode(edited,
                              ChooseOnNode(*policy, added[i], a, edited, fitting, cluster));
      }
    }
    if (!why) why = internal::CheckNode(edited, demand, request, &fitting);
  }
  if (!why) {
    r.feasible = true;
    return r;
  }
  r.reason = *std::move(why);
  if (unresolvable != nullptr) {
    // The node as it would be holding nothing.
    NodeStatus empty = *status;
    for (GpuStatus& g : empty.gpus) {
      g.memory_used = 0;
      g.compute_used = 0;
      g.holders = 0;
    }
    empty.cpu_used = 0;
    empty.host_memory_used = 0;
    empty.requests.clear();
    *unresolvable = !internal::NodeFits(empty, demand, request, &fitting);
  }
  return r;
}

absl::StatusOr<std::vector<NodeScore>> Scheduler::Score(
    const Request& request, const std::vector<std::string>& nodes) const {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy,
                            MakePolicy(options_.policy, options_.policy_options));
  std::shared_lock lock(state_->mu);
  const Cluster& cluster = state_->cluster;
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(request));
  std::vector<std::string> all;
  if (nodes.empty()) all = cluster.node_names();
  const std::vector<std::string>& names = nodes.empty() ? all : nodes;
  std::vector<NodeScore> out;
  out.reserve(names.size());
  std::vector<int> fitting;
  for (const std::string& name : names) {
    const NodeStatus* node = cluster.FindNode(name);
    if (node == nullptr) continue;
    if (!internal::NodeFits(*node, demand, request, &fitting)) continue;
    NodeChoice choice = policy->Evaluate(demand, *node, fitting, cluster);
    internal::ApplyTopology(*node, demand, request, fitting, &choice);
    out.push_back(NodeScore{name, choice.score, 0});
  }
  std::vector<gpushare::Score> distinct;
  for (const NodeScore& s : out) distinct.push_back(s.score);
  std::sort(distinct.begin(), distinct.end(),
            [](const gpushare::Score& a, const gpushare::Score& b) { return b < a; });
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const int64_t d = static_cast<int64_t>(distinct.size());
  for (NodeScore& s : out) {
    const int64_t r = std::lower_bound(distinct.begin(), distinct.end(), s.score,
                                       [](const gpushare::Score& a, const gpushare::Score& b) {
                                         return b < a;
                                       }) -
                      distinct.begin();
    s.rank = d <= 1 ? 10 : ((d - 1 - r) * 10 + (d - 1) / 2) / (d - 1);
  }
  return out;
}

void Scheduler::Read(const std::function<void(const Cluster&)>& fn) const {
  std::shared_lock lock(state_->mu);
  fn(state_->cluster);
}

namespace {

std::vector<Reservation> SortedReservations(
    const absl::flat_hash_map<std::string, Reservation>& reserved) {
  std::vector<Reservation> out;
  out.reserve(reserved.size());
  for (const auto& [id, r] : reserved) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const Reservation& a, const Reservation& b) {
    return a.placement.request_id < b.placement.request_id;
  });
  return out;
}

}  // namespace

void Scheduler::Read(
    const std::function<void(const Cluster&, const std::vector<Reservation>&)>& fn) const {
  std::shared_lock lock(state_->mu);
  fn(state_->cluster, SortedReservations(state_->reserved));
}

std::vector<Reservation> Scheduler::reservations() const {
  std::shared_lock lock(state_->mu);
  return SortedReservations(state_->reserved);
}

bool Scheduler::IsReserved(std::string_view id) const {
  std::shared_lock lock(state_->mu);
  return state_->reserved.contains(internal::Sv(id));
}

absl::Status Scheduler::CheckInvariants() const {
  std::shared_lock lock(state_->mu);
  GPUSHARE_RETURN_IF_ERROR(state_->cluster.CheckInvariants());
  for (const auto& [id, r] : state_->reserved) {
    const Placement* p = state_->cluster.FindPlacement(id);
    if (p == nullptr || *p != r.placement) {
      return absl::InternalError(
          absl::StrCat("reservation '", id, "' is not placed as reserved in the cluster"));
    }
    if (state_->expired.contains(id)) {
      return absl::InternalError(absl::StrCat("reservation '", id, "' is also marked expired"));
    }
  }
  return absl::OkStatus();
}

// ---- Write side ----------------------------------------------------------------

namespace {

void RememberExpired(std::deque<std::string>& order, absl::flat_hash_set<std::string>& set,
                     const std::string& id, int limit) {
  if (limit <= 0 || !set.insert(id).second) return;
  order.push_back(id);
  while (static_cast<int>(order.size()) > limit) {
    set.erase(order.front());
    order.pop_front();
  }
}

void Unremember(std::deque<std::string>& order, absl::flat_hash_set<std::string>& set,
                const std::string& id) {
  if (set.erase(id) > 0) order.erase(std::find(order.begin(), order.end(), id));
}

}  // namespace

int Scheduler::ExpireReservations() {
  if (options_.reservation_ttl_ms == 0) return 0;
  std::unique_lock lock(state_->mu);
  const int64_t now = options_.clock();
  std::vector<std::string> due;
  for (const auto& [id, r] : state_->reserved) {
    if (r.expires_ns <= now) due.push_back(id);
  }
  for (const std::string& id : due) {
    // A reservation is always placed (CheckInvariants), so this cannot fail.
    state_->cluster.Release(id).IgnoreError();
    state_->reserved.erase(id);
    RememberExpired(state_->expired_order, state_->expired, id, options_.remembered_expiries);
  }
  return static_cast<int>(due.size());
}

absl::StatusOr<Placement> Scheduler::Reserve(const Request& request, std::string_view node,
                                             uint64_t* token) {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy,
                            MakePolicy(options_.policy, options_.policy_options));
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  Cluster& cluster = state_->cluster;
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(request));
  if (const Placement* existing = cluster.FindPlacement(request.id)) {
    if (!node.empty() && existing->node == node) {
      if (token != nullptr) {
        auto r = state_->reserved.find(request.id);
        *token = r == state_->reserved.end() ? 0 : r->second.token;
      }
      return *existing;
    }
    return absl::AlreadyExistsError(absl::StrCat("request '", request.id,
                                                 "' is already placed on node '",
                                                 existing->node, "'"));
  }
  Placement p;
  if (node.empty()) {
    GPUSHARE_ASSIGN_OR_RETURN(p, cluster.Plan(request, *policy));
  } else {
    const NodeStatus* status = cluster.FindNode(node);
    if (status == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown node '", internal::Sv(node), "'"));
    }
    std::vector<int> fitting;
    if (std::optional<std::string> why = internal::CheckNode(*status, demand, request, &fitting)) {
      return absl::ResourceExhaustedError(absl::StrCat("request '", request.id,
                                                       "' does not fit on node '",
                                                       internal::Sv(node), "': ", *why));
    }
    p = ChooseOnNode(*policy, demand, request, *status, fitting, cluster);
  }
  // Commit re-checks the placement against the node, so a policy that chose
  // badly cannot oversubscribe.
  GPUSHARE_RETURN_IF_ERROR(cluster.Commit(p));
  policy->OnCommitted(p);
  const int64_t expires = options_.reservation_ttl_ms == 0
                              ? std::numeric_limits<int64_t>::max()
                              : options_.clock() + options_.reservation_ttl_ms * 1'000'000;
  const uint64_t t = ++state_->last_token;
  state_->reserved[p.request_id] = Reservation{p, expires, t};
  if (token != nullptr) *token = t;
  Unremember(state_->expired_order, state_->expired, p.request_id);
  return p;
}

absl::Status Scheduler::Confirm(std::string_view id) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  if (state_->reserved.erase(internal::Sv(id)) > 0) return absl::OkStatus();
  if (state_->cluster.FindPlacement(id) != nullptr) return absl::OkStatus();
  if (state_->expired.contains(internal::Sv(id))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reservation of '", internal::Sv(id), "' expired or was forgotten"));
  }
  return absl::NotFoundError(absl::StrCat("unknown request '", internal::Sv(id), "'"));
}

namespace {

absl::Status ReservedAgain(std::string_view id, uint64_t held, uint64_t token) {
  return absl::FailedPreconditionError(absl::StrCat("request '", internal::Sv(id),
                                                    "' is reserved again (reservation ", held,
                                                    ", not ", token, "); nothing changed"));
}

}  // namespace

absl::Status Scheduler::Confirm(std::string_view id, uint64_t token) {
  {
    ExpireReservations();
    std::unique_lock lock(state_->mu);
    if (auto it = state_->reserved.find(internal::Sv(id)); it != state_->reserved.end()) {
      if (it->second.token != token) return ReservedAgain(id, it->second.token, token);
      state_->reserved.erase(it);
      return absl::OkStatus();
    }
  }
  return Confirm(id);
}

absl::Status Scheduler::Forget(std::string_view id) { return ForgetToken(id, 0); }

absl::Status Scheduler::Forget(std::string_view id, uint64_t token) {
  return ForgetToken(id, token);
}

absl::Status Scheduler::ForgetToken(std::string_view id, uint64_t token) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  auto it = state_->reserved.find(internal::Sv(id));
  if (it != state_->reserved.end() && token != 0 && it->second.token != token) {
    return ReservedAgain(id, it->second.token, token);
  }
  if (it == state_->reserved.end()) {
    if (state_->cluster.FindPlacement(id) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "request '", internal::Sv(id), "' is confirmed; release it instead"));
    }
    if (state_->expired.contains(internal::Sv(id))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "reservation of '", internal::Sv(id), "' expired or was forgotten"));
    }
    return absl::NotFoundError(absl::StrCat("unknown request '", internal::Sv(id), "'"));
  }
  std::string key = it->first;
  GPUSHARE_RETURN_IF_ERROR(state_->cluster.Release(key));
  state_->reserved.erase(it);
  RememberExpired(state_->expired_order, state_->expired, key, options_.remembered_expiries);
  return absl::OkStatus();
}

absl::Status Scheduler::Release(std::string_view id) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  GPUSHARE_RETURN_IF_ERROR(state_->cluster.Release(id));
  state_->reserved.erase(internal::Sv(id));
  return absl::OkStatus();
}

absl::StatusOr<Placement> Scheduler::Place(const Request& request) {
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy,
                            MakePolicy(options_.policy, options_.policy_options));
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  GPUSHARE_ASSIGN_OR_RETURN(Placement p, state_->cluster.Place(request, *policy));
  Unremember(state_->expired_order, state_->expired, p.request_id);
  return p;
}

absl::Status Scheduler::Commit(const Placement& placement) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  GPUSHARE_RETURN_IF_ERROR(state_->cluster.Commit(placement));
  Unremember(state_->expired_order, state_->expired, placement.request_id);
  return absl::OkStatus();
}

absl::Status Scheduler::Restore(const Placement& placement) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  GPUSHARE_RETURN_IF_ERROR(internal::ClusterAccess::CommitRunning(state_->cluster, placement));
  Unremember(state_->expired_order, state_->expired, placement.request_id);
  return absl::OkStatus();
}

absl::Status Scheduler::Move(const Placement& to) {
  ExpireReservations();
  std::unique_lock lock(state_->mu);
  const Placement* held = state_->cluster.FindPlacement(to.request_id);
  if (held == nullptr) {
    return absl::NotFoundError(absl::StrCat("'", to.request_id, "' holds nothing to move"));
  }
  if (state_->reserved.contains(internal::Sv(to.request_id))) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", to.request_id, "' is reserved, not confirmed: it cannot be moved"));
  }
  const Placement before = *held;
  GPUSHARE_RETURN_IF_ERROR(state_->cluster.Release(to.request_id));
  if (absl::Status s = internal::ClusterAccess::CommitRunning(state_->cluster, to); !s.ok()) {
    // Under the same lock nothing else changed: what was just released fits.
    absl::Status back = internal::ClusterAccess::CommitRunning(state_->cluster, before);
    if (!back.ok()) return absl::InternalError(absl::StrCat("Move: ", back.message()));
    return s;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::AddNode(const Node& node) {
  std::unique_lock lock(state_->mu);
  return state_->cluster.AddNode(node);
}

absl::Status Scheduler::RemoveNode(std::string_view name) {
  std::unique_lock lock(state_->mu);
  return state_->cluster.RemoveNode(name);
}

absl::Status Scheduler::SetNodeSchedulable(std::string_view name, bool schedulable) {
  std::unique_lock lock(state_->mu);
  return state_->cluster.SetNodeSchedulable(name, schedulable);
}

absl::Status Scheduler::SetGpuHealthy(std::string_view node, int gpu, bool healthy) {
  std::unique_lock lock(state_->mu);
  return state_->cluster.SetGpuHealthy(node, gpu, healthy);
}

}  // namespace gpushare
