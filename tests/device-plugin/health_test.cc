// GPU health (device-plugin/health.h), from events and probes injected into
// the stand-in NVML (tests/nvml_stub/) through its faults file.

#include "device-plugin/health.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

GpuEvent Event(int gpu, bool double_bit_ecc, unsigned long long xid) {
  GpuEvent e;
  e.gpu = gpu;
  e.double_bit_ecc = double_bit_ecc;
  e.xid = xid;
  return e;
}

TEST(HealthLineJsonTest, KeysAreNvmlIndicesNotPositions) {
  // A node whose GPU 0 is in MIG mode advertises GPUs 1 and 2: positions 0
  // and 1 of the inventory.
  GpuInfo a, b;
  a.index = 1;
  a.uuid = "GPU-a";
  a.memory_bytes = 16ull << 30;
  b.index = 2;
  b.uuid = "GPU-b";
  b.memory_bytes = 16ull << 30;
  absl::StatusOr<Inventory> inv = MakeInventory({a, b}, MemoryUnit::kGiB);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(HealthLineJson(*inv, {}), R"({"unhealthy":{}})");
  EXPECT_EQ(nlohmann::json::parse(HealthLineJson(*inv, {{1, "XID 79"}, {7, "not a GPU"}})),
            nlohmann::json::parse(R"({"unhealthy":{"2":"XID 79"}})"));
  // One line: the stream is read line by line.
  EXPECT_EQ(HealthLineJson(*inv, {{0, "a\nb"}}).find('\n'), std::string::npos);
}

TEST(HealthTrackerTest, CriticalEventsStickAndLostGpusRecover) {
  HealthTracker h(2);
  h.OnEvent(Event(0, false, 13));  // An application's fault.
  EXPECT_THAT(h.Unhealthy(), IsEmpty());
  h.OnEvent(Event(0, false, 79));
  h.OnEvent(Event(7, true, 0));  // Not a GPU of this node.
  EXPECT_EQ(h.Unhealthy(), (std::map<int, std::string>{{0, "XID 79"}}));
  h.OnProbe(0, absl::OkStatus());
  EXPECT_EQ(h.Unhealthy().at(0), "XID 79");  // Sticky.
  h.OnProbe(1, absl::UnavailableError("GPU 1: GPU is lost"));
  EXPECT_EQ(h.Unhealthy().at(1), "GPU 1: GPU is lost");
  h.OnProbe(1, absl::OkStatus());
  EXPECT_EQ(h.Unhealthy().count(1), 0u);
  h.OnEvent(Event(1, true, 0));
  EXPECT_EQ(h.Unhealthy().at(1), "double-bit ECC error");
}

// Finding: an event from a device NVML did not name was dropped.
TEST(HealthTrackerTest, AnEventOfAGpuNotNamedMarksEveryGpu) {
  HealthTracker h(3);
  h.OnEvent(Event(1, false, 79));
  h.OnEvent(Event(-1, false, 13));  // An application's fault: nothing.
  EXPECT_EQ(h.Unhealthy().size(), 1u);
  h.OnEvent(Event(-1, false, 48));
  EXPECT_EQ(h.Unhealthy(), (std::map<int, std::string>{
                               {0, "XID 48 on a GPU NVML did not name"},
                               {1, "XID 79"},
                               {2, "XID 48 on a GPU NVML did not name"}}));
}

// Finding: a failing event wait was ignored (and the loop spun).
TEST(HealthTrackerTest, AFailingEventWaitMarksEveryGpuUntilAWaitSucceeds) {
  HealthTracker h(2);
  h.OnEvent(Event(0, false, 79));
  h.OnWait(absl::UnavailableError("nvmlEventSetWait_v2: Unknown Error"));
  EXPECT_EQ(h.Unhealthy().at(0), "XID 79");
  EXPECT_EQ(h.Unhealthy().at(1), "NVML event wait failed: nvmlEventSetWait_v2: Unknown Error");
  h.OnWait(absl::OkStatus());
  EXPECT_EQ(h.Unhealthy(), (std::map<int, std::string>{{0, "XID 79"}}));
}

class NvmlHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = (std::filesystem::temp_directory_path() /
               ("gpushare-faults-" + std::to_string(getpid()) + ".json"))
                  .string();
    Write("{}");
    setenv("GPUSHARE_NVML_FAULTS", faults_.c_str(), 1);
    setenv("GPUSHARE_NVML_FIXTURE", GPUSHARE_SOURCE_DIR "/tests/data/nvml/two-a100.json", 1);
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(GPUSHARE_NVML_STUB);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    nvml_ = *std::move(nvml);
  }
  void TearDown() override {
    unsetenv("GPUSHARE_NVML_FAULTS");
    std::filesystem::remove(faults_);
  }
  void Write(const std::string& text) {
    std::ofstream(faults_ + ".tmp") << text;
    std::filesystem::rename(faults_ + ".tmp", faults_);
  }
  std::string faults_;
  std::unique_ptr<Nvml> nvml_;
};

TEST_F(NvmlHealthTest, InjectedXidAndLostGpuReachTheTracker) {
  absl::StatusOr<std::map<int, std::string>> unwatched = nvml_->WatchEvents();
  ASSERT_TRUE(unwatched.ok()) << unwatched.status();
  EXPECT_THAT(*unwatched, IsEmpty());
  absl::StatusOr<std::vector<GpuEvent>> none = nvml_->WaitEvents(10);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, IsEmpty());
  EXPECT_TRUE(nvml_->Probe(1).ok());

  Write(R"({"lost": [1], "events": [{"gpu": 0, "xid": 48}]})");
  HealthTracker h(2);
  absl::StatusOr<std::vector<GpuEvent>> events = nvml_->WaitEvents(10);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].gpu, 0);
  EXPECT_EQ((*events)[0].xid, 48u);
  for (const GpuEvent& e : *events) h.OnEvent(e);
  for (int g = 0; g < 2; ++g) h.OnProbe(g, nvml_->Probe(g));
  EXPECT_EQ(h.Unhealthy().at(0), "XID 48");
  EXPECT_THAT(h.Unhealthy().at(1), HasSubstr("GPU is lost"));
  // Delivered once.
  absl::StatusOr<std::vector<GpuEvent>> again = nvml_->WaitEvents(10);
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(*again, IsEmpty());
  // The GPU answers again: it recovers; the XID stays.
  Write(R"({"events": [{"gpu": 0, "xid": 48}]})");
  for (int g = 0; g < 2; ++g) h.OnProbe(g, nvml_->Probe(g));
  EXPECT_EQ(h.Unhealthy(), (std::map<int, std::string>{{0, "XID 48"}}));
}

// Finding: one GPU without ECC events turned event watching off for all.
TEST_F(NvmlHealthTest, AGpuWithoutEccEventsStillReportsXidsAndTheOthersAreWatched) {
  const std::string fixture = faults_ + ".fixture.json";
  nlohmann::json f = nlohmann::json::parse(
      std::ifstream(GPUSHARE_SOURCE_DIR "/tests/data/nvml/four-v100-16gb.json"));
  f["devices"][1]["events"] = {{"ecc", false}};
  f["devices"][2]["events"] = {{"registered", false}};
  std::ofstream(fixture) << f.dump();
  setenv("GPUSHARE_NVML_FIXTURE", fixture.c_str(), 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(GPUSHARE_NVML_STUB);
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  absl::StatusOr<std::map<int, std::string>> unwatched = (*nvml)->WatchEvents();
  ASSERT_TRUE(unwatched.ok()) << unwatched.status();
  ASSERT_EQ(unwatched->size(), 1u);
  EXPECT_THAT(unwatched->at(2), HasSubstr("nvmlDeviceRegisterEvents"));
  Write(R"({"events": [{"gpu": 1, "xid": 79}, {"gpu": 3, "dbe": true}, {"unknown": true, "xid": 94}]})");
  std::vector<GpuEvent> seen;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<GpuEvent>> got = (*nvml)->WaitEvents(10);
    ASSERT_TRUE(got.ok()) << got.status();
    seen.insert(seen.end(), got->begin(), got->end());
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].gpu, 1);
  EXPECT_EQ(seen[0].xid, 79u);
  EXPECT_EQ(seen[1].gpu, 3);
  EXPECT_TRUE(seen[1].double_bit_ecc);
  EXPECT_EQ(seen[2].gpu, -1);  // A device NVML did not name.
  std::filesystem::remove(fixture);
}

