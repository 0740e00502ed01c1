// gpushare's C ABI (include/gpushare/c/gpushare.h) over gpushare::Scheduler
// and gpushare::k8s::Extender.
//
// Every entry point runs its body inside Guard(), which turns a status into
// a gs_status and any C++ exception into GS_INTERNAL, so none crosses into C.
// The checks of the C layer itself (NULL handles, struct sizes, lengths) come
// first and name the parameter; the rules of scheduling stay in the library:
// requests are validated by Cluster::Validate(), nodes by Scheduler::AddNode(),
// and Kubernetes pods are filtered, reserved and followed as gpushare-extender
// does (src/k8s/extender.cc).

#include "gpushare/c/gpushare.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpushare/cluster.h"
#include "gpushare/device_plugin.h"
#include "gpushare/fragmentation.h"
#include "gpushare/kubernetes.h"
#include "gpushare/policy.h"
#include "gpushare/scheduler.h"
#include "gpushare/types.h"
#include "gpushare/version.h"
#include "src/internal/cluster_state.h"
#include "src/internal/json_text.h"
#include "src/internal/status_macros.h"

// ---- The opaque types ------------------------------------------------------------

struct gs_status {
  gs_code code;
  std::string message;
};

// gs_scheduler_fit_all()'s answers: per shape of request, each node's
// verdict and the version of the node it was judged at. All of it belongs
// to one generation of the node order; another generation starts over.
struct VerdictMemo {
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>;
  static constexpr size_t kShapes = 64;  // Kept at most; the least recently used goes.
  static constexpr uint64_t kNever = ~uint64_t{0};
  struct Shape {
    std::vector<uint64_t> versions;
    std::vector<uint8_t> verdicts;
    uint64_t used = 0;
  };
  std::mutex mu;
  uint64_t generation = 0;
  uint64_t clock = 0;
  std::map<Key, Shape> shapes;

  // The shape's entry, sized for `nodes` nodes; mu held.
  Shape& Find(const gpushare::Demand& d, size_t nodes) {
    const Key key{static_cast<int>(d.kind), d.gpu_count, d.memory_per_gpu, d.compute_per_gpu,
                  d.cpu, d.host_memory};
    auto it = shapes.find(key);
    if (it == shapes.end()) {
      if (shapes.size() >= kShapes) {
        shapes.erase(std::min_element(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
          return a.second.used < b.second.used;
        }));
      }
      it = shapes.emplace(key, Shape()).first;
    }
    Shape& shape = it->second;
    shape.used = ++clock;
    if (shape.versions.size() != nodes) {
      shape.versions.assign(nodes, kNever);
      shape.verdicts.assign(nodes, 0);
    }
    return shape;
  }
};

struct gs_scheduler {
  explicit gs_scheduler(std::unique_ptr<gpushare::Scheduler> s)
      : scheduler(std::move(s)), extender(scheduler.get()) {}

  std::unique_ptr<gpushare::Scheduler> scheduler;
  // No binder: BindPod() only reserves; the host binds and confirms.
  gpushare::k8s::Extender extender;
  mutable VerdictMemo verdicts;
};

struct gs_node_names {
  std::string buffer;
  std::vector<uint32_t> lengths;
  uint64_t generation = 0;
};

struct gs_pod {
  // Set for gs_pod_parse(); the request is then pod->request.
  std::optional<gpushare::k8s::Pod> pod;
  gpushare::Request request;  // For gs_pod_from_request().

  const gpushare::Request& req() const { return pod ? pod->request : request; }
  // What req() needs from one node, validated when the pod was made, so
  // that a fit on one node (gs_scheduler_fit) does not validate again.
  gpushare::Demand demand;
};

struct gs_fit_results {
  std::vector<gpushare::FitResult> fits;
};

struct gs_placement {
  gpushare::Placement placement;
  std::string patch;  // {"metadata":{"annotations":{...}}}
  uint64_t token = 0;  // The reservation's, from gs_scheduler_reserve().
};

namespace {

using gpushare::Cluster;
using gpushare::FitResult;
using gpushare::NodeScore;
using gpushare::NodeStatus;
using gpushare::Placement;
using gpushare::Request;
using gpushare::Scheduler;
namespace k8s = gpushare::k8s;

// The error returned when not even an error can be allocated; never freed.
gs_status kNoMemory{GS_INTERNAL, "out of memory"};

gs_status* NewStatus(gs_code code, std::string message) noexcept {
  try {
    return new gs_status{code, std::move(message)};
  } catch (...) {
    return &kNoMemory;
  }
}

gs_status* FromStatus(const absl::Status& s) noexcept {
  if (s.ok()) return nullptr;
  const int code = static_cast<int>(s.code());
  try {
    return NewStatus(code >= GS_CANCELLED && code <= GS_UNAUTHENTICATED
                         ? static_cast<gs_code>(code)
                         : GS_UNKNOWN,
                     std::string(s.message()));
  } catch (...) {
    return &kNoMemory;
  }
}

// Runs `body` (returning absl::Status) with every exception caught.
template <typename Body>
gs_status* Guard(const char* fn, Body&& body) noexcept {
  try {
    return FromStatus(body());
  } catch (const std::bad_alloc&) {
    return &kNoMemory;
  } catch (const std::exception& e) {
    try {
      return NewStatus(GS_INTERNAL, absl::StrCat(fn, ": internal error: ", e.what()));
    } catch (...) {
      return &kNoMemory;
    }
  } catch (...) {
    try {
      return NewStatus(GS_INTERNAL, absl::StrCat(fn, ": internal error: unknown exception"));
    } catch (...) {
      return &kNoMemory;
    }
  }
}

absl::Status Invalid(const char* fn, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(fn, ": ", gpushare::internal::Sv(what)));
}

absl::Status IsNull(const char* fn, const char* param) {
  return absl::InvalidArgumentError(absl::StrCat(fn, ": ", param, " is NULL"));
}

// A (pointer, length) string in. NULL is accepted only with length 0.
absl::StatusOr<std::string> TextIn(const char* fn, const char* param, const char* text,
                                   size_t len) {
  if (text == nullptr) {
    if (len == 0) return std::string();
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": ", param, " is NULL but its length is ", len));
  }
  return std::string(text, len);
}

