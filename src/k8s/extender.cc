// The scheduler-extender protocol (k8s.io/kube-scheduler/extender/v1) over a
// Scheduler: filter, prioritize, bind, preempt, lifecycle calls and inspect.

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/device_plugin.h"
#include "gpushare/kubernetes.h"
#include "src/internal/cluster_state.h"
#include "src/internal/status_macros.h"
#include "src/k8s/json_util.h"

namespace gpushare::k8s {

using internal::json;
using internal::Member;

// Pods seen by Filter/Prioritize (or remembered from a pod list), by UID and
// by "<namespace>/<name>", for Bind, Preempt and the lifecycle calls.
struct Extender::PodCache {
  std::mutex mu;
  absl::flat_hash_map<std::string, Pod> by_id;          // Guarded by mu.
  absl::flat_hash_map<std::string, std::string> uid_to_id;  // Guarded by mu.
  std::deque<std::string> order;                        // Guarded by mu; oldest first.
  int limit = 0;
  // Sequence number of the latest bind of each id, for Sync().
  uint64_t binds = 0;                                       // Guarded by mu.
  absl::flat_hash_map<std::string, uint64_t> bound_at;      // Guarded by mu.

  void NoteBind(const std::string& id) {
    std::lock_guard lock(mu);
    bound_at[id] = ++binds;
    // Without Sync() nothing prunes the map: keep it about `limit` long.
    if (static_cast<int64_t>(bound_at.size()) > 2 * static_cast<int64_t>(limit)) {
      const uint64_t keep_after = binds - static_cast<uint64_t>(limit);
      absl::erase_if(bound_at, [&](const auto& e) { return e.second <= keep_after; });
    }
  }
  bool BoundAfter(const std::string& id, uint64_t mark) {
    std::lock_guard lock(mu);
    auto it = bound_at.find(id);
    return it != bound_at.end() && it->second > mark;
  }
  void ForgetBindsUpTo(uint64_t mark) {
    std::lock_guard lock(mu);
    absl::erase_if(bound_at, [&](const auto& e) { return e.second <= mark; });
  }

  void Put(const Pod& pod) {
    std::lock_guard lock(mu);
    auto [it, inserted] = by_id.insert_or_assign(pod.request.id, pod);
    if (!pod.uid.empty()) uid_to_id[pod.uid] = pod.request.id;
    if (!inserted) return;
    order.push_back(pod.request.id);
    while (static_cast<int>(order.size()) > limit) {
      auto old = by_id.find(order.front());
      if (old != by_id.end()) {
        uid_to_id.erase(old->second.uid);
        by_id.erase(old);
      }
      order.pop_front();
    }
  }
  std::optional<Pod> Get(const std::string& uid, const std::string& id) {
    std::lock_guard lock(mu);
    if (!uid.empty()) {
      auto u = uid_to_id.find(uid);
      if (u != uid_to_id.end()) {
        auto it = by_id.find(u->second);
        if (it != by_id.end()) return it->second;
      }
    }
    auto it = by_id.find(id);
    if (it != by_id.end() && (uid.empty() || it->second.uid.empty() || it->second.uid == uid)) {
      return it->second;
    }
    return std::nullopt;
  }
  std::optional<std::string> IdOfUid(const std::string& uid) {
    std::lock_guard lock(mu);
    auto u = uid_to_id.find(uid);
    if (u == uid_to_id.end()) return std::nullopt;
    return u->second;
  }
};

namespace {

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

// The parsed ExtenderArgs.
struct Args {
  Pod pod;
  bool with_nodes = false;             // "Nodes" given (else "NodeNames").
  std::vector<json> node_objects;      // With "Nodes".
  std::vector<Node> nodes;             // Parsed node_objects.
  std::vector<std::string> names;      // Candidate node names, in order.
};

absl::StatusOr<Args> ParseArgs(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, "ExtenderArgs"));
  if (!j.is_object()) return Invalid("ExtenderArgs must be a JSON object");
  Args args;
  const json* pod = Member(j, "Pod");
  if (pod == nullptr) return Invalid("ExtenderArgs has no Pod");
  GPUSHARE_ASSIGN_OR_RETURN(args.pod, internal::PodFromJson(*pod));
  const json* nodes = Member(j, "Nodes");
  const json* names = Member(j, "NodeNames");
  if (nodes != nullptr) {
    GPUSHARE_ASSIGN_OR_RETURN(const json* items, internal::ListItems(*nodes, "ExtenderArgs.Nodes"));
    args.with_nodes = true;
    for (const json& item : *items) {
      GPUSHARE_ASSIGN_OR_RETURN(Node node, internal::NodeFromJson(item));
      args.names.push_back(node.name);
      args.nodes.push_back(std::move(node));
      args.node_objects.push_back(item);
    }
  } else if (names != nullptr) {
    if (!names->is_array()) return Invalid("ExtenderArgs.NodeNames must be an array of strings");
    for (const json& n : *names) {
      if (!n.is_string()) return Invalid("ExtenderArgs.NodeNames must be an array of strings");
      args.names.push_back(n.get<std::string>());
    }
  } else {
    return Invalid("ExtenderArgs has neither Nodes nor NodeNames");
  }
  return args;
}

