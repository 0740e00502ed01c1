// Internal: the per-cause breakdown of the GPU compute a run left idle
// (UnallocatedBreakdown in gpushare/simulate.h).

#ifndef GPUSHARE_SIM_BREAKDOWN_H_
#define GPUSHARE_SIM_BREAKDOWN_H_

#include <cstdint>
#include <vector>

#include "gpushare/simulate.h"
#include "src/sim/engine.h"

namespace gpushare::sim {

// Classifies the idle compute of the state the placements leave: task
// order[k] on node node_of[k] (-1: dropped) holding the GPUs of mask
// gpus_of[k]. Every task stays (the experiment of Simulate()).
UnallocatedBreakdown ClassifyUnallocated(const Prepared& p, const std::vector<int>& order,
                                         const std::vector<int32_t>& node_of,
                                         const std::vector<uint64_t>& gpus_of);

}  // namespace gpushare::sim

#endif  // GPUSHARE_SIM_BREAKDOWN_H_