// A struct in must cover the fields of ABI 1: `end` is where its last one ends.
absl::Status CheckSize(const char* fn, const char* param, const char* type, size_t size,
                       size_t end) {
  if (size >= end) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      fn, ": ", param, "->size is ", size, ", less than the ", end, " bytes of ", type,
      " in ABI 1; set it with ", type, "_init()"));
}

// The fields of ABI 1 end here; later ABIs append after them.
constexpr size_t kOptionsEnd = offsetof(gs_scheduler_options, seed) + sizeof(uint64_t);
// ABI 4's fields of gs_scheduler_options end here: read when `size` covers them.
constexpr size_t kOptionsTargetEnd =
    offsetof(gs_scheduler_options, target_workload) + sizeof(const char*);
constexpr size_t kOptionsResourceEnd =
    offsetof(gs_scheduler_options, target_resource) + sizeof(int32_t);
constexpr size_t kNodeEnd = offsetof(gs_node, schedulable) + sizeof(int32_t);
constexpr size_t kRequestEnd = offsetof(gs_request, gpu_model_count) + sizeof(size_t);
constexpr size_t kReportEnd = offsetof(gs_event_report, warnings) + sizeof(int32_t);

// A string the caller frees with gs_string_free().
char* CopyOut(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

// gs_names as strings; NULL means every node, in the cluster's order.
absl::StatusOr<std::vector<std::string>> NamesIn(const char* fn, const gs_scheduler& s,
                                                 const gs_names* nodes) {
  std::vector<std::string> names;
  if (nodes == nullptr) {
    s.scheduler->Read([&](const Cluster& c) { names = c.node_names(); });
    return names;
  }
  if (nodes->count == 0) return names;
  if (nodes->lengths == nullptr) return IsNull(fn, "nodes->lengths");
  size_t total = 0;
  for (size_t i = 0; i < nodes->count; ++i) total += nodes->lengths[i];
  if (nodes->names == nullptr && total > 0) return IsNull(fn, "nodes->names");
  names.reserve(nodes->count);
  size_t at = 0;
  for (size_t i = 0; i < nodes->count; ++i) {
    names.emplace_back(nodes->names + at, nodes->lengths[i]);
    at += nodes->lengths[i];
  }
  return names;
}

// The extender's reason for a node that the pod's node affinity excludes.
constexpr char kAffinityReason[] = "node(s) didn't match Pod's node affinity/selector";

// Whether `pod` is judged by gpushare: a plain request always, a Kubernetes
// pod when it asks for GPUs (the extender passes every other pod through).
bool Judged(const gs_pod& pod) { return !pod.pod || pod.pod->uses_gpus(); }

// The extender's filter (Extender::Filter) for `pod` over `names`, in their
// order: a Kubernetes pod that asks for no GPUs fits every node; one that
// does first meets its required node affinity on every known node, then
// Scheduler::Filter(). Plain requests go to Scheduler::Filter() alone.
// A node held by GPU pods gpushare did not place is refused for that reason
// (k8s::Extender::NodeHold()), not as a cordon.
void ExplainHold(const gs_scheduler& s, std::string_view node, std::string* reason) {
  if (std::optional<std::string> hold = s.extender.NodeHold(node)) *reason = *std::move(hold);
}

absl::StatusOr<std::vector<FitResult>> Fit(const gs_scheduler& s, const gs_pod& pod,
                                           const std::vector<std::string>& names) {
  std::vector<FitResult> out;
  if (names.empty()) return out;  // Scheduler::Filter() would take it as "all".
  if (!pod.pod) {
    GPUSHARE_ASSIGN_OR_RETURN(out, s.scheduler->Filter(pod.request, names));
    for (FitResult& f : out) {
      if (!f.feasible) ExplainHold(s, f.node, &f.reason);
    }
    return out;
  }
  if (!pod.pod->uses_gpus()) {
    for (const std::string& name : names) out.push_back(FitResult{name, true, ""});
    return out;
  }
  std::vector<bool> excluded(names.size(), false);
  std::vector<std::string> allowed;
  s.scheduler->Read([&](const Cluster& cluster) {
    for (size_t i = 0; i < names.size(); ++i) {
      const NodeStatus* node = cluster.FindNode(names[i]);
      if (node != nullptr && !k8s::MatchesNodeAffinity(*pod.pod, names[i], node->labels)) {
        excluded[i] = true;
      } else {
        allowed.push_back(names[i]);
      }
    }
  });
  std::vector<FitResult> fits;
  if (!allowed.empty()) {
    GPUSHARE_ASSIGN_OR_RETURN(fits, s.scheduler->Filter(pod.pod->request, allowed));
  }
  size_t next = 0;  // `allowed` is a subsequence of `names`, `fits` parallel to it.
  for (size_t i = 0; i < names.size(); ++i) {
    if (excluded[i]) {
      out.push_back(FitResult{names[i], false, kAffinityReason});
    } else {
      out.push_back(std::move(fits[next++]));
      if (!out.back().feasible) ExplainHold(s, names[i], &out.back().reason);
    }
  }
  return out;
}

// The node a Kubernetes pod with a required node affinity goes to when the
// host names none: the best score under the policy (Scheduler::Score()) among
// the nodes Fit() accepts; ties go to the node added last, as the cluster's
// tie order does (ClusterOptions::tie_break_seed 0). ResourceExhausted, with
// the first reasons, when none fits.
absl::StatusOr<std::string> ChooseNode(const gs_scheduler& s, const gs_pod& pod) {
  std::vector<std::string> names;
  s.scheduler->Read([&](const Cluster& c) { names = c.node_names(); });
  GPUSHARE_ASSIGN_OR_RETURN(std::vector<FitResult> fits, Fit(s, pod, names));
  std::vector<std::string> feasible;
  std::string reasons;
  int infeasible = 0;
  for (const FitResult& f : fits) {
    if (f.feasible) {
      feasible.push_back(f.node);
    } else if (++infeasible <= 5) {
      absl::StrAppend(&reasons, "; ", f.node, ": ", f.reason);
    }
  }
  std::vector<NodeScore> scores;
  if (!feasible.empty()) {
    GPUSHARE_ASSIGN_OR_RETURN(scores, s.scheduler->Score(pod.req(), feasible));
  }
  if (scores.empty()) {
    if (infeasible > 5) absl::StrAppend(&reasons, "; and ", infeasible - 5, " more");
    return absl::ResourceExhaustedError(absl::StrCat("no node can host request '",
                                                     pod.req().id, "' (", names.size(),
                                                     " nodes)", reasons));
  }
  const NodeScore* best = &scores.front();
  for (const NodeScore& score : scores) {
    if (!(score.score < best->score)) best = &score;  // Later wins ties.
  }
  return best->node;
}

// The bind annotations of `placement` as the extender writes them.
absl::StatusOr<gs_placement> WithPatch(const Cluster& cluster, const Placement& placement) {
  GPUSHARE_ASSIGN_OR_RETURN(gpushare::DeviceView view,
                            gpushare::MakeDeviceView(cluster, placement));
  gs_placement out;
  out.placement = placement;
  out.patch = gpushare::internal::DumpJson(
      nlohmann::json{{"metadata", {{"annotations", view.annotations}}}});
  return out;
}

absl::StatusOr<gs_placement> WithPatch(const gs_scheduler& s, const Placement& placement) {
  absl::StatusOr<gs_placement> out = absl::UnknownError("unset");
  s.scheduler->Read([&](const Cluster& c) { out = WithPatch(c, placement); });
  return out;
}

// Reserves as gs_scheduler_reserve() documents (`node` empty: any node).
absl::StatusOr<gs_placement> Reserve(gs_scheduler& s, const gs_pod& pod, std::string node) {
  if (!pod.pod) {
    uint64_t token = 0;
    GPUSHARE_ASSIGN_OR_RETURN(Placement p, s.scheduler->Reserve(pod.request, node, &token));
    GPUSHARE_ASSIGN_OR_RETURN(gs_placement out, WithPatch(s, p));
    out.token = token;
    return out;
  }
  const k8s::Pod& k = *pod.pod;
  if (Judged(pod) && !k.required_node_affinity.empty()) {
    if (node.empty()) {
      GPUSHARE_ASSIGN_OR_RETURN(node, ChooseNode(s, pod));
    } else {
      // Reserve agrees with fit: a node the affinity excludes does not fit.
      bool excluded = false;
      s.scheduler->Read([&](const Cluster& c) {
        const NodeStatus* status = c.FindNode(node);
        excluded = status != nullptr && !k8s::MatchesNodeAffinity(k, node, status->labels);
      });
      if (excluded) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "request '", k.request.id, "' does not fit on node '", node, "': ", kAffinityReason));
      }
    }
  }
  // Through the extender, so that it owns the placement by the pod's UID and
  // later events about the pod confirm or release it. With no binder, a bind
  // only reserves (an empty node: any node, by the policy).
  s.extender.RememberPods(std::vector<k8s::Pod>{k});
  k8s::BindTarget target;
  target.pod_namespace = k.namespace_name;
  target.pod_name = k.name;
  target.pod_uid = k.uid;
  target.node = std::move(node);
  GPUSHARE_ASSIGN_OR_RETURN(k8s::BindResult bound, s.extender.BindPod(target));
  gs_placement out;
  out.placement = std::move(bound.placement);
  out.patch = std::move(bound.patch);
  out.token = bound.reservation_token;
  return out;
}

