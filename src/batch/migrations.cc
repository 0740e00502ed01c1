// Cluster::PlanMigrations() and ApplyMigrations(): iterative deepening over
// moves of placed requests on a scratch copy. See cluster.h.

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "gpushare/fragmentation.h"
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

// A pod that may move. With `origin` set, its request is inferred from its
// placement there (InferRequest) on first use: most pods of a large cluster
// are never tried, so they are never inferred.
struct Movable {
  struct Shape {
    Request request;
    Demand demand;
  };
  std::string id;
  const Cluster* origin = nullptr;
  std::unique_ptr<Shape> shape;  // Null until known, or when unusable.

  bool Ready() {
    if (origin != nullptr) {
      const Cluster& c = *origin;
      origin = nullptr;
      if (const Placement* p = c.FindPlacement(id)) {
        Request r = InferRequest(*p, *c.FindNode(p->node));
        absl::StatusOr<Demand> d = c.Validate(r);
        if (d.ok()) shape.reset(new Shape{std::move(r), *d});
      }
    }
    return shape != nullptr;
  }
  const Request& request() const { return shape->request; }
  const Demand& demand() const { return shape->demand; }
};

// Every placed pod of `cluster` as an inferred Movable, node by node.
std::vector<Movable> EveryPod(const Cluster& cluster) {
  std::vector<Movable> pods;
  pods.reserve(cluster.num_placements());
  for (const std::string& name : cluster.node_names()) {
    for (const std::string& id : cluster.FindNode(name)->requests) {
      Movable m;
      m.id = id;
      m.origin = &cluster;
      pods.push_back(std::move(m));
    }
  }
  return pods;
}

// What a plan aims for. At the last move of a plan only a pod whose
// departure could meet the goal is worth moving: Holds() is monotone in the
// load (adding a pod anywhere never helps), so a last move from node A to B
// meets a goal the state before it misses only through what leaving A frees.
class Goal {
 public:
  virtual ~Goal() = default;
  virtual bool Holds(const Cluster& c) = 0;
  // Called on the state the last move of a plan starts from.
  virtual void BeforeLastMove(const Cluster& /*c*/) {}
  // `node` is the pod's node with `from` taken off. False only when no
  // destination of the pod can make the goal hold.
  virtual bool MayHold(const NodeStatus& /*node*/, const Placement& /*from*/) { return true; }
};

// The request fits somewhere (as "binpack" would place it).
class FitGoal : public Goal {
 public:
  FitGoal(const Request& request, const Demand& demand)
      : request_(request), demand_(demand), binpack_(*MakePolicy("binpack")) {}
  bool Holds(const Cluster& c) override { return c.Plan(request_, *binpack_).ok(); }
  // The pod's destination only loses room, so the request must fit where
  // the pod left.
  bool MayHold(const NodeStatus& node, const Placement& /*from*/) override {
    return internal::NodeFits(node, demand_, request_, &fitting_);
  }

 private:
  Request request_;
  Demand demand_;
  std::shared_ptr<Policy> binpack_;
  std::vector<int> fitting_;
};

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

// At least `gpus` whole GPUs are free.
class FreeGpusGoal : public Goal {
 public:
  explicit FreeGpusGoal(int64_t gpus) : gpus_(gpus) {}
  bool Holds(const Cluster& c) override { return FreeWholeGpus(c) >= gpus_; }
  void BeforeLastMove(const Cluster& c) override { free_ = FreeWholeGpus(c); }
  // Only the GPUs the pod leaves idle can add to the count.
  bool MayHold(const NodeStatus& node, const Placement& from) override {
    int64_t freed = 0;
    for (int g : from.gpus) {
      freed += node.schedulable && node.gpus[g].healthy && node.gpus[g].idle() ? 1 : 0;
    }
    return free_ + freed >= gpus_;
  }

 private:
  int64_t gpus_;
  int64_t free_ = 0;
};

class Planner {
 public:
  // `every_pod_of`: when set, every placed pod may move (`movable` is then
  // EveryPod() of it), inferred from that cluster.
  Planner(const Cluster& cluster, std::unique_ptr<Goal> goal, std::vector<Movable> movable,
          const Cluster* every_pod_of, int64_t budget,
          std::chrono::steady_clock::time_point deadline)
      : scratch_(cluster), goal_(std::move(goal)), movable_(std::move(movable)),
        every_pod_of_(every_pod_of), budget_(budget), deadline_(deadline) {}

