// Extender::PlanMigrations(): the read-only defragmentation planner on the
// extender's state (see kubernetes.h).

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/kubernetes.h"
#include "src/batch/candidates.h"
#include "src/internal/json_text.h"
#include "src/internal/status_macros.h"
#include "src/k8s/json_util.h"

namespace gpushare::k8s {
namespace {

using internal::json;
using internal::Member;

constexpr int64_t kDefaultMaxMoves = 1;
constexpr int64_t kMostMoves = 16;
constexpr int64_t kDefaultBudget = 200'000;
// A candidate move costs about 0.5 ms at 200 nodes: the cap is a backstop
// behind the wall-clock deadline (ExtenderOptions::plan_deadline_ms).
constexpr int64_t kMostBudget = 1'000'000;

// Integer member `key` within lo..hi, `fallback` when absent.
absl::StatusOr<int64_t> IntMember(const json& j, std::string_view key, int64_t lo, int64_t hi,
                                  int64_t fallback) {
  const json* v = Member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi) {
    std::string shown = ::gpushare::internal::DumpJson(*v);
    if (shown.size() > 64) shown = shown.substr(0, 61) + "...";
    return absl::InvalidArgumentError(absl::StrCat("plan request: ", std::string(key), " is ",
                                                   shown, ", not an integer in ", lo, "..",
                                                   hi));
  }
  return v->get<int64_t>();
}

json Where(const Placement& p) { return json{{"Node", p.node}, {"GPUs", p.gpus}}; }

std::pair<std::string, std::string> SplitId(const std::string& id) {
  const size_t slash = id.find('/');
  if (slash == std::string::npos) return {"default", id};
  return {id.substr(0, slash), id.substr(slash + 1)};
}

}  // namespace

absl::StatusOr<std::string> Extender::PlanMigrations(std::string_view body) const {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, "plan request"));
  if (!j.is_object()) return absl::InvalidArgumentError("plan request must be a JSON object");
  GPUSHARE_ASSIGN_OR_RETURN(const int64_t max_moves,
                            IntMember(j, "MaxMoves", 0, kMostMoves, kDefaultMaxMoves));
  GPUSHARE_ASSIGN_OR_RETURN(const int64_t budget,
                            IntMember(j, "SearchBudget", 1, kMostBudget, kDefaultBudget));
  GPUSHARE_ASSIGN_OR_RETURN(const int64_t free_gpus, IntMember(j, "FreeGPUs", 1, 1 << 20, 0));
  const json* pod_json = Member(j, "Pod");
  GPUSHARE_ASSIGN_OR_RETURN(const std::string pod_name,
                            internal::StringMember(j, "PodName", "plan request"));
  GPUSHARE_ASSIGN_OR_RETURN(std::string pod_ns,
                            internal::StringMember(j, "PodNamespace", "plan request"));
  const int goals = (pod_json != nullptr) + !pod_name.empty() + (free_gpus > 0);
  if (goals != 1) {
    return absl::InvalidArgumentError(
        "plan request must name exactly one goal: Pod, PodName (with PodNamespace) or "
        "FreeGPUs");
  }
  if (pod_name.empty() && !pod_ns.empty()) {
    return absl::InvalidArgumentError("plan request: PodNamespace '" + pod_ns +
                                      "' is given without PodName");
  }

  json warnings = json::array();
  std::optional<Pod> pod;
  if (pod_json != nullptr) {
    GPUSHARE_ASSIGN_OR_RETURN(pod, internal::PodFromJson(*pod_json));
    GPUSHARE_RETURN_IF_ERROR(
        ValidateDns1123Label("plan request Pod metadata.namespace", pod->namespace_name));
    GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain("plan request Pod metadata.name", pod->name));
  } else if (!pod_name.empty()) {
    if (pod_ns.empty()) pod_ns = "default";
    GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Label("plan request PodNamespace", pod_ns));
    GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain("plan request PodName", pod_name));
    const std::string id = absl::StrCat(pod_ns, "/", pod_name);
    pod = RememberedPod(id);
    if (!pod.has_value()) {
      return absl::NotFoundError(absl::StrCat(
          "pod '", id, "' is unknown to the extender (send it as \"Pod\" instead)"));
    }
  }
  if (pod.has_value()) {
    if (!pod->uses_gpus()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pod '", pod->request.id, "' asks for no GPU memory and no whole GPUs"));
    }
    if (!pod->node_name.empty()) {
      return absl::AlreadyExistsError(absl::StrCat("pod '", pod->request.id,
                                                   "' is already bound to node '",
                                                   pod->node_name, "'"));
    }
    if (!pod->required_node_affinity.empty()) {
      warnings.push_back("the pod's required node affinity is not part of the search");
    }
  }

  // A copy of the state, and the pods that may move: confirmed placements.
  std::optional<Cluster> copy;
  std::vector<Request> movable;
  // Only the copy is made under the scheduler's lock: binds wait for that,
  // not for the rest.
  std::set<std::string> reserved;
  scheduler_->Read([&](const Cluster& c, const std::vector<Reservation>& reservations) {
    copy.emplace(c);
    for (const Reservation& r : reservations) reserved.insert(r.placement.request_id);
  });
  for (const Placement& p : copy->placements()) {
    if (reserved.count(p.request_id)) continue;
    absl::StatusOr<Request> r = ::gpushare::internal::MovableRequestOf(*copy, p.request_id);
    GPUSHARE_RETURN_IF_ERROR(r.status());
    movable.push_back(*std::move(r));
  }
  // The inferred selector is every label of the pod's node, and a real node
  // carries a unique kubernetes.io/hostname: such a pod could never move. A
  // pod the extender knows keeps its own nodeSelector and GPU models instead,
  // unless it has a required node affinity, which the search cannot check
  // (it then stays with the inferred, stricter constraints).
  for (Request& r : movable) {
    std::optional<Pod> known = RememberedPod(r.id);
    if (!known.has_value() || !known->required_node_affinity.empty()) continue;
    r.node_selector = known->request.node_selector;
    r.gpu_models = known->request.gpu_models;
  }

  json reply{{"Error", ""}, {"Moves", json::array()}, {"Warnings", warnings}};
  // PlanMigrations() reads an empty list as "every placed pod": with no
  // confirmed placement, nothing may move.
  const int moves = movable.empty() ? 0 : static_cast<int>(max_moves);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.plan_deadline_ms);
  absl::StatusOr<MigrationPlan> plan =
      pod.has_value() ? copy->PlanMigrations(pod->request, moves, movable, budget, deadline)
                      : copy->PlanMigrationsToFreeGpus(free_gpus, moves, movable, budget, deadline);
  if (!pod.has_value()) reply["FreeGPUs"] = free_gpus;
  if (!plan.ok()) return plan.status();
  reply["Found"] = plan->found;
  reply["Proven"] = plan->proven;
  for (const Migration& m : plan->moves) {
    auto [ns, name] = SplitId(m.pod.id);
    reply["Moves"].push_back(json{
        {"PodNamespace", ns}, {"PodName", name}, {"From", Where(m.from)}, {"To", Where(m.to)}});
  }
  if (plan->then.has_value()) reply["Then"] = Where(*plan->then);
  if (!plan->found) {
    reply["Reason"] = plan->reason;
    if (movable.empty() && max_moves > 0) {
      reply["Reason"] = absl::StrCat(plan->reason, " (no confirmed placement may move)");
    }
  }
  return ::gpushare::internal::DumpJson(reply);
}

}  // namespace gpushare::k8s
