// File: gpushare/scheduler.h
// -----------------------------------------------------------------------------
// A thread-safe scheduler core for hosts that serve many requests at once
// (a Kubernetes scheduler extender, a gRPC service): it wraps a Cluster with
// a reader/writer lock and adds reservations with a time-to-live, so that
// concurrent binds can never promise one GPU twice.
//
//   gpushare::SchedulerOptions options;
//   options.policy = "binpack";
//   options.reservation_ttl_ms = 60'000;
//   auto scheduler = gpushare::Scheduler::Create(std::move(cluster), options);
//   if (!scheduler.ok()) return scheduler.status();
//
//   // Any thread, concurrently:
//   auto fits = (*scheduler)->Filter(pod);                  // shared lock
//   auto scores = (*scheduler)->Score(pod, {"n1", "n2"});   // shared lock
//   auto placed = (*scheduler)->Reserve(pod, "n1");         // exclusive lock
//   // ... the device plugin has taken the GPUs:
//   (*scheduler)->Confirm(pod.id).IgnoreError();
//   // ... or binding failed:  (*scheduler)->Forget(pod.id)
//   // ... the pod finished:   (*scheduler)->Release(pod.id)
//
// Life of a placement:
//   Reserve() ──> reserved ──Confirm()──> confirmed ──Release()──> gone
//                    │  └──Forget() / TTL expiry──> gone
//                    └──Release()──> gone
// A reservation is committed to the cluster at once, so it counts against
// capacity exactly like a confirmed placement: every later Filter, Score and
// Reserve sees it. Expired reservations are forgotten at the start of every
// mutating call and by ExpireReservations() (hosts call it from a timer).
//
// A host that learns for certain how each bind ends (kube-scheduler's
// framework: Unreserve or a bound pod) sets reservation_ttl_ms to 0: its
// reservations never expire, as kube-scheduler never expires a pod it
// assumed, so a slow bind cannot leave a GPU promised twice. Each
// reservation has a token (Reserve's `token`), never reused in the
// scheduler's life; Confirm and Forget given a token act only on that
// reservation, so a late call about an earlier attempt (or an older pod of
// the same name) cannot confirm or free a newer one.
//
// Locking: one reader/writer lock guards the cluster and the reservations.
// Filter, Score, Read, Placements, CheckInvariants and the other const methods
// take it shared and may run in parallel; Reserve, Confirm, Forget, Release,
// Move, ExpireReservations and the node edits take it exclusively. Writers are
// preferred: once a writer waits, new readers wait behind it, so a stream of
// overlapping reads (filters, metrics scrapes) cannot hold a bind back
// indefinitely. Each call is
// atomic: a Reserve validates, chooses and commits under one exclusive lock, so
// its placement can never have been taken by another thread in between.
// Policies are made per call (Policy objects are single-threaded).

#ifndef GPUSHARE_SCHEDULER_H_
#define GPUSHARE_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/cluster.h"
#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare {

struct SchedulerOptions {
  // The placement policy, by name (see PolicyNames()).
  std::string policy = "binpack";
  // What the policy is made with: the seed of "random", and the target
  // workload of "fgd", "fgdcpu" and "fgdpack" (without one they measure
  // fragmentation against a single whole-GPU task). A policy is made per
  // call; what it derives from the target (fgdpack's packing prices) is
  // solved once per process.
  PolicyOptions policy_options;
  // How long a reservation lives without Confirm(), milliseconds; 0: until
  // Confirm(), Forget() or Release(), never expired.
  int64_t reservation_ttl_ms = 60'000;
  // Monotonic clock in nanoseconds; empty means std::chrono::steady_clock.
  // Tests inject a fake one. Must be safe to call from any thread.
  std::function<int64_t()> clock;
  // How many forgotten or expired reservation ids are remembered, so that a
  // late Confirm() says "expired" (FailedPrecondition) instead of NotFound.
  int remembered_expiries = 4096;
};