  // Whether the search stopped at its deadline (rather than its budget).
  bool timed_out() const { return timed_out_; }

  bool Fits() { return goal_->Holds(scratch_); }

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
    if (left == 1) return VisitLast();
    for (Movable& m : movable_) {
      if (TryMoves(m, left)) return true;
      if (aborted_) return false;
    }
    return false;
  }

  // The movable pod `id`, or null.
  Movable* Find(const std::string& id) {
    if (index_.empty()) {
      for (size_t i = 0; i < movable_.size(); ++i) index_.emplace(movable_[i].id, i);
    }
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &movable_[it->second];
  }

  // The last move, node by node: one copy of each node answers
  // Goal::MayHold() for every pod on it without touching the cluster; only
  // the pods that pass are looked up and tried.
  bool VisitLast() {
    goal_->BeforeLastMove(scratch_);
    NodeStatus probe;
    std::vector<std::string> ids;
    for (const std::string& name : scratch_.node_names()) {
      const NodeStatus& node = *scratch_.FindNode(name);
      if (node.requests.empty()) continue;
      probe = node;
      ids = node.requests;  // TryMoves() reorders node.requests.
      for (const std::string& id : ids) {
        const Placement from = *scratch_.FindPlacement(id);
        internal::UndoOnNode(probe, from);
        const bool may = goal_->MayHold(probe, from);
        internal::ApplyToNode(probe, from);
        if (!may) continue;
        Movable* m = nullptr;
        Movable one;
        if (every_pod_of_ != nullptr) {
          one.id = id;
          one.origin = every_pod_of_;
          m = &one;
        } else {
          m = Find(id);
        }
        if (m == nullptr) continue;
        if (TryMoves(*m, 1)) return true;
        if (aborted_) return false;
      }
    }
    return false;
  }

  // Tries every destination of `m` followed by plans of left - 1 moves.
  bool TryMoves(Movable& m, int left) {
    const Placement* now = scratch_.FindPlacement(m.id);
    if (now == nullptr || !m.Ready()) return false;
    const Placement from = *now;
    if (!scratch_.Release(from.request_id).ok()) return false;
    std::vector<Placement> candidates =
        internal::CandidatePlacements(scratch_, m.request(), m.demand(), nullptr,
                                      /*reduce_symmetry=*/left == 1);
    bool found = false;
    for (const Placement& to : candidates) {
      if (to.node == from.node && to.gpus == from.gpus) continue;
      if (++tried_ > budget_) {
        aborted_ = true;
        break;
      }
      if ((tried_ & 255) == 0 && std::chrono::steady_clock::now() >= deadline_) {
        aborted_ = timed_out_ = true;
        break;
      }
      if (!scratch_.Commit(to).ok()) continue;
      moves_.push_back({m.request(), from, to});
      found = Visit(left - 1);
      scratch_.Release(to.request_id).IgnoreError();
      if (found) break;
      moves_.pop_back();
      if (aborted_) break;
    }
    scratch_.Commit(from).IgnoreError();
    return found;
  }

  Cluster scratch_;
  std::unique_ptr<Goal> goal_;
  std::vector<Movable> movable_;
  const Cluster* every_pod_of_;
  absl::flat_hash_map<std::string, size_t> index_;  // id -> movable_, built on use.
  int64_t budget_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<Migration> moves_;
  int64_t tried_ = 0;
  bool aborted_ = false;
  bool timed_out_ = false;
};

// The movable pods: `movable` checked against the placements, or every
// placed pod with the constraints InferRequest() gives it (on first use).
absl::StatusOr<std::vector<Movable>> MovablePods(const Cluster& cluster,
                                                 const std::vector<Request>& movable) {
  std::vector<Movable> pods;
  if (movable.empty()) return EveryPod(cluster);
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
    Movable m;
    m.id = r.id;
    m.shape.reset(new Movable::Shape{r, *d});
    pods.push_back(std::move(m));
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
std::unique_ptr<Planner> Deepen(const Cluster& cluster, std::unique_ptr<Goal> goal,
                                std::vector<Movable> pods, const Cluster* every_pod_of,
                                int max_moves,
                                int64_t search_budget, const std::string& what,
                                MigrationPlan& plan,
                                std::chrono::steady_clock::time_point deadline) {
  auto planner = std::make_unique<Planner>(cluster, std::move(goal), std::move(pods),
                                           every_pod_of, search_budget, deadline);
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
  plan.reason = planner->timed_out()
                    ? std::string("no plan found before the search's deadline")
                : aborted ? absl::StrCat("no plan found within the search budget of ",
                                         search_budget, " candidate moves")
                        : absl::StrCat("no plan of at most ", max_moves, " move",
                                       max_moves == 1 ? "" : "s", " ", what);
  return planner;
}

}  // namespace

