// "fgdcpu" (gpushare/policy.h) and its CPU-bound fragmentation
// (fgd::FragAmountCpuBound).

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "src/fgd/kernel.h"
#include "tests/testing/scanned_policy.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

fgd::CompiledTarget OneType(int64_t cpu, int64_t share, int count) {
  TargetWorkload t;
  t.tasks.push_back(TargetTask{cpu, share, count, {}, 1.0});
  return fgd::Compile(t);
}

TEST(FragAmountCpuBoundTest, EqualsFragAmountWhenCpuServesEveryCopy) {
  const std::vector<int64_t> left = {200, 1000, 1000, 500};
  for (const auto& target : {OneType(1000, 500, 1), OneType(4000, 0, 1), OneType(2000, 0, 2),
                             OneType(0, 300, 1)}) {
    for (int64_t cpu : {0, 999, 64000}) {
      EXPECT_DOUBLE_EQ(
          fgd::FragAmountCpuBound(target, left.data(), 4, kGpuCompute, cpu, nullptr),
          fgd::FragAmount(target, left.data(), 4, kGpuCompute, cpu, nullptr))
          << cpu;
    }
  }
}

TEST(FragAmountCpuBoundTest, FittingGpusTheCpuCannotServeAreFragment) {
  const std::vector<int64_t> idle = {1000, 1000, 1000, 1000};
  // CPU for one whole-GPU copy: three idle GPUs are lost to it.
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(4000, 0, 1), idle.data(), 4, kGpuCompute, 5000, nullptr),
      3000);
  // One copy of a 2-GPU type serves two GPUs.
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(4000, 0, 2), idle.data(), 4, kGpuCompute, 4000, nullptr),
      2000);
  // Shared copies: 500 each, CPU for two; the largest GPU takes both, the
  // other fitting GPU is lost, the 300 left is too small anyway.
  const std::vector<int64_t> mixed = {300, 1000, 600};
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(1000, 500, 1), mixed.data(), 3, kGpuCompute, 2000, nullptr),
      900);
  EXPECT_DOUBLE_EQ(
      fgd::FragAmount(OneType(1000, 500, 1), mixed.data(), 3, kGpuCompute, 2000, nullptr), 300);
}

// The definitions of fgd::FragAmount() and fgd::FragAmountCpuBound() (see
// src/fgd/kernel.h), written plainly: per target type in order, the idle
// share that type cannot use, weighted.
struct PlainFrag {
  double plain = 0;
  double cpu_bound = 0;
};
PlainFrag ReferenceFrag(const fgd::CompiledTarget& target, const std::vector<int64_t>& left,
                        int64_t full, int64_t cpu_left, const uint8_t* allowed) {
  PlainFrag out;
  int64_t total = 0;
  for (int64_t l : left) total += l;
  if (total == 0) return out;
  for (size_t k = 0; k < target.types.size(); ++k) {
    const fgd::CompiledTarget::Type& t = target.types[k];
    const bool hostable =
        t.count > 0 && cpu_left >= t.cpu && (allowed == nullptr || allowed[k] != 0);
    const int64_t need = (t.share <= 0 || t.share > full) ? full : t.share;
    std::vector<int64_t> fitting;
    int64_t small = 0;
    for (int64_t l : left) {
      if (l >= need) {
        fitting.push_back(l);
      } else {
        small += l;
      }
    }
    if (!hostable || static_cast<int>(fitting.size()) < t.count) {
      out.plain += t.weight * static_cast<double>(total);
      out.cpu_bound += t.weight * static_cast<double>(total);
      continue;
    }
    out.plain += t.weight * static_cast<double>(small);
    // Copies the free CPU can run; the fitting GPUs served largest first.
    const int64_t copies = t.cpu <= 0 ? int64_t{1} << 40 : cpu_left / t.cpu;
    std::sort(fitting.begin(), fitting.end(), std::greater<int64_t>());
    int64_t unserved = 0;
    if (need == full) {  // Each copy takes t.count whole GPUs.
      for (size_t i = 0; i < fitting.size(); ++i) {
        if (static_cast<int64_t>(i) >= copies * t.count) unserved += fitting[i];
      }
    } else {  // Each GPU takes as many share-sized copies as fit.
      int64_t to_place = copies;
      for (int64_t l : fitting) {
        if (to_place > 0) {
          to_place -= l / need;
        } else {
          unserved += l;
        }
      }
    }
    out.cpu_bound += t.weight * static_cast<double>(small + unserved);
  }
  return out;
}