TEST_F(NvmlHealthTest, AFailingWaitIsAnError) {
  ASSERT_TRUE(nvml_->WatchEvents().ok());
  Write(R"({"event_wait_error": 999})");
  absl::StatusOr<std::vector<GpuEvent>> got = nvml_->WaitEvents(10);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(got.status().message(), HasSubstr("nvmlEventSetWait_v2"));
}

// Finding: NVML was never initialised again after a driver reload.
TEST_F(NvmlHealthTest, AfterADriverReloadNvmlIsInitialisedAgainAndEventsFlow) {
  ASSERT_TRUE(nvml_->WatchEvents().ok());
  Write(R"({"driver_reload": 1})");
  EXPECT_EQ(nvml_->WaitEvents(10).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(nvml_->Probe(0).ok());
  absl::StatusOr<std::map<int, std::string>> again = nvml_->Reinit();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(*again, IsEmpty());  // Both GPUs watched again.
  EXPECT_TRUE(nvml_->Probe(0).ok());
  Write(R"({"driver_reload": 1, "events": [{"gpu": 1, "xid": 79}]})");
  absl::StatusOr<std::vector<GpuEvent>> events = nvml_->WaitEvents(10);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].gpu, 1);
}

// ---- The health loop ------------------------------------------------------------------

class HealthMonitorTest : public NvmlHealthTest {
 protected:
  void SetUp() override {
    NvmlHealthTest::SetUp();
    absl::StatusOr<std::vector<GpuInfo>> gpus = nvml_->Devices();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    absl::StatusOr<Inventory> inventory = MakeInventory(*gpus, MemoryUnit::kGiB);
    ASSERT_TRUE(inventory.ok()) << inventory.status();
    inventory_ = std::make_unique<Inventory>(*std::move(inventory));
  }
  std::unique_ptr<HealthMonitor> Monitor(bool checks = true,
                                         std::chrono::milliseconds probe_interval = {}) {
    HealthMonitor::Options o;
    o.checks = checks;
    o.probe_interval = probe_interval;
    o.sleep = [this](std::chrono::milliseconds d) { sleeps_.push_back(d.count()); };
    o.out = &out_;
    o.err = &err_;
    auto m = std::make_unique<HealthMonitor>(nvml_.get(), inventory_.get(), o);
    m->Start();
    return m;
  }
  std::unique_ptr<Inventory> inventory_;
  std::vector<int64_t> sleeps_;
  std::ostringstream out_, err_;
};

TEST_F(HealthMonitorTest, AnXidAndALostGpuAreReportedOnceEachChange) {
  auto m = Monitor();
  EXPECT_TRUE(m->watching());
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kSame);
  Write(R"({"lost": [1], "events": [{"gpu": 0, "xid": 48}]})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);
  EXPECT_EQ(m->unhealthy().at(0), "XID 48");
  EXPECT_THAT(m->unhealthy().at(1), HasSubstr("GPU is lost"));
  EXPECT_THAT(out_.str(), HasSubstr("GPU 0 unhealthy: XID 48"));
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kSame);
  // GPU 1 answers again; the XID stays.
  Write(R"({"events": [{"gpu": 0, "xid": 48}]})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);
  EXPECT_EQ(m->unhealthy(), (std::map<int, std::string>{{0, "XID 48"}}));
  EXPECT_THAT(out_.str(), HasSubstr("GPU 1 healthy again"));
  EXPECT_THAT(sleeps_, IsEmpty());  // The event wait paced the loop.
}

