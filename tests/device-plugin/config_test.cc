// gpushare-device-plugin's flags (device-plugin/config.h).

#include "device-plugin/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/flag_parsing.h"

namespace gpushare::deviceplugin {
namespace {

using ::gpushare::testing::FlagError;
using ::testing::HasSubstr;

absl::StatusOr<DevicePluginConfig> Parse(std::initializer_list<const char*> args,
                                         const char* node_env = "n1") {
  auto parse = [node_env](int argc, const char* const* argv) {
    return ParseDevicePluginFlags(argc, argv, node_env);
  };
  return ::gpushare::testing::ParseFlags(parse, "gpushare-device-plugin", args);
}

TEST(DevicePluginConfigTest, DefaultsSuitTheDaemonSet) {
  absl::StatusOr<DevicePluginConfig> c = Parse({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_name, "n1");  // From $NODE_NAME.
  EXPECT_EQ(c->plugin_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(c->memory_unit, MemoryUnit::kGiB);
  EXPECT_EQ(c->exclusive_resource, "nvidia.com/gpu");
  EXPECT_FALSE(c->hami_limits);
  EXPECT_TRUE(c->annotate_node);
  EXPECT_TRUE(c->health_checks);
}

TEST(DevicePluginConfigTest, FlagsOverride) {
  absl::StatusOr<DevicePluginConfig> c =
      Parse({"--node-name", "gpu-7", "--memory-unit=MiB", "--exclusive-resource=",
             "--hami-limits", "true", "--health-interval-ms", "250", "--health-checks=false"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node_name, "gpu-7");
  EXPECT_EQ(c->memory_unit, MemoryUnit::kMiB);
  EXPECT_EQ(c->exclusive_resource, "");
  EXPECT_TRUE(c->hami_limits);
  EXPECT_EQ(c->health_interval_ms, 250);
  EXPECT_FALSE(c->health_checks);
}

TEST(DevicePluginConfigTest, DeviceListFlags) {
  absl::StatusOr<DevicePluginConfig> c =
      Parse({"--device-list-strategy=volume-mounts,cdi-cri", "--cdi-kind=example.com/gpu",
             "--pass-device-specs=true", "--dev-root=/host"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device_list.strategies.size(), 2u);
  EXPECT_EQ(c->device_list.cdi_kind, "example.com/gpu");
  EXPECT_TRUE(c->device_list.pass_device_specs);
  EXPECT_EQ(c->device_list.dev_root, "/host");
  EXPECT_THAT(FlagError(Parse({"--device-list-strategy=cdi"})), HasSubstr("\"cdi\""));
  EXPECT_THAT(FlagError(Parse({"--cdi-kind=gpu"})), HasSubstr("\"gpu\""));
  absl::StatusOr<DevicePluginConfig> d = Parse({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->device_list.strategies.size(), 1u);  // envvar, as the original plugin.
}

TEST(DevicePluginConfigTest, DiscoverNeedsNoNodeName) {
  absl::StatusOr<DevicePluginConfig> c = Parse({"--discover"}, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->discover);
  EXPECT_THAT(FlagError(Parse({"--discover=yes"})), HasSubstr("--discover"));
}

TEST(DevicePluginConfigTest, WatchHealthGoesWithDiscover) {
  absl::StatusOr<DevicePluginConfig> c = Parse({"--discover", "--watch-health"}, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->watch_health);
  EXPECT_FALSE(Parse({"--discover"}, nullptr)->watch_health);
  EXPECT_THAT(FlagError(Parse({"--watch-health"})), HasSubstr("--watch-health needs --discover"));
}

TEST(DevicePluginConfigTest, BadValuesAreNamed) {
  EXPECT_THAT(FlagError(Parse({}, nullptr)), HasSubstr("no node name"));
  EXPECT_THAT(FlagError(Parse({"--memory-unit", "GB"})), HasSubstr("\"GB\""));
  EXPECT_THAT(FlagError(Parse({"--exclusive-resource", "amd.com/gpu"})),
              HasSubstr("amd.com/gpu"));
  EXPECT_THAT(FlagError(Parse({"--health-interval-ms", "5"})), HasSubstr("--health-interval-ms"));
  EXPECT_THAT(FlagError(Parse({"--hami-limits", "maybe"})), HasSubstr("maybe"));
  EXPECT_THAT(FlagError(Parse({"--bogus"})), HasSubstr("--bogus"));
}

TEST(DevicePluginConfigTest, HelpNamesEveryFlag) {
  const std::string help = DevicePluginHelp();
  for (const char* flag : {"--node-name", "--device-plugin-path", "--nvml-library",
                           "--memory-unit", "--exclusive-resource", "--hami-limits",
                           "--kubeconfig", "--annotate-node", "--health-interval-ms",
                           "--pod-resources-socket"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
  absl::StatusOr<DevicePluginConfig> c = Parse({"--help"}, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help);
}

}  // namespace
}  // namespace gpushare::deviceplugin