// Random targets and nodes with many ties and boundary values: idle shares
// on a coarse grid, CPU near multiples of the types' needs.
class RandomFrag {
 public:
  explicit RandomFrag(uint64_t seed) : rng_(seed) {}
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  fgd::CompiledTarget Target(int64_t full) {
    TargetWorkload t;
    const int types = static_cast<int>(Uniform(1, 7));
    for (int i = 0; i < types; ++i) {
      TargetTask task;
      task.cpu = Uniform(0, 4) == 0 ? 0 : Uniform(1, 16) * 1000 + (Uniform(0, 3) == 0 ? 500 : 0);
      const int64_t kind = Uniform(0, 3);
      task.gpu_share = kind == 0 ? 0 : kind == 1 ? full : Uniform(1, 10) * full / 10;
      if (Uniform(0, 9) == 0) task.gpu_share = full + 1;  // Larger than a GPU.
      task.gpu_count = task.gpu_share == 0 ? static_cast<int>(Uniform(0, 4)) : 1;
      task.weight = static_cast<double>(Uniform(1, 1000)) / 997.0;
      t.tasks.push_back(task);
    }
    return fgd::Compile(t);
  }

  std::vector<int64_t> Left(int64_t full) {
    std::vector<int64_t> left(static_cast<size_t>(Uniform(0, 3) == 0 ? Uniform(0, 16)
                                                                      : Uniform(0, 8)));
    for (int64_t& l : left) {
      const int64_t kind = Uniform(0, 3);
      l = kind == 0 ? 0 : kind == 1 ? full : Uniform(0, 20) * full / 20;
    }
    return left;
  }

  int64_t CpuLeft() {
    if (Uniform(0, 9) == 0) return fgd::kUnlimitedCpu;
    return Uniform(0, 64) * 500;
  }

  // One case for the sums: memory-sized GPUs, compute, and GPUs past the
  // kernel's fast quotients; a target, idle shares, free CPU, and per-type
  // model permissions (or none).
  struct Case {
    int64_t full = 0;
    fgd::CompiledTarget target;
    std::vector<int64_t> left;
    int64_t cpu_left = 0;
    std::vector<uint8_t> allowed;
    bool any_allowed = false;  // Pass nullptr instead of `allowed`.
    const uint8_t* allow() const { return any_allowed ? nullptr : allowed.data(); }
    int n() const { return static_cast<int>(left.size()); }
  };
  Case NextCase() {
    Case c;
    const int64_t size = Uniform(0, 3);
    c.full = size == 0 ? Uniform(2, 80) : size == 1 ? Uniform(60000, 140000) : kGpuCompute;
    c.target = Target(c.full);
    c.left = Left(c.full);
    c.cpu_left = CpuLeft();
    c.allowed.resize(c.target.types.size());
    for (uint8_t& a : c.allowed) a = Uniform(0, 4) != 0;
    c.any_allowed = Uniform(0, 1) == 0;
    return c;
  }

 private:
  std::mt19937_64 rng_;
};

