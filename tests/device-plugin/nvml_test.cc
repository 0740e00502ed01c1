// Nvml (device-plugin/nvml.h) against the stand-in libnvidia-ml.so.1 of
// tests/nvml_stub/, driven by what NVML answered on a real H200
// (../shared/nvml/h200-nvml.json) and by a hand-made two-GPU fixture.

#include "device-plugin/nvml.h"

#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  // GPU 1 has MIG pending (current 0, pending 1): not in MIG mode yet.
  EXPECT_FALSE((*gpus)[0].mig_enabled);
  EXPECT_FALSE((*gpus)[1].mig_enabled);
}

TEST(NvmlTest, MigModeIsTheCurrentOne) {
  nlohmann::json f = nlohmann::json::parse(
      std::ifstream(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/nvml/two-a100.json"));
  f["devices"][1]["mig_mode"] = {1, 1};
  const std::string path = std::filesystem::temp_directory_path() /
                           ("gpushare-mig-" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << f.dump();
  std::unique_ptr<Nvml> nvml = LoadWith(path);
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_FALSE((*gpus)[0].mig_enabled);
  EXPECT_TRUE((*gpus)[1].mig_enabled);
  std::filesystem::remove(path);
}

// An NVML fixture of the node `nvidia-smi topo -m` printed in `text`: each
// NV# pair as # active NVLinks to the peer's PCI bus id, except on NVSwitch
// nodes (more links per GPU than NVML allows), where each GPU has its
// smallest NV count of links to a switch; other pairs as NVML's common
// ancestor level.
nlohmann::json FixtureOf(const Topology& topo) {
  const int n = topo.num_gpus();
  auto bus = [](int i) {
    char text[32];
    std::snprintf(text, sizeof text, "00000000:%02X:00.0", 0x10 + i);
    return std::string(text);
  };
  bool switched = false;
  for (int i = 0; i < n; ++i) {
    int links = 0;
    for (int j = 0; j < n; ++j) links += i == j ? 0 : topo.link(i, j).nvlinks;
    switched = switched || links > 18;
  }
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    nlohmann::json levels = nlohmann::json::array();
    nlohmann::json nvlink = nlohmann::json::array();
    int min_nv = 1 << 20;
    for (int j = 0; j < n; ++j) {
      const Link l = i == j ? Link{LinkKind::kPix, 0} : topo.link(i, j);
      const int level = l.kind == LinkKind::kPix   ? 10
                        : l.kind == LinkKind::kPxb ? 20
                        : l.kind == LinkKind::kPhb ? 30
                        : l.kind == LinkKind::kNode ? 40
                                                    : 50;
      levels.push_back(l.kind == LinkKind::kNvLink ? 50 : level);
      if (i == j || l.kind != LinkKind::kNvLink) continue;
      min_nv = std::min(min_nv, l.nvlinks);
      if (!switched) {
        for (int k = 0; k < l.nvlinks; ++k) nvlink.push_back({{"state", 1}, {"remote_bus_id", bus(j)}});
      }
    }
    if (switched) {
      for (int k = 0; k < min_nv; ++k) {
        nvlink.push_back({{"state", 1}, {"remote_bus_id", "00000000:FF:00.0"}});
      }
    }
    nvlink.push_back({{"state", 0}, {"remote_bus_id", ""}});  // An inactive link.
    const int numa = topo.gpu_numa().empty() ? -1 : topo.gpu_numa()[i];
    devices.push_back({{"index", i},
                       {"uuid", "GPU-" + std::to_string(i)},
                       {"name", "NVIDIA Test"},
                       {"memory", {{"total", 16ull << 30}}},
                       {"pci", {{"busId", bus(i)}}},
                       {"compute_capability", {8, 0}},
                       {"numa_node", numa >= 0 ? nlohmann::json(numa)
                                               : nlohmann::json({{"error", "NVMLError_NotSupported"}})},
                       {"common_ancestor", levels},
                       {"nvlink", nvlink}});
  }
  return {{"driver_version", "550.0"}, {"devices", devices}};
}

TEST(NvmlTest, TopologyFromNvmlMatchesNvidiaSmi) {
  for (const char* name : {"dgx1_v100", "dgx2", "dgx_a100", "dgx_h100", "pcie_2socket_8gpu", "t4x4"}) {
    SCOPED_TRACE(name);
    std::ifstream in(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/topology/" + name + ".txt");
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<TopologyPtr> smi = Topology::FromNvidiaSmi(text.str());
    ASSERT_TRUE(smi.ok()) << smi.status();
    const std::string fixture = ::testing::TempDir() + "/topology-" + name + ".json";
    std::ofstream(fixture) << FixtureOf(**smi).dump();
    std::unique_ptr<Nvml> nvml = LoadWith(fixture);
    ASSERT_NE(nvml, nullptr);
    absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    absl::StatusOr<TopologyPtr> topo = nvml->Topology(*gpus);
    ASSERT_TRUE(topo.ok()) << topo.status();
    EXPECT_EQ((*topo)->ToMatrixText(), (*smi)->ToMatrixText());
    EXPECT_EQ((*topo)->gpu_numa(), (*smi)->gpu_numa());
  }
}

TEST(NvmlTest, OneGpuWithoutNvLinkHasATrivialTopology) {
  const std::string path = std::string(GPUSHARE_SHARED_DIR) + "/nvml/h200-nvml.json";
  if (!std::ifstream(path)) GTEST_SKIP() << path << " is absent";
  std::unique_ptr<Nvml> nvml = LoadWith(path);
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
  ASSERT_TRUE(gpus.ok());
  absl::StatusOr<TopologyPtr> topo = nvml->Topology(*gpus);  // NVLink: NotSupported.
  ASSERT_TRUE(topo.ok()) << topo.status();
  EXPECT_EQ((*topo)->num_gpus(), 1);
}

TEST(NvmlTest, NoCommonAncestorMeansNoTopology) {
  std::unique_ptr<Nvml> nvml =
      LoadWith(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/nvml/two-a100.json");
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<std::vector<GpuInfo>> gpus = nvml->Devices();
  ASSERT_TRUE(gpus.ok());
  absl::StatusOr<TopologyPtr> topo = nvml->Topology(*gpus);
  EXPECT_EQ(topo.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(topo.status().message()), HasSubstr("GPUs 0 and 1"));
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
