// Cluster::PlanMigrations() and ApplyMigrations(): iterative deepening over
// moves of placed requests on a scratch copy. See cluster.h.

#include <algorithm>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "src/batch/candidates.h"
#include "src/internal/cluster_state.h"

namespace gpushare {
namespace {

constexpr int kMaxMoves = 16;

// The request a placed pod stands for when its submitted request is unknown:
// its shape, the GPU models it runs on, and every label of its node as a
// selector (any selector it had is a subset of those labels). The fit rules
// are those of the cluster, so a node it could move to satisfies whatever
// models and selector it was submitted with.
Request InferRequest(const Placement& p, const NodeStatus& node) {
  Request r;
  r.id = p.request_id;
  r.cpu = p.cpu;
  r.host_memory = p.host_memory;
  if (p.exclusive) {
    r.whole_gpus = static_cast<int64_t>(p.gpus.size());
  } else if (!p.gpus.empty()) {
    r.gpu_count = static_cast<int64_t>(p.gpus.size());
    r.gpu_memory = p.total_memory();
    r.compute = p.compute_per_gpu;
  }
  // A pod on a GPU of unnamed model cannot have asked for models (no list
  // matches ""), so it keeps no model constraint.
  bool unnamed = false;
  for (int g : p.gpus) unnamed = unnamed || node.gpus[g].model.empty();
  for (int g : unnamed ? std::vector<int>{} : p.gpus) {
    const std::string& model = node.gpus[g].model;
    if (std::find(r.gpu_models.begin(), r.gpu_models.end(), model) == r.gpu_models.end()) {
      r.gpu_models.push_back(model);
    }
  }
  r.node_selector = node.labels;
  return r;
}

// Whether `p` is the placement `demand` of a request gives.
bool SameShape(const Placement& p, const Demand& d) {
  return p.exclusive == (d.kind == Demand::Kind::kExclusive) &&
         static_cast<int>(p.gpus.size()) == d.gpu_count &&
         p.memory_per_gpu == d.memory_per_gpu && p.compute_per_gpu == d.compute_per_gpu &&
         p.cpu == d.cpu && p.host_memory == d.host_memory;
}

std::string Describe(const Placement& p) {
  std::string gpus;
  for (int g : p.gpus) absl::StrAppend(&gpus, gpus.empty() ? "" : ",", g);
  return absl::StrCat(p.node, "[", gpus, "]");
}

struct Movable {
  Request request;
  Demand demand;
};

class Planner {
 public:
  Planner(const Cluster& cluster, std::function<bool(const Cluster&)> goal,
          std::vector<Movable> movable, int64_t budget)
      : scratch_(cluster), goal_(std::move(goal)), movable_(std::move(movable)),
        budget_(budget) {}

  bool Fits() { return goal_(scratch_); }

  // Searches plans of exactly `depth` moves; true when one is found.
  bool Deepen(int depth) { return Visit(depth); }
  bool aborted() const { return aborted_; }
  const std::vector<Migration>& moves() const { return moves_; }
  const Cluster& scratch() const { return scratch_; }

  // Applies the found moves to the scratch copy (they were undone).
  void Replay() {
    for (const Migration& m : moves_) {
      scratch_.Release(m.pod.id).IgnoreError();
      scratch_.Commit(m.to).IgnoreError();
    }
  }

 private:
  bool Visit(int left) {
    if (left == 0) return Fits();
    for (const Movable& m : movable_) {
      const Placement* now = scratch_.FindPlacement(m.request.id);
      if (now == nullptr) continue;
      const Placement from = *now;
      if (!scratch_.Release(from.request_id).ok()) continue;
      std::vector<Placement> candidates =
          internal::CandidatePlacements(scratch_, m.request, m.demand, nullptr);
      bool found = false;
      for (const Placement& to : candidates) {
        if (to.node == from.node && to.gpus == from.gpus) continue;
        if (++tried_ > budget_) {
          aborted_ = true;
          break;
        }
        if (!scratch_.Commit(to).ok()) continue;
        moves_.push_back({m.request, from, to});
        found = Visit(left - 1);
        scratch_.Release(to.request_id).IgnoreError();
        if (found) break;
        moves_.pop_back();
        if (aborted_) break;
      }
      scratch_.Commit(from).IgnoreError();
      if (found) return true;
      if (aborted_) return false;
    }
    return false;
  }

