// How a container is given its GPUs (see device_list.h).

#include "device-plugin/device_list.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace gpushare::deviceplugin {

namespace {

constexpr DeviceListStrategy kAll[] = {DeviceListStrategy::kEnvvar, DeviceListStrategy::kVolumeMounts,
                                       DeviceListStrategy::kCdiAnnotations,
                                       DeviceListStrategy::kCdiCri};

bool Has(const DeviceListOptions& o, DeviceListStrategy s) {
  return std::find(o.strategies.begin(), o.strategies.end(), s) != o.strategies.end();
}

bool IsCharDevice(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

std::string UnderRoot(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return absl::StrCat(absl::StripSuffix(root, "/"), path);
}

}  // namespace

const char* DeviceListStrategyName(DeviceListStrategy s) {
  switch (s) {
    case DeviceListStrategy::kEnvvar: return "envvar";
    case DeviceListStrategy::kVolumeMounts: return "volume-mounts";
    case DeviceListStrategy::kCdiAnnotations: return "cdi-annotations";
    case DeviceListStrategy::kCdiCri: return "cdi-cri";
  }
  return "?";
}

absl::StatusOr<std::vector<DeviceListStrategy>> ParseDeviceListStrategies(std::string_view text) {
  std::vector<DeviceListStrategy> out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    part = absl::StripAsciiWhitespace(part);
    const DeviceListStrategy* found = nullptr;
    for (const DeviceListStrategy& s : kAll) {
      if (part == DeviceListStrategyName(s)) found = &s;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown device list strategy \"", std::string(part),
          "\" (envvar, volume-mounts, cdi-annotations or cdi-cri)"));
    }
    if (std::find(out.begin(), out.end(), *found) != out.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device list strategy \"", std::string(part), "\" is named twice"));
    }
    out.push_back(*found);
  }
  if (out.empty()) return absl::InvalidArgumentError("no device list strategy");
  return out;
}

ContainerDevices DeviceListFor(const std::vector<const GpuInfo*>& gpus, std::string_view resource,
                               const DeviceListOptions& o) {
  ContainerDevices d;
  std::vector<std::string> uuids;
  for (const GpuInfo* g : gpus) uuids.push_back(g->uuid);
  if (Has(o, DeviceListStrategy::kEnvvar)) {
    d.envs["NVIDIA_VISIBLE_DEVICES"] = uuids.empty() ? "void" : absl::StrJoin(uuids, ",");
  } else if (Has(o, DeviceListStrategy::kVolumeMounts)) {
    d.envs["NVIDIA_VISIBLE_DEVICES"] = kVolumeMountsRoot;
  }
  if (Has(o, DeviceListStrategy::kVolumeMounts)) {
    for (const std::string& uuid : uuids) {
      d.mounts.push_back({absl::StrCat(kVolumeMountsRoot, "/", uuid), "/dev/null", true});
    }
  }
  std::vector<std::string> cdi;
  for (const std::string& uuid : uuids) cdi.push_back(absl::StrCat(o.cdi_kind, "=", uuid));
  if (Has(o, DeviceListStrategy::kCdiAnnotations) && !cdi.empty()) {
    const std::string short_name(resource.substr(resource.find('/') + 1));
    d.annotations[absl::StrCat("cdi.k8s.io/gpushare-device-plugin_", short_name)] =
        absl::StrJoin(cdi, ",");
  }
  if (Has(o, DeviceListStrategy::kCdiCri)) d.cdi_devices = cdi;
  if (o.pass_device_specs && !gpus.empty()) {
    std::vector<std::string> paths;
    for (const GpuInfo* g : gpus) {
      if (g->minor_number >= 0) paths.push_back(absl::StrCat("/dev/nvidia", g->minor_number));
    }
    for (const char* control : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
      paths.emplace_back(control);
    }
    for (const std::string& path : paths) {
      const std::string host = UnderRoot(o.dev_root, path);
      if (IsCharDevice(host)) d.devices.push_back({path, host, "rw"});
    }
  }
  return d;
}

}  // namespace gpushare::deviceplugin
