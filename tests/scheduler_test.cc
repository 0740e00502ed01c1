// The thread-safe scheduler core: reservations with a TTL, confirm / forget /
// release, scores for extenders, and an 8-thread stress test that checks the
// invariant after every step (run under ThreadSanitizer by
// scripts/test.d/30-tsan.sh).

#include "gpushare/scheduler.h"

#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/seeds.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::Exclusive;
using ::gpushare::testing::S1Cluster;
using ::gpushare::testing::Shared;
using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMs = 1'000'000;  // Nanoseconds per millisecond.

// A scheduler over `cluster` with a fake clock the test moves.
struct Fixture {
  std::shared_ptr<std::atomic<int64_t>> now = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<Scheduler> scheduler;

  explicit Fixture(Cluster cluster, int64_t ttl_ms = 1000, std::string policy = "binpack") {
    SchedulerOptions options;
    options.policy = std::move(policy);
    options.reservation_ttl_ms = ttl_ms;
    auto clock = now;
    options.clock = [clock] { return clock->load(); };
    auto s = Scheduler::Create(std::move(cluster), options);
    EXPECT_OK(s);
    if (s.ok()) scheduler = *std::move(s);
  }
  Scheduler& operator*() { return *scheduler; }
  Scheduler* operator->() { return scheduler.get(); }
  int64_t Used(const std::string& node) {
    int64_t used = -1;
    scheduler->Read([&](const Cluster& c) { used = c.FindNode(node)->gpu_memory_used(); });
    return used;
  }
};

TEST(SchedulerTest, CreateRejectsUnknownPolicyAndBadTtl) {
  SchedulerOptions options;
  options.policy = "nope";
  EXPECT_THAT(Scheduler::Create(S1Cluster(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, "binpack"));
  options.policy = "spread";
  options.reservation_ttl_ms = -1;
  EXPECT_THAT(Scheduler::Create(S1Cluster(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, "ttl -1"));
}

TEST(SchedulerTest, WithoutATtlAReservationHoldsUntilTheHostSettlesIt) {
  Fixture f(S1Cluster(), /*ttl_ms=*/0);
  ASSERT_OK(f->Reserve(Shared("a", 14), "sd-cluster-04").status());
  f.now->store(std::numeric_limits<int64_t>::max() - 1);  // Any time later.
  EXPECT_EQ(f->ExpireReservations(), 0);
  EXPECT_TRUE(f->IsReserved("a"));
  // The slow bind's GPU is still taken: nothing else fits on it.
  EXPECT_THAT(f->Reserve(Shared("b", 14), "sd-cluster-04"),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_OK(f->Confirm("a"));
  EXPECT_EQ(f.Used("sd-cluster-04"), 14);
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, TokensKeepALateCallFromSettlingANewerReservation) {
  Fixture f(S1Cluster(), /*ttl_ms=*/0);
  uint64_t first = 0, second = 0, again = 0;
  ASSERT_OK(f->Reserve(Shared("a", 2), "sd-cluster-04", &first).status());
  EXPECT_GT(first, 0u);
  // Reserving again on the same node is the same reservation.
  ASSERT_OK(f->Reserve(Shared("a", 2), "sd-cluster-04", &again).status());
  EXPECT_EQ(again, first);
  ASSERT_OK(f->Forget("a", first));
  ASSERT_OK(f->Reserve(Shared("a", 2), "sd-cluster-05", &second).status());
  EXPECT_NE(second, first);
  // The first attempt's late Unreserve and PostBind change nothing.
  EXPECT_THAT(f->Forget("a", first), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              "reserved again"));
  EXPECT_THAT(f->Confirm("a", first), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               "reserved again"));
  EXPECT_TRUE(f->IsReserved("a"));
  EXPECT_EQ(f.Used("sd-cluster-05"), 2);
  ASSERT_OK(f->Confirm("a", second));
  EXPECT_OK(f->Confirm("a", second));  // Confirmed already: OK.
  uint64_t confirmed = 7;
  ASSERT_OK(f->Reserve(Shared("a", 2), "sd-cluster-05", &confirmed).status());
  EXPECT_EQ(confirmed, 0u);
  EXPECT_THAT(f->Forget("a", second), StatusIs(absl::StatusCode::kFailedPrecondition, "release"));
  EXPECT_THAT(f->Forget("zzz", 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(f->CheckInvariants());
}

// A node of two 32-unit GPUs: GPU 0 holds v1 (20) and v2 (10), GPU 1 holds
// w (30); 2 units are free on each.
NodeEdits Edits(std::vector<std::string> removed, std::vector<Request> added = {}) {
  NodeEdits e;
  e.removed = std::move(removed);
  e.added = std::move(added);
  return e;
}

Fixture TwoFullGpus() {
  Cluster c;
  EXPECT_OK(c.AddNode(SharedNode("n", {32, 32})));
  EXPECT_OK(c.AddNode(SharedNode("other", {32})));
  Fixture f(std::move(c), /*ttl_ms=*/0);
  EXPECT_OK(f->Reserve(Shared("v1", 20), "n").status());
  EXPECT_OK(f->Reserve(Shared("v2", 10), "n").status());
  EXPECT_OK(f->Reserve(Shared("w", 30), "n").status());
  return f;
}

TEST(SchedulerTest, FitAfterFreesVictimsOnACopyOnly) {
  Fixture f = TwoFullGpus();
  ASSERT_OK_AND_ASSIGN(FitResult now, f->FitAfter(Shared("p", 28), "n", {}));
  EXPECT_FALSE(now.feasible);
  EXPECT_THAT(now.reason, HasSubstr("largest free 2"));
  // Freeing v1 alone leaves 22 on its GPU: not enough; v1 and v2: 32.
  ASSERT_OK_AND_ASSIGN(FitResult one, f->FitAfter(Shared("p", 28), "n", Edits({"v1"})));
  EXPECT_FALSE(one.feasible);
  EXPECT_THAT(one.reason, HasSubstr("largest free 22"));
  ASSERT_OK_AND_ASSIGN(FitResult two,
                       f->FitAfter(Shared("p", 28), "n", Edits({"v1", "v2", "v1"})));
  EXPECT_TRUE(two.feasible) << two.reason;
  EXPECT_EQ(two.node, "n");
  // Ids that are not placed on the node change nothing.
  ASSERT_OK_AND_ASSIGN(FitResult elsewhere,
                       f->FitAfter(Shared("p", 28), "other", Edits({"v1", "v2", "zzz"})));
  EXPECT_TRUE(elsewhere.feasible);
  ASSERT_OK_AND_ASSIGN(FitResult stray,
                       f->FitAfter(Shared("p", 28), "n", Edits({"zzz", "other-pod"})));
  EXPECT_FALSE(stray.feasible);
  // Nothing changed: the victims still hold their GPUs.
  EXPECT_EQ(f.Used("n"), 60);
  EXPECT_THAT(f->Reserve(Shared("p", 28), "n"), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, FitAfterKeepsTheGpusANominatedRequestWaitsFor) {
  Fixture f = TwoFullGpus();
  // "big" (nominated) takes GPU 0 once v1 and v2 are gone; "small" fits on
  // its own, on either GPU, but not beside big: small is refused.
  ASSERT_OK_AND_ASSIGN(FitResult alone, f->FitAfter(Shared("small", 2), "n", {}));
  EXPECT_TRUE(alone.feasible);
  ASSERT_OK_AND_ASSIGN(
      FitResult beside,
      f->FitAfter(Shared("small", 6), "n", Edits({"v1", "v2"}, {Shared("big", 30)})));
  EXPECT_FALSE(beside.feasible);
  ASSERT_OK_AND_ASSIGN(
      FitResult fits,
      f->FitAfter(Shared("small", 2), "n", Edits({"v1", "v2"}, {Shared("big", 30)})));
  EXPECT_TRUE(fits.feasible) << fits.reason;
  // While the victims hold the GPUs, big does not fit: nothing else gets
  // the node, whatever is free.
  ASSERT_OK_AND_ASSIGN(FitResult waiting,
                       f->FitAfter(Shared("small", 2), "n", Edits({}, {Shared("big", 30)})));
  EXPECT_FALSE(waiting.feasible);
  EXPECT_THAT(waiting.reason, HasSubstr("held for request 'big', nominated to it"));
  // An added request that is placed already is counted where it is.
  ASSERT_OK_AND_ASSIGN(FitResult placed,
                       f->FitAfter(Shared("small", 2), "n", Edits({}, {Shared("w", 30)})));
  EXPECT_TRUE(placed.feasible) << placed.reason;
  ASSERT_OK_AND_ASSIGN(FitResult removed_then_added,
                       f->FitAfter(Shared("small", 2), "n",
                                   Edits({"w"}, {Shared("w", 30)})));
  EXPECT_TRUE(removed_then_added.feasible) << removed_then_added.reason;
  EXPECT_EQ(f.Used("n"), 60);
}

TEST(SchedulerTest, FitAfterSaysWhenNoPreemptionCanHelp) {
  Fixture f = TwoFullGpus();
  auto unresolvable = [&](const Request& r, const std::string& node = "n") {
    bool never = false;
    absl::StatusOr<FitResult> fit = f->FitAfter(r, node, {}, &never);
    EXPECT_OK(fit);
    EXPECT_FALSE(fit.ok() && fit->feasible) << r;
    return never;
  };
  EXPECT_FALSE(unresolvable(Shared("p", 28)));        // Once v1 and v2 are gone.
  EXPECT_FALSE(unresolvable(Exclusive("whole", 2)));  // Once every pod is gone.
  EXPECT_TRUE(unresolvable(Shared("huge", 40)));      // No GPU has 40 units.
  EXPECT_TRUE(unresolvable(Shared("three", 6, 3)));   // The node has two GPUs.
  EXPECT_TRUE(unresolvable(Exclusive("whole", 3)));
  Request a100 = Shared("a100", 2);
  a100.gpu_models = {"A100"};
  EXPECT_TRUE(unresolvable(a100));
  EXPECT_FALSE(unresolvable(Shared("p", 2), "nope"));  // Not applied yet, maybe.
  ASSERT_OK(f->SetNodeSchedulable("n", false));
  EXPECT_TRUE(unresolvable(Shared("p", 28)));
  // A feasible answer leaves it false.
  bool never = true;
  ASSERT_OK_AND_ASSIGN(FitResult fits, f->FitAfter(Shared("p", 2), "other", {}, &never));
  EXPECT_TRUE(fits.feasible);
  EXPECT_FALSE(never);
}

TEST(SchedulerTest, FitAfterNamesABadAddedRequestAndAnUnknownNode) {
  Fixture f = TwoFullGpus();
  EXPECT_THAT(f->FitAfter(Shared("p", 2), "n", Edits({}, {Shared("bad", 8, 3)})),
              StatusIs(absl::StatusCode::kInvalidArgument, "added request 'bad'"));
  EXPECT_THAT(f->FitAfter(Shared("p", 8, 3), "n", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not divisible"));
  ASSERT_OK_AND_ASSIGN(FitResult unknown, f->FitAfter(Shared("p", 2), "nope", {}));
  EXPECT_FALSE(unknown.feasible);
  EXPECT_THAT(unknown.reason, HasSubstr("unknown to gpushare"));
}

TEST(SchedulerTest, ReservationCountsAgainstCapacityAtOnce) {
  Fixture f(S1Cluster());
  ASSERT_OK_AND_ASSIGN(Placement p, f->Reserve(Shared("a", 10), "sd-cluster-04"));
  EXPECT_EQ(p.node, "sd-cluster-04");
  EXPECT_THAT(p.gpus, ElementsAre(0));
  EXPECT_TRUE(f->IsReserved("a"));
  ASSERT_OK_AND_ASSIGN(auto fits, f->Filter(Shared("b", 5), {"sd-cluster-04"}));
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_FALSE(fits[0].feasible);
  EXPECT_THAT(fits[0].reason, HasSubstr("largest free 4"));
  EXPECT_THAT(f->Reserve(Shared("b", 5), "sd-cluster-04"),
              StatusIs(absl::StatusCode::kResourceExhausted, "largest free 4"));
  EXPECT_EQ(f.Used("sd-cluster-04"), 10);
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, MoveReplacesAConfirmedPlacementOrChangesNothing) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  Fixture f(std::move(c));
  ASSERT_OK_AND_ASSIGN(Placement a, f->Reserve(Shared("a", 4), "n"));
  Placement to = a;
  to.gpus = {1 - a.gpus[0]};
  EXPECT_THAT(f->Move(to), StatusIs(absl::StatusCode::kFailedPrecondition, "reserved"));
  ASSERT_OK(f->Confirm("a"));
  ASSERT_OK(f->Move(to));
  f->Read([&](const Cluster& cl) { EXPECT_EQ(cl.FindPlacement("a")->gpus, to.gpus); });
  // A move that does not fit leaves the placement where it was.
  ASSERT_OK_AND_ASSIGN(Placement b, f->Reserve(Shared("b", 14), "n"));
  ASSERT_OK(f->Confirm("b"));
  Placement crowded = to;
  crowded.gpus = b.gpus;
  if (crowded.gpus != to.gpus) {
    EXPECT_THAT(f->Move(crowded), StatusIs(absl::StatusCode::kFailedPrecondition, "free units"));
    f->Read([&](const Cluster& cl) { EXPECT_EQ(cl.FindPlacement("a")->gpus, to.gpus); });
  }
  Placement ghost = to;
  ghost.request_id = "ghost";
  EXPECT_THAT(f->Move(ghost), StatusIs(absl::StatusCode::kNotFound, "holds nothing"));
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, ReserveErrorsChangeNothing) {
  Fixture f(S1Cluster());
  EXPECT_THAT(f->Reserve(Shared("a", 2), "nowhere"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(f->Reserve(Shared("a", 8, 3), "sd-cluster-04"),
              StatusIs(absl::StatusCode::kInvalidArgument, "not divisible"));
  EXPECT_THAT(f->Reserve(Shared("a", 15)), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(f->reservations().empty());
  EXPECT_EQ(f.Used("sd-cluster-04") + f.Used("sd-cluster-05"), 0);
}

TEST(SchedulerTest, ReserveIsIdempotentOnTheSameNodeOnly) {
  Fixture f(S1Cluster());
  ASSERT_OK_AND_ASSIGN(Placement first, f->Reserve(Shared("a", 3), "sd-cluster-05"));
  ASSERT_OK_AND_ASSIGN(Placement again, f->Reserve(Shared("a", 3), "sd-cluster-05"));
  EXPECT_EQ(first, again);
  EXPECT_EQ(f.Used("sd-cluster-05"), 3);
  EXPECT_THAT(f->Reserve(Shared("a", 3), "sd-cluster-04"),
              StatusIs(absl::StatusCode::kAlreadyExists, "sd-cluster-05"));
}

TEST(SchedulerTest, ExpiredReservationIsForgottenAndFreesItsUnits) {
  Fixture f(S1Cluster(), /*ttl_ms=*/1000);
  ASSERT_OK(f->Reserve(Shared("a", 6), "sd-cluster-04").status());
  ASSERT_OK(f->Reserve(Shared("b", 4), "sd-cluster-04").status());
  ASSERT_OK(f->Confirm("b"));
  f.now->store(999 * kMs);
  EXPECT_EQ(f->ExpireReservations(), 0);
  f.now->store(1000 * kMs);
  EXPECT_EQ(f->ExpireReservations(), 1);
  EXPECT_EQ(f.Used("sd-cluster-04"), 4);  // b was confirmed: it stays.
  EXPECT_THAT(f->Confirm("a"), StatusIs(absl::StatusCode::kFailedPrecondition, "expired"));
  EXPECT_THAT(f->Forget("a"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(f->Confirm("zzz"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, MutatingCallsExpireDueReservationsFirst) {
  Fixture f(S1Cluster(), /*ttl_ms=*/10);
  ASSERT_OK(f->Reserve(Shared("a", 14), "sd-cluster-04").status());
  f.now->store(20 * kMs);
  // The expired reservation no longer blocks the node.
  ASSERT_OK_AND_ASSIGN(Placement p, f->Reserve(Shared("b", 14), "sd-cluster-04"));
  EXPECT_EQ(p.node, "sd-cluster-04");
  EXPECT_FALSE(f->IsReserved("a"));
}

TEST(SchedulerTest, ConfirmForgetAndReleaseFollowTheLifecycle) {
  Fixture f(S1Cluster());
  ASSERT_OK(f->Reserve(Shared("a", 2), "sd-cluster-04").status());
  ASSERT_OK(f->Reserve(Shared("b", 2), "sd-cluster-04").status());
  ASSERT_OK(f->Confirm("a"));
  EXPECT_OK(f->Confirm("a"));  // Idempotent.
  EXPECT_THAT(f->Forget("a"), StatusIs(absl::StatusCode::kFailedPrecondition, "release"));
  EXPECT_OK(f->Forget("b"));
  EXPECT_THAT(f->Forget("b"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(f->Release("a"));
  EXPECT_THAT(f->Release("a"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(f->Release("nope"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(f.Used("sd-cluster-04"), 0);
  // A forgotten id may be reserved again.
  ASSERT_OK(f->Reserve(Shared("b", 2), "sd-cluster-04").status());
  EXPECT_OK(f->Confirm("b"));
  EXPECT_OK(f->CheckInvariants());
}

TEST(SchedulerTest, ScoreRanksTheBinpackChoiceHighest) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("x", 2), "binpack").status());  // On sd-cluster-05.
  Fixture f(std::move(c));
  ASSERT_OK_AND_ASSIGN(auto scores, f->Score(Shared("y", 8)));
  ASSERT_EQ(scores.size(), 2u);
  std::map<std::string, int64_t> rank;
  for (const NodeScore& s : scores) rank[s.node] = s.rank;
  EXPECT_EQ(rank["sd-cluster-05"], 10);
  EXPECT_EQ(rank["sd-cluster-04"], 0);
  // A node that cannot host the request is left out.
  ASSERT_OK_AND_ASSIGN(auto big, f->Score(Shared("z", 13)));
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].node, "sd-cluster-04");
  EXPECT_EQ(big[0].rank, 10);
}

TEST(SchedulerTest, FilterReportsUnknownNodes) {
  Fixture f(S1Cluster());
  ASSERT_OK_AND_ASSIGN(auto fits, f->Filter(Shared("a", 2), {"ghost", "sd-cluster-05"}));
  ASSERT_EQ(fits.size(), 2u);
  EXPECT_FALSE(fits[0].feasible);
  EXPECT_THAT(fits[0].reason, HasSubstr("unknown"));
  EXPECT_TRUE(fits[1].feasible);
}

TEST(SchedulerTest, ReserveWithoutNodeUsesThePolicy) {
  Fixture f(S1Cluster(), 1000, "spread");
  ASSERT_OK_AND_ASSIGN(Placement a, f->Reserve(Shared("a", 2)));
  ASSERT_OK_AND_ASSIGN(Placement b, f->Reserve(Shared("b", 2)));
  EXPECT_NE(a.node, b.node);
}

// ---- Stress ------------------------------------------------------------------

int StressSteps() {
  if (const char* s = std::getenv("GPUSHARE_STRESS_STEPS")) return std::atoi(s);
  return std::getenv("GPUSHARE_QUICK") != nullptr ? 150 : 600;
}

// Recomputes every GPU's load from the placements alone: an oracle separate
// from the cluster's own counters.
void ExpectNoGpuOverCommitted(const Scheduler& s) {
  s.Read([](const Cluster& c) {
    std::map<std::pair<std::string, int>, int64_t> load;
    for (const Placement& p : c.placements()) {
      for (int g : p.gpus) {
        load[{p.node, g}] += p.exclusive ? c.FindNode(p.node)->gpus[g].memory : p.memory_per_gpu;
      }
    }
    for (const auto& [key, used] : load) {
      const int64_t capacity = c.FindNode(key.first)->gpus[key.second].memory;
      ASSERT_LE(used, capacity) << key.first << " GPU " << key.second;
    }
  });
}

TEST(SchedulerStressTest, EightThreadsNeverPromiseOneGpuTwice) {
  Cluster cluster;
  for (int n = 0; n < 4; ++n) {
    ASSERT_OK(cluster.AddNode(SharedNode("node-" + std::to_string(n), {16, 16, 8, 8})));
  }
  Fixture f(std::move(cluster), /*ttl_ms=*/5);
  const int steps = StressSteps();
  std::atomic<int> failures{0};
  std::atomic<int64_t> reserved_ok{0}, conflicts{0};
  auto worker = [&](int t) {
    std::mt19937 rng(testing::TestSeed(1234 + t));
    std::vector<std::string> mine;  // Ids this thread placed and may still hold.
    for (int i = 0; i < steps && failures.load() == 0; ++i) {
      const std::string node = "node-" + std::to_string(rng() % 4);
      const int op = static_cast<int>(rng() % 10);
      if (op < 2) {
        const int64_t units = 1 + rng() % 8;
        auto fits = f->Filter(Shared("probe", units), {node});
        if (!fits.ok()) failures.fetch_add(1);
      } else if (op < 5) {
        const int64_t count = 1 + rng() % 2;
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto p = rng() % 2 ? f->Reserve(Shared(id, count * (1 + rng() % 6), count), node)
                           : f->Reserve(Shared(id, 1 + rng() % 6));
        if (p.ok()) {
          reserved_ok.fetch_add(1);
          mine.push_back(id);
        } else if (p.status().code() != absl::StatusCode::kResourceExhausted) {
          ADD_FAILURE() << p.status();
          failures.fetch_add(1);
        } else {
          conflicts.fetch_add(1);
        }
      } else if (op < 7 && !mine.empty()) {
        const std::string id = mine[rng() % mine.size()];
        absl::Status s = f->Confirm(id);
        // Expired by another thread's call, or already released.
        if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
          ADD_FAILURE() << s;
          failures.fetch_add(1);
        }
      } else if (op < 8 && !mine.empty()) {
        const size_t k = rng() % mine.size();
        absl::Status s = f->Forget(mine[k]);
        if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
          ADD_FAILURE() << s;
          failures.fetch_add(1);
        }
        if (s.ok()) mine.erase(mine.begin() + k);
      } else if (op < 9 && !mine.empty()) {
        const size_t k = rng() % mine.size();
        absl::Status s = f->Release(mine[k]);
        if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
          ADD_FAILURE() << s;
          failures.fetch_add(1);
        }
        mine.erase(mine.begin() + k);
      } else {
        f.now->fetch_add(1 * kMs);  // Time passes; some reservations expire.
        f->ExpireReservations();
      }
      // The invariant, after every step of every thread.
      if (absl::Status s = f->CheckInvariants(); !s.ok()) {
        ADD_FAILURE() << s;
        failures.fetch_add(1);
      }
      ExpectNoGpuOverCommitted(*f);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reserved_ok.load(), 0);
  EXPECT_OK(f->CheckInvariants());
  // Everything still held is either reserved or confirmed, never more than fits.
  Usage usage;
  f->Read([&](const Cluster& c) { usage = c.TotalUsage(); });
  EXPECT_LE(usage.gpu_memory_used, usage.gpu_memory);
}

}  // namespace
}  // namespace gpushare
