// NodePodCache: the node's pods from a watch (see pod_cache.h).

#include "device-plugin/pod_cache.h"

#include "absl/strings/str_cat.h"
#include "device-plugin/kube.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {

namespace {

// "<namespace>/<name>" of a pod's JSON, "" when it has no name.
std::string KeyOf(const nlohmann::json& pod) {
  const nlohmann::json* meta = pod.is_object() && pod.contains("metadata") ? &pod["metadata"] : nullptr;
  if (meta == nullptr || !meta->is_object()) return "";
  auto name = meta->find("name");
  if (name == meta->end() || !name->is_string()) return "";
  auto ns = meta->find("namespace");
  const std::string namespace_name =
      ns != meta->end() && ns->is_string() ? ns->get<std::string>() : "default";
  return absl::StrCat(namespace_name, "/", name->get<std::string>());
}

}  // namespace

std::string NodePodsWatchPath(std::string_view node) {
  return absl::StrCat(NodePodsPath(node), "%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed");
}

void NodePodCache::Apply(const std::string& type, const std::string& pod_json) {
  nlohmann::json j = nlohmann::json::parse(pod_json, nullptr, false);
  const std::string key = j.is_discarded() ? "" : KeyOf(j);
  if (key.empty()) return;  // The reflector never stores such an object.
  std::lock_guard lock(mu_);
  ++generation_;
  pods_.erase(key);
  skipped_.erase(key);
  if (type != "DELETED") {
    absl::StatusOr<NodePod> pod = ParseNodePod(j);
    if (pod.ok()) {
      pods_.emplace(key, *std::move(pod));
    } else {
      skipped_.emplace(key, std::string(pod.status().message()));
    }
  }
  changed_.notify_all();
}

std::vector<NodePod> NodePodCache::Pods(std::vector<std::string>* skipped) const {
  std::lock_guard lock(mu_);
  std::vector<NodePod> out;
  out.reserve(pods_.size());
  for (const auto& [key, pod] : pods_) out.push_back(pod);
  if (skipped != nullptr) {
    for (const auto& [key, why] : skipped_) skipped->push_back(why);
  }
  return out;
}

size_t NodePodCache::size() const {
  std::lock_guard lock(mu_);
  return pods_.size();
}

uint64_t NodePodCache::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

bool NodePodCache::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return generation_ != seen; });
}

}  // namespace gpushare::deviceplugin
