#include "gpushare/device_plugin.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpushare {

absl::StatusOr<DeviceView> MakeDeviceView(const Cluster& cluster, const Placement& p,
                                          int64_t assume_time_ns) {
  const NodeStatus* node = cluster.FindNode(p.node);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("unknown node '", p.node, "'"));
  std::vector<int64_t> units;  // Per chosen GPU.
  bool all_uuids = !p.gpus.empty();
  for (int g : p.gpus) {
    if (g < 0 || g >= static_cast<int>(node->gpus.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement of '", p.request_id, "': node '", p.node, "' has no GPU ", g));
    }
    units.push_back(p.exclusive ? node->gpus[g].memory : p.memory_per_gpu);
    all_uuids = all_uuids && !node->gpus[g].uuid.empty();
  }
  if (assume_time_ns == 0) {
    assume_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  }
  int64_t total = 0;
  for (int64_t u : units) total += u;
  const std::string idx = absl::StrJoin(p.gpus, "-");
  const std::string dev = p.gpus.empty() ? "0" : absl::StrCat(node->gpus[p.gpus[0]].memory);
  const std::string per_gpu = units.empty() ? "0" : absl::StrCat(units[0]);
  std::vector<std::string> visible;
  for (int g : p.gpus) visible.push_back(all_uuids ? node->gpus[g].uuid : absl::StrCat(g));
  std::vector<std::string> alloc;
  for (size_t k = 0; k < p.gpus.size(); ++k) {
    alloc.push_back(absl::StrCat("\"", p.gpus[k], "\":", units[k]));
  }

  DeviceView view;
  view.annotations = {
      {"ALIYUN_COM_GPU_MEM_IDX", idx},
      {"ALIYUN_COM_GPU_MEM_POD", absl::StrCat(total)},
      {"ALIYUN_COM_GPU_MEM_DEV", dev},
      {"ALIYUN_COM_GPU_MEM_ASSIGNED", "false"},
      {"ALIYUN_COM_GPU_MEM_ASSUME_TIME", absl::StrCat(assume_time_ns)},
      {"scheduler.framework.gpushare.allocation",
       absl::StrCat("{\"0\":{", absl::StrJoin(alloc, ","), "}}")},
  };
  view.env = {
      {"NVIDIA_VISIBLE_DEVICES", visible.empty() ? "void" : absl::StrJoin(visible, ",")},
      {"ALIYUN_COM_GPU_MEM_CONTAINER", per_gpu},
      {"ALIYUN_COM_GPU_MEM_DEV", dev},
      {"ALIYUN_COM_GPU_MEM_IDX", idx},
      {"ALIYUN_COM_GPU_MEM_POD", absl::StrCat(total)},
  };
  return view;
}

}  // namespace gpushare