absl::Status Write(gs_placement&& placement, gs_placement** out) {
  if (out != nullptr) *out = new gs_placement(std::move(placement));
  return absl::OkStatus();
}

absl::StatusOr<gpushare::Node> NodeIn(const char* fn, const gs_node& n) {
  gpushare::Node node;
  if (n.name == nullptr) return IsNull(fn, "node->name");
  node.name = n.name;
  if (n.gpu_count < 0 || n.gpu_count > gpushare::kMaxGpusPerNode) {
    return Invalid(fn, absl::StrCat("node->gpu_count ", n.gpu_count, " is out of range [0, ",
                                    gpushare::kMaxGpusPerNode, "]"));
  }
  if (n.gpu_count > 0 && n.gpu_memory == nullptr) {
    return Invalid(fn, absl::StrCat("node->gpu_memory is NULL with gpu_count ", n.gpu_count));
  }
  for (int32_t i = 0; i < n.gpu_count; ++i) {
    gpushare::Gpu gpu;
    gpu.memory = n.gpu_memory[i];
    if (n.gpu_model != nullptr) gpu.model = n.gpu_model;
    if (n.gpu_uuids != nullptr && n.gpu_uuids[i] != nullptr) gpu.uuid = n.gpu_uuids[i];
    node.gpus.push_back(std::move(gpu));
  }
  node.cpu = n.cpu;
  node.host_memory = n.host_memory;
  if (n.label_count > 0 && n.labels == nullptr) {
    return Invalid(fn, absl::StrCat("node->labels is NULL with label_count ", n.label_count));
  }
  for (size_t i = 0; i < n.label_count; ++i) {
    const char* key = n.labels[2 * i];
    const char* value = n.labels[2 * i + 1];
    if (key == nullptr || value == nullptr) {
      return Invalid(fn, absl::StrCat("node->labels[", key == nullptr ? 2 * i : 2 * i + 1,
                                      "] is NULL"));
    }
    if (!node.labels.emplace(key, value).second) {
      return Invalid(fn, absl::StrCat("node->labels has the key '", key, "' twice"));
    }
  }
  switch (n.gpu_sharing) {
    case -1: break;
    case 0: node.gpu_sharing = false; break;
    case 1: node.gpu_sharing = true; break;
    default:
      return Invalid(fn, absl::StrCat("node->gpu_sharing ", n.gpu_sharing,
                                      " is not -1 (by the labels), 0 or 1"));
  }
  if (n.schedulable != 0 && n.schedulable != 1) {
    return Invalid(fn, absl::StrCat("node->schedulable ", n.schedulable, " is not 0 or 1"));
  }
  node.schedulable = n.schedulable == 1;
  return node;
}

