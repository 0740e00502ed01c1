#include "extender/follow.h"

#include <utility>

#include "nlohmann/json.hpp"

namespace gpushare::extender {

void WarningLog::Log(const std::vector<std::string>& warnings) {
  std::lock_guard lock(mu_);
  for (const std::string& w : warnings) {
    if (logged_.size() > 10'000) logged_.clear();
    if (logged_.insert(w).second) *out_ << "warning: " << w << "\n";
  }
}

void LogReport(std::ostream& out, const char* what, const k8s::SyncReport& r) {
  if (r.nodes_added + r.nodes_updated + r.nodes_removed + r.confirmed + r.released +
          r.restored ==
      0) {
    return;
  }
  out << "gpushare-extender: " << what << ": " << r.nodes_added << " nodes added, "
      << r.nodes_updated << " updated, " << r.nodes_removed << " removed; " << r.confirmed
      << " confirmed, " << r.released << " released, " << r.restored << " restored"
      << std::endl;
}

absl::StatusOr<StartState> StartFromLists(std::string_view nodes_json,
                                          std::string_view pods_json,
                                          const SchedulerOptions& options, Metrics* metrics,
                                          std::ostream& err) {
  std::vector<k8s::SkippedItem> skipped_nodes, skipped_pods;
  absl::StatusOr<std::vector<Node>> nodes = k8s::ParseNodeList(nodes_json, &skipped_nodes);
  if (!nodes.ok()) {
    return absl::InvalidArgumentError("cannot read the nodes: " +
                                      std::string(nodes.status().message()));
  }
  absl::StatusOr<std::vector<k8s::Pod>> pods = k8s::ParsePodList(pods_json, &skipped_pods);
  if (!pods.ok()) {
    return absl::InvalidArgumentError("cannot read the pods: " +
                                      std::string(pods.status().message()));
  }
  using Skipped = std::pair<const char*, const std::vector<k8s::SkippedItem>*>;
  for (const auto& [kind, skipped] : {Skipped{"node", &skipped_nodes}, Skipped{"pod", &skipped_pods}}) {
    for (const k8s::SkippedItem& s : *skipped) {
      err << "warning: " << kind << " " << (s.name.empty() ? "(unnamed)" : s.name)
          << " skipped: " << s.message << "\n";
      if (metrics != nullptr) metrics->Add("gpushare_extender_objects_skipped_total", {{"kind", kind}});
    }
  }
  StartState state;
  absl::StatusOr<Cluster> cluster = k8s::RebuildCluster(*nodes, *pods, {}, &state.report);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError("cannot rebuild the state: " +
                                      std::string(cluster.status().message()));
  }
  for (const std::string& w : state.report.warnings) err << "warning: " << w << "\n";
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(*std::move(cluster), options);
  if (!scheduler.ok()) return scheduler.status();
  state.scheduler = *std::move(scheduler);
  state.pods = *std::move(pods);
  return state;
}

Follower::Follower(k8s::Extender* extender, FollowerOptions options)
    : ext_(extender), options_(std::move(options)), warnings_(options_.err) {}

void Follower::Kick() const {
  if (options_.kick) options_.kick();
}

bool Follower::Logged(const char* what, const std::string& type,
                      const absl::StatusOr<k8s::SyncReport>& r) {
  if (!r.ok()) {
    warnings_.Log({std::string(what) + " " + type + " not applied: " +
                   std::string(r.status().message())});
    return false;
  }
  LogReport(*options_.out, what, *r);
  warnings_.Log(r->warnings);
  return true;
}

void Follower::OnPodEvent(const std::string& type, const std::string& pod_json) {
  std::lock_guard lock(mu_);
  absl::StatusOr<k8s::SyncReport> r = ext_->ApplyPodEvent(type, pod_json);
  if (!Logged("pod event", type, r)) return;
  // GPUs may have been freed: a placement released, or a node's hold
  // changed (lifted when its last pod that gpushare did not place ends; a
  // round after a hold is placed only finds nothing to do).
  if (r->released + r->nodes_updated == 0) return;
  RetryDoomedLocked();
  Kick();
}

void Follower::RetryDoomedLocked() {
  for (auto it = doomed_.begin(); it != doomed_.end();) {
    absl::StatusOr<k8s::SyncReport> d = ext_->ApplyNodeEvent("DELETED", it->second);
    if (d.ok() && (d->nodes_removed > 0 || d->warnings.empty())) {  // Gone.
      LogReport(*options_.out, "node removed", *d);
      it = doomed_.erase(it);
    } else {
      ++it;
    }
  }
}

void Follower::OnNodeEvent(const std::string& type, const std::string& node_json) {
  absl::StatusOr<k8s::SyncReport> r = ext_->ApplyNodeEvent(type, node_json);
  if (!Logged("node event", type, r)) return;
  // The extender read the node, so its name is there.
  const nlohmann::json node = nlohmann::json::parse(node_json, nullptr, false);
  const std::string name = node.is_object() && node.contains("metadata")
                               ? node["metadata"].value("name", "")
                               : std::string();
  std::lock_guard lock(mu_);
  if (type == "DELETED") {
    if (r->nodes_removed == 0 && !r->warnings.empty()) doomed_[name] = node_json;
    return;
  }
  doomed_.erase(name);
  if (r->nodes_added + r->nodes_updated == 0) return;
  // A node (re)appeared or changed: restore the placements of its pods.
  if (options_.pods_on_node) {
    for (const std::string& pod : options_.pods_on_node(name)) {
      absl::StatusOr<k8s::SyncReport> p = ext_->ApplyPodEvent("MODIFIED", pod);
      if (p.ok()) warnings_.Log(p->warnings);
    }
  }
  Kick();
}

absl::StatusOr<k8s::SyncReport> Follower::Resync(const std::string& nodes_json,
                                                 const std::string& pods_json, uint64_t mark) {
  absl::StatusOr<k8s::SyncReport> r = [&] {
    std::lock_guard lock(mu_);
    return ext_->Sync(nodes_json, pods_json, mark);
  }();
  if (!r.ok()) return r;
  warnings_.Log(r->warnings);
  LogReport(*options_.out, "leader resync", *r);
  Kick();
  return r;
}

std::vector<std::string> Follower::doomed() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, json] : doomed_) names.push_back(name);
  return names;
}

}  // namespace gpushare::extender
