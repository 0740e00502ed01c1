// File: kubeclient/reflector.h
// -----------------------------------------------------------------------------
// List, then watch, one kind of Kubernetes object (nodes or pods), as
// client-go's reflector does, and hand every change to a handler. The
// protocol part is a state machine that never touches the network, so tests
// feed it recorded streams; RunReflector() drives it over a WatchTransport.
//
//   Reflector pods("/api/v1/pods", [&](const std::string& type, const std::string& pod) {
//     extender.ApplyPodEvent(type, pod);
//   });
//   std::thread([&] { RunReflector(pods, transport, {}, stop); }).detach();
//
// The protocol (https://kubernetes.io/docs/reference/using-api/api-concepts/):
//  - GET <path> lists the objects and the list's metadata.resourceVersion;
//  - GET <path>?watch=1&resourceVersion=RV&allowWatchBookmarks=true
//    &timeoutSeconds=N streams newline-delimited JSON events
//    {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}} that
//    happened after RV, in a chunked reply whose chunks do not follow lines;
//  - BOOKMARK only moves RV forward; ERROR carries a v1.Status: code 410
//    ("Expired"/"Gone", "too old resource version") means RV was compacted
//    away and the objects must be listed again; a watch request may also be
//    refused with HTTP 410.
// The reflector keeps the last object of each namespace/name (the store).
// A list is applied as the difference to the store: ADDED for new objects,
// MODIFIED for a changed resourceVersion, DELETED (with the stored object)
// for vanished ones, and DELETED then ADDED when the UID changed, so the
// handler converges to the API server's state after any disconnect.
//
// Thread safety: the state machine is driven by one thread; Snapshot(),
// SnapshotOnNode(), synced() and status() may be called from any thread.

#ifndef GPUSHARE_KUBECLIENT_REFLECTOR_H_
#define GPUSHARE_KUBECLIENT_REFLECTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpushare::kubeclient {

class Reflector {
 public:
  // Called, on the driving thread, with "ADDED", "MODIFIED" or "DELETED" and
  // the object's JSON.
  using Handler = std::function<void(const std::string& type, const std::string& object)>;

  // `path` is the collection, e.g. "/api/v1/pods".
  Reflector(std::string path, Handler handler);

  // What the driver should do next.
  enum class Verdict {
    kContinue,  // Keep reading this watch (or watch again from RV at once).
    kRelist,    // List again (410 Gone, or no resourceVersion to watch from).
    kRewatch,   // Watch again from RV after a backoff (error, dropped stream).
  };

  // Whether a list is due (none yet, or after 410).
  bool needs_list() const { return needs_list_; }
  // Forces a list before the next watch (the periodic resync).
  void RequestList() { needs_list_ = true; }
  // The list request: the collection, read consistently.
  std::string ListPath() const { return path_; }

  // Applies a list reply (a v1.List with metadata.resourceVersion): reports
  // the differences to the store to the handler (unless `notify` is false,
  // for the list the state was built from) and watches from its version.
  // Errors: InvalidArgument for malformed JSON or an item without a name;
  // nothing changes then.
  absl::Status ApplyList(std::string_view body, bool notify = true);

  // The watch request from the current resourceVersion; the server ends it
  // after `timeout_seconds`.
  std::string WatchPath(int timeout_seconds) const;
  // A new watch begins: bytes of an earlier one are dropped.
  void StartWatch();
  // Bytes of the watch reply, cut anywhere: applies every complete event.
  // kRelist after an ERROR with code 410; kRewatch after another ERROR or a
  // malformed line (nothing of it is applied, and RV stays where it was).
  Verdict OnWatchData(std::string_view bytes);
  // The watch reply ended with `status` (OK: the server closed it, e.g. at
  // timeoutSeconds). kRelist for 410 (OutOfRange), kRewatch for an error,
  // else what OnWatchData() last decided.
  Verdict OnWatchEnd(const absl::Status& status);

  // Watches that ended with each verdict of OnWatchEnd() (kContinue: the
  // server closed it normally; kRelist: 410 Gone; kRewatch: an error), for
  // metrics; any thread.
  int64_t watch_ends(Verdict verdict) const {
    return watch_ends_[static_cast<int>(verdict)].load();
  }

  const std::string& resource_version() const { return rv_; }
  const std::string& path() const { return path_; }
  // Events applied since construction (ADDED/MODIFIED/DELETED, listed or watched).
  int64_t events() const { return events_; }

  // The stored objects (JSON), in namespace/name order.
  std::vector<std::string> Snapshot() const;
  // The stored objects whose spec.nodeName is `node` ("" = unassigned pods).
  std::vector<std::string> SnapshotOnNode(const std::string& node) const;
  // Whether a list has been applied.
  bool synced() const { return synced_.load(); }
  // The latest error of the driver ("" after a good list or watch), for /readyz and logs.
  std::string status() const;
  void set_status(std::string status);

 private:
  struct Stored {
    std::string uid;
    std::string resource_version;
    std::string node_name;  // spec.nodeName.
    std::string object;
  };
  Verdict ApplyLine(std::string_view line);
  Verdict JudgeWatchEnd(const absl::Status& status);
  void Emit(const std::string& type, const std::string& object);

  const std::string path_;
  const Handler handler_;
  bool needs_list_ = true;
  std::string rv_;
  std::string partial_;  // An incomplete line of the current watch.
  Verdict verdict_ = Verdict::kContinue;
  int64_t events_ = 0;
  std::atomic<bool> synced_{false};
  std::atomic<int64_t> watch_ends_[3] = {0, 0, 0};
  mutable std::mutex mu_;
  std::map<std::string, Stored> store_;  // Guarded by mu_ (written by the driver only).
  std::string status_;                   // Guarded by mu_.
};

// What RunReflector() needs from the network and the clock.
class WatchTransport {
 public:
  virtual ~WatchTransport() = default;
  // The body of a GET of `path`.
  virtual absl::StatusOr<std::string> List(const std::string& path) = 0;
  // Streams a GET of `path` to `on_data` until the reply ends (OK), on_data
  // returns false (Cancelled), or an error (410 as OutOfRange).
  virtual absl::Status Watch(const std::string& path,
                             const std::function<bool(std::string_view)>& on_data) = 0;
  virtual void Sleep(std::chrono::milliseconds duration) = 0;
  virtual std::chrono::steady_clock::time_point Now() = 0;
};

struct ReflectorOptions {
  // A full list this often even while the watch is healthy: a safety net,
  // not the way changes arrive.
  std::chrono::milliseconds resync{300'000};
  // The longest watch request (timeoutSeconds); shorter when a resync is due.
  std::chrono::seconds watch_timeout{300};
  // After a failed list or watch: doubling from initial up to max.
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30'000};
  // A server that gives no resourceVersion cannot be watched: it is listed
  // this often instead.
  std::chrono::milliseconds poll_interval{5'000};
  // After a list is applied whose body, or the previous list's body, is at
  // least this large, freed memory goes back to the system (malloc_trim): a
  // relist that drops a large cluster otherwise leaves the process at its
  // peak. 0: never.
  uint64_t trim_bytes = 1 << 20;
};

// Lists and watches until `stop` is set (checked between requests and
// between pieces of a watch reply). Errors are logged through
// Reflector::set_status() and retried with backoff; never returns early.
void RunReflector(Reflector& reflector, WatchTransport& transport,
                  const ReflectorOptions& options, const std::atomic<bool>& stop);

}  // namespace gpushare::kubeclient

#endif  // GPUSHARE_KUBECLIENT_REFLECTOR_H_
