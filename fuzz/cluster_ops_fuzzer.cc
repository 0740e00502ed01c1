// Cluster operations from arbitrary bytes, on one cluster shared by several
// policies: nodes added and removed, with amounts at the edges of what the
// placement indexes and the score memo keep compactly (values past 16, 31
// and 32 bits, more GPUs than a node's fit summary judges, GPUs past the
// 32nd, unhealthy GPUs, NVLink pairs); requests of every kind, placed (one
// or as replicas), or planned and committed after other changes; releases,
// repeated and unknown; GPU health and cordons. Properties, at every step:
//  - Place(), Plan() and PlaceReplicas() through the indexes and the score
//    memo answer as the generic scan over every node (the same built-in
//    policy behind a wrapper that Cluster::Plan() does not recognise): the
//    same placements, or the same error code;
//  - a failed call changes nothing (the snapshot is the same text);
//  - CheckInvariants() holds: no GPU, CPU or host memory promised past what
//    it has;
//  - a copy of the cluster plans as the cluster does, and its snapshot loads
//    back (FromJson) to the same text.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/gpushare.h"
#include "tests/testing/scanned_policy.h"

namespace {

using gpushare::Cluster;
using gpushare::Placement;
using gpushare::Request;

constexpr int64_t kBig[] = {int64_t{1} << 15, (int64_t{1} << 31) - 1, int64_t{1} << 31,
                            int64_t{1} << 32, int64_t{1} << 40};

template <typename T, size_t N>
T Pick(FuzzedDataProvider& in, const T (&values)[N]) {
  return values[in.ConsumeIntegralInRange<size_t>(0, N - 1)];
}

// Mostly ordinary amounts (0..ordinary_max units), sometimes one at the
// edge of a compact field's range (raw, near it on either side).
int64_t Amount(FuzzedDataProvider& in, int64_t ordinary_max, int64_t unit = 1) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return Pick(in, kBig) + in.ConsumeIntegralInRange<int64_t>(-2, 2);
  }
  return in.ConsumeIntegralInRange<int64_t>(0, ordinary_max) * unit;
}

gpushare::TopologyPtr PairsTopology(int gpus) {
  // NVLink between GPUs 2i and 2i+1, PCIe switches elsewhere.
  std::vector<std::vector<gpushare::Link>> links(gpus, std::vector<gpushare::Link>(gpus));
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      links[i][j] = i / 2 == j / 2 ? gpushare::Link{gpushare::LinkKind::kNvLink, 2}
                                   : gpushare::Link{gpushare::LinkKind::kPxb, 0};
    }
  }
  absl::StatusOr<gpushare::TopologyPtr> t = gpushare::Topology::Make(links);
  FUZZ_CHECK_OK(t.status(), "pairs topology");
  return *t;
}

gpushare::Node MakeNode(FuzzedDataProvider& in) {
  gpushare::Node node;
  node.name = absl::StrCat("n", in.ConsumeIntegralInRange<int>(0, 11));
  static constexpr int kGpuCounts[] = {0, 1, 2, 4, 8, 9, 12, 40};
  const int gpus = Pick(in, kGpuCounts);
  static const char* const kModels[] = {"", "A", "B"};
  const std::string model = Pick(in, kModels);
  for (int i = 0; i < gpus; ++i) {
    gpushare::Gpu g;
    g.memory = in.ConsumeBool() ? Amount(in, 80) : 16;
    g.model = in.ConsumeIntegralInRange<int>(0, 5) == 0 ? "B" : model;
    g.healthy = in.ConsumeIntegralInRange<int>(0, 9) != 0;
    node.gpus.push_back(g);
  }
  if (in.ConsumeBool()) node.cpu = Amount(in, 64, 1000);
  if (in.ConsumeBool()) node.host_memory = Amount(in, 256, 1024);
  if (in.ConsumeIntegralInRange<int>(0, 9) != 0) node.labels["gpushare"] = "true";
  node.labels["pool"] = in.ConsumeBool() ? "a" : "b";
  node.schedulable = in.ConsumeIntegralInRange<int>(0, 9) != 0;
  // Topologies on 40 GPUs too: a cold Topology::Choose() there may run to
  // its bound (34 ms at most in a Release build, bench/topology_benchmark.cc's
  // BM_ChooseLarge), which this build's instrumentation makes some ten times
  // dearer, still well inside a unit's time.
  if (gpus >= 2 && gpus % 2 == 0 && in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    node.topology = PairsTopology(gpus);
  }
  return node;
}