  Cluster scratch_;
  std::function<bool(const Cluster&)> goal_;
  std::vector<Movable> movable_;
  int64_t budget_;
  std::vector<Migration> moves_;
  int64_t tried_ = 0;
  bool aborted_ = false;
};

// The movable pods: `movable` checked against the placements, or every
// placed pod with the constraints InferRequest() gives it.
absl::StatusOr<std::vector<Movable>> MovablePods(const Cluster& cluster,
                                                 const std::vector<Request>& movable) {
  std::vector<Movable> pods;
  if (movable.empty()) {
    for (const Placement& p : cluster.placements()) {
      Request r = InferRequest(p, *cluster.FindNode(p.node));
      absl::StatusOr<Demand> d = cluster.Validate(r);
      if (d.ok()) pods.push_back({std::move(r), *d});
    }
    return pods;
  }
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < movable.size(); ++i) {
    const Request& r = movable[i];
    absl::StatusOr<Demand> d = cluster.Validate(r);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          absl::StrCat("movable[", i, "]: ", d.status().message()));
    }
    const Placement* p = cluster.FindPlacement(r.id);
    if (p == nullptr || !SameShape(*p, *d)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "movable[", i, "]: request '", r.id, "' is not placed",
          p == nullptr ? "" : " with this shape"));
    }
    if (!seen.insert(r.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("movable[", i, "]: id '", r.id, "' appears twice"));
    }
    pods.push_back({r, *d});
  }
  return pods;
}

absl::Status CheckLimits(int max_moves, int64_t search_budget) {
  if (max_moves < 0 || max_moves > kMaxMoves) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_moves ", max_moves, " is outside 0..", kMaxMoves));
  }
  if (search_budget < 1 || search_budget > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("search budget ", search_budget, " is outside 1..2^40"));
  }
  return absl::OkStatus();
}

// Iterative deepening towards `goal`; fills plan.found, proven, moves and
// reason (`what` names the goal in it). Returns the planner, moves applied.
std::unique_ptr<Planner> Deepen(const Cluster& cluster,
                                std::function<bool(const Cluster&)> goal,
                                std::vector<Movable> pods, int max_moves,
                                int64_t search_budget, const std::string& what,
                                MigrationPlan& plan) {
  auto planner = std::make_unique<Planner>(cluster, std::move(goal), std::move(pods),
                                           search_budget);
  bool aborted = false;
  for (int depth = 0; depth <= max_moves; ++depth) {
    if (planner->Deepen(depth)) {
      plan.found = true;
      plan.proven = !aborted;
      plan.moves = planner->moves();
      planner->Replay();
      return planner;
    }
    aborted = aborted || planner->aborted();
    if (aborted) break;
  }
  plan.proven = !aborted;
  plan.reason = aborted ? absl::StrCat("no plan found within the search budget of ",
                                       search_budget, " candidate moves")
                        : absl::StrCat("no plan of at most ", max_moves, " move",
                                       max_moves == 1 ? "" : "s", " ", what);
  return planner;
}

// Healthy GPUs holding nothing on schedulable nodes.
int64_t FreeWholeGpus(const Cluster& cluster) {
  int64_t free = 0;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus& node = *cluster.FindNode(name);
    if (!node.schedulable) continue;
    for (const GpuStatus& g : node.gpus) free += g.healthy && g.idle() ? 1 : 0;
  }
  return free;
}

}  // namespace

absl::StatusOr<MigrationPlan> Cluster::PlanMigrations(const Request& request,
                                                      int max_moves,
                                                      const std::vector<Request>& movable,
                                                      int64_t search_budget) const {
  if (absl::Status s = Validate(request).status(); !s.ok()) return s;
  if (FindPlacement(request.id) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("request '", request.id, "' is already placed"));
  }
  if (absl::Status s = CheckLimits(max_moves, search_budget); !s.ok()) return s;
  absl::StatusOr<std::vector<Movable>> pods = MovablePods(*this, movable);
  if (!pods.ok()) return pods.status();

  MigrationPlan plan;
  plan.request = request;
  std::shared_ptr<Policy> binpack = *MakePolicy("binpack");
  auto fits = [&request, binpack](const Cluster& c) {
    return c.Plan(request, *binpack).ok();
  };
  std::unique_ptr<Planner> planner =
      Deepen(*this, fits, *std::move(pods), max_moves, search_budget,
             absl::StrCat("makes '", request.id, "' fit"), plan);
  if (plan.found) {
    absl::StatusOr<Placement> then = planner->scratch().Plan(request, *binpack);
    if (then.ok()) plan.then = *then;
  }
  return plan;
}