absl::StatusOr<std::string> RequiredString(const json& j, std::string_view key,
                                           std::string_view where) {
  GPUSHARE_ASSIGN_OR_RETURN(std::string s, internal::StringMember(j, key, where));
  if (s.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(::gpushare::internal::Sv(where), " has no ", ::gpushare::internal::Sv(key)));
  }
  return s;
}

json PlacementJson(const Placement& p) {
  return json{{"node", p.node},
              {"gpus", p.gpus},
              {"memoryPerGpu", p.memory_per_gpu},
              {"computePerGpu", p.compute_per_gpu},
              {"exclusive", p.exclusive}};
}

std::string Reply(const std::string& error) { return json{{"Error", error}}.dump(); }

}  // namespace

Extender::Extender(Scheduler* scheduler, ExtenderOptions options)
    : scheduler_(scheduler), options_(std::move(options)), cache_(std::make_unique<PodCache>()) {
  cache_->limit = std::max(1, options_.max_cached_pods);
}

Extender::~Extender() = default;

std::string ErrorJson(const absl::Status& status) {
  return json{{"Error", std::string(status.message())},
              {"Code", absl::StatusCodeToString(status.code())}}
      .dump();
}

std::string Extender::Version() const { return json{{"version", options_.version}}.dump(); }

absl::Status Extender::RememberPods(std::string_view pods_json) {
  GPUSHARE_ASSIGN_OR_RETURN(json list, internal::ParseJson(pods_json, "pod list"));
  GPUSHARE_ASSIGN_OR_RETURN(const json* items, internal::ListItems(list, "pod list"));
  std::vector<Pod> pods;
  for (const json& item : *items) {
    GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(item));
    pods.push_back(std::move(pod));
  }
  for (const Pod& pod : pods) cache_->Put(pod);
  return absl::OkStatus();
}

// ---- Filter and prioritize -----------------------------------------------------

namespace {

// Splits `names` into those the pod's affinity allows (returned) and the
// rest (added to `failed` with kube-scheduler's reason).
std::vector<std::string> ApplyAffinity(const Scheduler& scheduler, const Pod& pod,
                                       const std::vector<std::string>& names,
                                       std::map<std::string, std::string>* failed) {
  std::vector<std::string> allowed;
  scheduler.Read([&](const Cluster& cluster) {
    for (const std::string& name : names) {
      const NodeStatus* node = cluster.FindNode(name);
      if (node != nullptr && !MatchesNodeAffinity(pod, name, node->labels)) {
        (*failed)[name] = "node(s) didn't match Pod's node affinity/selector";
      } else {
        allowed.push_back(name);
      }
    }
  });
  return allowed;
}

}  // namespace