Request MakeRequest(FuzzedDataProvider& in, int serial) {
  Request r;
  r.id = absl::StrCat("r", serial);
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
    case 1: {  // Shared memory (and compute) on one or more GPUs.
      static constexpr int64_t kCounts[] = {1, 1, 1, 2, 4, 8, 9};
      r.gpu_count = Pick(in, kCounts);
      r.gpu_memory = Amount(in, 20, r.gpu_count) + in.ConsumeIntegralInRange<int>(0, 1);
      if (in.ConsumeBool()) r.compute = in.ConsumeIntegralInRange<int64_t>(0, 1000);
      break;
    }
    case 2:  // Compute only.
      r.compute = in.ConsumeIntegralInRange<int64_t>(1, 1000);
      break;
    case 3: {  // Whole GPUs.
      static constexpr int64_t kWhole[] = {1, 1, 2, 4, 8, 9};
      r.whole_gpus = Pick(in, kWhole);
      break;
    }
    default:  // CPU only.
      break;
  }
  if (in.ConsumeBool()) r.cpu = Amount(in, 8, 1000);
  if (in.ConsumeBool()) r.host_memory = Amount(in, 16, 1024);
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      r.gpu_models = {"A"};
      break;
    case 1:
      r.gpu_models = {"B", "A"};
      break;
    default:
      break;
  }
  if (in.ConsumeIntegralInRange<int>(0, 5) == 0) r.node_selector["pool"] = "a";
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      r.topology.mode = gpushare::TopologyNeed::Mode::kNone;
      break;
    case 1:
      r.topology.mode = gpushare::TopologyNeed::Mode::kRequire;
      r.topology.min_link = {gpushare::LinkKind::kNvLink, 1};
      break;
    default:
      break;  // kPrefer, the default.
  }
  return r;
}

// The same answer: the same placement, or the same error code.
void CheckSame(const absl::StatusOr<Placement>& got, const absl::StatusOr<Placement>& want,
               const std::string& what) {
  FUZZ_CHECK(got.ok() == want.ok(),
             absl::StrCat(what, ": ", got.status().ToString(), " vs the scan's ",
                          want.status().ToString()));
  if (got.ok()) {
    FUZZ_CHECK(*got == *want, absl::StrCat(what, ": node ", got->node, " vs the scan's ",
                                           want->node));
  } else {
    FUZZ_CHECK(got.status().code() == want.status().code(),
               absl::StrCat(what, ": ", got.status().ToString(), " vs the scan's ",
                            want.status().ToString()));
  }
}

