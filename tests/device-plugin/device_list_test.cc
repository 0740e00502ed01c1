// How a container is given its GPUs (device-plugin/device_list.h).

#include "device-plugin/device_list.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<GpuInfo> TwoGpus() {
  std::vector<GpuInfo> gpus(2);
  gpus[0].uuid = "GPU-aaa";
  gpus[0].minor_number = 0;
  gpus[1].uuid = "GPU-bbb";
  gpus[1].minor_number = 3;
  return gpus;
}

DeviceListOptions With(std::vector<DeviceListStrategy> strategies) {
  DeviceListOptions o;
  o.strategies = std::move(strategies);
  return o;
}

TEST(DeviceListTest, EnvvarNamesTheUuids) {
  std::vector<GpuInfo> g = TwoGpus();
  ContainerDevices d = DeviceListFor({&g[0], &g[1]}, "aliyun.com/gpu-mem", DeviceListOptions{});
  EXPECT_EQ(d.envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaa,GPU-bbb");
  EXPECT_THAT(d.mounts, IsEmpty());
  EXPECT_THAT(d.cdi_devices, IsEmpty());
  EXPECT_THAT(d.annotations, IsEmpty());
}

// Finding: GPUs reached the container only through NVIDIA_VISIBLE_DEVICES,
// which any pod can set itself.
TEST(DeviceListTest, VolumeMountsGiveOneMountPerGpuAndNoUuidInTheEnvironment) {
  std::vector<GpuInfo> g = TwoGpus();
  ContainerDevices d = DeviceListFor({&g[1]}, "aliyun.com/gpu-mem",
                                     With({DeviceListStrategy::kVolumeMounts}));
  EXPECT_EQ(d.envs.at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  ASSERT_EQ(d.mounts.size(), 1u);
  EXPECT_EQ(d.mounts[0].container_path, "/var/run/nvidia-container-devices/GPU-bbb");
  EXPECT_EQ(d.mounts[0].host_path, "/dev/null");
  EXPECT_TRUE(d.mounts[0].read_only);
}

TEST(DeviceListTest, CdiNamesGoToTheCriFieldAndTheAnnotation) {
  std::vector<GpuInfo> g = TwoGpus();
  DeviceListOptions o = With({DeviceListStrategy::kCdiCri, DeviceListStrategy::kCdiAnnotations});
  o.cdi_kind = "example.com/gpu";
  ContainerDevices d = DeviceListFor({&g[0], &g[1]}, "nvidia.com/gpu", o);
  EXPECT_THAT(d.cdi_devices, ElementsAre("example.com/gpu=GPU-aaa", "example.com/gpu=GPU-bbb"));
  EXPECT_EQ(d.annotations.at("cdi.k8s.io/gpushare-device-plugin_gpu"),
            "example.com/gpu=GPU-aaa,example.com/gpu=GPU-bbb");
  EXPECT_EQ(d.envs.count("NVIDIA_VISIBLE_DEVICES"), 0u);  // CDI alone: no variable.
}

TEST(DeviceListTest, DeviceSpecsForTheGpusAndTheControlDevicesThatExist) {
  if (geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  const std::string root = std::filesystem::temp_directory_path() /
                           ("gpushare-dev-" + std::to_string(getpid()));
  std::filesystem::create_directories(root + "/dev");
  for (const char* name : {"nvidia0", "nvidia3", "nvidiactl"}) {
    ASSERT_EQ(mknod((root + "/dev/" + name).c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  }
  std::vector<GpuInfo> g = TwoGpus();
  DeviceListOptions o;
  o.pass_device_specs = true;
  o.dev_root = root;
  ContainerDevices d = DeviceListFor({&g[1]}, "aliyun.com/gpu-mem", o);
  ASSERT_EQ(d.devices.size(), 2u);  // Its GPU and nvidiactl; no uvm here.
  EXPECT_EQ(d.devices[0].container_path, "/dev/nvidia3");
  EXPECT_EQ(d.devices[0].host_path, root + "/dev/nvidia3");
  EXPECT_EQ(d.devices[0].permissions, "rw");
  EXPECT_EQ(d.devices[1].container_path, "/dev/nvidiactl");
  g[1].minor_number = -1;  // Not told by NVML: no spec for the GPU.
  EXPECT_EQ(DeviceListFor({&g[1]}, "aliyun.com/gpu-mem", o).devices.size(), 1u);
  std::filesystem::remove_all(root);
}

TEST(DeviceListTest, StrategiesParseAndBadOnesAreNamed) {
  absl::StatusOr<std::vector<DeviceListStrategy>> s =
      ParseDeviceListStrategies("volume-mounts, cdi-cri");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(DeviceListStrategy::kVolumeMounts, DeviceListStrategy::kCdiCri));
  EXPECT_THAT(ParseDeviceListStrategies("envvar,mounts").status().message(),
              HasSubstr("unknown device list strategy \"mounts\""));
  EXPECT_THAT(ParseDeviceListStrategies("envvar,envvar").status().message(),
              HasSubstr("named twice"));
  EXPECT_FALSE(ParseDeviceListStrategies("").ok());
}

}  // namespace
}  // namespace gpushare::deviceplugin
