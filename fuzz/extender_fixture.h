// Shared by the extender and HTTP fuzz targets: a Scheduler on a small fixed
// cluster (three nodes: shared T4s with one placement, V100s with labels, an
// exclusive-only A10 held whole), a frozen clock (no reservation expires), and
// an Extender whose binder refuses pods named "unbindable*" (the
// forget-on-failure path) and which remembers only 8 pods (eviction).

#ifndef GPUSHARE_FUZZ_EXTENDER_FIXTURE_H_
#define GPUSHARE_FUZZ_EXTENDER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "gpushare/kubernetes.h"
#include "gpushare/scheduler.h"

namespace gpushare::fuzz {

inline gpushare::Cluster FixedCluster() {
  gpushare::Cluster cluster;
  gpushare::Node n1{"n1", "10.0.0.1", {{"gpushare", "true"}}, {}, 0, 0, true, true, nullptr};
  for (int i = 0; i < 2; ++i) n1.gpus.push_back(gpushare::Gpu{16, "T4", "", true});
  gpushare::Node n2{"n2", "", {{"zone", "a"}, {"rank", "7"}}, {}, 0, 0, true, true, nullptr};
  for (int i = 0; i < 4; ++i) n2.gpus.push_back(gpushare::Gpu{32, "V100M32", "", true});
  gpushare::Node n3{"n3", "", {}, {gpushare::Gpu{24, "A10", "", true}}, 0, 0, true, false, nullptr};
  for (const gpushare::Node& n : {n1, n2, n3}) FUZZ_CHECK_OK(cluster.AddNode(n), n.name);
  gpushare::Placement held;
  held.request_id = "default/running";
  held.node = "n1";
  held.gpus = {0};
  held.memory_per_gpu = 8;
  FUZZ_CHECK_OK(cluster.Commit(held), "fixed placement");
  gpushare::Placement whole;
  whole.request_id = "team/trainer";
  whole.node = "n3";
  whole.gpus = {0};
  whole.exclusive = true;
  FUZZ_CHECK_OK(cluster.Commit(whole), "fixed exclusive placement");
  return cluster;
}

// The state a failed call must leave alone: the cluster and the reservations.
inline std::string State(const Scheduler& scheduler) {
  std::string state;
  scheduler.Read([&](const Cluster& c, const std::vector<Reservation>& r) {
    state = c.ToJson();
    for (const Reservation& res : r) {
      absl::StrAppend(&state, "\nreserved ", res.placement.request_id, " ", res.expires_ns);
    }
  });
  return state;
}

struct ExtenderFixture {
  ExtenderFixture() {
    SchedulerOptions options;
    options.clock = [] { return int64_t{1'000'000'000}; };
    absl::StatusOr<std::unique_ptr<Scheduler>> created =
        Scheduler::Create(FixedCluster(), options);
    FUZZ_CHECK_OK(created.status(), "scheduler");
    scheduler = *std::move(created);
    k8s::ExtenderOptions extender_options;
    extender_options.max_cached_pods = 8;
    extender_options.binder = [](const k8s::BindTarget& target, const k8s::BindResult&) {
      return target.pod_name.rfind("unbindable", 0) == 0
                 ? absl::UnavailableError("binding refused")
                 : absl::OkStatus();
    };
    extender = std::make_unique<k8s::Extender>(scheduler.get(), extender_options);
  }

  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<k8s::Extender> extender;
};

}  // namespace gpushare::fuzz

#endif  // GPUSHARE_FUZZ_EXTENDER_FIXTURE_H_
