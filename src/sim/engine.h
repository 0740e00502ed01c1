// Internal: the placement engines behind Simulate() and Replay(). The fast
// engine keeps nodes in compact arrays and caches each node's score per task
// shape until the node changes; the cluster engine goes through
// Cluster::Place(). Both place alike for the built-in FGD-paper policies.

#ifndef GPUSHARE_SIM_ENGINE_H_
#define GPUSHARE_SIM_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/cluster.h"
#include "gpushare/simulate.h"
#include "src/fgd/kernel.h"

namespace gpushare::sim {

// Kinds for failure counts.
enum class TaskClass { kCpuOnly, kShared, kOneGpu, kMultiGpu };

// A validated request in compact form.
struct Task {
  fgd::KTask k;
  int64_t host_memory = 0;  // MiB.
  int spec = -1;            // Index into Prepared::spec_allows; -1 = any model.
  TaskClass task_class = TaskClass::kCpuOnly;
  int64_t gpu_request = 0;  // compute * GPUs, thousandths.
  int shape = 0;            // Index of (kind, count, cpu, compute): the score cache key.
};

// Nodes and requests checked once and shared by every run.
struct Prepared {
  const std::vector<Node>* nodes = nullptr;
  const std::vector<Request>* requests = nullptr;
  std::vector<Task> tasks;                       // Parallel to *requests.
  std::vector<int> node_model;                   // Model index per node.
  std::vector<std::vector<uint8_t>> spec_allows; // [spec][model].
  std::vector<std::vector<uint8_t>> type_allowed;  // [model][target type].
  int num_shapes = 0;
  int64_t gpu_capacity = 0;  // Thousandths.
  std::shared_ptr<const TargetWorkload> target;
  fgd::CompiledTarget compiled;
};

absl::StatusOr<std::shared_ptr<const Prepared>> Prepare(
    const std::vector<Node>& nodes, const std::vector<Request>& requests,
    std::shared_ptr<const TargetWorkload> target);

// Limits of one migration step (SimulationOptions' migration fields).
struct MoveLimits {
  int max_moves = 1;             // 1..3.
  int nodes = 8;                 // Nodes the moved tasks may come from.
  int64_t search_budget = 2000;  // Candidate moves the planner tries.
};

class Engine {
 public:
  // A task that PlaceMoving() moved: its slot and where it is now.
  struct Moved {
    int64_t slot;
    int from;  // Node index before the move.
    int node;  // Node index after it.
    uint64_t gpus;
  };

  virtual ~Engine() = default;
  // Attempts task `task` (an index into Prepared::tasks) as slot `slot`
  // (unique among present tasks). Returns the node index or -1; `gpus` gets
  // the GPU bit mask.
  virtual int Place(int task, int64_t slot, uint64_t* gpus) = 0;
  // Place() after moves of placed tasks that make the task fit, planned
  // within `limits` (src/sim/migrate.h); `moved` gets the moves applied
  // (possibly some even when the task then fails). Only the cluster engine
  // moves tasks; the others return -1 and move nothing.
  virtual int PlaceMoving(int /*task*/, int64_t /*slot*/, const MoveLimits& /*limits*/,
                          uint64_t* gpus, std::vector<Moved>* /*moved*/) {
    *gpus = 0;
    return -1;
  }
  // Removes the task placed as `slot`.
  virtual void Release(int64_t slot) = 0;
  int64_t allocated() const { return allocated_; }  // Thousandths.
  double frag() const { return frag_; }             // Thousandths.

 protected:
  int64_t allocated_ = 0;
  double frag_ = 0;
};

// The policy must outlive the engine.
absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const Prepared& prepared, Policy& policy,
                                                   uint64_t tie_seed, bool through_cluster);

}  // namespace gpushare::sim

#endif  // GPUSHARE_SIM_ENGINE_H_
