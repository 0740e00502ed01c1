// Internal: the migration step of Simulate() (SimulationOptions::
// migration_budget): which placed tasks may move so that a task that found no
// node fits, and the plan for it from Cluster::PlanMigrations().

#ifndef GPUSHARE_SIM_MIGRATE_H_
#define GPUSHARE_SIM_MIGRATE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "gpushare/batch.h"
#include "gpushare/cluster.h"
#include "src/sim/engine.h"

namespace gpushare::sim {

// The id a task placed as `slot` has in the cluster engine's Cluster.
std::string SlotId(int64_t slot);

// The cluster engine's placed tasks: slot -> (task index, node index).
using SlotTasks = absl::flat_hash_map<int64_t, std::pair<int, int>>;

// The fewest moves (within `limits`) after which `request` (task `task` of
// `p`) fits on `cluster`, where the placed tasks are `slot_task` (ids
// SlotId(slot)). The movable tasks are those of the smallest
// removal sets of the limits.nodes nodes that need the fewest removals, that
// fit on some node as they are (see SimulationOptions::migration_nodes), in
// that node order, then by slot. Without any, a plan that is not found.
absl::StatusOr<MigrationPlan> PlanRescue(const Cluster& cluster, const Prepared& p, int task,
                                         const Request& request,
                                         const SlotTasks& slot_task,
                                         const MoveLimits& limits);

// Plans with PlanRescue() for task `task` as slot `slot` and applies a found
// plan to `cluster` (Cluster::ApplyMigrations()); returns the moves made,
// none when no plan was found. `node_index`: node name -> input index.
std::vector<Engine::Moved> MoveForTask(Cluster& cluster, const Prepared& p, int task,
                                       int64_t slot,
                                       const SlotTasks& slot_task,
                                       const absl::flat_hash_map<std::string, int>& node_index,
                                       const MoveLimits& limits);

}  // namespace gpushare::sim

#endif  // GPUSHARE_SIM_MIGRATE_H_