TEST(FragAmountCpuBoundTest, FastFunctionsEqualThePlainDefinition) {
  RandomFrag random(17);
  const int rounds = testing::Quick() ? 20000 : 200000;
  int bound = 0;  // Cases where the CPU-bound value differs from the plain one.
  for (int round = 0; round < rounds; ++round) {
    const RandomFrag::Case c = random.NextCase();
    const fgd::CompiledTarget& target = c.target;
    const std::vector<int64_t>& left = c.left;
    const int64_t full = c.full, cpu_left = c.cpu_left;
    const uint8_t* allow = c.allow();
    const int n = c.n();
    SCOPED_TRACE(::testing::Message() << "round " << round << " n " << n << " full " << full
                                      << " cpu " << cpu_left);
    const PlainFrag want = ReferenceFrag(target, left, full, cpu_left, allow);
    ASSERT_EQ(fgd::FragAmount(target, left.data(), n, full, cpu_left, allow), want.plain);
    ASSERT_EQ(fgd::FragAmountCpuBound(target, left.data(), n, full, cpu_left, allow),
              want.cpu_bound);
    double plain = -1, cpu_bound = -1;
    fgd::FragAmounts(target, left.data(), n, full, cpu_left, allow, &plain, &cpu_bound);
    ASSERT_EQ(plain, want.plain);
    ASSERT_EQ(cpu_bound, want.cpu_bound);
    bound += want.cpu_bound != want.plain;
  }
  EXPECT_GT(bound, rounds / 20);  // The CPU bound is exercised, not only the plain sums.
}

// The incremental form: counts of the shares before a placement, with the
// placement's GPUs given as changes, against the plain definition on the
// shares after it, bit for bit.
TEST(FragAmountCpuBoundTest, SumsFromCountsWithChangesEqualThePlainDefinition) {
  RandomFrag random(23);
  const int rounds = testing::Quick() ? 20000 : 200000;
  int changed = 0, bound = 0;
  for (int round = 0; round < rounds; ++round) {
    const RandomFrag::Case c = random.NextCase();
    // Up to three distinct GPUs change to any share (a placement lowers
    // them, a release raises them).
    std::vector<fgd::GpuChange> changes;
    std::vector<int64_t> after = c.left;
    for (int g = 0; g < c.n() && static_cast<int>(changes.size()) < 3; ++g) {
      if (random.Uniform(0, 2) != 0) continue;
      const int64_t to = random.Uniform(0, 3) == 0 ? 0 : random.Uniform(0, 20) * c.full / 20;
      changes.push_back(fgd::GpuChange{g, to});
      after[g] = to;
    }
    changed += !changes.empty();
    std::vector<fgd::TypeCounts> counts(c.target.types.size());
    fgd::PrepareCounts(c.target, c.left.data(), c.n(), c.full, counts.data());
    SCOPED_TRACE(::testing::Message() << "round " << round << " n " << c.n() << " full "
                                      << c.full << " cpu " << c.cpu_left << " changes "
                                      << changes.size());
    const PlainFrag want = ReferenceFrag(c.target, after, c.full, c.cpu_left, c.allow());
    auto sums = [&](double* plain, double* cpu_bound) {
      fgd::FragSumsFrom(c.target, counts.data(), c.left.data(), c.n(), c.full, changes.data(),
                        static_cast<int>(changes.size()), c.cpu_left, c.allow(), plain,
                        cpu_bound);
    };
    double plain = -1, cpu_bound = -1;
    sums(&plain, &cpu_bound);
    ASSERT_EQ(plain, want.plain);
    ASSERT_EQ(cpu_bound, want.cpu_bound);
    double only_plain = -1;
    sums(&only_plain, nullptr);
    ASSERT_EQ(only_plain, want.plain);
    bound += want.cpu_bound != want.plain;
  }
  EXPECT_GT(changed, rounds / 2);
  EXPECT_GT(bound, rounds / 20);
}

