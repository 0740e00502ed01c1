// Nvml (device-plugin/nvml.h) against the stand-in libnvidia-ml.so.1 of
// tests/nvml_stub/, driven by what NVML answered on a real H200
// (../shared/nvml/h200-nvml.json) and by a hand-made two-GPU fixture.

#include "device-plugin/nvml.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Nvml> LoadWith(const std::string& fixture) {
  setenv("GPUSHARE_NVML_FIXTURE", fixture.c_str(), 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(GPUSHARE_NVML_STUB);
  EXPECT_TRUE(nvml.ok()) << nvml.status();
  return nvml.ok() ? *std::move(nvml) : nullptr;
}

TEST(NvmlTest, ReadsTheRealH200Answers) {
  const std::string path = std::string(GPUSHARE_SHARED_DIR) + "/nvml/h200-nvml.json";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " is absent";
  const nlohmann::json recorded = nlohmann::json::parse(in);
  std::unique_ptr<Nvml> nvml = LoadWith(path);
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<std::string> driver = nvml->DriverVersion();
  ASSERT_TRUE(driver.ok()) << driver.status();
  EXPECT_EQ(*driver, recorded["driver_version"]);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), recorded["devices"].size());
  const nlohmann::json& d = recorded["devices"][0];
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.uuid, d["uuid"]);
  EXPECT_EQ(g.name, d["name"]);
  EXPECT_EQ(g.memory_bytes, d["memory"]["total"].get<uint64_t>());
  EXPECT_EQ(g.pci_bus_id, d["pci"]["busId"]);
  EXPECT_EQ(g.compute_major, d["compute_capability"][0].get<int>());
  EXPECT_EQ(g.compute_minor, d["compute_capability"][1].get<int>());
  EXPECT_FALSE(g.mig_enabled);
  EXPECT_EQ(g.numa_node, -1);  // NotSupported on that machine: unknown, not an error.
}

TEST(NvmlTest, ReadsEveryGpuOfAMultiGpuNode) {
  std::unique_ptr<Nvml> nvml =
      LoadWith(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/nvml/two-a100.json");
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].uuid, "GPU-1b1b1b1b-0000-0000-0000-000000000000");
  EXPECT_EQ((*gpus)[1].pci_bus_id, "00000000:0F:00.0");
  EXPECT_EQ((*gpus)[0].numa_node, 0);
  EXPECT_EQ((*gpus)[1].numa_node, 1);
  EXPECT_FALSE((*gpus)[0].mig_enabled);
  EXPECT_TRUE((*gpus)[1].mig_enabled);
}

TEST(NvmlTest, AMissingDriverIsAClearError) {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(nvml.status().message()),
              HasSubstr("is the NVIDIA driver installed on this node?"));
}

TEST(NvmlTest, ALibraryWithoutNvmlIsADriverTooOld) {
  // libc has none of NVML's calls.
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load("libc.so.6");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(nvml.status().message()), HasSubstr("has no nvmlInit_v2"));
}

TEST(NvmlTest, AFailedInitNamesNvmlsReason) {
  setenv("GPUSHARE_NVML_FIXTURE", "/nonexistent.json", 1);
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load(GPUSHARE_NVML_STUB);
  ASSERT_FALSE(nvml.ok());
  EXPECT_THAT(std::string(nvml.status().message()),
              HasSubstr("nvmlInit_v2 failed: Driver Not Loaded"));
}

}  // namespace
}  // namespace gpushare::deviceplugin
