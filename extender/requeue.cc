// Nudging kube-scheduler to retry pending GPU pods (see requeue.h).

#include "extender/requeue.h"

#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpushare::extender {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Requeuer::Requeuer(k8s::Extender* ext, RequeueOptions options)
    : ext_(ext), options_(std::move(options)) {}

void Requeuer::Kick() {
  {
    std::lock_guard lock(mu_);
    kicked_ = true;
  }
  cv_.notify_one();
}

std::vector<std::string> Requeuer::RunOnce() {
  std::vector<std::string> done;
  const Clock::time_point now = Clock::now();
  for (auto it = touched_.begin(); it != touched_.end();) {
    it = now - it->second >= options_.min_interval ? touched_.erase(it) : std::next(it);
  }
  const std::vector<std::string> names = options_.node_names();
  if (names.empty()) return done;
  for (const std::string& text : options_.pods()) {
    if (static_cast<int>(done.size()) >= options_.max_per_round) break;
    absl::StatusOr<k8s::Pod> pod = k8s::ParsePod(text);
    if (!pod.ok() || !pod->node_name.empty() || pod->terminating || pod->completed() ||
        !pod->uses_gpus() || touched_.count(pod->request.id)) {
      continue;
    }
    json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) continue;
    absl::StatusOr<std::string> reply =
        ext_->Filter(json{{"Pod", object}, {"NodeNames", names}}.dump());
    if (!reply.ok()) continue;
    json result = json::parse(*reply, nullptr, /*allow_exceptions=*/false);
    if (result.is_discarded() || !result.contains("NodeNames") ||
        !result["NodeNames"].is_array() || result["NodeNames"].empty()) {
      continue;
    }
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    const std::string patch =
        json{{"metadata", {{"annotations", {{kRequeueAnnotation, std::to_string(ms)}}}}}}.dump();
    touched_[pod->request.id] = now;
    if (options_.patch(pod->namespace_name, pod->name, patch).ok()) {
      done.push_back(pod->request.id);
    }
  }
  return done;
}

void Requeuer::Run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return kicked_; });
      if (!kicked_) continue;
    }
    std::this_thread::sleep_for(options_.coalesce);  // Let a burst of releases land.
    {
      std::lock_guard lock(mu_);
      kicked_ = false;
    }
    RunOnce();
  }
}

}  // namespace gpushare::extender