// Requests are judged alone (the cluster's state does not enter): an empty
// cluster validates as well as any.
const Cluster& EmptyCluster() {
  static const Cluster* const kEmpty = new Cluster();
  return *kEmpty;
}

}  // namespace

extern "C" {

// ---- Errors ----------------------------------------------------------------------

gs_code gs_status_code(const gs_status* status) {
  return status == nullptr ? GS_OK : status->code;
}

const char* gs_status_message(const gs_status* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void gs_status_free(gs_status* status) {
  if (status != &kNoMemory) delete status;
}

void gs_string_free(char* text) { std::free(text); }

// ---- Version -----------------------------------------------------------------------

uint32_t gs_abi_version(void) { return GS_ABI_VERSION; }

const char* gs_version(void) { return gpushare::Version(); }

const char* gs_policy_names(void) {
  try {
    static const std::string names = absl::StrJoin(gpushare::PolicyNames(), ",");
    return names.c_str();
  } catch (...) {
    return "";  // Tried again on the next call.
  }
}

// ---- The scheduler -------------------------------------------------------------------

void gs_scheduler_options_init(gs_scheduler_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->size = sizeof(*options);
  options->policy = "binpack";
  options->reservation_ttl_ms = 60'000;
  options->seed = 0;
  options->target_workload = nullptr;
  options->target_resource = GS_TARGET_COMPUTE;
}

namespace {

// The options' target workload for PolicyOptions::fgd_target: the JSON, or
// with none the default one whole-GPU task on `resource` (null for compute:
// the policies' own default, the same task).
absl::StatusOr<std::shared_ptr<const gpushare::TargetWorkload>> TargetIn(
    const char* fn, const char* json, int32_t resource) {
  if (resource != GS_TARGET_COMPUTE && resource != GS_TARGET_MEMORY) {
    return Invalid(fn, absl::StrCat("options->target_resource ", resource,
                                    " is neither GS_TARGET_COMPUTE (0) nor GS_TARGET_MEMORY (1)"));
  }
  if (json == nullptr) {
    if (resource == GS_TARGET_COMPUTE) return nullptr;
    gpushare::TargetWorkload t;
    t.resource = gpushare::FragResource::kMemory;
    // gpu_share 0 on memory: the whole GPU, whatever its size.
    t.tasks.push_back(gpushare::TargetTask{0, 0, 1, {}, 1.0});
    return std::make_shared<const gpushare::TargetWorkload>(std::move(t));
  }
  absl::StatusOr<gpushare::TargetWorkload> t = gpushare::TargetWorkloadFromJson(json);
  if (!t.ok()) {
    return Invalid(fn, absl::StrCat("options->target_workload: ", t.status().message()));
  }
  if (resource == GS_TARGET_MEMORY && t->resource != gpushare::FragResource::kMemory) {
    return Invalid(fn, "options->target_resource is GS_TARGET_MEMORY but "
                       "options->target_workload's resource is \"compute\"");
  }
  return std::make_shared<const gpushare::TargetWorkload>(*std::move(t));
}

}  // namespace

gs_status* gs_scheduler_create(const gs_scheduler_options* options, gs_scheduler** out) {
  constexpr const char* fn = "gs_scheduler_create";
  return Guard(fn, [&]() -> absl::Status {
    if (out == nullptr) return IsNull(fn, "out");
    gs_scheduler_options o;
    gs_scheduler_options_init(&o);
    if (options != nullptr) {
      GPUSHARE_RETURN_IF_ERROR(
          CheckSize(fn, "options", "gs_scheduler_options", options->size, kOptionsEnd));
      o.policy = options->policy;
      o.reservation_ttl_ms = options->reservation_ttl_ms;
      o.seed = options->seed;
      if (options->size >= kOptionsTargetEnd) o.target_workload = options->target_workload;
      if (options->size >= kOptionsResourceEnd) o.target_resource = options->target_resource;
    }
    gpushare::SchedulerOptions so;
    so.policy = o.policy == nullptr ? "binpack" : o.policy;
    so.reservation_ttl_ms = o.reservation_ttl_ms;
    so.policy_options.seed = o.seed;
    GPUSHARE_ASSIGN_OR_RETURN(so.policy_options.fgd_target,
                              TargetIn(fn, o.target_workload, o.target_resource));
    GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> s,
                              Scheduler::Create(Cluster(), std::move(so)));
    *out = new gs_scheduler(std::move(s));
    return absl::OkStatus();
  });
}

void gs_scheduler_destroy(gs_scheduler* scheduler) { delete scheduler; }

// ---- Nodes ------------------------------------------------------------------------------

void gs_node_init(gs_node* node) {
  if (node == nullptr) return;
  std::memset(node, 0, sizeof(*node));
  node->size = sizeof(*node);
  node->gpu_sharing = -1;
  node->schedulable = 1;
}

gs_status* gs_scheduler_add_node(gs_scheduler* scheduler, const gs_node* node) {
  constexpr const char* fn = "gs_scheduler_add_node";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (node == nullptr) return IsNull(fn, "node");
    GPUSHARE_RETURN_IF_ERROR(CheckSize(fn, "node", "gs_node", node->size, kNodeEnd));
    GPUSHARE_ASSIGN_OR_RETURN(gpushare::Node n, NodeIn(fn, *node));
    return scheduler->scheduler->AddNode(n);
  });
}

gs_status* gs_scheduler_remove_node(gs_scheduler* scheduler, const char* name,
                                    size_t name_len) {
  constexpr const char* fn = "gs_scheduler_remove_node";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string n, TextIn(fn, "name", name, name_len));
    return scheduler->scheduler->RemoveNode(n);
  });
}

gs_status* gs_scheduler_set_node_schedulable(gs_scheduler* scheduler, const char* name,
                                             size_t name_len, int schedulable) {
  constexpr const char* fn = "gs_scheduler_set_node_schedulable";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string n, TextIn(fn, "name", name, name_len));
    return scheduler->scheduler->SetNodeSchedulable(n, schedulable != 0);
  });
}