absl::StatusOr<std::string> Extender::Filter(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(Args args, ParseArgs(body));
  // Everything is validated; now learn the pod and any new nodes.
  cache_->Put(args.pod);
  for (const Node& node : args.nodes) {
    bool known = false;
    scheduler_->Read([&](const Cluster& c) { known = c.FindNode(node.name) != nullptr; });
    // A concurrent Filter may add it first: AlreadyExists is fine.
    if (!known) scheduler_->AddNode(node).IgnoreError();
  }
  std::map<std::string, std::string> failed;
  std::set<std::string> passed;
  if (!args.pod.uses_gpus()) {
    passed.insert(args.names.begin(), args.names.end());
  } else {
    std::vector<std::string> allowed = ApplyAffinity(*scheduler_, args.pod, args.names, &failed);
    // An empty list would mean "every node" to Scheduler::Filter.
    absl::StatusOr<std::vector<FitResult>> fits =
        allowed.empty() ? absl::StatusOr<std::vector<FitResult>>(std::vector<FitResult>{})
                        : scheduler_->Filter(args.pod.request, allowed);
    if (!fits.ok()) {
      for (const std::string& name : allowed) failed[name] = std::string(fits.status().message());
    } else {
      for (const FitResult& f : *fits) {
        if (f.feasible) {
          passed.insert(f.node);
        } else {
          failed[f.node] = f.reason;
        }
      }
    }
  }
  json reply{{"FailedNodes", failed}, {"Error", ""}};
  reply["FailedAndUnresolvableNodes"] = json::object();
  if (args.with_nodes) {
    json items = json::array();
    for (size_t i = 0; i < args.names.size(); ++i) {
      if (passed.count(args.names[i])) items.push_back(args.node_objects[i]);
    }
    reply["Nodes"] = json{{"metadata", json::object()}, {"items", items}};
    reply["NodeNames"] = nullptr;
  } else {
    std::vector<std::string> names;
    for (const std::string& n : args.names) {
      if (passed.count(n)) names.push_back(n);
    }
    reply["Nodes"] = nullptr;
    reply["NodeNames"] = names;
  }
  return reply.dump();
}

absl::StatusOr<std::string> Extender::Prioritize(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(Args args, ParseArgs(body));
  cache_->Put(args.pod);
  std::map<std::string, int64_t> score;
  if (args.pod.uses_gpus()) {
    std::map<std::string, std::string> ignored;
    std::vector<std::string> allowed = ApplyAffinity(*scheduler_, args.pod, args.names, &ignored);
    if (!allowed.empty()) {
      absl::StatusOr<std::vector<NodeScore>> scores =
          scheduler_->Score(args.pod.request, allowed);
      if (scores.ok()) {
        for (const NodeScore& s : *scores) score[s.node] = s.rank;
      }
    }
  }
  json list = json::array();
  for (const std::string& name : args.names) {
    auto it = score.find(name);
    list.push_back(json{{"Host", name}, {"Score", it == score.end() ? 0 : it->second}});
  }
  return list.dump();
}

// ---- Bind ------------------------------------------------------------------------

std::string BindingJson(const BindTarget& target) {
  json meta{{"name", target.pod_name},
            {"namespace", target.pod_namespace.empty() ? "default" : target.pod_namespace}};
  if (!target.pod_uid.empty()) meta["uid"] = target.pod_uid;
  return json{{"apiVersion", "v1"},
              {"kind", "Binding"},
              {"metadata", meta},
              {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", target.node}}}}
      .dump();
}

absl::StatusOr<BindResult> Extender::BindPod(const BindTarget& target) {
  const std::string id = absl::StrCat(
      target.pod_namespace.empty() ? "default" : target.pod_namespace, "/", target.pod_name);
  std::optional<Pod> pod = cache_->Get(target.pod_uid, id);
  if (!pod) {
    return absl::NotFoundError(absl::StrCat("pod ", id, " (uid '", target.pod_uid,
                                            "') was not seen by filter; cannot bind it"));
  }
  bool already = false;
  scheduler_->Read(
      [&](const Cluster& c) { already = c.FindPlacement(pod->request.id) != nullptr; });
  BindResult result;
  GPUSHARE_ASSIGN_OR_RETURN(result.placement, scheduler_->Reserve(pod->request, target.node));
  if (!already) cache_->NoteBind(pod->request.id);
  absl::StatusOr<DeviceView> view = absl::UnknownError("unset");
  scheduler_->Read([&](const Cluster& c) { view = MakeDeviceView(c, result.placement); });
  if (!view.ok()) return view.status();
  result.annotations = view->annotations;
  result.patch = json{{"metadata", {{"annotations", result.annotations}}}}.dump();
  if (!options_.binder) return result;
  if (absl::Status s = options_.binder(target, result); !s.ok()) {
    // A retried bind of a placement made earlier keeps it: only this call's
    // reservation is undone.
    if (!already) scheduler_->Forget(pod->request.id).IgnoreError();
    return s;
  }
  if (absl::Status s = scheduler_->Confirm(pod->request.id); !s.ok()) return s;
  return result;
}

absl::StatusOr<std::string> Extender::Bind(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, "ExtenderBindingArgs"));
  if (!j.is_object()) return Invalid("ExtenderBindingArgs must be a JSON object");
  BindTarget target;
  GPUSHARE_ASSIGN_OR_RETURN(target.pod_name,
                            RequiredString(j, "PodName", "ExtenderBindingArgs"));
  GPUSHARE_ASSIGN_OR_RETURN(target.node, RequiredString(j, "Node", "ExtenderBindingArgs"));
  GPUSHARE_ASSIGN_OR_RETURN(target.pod_namespace,
                            internal::StringMember(j, "PodNamespace", "ExtenderBindingArgs"));
  GPUSHARE_ASSIGN_OR_RETURN(target.pod_uid,
                            internal::StringMember(j, "PodUID", "ExtenderBindingArgs"));
  if (target.pod_namespace.empty()) target.pod_namespace = "default";
  absl::StatusOr<BindResult> bound = BindPod(target);
  if (!bound.ok()) return Reply(std::string(bound.status().message()));
  json reply{{"Error", ""},
             {"Placement", PlacementJson(bound->placement)},
             {"Annotations", bound->annotations}};
  return reply.dump();
}

