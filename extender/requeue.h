// File: extender/requeue.h
// -----------------------------------------------------------------------------
// Nudges kube-scheduler to retry pending GPU pods as soon as GPUs are freed.
//
// Why: kube-scheduler parks a pod that no node fits in its unschedulable
// pool. A pod deletion moves the parked pods back to the active queue at once
// -- often before the extender has seen that deletion (a watch event is
// milliseconds behind, a poll seconds) -- so the extender's filter rejects
// them again, and they wait in the pool for the next cluster event or the
// 5-minute flush, while GPUs sit idle. kube-scheduler also requeues a parked
// pod when the pod itself is updated (anything but its status), so after the
// extender releases a placement it touches (merge-patches one annotation of)
// the pending GPU pods that now fit somewhere by its own filter. That costs
// one PATCH per such pod, only after a release, at most `max_per_round` per
// round and once per `min_interval` per pod, and it is harmless when the pod
// was requeued anyway (kube-scheduler schedules it once).
//
//   Requeuer requeuer(&extender, {pending_pods_fn, node_names_fn, patch_fn});
//   std::thread([&] { requeuer.Run(stop); }).detach();
//   ... after ApplyPodEvent() released something: requeuer.Kick();
//
// Thread-safe: Kick() from any thread; Run() or RunOnce() on one thread.

#ifndef GPUSHARE_EXTENDER_REQUEUE_H_
#define GPUSHARE_EXTENDER_REQUEUE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpushare/kubernetes.h"

namespace gpushare::extender {

// The annotation the nudge writes (milliseconds since the epoch).
inline constexpr char kRequeueAnnotation[] = "scheduler.framework.gpushare.requeue-at";

struct RequeueOptions {
  // The pending pods (no spec.nodeName) the API server has, as JSON objects.
  std::function<std::vector<std::string>()> pods;
  // The names of the nodes to filter against.
  std::function<std::vector<std::string>()> node_names;
  // Merge-patches pod `ns`/`name` with `patch`.
  std::function<absl::Status(const std::string& ns, const std::string& name,
                             const std::string& patch)>
      patch;
  int max_per_round = 50;                        // Pods touched after one release.
  std::chrono::milliseconds min_interval{10'000};  // Between two touches of a pod.
  std::chrono::milliseconds coalesce{100};         // Kicks within this make one round.
};

class Requeuer {
 public:
  // `ext` must outlive the requeuer.
  Requeuer(k8s::Extender* ext, RequeueOptions options);

  // Capacity was freed: run a round soon.
  void Kick();

  // One round now: touches every pending GPU pod (no spec.nodeName, not
  // terminating) that the extender's filter fits on some node, up to
  // max_per_round, skipping pods touched within min_interval. Returns the
  // "namespace/name" of the pods touched; patch errors are skipped (the next
  // round or kube-scheduler's own retry covers them).
  std::vector<std::string> RunOnce();

  // Runs rounds after kicks until `stop` is set (checked every 200 ms).
  void Run(const std::atomic<bool>& stop);

 private:
  k8s::Extender* ext_;
  RequeueOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool kicked_ = false;  // Guarded by mu_.
  std::map<std::string, std::chrono::steady_clock::time_point> touched_;  // Run thread only.
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_REQUEUE_H_