// Finding: a WaitEvents error was ignored and the loop spun.
TEST_F(HealthMonitorTest, AFailingWaitMarksEveryGpuAndBacksOff) {
  auto m = Monitor();
  Write(R"({"event_wait_error": 999})");
  for (int i = 0; i < 8; ++i) m->Step();
  EXPECT_EQ(m->unhealthy().size(), 2u);
  EXPECT_THAT(m->unhealthy().at(0), HasSubstr("nvmlEventSetWait_v2"));
  EXPECT_EQ(sleeps_, (std::vector<int64_t>{100, 200, 400, 800, 1600, 3200, 5000, 5000}));
  // Said once, not at every try.
  const std::string said = err_.str();
  EXPECT_EQ(said.find("initialising NVML again"), said.rfind("initialising NVML again"));
  // The driver answers again: every GPU healthy, the backoff starts over.
  Write("{}");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);
  EXPECT_THAT(m->unhealthy(), IsEmpty());
  Write(R"({"event_wait_error": 999})");
  m->Step();
  EXPECT_EQ(sleeps_.back(), 100);
}

// Finding: NVML was never initialised again after a driver reload.
TEST_F(HealthMonitorTest, AfterADriverReloadNvmlIsInitialisedAgainAndEventsFlow) {
  auto m = Monitor();
  Write(R"({"driver_reload": 1})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);  // The failed wait.
  EXPECT_EQ(m->unhealthy().size(), 2u);
  EXPECT_THAT(err_.str(), HasSubstr("NVML initialised again"));
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);  // Waits work again.
  EXPECT_THAT(m->unhealthy(), IsEmpty());
  Write(R"({"driver_reload": 1, "events": [{"gpu": 1, "xid": 79}]})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kChanged);
  EXPECT_EQ(m->unhealthy(), (std::map<int, std::string>{{1, "XID 79"}}));
}

TEST_F(HealthMonitorTest, OtherGpusAfterADriverReloadAskForARestart) {
  auto m = Monitor();
  const std::string fixture = faults_ + ".one-gpu.json";
  nlohmann::json f =
      nlohmann::json::parse(std::ifstream(GPUSHARE_SOURCE_DIR "/tests/data/nvml/two-a100.json"));
  f["devices"].erase(1);
  std::ofstream(fixture) << f.dump();
  setenv("GPUSHARE_NVML_FIXTURE", fixture.c_str(), 1);
  Write(R"({"driver_reload": 1})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kGpusChanged);
  EXPECT_THAT(err_.str(), HasSubstr("the GPUs changed while NVML was away"));
  std::filesystem::remove(fixture);
}

TEST_F(HealthMonitorTest, ProbesRunEachIntervalAndNotBetween) {
  auto m = Monitor(/*checks=*/true, std::chrono::hours(1));
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kSame);  // The first probe.
  Write(R"({"lost": [0]})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kSame);  // Next probe in an hour.
  EXPECT_THAT(m->unhealthy(), IsEmpty());
}

TEST_F(HealthMonitorTest, WithChecksOffEveryGpuStaysHealthy) {
  auto m = Monitor(/*checks=*/false);
  EXPECT_FALSE(m->watching());
  EXPECT_THAT(err_.str(), HasSubstr("health checks are off"));
  Write(R"({"lost": [0], "events": [{"gpu": 1, "xid": 79}]})");
  EXPECT_EQ(m->Step(), HealthMonitor::Result::kSame);
  EXPECT_THAT(m->unhealthy(), IsEmpty());
  EXPECT_EQ(sleeps_, (std::vector<int64_t>{100}));  // Paced without events.
}

}  // namespace
}  // namespace gpushare::deviceplugin