// ---- Preempt -----------------------------------------------------------------------

absl::StatusOr<std::string> Extender::Preempt(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, "ExtenderPreemptionArgs"));
  if (!j.is_object()) return Invalid("ExtenderPreemptionArgs must be a JSON object");
  const json* pod_json = Member(j, "Pod");
  if (pod_json == nullptr) return Invalid("ExtenderPreemptionArgs has no Pod");
  GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(*pod_json));

  struct Victim {
    std::string uid;
    std::string id;  // Empty when unknown.
  };
  struct Candidate {
    std::string node;
    std::vector<Victim> victims;
    int64_t pdb = 0;
  };
  std::vector<Candidate> candidates;
  const json* full = Member(j, "NodeNameToVictims");
  const json* meta = Member(j, "NodeNameToMetaVictims");
  const json* map = full != nullptr ? full : meta;
  if (map != nullptr) {
    if (!map->is_object()) return Invalid("NodeNameToVictims must be an object");
    for (const auto& [node, victims] : map->items()) {
      const std::string where = absl::StrCat("victims of node ", node);
      if (!victims.is_object()) return Invalid(absl::StrCat(where, " must be an object"));
      Candidate c;
      c.node = node;
      if (const json* n = Member(victims, "NumPDBViolations")) {
        if (!n->is_number_integer()) {
          return Invalid(absl::StrCat(where, ": NumPDBViolations must be an integer"));
        }
        c.pdb = n->get<int64_t>();
      }
      if (const json* pods = Member(victims, "Pods")) {
        if (!pods->is_array()) return Invalid(absl::StrCat(where, ": Pods must be an array"));
        for (const json& v : *pods) {
          Victim victim;
          if (map == full) {
            GPUSHARE_ASSIGN_OR_RETURN(Pod vp, internal::PodFromJson(v));
            victim.uid = vp.uid;
            victim.id = vp.request.id;
          } else {
            if (!v.is_object()) return Invalid(absl::StrCat(where, ": victims must be objects"));
            GPUSHARE_ASSIGN_OR_RETURN(victim.uid, RequiredString(v, "UID", where));
            victim.id = cache_->IdOfUid(victim.uid).value_or("");
          }
          c.victims.push_back(std::move(victim));
        }
      }
      candidates.push_back(std::move(c));
    }
  }

  json result = json::object();
  scheduler_->Read([&](const Cluster& cluster) {
    absl::StatusOr<Demand> demand = cluster.Validate(pod.request);
    if (!demand.ok()) return;
    std::vector<int> fitting;
    for (const Candidate& c : candidates) {
      const NodeStatus* status = cluster.FindNode(c.node);
      std::vector<bool> evict(c.victims.size(), false);
      if (status != nullptr && pod.uses_gpus()) {
        if (!MatchesNodeAffinity(pod, c.node, status->labels)) continue;
        NodeStatus node = *status;
        auto fits = [&] {
          return !::gpushare::internal::CheckNode(node, *demand, pod.request, &fitting);
        };
        std::vector<const Placement*> held(c.victims.size(), nullptr);
        for (size_t i = 0; i < c.victims.size(); ++i) {
          const Placement* p = c.victims[i].id.empty() ? nullptr
                                                       : cluster.FindPlacement(c.victims[i].id);
          if (p != nullptr && p->node == c.node) held[i] = p;
          if (held[i] == nullptr) evict[i] = true;  // Unknown to gpushare: keep as proposed.
        }
        // Evict proposed GPU holders in order until the pod fits ...
        for (size_t i = 0; i < c.victims.size() && !fits(); ++i) {
          if (held[i] == nullptr) continue;
          ::gpushare::internal::UndoOnNode(node, *held[i]);
          evict[i] = true;
        }
        if (!fits()) continue;
        // ... then spare, latest first, every one whose eviction was not needed.
        for (size_t k = c.victims.size(); k-- > 0;) {
          if (held[k] == nullptr || !evict[k]) continue;
          ::gpushare::internal::ApplyToNode(node, *held[k]);
          if (fits()) {
            evict[k] = false;
          } else {
            ::gpushare::internal::UndoOnNode(node, *held[k]);
          }
        }
      } else {
        std::fill(evict.begin(), evict.end(), true);
      }
      json pods = json::array();
      for (size_t i = 0; i < c.victims.size(); ++i) {
        if (evict[i]) pods.push_back(json{{"UID", c.victims[i].uid}});
      }
      result[c.node] = json{{"Pods", pods}, {"NumPDBViolations", c.pdb}};
    }
  });
  return json{{"NodeNameToMetaVictims", result}}.dump();
}