namespace internal {

absl::StatusOr<Request> MovableRequestOf(const Cluster& cluster, std::string_view id) {
  const Placement* p = cluster.FindPlacement(id);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat("request '", std::string(id), "' is not placed"));
  }
  return InferRequest(*p, *cluster.FindNode(p->node));
}

}  // namespace internal

absl::StatusOr<MigrationPlan> Cluster::PlanMigrations(const Request& request,
                                                      int max_moves,
                                                      const std::vector<Request>& movable,
                                                      int64_t search_budget,
                                                      std::chrono::steady_clock::time_point deadline) const {
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
  std::unique_ptr<Planner> planner =
      Deepen(*this, std::make_unique<FitGoal>(request, *Validate(request)), *std::move(pods),
             movable.empty() ? this : nullptr, max_moves, search_budget,
             absl::StrCat("makes '", request.id, "' fit"), plan, deadline);
  if (plan.found) {
    absl::StatusOr<Placement> then = planner->scratch().Plan(request, *binpack);
    if (then.ok()) plan.then = *then;
  }
  return plan;
}

absl::StatusOr<MigrationPlan> Cluster::PlanMigrationsToFreeGpus(
    int64_t gpus, int max_moves, const std::vector<Request>& movable,
    int64_t search_budget, std::chrono::steady_clock::time_point deadline) const {
  if (gpus < 1 || gpus > kMaxQuantity) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus ", gpus, " is outside 1..", kMaxQuantity));
  }
  if (absl::Status s = CheckLimits(max_moves, search_budget); !s.ok()) return s;
  absl::StatusOr<std::vector<Movable>> pods = MovablePods(*this, movable);
  if (!pods.ok()) return pods.status();
  MigrationPlan plan;
  plan.free_gpus_goal = gpus;
  Deepen(*this, std::make_unique<FreeGpusGoal>(gpus), *std::move(pods),
         movable.empty() ? this : nullptr, max_moves, search_budget,
         absl::StrCat("frees ", gpus, " whole GPU", gpus == 1 ? "" : "s"), plan, deadline);
  return plan;
}

namespace {

constexpr double kFragEpsilon = 1e-9;

absl::Status CheckTarget(const TargetWorkload& target) {
  if (target.tasks.empty()) return absl::InvalidArgumentError("the target workload has no task");
  for (size_t i = 0; i < target.tasks.size(); ++i) {
    const TargetTask& t = target.tasks[i];
    if (t.gpu_share < 0 || t.gpu_count < 0 || !(t.weight >= 0) || t.cpu < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target task ", i, " has a negative (or NaN) share ", t.gpu_share, ", GPU count ",
          t.gpu_count, ", cpu ", t.cpu, " or weight ", t.weight));
    }
  }
  return absl::OkStatus();
}

// Depth-first over every sequence of at most `max_moves` moves, keeping the
// end state of least fragmentation (fewest moves among equals). A move
// changes two nodes, so the measure is updated from those two.
class FragSearch {
 public:
  FragSearch(const Cluster& cluster, const TargetWorkload& target, std::vector<Movable> movable,
             int64_t budget)
      : scratch_(cluster), target_(target), movable_(std::move(movable)), budget_(budget) {
    now_ = Fragmentation(scratch_, target_).amount;
    best_ = now_;
  }

  void Run(int max_moves) { Visit(max_moves); }
  bool aborted() const { return aborted_; }
  const std::vector<Migration>& best_moves() const { return best_moves_; }

 private:
  double NodeFrag(const std::string& node) {
    return NodeFragmentation(*scratch_.FindNode(node), target_);
  }

