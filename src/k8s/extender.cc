// The scheduler-extender protocol (k8s.io/kube-scheduler/extender/v1) over a
// Scheduler: filter, prioritize, bind, preempt, lifecycle calls and inspect.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/device_plugin.h"
#include "gpushare/kubernetes.h"
#include "src/internal/cluster_state.h"
#include "src/internal/json_text.h"
#include "src/internal/text.h"
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

  // Binds in progress, by id: one per pod at a time; a concurrent bind of the
  // same pod waits for `done` and returns `result`.
  struct InFlight {
    std::string node, uid;
    bool done = false;
    absl::StatusOr<BindResult> result = absl::UnknownError("bind in progress");
  };
  absl::flat_hash_map<std::string, std::shared_ptr<InFlight>> in_flight;  // Guarded by mu.
  std::condition_variable bind_done;  // Signalled when an InFlight is done.
  // The UID of the pod each placement was bound or restored for (when known),
  // so that news about an older pod of the same name cannot release it.
  absl::flat_hash_map<std::string, std::string> owner;  // Guarded by mu.

  // Node holds (Extender::NodeHold()): the bound GPU pods without a
  // placement on their node, by node, and each such pod's node.
  struct Holder {
    std::string uid;
    std::string why;  // "no bind annotations", ...
  };
  absl::flat_hash_map<std::string, std::map<std::string, Holder>> holders;  // Guarded by mu.
  absl::flat_hash_map<std::string, std::string> holder_node;                // Guarded by mu.
  // holders.size(), for NodeHold() to answer "not held" without taking mu
  // (it runs on every refusal of the fit calls). Written under mu.
  std::atomic<size_t> held_nodes{0};
  // Each node's own schedulable flag as last seen (spec.unschedulable, or
  // false for a node gone but still holding placements). Guarded by mu.
  absl::flat_hash_map<std::string, bool> own_schedulable;
  // Serialises the writes of the schedulable flag (ApplyHold()), so that two
  // threads cannot apply their decisions in the other order. Taken before
  // the scheduler's lock; mu is never held while calling the scheduler.
  std::mutex flag_mu;

  std::string Owner(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = owner.find(id);
    return it == owner.end() ? "" : it->second;
  }
  void SetOwner(const std::string& id, const std::string& uid) {
    std::lock_guard lock(mu);
    if (uid.empty()) {
      owner.erase(id);
    } else {
      owner[id] = uid;
    }
  }
  // FailedPrecondition if the placement of `id` was made for a pod other
  // than `uid` (both known).
  absl::Status CheckOwner(const std::string& id, const std::string& uid) {
    std::lock_guard lock(mu);
    auto it = owner.find(id);
    if (uid.empty() || it == owner.end() || it->second == uid) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("the placement of ", id,
                                                      " belongs to pod uid '", it->second,
                                                      "', not '", uid, "'; nothing changed"));
  }
  // Forgets the owners of ids that hold nothing (`placed` false) and whose
  // bind is not in progress.
  void PruneOwners(const std::set<std::string>& placed) {
    std::lock_guard lock(mu);
    absl::erase_if(owner, [&](const auto& e) {
      return !placed.count(e.first) && !in_flight.contains(e.first);
    });
  }
  bool InFlightNow(const std::string& id) {
    std::lock_guard lock(mu);
    return in_flight.contains(id);
  }

  void NoteBind(const std::string& id) {
    std::lock_guard lock(mu);
    NoteBindLocked(id);
  }
  void NoteBindLocked(const std::string& id) {
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

// A pod given in a request must carry names the API server could have issued.
absl::Status CheckPodNames(const Pod& pod, std::string_view where) {
  GPUSHARE_RETURN_IF_ERROR(
      ValidateDns1123Label(std::string(where) + " metadata.namespace", pod.namespace_name));
  return ValidateDns1123Subdomain(std::string(where) + " metadata.name", pod.name);
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
  GPUSHARE_RETURN_IF_ERROR(CheckPodNames(args.pod, "ExtenderArgs.Pod"));
  const json* nodes = Member(j, "Nodes");
  const json* names = Member(j, "NodeNames");
  absl::flat_hash_set<std::string> seen;  // A node named twice is considered once.
  if (nodes != nullptr) {
    GPUSHARE_ASSIGN_OR_RETURN(const json* items, internal::ListItems(*nodes, "ExtenderArgs.Nodes"));
    args.with_nodes = true;
    for (const json& item : *items) {
      GPUSHARE_ASSIGN_OR_RETURN(Node node, internal::NodeFromJson(item));
      GPUSHARE_RETURN_IF_ERROR(
          ValidateDns1123Subdomain("ExtenderArgs.Nodes metadata.name", node.name));
      if (!seen.insert(node.name).second) continue;  // Asked once, answered once.
      args.names.push_back(node.name);
      args.nodes.push_back(std::move(node));
      args.node_objects.push_back(item);
    }
  } else if (names != nullptr) {
    if (!names->is_array()) return Invalid("ExtenderArgs.NodeNames must be an array of strings");
    for (const json& n : *names) {
      if (!n.is_string()) return Invalid("ExtenderArgs.NodeNames must be an array of strings");
      const std::string& name = n.get_ref<const std::string&>();
      GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain("ExtenderArgs.NodeNames item", name));
      if (seen.insert(name).second) args.names.push_back(name);
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

std::string Reply(const std::string& error) { return ::gpushare::internal::DumpJson(json{{"Error", error}}); }

}  // namespace

Extender::Extender(Scheduler* scheduler, ExtenderOptions options)
    : scheduler_(scheduler), options_(std::move(options)), cache_(std::make_unique<PodCache>()) {
  cache_->limit = std::max(1, options_.max_cached_pods);
}

Extender::~Extender() = default;

std::string ErrorJson(const absl::Status& status) {
  // Messages may quote bytes from outside (a request path) that are not
  // UTF-8: they become U+FFFD rather than an exception from dump().
  return ::gpushare::internal::DumpJson(json{{"Error", std::string(status.message())},
                                 {"Code", absl::StatusCodeToString(status.code())}});
}

std::optional<Pod> Extender::RememberedPod(const std::string& id) const {
  return cache_->Get("", id);
}

std::string Extender::Version() const { return ::gpushare::internal::DumpJson(json{{"version", options_.version}}); }

absl::Status Extender::RememberPods(std::string_view pods_json) {
  GPUSHARE_ASSIGN_OR_RETURN(std::vector<Pod> pods, internal::ReadPodList(pods_json));
  RememberPods(pods);
  return absl::OkStatus();
}

void Extender::RememberPods(const std::vector<Pod>& pods) {
  for (const Pod& pod : pods) cache_->Put(pod);
  NoteOwners(pods);
  SyncReport ignored;
  for (const Pod& pod : pods) Account(pod, /*only_add=*/true, &ignored);
}

// ---- Node holds ---------------------------------------------------------------------

void Extender::Account(const Pod& pod, bool only_add, SyncReport* r) {
  const std::string& id = pod.request.id;
  bool holds = false;
  if (pod.uses_gpus() && !pod.node_name.empty() && !pod.completed()) {
    scheduler_->Read([&](const Cluster& c) {
      const Placement* p = c.FindPlacement(id);
      holds = p == nullptr || p->node != pod.node_name;
    });
  }
  if (!holds && only_add) return;
  std::vector<std::string> touched;
  {
    std::lock_guard lock(cache_->mu);
    auto was = cache_->holder_node.find(id);
    if (was != cache_->holder_node.end() && (!holds || was->second != pod.node_name)) {
      auto node = cache_->holders.find(was->second);
      if (node != cache_->holders.end()) {
        node->second.erase(id);
        if (node->second.empty()) cache_->holders.erase(node);
      }
      touched.push_back(was->second);
      cache_->holder_node.erase(was);
    }
    if (holds) {
      auto idx = pod.annotations.find("ALIYUN_COM_GPU_MEM_IDX");
      const bool annotated =
          (idx != pod.annotations.end() && !idx->second.empty() && idx->second != "-1") ||
          pod.annotations.count("scheduler.framework.gpushare.allocation") > 0;
      cache_->holders[pod.node_name][id] = PodCache::Holder{
          pod.uid, annotated ? "its bind annotations name GPUs gpushare cannot give it"
                             : "no bind annotations"};
      if (cache_->holder_node.insert_or_assign(id, pod.node_name).second) {
        touched.push_back(pod.node_name);
      }
    }
    cache_->held_nodes.store(cache_->holders.size(), std::memory_order_release);
  }
  for (const std::string& node : touched) {
    if (ApplyHold(node)) ++r->nodes_updated;
  }
}

void Extender::Unaccount(const std::string& id, const std::string& uid, SyncReport* r) {
  std::string node;
  {
    std::lock_guard lock(cache_->mu);
    auto was = cache_->holder_node.find(id);
    if (was == cache_->holder_node.end()) return;
    auto held = cache_->holders.find(was->second);
    if (held != cache_->holders.end()) {
      auto pod = held->second.find(id);
      // A late event of an older pod of this name leaves the newer one's record.
      if (pod != held->second.end() && !uid.empty() && !pod->second.uid.empty() &&
          pod->second.uid != uid) {
        return;
      }
      if (pod != held->second.end()) held->second.erase(pod);
      if (held->second.empty()) cache_->holders.erase(held);
    }
    node = was->second;
    cache_->holder_node.erase(was);
    cache_->held_nodes.store(cache_->holders.size(), std::memory_order_release);
  }
  if (ApplyHold(node)) ++r->nodes_updated;
}

bool Extender::ApplyHold(const std::string& node, std::optional<bool> own) {
  std::lock_guard flag_lock(cache_->flag_mu);
  std::optional<bool> current;
  scheduler_->Read([&](const Cluster& c) {
    if (const NodeStatus* s = c.FindNode(node)) current = s->schedulable;
  });
  bool want = false;
  {
    std::lock_guard lock(cache_->mu);
    if (own) cache_->own_schedulable[node] = *own;
    if (!current) return false;
    // Never recorded: the flag was never held, so it is the node's own.
    auto recorded = cache_->own_schedulable.try_emplace(node, *current).first;
    want = recorded->second && !cache_->holders.contains(node);
  }
  return want != *current && scheduler_->SetNodeSchedulable(node, want).ok();
}

absl::Status Extender::AddNodeHeld(Node node) {
  std::lock_guard flag_lock(cache_->flag_mu);
  {
    std::lock_guard lock(cache_->mu);
    cache_->own_schedulable[node.name] = node.schedulable;
    if (cache_->holders.contains(node.name)) node.schedulable = false;
  }
  return scheduler_->AddNode(node);
}

std::optional<std::string> Extender::NodeHold(std::string_view node) const {
  if (cache_->held_nodes.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lock(cache_->mu);
  auto held = cache_->holders.find(std::string(node));
  if (held == cache_->holders.end() || held->second.empty()) return std::nullopt;
  std::string pods;
  int listed = 0;
  for (const auto& [id, holder] : held->second) {
    if (listed == 3) {
      absl::StrAppend(&pods, " and ", held->second.size() - 3, " more");
      break;
    }
    absl::StrAppend(&pods, listed++ == 0 ? "" : ", ", id, ": ", holder.why);
  }
  return absl::StrCat("node '", ::gpushare::internal::Sv(node),
                      "' runs GPU pods that gpushare did not place (", pods,
                      "); it places nothing there until they end or their bind annotations name "
                      "their GPUs");
}

void Extender::RestoreHolders(const std::string& node, SyncReport* r) {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(cache_->mu);
    auto held = cache_->holders.find(node);
    if (held == cache_->holders.end()) return;
    for (const auto& entry : held->second) ids.push_back(entry.first);
  }
  for (const std::string& id : ids) {
    std::optional<Pod> pod = RememberedPod(id);
    if (!pod || pod->node_name != node) continue;
    absl::StatusOr<std::optional<Placement>> p = absl::UnknownError("unset");
    bool placed = false;
    scheduler_->Read([&](const Cluster& c) {
      placed = c.FindPlacement(id) != nullptr;
      if (!placed) p = internal::RecordedPlacement(c, *pod);
    });
    if (!placed && p.ok() && p->has_value() && scheduler_->Restore(**p).ok()) {
      ++r->restored;
      cache_->SetOwner(id, pod->uid);
    }
    Account(*pod, /*only_add=*/false, r);
  }
}

void Extender::NoteOwners(const std::vector<Pod>& pods) {
  std::vector<std::pair<std::string, std::string>> owners;
  scheduler_->Read([&](const Cluster& c) {
    for (const Pod& pod : pods) {
      const Placement* p = pod.node_name.empty() || pod.completed() || pod.uid.empty()
                               ? nullptr
                               : c.FindPlacement(pod.request.id);
      if (p != nullptr && p->node == pod.node_name) owners.emplace_back(pod.request.id, pod.uid);
    }
  });
  for (const auto& [id, uid] : owners) {
    if (cache_->Owner(id).empty()) cache_->SetOwner(id, uid);
  }
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
    if (!known) AddNodeHeld(node).IgnoreError();
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
          failed[f.node] = NodeHold(f.node).value_or(f.reason);
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
  return ::gpushare::internal::DumpJson(reply);
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
  return ::gpushare::internal::DumpJson(list);
}

// ---- Bind ------------------------------------------------------------------------

std::string BindingJson(const BindTarget& target,
                        const std::map<std::string, std::string>& annotations) {
  json meta{{"name", target.pod_name},
            {"namespace", target.pod_namespace.empty() ? "default" : target.pod_namespace}};
  if (!target.pod_uid.empty()) meta["uid"] = target.pod_uid;
  if (!annotations.empty()) meta["annotations"] = annotations;
  return ::gpushare::internal::DumpJson(
      json{{"apiVersion", "v1"},
           {"kind", "Binding"},
           {"metadata", meta},
           {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", target.node}}}});
}

absl::StatusOr<BindResult> Extender::BindPod(const BindTarget& target) {
  const std::string id = absl::StrCat(
      target.pod_namespace.empty() ? "default" : target.pod_namespace, "/", target.pod_name);
  std::optional<Pod> pod = cache_->Get(target.pod_uid, id);
  if (!pod) {
    return absl::NotFoundError(absl::StrCat("pod ", id, " (uid '", target.pod_uid,
                                            "') was not seen by filter; cannot bind it"));
  }
  // One bind per pod at a time: a second one could otherwise undo the first
  // one's reservation (kube-scheduler retries binds; replicas race).
  const std::string& key = pod->request.id;
  std::shared_ptr<PodCache::InFlight> mine;
  {
    std::unique_lock lock(cache_->mu);
    auto [it, inserted] = cache_->in_flight.try_emplace(key);
    if (!inserted) {
      const std::shared_ptr<PodCache::InFlight> other = it->second;
      if (other->node != target.node || other->uid != target.pod_uid) {
        return absl::UnavailableError(absl::StrCat("pod ", key, " (uid '", other->uid,
                                                   "') is being bound to node ", other->node,
                                                   "; retry"));
      }
      constexpr int64_t kMaxWaitMs = 24 * 3600 * 1000;
      const auto wait = std::chrono::milliseconds(
          std::clamp<int64_t>(options_.bind_wait_ms, 0, kMaxWaitMs));
      if (!cache_->bind_done.wait_for(lock, wait, [&] { return other->done; })) {
        return absl::UnavailableError(absl::StrCat("pod ", key, " is still being bound to node ",
                                                   target.node, " after ",
                                                   options_.bind_wait_ms, " ms; retry"));
      }
      return other->result;
    }
    mine = std::make_shared<PodCache::InFlight>();
    mine->node = target.node;
    mine->uid = target.pod_uid;
    it->second = mine;
    cache_->NoteBindLocked(key);
  }
  absl::StatusOr<BindResult> result = BindExclusively(*pod, target);
  {
    std::lock_guard lock(cache_->mu);
    mine->result = result;
    mine->done = true;
    cache_->in_flight.erase(key);
  }
  cache_->bind_done.notify_all();
  return result;
}

absl::StatusOr<BindResult> Extender::MakeBindResult(const Placement& placement) const {
  BindResult result;
  result.placement = placement;
  absl::StatusOr<DeviceView> view = absl::UnknownError("unset");
  scheduler_->Read([&](const Cluster& c) { view = MakeDeviceView(c, placement); });
  if (!view.ok()) return view.status();
  result.annotations = view->annotations;
  result.patch = ::gpushare::internal::DumpJson(json{{"metadata", {{"annotations", result.annotations}}}});
  return result;
}

absl::Status Extender::ConfirmBound(const Placement& placement) {
  if (scheduler_->Confirm(placement.request_id).ok()) return absl::OkStatus();
  // The reservation ran out (or was forgotten) while the binder worked, yet
  // the pod is bound: hold its GPUs again if they are still free.
  absl::Status s = scheduler_->Restore(placement);
  if (s.ok()) return s;
  return absl::FailedPreconditionError(
      absl::StrCat("pod ", placement.request_id, " is bound to node ", placement.node,
                   ", but its reservation ran out while binding and its GPUs could not be "
                   "held again: ",
                   s.message()));
}

absl::StatusOr<BindResult> Extender::BindExclusively(const Pod& pod, const BindTarget& target) {
  const std::string& id = pod.request.id;
  const std::string uid = target.pod_uid.empty() ? pod.uid : target.pod_uid;
  auto forget = [&] {
    if (scheduler_->IsReserved(id) && scheduler_->Forget(id).ok()) cache_->SetOwner(id, "");
  };
  std::optional<Placement> held;
  scheduler_->Read([&](const Cluster& c) {
    if (const Placement* p = c.FindPlacement(id)) held = *p;
  });
  const bool reserved = held && scheduler_->IsReserved(id);
  // A placement made for an older pod of the same name: that pod is gone,
  // since this one exists.
  const std::string owner = cache_->Owner(id);
  if (held && !owner.empty() && !uid.empty() && owner != uid) {
    if (absl::Status s = scheduler_->Release(id); !s.ok() && !absl::IsNotFound(s)) return s;
    cache_->SetOwner(id, "");
    held.reset();
  }
  if (held && options_.binder) {
    if (held->node == target.node && !reserved) {
      // A retry of a bind that succeeded: the API has it; write nothing again.
      return MakeBindResult(*held);
    }
    if (held->node != target.node && reserved && options_.pod_reader) {
      // Left by a bind whose outcome was unknown: did it bind the pod?
      absl::StatusOr<std::string> read = options_.pod_reader(target);
      absl::StatusOr<Pod> now = read.ok() ? ParsePod(*read) : read.status();
      if (now.ok() && now->node_name.empty()) forget();
    }
  }
  uint64_t token = 0;
  GPUSHARE_ASSIGN_OR_RETURN(Placement placement,
                            scheduler_->Reserve(pod.request, target.node, &token));
  cache_->SetOwner(id, uid);
  absl::StatusOr<BindResult> result = MakeBindResult(placement);
  if (result.ok()) result->reservation_token = token;
  if (!result.ok() || !options_.binder) {
    if (!result.ok()) forget();
    return result;
  }
  absl::Status s = options_.binder(target, *result);
  if (s.ok()) {
    GPUSHARE_RETURN_IF_ERROR(ConfirmBound(placement));
    return result;
  }
  switch (s.code()) {
    case absl::StatusCode::kAlreadyExists:     // 409: bound already.
    case absl::StatusCode::kUnavailable:       // The outcome is unknown.
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
      return SettleBind(pod, target, placement, s);
    default:  // Not bound.
      forget();
      return s;
  }
}

absl::StatusOr<BindResult> Extender::SettleBind(const Pod& pod, const BindTarget& target,
                                                const Placement& reserved, absl::Status error) {
  const std::string& id = pod.request.id;
  auto keep = [&](std::string_view why) {
    return absl::Status(error.code(),
                        absl::StrCat(error.message(), "; ", ::gpushare::internal::Sv(why),
                                     ": its GPUs stay reserved until a resync or the "
                                     "time-to-live settles whether it is bound"));
  };
  auto forget = [&] {
    if (scheduler_->IsReserved(id) && scheduler_->Forget(id).ok()) cache_->SetOwner(id, "");
  };
  if (!options_.pod_reader) return keep("cannot read the pod");
  absl::StatusOr<std::string> read = options_.pod_reader(target);
  absl::StatusOr<Pod> now = read.ok() ? ParsePod(*read) : read.status();
  if (!now.ok()) {
    if (absl::IsNotFound(now.status())) {  // Deleted: it holds nothing.
      forget();
      return error;
    }
    return keep(absl::StrCat("reading the pod failed (", now.status().message(), ")"));
  }
  if (!target.pod_uid.empty() && !now->uid.empty() && now->uid != target.pod_uid) {
    forget();
    return absl::NotFoundError(absl::StrCat("pod ", id, " uid '", target.pod_uid,
                                            "' is gone (the name now has uid '", now->uid,
                                            "'): ", error.message()));
  }
  if (now->node_name.empty() || now->completed()) {
    forget();
    return error;
  }
  if (now->node_name != target.node) {
    forget();  // Sync() restores it where it is bound.
    return absl::AlreadyExistsError(absl::StrCat("pod ", id, " is bound to node ",
                                                 now->node_name, ", not ", target.node, ": ",
                                                 error.message()));
  }
  // Bound to this node: it runs on the GPUs its bind annotations name.
  absl::StatusOr<std::optional<Placement>> recorded = absl::UnknownError("unset");
  scheduler_->Read([&](const Cluster& c) { recorded = internal::RecordedPlacement(c, *now); });
  if (!recorded.ok() || !recorded->has_value() || **recorded == reserved) {
    GPUSHARE_RETURN_IF_ERROR(ConfirmBound(reserved));
    return MakeBindResult(reserved);
  }
  // Another writer's annotations (a replica's): hold what they name instead.
  forget();
  if (absl::Status s = scheduler_->Restore(**recorded); !s.ok()) {
    scheduler_->Restore(reserved).IgnoreError();  // Hold at least as much as before.
    return absl::FailedPreconditionError(
        absl::StrCat("pod ", id, " is bound to node ", target.node,
                     " on the GPUs its annotations name, which gpushare cannot hold: ",
                     s.message()));
  }
  cache_->SetOwner(id, now->uid);
  return MakeBindResult(**recorded);
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
  // These names become the path of the API server's PATCH and Binding.
  GPUSHARE_RETURN_IF_ERROR(
      ValidateDns1123Label("ExtenderBindingArgs.PodNamespace", target.pod_namespace));
  GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain("ExtenderBindingArgs.PodName", target.pod_name));
  GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain("ExtenderBindingArgs.Node", target.node));
  absl::StatusOr<BindResult> bound = BindPod(target);
  if (!bound.ok()) return Reply(std::string(bound.status().message()));
  json reply{{"Error", ""},
             {"Placement", PlacementJson(bound->placement)},
             {"Annotations", bound->annotations}};
  return ::gpushare::internal::DumpJson(reply);
}

// ---- Preempt -----------------------------------------------------------------------

absl::StatusOr<std::string> Extender::Preempt(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(json j, internal::ParseJson(body, "ExtenderPreemptionArgs"));
  if (!j.is_object()) return Invalid("ExtenderPreemptionArgs must be a JSON object");
  const json* pod_json = Member(j, "Pod");
  if (pod_json == nullptr) return Invalid("ExtenderPreemptionArgs has no Pod");
  GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(*pod_json));
  GPUSHARE_RETURN_IF_ERROR(CheckPodNames(pod, "ExtenderPreemptionArgs.Pod"));

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
      GPUSHARE_RETURN_IF_ERROR(
          ValidateDns1123Subdomain("ExtenderPreemptionArgs victims' node", node));
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
  return ::gpushare::internal::DumpJson(json{{"NodeNameToMetaVictims", result}});
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
  if (!name.empty()) {
    if (ns.empty()) ns = "default";
    GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Label(absl::StrCat(what, " PodNamespace"), ns));
    GPUSHARE_RETURN_IF_ERROR(ValidateDns1123Subdomain(absl::StrCat(what, " PodName"), name));
    ref.id = absl::StrCat(ns, "/", name);
  } else if (!ns.empty()) {
    return Invalid(absl::StrCat(what, " has PodNamespace \"", ::gpushare::internal::Echo(ns),
                                "\" without PodName"));
  }
  return ref;
}

}  // namespace

