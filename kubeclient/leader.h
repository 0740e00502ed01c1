// File: kubeclient/leader.h
// -----------------------------------------------------------------------------
// Leader election of gpushare-extender replicas through a
// coordination.k8s.io/v1 Lease, with the rules of client-go's leaderelection
// package, so that only one replica binds pods at a time.
//
//   LeaderElector elector(options, [&](http::verb m, const std::string& path,
//                                      const std::string& body) {
//     return api->Call(m, path, body);
//   });
//   elector.Run(stop, /*on_acquired=*/[&] { return ResyncFromTheApiServer(); });
//   ...
//   if (!elector.may_bind()) refuse the bind;
//
// The protocol (one Lease, namespace/name in LeaseOptions):
//  - every retry_period each replica GETs the Lease (creating it, held by
//    itself, when it does not exist);
//  - the holder renews it (PUT with renewTime = now and the resourceVersion it
//    read, so a concurrent writer gets 409 Conflict and nothing changes);
//  - another replica takes it over (PUT: holderIdentity = itself,
//    leaseTransitions + 1) only when holderIdentity is empty (released) or the
//    Lease has not changed for lease_duration as measured on its own
//    monotonic clock since it first saw the current record (clocks of
//    different machines are never compared, as in client-go);
//  - a holder that has not renewed successfully for renew_deadline stops
//    binding at once (may_bind() turns false before any other replica can
//    take over, since renew_deadline < lease_duration) and becomes a follower;
//  - on shutdown the holder releases the Lease (holderIdentity "",
//    leaseDurationSeconds 1), so a successor takes over within retry_period.
//
// A new leader binds only once `on_acquired` has returned OK: the host uses
// it to bring its state up to the API server's (a consistent list of nodes
// and pods applied to the extender), so the state it binds from is at least
// as new as every binding the previous leader made (those happened before the
// Lease changed hands). Until then is_leader() is true but may_bind() false.
//
// Thread safety: Run() on one thread; the accessors from any thread.

#ifndef GPUSHARE_KUBECLIENT_LEADER_H_
#define GPUSHARE_KUBECLIENT_LEADER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include <boost/beast/http/verb.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpushare::kubeclient {

struct LeaseOptions {
  std::string namespace_name = "kube-system";
  std::string name = "gpushare-extender";
  std::string identity;  // Unique per replica, e.g. the pod name; required.
  // client-go's defaults (kube-scheduler's leaderElection uses the same).
  std::chrono::milliseconds lease_duration{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};
  // Where the other replicas reach this one (e.g. http://10.0.0.5:32766),
  // written on the Lease as the annotation kLeaderUrlAnnotation while held,
  // so that followers can forward binds to the leader; may be empty.
  std::string url;
};

inline constexpr char kLeaderUrlAnnotation[] = "gpushare.aliyun.com/leader-url";

// InvalidArgument naming the bad value: empty identity, namespace or name,
// or not retry_period < renew_deadline < lease_duration, or lease_duration
// not a whole number of seconds (the Lease stores seconds).
absl::Status ValidateLeaseOptions(const LeaseOptions& options);

// GET/POST/PUT of a path with a JSON body; the reply's body, or the mapped
// status of the API server's reply (NotFound for 404, AlreadyExists for 409).
using LeaseCall = std::function<absl::StatusOr<std::string>(
    boost::beast::http::verb method, const std::string& path, const std::string& body)>;

class LeaderElector {
 public:
  using Clock = std::chrono::steady_clock;
  // `now` is the monotonic clock (tests pass a fake one); `wall` the time
  // written into the Lease as RFC 3339 with microseconds.
  LeaderElector(LeaseOptions options, LeaseCall call,
                std::function<Clock::time_point()> now = Clock::now,
                std::function<std::chrono::system_clock::time_point()> wall =
                    std::chrono::system_clock::now);

  // One round: read the Lease, then create, renew or take it over when the
  // rules allow. Returns whether this replica holds the Lease afterwards.
  // Errors of the API leave the role as it was, except that a holder that
  // has not renewed for renew_deadline becomes a follower.
  bool TryAcquireOrRenew();

  // Releases the Lease if held (holderIdentity "", leaseDurationSeconds 1);
  // this replica is a follower afterwards. OK when not holding it.
  absl::Status Release();

  // Rounds every retry_period until `stop`; calls `on_acquired` after each
  // acquisition (retried every round while it fails, still renewing), and
  // `on_lost` when a held Lease is lost. Returns after releasing the Lease.
  void Run(const std::atomic<bool>& stop, const std::function<absl::Status()>& on_acquired,
           const std::function<void()>& on_lost = {});

  // Holds the Lease and has renewed it within renew_deadline.
  bool is_leader() const;
  // is_leader() and `on_acquired` has succeeded since the acquisition.
  bool may_bind() const;
  // Marks the state as synced after an acquisition (what Run() does when
  // `on_acquired` succeeds; for hosts driving TryAcquireOrRenew themselves).
  void MarkSynced();

  // The holder seen in the last read ("" when none), and the leader
  // transitions counted by the Lease.
  std::string holder() const;
  // The holder's kLeaderUrlAnnotation as last read ("" when none).
  std::string holder_url() const;
  int64_t transitions() const;
  const LeaseOptions& options() const { return options_; }

  // A human-readable role for /readyz and logs, e.g.
  // "follower (leader: replica-a)".
  std::string Describe() const;

 private:
  std::string Path() const;
  std::string LeaseJson(const std::string& holder, int duration_seconds, int64_t transitions,
                        const std::string& acquire_time, const std::string& resource_version) const;
  std::string WallTime() const;

  const LeaseOptions options_;
  const LeaseCall call_;
  const std::function<Clock::time_point()> now_;
  const std::function<std::chrono::system_clock::time_point()> wall_;

  mutable std::mutex mu_;
  bool leader_ = false;       // Guarded by mu_.
  bool synced_ = false;       // Guarded by mu_.
  Clock::time_point renewed_;  // Last successful create/renew; guarded by mu_.
  std::string holder_;        // Guarded by mu_.
  std::string holder_url_;    // Guarded by mu_.
  int64_t transitions_ = 0;   // Guarded by mu_.
  std::string acquire_time_;  // Of our tenure; guarded by mu_.
  // The last observed record (holder, renewTime, transitions) and when it was
  // first seen on our clock.
  std::string observed_record_;
  Clock::time_point observed_at_;
};

}  // namespace gpushare::kubeclient

#endif  // GPUSHARE_KUBECLIENT_LEADER_H_
