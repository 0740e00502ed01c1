// Requests of gpushare-device-plugin to the Kubernetes API (see kube.h).

#include "device-plugin/kube.h"

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpushare/kubernetes.h"
#include "gpushare/topology.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {

namespace {

// Percent-encodes every byte but RFC 3986's unreserved ones.
std::string Escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789ABCDEF";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string NodePodsPath(std::string_view node) {
  return absl::StrCat("/api/v1/pods?fieldSelector=", Escape(absl::StrCat("spec.nodeName=", std::string(node))));
}

std::string NodePath(std::string_view node) {
  return absl::StrCat("/api/v1/nodes/", Escape(node));
}

std::string AssignedPatch(int64_t now_ns) {
  nlohmann::json patch = {{"metadata",
                           {{"annotations",
                             {{"ALIYUN_COM_GPU_MEM_ASSIGNED", "true"},
                              {"ALIYUN_COM_GPU_MEM_ASSIGN_TIME", absl::StrCat(now_ns)}}}}}};
  return patch.dump();
}

std::string NodeAnnotationsPatch(const std::string& topology_json,
                                 const std::vector<int64_t>& gpu_units,
                                 const std::map<int, std::string>& unhealthy) {
  nlohmann::json annotations = nlohmann::json::object();
  // Unknown topology: remove a stale one (from other GPUs, or another run).
  annotations[Topology::kKubernetesAnnotation] =
      topology_json.empty() ? nlohmann::json(nullptr) : nlohmann::json(topology_json);
  annotations[k8s::kGpuMemoryAnnotation] = absl::StrJoin(gpu_units, ",");
  std::vector<int> gpus;
  for (const auto& [g, why] : unhealthy) gpus.push_back(g);
  annotations[k8s::kUnhealthyGpusAnnotation] =
      gpus.empty() ? nlohmann::json(nullptr) : nlohmann::json(absl::StrJoin(gpus, ","));
  return nlohmann::json({{"metadata", {{"annotations", annotations}}}}).dump();
}

}  // namespace gpushare::deviceplugin