absl::StatusOr<std::string> Extender::Confirm(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "confirm request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = cache_->CheckOwner(ref.id, ref.uid);
  if (s.ok()) s = scheduler_->Confirm(ref.id);
  return Reply(s.ok() ? "" : std::string(s.message()));
}

absl::StatusOr<std::string> Extender::Forget(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "forget request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = cache_->CheckOwner(ref.id, ref.uid);
  if (s.ok()) s = scheduler_->Forget(ref.id);
  if (s.ok()) cache_->SetOwner(ref.id, "");
  return Reply(s.ok() ? "" : std::string(s.message()));
}

absl::StatusOr<std::string> Extender::Release(std::string_view body) {
  GPUSHARE_ASSIGN_OR_RETURN(PodRef ref, ParsePodRef(body, "release request"));
  if (ref.id.empty()) ref.id = cache_->IdOfUid(ref.uid).value_or(ref.uid);
  absl::Status s = cache_->CheckOwner(ref.id, ref.uid);
  if (s.ok()) s = scheduler_->Release(ref.id);
  if (s.ok()) cache_->SetOwner(ref.id, "");
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

// Follows what changes without replacing the node besides its cordon (see
// Extender::ApplyHold()): each GPU's health (gpushare-device-plugin's
// unhealthy-GPU annotation). True if anything changed.
bool FollowGpuHealth(Scheduler* scheduler, const Node& node, const NodeStatus& known) {
  bool changed = false;
  for (size_t g = 0; g < node.gpus.size() && g < known.gpus.size(); ++g) {
    if (node.gpus[g].healthy != known.gpus[g].healthy &&
        scheduler->SetGpuHealthy(node.name, static_cast<int>(g), node.gpus[g].healthy).ok()) {
      changed = true;
    }
  }
  return changed;
}

}  // namespace