// fgdcpu's Score() with the node's fragmentations handed in (as the score
// memo and the simulator's engine keep them per node) against Score()
// deriving them itself: the same score and GPUs, bit for bit.
TEST(FgdCpuPolicyTest, ScoreWithKnownFragmentationsEqualsScoreDerivingThem) {
  RandomFrag random(29);
  const int rounds = testing::Quick() ? 3000 : 30000;
  int derived = 0;
  for (int round = 0; round < rounds; ++round) {
    const fgd::CompiledTarget target = random.Target(kGpuCompute);
    PolicyOptions po;
    po.fgd_target = std::make_shared<const TargetWorkload>(target.source);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> made, MakePolicy("fgdcpu", po));
    auto* policy = dynamic_cast<fgd::KernelPolicy*>(made.get());
    ASSERT_NE(policy, nullptr);
    std::vector<int64_t> left = random.Left(kGpuCompute);
    if (left.empty()) left.push_back(kGpuCompute);
    const int n = static_cast<int>(left.size());
    fgd::KNode node;
    node.num_gpus = n;
    node.compute_left = left.data();
    node.frag_left = left.data();
    node.cpu_left = random.CpuLeft();
    if (node.cpu_left == fgd::kUnlimitedCpu) node.cpu_left = 64000;
    node.cpu_capacity = 64000;
    fgd::KTask task;
    const int64_t kind = random.Uniform(0, 2);
    task.cpu = random.Uniform(0, 8) * 1000;
    if (task.cpu > node.cpu_left) task.cpu = node.cpu_left;
    std::vector<int> fitting;
    if (kind == 0) {
      task.kind = Demand::Kind::kShared;
      task.gpu_count = 1;
      task.compute = task.frag_share = random.Uniform(1, 10) * 100;
      for (int i = 0; i < n; ++i) {
        if (left[i] >= task.compute) fitting.push_back(i);
      }
    } else {
      task.kind = Demand::Kind::kExclusive;
      task.gpu_count = static_cast<int>(random.Uniform(1, 2));
      task.compute = task.frag_share = kGpuCompute;
      for (int i = 0; i < n; ++i) {
        if (left[i] == kGpuCompute) fitting.push_back(i);
      }
    }
    if (static_cast<int>(fitting.size()) < task.gpu_count) continue;
    SCOPED_TRACE(::testing::Message() << "round " << round);
    std::vector<int> want_gpus(task.gpu_count), got_gpus(task.gpu_count);
    const double want = policy->Score(task, node, fitting.data(),
                                      static_cast<int>(fitting.size()), want_gpus.data());
    fgd::KNode known = node;
    const PlainFrag now = ReferenceFrag(target, left, kGpuCompute, node.cpu_left, nullptr);
    known.frag = now.plain;
    if (policy->NeedsFragCpu(known)) {
      known.frag_cpu = now.cpu_bound;
      ++derived;
    }
    const double got = policy->Score(task, known, fitting.data(),
                                     static_cast<int>(fitting.size()), got_gpus.data());
    ASSERT_EQ(got, want);
    ASSERT_EQ(got_gpus, want_gpus);
    // And with the node's counts handed in too.
    std::vector<fgd::TypeCounts> counts(target.types.size());
    fgd::PrepareCounts(target, left.data(), n, kGpuCompute, counts.data());
    known.counts = counts.data();
    std::fill(got_gpus.begin(), got_gpus.end(), -1);
    ASSERT_EQ(policy->Score(task, known, fitting.data(), static_cast<int>(fitting.size()),
                            got_gpus.data()),
              want);
    ASSERT_EQ(got_gpus, want_gpus);
  }
  EXPECT_GT(derived, rounds / 4);
}