// A node's score under the scheduler's policy, for extender prioritize calls.
struct NodeScore {
  std::string node;
  Score score;       // The policy's score (higher is better).
  int64_t rank = 0;  // 0..10: 10 for the best score, 0 for the worst,
                     // linear in the rank among distinct scores.
};

// What kube-scheduler's preemption and nominated pods change on one node
// before it asks whether a pod fits there (Scheduler::FitAfter()).
struct NodeEdits {
  // Requests whose placements on the node are freed: preemption's victims.
  // Ids not placed on the node are ignored (pods gpushare does not hold).
  std::vector<std::string> removed;
  // Requests placed on the node first, in order, each on the GPUs the
  // policy chooses: pods nominated to it. One placed already (here and not
  // removed, or on another node) is ignored: it is counted where it is.
  std::vector<Request> added;
};

// A reservation that has not been confirmed yet.
struct Reservation {
  Placement placement;
  int64_t expires_ns = 0;  // Clock time at which it is forgotten, ns (no TTL: INT64_MAX).
  uint64_t token = 0;      // Reserve's token for it: 1, 2, ...
};

class Scheduler {
 public:
  // Takes ownership of `cluster` (its placements are confirmed ones).
  // Errors: InvalidArgument for an unknown policy name (the message lists the
  // known ones) or a negative reservation_ttl_ms.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      Cluster cluster, SchedulerOptions options = {});

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  const SchedulerOptions& options() const { return options_; }

  // ---- Read side (shared lock) ------------------------------------------

  // Cluster::Fit() restricted to `nodes` (all nodes when empty), in the order
  // given; names the cluster does not know are infeasible with the reason
  // "node '<name>' is unknown to gpushare". Errors: those of Validate().
  absl::StatusOr<std::vector<FitResult>> Filter(
      const Request& request, const std::vector<std::string>& nodes = {}) const;

  // The policy's score of every node of `nodes` (all when empty) that can
  // host `request` now, in the order given; infeasible and unknown nodes
  // are left out. Ranks
  // are 0..10 (see NodeScore). Errors: those of Validate().
  absl::StatusOr<std::vector<NodeScore>> Score(
      const Request& request, const std::vector<std::string>& nodes = {}) const;

  // Fit of `request` on `node` as the node would be after `edits`, judged
  // on a copy of its state: nothing changes. An added request that does
  // not fit makes `request` infeasible, the reason naming it ("the node's
  // GPUs are held for request 'ns/p', nominated to it (...)"): GPUs that a
  // nominated pod waits for are not offered to another. An unknown node is
  // infeasible, as in Filter(). `unresolvable`, when given, is set when
  // `request` is infeasible and would be so on the node holding nothing
  // (a GPU model or selector not matched, too few or too small GPUs,
  // sharing off, cordoned): no preemption can make it fit. An unknown node
  // is not unresolvable: a host may not have applied it yet.
  // Without edits it reads the node in place, as Filter() does. Errors:
  // those of Validate() for `request` or an added request (the message
  // names the added one).
  absl::StatusOr<FitResult> FitAfter(const Request& request, std::string_view node,
                                     const NodeEdits& edits,
                                     bool* unresolvable = nullptr) const;

  // Calls `fn` with the cluster under the shared lock. `fn` must not call
  // back into this scheduler and must not keep references past its return.
  void Read(const std::function<void(const Cluster&)>& fn) const;

  // As Read(), with every reservation not yet confirmed (sorted by request
  // id): one consistent view of both.
  void Read(const std::function<void(const Cluster&, const std::vector<Reservation>&)>& fn) const;

  // Every reservation not yet confirmed, sorted by request id.
  std::vector<Reservation> reservations() const;
  bool IsReserved(std::string_view id) const;

  // Cluster::CheckInvariants(), and every reservation is placed in the
  // cluster with the same placement. Internal otherwise.
  absl::Status CheckInvariants() const;

  // ---- Write side (exclusive lock) ----------------------------------------