void CheckUnchanged(const Cluster& cluster, const std::string& before, const std::string& what) {
  FUZZ_CHECK(cluster.ToJson() == before, what + " failed and changed the cluster");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  static const char* const kPolicies[] = {"binpack", "spread",  "fgd",        "fgdcpu",
                                          "fgdpack", "bestfit", "dotprod",    "gpupacking",
                                          "gpuclustering"};
  constexpr size_t kNumPolicies = sizeof(kPolicies) / sizeof(kPolicies[0]);
  // The FGD family descends a target of shared, whole and two-GPU tasks.
  gpushare::PolicyOptions fgd_options;
  fgd_options.fgd_target = std::make_shared<const gpushare::TargetWorkload>(
      gpushare::TargetWorkload{gpushare::FragResource::kCompute,
                               {{2000, 500, 1, {}, 0.4},
                                {4000, 1000, 1, {}, 0.3},
                                {8000, 1000, 2, {"A"}, 0.2},
                                {1000, 0, 0, {}, 0.1}}});
  std::vector<std::unique_ptr<gpushare::Policy>> policies;
  std::vector<std::unique_ptr<gpushare::testing::ScannedPolicy>> scanned;
  for (const char* name : kPolicies) {
    absl::StatusOr<std::unique_ptr<gpushare::Policy>> p = gpushare::MakePolicy(name, fgd_options);
    absl::StatusOr<std::unique_ptr<gpushare::Policy>> q = gpushare::MakePolicy(name, fgd_options);
    FUZZ_CHECK(p.ok() && q.ok(), name);
    policies.push_back(*std::move(p));
    scanned.push_back(std::make_unique<gpushare::testing::ScannedPolicy>(*std::move(q)));
  }

  gpushare::ClusterOptions options;
  options.tie_break_seed = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint8_t>() + 1;
  options.remembered_releases = in.ConsumeIntegralInRange<int>(0, 4);
  Cluster cluster(options);
  std::vector<std::string> placed;
  std::vector<Placement> planned;  // Plans to commit later.
  int serial = 0;

  for (int step = 0; step < 200 && in.remaining_bytes() > 0; ++step) {
    const size_t k = in.ConsumeIntegralInRange<size_t>(0, kNumPolicies - 1);
    const std::string tag = absl::StrCat("step ", step, " (", kPolicies[k], ")");
    switch (in.ConsumeIntegralInRange<int>(0, 12)) {
      case 0: {  // Add a node.
        const gpushare::Node node = MakeNode(in);
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.AddNode(node);
        if (!s.ok()) CheckUnchanged(cluster, before, tag + " AddNode " + node.name);
        break;
      }
      case 1:
      case 2:
      case 3: {  // Place, as the scan would.
        const Request r = MakeRequest(in, serial++);
        const absl::StatusOr<Placement> want = cluster.Plan(r, *scanned[k]);
        const std::string before = want.ok() ? std::string() : cluster.ToJson();
        const absl::StatusOr<Placement> got = cluster.Place(r, *policies[k]);
        CheckSame(got, want, tag + " Place " + r.id);
        if (got.ok()) {
          placed.push_back(r.id);
        } else {
          CheckUnchanged(cluster, before, tag + " Place " + r.id);
        }
        break;
      }
      case 4: {  // Plan now, commit later.
        const Request r = MakeRequest(in, serial++);
        const absl::StatusOr<Placement> got = cluster.Plan(r, *policies[k]);
        CheckSame(got, cluster.Plan(r, *scanned[k]), tag + " Plan " + r.id);
        if (got.ok()) planned.push_back(*got);
        break;
      }
      case 5: {  // Commit a plan made earlier, possibly stale.
        if (planned.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, planned.size() - 1);
        const Placement p = planned[i];
        planned.erase(planned.begin() + static_cast<std::ptrdiff_t>(i));
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.Commit(p);
        if (s.ok()) {
          placed.push_back(p.request_id);
        } else {
          // InvalidArgument: its node was removed and one of that name with
          // fewer GPUs added (Commit() documents each code).
          FUZZ_CHECK(absl::IsFailedPrecondition(s) || absl::IsNotFound(s) ||
                         absl::IsAlreadyExists(s) || absl::IsInvalidArgument(s),
                     tag + " Commit: " + s.ToString());
          CheckUnchanged(cluster, before, tag + " Commit " + p.request_id);
        }
        break;
      }
      case 6:
      case 7: {  // Release one placed, or one unknown or released already.
        std::string id = "unknown";
        if (!placed.empty() && in.ConsumeIntegralInRange<int>(0, 7) != 0) {
          const size_t i = in.ConsumeIntegralInRange<size_t>(0, placed.size() - 1);
          id = placed[i];
          if (in.ConsumeIntegralInRange<int>(0, 7) != 0) {
            placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(i));
          }
        }
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.Release(id);
        if (!s.ok()) {
          FUZZ_CHECK(absl::IsNotFound(s) || absl::IsFailedPrecondition(s),
                     tag + " Release: " + s.ToString());
          CheckUnchanged(cluster, before, tag + " Release " + id);
        }
        break;
      }
      case 8: {  // A GPU's health.
        const std::string node = absl::StrCat("n", in.ConsumeIntegralInRange<int>(0, 11));
        const int gpu = in.ConsumeIntegralInRange<int>(-1, 12);
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.SetGpuHealthy(node, gpu, in.ConsumeBool());
        if (!s.ok()) CheckUnchanged(cluster, before, tag + " SetGpuHealthy " + node);
        break;
      }
      case 9: {  // Cordon or uncordon.
        const std::string node = absl::StrCat("n", in.ConsumeIntegralInRange<int>(0, 11));
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.SetNodeSchedulable(node, in.ConsumeBool());
        if (!s.ok()) CheckUnchanged(cluster, before, tag + " SetNodeSchedulable " + node);
        break;
      }
      case 10: {  // Remove a node.
        const std::string node = absl::StrCat("n", in.ConsumeIntegralInRange<int>(0, 11));
        const std::string before = cluster.ToJson();
        const absl::Status s = cluster.RemoveNode(node);
        if (!s.ok()) CheckUnchanged(cluster, before, tag + " RemoveNode " + node);
        break;
      }
      case 11: {  // Replicas, all or nothing or as many as fit, as the scan would.
        const Request r = MakeRequest(in, serial++);
        const int count = in.ConsumeIntegralInRange<int>(-1, 6);
        const gpushare::ReplicaMode mode = in.ConsumeBool()
                                               ? gpushare::ReplicaMode::kAllOrNothing
                                               : gpushare::ReplicaMode::kAsManyAsFit;
        Cluster scan = cluster;
        const auto want = scan.PlaceReplicas(r, count, *scanned[k], mode);
        const std::string before = cluster.ToJson();
        const auto got = cluster.PlaceReplicas(r, count, *policies[k], mode);
        FUZZ_CHECK(got.ok() == want.ok(), tag + " PlaceReplicas: " + got.status().ToString() +
                                              " vs the scan's " + want.status().ToString());
        if (got.ok()) {
          FUZZ_CHECK(*got == *want, tag + " PlaceReplicas " + r.id + " differs from the scan");
          for (const Placement& p : *got) placed.push_back(p.request_id);
        } else {
          FUZZ_CHECK(got.status().code() == want.status().code(),
                     tag + " PlaceReplicas: " + got.status().ToString());
          CheckUnchanged(cluster, before, tag + " PlaceReplicas " + r.id);
        }
        break;
      }
      default: {  // A copy answers as the original; the snapshot loads back.
        const Request r = MakeRequest(in, serial++);
        const Cluster copy = cluster;
        CheckSame(copy.Plan(r, *policies[k]), cluster.Plan(r, *policies[k]), tag + " copy");
        const std::string json = cluster.ToJson();
        absl::StatusOr<Cluster> back = Cluster::FromJson(json);
        FUZZ_CHECK_OK(back.status(), tag + " FromJson");
        FUZZ_CHECK(back->ToJson() == json, tag + " snapshot round trip");
        break;
      }
    }
    FUZZ_CHECK_OK(cluster.CheckInvariants(), tag);
  }
  return 0;
}
