// File: device-plugin/patcher.h
// -----------------------------------------------------------------------------
// The plugin's writes to the API server (a pod marked assigned, annotations
// corrected to the kubelet's devices, the Node's annotations), sent off the
// kubelet's path: Enqueue() returns at once, and one worker thread sends
// each write, retrying failures with backoff, so a slow or unreachable API
// server delays the writes, never an Allocate or a re-registration.
//
//   Patcher patcher([&](const Patcher::Write& w) { return api.Call(PATCH, w.path, w.body); });
//   patcher.Enqueue({.key = "pod/uid-1", .what = "mark default/a assigned",
//                    .path = PodPath("default", "a"), .body = AssignedPatch(now)});
//
// A write queued under the key of a write still waiting replaces it (the
// Node's annotations: only the latest matters). A write the API server
// answers NotFound (the pod is gone) is dropped; others are retried up to
// Options::max_attempts, then given up and logged. The queue is bounded: when
// full, the oldest write is dropped and counted.
//
// Thread safety: every method may be called from any thread.

#ifndef GPUSHARE_DEVICE_PLUGIN_PATCHER_H_
#define GPUSHARE_DEVICE_PLUGIN_PATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace gpushare::deviceplugin {

class Patcher {
 public:
  struct Write {
    std::string key;   // Replaces a waiting write of the same key ("" never does).
    std::string what;  // For logs: "mark default/a assigned".
    std::string path;
    std::string body;
  };
  using Send = std::function<absl::Status(const Write&)>;
  struct Options {
    int max_attempts = 10;
    std::chrono::milliseconds backoff_initial{200};  // Doubling per attempt.
    std::chrono::milliseconds backoff_max{10'000};
    size_t max_queue = 4096;
  };
  struct Stats {
    int64_t sent = 0;      // Written.
    int64_t dropped = 0;   // NotFound, or pushed out of a full queue.
    int64_t given_up = 0;  // Failed max_attempts times.
    int64_t retries = 0;   // Attempts after a failure.
  };

  explicit Patcher(Send send);
  Patcher(Send send, Options options);
  ~Patcher();  // Stops the worker; writes still queued are not sent.
  Patcher(const Patcher&) = delete;
  Patcher& operator=(const Patcher&) = delete;

  void Enqueue(Write write);
  // Waits until nothing is queued or being sent, or `timeout` passes;
  // returns whether it is idle.
  bool Drain(std::chrono::milliseconds timeout);
  Stats stats() const;

 private:
  void Run();

  const Send send_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Write> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Stats stats_;
  std::thread worker_;
};

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_PATCHER_H_