gs_status* gs_scheduler_set_gpu_healthy(gs_scheduler* scheduler, const char* name,
                                        size_t name_len, int gpu, int healthy) {
  constexpr const char* fn = "gs_scheduler_set_gpu_healthy";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string n, TextIn(fn, "name", name, name_len));
    return scheduler->scheduler->SetGpuHealthy(n, gpu, healthy != 0);
  });
}

// ---- Kubernetes objects -------------------------------------------------------------------

namespace {

gs_status* ApplyEvent(const char* fn, gs_scheduler* scheduler, const char* type,
                      const char* json, size_t json_len, gs_event_report* report, bool node) {
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (type == nullptr) return IsNull(fn, "type");
    GPUSHARE_ASSIGN_OR_RETURN(std::string text, TextIn(fn, "json", json, json_len));
    if (report != nullptr) {
      GPUSHARE_RETURN_IF_ERROR(
          CheckSize(fn, "report", "gs_event_report", report->size, kReportEnd));
    }
    k8s::Extender& ext = scheduler->extender;
    GPUSHARE_ASSIGN_OR_RETURN(k8s::SyncReport r, node ? ext.ApplyNodeEvent(type, text)
                                                      : ext.ApplyPodEvent(type, text));
    if (report != nullptr) {
      report->nodes_added = r.nodes_added;
      report->nodes_updated = r.nodes_updated;
      report->nodes_removed = r.nodes_removed;
      report->confirmed = r.confirmed;
      report->released = r.released;
      report->restored = r.restored;
      report->warnings = static_cast<int32_t>(r.warnings.size());
    }
    return absl::OkStatus();
  });
}

}  // namespace

gs_status* gs_scheduler_apply_node_event(gs_scheduler* scheduler, const char* type,
                                         const char* json, size_t json_len,
                                         gs_event_report* report) {
  return ApplyEvent("gs_scheduler_apply_node_event", scheduler, type, json, json_len, report,
                    /*node=*/true);
}

gs_status* gs_scheduler_apply_pod_event(gs_scheduler* scheduler, const char* type,
                                        const char* json, size_t json_len,
                                        gs_event_report* report) {
  return ApplyEvent("gs_scheduler_apply_pod_event", scheduler, type, json, json_len, report,
                    /*node=*/false);
}

// ---- Pods ---------------------------------------------------------------------------------

void gs_request_init(gs_request* request) {
  if (request == nullptr) return;
  std::memset(request, 0, sizeof(*request));
  request->size = sizeof(*request);
  request->gpu_count = 1;
}

gs_status* gs_pod_from_request(const gs_request* request, gs_pod** out) {
  constexpr const char* fn = "gs_pod_from_request";
  return Guard(fn, [&]() -> absl::Status {
    if (request == nullptr) return IsNull(fn, "request");
    if (out == nullptr) return IsNull(fn, "out");
    GPUSHARE_RETURN_IF_ERROR(CheckSize(fn, "request", "gs_request", request->size, kRequestEnd));
    if (request->id == nullptr) return IsNull(fn, "request->id");
    auto pod = std::make_unique<gs_pod>();
    Request& r = pod->request;
    r.id = request->id;
    r.gpu_memory = request->gpu_memory;
    r.gpu_count = request->gpu_count;
    r.compute = request->compute;
    r.whole_gpus = request->whole_gpus;
    r.cpu = request->cpu;
    r.host_memory = request->host_memory;
    if (request->gpu_model_count > 0 && request->gpu_models == nullptr) {
      return Invalid(fn, absl::StrCat("request->gpu_models is NULL with gpu_model_count ",
                                      request->gpu_model_count));
    }
    for (size_t i = 0; i < request->gpu_model_count; ++i) {
      if (request->gpu_models[i] == nullptr) {
        return Invalid(fn, absl::StrCat("request->gpu_models[", i, "] is NULL"));
      }
      r.gpu_models.emplace_back(request->gpu_models[i]);
    }
    GPUSHARE_ASSIGN_OR_RETURN(pod->demand, EmptyCluster().Validate(r));
    *out = pod.release();
    return absl::OkStatus();
  });
}

gs_status* gs_pod_parse(const char* json, size_t json_len, gs_pod** out) {
  constexpr const char* fn = "gs_pod_parse";
  return Guard(fn, [&]() -> absl::Status {
    if (out == nullptr) return IsNull(fn, "out");
    GPUSHARE_ASSIGN_OR_RETURN(std::string text, TextIn(fn, "json", json, json_len));
    auto pod = std::make_unique<gs_pod>();
    GPUSHARE_ASSIGN_OR_RETURN(pod->pod, k8s::ParsePod(text));
    // Its names become the API server paths of the host's patch and bind,
    // as in the extender's requests.
    GPUSHARE_RETURN_IF_ERROR(
        k8s::ValidateDns1123Label("pod metadata.namespace", pod->pod->namespace_name));
    GPUSHARE_RETURN_IF_ERROR(k8s::ValidateDns1123Subdomain("pod metadata.name", pod->pod->name));
    GPUSHARE_ASSIGN_OR_RETURN(pod->demand, EmptyCluster().Validate(pod->pod->request));
    *out = pod.release();
    return absl::OkStatus();
  });
}

void gs_pod_free(gs_pod* pod) { delete pod; }

const char* gs_pod_id(const gs_pod* pod) {
  return pod == nullptr ? "" : pod->req().id.c_str();
}

int gs_pod_uses_gpus(const gs_pod* pod) {
  if (pod == nullptr) return 0;
  if (pod->pod) return pod->pod->uses_gpus() ? 1 : 0;
  const Request& r = pod->request;
  return r.gpu_memory > 0 || r.compute > 0 || r.whole_gpus > 0 ? 1 : 0;
}

// ---- Filter and score -----------------------------------------------------------------------

