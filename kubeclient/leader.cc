// Leader election through a coordination.k8s.io/v1 Lease; see leader.h.

#include "kubeclient/leader.h"

#include <algorithm>
#include <ctime>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kubeclient/api_client.h"
#include "nlohmann/json.hpp"

namespace gpushare::kubeclient {

namespace http = boost::beast::http;
using nlohmann::json;

absl::Status ValidateLeaseOptions(const LeaseOptions& o) {
  if (o.identity.empty()) return absl::InvalidArgumentError("the leader election identity is empty");
  if (o.namespace_name.empty() || o.name.empty()) {
    return absl::InvalidArgumentError("the Lease namespace and name must not be empty");
  }
  if (o.retry_period.count() <= 0 || o.retry_period >= o.renew_deadline ||
      o.renew_deadline >= o.lease_duration) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election needs 0 < retry period < renew deadline < lease duration, not ",
        o.retry_period.count(), " ms, ", o.renew_deadline.count(), " ms, ",
        o.lease_duration.count(), " ms"));
  }
  if (o.lease_duration.count() % 1000 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the lease duration must be whole seconds (the Lease stores seconds), not ",
        o.lease_duration.count(), " ms"));
  }
  return absl::OkStatus();
}

LeaderElector::LeaderElector(LeaseOptions options, LeaseCall call,
                             std::function<Clock::time_point()> now,
                             std::function<std::chrono::system_clock::time_point()> wall)
    : options_(std::move(options)),
      call_(std::move(call)),
      now_(std::move(now)),
      wall_(std::move(wall)) {}

std::string LeaderElector::Path() const {
  return absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                      EscapePathSegment(options_.namespace_name), "/leases/",
                      EscapePathSegment(options_.name));
}

std::string LeaderElector::WallTime() const {
  const auto t = wall_();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch())
                      .count();
  const std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                         static_cast<int>(us % 1'000'000));
}

std::string LeaderElector::LeaseJson(const std::string& holder, int duration_seconds,
                                     int64_t transitions, const std::string& acquire_time,
                                     const std::string& resource_version) const {
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", options_.name}, {"namespace", options_.namespace_name}}},
                {"spec",
                 {{"holderIdentity", holder},
                  {"leaseDurationSeconds", duration_seconds},
                  {"renewTime", WallTime()},
                  {"leaseTransitions", transitions}}}};
  if (!acquire_time.empty()) lease["spec"]["acquireTime"] = acquire_time;
  if (!holder.empty() && !options_.url.empty()) {
    lease["metadata"]["annotations"] = {{kLeaderUrlAnnotation, options_.url}};
  }
  if (!resource_version.empty()) lease["metadata"]["resourceVersion"] = resource_version;
  return lease.dump();
}

bool LeaderElector::TryAcquireOrRenew() {
  const int duration_s = static_cast<int>(options_.lease_duration.count() / 1000);
  absl::StatusOr<std::string> got = call_(http::verb::get, Path(), "");
  // Only this thread writes the Lease; the lock is not held during calls, so
  // that is_leader() never waits for the API server.
  std::unique_lock lock(mu_);
  const Clock::time_point now = now_();
  auto lose_if_stale = [&] {
    if (leader_ && now - renewed_ >= options_.renew_deadline) {
      leader_ = false;
      synced_ = false;
    }
    return leader_;
  };
  auto won = [&](const std::string& acquire_time, int64_t transitions) {
    if (!leader_) synced_ = false;  // A new tenure: the host must resync.
    leader_ = true;
    renewed_ = now;
    holder_ = options_.identity;
    holder_url_ = options_.url;
    transitions_ = transitions;
    acquire_time_ = acquire_time;
    observed_record_.clear();  // Our own write: the next read is observed afresh.
    return true;
  };
  if (!got.ok()) {
    if (got.status().code() != absl::StatusCode::kNotFound) return lose_if_stale();
    const std::string acquire = WallTime();
    lock.unlock();
    absl::StatusOr<std::string> created =
        call_(http::verb::post,
              absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                           EscapePathSegment(options_.namespace_name), "/leases"),
              LeaseJson(options_.identity, duration_s, 0, acquire, ""));
    lock.lock();
    if (!created.ok()) return lose_if_stale();
    return won(acquire, 0);
  }
  const json lease = json::parse(*got, nullptr, false);
  if (!lease.is_object()) return lose_if_stale();
  const json spec = lease.value("spec", json::object());
  const json meta = lease.value("metadata", json::object());
  auto str = [](const json& o, const char* key) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [](const json& o, const char* key, int64_t dflt) {
    auto it = o.find(key);
    return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : dflt;
  };
  const std::string holder = str(spec, "holderIdentity");
  const int64_t transitions = num(spec, "leaseTransitions", 0);
  const int64_t duration = std::max<int64_t>(1, num(spec, "leaseDurationSeconds", duration_s));
  const std::string record =
      absl::StrCat(holder, "|", str(spec, "renewTime"), "|", transitions, "|", duration);
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  holder_ = holder;
  transitions_ = transitions;
  {
    const json ann = meta.value("annotations", json::object());
    auto it = ann.find(kLeaderUrlAnnotation);
    holder_url_ = it != ann.end() && it->is_string() ? it->get<std::string>() : "";
  }
  const bool mine = holder == options_.identity;
  const bool expired = holder.empty() || now >= observed_at_ + std::chrono::seconds(duration);
  if (!mine && !expired) {
    leader_ = false;
    synced_ = false;
    return false;
  }
  const int64_t next_transitions = mine ? transitions : transitions + 1;
  const std::string acquire = mine && !str(spec, "acquireTime").empty()
                                  ? str(spec, "acquireTime")
                                  : WallTime();
  const std::string body = LeaseJson(options_.identity, duration_s, next_transitions, acquire,
                                     str(meta, "resourceVersion"));
  lock.unlock();
  absl::StatusOr<std::string> put = call_(http::verb::put, Path(), body);
  lock.lock();
  if (!put.ok()) return lose_if_stale();
  return won(acquire, next_transitions);
}