// ---- Lifecycle ---------------------------------------------------------------------

namespace {

struct PodRef {
  std::string id;   // "<namespace>/<name>", empty if only the UID was given.
  std::string uid;
};

absl::StatusOr<PodRef> ParsePodRef(std::string_view body, const char* what) {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, what));
  if (!j.is_object()) return Invalid(absl::StrCat(what, " must be a JSON object"));
  GPUSHARE_ASSIGN_OR_RETURN(std::string ns, internal::StringMember(j, "PodNamespace", what));
  GPUSHARE_ASSIGN_OR_RETURN(std::string name, internal::StringMember(j, "PodName", what));
  PodRef ref;
  GPUSHARE_ASSIGN_OR_RETURN(ref.uid, internal::StringMember(j, "PodUID", what));
  if (name.empty() && ref.uid.empty()) {
    return Invalid(absl::StrCat(what, " has no PodName or PodUID"));
  }
  if (!name.empty()) ref.id = absl::StrCat(ns.empty() ? "default" : ns, "/", name);
  return ref;
}

}  // namespace

absl::StatusOr<std::string> Extender::Confirm(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "confirm request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = scheduler_->Confirm(ref.id);
  return Reply(s.ok() ? "" : std::string(s.message()));
}

absl::StatusOr<std::string> Extender::Forget(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "forget request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = scheduler_->Forget(ref.id);
  return Reply(s.ok() ? "" : std::string(s.message()));
}

absl::StatusOr<std::string> Extender::Release(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "release request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = scheduler_->Release(ref.id);
  return Reply(s.ok() ? "" : std::string(s.message()));
}

// ---- Sync ------------------------------------------------------------------------

uint64_t Extender::SyncMark() const {
  std::lock_guard lock(cache_->mu);
  return cache_->binds;
}