// A host's Filter asks about one node at a time, hundreds of times a pod, so
// this is Fit() for one node without its copies: one shared lock, the demand
// validated when the pod was made, no vectors. Fit() stays the reference
// (gs_scheduler_filter), and the C test checks that both agree.
gs_status* gs_scheduler_fit(const gs_scheduler* scheduler, const gs_pod* pod, const char* node,
                            size_t node_len, int* feasible, char** reason) {
  constexpr const char* fn = "gs_scheduler_fit";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    if (feasible == nullptr) return IsNull(fn, "feasible");
    if (node == nullptr && node_len != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": node is NULL but its length is ", node_len));
    }
    const std::string_view name(node == nullptr ? "" : node, node_len);
    bool fits = false;
    std::string why;
    if (pod->pod && !pod->pod->uses_gpus()) {
      fits = true;  // As Fit(): gpushare has no say over pods without GPUs.
    } else {
      scheduler->scheduler->Read([&](const Cluster& cluster) {
        const NodeStatus* status = cluster.FindNode(name);
        if (status == nullptr) {
          why = absl::StrCat("node '", std::string(name), "' is unknown to gpushare");
          return;
        }
        if (pod->pod && !k8s::MatchesNodeAffinity(*pod->pod, status->name, status->labels)) {
          why = kAffinityReason;
          return;
        }
        thread_local std::vector<int> fitting;
        std::optional<std::string> no =
            gpushare::internal::CheckNode(*status, pod->demand, pod->req(), &fitting);
        fits = !no.has_value();
        if (no) why = *std::move(no);
      });
      if (!fits && !why.empty() && why != kAffinityReason) ExplainHold(*scheduler, name, &why);
    }
    char* out_reason = nullptr;
    if (reason != nullptr && !fits) out_reason = CopyOut(why);
    *feasible = fits ? 1 : 0;
    if (reason != nullptr) *reason = out_reason;
    return absl::OkStatus();
  });
}

gs_status* gs_scheduler_fit_after(const gs_scheduler* scheduler, const gs_pod* pod,
                                  const char* node, size_t node_len, const gs_names* removed,
                                  const gs_pod* const* added, size_t added_count, int* feasible,
                                  int* unresolvable, char** reason) {
  constexpr const char* fn = "gs_scheduler_fit_after";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    if (feasible == nullptr) return IsNull(fn, "feasible");
    if (node == nullptr && node_len != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": node is NULL but its length is ", node_len));
    }
    if (added == nullptr && added_count != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": added is NULL but added_count is ", added_count));
    }
    gpushare::NodeEdits edits;
    if (removed != nullptr) {
      GPUSHARE_ASSIGN_OR_RETURN(edits.removed, NamesIn(fn, *scheduler, removed));
    }
    edits.added.reserve(added_count);
    for (size_t i = 0; i < added_count; ++i) {
      if (added[i] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(fn, ": added[", i, "] is NULL"));
      }
      // A pod without GPUs holds nothing gpushare judges.
      if (added[i]->pod && !added[i]->pod->uses_gpus()) continue;
      edits.added.push_back(added[i]->req());
    }
    const std::string_view name(node == nullptr ? "" : node, node_len);
    bool fits = false, never = false;
    std::string why;
    if (pod->pod && !pod->pod->uses_gpus()) {
      fits = true;  // As gs_scheduler_fit().
    } else {
      bool excluded = false;
      if (pod->pod && !pod->pod->required_node_affinity.empty()) {
        scheduler->scheduler->Read([&](const Cluster& cluster) {
          const NodeStatus* status = cluster.FindNode(name);
          excluded = status != nullptr &&
                     !k8s::MatchesNodeAffinity(*pod->pod, status->name, status->labels);
        });
      }
      if (excluded) {
        why = kAffinityReason;
        never = true;
      } else {
        GPUSHARE_ASSIGN_OR_RETURN(FitResult r,
                                  scheduler->scheduler->FitAfter(pod->req(), name, edits, &never));
        fits = r.feasible;
        why = std::move(r.reason);
        if (!fits) ExplainHold(*scheduler, name, &why);
      }
    }
    char* out_reason = nullptr;
    if (reason != nullptr && !fits) out_reason = CopyOut(why);
    if (unresolvable != nullptr) *unresolvable = never ? 1 : 0;
    *feasible = fits ? 1 : 0;
    if (reason != nullptr) *reason = out_reason;
    return absl::OkStatus();
  });
}

namespace {

// Whether gs_scheduler_fit() of `pod` depends on the nodes' resources alone
// (what gs_scheduler_fit_all() serves): NodeFits() then reads the request's
// demand and nothing else of it.
bool ShapeOnly(const gs_pod& pod) {
  const gpushare::Request& r = pod.req();
  return r.node_selector.empty() && r.gpu_models.empty() &&
         (r.topology.mode != gpushare::TopologyNeed::Mode::kRequire ||
          pod.demand.gpu_count < 2) &&
         (!pod.pod || pod.pod->required_node_affinity.empty());
}

}  // namespace

gs_status* gs_scheduler_fit_all(const gs_scheduler* scheduler, const gs_pod* pod,
                                uint8_t* verdicts, size_t capacity, size_t* count,
                                uint64_t* generation, int* served) {
  constexpr const char* fn = "gs_scheduler_fit_all";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    if (count == nullptr) return IsNull(fn, "count");
    if (generation == nullptr) return IsNull(fn, "generation");
    if (served == nullptr) return IsNull(fn, "served");
    if (verdicts == nullptr && capacity != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(fn, ": verdicts is NULL but its capacity is ", capacity));
    }
    *count = 0;
    *generation = 0;
    *served = 0;
    if (!ShapeOnly(*pod)) return absl::OkStatus();
    scheduler->scheduler->Read([&](const Cluster& cluster) {
      const std::vector<NodeStatus>& nodes = gpushare::internal::ClusterAccess::Nodes(cluster);
      const size_t n = nodes.size();
      *count = n;
      *generation = gpushare::internal::ClusterAccess::NodeSetGenerationOf(cluster);
      *served = 1;
      if (pod->pod && !pod->pod->uses_gpus()) {  // As gs_scheduler_fit(): fits everywhere.
        std::fill_n(verdicts, std::min(capacity, n), uint8_t{1});
        return;
      }
      VerdictMemo& memo = scheduler->verdicts;
      std::lock_guard lock(memo.mu);
      if (memo.generation != *generation) {
        memo.shapes.clear();
        memo.generation = *generation;
      }
      VerdictMemo::Shape& shape = memo.Find(pod->demand, n);
      thread_local std::vector<int> fitting;
      for (size_t i = 0; i < n; ++i) {
        if (shape.versions[i] == nodes[i].version) continue;
        shape.verdicts[i] =
            gpushare::internal::NodeFits(nodes[i], pod->demand, pod->req(), &fitting) ? 1 : 0;
        shape.versions[i] = nodes[i].version;
      }
      if (capacity > 0) std::memcpy(verdicts, shape.verdicts.data(), std::min(capacity, n));
    });
    return absl::OkStatus();
  });
}