  // Chooses GPUs for `request` on `node` (any node under the policy when
  // `node` is empty) and reserves them until the TTL runs out.
  // Errors: those of Validate(); NotFound for an unknown node; AlreadyExists
  // if the id is placed or reserved (on another node, or `node` empty);
  // ResourceExhausted if it does not fit there now (the message says why).
  // Reserving an id already reserved or placed on the same `node` returns the
  // existing placement (kube-scheduler retries binds).
  // `token`, when given, receives the reservation's token (that of the
  // existing reservation; 0 for an existing confirmed placement).
  absl::StatusOr<Placement> Reserve(const Request& request, std::string_view node = "",
                                    uint64_t* token = nullptr);

  // Marks a reservation as taken by the device plugin; it then lives until
  // Release(). Confirming a confirmed placement is OK.
  // Errors: FailedPrecondition if it was forgotten or expired recently;
  // NotFound if unknown.
  [[nodiscard]] absl::Status Confirm(std::string_view id);
  // As Confirm(), for the reservation `token` only: FailedPrecondition,
  // changing nothing, if `id` is reserved under another token (a newer
  // attempt, or another pod of that name). A confirmed placement is OK, as
  // above (the host saw the bind before it confirmed).
  [[nodiscard]] absl::Status Confirm(std::string_view id, uint64_t token);

  // Drops a reservation (binding failed). Errors: FailedPrecondition if `id`
  // is confirmed (use Release()) or was forgotten recently; NotFound if unknown.
  [[nodiscard]] absl::Status Forget(std::string_view id);
  // As Forget(), for the reservation `token` only: FailedPrecondition,
  // changing nothing, if `id` is reserved under another token.
  [[nodiscard]] absl::Status Forget(std::string_view id, uint64_t token);

  // Frees a placement, reserved or confirmed. Errors: those of
  // Cluster::Release().
  [[nodiscard]] absl::Status Release(std::string_view id);

  // Places `request` as a confirmed placement (no TTL) under the policy.
  // Errors: those of Cluster::Place().
  absl::StatusOr<Placement> Place(const Request& request);

  // Applies `placement` as a confirmed placement, exactly as given.
  // Errors: those of Cluster::Commit().
  [[nodiscard]] absl::Status Commit(const Placement& placement);

  // Commit() of a placement that already runs (a host restoring what the
  // cluster runs, e.g. from bind annotations): the pod holds its GPUs even
  // where its node is cordoned, no longer takes shared work or has
  // unhealthy GPUs, so only the GPUs' capacity can refuse it. Errors: those
  // of Cluster::Commit() but those three.
  [[nodiscard]] absl::Status Restore(const Placement& placement);

  // Replaces the confirmed placement of `to.request_id` with `to`, as one
  // step: a device plugin reports that the pod runs on other GPUs than were
  // recorded. `to` is applied as by Restore(). Errors: NotFound if the id
  // holds nothing; FailedPrecondition if it is reserved, not confirmed;
  // those of Restore() for `to`, and then the old placement stays as it was.
  [[nodiscard]] absl::Status Move(const Placement& to);
  // Forgets every reservation whose TTL has run out; returns how many (0,
  // without taking the lock, when reservations never expire).
  int ExpireReservations();

  // Node edits, as on Cluster; same errors.
  [[nodiscard]] absl::Status AddNode(const Node& node);
  [[nodiscard]] absl::Status RemoveNode(std::string_view name);
  [[nodiscard]] absl::Status SetNodeSchedulable(std::string_view name, bool schedulable);
  [[nodiscard]] absl::Status SetGpuHealthy(std::string_view node, int gpu, bool healthy);

 private:
  struct State;
  Scheduler(std::unique_ptr<State> state, SchedulerOptions options);

  // Forget(); `token` 0: any reservation of `id`.
  absl::Status ForgetToken(std::string_view id, uint64_t token);

  SchedulerOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace gpushare

#endif  // GPUSHARE_SCHEDULER_H_