absl::Status LeaderElector::Release() {
  {
    std::lock_guard lock(mu_);
    if (!leader_) return absl::OkStatus();
    leader_ = false;
    synced_ = false;
  }
  absl::StatusOr<std::string> got = call_(http::verb::get, Path(), "");
  if (!got.ok()) return got.status();
  const json lease = json::parse(*got, nullptr, false);
  if (!lease.is_object()) return absl::InternalError("the Lease is not JSON");
  const json spec = lease.value("spec", json::object());
  if (spec.value("holderIdentity", "") != options_.identity) return absl::OkStatus();
  const std::string rv = lease.value("metadata", json::object()).value("resourceVersion", "");
  return call_(http::verb::put, Path(),
               LeaseJson("", 1, spec.value("leaseTransitions", int64_t{0}),
                         spec.value("acquireTime", ""), rv))
      .status();
}

void LeaderElector::Run(const std::atomic<bool>& stop,
                        const std::function<absl::Status()>& on_acquired,
                        const std::function<void()>& on_lost) {
  bool was_leader = false;
  while (!stop.load()) {
    const bool leader = TryAcquireOrRenew();
    if (leader && !may_bind() && on_acquired) {
      if (on_acquired().ok()) MarkSynced();
    } else if (leader && !on_acquired) {
      MarkSynced();
    }
    if (was_leader && !leader && on_lost) on_lost();
    was_leader = leader;
    const Clock::time_point until = Clock::now() + options_.retry_period;
    while (!stop.load() && Clock::now() < until) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(50), options_.retry_period));
    }
  }
  (void)Release();
}

bool LeaderElector::is_leader() const {
  std::lock_guard lock(mu_);
  return leader_ && now_() - renewed_ < options_.renew_deadline;
}

bool LeaderElector::may_bind() const {
  std::lock_guard lock(mu_);
  return leader_ && synced_ && now_() - renewed_ < options_.renew_deadline;
}

void LeaderElector::MarkSynced() {
  std::lock_guard lock(mu_);
  if (leader_) synced_ = true;
}

std::string LeaderElector::holder() const {
  std::lock_guard lock(mu_);
  return holder_;
}

std::string LeaderElector::holder_url() const {
  std::lock_guard lock(mu_);
  return holder_url_;
}

int64_t LeaderElector::transitions() const {
  std::lock_guard lock(mu_);
  return transitions_;
}

std::string LeaderElector::Describe() const {
  std::lock_guard lock(mu_);
  const bool leading = leader_ && now_() - renewed_ < options_.renew_deadline;
  if (leading) return synced_ ? "leader" : "leader (syncing state from the API server)";
  return holder_.empty() ? "follower (no leader)" : "follower (leader: " + holder_ + ")";
}

}  // namespace gpushare::kubeclient