gs_status* gs_scheduler_node_names(const gs_scheduler* scheduler, gs_node_names** out) {
  constexpr const char* fn = "gs_scheduler_node_names";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (out == nullptr) return IsNull(fn, "out");
    auto names = std::make_unique<gs_node_names>();
    scheduler->scheduler->Read([&](const Cluster& cluster) {
      const std::vector<NodeStatus>& nodes = gpushare::internal::ClusterAccess::Nodes(cluster);
      names->generation = gpushare::internal::ClusterAccess::NodeSetGenerationOf(cluster);
      names->lengths.reserve(nodes.size());
      for (const NodeStatus& node : nodes) {
        names->buffer += node.name;
        names->lengths.push_back(static_cast<uint32_t>(node.name.size()));
      }
    });
    *out = names.release();
    return absl::OkStatus();
  });
}

void gs_node_names_data(const gs_node_names* names, const char** buffer,
                        const uint32_t** lengths, size_t* count, uint64_t* generation) {
  if (buffer != nullptr) *buffer = names == nullptr ? "" : names->buffer.data();
  if (lengths != nullptr) *lengths = names == nullptr ? nullptr : names->lengths.data();
  if (count != nullptr) *count = names == nullptr ? 0 : names->lengths.size();
  if (generation != nullptr) *generation = names == nullptr ? 0 : names->generation;
}

void gs_node_names_free(gs_node_names* names) { delete names; }

gs_status* gs_scheduler_filter(const gs_scheduler* scheduler, const gs_pod* pod,
                               const gs_names* nodes, gs_fit_results** out) {
  constexpr const char* fn = "gs_scheduler_filter";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    if (out == nullptr) return IsNull(fn, "out");
    GPUSHARE_ASSIGN_OR_RETURN(std::vector<std::string> names,
                              NamesIn(fn, *scheduler, nodes));
    auto results = std::make_unique<gs_fit_results>();
    GPUSHARE_ASSIGN_OR_RETURN(results->fits, Fit(*scheduler, *pod, names));
    *out = results.release();
    return absl::OkStatus();
  });
}

size_t gs_fit_results_count(const gs_fit_results* results) {
  return results == nullptr ? 0 : results->fits.size();
}

const char* gs_fit_results_node(const gs_fit_results* results, size_t i) {
  if (results == nullptr || i >= results->fits.size()) return nullptr;
  return results->fits[i].node.c_str();
}

int gs_fit_results_feasible(const gs_fit_results* results, size_t i) {
  if (results == nullptr || i >= results->fits.size()) return 0;
  return results->fits[i].feasible ? 1 : 0;
}

const char* gs_fit_results_reason(const gs_fit_results* results, size_t i) {
  if (results == nullptr || i >= results->fits.size()) return nullptr;
  return results->fits[i].reason.c_str();
}

void gs_fit_results_free(gs_fit_results* results) { delete results; }

gs_status* gs_scheduler_rank(const gs_scheduler* scheduler, const gs_pod* pod,
                             const gs_names* nodes, int64_t* ranks) {
  constexpr const char* fn = "gs_scheduler_rank";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    if (nodes == nullptr) return IsNull(fn, "nodes");
    if (ranks == nullptr && nodes->count > 0) return IsNull(fn, "ranks");
    GPUSHARE_ASSIGN_OR_RETURN(std::vector<std::string> names,
                              NamesIn(fn, *scheduler, nodes));
    std::vector<int64_t> out(names.size(), -1);
    if (!Judged(*pod)) {
      // The extender ranks every node 0 for a pod that asks for no GPUs.
      std::fill(out.begin(), out.end(), 0);
    } else if (!names.empty()) {
      std::vector<std::string> admitted;  // Those the pod's node affinity admits.
      const bool affinity = pod->pod && !pod->pod->required_node_affinity.empty();
      if (affinity) {
        GPUSHARE_ASSIGN_OR_RETURN(std::vector<FitResult> fits, Fit(*scheduler, *pod, names));
        for (const FitResult& f : fits) {
          if (f.feasible) admitted.push_back(f.node);
        }
      }
      const std::vector<std::string>& scored = affinity ? admitted : names;
      if (!scored.empty()) {
        GPUSHARE_ASSIGN_OR_RETURN(std::vector<NodeScore> scores,
                                  scheduler->scheduler->Score(pod->req(), scored));
        // Score() keeps the order of the names it was given (a subsequence
        // of `names`), leaving out nodes where the pod does not fit.
        size_t next = 0;
        for (size_t i = 0; i < names.size() && next < scores.size(); ++i) {
          if (names[i] == scores[next].node) out[i] = scores[next++].rank;
        }
      }
    }
    for (size_t i = 0; i < out.size(); ++i) ranks[i] = out[i];
    return absl::OkStatus();
  });
}

// ---- Placements ----------------------------------------------------------------------------

gs_status* gs_scheduler_reserve(gs_scheduler* scheduler, const gs_pod* pod, const char* node,
                                size_t node_len, gs_placement** out) {
  constexpr const char* fn = "gs_scheduler_reserve";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    GPUSHARE_ASSIGN_OR_RETURN(std::string name, TextIn(fn, "node", node, node_len));
    GPUSHARE_ASSIGN_OR_RETURN(gs_placement p, Reserve(*scheduler, *pod, std::move(name)));
    return Write(std::move(p), out);
  });
}

