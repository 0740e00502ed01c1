// The small cases of the fgdpack tests: a target with shares that pack
// unevenly, and one-GPU nodes each holding one background share.

#ifndef GPUSHARE_TESTS_TESTING_PACKING_FIXTURES_H_
#define GPUSHARE_TESTS_TESTING_PACKING_FIXTURES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpushare/gpushare.h"
#include "gtest/gtest.h"

namespace gpushare::testing {

// Shares of 810 (which leaves a hole only 160 fits), 470 (two per GPU),
// 320 and 650 (a pair), and 160.
inline TargetWorkload PackingTarget() {
  TargetWorkload target;
  target.tasks = {TargetTask{1000, 810, 1, {}, 0.3}, TargetTask{1000, 470, 1, {}, 0.3},
                  TargetTask{1000, 320, 1, {}, 0.2}, TargetTask{1000, 650, 1, {}, 0.1},
                  TargetTask{1000, 160, 1, {}, 0.1}};
  return target;
}

// A request for `compute` thousandths of one GPU (1 memory unit, 1 core).
inline Request ComputeShare(const std::string& id, int64_t compute) {
  Request r;
  r.id = id;
  r.compute = compute;
  r.gpu_memory = 1;
  r.cpu = 1000;
  return r;
}

// One-GPU nodes (16 units, 32 cores, taking shared work), added in order,
// node i holding a share of held[i].second compute (0: idle).
inline Cluster OneGpuNodesHolding(const std::vector<std::pair<std::string, int64_t>>& held,
                                  uint64_t tie_break_seed = 0) {
  ClusterOptions options;
  options.tie_break_seed = tie_break_seed;
  Cluster c(options);
  for (const auto& [name, taken] : held) {
    Node n;
    n.name = name;
    n.gpus.assign(1, Gpu{16, "A", "", true});
    n.cpu = 32000;
    n.gpu_sharing = true;
    EXPECT_TRUE(c.AddNode(n).ok()) << name;
    if (taken == 0) continue;
    Placement p;
    p.request_id = "bg-" + name;
    p.node = name;
    p.gpus = {0};
    p.memory_per_gpu = 1;
    p.compute_per_gpu = taken;
    p.cpu = 1000;
    EXPECT_TRUE(c.Commit(p).ok()) << name;
  }
  return c;
}

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_PACKING_FIXTURES_H_