// The cluster's score memo keeps each node's CPU-bound fragmentation until
// the node changes: its placements equal those of the scan over every node
// (which derives it afresh each time), through places and releases.
TEST(FgdCpuPolicyTest, ScoreMemoMatchesTheScanOverRandomPlacesAndReleases) {
  std::mt19937_64 rng(3);
  TargetWorkload target;
  target.tasks = {TargetTask{2000, 300, 1, {}, 0.4}, TargetTask{12000, 0, 1, {}, 0.3},
                  TargetTask{8000, 0, 2, {}, 0.2}, TargetTask{1000, 700, 1, {}, 0.1}};
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(target);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> policy, MakePolicy("fgdcpu", po));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> inner, MakePolicy("fgdcpu", po));
  testing::ScannedPolicy scanned(std::move(inner));
  ClusterOptions options;
  options.tie_break_seed = 7;
  Cluster memo(options), scan(options);
  for (const Node& n : testing::GeneratedNodes(24, 5)) {
    ASSERT_OK(memo.AddNode(n));
    ASSERT_OK(scan.AddNode(n));
  }
  const std::vector<Request> requests =
      testing::GeneratedRequests(testing::Quick() ? 400 : 2000, 6);
  std::vector<std::string> placed;
  int failed = 0;
  for (const Request& r : requests) {
    SCOPED_TRACE(r.id);
    if (!placed.empty() && rng() % 3 == 0) {
      const size_t victim = rng() % placed.size();
      ASSERT_OK(memo.Release(placed[victim]));
      ASSERT_OK(scan.Release(placed[victim]));
      placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    absl::StatusOr<Placement> got = memo.Place(r, *policy);
    absl::StatusOr<Placement> want = scan.Place(r, scanned);
    ASSERT_EQ(got.status().code(), want.status().code());
    if (!got.ok()) {
      ++failed;
      continue;
    }
    ASSERT_EQ(*got, *want);
    placed.push_back(r.id);
  }
  EXPECT_GT(placed.size(), 20u);
  EXPECT_GT(failed, 0);  // The cluster ran full: CPU ran short on some nodes.
}

TEST(FgdCpuPolicyTest, BreaksFgdTiesOnTheGpuTheCpuWouldStrand) {
  // Two 3-GPU nodes, each with half of GPU 2 taken; the "short" one has CPU
  // for one 8-core target task only, so one of its idle GPUs is lost to the
  // target anyway. FGD scores both nodes alike for a 1-core whole-GPU task
  // (ties go by the seeded order); fgdcpu puts it on the GPU the short
  // node's CPU would strand, keeping both idle GPUs of the "long" node for
  // 8-core tasks.
  std::vector<Node> nodes;
  for (auto [name, cpu] : {std::pair<const char*, int64_t>{"short", 10000}, {"long", 64000}}) {
    Node n;
    n.name = name;
    n.gpus.assign(3, Gpu{16, "A", "", true});
    n.cpu = cpu;
    n.gpu_sharing = true;
    nodes.push_back(n);
  }
  TargetWorkload target;
  target.tasks.push_back(TargetTask{8000, 0, 1, {}, 1.0});
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(target);
  Request r;
  r.id = "r";
  r.whole_gpus = 1;
  r.cpu = 1000;
  int fgd_long = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    ClusterOptions co;
    co.tie_break_seed = seed;
    // One cluster for both: its score memo must not hand fgd's verdicts to
    // fgdcpu (same target, other policy).
    Cluster c(co);
    for (const Node& n : nodes) {
      ASSERT_OK(c.AddNode(n));
      Placement background;
      background.request_id = "half-" + n.name;
      background.node = n.name;
      background.gpus = {2};
      background.memory_per_gpu = 8;
      background.compute_per_gpu = 500;
      ASSERT_OK(c.Commit(background));
    }
    for (const char* name : {"fgd", "fgdcpu"}) {
      ASSERT_OK_AND_ASSIGN(auto policy, MakePolicy(name, po));
      ASSERT_OK_AND_ASSIGN(Placement p, c.Place(r, *policy));
      ASSERT_OK(c.Release(r.id));
      if (std::string(name) == "fgdcpu") {
        EXPECT_EQ(p.node, "short") << seed;
      } else {
        fgd_long += p.node == "long";
      }
    }
  }
  EXPECT_GT(fgd_long, 0);  // For FGD it is a tie.
}