namespace {

// Whether `node` describes the same node as `status` (everything but the
// schedulable flag, which can change in place).
bool SameNode(const Node& node, const NodeStatus& status) {
  if (node.address != status.address || node.labels != status.labels ||
      node.gpus.size() != status.gpus.size() || node.cpu != status.cpu ||
      node.host_memory != status.host_memory ||
      TakesSharedGpuWork(node) != status.gpu_sharing) {
    return false;
  }
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    if (node.gpus[g].memory != status.gpus[g].memory ||
        node.gpus[g].model != status.gpus[g].model) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<SyncReport> Extender::Sync(std::string_view nodes_json,
                                          std::string_view pods_json, uint64_t mark) {
  // Parse and validate everything before changing anything.
  GPUSHARE_ASSIGN_OR_RETURN(json node_list, internal::ParseJson(nodes_json, "node list"));
  GPUSHARE_ASSIGN_OR_RETURN(json pod_list, internal::ParseJson(pods_json, "pod list"));
  GPUSHARE_ASSIGN_OR_RETURN(const json* node_items, internal::ListItems(node_list, "node list"));
  GPUSHARE_ASSIGN_OR_RETURN(const json* pod_items, internal::ListItems(pod_list, "pod list"));
  std::vector<Node> nodes;
  for (const json& item : *node_items) {
    GPUSHARE_ASSIGN_OR_RETURN(Node node, internal::NodeFromJson(item));
    nodes.push_back(std::move(node));
  }
  std::vector<Pod> pods;
  for (const json& item : *pod_items) {
    GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(item));
    pods.push_back(std::move(pod));
  }

  SyncReport r;
  auto warn = [&](auto&&... parts) { r.warnings.push_back(absl::StrCat(parts...)); };

  // 1. Nodes: add the new ones, replace the changed ones that hold nothing,
  //    follow cordons.
  std::set<std::string> listed;
  for (const Node& node : nodes) {
    listed.insert(node.name);
    std::optional<NodeStatus> known;
    scheduler_->Read([&](const Cluster& c) {
      if (const NodeStatus* s = c.FindNode(node.name)) known = *s;
    });
    if (!known) {
      if (absl::Status s = scheduler_->AddNode(node); s.ok()) {
        ++r.nodes_added;
      } else {
        warn("node ", node.name, " not added: ", s.message());
      }
      continue;
    }
    if (!SameNode(node, *known)) {
      if (!known->requests.empty()) {
        warn("node ", node.name, " changed; the change applies once its ",
             known->requests.size(), " placements are released");
      } else if (scheduler_->RemoveNode(node.name).ok() && scheduler_->AddNode(node).ok()) {
        ++r.nodes_updated;
        continue;
      }
    }
    if (known->schedulable != node.schedulable &&
        scheduler_->SetNodeSchedulable(node.name, node.schedulable).ok()) {
      ++r.nodes_updated;
    }
  }

  // 2. Placements: confirm the bound, release what is gone.
  absl::flat_hash_map<std::string, const Pod*> by_id;
  for (const Pod& pod : pods) by_id[pod.request.id] = &pod;
  struct Held {
    std::string id, node;
    bool reserved;
  };
  std::vector<Held> held;
  scheduler_->Read([&](const Cluster& c, const std::vector<Reservation>& reservations) {
    std::set<std::string> reserved;
    for (const Reservation& res : reservations) reserved.insert(res.placement.request_id);
    for (const std::string& name : c.node_names()) {
      for (const std::string& id : c.FindNode(name)->requests) {
        held.push_back(Held{id, name, reserved.count(id) > 0});
      }
    }
  });
  for (const Held& h : held) {
    if (cache_->BoundAfter(h.id, mark)) continue;  // The lists may predate this bind.
    auto it = by_id.find(h.id);
    const Pod* pod = it == by_id.end() ? nullptr : it->second;
    if (pod == nullptr || pod->completed() ||
        (!pod->node_name.empty() && pod->node_name != h.node)) {
      if (scheduler_->Release(h.id).ok()) ++r.released;
    } else if (h.reserved && pod->node_name == h.node) {
      if (scheduler_->Confirm(h.id).ok()) ++r.confirmed;
    }
  }

  // 3. Bound pods gpushare does not hold: restore them, oldest bind first.
  std::vector<const Pod*> bound;
  for (const Pod& pod : pods) {
    if (pod.uses_gpus() && !pod.node_name.empty() && !pod.completed()) bound.push_back(&pod);
  }
  std::stable_sort(bound.begin(), bound.end(), [](const Pod* a, const Pod* b) {
    return internal::AssumeTime(*a) < internal::AssumeTime(*b);
  });
  for (const Pod* pod : bound) {
    absl::StatusOr<std::optional<Placement>> p = absl::UnknownError("unset");
    bool placed = false;
    scheduler_->Read([&](const Cluster& c) {
      placed = c.FindPlacement(pod->request.id) != nullptr;
      if (!placed) p = internal::RecordedPlacement(c, *pod);
    });
    if (placed || (p.ok() && !p->has_value())) continue;
    absl::Status s = p.ok() ? scheduler_->Commit(**p) : p.status();
    if (s.ok()) {
      ++r.restored;
    } else {
      warn("pod ", pod->request.id, " on node ", pod->node_name, " not restored: ", s.message());
    }
  }

  // 4. Nodes that left the list, once they hold nothing.
  std::vector<std::string> gone;
  scheduler_->Read([&](const Cluster& c) {
    for (const std::string& name : c.node_names()) {
      if (!listed.count(name)) gone.push_back(name);
    }
  });
  for (const std::string& name : gone) {
    if (absl::Status s = scheduler_->RemoveNode(name); s.ok()) {
      ++r.nodes_removed;
    } else {
      if (scheduler_->SetNodeSchedulable(name, false).ok()) {
        warn("node ", name, " is gone from the list; cordoned until it holds nothing");
      }
    }
  }

  for (const Pod& pod : pods) cache_->Put(pod);
  cache_->ForgetBindsUpTo(mark);
  return r;
}

// ---- Inspect -----------------------------------------------------------------------

absl::StatusOr<std::string> Extender::Inspect(std::string_view node_name) const {
  json nodes = json::array();
  bool found = node_name.empty();
  scheduler_->Read([&](const Cluster& cluster, const std::vector<Reservation>& reservations) {
    std::set<std::string> reserved;
    for (const Reservation& r : reservations) reserved.insert(r.placement.request_id);
    for (const std::string& name : cluster.node_names()) {
      if (!node_name.empty() && name != node_name) continue;
      found = true;
      const NodeStatus* node = cluster.FindNode(name);
      json devs = json::array();
      for (const GpuStatus& g : node->gpus) {
        devs.push_back(json{{"id", g.index},
                            {"totalGPU", g.memory},
                            {"usedGPU", g.memory_used},
                            {"healthy", g.healthy},
                            {"pods", json::array()}});
      }
      std::vector<std::string> ids = node->requests;
      std::sort(ids.begin(), ids.end());
      for (const std::string& id : ids) {
        const Placement* p = cluster.FindPlacement(id);
        if (p == nullptr) continue;
        const size_t slash = id.find('/');
        const std::string ns = slash == std::string::npos ? "default" : id.substr(0, slash);
        const std::string pod = slash == std::string::npos ? id : id.substr(slash + 1);
        for (int g : p->gpus) {
          devs[g]["pods"].push_back(
              json{{"namespace", ns},
                   {"name", pod},
                   {"usedGPU", p->exclusive ? node->gpus[g].memory : p->memory_per_gpu},
                   {"reserved", reserved.count(id) > 0}});
        }
      }
      nodes.push_back(json{{"name", name},
                           {"totalGPU", node->gpu_memory()},
                           {"usedGPU", node->gpu_memory_used()},
                           {"devs", devs}});
    }
  });
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("unknown node '", ::gpushare::internal::Sv(node_name), "'"));
  }
  return json{{"nodes", nodes}}.dump();
}

}  // namespace gpushare::k8s