absl::StatusOr<SyncReport> Extender::Sync(std::string_view nodes_json,
                                          std::string_view pods_json, uint64_t mark) {
  // Parse and validate everything before changing anything.
  // One object the API server accepted but gpushare cannot read (a Node
  // with 65 GPUs) is left as it was, with a warning, never a failed Sync.
  std::vector<Node> nodes;
  std::vector<Pod> pods;
  std::vector<SkippedItem> skipped_nodes, skipped_pods;
  GPUSHARE_RETURN_IF_ERROR(
      internal::ReadLists(nodes_json, pods_json, &nodes, &pods, &skipped_nodes, &skipped_pods));

  SyncReport r;
  auto warn = [&](auto&&... parts) { r.warnings.push_back(absl::StrCat(parts...)); };
  std::set<std::string> listed;  // Nodes in the list, read or not.
  std::set<std::string> unread_pods;
  for (const SkippedItem& s : skipped_nodes) {
    warn("node ", s.name.empty() ? "(unnamed)" : s.name, " skipped: ", s.message);
    listed.insert(s.name);
  }
  for (const SkippedItem& s : skipped_pods) {
    warn("pod ", s.name.empty() ? "(unnamed)" : s.name, " skipped: ", s.message);
    unread_pods.insert(s.name.find('/') == std::string::npos ? "default/" + s.name : s.name);
  }

  // 1. Nodes: add the new ones, replace the changed ones that hold nothing,
  //    follow cordons.
  for (const Node& node : nodes) {
    listed.insert(node.name);
    std::optional<NodeStatus> known;
    scheduler_->Read([&](const Cluster& c) {
      if (const NodeStatus* s = c.FindNode(node.name)) known = *s;
    });
    if (!known) {
      if (absl::Status s = AddNodeHeld(node); s.ok()) {
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
      } else if (scheduler_->RemoveNode(node.name).ok() && AddNodeHeld(node).ok()) {
        ++r.nodes_updated;
        continue;
      }
    }
    if (ApplyHold(node.name, node.schedulable)) ++r.nodes_updated;
    if (FollowGpuHealth(scheduler_, node, *known)) ++r.nodes_updated;
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
    // The lists may predate this bind, or it is being settled right now.
    if (cache_->BoundAfter(h.id, mark) || cache_->InFlightNow(h.id)) continue;
    if (unread_pods.count(h.id)) continue;  // Listed, but unreadable: keep what it holds.
    auto it = by_id.find(h.id);
    const Pod* pod = it == by_id.end() ? nullptr : it->second;
    // A pod of the same name with another UID: the one we placed is gone.
    const std::string owner = cache_->Owner(h.id);
    const bool replaced =
        pod != nullptr && !owner.empty() && !pod->uid.empty() && pod->uid != owner;
    bool moved = pod != nullptr && !pod->node_name.empty() && pod->node_name != h.node;
    if (pod != nullptr && !replaced && pod->node_name == h.node) {
      // Bound here, but to other GPUs than its annotations name (another
      // writer's): release, and step 3 restores what they name.
      scheduler_->Read([&](const Cluster& c) {
        absl::StatusOr<std::optional<Placement>> recorded = internal::RecordedPlacement(c, *pod);
        const Placement* p = c.FindPlacement(h.id);
        moved = recorded.ok() && recorded->has_value() && p != nullptr && **recorded != *p;
      });
    }
    if (pod == nullptr || replaced || moved || pod->completed()) {
      if (scheduler_->Release(h.id).ok()) {
        ++r.released;
        cache_->SetOwner(h.id, "");
      }
    } else if (pod->node_name == h.node) {
      if (h.reserved && scheduler_->Confirm(h.id).ok()) ++r.confirmed;
      if (cache_->Owner(h.id).empty()) cache_->SetOwner(h.id, pod->uid);
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
    absl::Status s = p.ok() ? scheduler_->Restore(**p) : p.status();
    if (s.ok()) {
      ++r.restored;
      cache_->SetOwner(pod->request.id, pod->uid);
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
      ApplyHold(name, false);
      warn("node ", name, " is gone from the list; cordoned until it holds nothing");
    }
  }

  // 5. Node holds, judged again for every pod listed; the records of pods
  //    gone from the list are dropped (pods listed but unreadable keep theirs).
  for (const Pod& pod : pods) Account(pod, /*only_add=*/false, &r);
  std::vector<std::string> unlisted;
  {
    std::lock_guard lock(cache_->mu);
    for (const auto& [id, node] : cache_->holder_node) {
      if (!by_id.contains(id) && !unread_pods.count(id)) unlisted.push_back(id);
    }
  }
  for (const std::string& id : unlisted) Unaccount(id, "", &r);

  for (const Pod& pod : pods) cache_->Put(pod);
  cache_->ForgetBindsUpTo(mark);
  std::set<std::string> placed;
  scheduler_->Read([&](const Cluster& c) {
    for (const std::string& name : c.node_names()) {
      for (const std::string& id : c.FindNode(name)->requests) placed.insert(id);
    }
  });
  cache_->PruneOwners(placed);
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
  // After the read: NodeHold() takes the pod cache's lock, never under the
  // scheduler's.
  for (json& node : nodes) {
    if (std::optional<std::string> why = NodeHold(node["name"].get<std::string>())) {
      node["held"] = *why;
    }
  }
  return ::gpushare::internal::DumpJson(json{{"nodes", nodes}});
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
    } else {
      ApplyHold(node.name, false);
      warn("node ", node.name, " was deleted; cordoned until it holds nothing");
    }
    return r;
  }
  if (!known) {
    if (absl::Status s = AddNodeHeld(node); s.ok()) {
      ++r.nodes_added;
      RestoreHolders(node.name, &r);  // Pods bound before the node was known.
    } else {
      warn("node ", node.name, " not added: ", s.message());
    }
    return r;
  }
  if (!SameNode(node, *known)) {
    if (!known->requests.empty()) {
      warn("node ", node.name, " changed; the change applies once its ", known->requests.size(),
           " placements are released");
    } else if (scheduler_->RemoveNode(node.name).ok() && AddNodeHeld(node).ok()) {
      ++r.nodes_updated;
      RestoreHolders(node.name, &r);
      return r;
    }
  }
  if (ApplyHold(node.name, node.schedulable)) ++r.nodes_updated;
  if (FollowGpuHealth(scheduler_, node, *known)) ++r.nodes_updated;
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
  if (!same) {
    if (event == EventType::kDeleted) Unaccount(id, pod.uid, &r);
    return r;
  }
  if (event == EventType::kDeleted) {
    release();
    Unaccount(id, pod.uid, &r);
    return r;
  }
  cache_->Put(pod);
  if (held_node) {
    if (pod.completed() || (!pod.node_name.empty() && pod.node_name != *held_node)) {
      release();
    } else if (reserved && pod.node_name == *held_node) {
      if (scheduler_->Confirm(id).ok()) ++r.confirmed;
    } else if (pod.node_name == *held_node) {
      // Bound here, but its annotations now name other GPUs: the device
      // plugin corrected them to the GPUs the kubelet gave the pod. Follow
      // at once, in one step, so that no GPU is counted free while it runs.
      std::optional<Placement> recorded;
      bool differs = false;
      scheduler_->Read([&](const Cluster& c) {
        absl::StatusOr<std::optional<Placement>> rec = internal::RecordedPlacement(c, pod);
        const Placement* held = c.FindPlacement(id);
        if (rec.ok() && rec->has_value() && held != nullptr && **rec != *held) {
          recorded = **rec;
          differs = true;
        }
      });
      if (differs) {
        if (absl::Status s = scheduler_->Move(*recorded); s.ok()) {
          ++r.restored;
        } else {
          r.warnings.push_back(absl::StrCat("pod ", id, " now names other GPUs on node ",
                                            pod.node_name, ", not followed: ", s.message()));
        }
      }
    }
  }
  if (!held_node && pod.uses_gpus() && !pod.node_name.empty() && !pod.completed()) {
    absl::StatusOr<std::optional<Placement>> p = absl::UnknownError("unset");
    bool placed = false;
    scheduler_->Read([&](const Cluster& c) {
      placed = c.FindPlacement(id) != nullptr;
      if (!placed) p = internal::RecordedPlacement(c, pod);
    });
    if (!placed && !(p.ok() && !p->has_value())) {
      absl::Status s = p.ok() ? scheduler_->Restore(**p) : p.status();
      if (s.ok()) {
        ++r.restored;
      } else {
        r.warnings.push_back(absl::StrCat("pod ", id, " on node ", pod.node_name,
                                          " not restored: ", s.message()));
      }
    }
  }
  // Whatever it holds now: without a placement, a bound GPU pod holds its node.
  Account(pod, /*only_add=*/false, &r);
  return r;
}

}  // namespace gpushare::k8s
