// gpushare-extender's side of the API server's lists and watches: the state
// built from the first lists (StartFromLists), each node and pod event
// applied to the extender, the replay of a node's pods when the node
// (re)appears, the nodes deleted while they still hold placements, the
// leader's resync, and the requeuer's kick whenever GPUs may have been freed.
//
//   Follower follower(&extender, {.pods_on_node = ..., .kick = ...});
//   Reflector pods("/api/v1/pods", [&](auto& type, auto& pod) { follower.OnPodEvent(type, pod); });
//   Reflector nodes("/api/v1/nodes", [&](auto& type, auto& node) { follower.OnNodeEvent(type, node); });
//
// Pod events, node replays and resyncs are applied under one mutex, so that
// a replay never applies an older state of a pod after a newer one. The
// methods may be called from any thread.

#ifndef GPUSHARE_EXTENDER_FOLLOW_H_
#define GPUSHARE_EXTENDER_FOLLOW_H_

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "extender/metrics.h"
#include "gpushare/kubernetes.h"
#include "gpushare/scheduler.h"

namespace gpushare::extender {

// Writes each distinct warning once, "warning: <text>" on a line (bounded
// memory: after 10,000 distinct warnings it forgets them all).
class WarningLog {
 public:
  explicit WarningLog(std::ostream* out = &std::cerr) : out_(out) {}
  void Log(const std::vector<std::string>& warnings);

 private:
  std::ostream* out_;
  std::mutex mu_;
  std::set<std::string> logged_;
};

// Writes "gpushare-extender: <what>: N nodes added, ..." for a report that
// changed anything; nothing for one that changed nothing.
void LogReport(std::ostream& out, const char* what, const k8s::SyncReport& report);

// The extender's state at start-up, from the API server's first lists (or
// the --nodes/--pods files).
struct StartState {
  std::unique_ptr<Scheduler> scheduler;
  std::vector<k8s::Pod> pods;  // For Extender::RememberPods().
  k8s::RebuildReport report;   // Its warnings are written already.
};

// Reads the lists, restores the placements their pods' bind annotations
// name (k8s::RebuildCluster) and creates the scheduler. One object that
// cannot be read (the API server accepts a Node with 65 GPUs) is left out
// with a warning naming it, counted in
// gpushare_extender_objects_skipped_total{kind} when `metrics` is given, as
// the watch does: it must not stop every replica from starting. Errors:
// InvalidArgument for a text that is not a list, or options the scheduler
// refuses.
absl::StatusOr<StartState> StartFromLists(std::string_view nodes_json,
                                          std::string_view pods_json,
                                          const SchedulerOptions& options, Metrics* metrics,
                                          std::ostream& err = std::cerr);

struct FollowerOptions {
  // The pods bound to a node as the pod watch has them now, as v1.Pod JSON
  // (Reflector::SnapshotOnNode); replayed when the node (re)appears. Empty:
  // nothing is replayed.
  std::function<std::vector<std::string>(const std::string& node)> pods_on_node;
  // Called when GPUs may have been freed or added, so that pending pods are
  // retried (Requeuer::Kick). May be empty.
  std::function<void()> kick;
  // Where reports (`out`) and warnings (`err`) are written.
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
};

class Follower {
 public:
  // `extender` must outlive the follower.
  Follower(k8s::Extender* extender, FollowerOptions options);

  // A pod's watch event (`type`: ADDED, MODIFIED, DELETED). When it freed
  // GPUs (a placement released) or changed a node's hold, the nodes deleted
  // while they held placements are tried again (one may now hold nothing)
  // and `kick` is called. An event the extender refuses is a warning;
  // nothing changes then.
  void OnPodEvent(const std::string& type, const std::string& pod_json);

  // A node's watch event. A node deleted while it holds placements stays,
  // cordoned, until its last placement ends (see OnPodEvent). A node added
  // or changed gets its bound pods replayed (`pods_on_node`), so that their
  // placements are restored, and `kick` is called.
  void OnNodeEvent(const std::string& type, const std::string& node_json);

  // A new leader's resync: Extender::Sync() of fresh lists, under the same
  // mutex as the events; logged, and `kick` called when it succeeds.
  absl::StatusOr<k8s::SyncReport> Resync(const std::string& nodes_json,
                                         const std::string& pods_json, uint64_t mark);

  // The nodes deleted from the API server that still hold placements.
  std::vector<std::string> doomed() const;

  WarningLog& warnings() { return warnings_; }

 private:
  void Kick() const;
  // Logs an event's outcome: a refusal as a warning ("<what> <type> not
  // applied: ..."), else its report and warnings. Returns whether it applied.
  bool Logged(const char* what, const std::string& type,
              const absl::StatusOr<k8s::SyncReport>& r);
  // Tries to remove every doomed node again; mu_ held.
  void RetryDoomedLocked();

  k8s::Extender* const ext_;
  const FollowerOptions options_;
  WarningLog warnings_;
  mutable std::mutex mu_;  // Pod events, node replays, resyncs, doomed_.
  std::map<std::string, std::string> doomed_;  // Node name -> its last JSON.
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_FOLLOW_H_
