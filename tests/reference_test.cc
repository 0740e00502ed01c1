// The library against the slow reference scan over long random sequences of
// operations (add node, place, plan + commit, release, health and cordon
// changes), for every built-in policy with a reference: identical answers at
// every step, and the cluster's invariants hold throughout.

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/reference.h"
#include "tests/testing/seeds.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::ReferenceCluster;

int Operations() {
  // The sanitizer build runs fewer operations; the normal build the full count.
  return std::getenv("GPUSHARE_QUICK") != nullptr ? 20000 : 100000;
}

class RandomOps {
 public:
  explicit RandomOps(uint64_t seed) : rng_(testing::TestSeed(seed)) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[Uniform(0, static_cast<int>(v.size()) - 1)];
  }

  Node MakeNode(int n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    const int gpus = Pick(std::vector<int>{0, 1, 2, 4, 4, 8, 8});
    const std::string model = Pick(std::vector<std::string>{"T4", "V100M16", "A10"});
    for (int i = 0; i < gpus; ++i) {
      node.gpus.push_back(Gpu{Pick(std::vector<int64_t>{8, 14, 15, 16, 32}),
                              Chance(0.2) ? "T4" : model, "", !Chance(0.05)});
    }
    if (Chance(0.9)) node.labels["gpushare"] = "true";
    node.labels["pool"] = Chance(0.5) ? "a" : "b";
    if (Chance(0.5)) node.cpu = Uniform(4, 64) * 1000;
    if (Chance(0.3)) node.host_memory = Uniform(8, 256) * 1024;
    node.schedulable = !Chance(0.05);
    return node;
  }

  Request MakeRequest(int n) {
    Request r;
    r.id = "req-" + std::to_string(n);
    const int kind = Uniform(0, 9);
    if (kind <= 5) {
      r.gpu_count = Pick(std::vector<int64_t>{1, 1, 1, 2, 4});
      r.gpu_memory = Uniform(1, 8) * r.gpu_count;
      if (Chance(0.2)) r.compute = Uniform(1, 10) * 100;
    } else if (kind == 6) {
      r.compute = Uniform(1, 10) * 100;  // Compute-only share.
    } else if (kind <= 8) {
      r.whole_gpus = Pick(std::vector<int64_t>{1, 1, 2, 4});
    }
    if (Chance(0.3)) r.cpu = Uniform(1, 8) * 1000;
    if (Chance(0.2)) r.host_memory = Uniform(1, 16) * 1024;
    if (Chance(0.1)) r.gpu_models = {Pick(std::vector<std::string>{"T4", "V100M16", "A10"})};
    if (Chance(0.1)) r.node_selector = {{"pool", Chance(0.5) ? "a" : "b"}};
    return r;
  }

 private:
  std::mt19937_64 rng_;
};

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, MatchesReferenceScanOverRandomOperations) {
  const std::string policy = GetParam();
  RandomOps ops(policy == "binpack" ? 1 : 2);
  Cluster cluster;
  ReferenceCluster ref;
  std::vector<std::string> placed;
  int nodes = 0, requests = 0, placed_count = 0, exhausted = 0;
  auto add_node = [&] {
    Node node = ops.MakeNode(nodes++);
    ASSERT_OK(cluster.AddNode(node));
    ref.AddNode(node);
  };
  for (int i = 0; i < 6; ++i) add_node();

  const int total = Operations();
  for (int step = 0; step < total; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int op = ops.Uniform(0, 99);
    if (op < 1 && nodes < 40) {
      add_node();
    } else if (op < 45) {  // Place.
      Request r = ops.MakeRequest(requests++);
      absl::StatusOr<Placement> got = cluster.Place(r, policy);
      std::optional<Placement> want;
      if (cluster.Validate(r).ok()) want = ref.Plan(r, policy);
      if (!cluster.Validate(r).ok()) {
        ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
        continue;
      }
      if (!want) {
        ASSERT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
        ++exhausted;
        continue;
      }
      ASSERT_OK(got);
      ASSERT_EQ(*got, *want);
      ref.Commit(*want);
      placed.push_back(r.id);
      ++placed_count;
    } else if (op < 55) {  // Plan, maybe change something, then commit.
      Request r = ops.MakeRequest(requests++);
      if (!cluster.Validate(r).ok()) continue;
      absl::StatusOr<Placement> planned = cluster.Plan(r, policy);
      std::optional<Placement> want = ref.Plan(r, policy);
      ASSERT_EQ(planned.ok(), want.has_value()) << planned.status();
      if (!want) continue;
      ASSERT_EQ(*planned, *want);
      if (ops.Chance(0.5) && !placed.empty()) {  // Something else happens meanwhile.
        Request other = ops.MakeRequest(requests++);
        if (cluster.Validate(other).ok()) {
          std::optional<Placement> o = ref.Plan(other, policy);
          absl::StatusOr<Placement> got = cluster.Place(other, policy);
          ASSERT_EQ(got.ok(), o.has_value());
          if (o) {
            ASSERT_EQ(*got, *o);
            ref.Commit(*o);
            placed.push_back(other.id);
          }
        }
      }
      const bool fits = ref.CanCommit(*want);
      absl::Status committed = cluster.Commit(*planned);
      if (fits) {
        ASSERT_OK(committed);
        ref.Commit(*want);
        placed.push_back(r.id);
      } else {
        ASSERT_EQ(committed.code(), absl::StatusCode::kFailedPrecondition) << committed;
      }
    } else if (op < 93) {  // Release a placed request, or an unknown one.
      if (placed.empty() || ops.Chance(0.02)) {
        EXPECT_THAT(cluster.Release("no-such-request"),
                    ::gpushare::testing::StatusIs(absl::StatusCode::kNotFound));
        continue;
      }
      const int k = ops.Uniform(0, static_cast<int>(placed.size()) - 1);
      const std::string id = placed[k];
      placed[k] = placed.back();
      placed.pop_back();
      ASSERT_OK(cluster.Release(id));
      ASSERT_TRUE(ref.Release(id));
      if (ops.Chance(0.05)) {
        EXPECT_THAT(cluster.Release(id),
                    ::gpushare::testing::StatusIs(absl::StatusCode::kFailedPrecondition));
      }
    } else if (op < 97) {  // Mark a GPU unhealthy or healthy again.
      auto& rn = ref.nodes()[ops.Uniform(0, nodes - 1)];
      if (rn.gpus.empty()) continue;
      const int g = ops.Uniform(0, static_cast<int>(rn.gpus.size()) - 1);
      const bool healthy = ops.Chance(0.6);
      ASSERT_OK(cluster.SetGpuHealthy(rn.name, g, healthy));
      rn.gpus[g].healthy = healthy;
    } else {  // Cordon or uncordon a node.
      auto& rn = ref.nodes()[ops.Uniform(0, nodes - 1)];
      const bool schedulable = ops.Chance(0.7);
      ASSERT_OK(cluster.SetNodeSchedulable(rn.name, schedulable));
      rn.schedulable = schedulable;
    }
    if (step % 97 == 0) {
      ASSERT_OK(cluster.CheckInvariants());
      ASSERT_EQ(cluster.TotalUsage().gpu_memory_used, ref.MemoryUsed());
      ASSERT_EQ(cluster.num_placements(), static_cast<int>(ref.placements().size()));
    }
  }
  ASSERT_OK(cluster.CheckInvariants());
  // The sequence exercised both outcomes.
  EXPECT_GT(placed_count, total / 10);
  EXPECT_GT(exhausted, 10);
}

INSTANTIATE_TEST_SUITE_P(Policies, ReferenceTest, ::testing::Values("binpack", "spread"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gpushare