// On a wholly idle node, a task of at most one GPU gets the neutral tie
// (50 / 101); a multi-GPU or CPU-only task, or the same task on a node in
// use, gets the CPU gradient.
TEST(FgdCpuPolicyTest, GivesTasksOfOneGpuTheNeutralTieOnAnIdleNode) {
  TargetWorkload target;
  target.tasks.push_back(TargetTask{8000, 0, 1, {}, 1.0});
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(target);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> made, MakePolicy("fgdcpu", po));
  auto* policy = dynamic_cast<fgd::KernelPolicy*>(made.get());
  ASSERT_NE(policy, nullptr);
  // The fractional part of the score on a node of idle shares `left` and
  // 10 free cores, which serve one copy of the 8-core target type.
  auto tie = [&](std::vector<int64_t> left, Demand::Kind kind, int count, int64_t compute,
                 int64_t cpu) {
    fgd::KNode node;
    node.num_gpus = static_cast<int>(left.size());
    node.compute_left = left.data();
    node.frag_left = left.data();
    node.cpu_left = 10000;
    node.cpu_capacity = 10000;
    fgd::KTask task;
    task.kind = kind;
    task.gpu_count = count;
    task.cpu = cpu;
    task.compute = task.frag_share = compute;
    std::vector<int> fitting;
    for (int i = 0; i < node.num_gpus; ++i) {
      if (kind != Demand::Kind::kCpuOnly && left[i] >= compute) fitting.push_back(i);
    }
    std::vector<int> gpus(count);
    const double score = policy->Score(task, node, fitting.data(),
                                       static_cast<int>(fitting.size()), gpus.data());
    return score - std::trunc(score);
  };
  const std::vector<int64_t> idle = {kGpuCompute, kGpuCompute};
  const std::vector<int64_t> used = {kGpuCompute, kGpuCompute, 500};
  const double neutral = 50.0 / 101.0;
  // Before: 2 fitting GPUs, CPU for one copy, so one is stranded (C0 =
  // 1000, plus the 500 of a used GPU 2); taking one leaves none stranded:
  // C0 - C1 = 1000, int(100 * sigmoid(1)) = 73.
  const double stranded_one_less = 73.0 / 101.0;
  EXPECT_NEAR(tie(idle, Demand::Kind::kExclusive, 1, kGpuCompute, 1000), neutral, 1e-9);
  EXPECT_NEAR(tie(idle, Demand::Kind::kShared, 1, 500, 1000), neutral, 1e-9);
  EXPECT_NEAR(tie(used, Demand::Kind::kExclusive, 1, kGpuCompute, 1000), stranded_one_less,
              1e-9);
  // Both GPUs taken: nothing idle is left to strand.
  EXPECT_NEAR(tie(idle, Demand::Kind::kExclusive, 2, kGpuCompute, 2000), stranded_one_less,
              1e-9);
  // 3 cores taken: no 8-core copy fits, both GPUs are lost to the target
  // (C1 = 2000): int(100 * sigmoid(-1)) = 26.
  EXPECT_NEAR(tie(idle, Demand::Kind::kCpuOnly, 0, 0, 3000), 26.0 / 101.0, 1e-9);
}

TEST(FgdCpuPolicyTest, LeavesFewerGpusUnallocatedThanFgdOnTheDefaultTrace) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(const testing::OpenbDefault openb, testing::LoadOpenbDefault(dir));
  ASSERT_OK_AND_ASSIGN(const double fgd, testing::MeanUnallocatedAt100(openb, "fgd"));
  ASSERT_OK_AND_ASSIGN(const double fgdcpu, testing::MeanUnallocatedAt100(openb, "fgdcpu"));
  EXPECT_LT(fgdcpu, fgd - 0.1);
}

}  // namespace
}  // namespace gpushare
