// Patcher: the plugin's API writes, off the kubelet's path (see patcher.h).

#include "device-plugin/patcher.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace gpushare::deviceplugin {

Patcher::Patcher(Send send) : Patcher(std::move(send), Options{}) {}

Patcher::Patcher(Send send, Options options)
    : send_(std::move(send)), options_(options), worker_([this] { Run(); }) {}

Patcher::~Patcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Patcher::Enqueue(Write write) {
  {
    std::lock_guard lock(mu_);
    if (!write.key.empty()) {
      auto same = std::find_if(queue_.begin(), queue_.end(),
                               [&](const Write& w) { return w.key == write.key; });
      if (same != queue_.end()) {
        *same = std::move(write);
        return;
      }
    }
    if (queue_.size() >= options_.max_queue) {
      std::fprintf(stderr, "gpushare-device-plugin: too many API writes waiting; dropped: %s\n",
                   queue_.front().what.c_str());
      queue_.pop_front();
      ++stats_.dropped;
    }
    queue_.push_back(std::move(write));
  }
  cv_.notify_all();
}

bool Patcher::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !busy_; });
}

Patcher::Stats Patcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Patcher::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Write w = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    std::chrono::milliseconds backoff = options_.backoff_initial;
    for (int attempt = 1;; ++attempt) {
      lock.unlock();
      const absl::Status s = send_(w);
      lock.lock();
      if (s.ok()) {
        ++stats_.sent;
        break;
      }
      if (s.code() == absl::StatusCode::kNotFound) {
        ++stats_.dropped;
        break;
      }
      if (attempt >= options_.max_attempts || stopping_) {
        ++stats_.given_up;
        std::fprintf(stderr, "gpushare-device-plugin: gave up after %d attempts: %s: %s\n",
                     attempt, w.what.c_str(), std::string(s.message()).c_str());
        break;
      }
      // A newer write of the same key replaces this one's retry.
      if (!w.key.empty() && std::any_of(queue_.begin(), queue_.end(),
                                        [&](const Write& q) { return q.key == w.key; })) {
        break;
      }
      ++stats_.retries;
      std::fprintf(stderr, "gpushare-device-plugin: %s: %s (trying again in %lld ms)\n",
                   w.what.c_str(), std::string(s.message()).c_str(),
                   static_cast<long long>(backoff.count()));
      cv_.wait_for(lock, backoff, [&] { return stopping_; });
      if (stopping_) return;
      backoff = std::min(backoff * 2, options_.backoff_max);
    }
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace gpushare::deviceplugin