absl::StatusOr<MigrationPlan> Cluster::PlanMigrationsToFreeGpus(
    int64_t gpus, int max_moves, const std::vector<Request>& movable,
    int64_t search_budget) const {
  if (gpus < 1 || gpus > kMaxQuantity) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus ", gpus, " is outside 1..", kMaxQuantity));
  }
  if (absl::Status s = CheckLimits(max_moves, search_budget); !s.ok()) return s;
  absl::StatusOr<std::vector<Movable>> pods = MovablePods(*this, movable);
  if (!pods.ok()) return pods.status();
  MigrationPlan plan;
  plan.free_gpus_goal = gpus;
  auto enough = [gpus](const Cluster& c) { return FreeWholeGpus(c) >= gpus; };
  Deepen(*this, enough, *std::move(pods), max_moves, search_budget,
         absl::StrCat("frees ", gpus, " whole GPU", gpus == 1 ? "" : "s"), plan);
  return plan;
}

absl::Status Cluster::ApplyMigrations(const MigrationPlan& plan) {
  if (!plan.found) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan was not found: ", plan.reason));
  }
  if (plan.free_gpus_goal == 0) {
    if (absl::Status s = Validate(plan.request).status(); !s.ok()) return s;
  }
  // Check every move on a copy, then repeat them here.
  Cluster scratch(*this);
  std::vector<int> fitting;
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    const Migration& m = plan.moves[i];
    auto stale = [&](const std::string& why) {
      return absl::FailedPreconditionError(absl::StrCat(
          "move ", i, " of '", m.pod.id, "' from ", Describe(m.from), " to ",
          Describe(m.to), " no longer holds: ", why));
    };
    absl::StatusOr<Demand> d = scratch.Validate(m.pod);
    if (!d.ok()) return stale(std::string(d.status().message()));
    const Placement* now = scratch.FindPlacement(m.pod.id);
    if (now == nullptr || *now != m.from || m.to.request_id != m.pod.id ||
        !SameShape(m.to, *d)) {
      return stale(now == nullptr ? "it is not placed" : "it is placed elsewhere");
    }
    if (absl::Status s = scratch.Release(m.pod.id); !s.ok()) {
      return stale(std::string(s.message()));
    }
    const NodeStatus* node = scratch.FindNode(m.to.node);
    if (node == nullptr) return stale("the node is gone");
    if (std::optional<std::string> why = internal::CheckNode(*node, *d, m.pod, &fitting)) {
      return stale(*why);
    }
    for (int g : m.to.gpus) {
      if (std::find(fitting.begin(), fitting.end(), g) == fitting.end()) {
        return stale(absl::StrCat("GPU ", g, " cannot take it"));
      }
    }
    if (absl::Status s = scratch.Commit(m.to); !s.ok()) return stale(std::string(s.message()));
  }
  if (plan.free_gpus_goal > 0) {
    if (const int64_t free = FreeWholeGpus(scratch); free < plan.free_gpus_goal) {
      return absl::FailedPreconditionError(absl::StrCat(
          "after the moves only ", free, " whole GPUs would be free, not ",
          plan.free_gpus_goal));
    }
  } else if (absl::Status s = scratch.Plan(plan.request, "binpack").status(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "after the moves '", plan.request.id, "' would still not fit: ", s.message()));
  }
  for (size_t i = 0; i < plan.moves.size(); ++i) {
    const Migration& m = plan.moves[i];
    absl::Status s = Release(m.pod.id);
    if (s.ok()) s = Commit(m.to);
    if (!s.ok()) {  // Not reachable: the copy took the same steps.
      return absl::InternalError(absl::StrCat("move ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpushare
