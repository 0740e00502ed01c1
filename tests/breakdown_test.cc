// UnallocatedBreakdown: why the GPU compute a simulation run leaves idle is
// idle (gpushare/simulate.h).

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::GeneratedNodes;
using ::gpushare::testing::GeneratedRequests;

Node MakeNode(const std::string& name, int gpus, int64_t cpu, int64_t memory,
              const std::string& model = "A") {
  Node n;
  n.name = name;
  for (int g = 0; g < gpus; ++g) n.gpus.push_back(Gpu{16, model, "", true});
  n.cpu = cpu;
  n.host_memory = memory;
  n.gpu_sharing = true;
  return n;
}

Request Shared(const std::string& id, int64_t compute, int64_t cpu, int64_t memory,
               std::vector<std::string> models = {}) {
  Request r;
  r.id = id;
  r.compute = compute;
  r.cpu = cpu;
  r.host_memory = memory;
  r.gpu_models = std::move(models);
  return r;
}

// The requests in the given order, each once.
UnallocatedBreakdown RunInOrder(const std::vector<Node>& nodes,
                                const std::vector<Request>& requests) {
  SimulationOptions options;
  options.policy = "fgd";
  options.shuffle = false;
  options.inflate = 0;
  auto r = Simulate(nodes, requests, options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(r->unallocated.total(), r->gpu_capacity - r->allocated_after.back());
  return r->unallocated;
}

TEST(UnallocatedBreakdownTest, CausesAddUpToTheUnallocatedCompute) {
  const std::vector<Node> nodes = GeneratedNodes(40, 3);
  const std::vector<Request> requests = GeneratedRequests(400, 4);
  for (const char* policy : {"fgd", "bestfit", "random", "binpack"}) {
    SimulationOptions options;
    options.policy = policy;
    options.inflate = 1.3;
    ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, requests, options));
    const UnallocatedBreakdown& b = r.unallocated;
    EXPECT_EQ(b.total(), r.gpu_capacity - r.allocated_after.back()) << policy;
    EXPECT_EQ(b.gpu_model + b.cpu + b.host_memory + b.gpu_shape + b.placeable, b.total());
    for (int64_t part : {b.gpu_model, b.cpu, b.host_memory, b.gpu_shape, b.placeable}) {
      EXPECT_GE(part, 0) << policy;
    }
    // Inflated to 1.3x capacity, some compute is stranded.
    EXPECT_GT(b.total(), 0) << policy;
  }
}

TEST(UnallocatedBreakdownTest, ANodeWithoutCpuLeftIsAttributedToCpu) {
  // The first request takes all 4 cores and half a GPU: 3.5 GPUs stay idle
  // because no request fits the node's CPU any more.
  const UnallocatedBreakdown b =
      RunInOrder({MakeNode("n", 4, 4000, 1 << 20)},
          {Shared("a", 500, 4000, 1), Shared("b", 200, 1000, 1)});
  EXPECT_EQ(b.cpu, 3500);
  EXPECT_EQ(b.total(), 3500);
}

TEST(UnallocatedBreakdownTest, ANodeWithoutHostMemoryLeftIsAttributedToHostMemory) {
  const UnallocatedBreakdown b =
      RunInOrder({MakeNode("n", 2, 64000, 1000)}, {Shared("a", 300, 1000, 1000), Shared("b", 300, 1000, 10)});
  EXPECT_EQ(b.host_memory, 1700);
  EXPECT_EQ(b.total(), 1700);
}

TEST(UnallocatedBreakdownTest, AModelNoRequestMayUseIsAttributedToTheModel) {
  // Every GPU request asks for model B; the A node stays idle.
  const UnallocatedBreakdown b =
      RunInOrder({MakeNode("a", 2, 64000, 1 << 20, "A"), MakeNode("b", 1, 64000, 1 << 20, "B")},
          {Shared("x", 400, 1000, 1, {"B"})});
  EXPECT_EQ(b.gpu_model, 2000);
  EXPECT_EQ(b.placeable, 600);  // Another 400 fits the rest of the B GPU.
  EXPECT_EQ(b.total(), 2600);
}

TEST(UnallocatedBreakdownTest, SharesTooSmallForEveryRequestAreStrandedByShape) {
  // 1 GPU: 700 taken, 300 left; the only GPU request needs 700.
  const UnallocatedBreakdown shape =
      RunInOrder({MakeNode("n", 1, 64000, 1 << 20)}, {Shared("a", 700, 1000, 1), Shared("b", 700, 1000, 1)});
  EXPECT_EQ(shape.gpu_shape, 300);
  EXPECT_EQ(shape.total(), 300);
  // 50 left on a partly used GPU fits neither a 950 share nor a whole GPU.
  Request whole;
  whole.id = "w";
  whole.whole_gpus = 1;
  whole.cpu = 1000;
  const UnallocatedBreakdown mixed =
      RunInOrder({MakeNode("n", 2, 64000, 1 << 20)}, {Shared("a", 950, 1000, 1), whole});
  EXPECT_EQ(mixed.gpu_shape, 50);
  EXPECT_EQ(mixed.total(), 50);
}

TEST(UnallocatedBreakdownTest, ComputeARequestCouldStillUseIsPlaceable) {
  const UnallocatedBreakdown b =
      RunInOrder({MakeNode("n", 2, 64000, 1 << 20)}, {Shared("a", 300, 1000, 1)});
  EXPECT_EQ(b.placeable, 1700);
  EXPECT_EQ(b.total(), 1700);
}

TEST(UnallocatedBreakdownTest, AnUnschedulableNodeCountsAsNoModelWanted) {
  Node off = MakeNode("off", 2, 64000, 1 << 20);
  off.schedulable = false;
  const UnallocatedBreakdown b =
      RunInOrder({off, MakeNode("on", 1, 64000, 1 << 20)}, {Shared("a", 1000, 1000, 1)});
  EXPECT_EQ(b.gpu_model, 2000);
  EXPECT_EQ(b.total(), 2000);
}

}  // namespace
}  // namespace gpushare
