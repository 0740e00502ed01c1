// List-then-watch of one kind of object (see reflector.h).

#include "kubeclient/reflector.h"

#include <malloc.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kubeclient/api_client.h"
#include "nlohmann/json.hpp"

namespace gpushare::kubeclient {

using nlohmann::json;

namespace {

// An event line longer than this is not a Kubernetes object.
constexpr size_t kMaxLine = 64u << 20;

std::string StringAt(const json& j, const char* a, const char* b) {
  if (!j.is_object()) return "";
  auto x = j.find(a);
  if (x == j.end() || !x->is_object()) return "";
  auto y = x->find(b);
  return y != x->end() && y->is_string() ? y->get<std::string>() : "";
}

// "namespace/name" of an object; "" without a name.
std::string KeyOf(const json& object) {
  const std::string name = StringAt(object, "metadata", "name");
  if (name.empty()) return "";
  return StringAt(object, "metadata", "namespace") + "/" + name;
}

}  // namespace

Reflector::Reflector(std::string path, Handler handler)
    : path_(std::move(path)), handler_(std::move(handler)) {}

void Reflector::Emit(const std::string& type, const std::string& object) {
  ++events_;
  if (handler_) handler_(type, object);
}

absl::Status Reflector::ApplyList(std::string_view body, bool notify) {
  json list = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded() || !list.is_object()) {
    return absl::InvalidArgumentError(path_ + ": the list reply is not a JSON object");
  }
  auto items = list.find("items");
  std::map<std::string, Stored> fresh;
  if (items != list.end() && !items->is_null()) {
    if (!items->is_array()) return absl::InvalidArgumentError(path_ + ": items is not an array");
    for (const json& item : *items) {
      const std::string key = KeyOf(item);
      if (key.empty()) {
        return absl::InvalidArgumentError(path_ + ": a listed item has no metadata.name");
      }
      fresh[key] = Stored{StringAt(item, "metadata", "uid"),
                          StringAt(item, "metadata", "resourceVersion"),
                          StringAt(item, "spec", "nodeName"), item.dump()};
    }
  }
  std::map<std::string, Stored> old;
  {
    std::lock_guard lock(mu_);
    old.swap(store_);
    store_ = fresh;
  }
  if (notify) {
    // Deletions first: they free what additions may need.
    for (const auto& [key, was] : old) {
      auto it = fresh.find(key);
      if (it == fresh.end() || it->second.uid != was.uid) Emit("DELETED", was.object);
    }
    for (const auto& [key, now] : fresh) {
      auto it = old.find(key);
      if (it == old.end() || it->second.uid != now.uid) {
        Emit("ADDED", now.object);
      } else if (it->second.resource_version != now.resource_version ||
                 now.resource_version.empty()) {
        Emit("MODIFIED", now.object);
      }
    }
  }
  rv_ = StringAt(list, "metadata", "resourceVersion");
  needs_list_ = false;
  partial_.clear();
  synced_.store(true);
  return absl::OkStatus();
}

std::string Reflector::WatchPath(int timeout_seconds) const {
  return absl::StrCat(path_, path_.find('?') == std::string::npos ? "?" : "&",
                      "watch=1&resourceVersion=", rv_,
                      "&allowWatchBookmarks=true&timeoutSeconds=", std::max(1, timeout_seconds));
}

void Reflector::StartWatch() {
  partial_.clear();
  verdict_ = Verdict::kContinue;
}

Reflector::Verdict Reflector::ApplyLine(std::string_view line) {
  json event = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded() || !event.is_object()) {
    set_status(path_ + ": malformed watch event: " + std::string(line.substr(0, 200)));
    return Verdict::kRewatch;
  }
  auto type_it = event.find("type");
  auto object_it = event.find("object");
  const std::string type =
      type_it != event.end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (object_it == event.end() || !object_it->is_object()) {
    set_status(path_ + ": watch event without an object: " + std::string(line.substr(0, 200)));
    return Verdict::kRewatch;
  }
  const json& object = *object_it;
  if (type == "ERROR") {
    auto code = object.find("code");
    const int status = code != object.end() && code->is_number_integer() ? code->get<int>() : 0;
    auto message = object.find("message");
    set_status(absl::StrCat(path_, ": watch error ", status, ": ",
                            message != object.end() && message->is_string()
                                ? message->get<std::string>()
                                : object.dump()));
    if (status == 410) {
      needs_list_ = true;
      return Verdict::kRelist;
    }
    return Verdict::kRewatch;
  }
  const std::string rv = StringAt(object, "metadata", "resourceVersion");
  if (type == "BOOKMARK") {
    if (!rv.empty()) rv_ = rv;
    return Verdict::kContinue;
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    set_status(path_ + ": unknown watch event type '" + type + "'");
    return Verdict::kRewatch;
  }
  const std::string key = KeyOf(object);
  if (key.empty()) {
    set_status(path_ + ": watch event object without metadata.name");
    return Verdict::kRewatch;
  }
  std::string text = object.dump();
  {
    std::lock_guard lock(mu_);
    if (type == "DELETED") {
      store_.erase(key);
    } else {
      store_[key] = Stored{StringAt(object, "metadata", "uid"), rv,
                           StringAt(object, "spec", "nodeName"), text};
    }
  }
  if (!rv.empty()) rv_ = rv;
  Emit(type, text);
  return Verdict::kContinue;
}

