// Internal: the candidate placements of one request on a cluster's current
// state, shared by the batch search and the migration planner.

#ifndef GPUSHARE_SRC_BATCH_CANDIDATES_H_
#define GPUSHARE_SRC_BATCH_CANDIDATES_H_

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/cluster.h"
#include "gpushare/types.h"

namespace gpushare::internal {

// GPUs (node name, index) that a candidate must not use.
using GpuSet = std::set<std::pair<std::string, int>>;

// Every distinct placement of `request` (validated as `demand`) that the fit
// rules of Cluster::Plan() accept now, avoiding the GPUs in `blocked` (may be
// null). Nodes whose whole state is equal (labels, flags, host resources,
// every GPU's size, use, model, health and whether it is blocked) yield the
// candidates of the first one only, and on a node GPUs of equal state are
// interchangeable, so each multiset of GPU states is offered once. Sorted
// best fit first: by the free memory the chosen GPUs keep, then node order.
// That reduction is exact when only the resulting usage matters (placing new
// requests; the last move of a plan). With `reduce_symmetry` false every
// node and GPU set is offered: a move that leaves more moves to come must
// tell apart nodes of equal usage holding different pods.
std::vector<Placement> CandidatePlacements(const Cluster& cluster,
                                           const Request& request,
                                           const Demand& demand,
                                           const GpuSet* blocked,
                                           bool reduce_symmetry = true);

// The placement `demand` of `request` would have on `node`'s GPUs `gpus`.
Placement MakePlacementOn(const Request& request, const Demand& demand,
                          const std::string& node, std::vector<int> gpus);

// The request the migration planner moves placed pod `id` as when its
// submitted request is unknown (Cluster::PlanMigrations() with `movable`
// empty): its shape, the GPU models it runs on (none when a GPU's model is
// unnamed) and every label of its node as a node selector. Hosts use it to
// choose which pods may move. Errors: NotFound if `id` is not placed.
absl::StatusOr<Request> MovableRequestOf(const Cluster& cluster, std::string_view id);

}  // namespace gpushare::internal

#endif  // GPUSHARE_SRC_BATCH_CANDIDATES_H_
