// The extender protocol (k8s::Extender) over a Scheduler on a small fixed
// cluster. An input is a script of up to kMaxCalls lines "<call> <body>",
// <call> one of filter, prioritize, bind, preempt, confirm, forget, release,
// remember (RememberPods); other lines are skipped. Every input starts from
// the same state, with a frozen clock (no reservation expires) and a binder
// that refuses pods named "unbindable*" (the forget-on-failure path).
// Properties after every call (kubernetes.h, scheduler.h):
//  - the scheduler's CheckInvariants() holds: no GPU is promised more than it
//    has, every reservation is placed;
//  - a call returns OK or InvalidArgument (scheduling outcomes go in the
//    reply's "Error" field), and a reply is JSON;
//  - a call that returned InvalidArgument changed nothing (the cluster's
//    ToJson() and the reservations are as before).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "gpushare/kubernetes.h"
#include "gpushare/scheduler.h"
#include "nlohmann/json.hpp"

namespace {

namespace k8s = gpushare::k8s;

constexpr int kMaxCalls = 16;

gpushare::Cluster FixedCluster() {
  gpushare::Cluster cluster;
  gpushare::Node n1{"n1", "10.0.0.1", {{"gpushare", "true"}}, {}, 0, 0, true, true};
  for (int i = 0; i < 2; ++i) n1.gpus.push_back(gpushare::Gpu{16, "T4", "", true});
  gpushare::Node n2{"n2", "", {{"zone", "a"}, {"rank", "7"}}, {}, 0, 0, true, true};
  for (int i = 0; i < 4; ++i) n2.gpus.push_back(gpushare::Gpu{32, "V100M32", "", true});
  gpushare::Node n3{"n3", "", {}, {gpushare::Gpu{24, "A10", "", true}}, 0, 0, true, false};
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

// The state a failed call must leave alone.
std::string State(const gpushare::Scheduler& scheduler) {
  std::string state;
  scheduler.Read([&](const gpushare::Cluster& c, const std::vector<gpushare::Reservation>& r) {
    state = c.ToJson();
    for (const gpushare::Reservation& res : r) {
      absl::StrAppend(&state, "\nreserved ", res.placement.request_id, " ", res.expires_ns);
    }
  });
  return state;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  gpushare::SchedulerOptions options;
  options.clock = [] { return int64_t{1'000'000'000}; };
  absl::StatusOr<std::unique_ptr<gpushare::Scheduler>> scheduler =
      gpushare::Scheduler::Create(FixedCluster(), options);
  FUZZ_CHECK_OK(scheduler.status(), "scheduler");
  k8s::ExtenderOptions extender_options;
  extender_options.max_cached_pods = 8;  // Small, so that eviction is exercised.
  extender_options.binder = [](const k8s::BindTarget& target, const k8s::BindResult&) {
    return target.pod_name.rfind("unbindable", 0) == 0
               ? absl::UnavailableError("binding refused")
               : absl::OkStatus();
  };
  k8s::Extender extender(scheduler->get(), extender_options);

  int calls = 0;
  size_t pos = 0;
  while (pos < input.size() && calls < kMaxCalls) {
    size_t end = input.find('\n', pos);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(pos, end - pos);
    pos = end + 1;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view call = line.substr(0, space);
    const std::string_view body = line.substr(space + 1);

    const std::string before = State(**scheduler);
    absl::StatusOr<std::string> reply = absl::UnknownError("no such call");
    if (call == "filter") {
      reply = extender.Filter(body);
    } else if (call == "prioritize") {
      reply = extender.Prioritize(body);
    } else if (call == "bind") {
      reply = extender.Bind(body);
    } else if (call == "preempt") {
      reply = extender.Preempt(body);
    } else if (call == "confirm") {
      reply = extender.Confirm(body);
    } else if (call == "forget") {
      reply = extender.Forget(body);
    } else if (call == "release") {
      reply = extender.Release(body);
    } else if (call == "remember") {
      absl::Status s = extender.RememberPods(body);
      reply = s.ok() ? absl::StatusOr<std::string>("{}") : s;
    } else {
      continue;
    }
    ++calls;
    const std::string what = std::string(call) + " " + std::string(body);
    FUZZ_CHECK_OK((*scheduler)->CheckInvariants(), "after " + what);
    if (reply.ok()) {
      FUZZ_CHECK(!nlohmann::json::parse(*reply, nullptr, false).is_discarded(),
                 "reply is not JSON: " + *reply);
    } else {
      FUZZ_CHECK(absl::IsInvalidArgument(reply.status()),
                 what + " -> " + reply.status().ToString());
      FUZZ_CHECK(State(**scheduler) == before,
                 what + " failed with " + reply.status().ToString() + " but changed the state");
    }
    // Exercised for crashes; the inspect view must stay JSON.
    absl::StatusOr<std::string> view = extender.Inspect();
    FUZZ_CHECK(view.ok() && !nlohmann::json::parse(*view, nullptr, false).is_discarded(),
               "inspect");
  }
  return 0;
}