// ---- Following watch events ------------------------------------------------------

namespace gpushare::k8s {

namespace {

enum class EventType { kAdded, kModified, kDeleted };

absl::StatusOr<EventType> ParseEventType(std::string_view type) {
  if (type == "ADDED") return EventType::kAdded;
  if (type == "MODIFIED") return EventType::kModified;
  if (type == "DELETED") return EventType::kDeleted;
  return absl::InvalidArgumentError(absl::StrCat(
      "watch event type '", ::gpushare::internal::Sv(type),
      "' is not ADDED, MODIFIED or DELETED"));
}

}  // namespace

absl::StatusOr<SyncReport> Extender::ApplyNodeEvent(std::string_view type,
                                                    std::string_view node_json) {
  GPUSHARE_ASSIGN_OR_RETURN(EventType event, ParseEventType(type));
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(node_json, "node"));
  GPUSHARE_ASSIGN_OR_RETURN(Node node, internal::NodeFromJson(j));
  SyncReport r;
  auto warn = [&](auto&&... parts) { r.warnings.push_back(absl::StrCat(parts...)); };
  std::optional<NodeStatus> known;
  scheduler_->Read([&](const Cluster& c) {
    if (const NodeStatus* s = c.FindNode(node.name)) known = *s;
  });
  if (event == EventType::kDeleted) {
    if (!known) return r;
    if (absl::Status s = scheduler_->RemoveNode(node.name); s.ok()) {
      ++r.nodes_removed;
    } else if (scheduler_->SetNodeSchedulable(node.name, false).ok()) {
      warn("node ", node.name, " was deleted; cordoned until it holds nothing");
    }
    return r;
  }
  if (!known) {
    if (absl::Status s = scheduler_->AddNode(node); s.ok()) {
      ++r.nodes_added;
    } else {
      warn("node ", node.name, " not added: ", s.message());
    }
    return r;
  }
  if (!SameNode(node, *known)) {
    if (!known->requests.empty()) {
      warn("node ", node.name, " changed; the change applies once its ", known->requests.size(),
           " placements are released");
    } else if (scheduler_->RemoveNode(node.name).ok() && scheduler_->AddNode(node).ok()) {
      ++r.nodes_updated;
      return r;
    }
  }
  if (known->schedulable != node.schedulable &&
      scheduler_->SetNodeSchedulable(node.name, node.schedulable).ok()) {
    ++r.nodes_updated;
  }
  return r;
}