gs_status* gs_scheduler_place(gs_scheduler* scheduler, const gs_pod* pod, gs_placement** out) {
  constexpr const char* fn = "gs_scheduler_place";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (pod == nullptr) return IsNull(fn, "pod");
    Scheduler& s = *scheduler->scheduler;
    if (!pod->pod) {
      GPUSHARE_ASSIGN_OR_RETURN(Placement p, s.Place(pod->request));
      GPUSHARE_ASSIGN_OR_RETURN(gs_placement placed, WithPatch(*scheduler, p));
      return Write(std::move(placed), out);
    }
    // A Kubernetes pod: reserved as by gs_scheduler_reserve() (its affinity,
    // its owner), then confirmed. Placed already is AlreadyExists, as for
    // Scheduler::Place().
    const std::string& id = pod->req().id;
    std::optional<std::string> held;
    s.Read([&](const Cluster& c) {
      if (const Placement* p = c.FindPlacement(id)) held = p->node;
    });
    if (held) {
      return absl::AlreadyExistsError(
          absl::StrCat("request '", id, "' is already placed on node '", *held, "'"));
    }
    GPUSHARE_ASSIGN_OR_RETURN(gs_placement placed, Reserve(*scheduler, *pod, ""));
    if (!s.Confirm(id).ok()) {
      // The reservation ran out already (a TTL of a few ms): hold it again.
      GPUSHARE_RETURN_IF_ERROR(s.Commit(placed.placement));
    }
    return Write(std::move(placed), out);
  });
}

gs_status* gs_scheduler_confirm(gs_scheduler* scheduler, const char* id, size_t id_len) {
  constexpr const char* fn = "gs_scheduler_confirm";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    return scheduler->scheduler->Confirm(i);
  });
}

gs_status* gs_scheduler_forget(gs_scheduler* scheduler, const char* id, size_t id_len) {
  constexpr const char* fn = "gs_scheduler_forget";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    return scheduler->scheduler->Forget(i);
  });
}

gs_status* gs_scheduler_confirm_reservation(gs_scheduler* scheduler, const char* id,
                                            size_t id_len, uint64_t token) {
  constexpr const char* fn = "gs_scheduler_confirm_reservation";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (token == 0) return Invalid(fn, "token 0 names no reservation");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    return scheduler->scheduler->Confirm(i, token);
  });
}

gs_status* gs_scheduler_forget_reservation(gs_scheduler* scheduler, const char* id,
                                           size_t id_len, uint64_t token) {
  constexpr const char* fn = "gs_scheduler_forget_reservation";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (token == 0) return Invalid(fn, "token 0 names no reservation");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    return scheduler->scheduler->Forget(i, token);
  });
}

gs_status* gs_scheduler_release(gs_scheduler* scheduler, const char* id, size_t id_len) {
  constexpr const char* fn = "gs_scheduler_release";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    return scheduler->scheduler->Release(i);
  });
}

int gs_scheduler_expire(gs_scheduler* scheduler) {
  if (scheduler == nullptr) return 0;
  try {
    return scheduler->scheduler->ExpireReservations();
  } catch (...) {
    return 0;
  }
}

gs_status* gs_scheduler_placement(const gs_scheduler* scheduler, const char* id, size_t id_len,
                                  gs_placement** out) {
  constexpr const char* fn = "gs_scheduler_placement";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (out == nullptr) return IsNull(fn, "out");
    GPUSHARE_ASSIGN_OR_RETURN(std::string i, TextIn(fn, "id", id, id_len));
    absl::StatusOr<gs_placement> held = absl::NotFoundError(
        absl::StrCat("request '", i, "' holds no placement"));
    scheduler->scheduler->Read([&](const Cluster& c) {
      if (const Placement* p = c.FindPlacement(i)) held = WithPatch(c, *p);
    });
    if (!held.ok()) return held.status();
    return Write(*std::move(held), out);
  });
}

const char* gs_placement_request_id(const gs_placement* placement) {
  return placement == nullptr ? "" : placement->placement.request_id.c_str();
}

const char* gs_placement_node(const gs_placement* placement) {
  return placement == nullptr ? "" : placement->placement.node.c_str();
}

size_t gs_placement_gpu_count(const gs_placement* placement) {
  return placement == nullptr ? 0 : placement->placement.gpus.size();
}

int gs_placement_gpu(const gs_placement* placement, size_t i) {
  if (placement == nullptr || i >= placement->placement.gpus.size()) return -1;
  return placement->placement.gpus[i];
}

int64_t gs_placement_memory_per_gpu(const gs_placement* placement) {
  return placement == nullptr ? 0 : placement->placement.memory_per_gpu;
}

int64_t gs_placement_compute_per_gpu(const gs_placement* placement) {
  return placement == nullptr ? 0 : placement->placement.compute_per_gpu;
}

int gs_placement_exclusive(const gs_placement* placement) {
  return placement != nullptr && placement->placement.exclusive ? 1 : 0;
}

uint64_t gs_placement_token(const gs_placement* placement) {
  return placement == nullptr ? 0 : placement->token;
}

const char* gs_placement_patch(const gs_placement* placement) {
  return placement == nullptr ? "" : placement->patch.c_str();
}

void gs_placement_free(gs_placement* placement) { delete placement; }

// ---- Snapshot ---------------------------------------------------------------------------------

gs_status* gs_scheduler_snapshot(const gs_scheduler* scheduler, char** json) {
  constexpr const char* fn = "gs_scheduler_snapshot";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    if (json == nullptr) return IsNull(fn, "json");
    std::string text;
    scheduler->scheduler->Read([&](const Cluster& c) { text = c.ToJson(); });
    *json = CopyOut(text);
    return absl::OkStatus();
  });
}

gs_status* gs_scheduler_check(const gs_scheduler* scheduler) {
  constexpr const char* fn = "gs_scheduler_check";
  return Guard(fn, [&]() -> absl::Status {
    if (scheduler == nullptr) return IsNull(fn, "scheduler");
    return scheduler->scheduler->CheckInvariants();
  });
}

}  // extern "C"
