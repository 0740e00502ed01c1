// The extender protocol (k8s::Extender) over a Scheduler on a small fixed
// cluster (fuzz/extender_fixture.h). An input is a script of up to kMaxCalls lines "<call> <body>",
// <call> one of filter, prioritize, bind, preempt, confirm, forget, release,
// remember (RememberPods); other lines are skipped. Every input starts from
// the same state.
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
#include "fuzz/extender_fixture.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "gpushare/kubernetes.h"
#include "gpushare/scheduler.h"
#include "nlohmann/json.hpp"

namespace {

namespace k8s = gpushare::k8s;

constexpr int kMaxCalls = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  gpushare::fuzz::ExtenderFixture fixture;
  gpushare::Scheduler* scheduler = fixture.scheduler.get();
  k8s::Extender& extender = *fixture.extender;

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

    const std::string before = gpushare::fuzz::State(*scheduler);
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
    FUZZ_CHECK_OK(scheduler->CheckInvariants(), "after " + what);
    if (reply.ok()) {
      FUZZ_CHECK(!nlohmann::json::parse(*reply, nullptr, false).is_discarded(),
                 "reply is not JSON: " + *reply);
    } else {
      FUZZ_CHECK(absl::IsInvalidArgument(reply.status()),
                 what + " -> " + reply.status().ToString());
      FUZZ_CHECK(gpushare::fuzz::State(*scheduler) == before,
                 what + " failed with " + reply.status().ToString() + " but changed the state");
    }
    // Exercised for crashes; the inspect view must stay JSON.
    absl::StatusOr<std::string> view = extender.Inspect();
    FUZZ_CHECK(view.ok() && !nlohmann::json::parse(*view, nullptr, false).is_discarded(),
               "inspect");
  }
  return 0;
}