Reflector::Verdict Reflector::OnWatchData(std::string_view bytes) {
  if (verdict_ != Verdict::kContinue) return verdict_;
  size_t start = 0;
  for (;;) {
    const size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) break;
    std::string_view piece = bytes.substr(start, nl - start);
    start = nl + 1;
    std::string line;
    if (!partial_.empty()) {
      line = std::move(partial_);
      partial_.clear();
      line.append(piece);
      piece = line;
    }
    if (piece.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    verdict_ = ApplyLine(piece);
    if (verdict_ != Verdict::kContinue) return verdict_;
  }
  partial_.append(bytes.substr(start));
  if (partial_.size() > kMaxLine) {
    set_status(path_ + ": a watch event longer than " + std::to_string(kMaxLine) + " bytes");
    partial_.clear();
    verdict_ = Verdict::kRewatch;
  }
  return verdict_;
}

Reflector::Verdict Reflector::OnWatchEnd(const absl::Status& status) {
  const Verdict v = JudgeWatchEnd(status);
  watch_ends_[static_cast<int>(v)].fetch_add(1);
  return v;
}

Reflector::Verdict Reflector::JudgeWatchEnd(const absl::Status& status) {
  partial_.clear();  // An event cut by the end of the stream never happened.
  if (IsGone(status)) {
    set_status(path_ + ": " + std::string(status.message()));
    needs_list_ = true;
    return Verdict::kRelist;
  }
  if (verdict_ != Verdict::kContinue) return verdict_;
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    set_status(path_ + ": " + std::string(status.message()));
    return Verdict::kRewatch;
  }
  return Verdict::kContinue;
}

std::vector<std::string> Reflector::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.reserve(store_.size());
  for (const auto& [key, s] : store_) out.push_back(s.object);
  return out;
}

std::vector<std::string> Reflector::SnapshotOnNode(const std::string& node) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, s] : store_) {
    if (s.node_name == node) out.push_back(s.object);
  }
  return out;
}

std::string Reflector::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

void Reflector::set_status(std::string status) {
  std::lock_guard lock(mu_);
  status_ = std::move(status);
}

void RunReflector(Reflector& r, WatchTransport& t, const ReflectorOptions& options,
                  const std::atomic<bool>& stop) {
  std::mt19937 rng(std::random_device{}());
  int failures = 0;
  auto backoff = [&] {
    const double base = std::min<double>(
        static_cast<double>(options.backoff_max.count()),
        static_cast<double>(options.backoff_initial.count()) * (1 << std::min(failures, 20)));
    ++failures;
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    t.Sleep(std::chrono::milliseconds(static_cast<int64_t>(base * jitter(rng))));
  };
  auto next_resync = t.Now() + options.resync;
  uint64_t last_listed = 0;  // The size of the last list applied.
  while (!stop.load()) {
    if (r.needs_list() || t.Now() >= next_resync) {
      uint64_t listed = 0;
      absl::Status s;
      {
        absl::StatusOr<std::string> body = t.List(r.ListPath());
        s = body.ok() ? r.ApplyList(*body) : body.status();
        if (body.ok()) listed = body->size();
      }
      // The body, the parse and the objects the list replaced are freed now:
      // after a large list, or a small one that replaced a large one.
      if (options.trim_bytes > 0 && std::max(listed, last_listed) >= options.trim_bytes) {
        malloc_trim(0);
      }
      if (s.ok()) last_listed = listed;
      if (!s.ok()) {
        r.set_status(r.path() + ": list failed: " + std::string(s.message()));
        r.RequestList();
        backoff();
        continue;
      }
      r.set_status("");
      failures = 0;
      next_resync = t.Now() + options.resync;
    }
    if (r.resource_version().empty()) {
      t.Sleep(options.poll_interval);
      r.RequestList();
      continue;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::seconds>(next_resync - t.Now()).count();
    const int timeout = static_cast<int>(
        std::clamp<int64_t>(left, 1, std::max<int64_t>(1, options.watch_timeout.count())));
    r.StartWatch();
    const int64_t before = r.events();
    const auto started = t.Now();
    const absl::Status s = t.Watch(r.WatchPath(timeout), [&](std::string_view data) {
      return !stop.load() && r.OnWatchData(data) == Reflector::Verdict::kContinue;
    });
    switch (r.OnWatchEnd(s)) {
      case Reflector::Verdict::kRelist:
        failures = 0;
        break;
      case Reflector::Verdict::kRewatch:
        if (r.events() > before) failures = 0;
        if (!stop.load()) backoff();
        break;
      case Reflector::Verdict::kContinue:
        // A server that ends every watch at once must not make this spin.
        if (r.events() == before && t.Now() - started < std::chrono::seconds(1)) {
          if (!stop.load()) backoff();
        } else {
          failures = 0;
        }
        break;
    }
  }
}

}  // namespace gpushare::kubeclient
