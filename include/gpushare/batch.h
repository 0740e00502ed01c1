// File: gpushare/batch.h
// -----------------------------------------------------------------------------
// The value types of batch placement (Cluster::PlaceBatch) and of the
// defragmentation planner (Cluster::PlanMigrations / ApplyMigrations). The
// calls themselves are members of gpushare::Cluster (cluster.h); what they
// compute, what is exact and what is a bounded search is documented there.
//
//   std::vector<gpushare::Request> pods = ...;
//   gpushare::BatchOptions opt;
//   opt.all_or_nothing = true;
//   auto r = cluster.PlaceBatch(pods, "binpack", opt);
//   if (r.ok()) std::cout << r->placed << " placed, optimal: "
//                         << r->proven_optimal << "\n";
//
//   auto plan = cluster.PlanMigrations(pending, /*max_moves=*/2);
//   if (plan.ok() && plan->found) cluster.ApplyMigrations(*plan).IgnoreError();

#ifndef GPUSHARE_BATCH_H_
#define GPUSHARE_BATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpushare/fragmentation.h"
#include "gpushare/types.h"

namespace gpushare {

// Options of Cluster::PlaceBatch().
struct BatchOptions {
  // Every request is placed, or nothing changes (the call then fails with
  // ResourceExhausted when the search proved that not all fit, or could not
  // find a way within its budget).
  bool all_or_nothing = false;
  // The batch is one gang: no two of its requests may hold a share of the
  // same GPU (GPUs that other, earlier placed work holds are fine).
  bool gang_anti_sharing = false;
  // The most candidate placements the exact search may try before it stops
  // and the best result found so far (never worse than one-by-one placement)
  // is returned with proven_optimal = false. 1..2^40.
  int64_t search_budget = 200000;
};

// What Cluster::PlaceBatch() did.
struct BatchResult {
  // One entry per request, in the order given: where it went, or nullopt.
  std::vector<std::optional<Placement>> placements;
  int placed = 0;  // Number of requests placed.
  // True when no assignment of the batch to the cluster's current state
  // places more requests than `placed` (see Cluster::PlaceBatch()).
  bool proven_optimal = false;
  // Which method produced the result: "sequential" (one-by-one placement in
  // the given order was already best or could not be bettered), "flow"
  // (min-cost flow over identical single-GPU requests) or "search" (the
  // branch-and-bound search).
  std::string method;
};

// One move of a migration plan: request `pod.id` leaves `from` for `to`.
struct Migration {
  // The moved pod as the planner understood its constraints (shape, GPU
  // models, node selector); ApplyMigrations() checks `to` against it again.
  Request pod;
  Placement from;
  Placement to;
};

// What Cluster::PlanMigrations() found.
struct MigrationPlan {
  // True when `moves` (possibly empty: the request fits now) makes the
  // request fit; false when no plan of at most max_moves moves exists (if
  // `proven`) or none was found within the search budget (if not).
  bool found = false;
  // True when the answer is exact: `moves` is a plan of the fewest moves
  // among the candidate moves (see Cluster::PlanMigrations()), or, when not
  // found, no plan within max_moves exists.
  bool proven = false;
  std::vector<Migration> moves;
  // Where the request goes once the moves are applied (found only), as the
  // policy "binpack" would plan it on the cluster after the moves.
  std::optional<Placement> then;
  Request request;   // The request the plan is for (request form).
  // Goal form (Cluster::PlanMigrationsToFreeGpus()): the number of whole
  // GPUs the moves free; 0 for the request form.
  int64_t free_gpus_goal = 0;
  // Goal form Cluster::PlanMigrationsToLowerFragmentation(): the workload the
  // measure is taken against, and the measure (ClusterFragmentation::amount)
  // before and after the moves; nullopt and 0 for the other forms.
  std::optional<TargetWorkload> fragmentation_target;
  double fragmentation_before = 0;
  double fragmentation_after = 0;
  std::string reason;  // When not found: why, in one sentence.
};

}  // namespace gpushare

#endif  // GPUSHARE_BATCH_H_