absl::StatusOr<SyncReport> Extender::ApplyPodEvent(std::string_view type,
                                                   std::string_view pod_json) {
  GPUSHARE_ASSIGN_OR_RETURN(EventType event, ParseEventType(type));
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(pod_json, "pod"));
  GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(j));
  SyncReport r;
  const std::string& id = pod.request.id;
  std::optional<std::string> held_node;
  bool reserved = false;
  scheduler_->Read([&](const Cluster& c, const std::vector<Reservation>& reservations) {
    if (const Placement* p = c.FindPlacement(id)) held_node = p->node;
    for (const Reservation& res : reservations) {
      if (res.placement.request_id == id) reserved = true;
    }
  });
  const std::optional<Pod> known = cache_->Get("", id);
  const bool uids_known = known && !known->uid.empty() && !pod.uid.empty();
  const bool same = !uids_known || known->uid == pod.uid;
  auto release = [&] {
    if (!held_node) return;
    if (!uids_known) {
      // Without UIDs to compare, a bind made since the last full list may be
      // newer than this event.
      std::lock_guard lock(cache_->mu);
      if (cache_->bound_at.count(id)) return;
    }
    if (scheduler_->Release(id).ok()) ++r.released;
    held_node.reset();
  };
  // Another pod under this name: the event does not say which of the two is
  // newer (a late event of a deleted pod looks like a newer pod's), so it
  // changes nothing; the placement is judged by events of its own pod, and
  // by the next full list.
  if (!same) return r;
  if (event == EventType::kDeleted) {
    release();
    return r;
  }
  cache_->Put(pod);
  if (held_node) {
    if (pod.completed() || (!pod.node_name.empty() && pod.node_name != *held_node)) {
      release();
    } else if (reserved && pod.node_name == *held_node) {
      if (scheduler_->Confirm(id).ok()) ++r.confirmed;
    }
  }
  if (held_node || !pod.uses_gpus() || pod.node_name.empty() || pod.completed()) return r;
  absl::StatusOr<std::optional<Placement>> p = absl::UnknownError("unset");
  bool placed = false;
  scheduler_->Read([&](const Cluster& c) {
    placed = c.FindPlacement(id) != nullptr;
    if (!placed) p = internal::RecordedPlacement(c, pod);
  });
  if (placed || (p.ok() && !p->has_value())) return r;
  absl::Status s = p.ok() ? scheduler_->Commit(**p) : p.status();
  if (s.ok()) {
    ++r.restored;
  } else {
    r.warnings.push_back(
        absl::StrCat("pod ", id, " on node ", pod.node_name, " not restored: ", s.message()));
  }
  return r;
}

}  // namespace gpushare::k8s