  void Visit(int left) {
    if (now_ < best_ - kFragEpsilon ||
        (now_ <= best_ + kFragEpsilon && path_.size() < best_moves_.size())) {
      best_ = std::min(best_, now_);
      best_moves_ = path_;
    }
    if (left == 0 || aborted_) return;
    for (Movable& m : movable_) {
      const Placement* placed = scratch_.FindPlacement(m.id);
      if (placed == nullptr || !m.Ready()) continue;
      const Placement from = *placed;
      const double from_before = NodeFrag(from.node);
      if (!scratch_.Release(from.request_id).ok()) continue;
      const double from_released = NodeFrag(from.node);
      for (const Placement& to :
           internal::CandidatePlacements(scratch_, m.request(), m.demand(), nullptr,
                                         /*reduce_symmetry=*/left == 1)) {
        if (to.node == from.node && to.gpus == from.gpus) continue;
        if (++tried_ > budget_) {
          aborted_ = true;
          break;
        }
        const bool same = to.node == from.node;
        const double to_before = same ? from_released : NodeFrag(to.node);
        if (!scratch_.Commit(to).ok()) continue;
        const double to_after = NodeFrag(to.node);
        const double delta = same ? to_after - from_before
                                  : (from_released - from_before) + (to_after - to_before);
        const double saved = now_;
        now_ += delta;
        path_.push_back({m.request(), from, to});
        Visit(left - 1);
        path_.pop_back();
        now_ = saved;
        scratch_.Release(to.request_id).IgnoreError();
        if (aborted_) break;
      }
      scratch_.Commit(from).IgnoreError();
      if (aborted_) return;
    }
  }

  Cluster scratch_;
  const TargetWorkload& target_;
  std::vector<Movable> movable_;
  int64_t budget_;
  double now_ = 0;
  double best_ = 0;
  std::vector<Migration> path_;
  std::vector<Migration> best_moves_;
  int64_t tried_ = 0;
  bool aborted_ = false;
};

}  // namespace

absl::StatusOr<MigrationPlan> Cluster::PlanMigrationsToLowerFragmentation(
    const TargetWorkload& target, int max_moves, const std::vector<Request>& movable,
    int64_t search_budget) const {
  if (absl::Status s = CheckTarget(target); !s.ok()) return s;
  if (absl::Status s = CheckLimits(max_moves, search_budget); !s.ok()) return s;
  absl::StatusOr<std::vector<Movable>> pods = MovablePods(*this, movable);
  if (!pods.ok()) return pods.status();
  FragSearch search(*this, target, *std::move(pods), search_budget);
  search.Run(max_moves);
  MigrationPlan plan;
  plan.fragmentation_target = target;
  plan.fragmentation_before = Fragmentation(*this, target).amount;
  plan.moves = search.best_moves();
  plan.proven = !search.aborted();
  Cluster after(*this);
  for (const Migration& m : plan.moves) {
    after.Release(m.pod.id).IgnoreError();
    after.Commit(m.to).IgnoreError();
  }
  plan.fragmentation_after = Fragmentation(after, target).amount;
  plan.found = !plan.moves.empty() &&
               plan.fragmentation_after < plan.fragmentation_before - kFragEpsilon;
  if (!plan.found) {
    plan.moves.clear();
    plan.fragmentation_after = plan.fragmentation_before;
    plan.reason = search.aborted()
                      ? absl::StrCat("no plan found within the search budget of ",
                                     search_budget, " candidate moves")
                      : absl::StrCat("no plan of at most ", max_moves, " move",
                                     max_moves == 1 ? "" : "s",
                                     " lowers the fragmentation measure");
  }
  return plan;
}

absl::Status Cluster::ApplyMigrations(const MigrationPlan& plan) {
  if (!plan.found) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan was not found: ", plan.reason));
  }
  const bool request_form = plan.free_gpus_goal == 0 && !plan.fragmentation_target.has_value();
  if (request_form) {
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
  } else if (plan.fragmentation_target.has_value()) {
    const double now = Fragmentation(*this, *plan.fragmentation_target).amount;
    const double after = Fragmentation(scratch, *plan.fragmentation_target).amount;
    if (!(after < now - kFragEpsilon)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the moves would no longer lower the fragmentation measure (", now, " -> ", after,
          ")"));
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
