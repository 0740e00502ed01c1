// Kubernetes objects as the API server lists them, for the extender's tests:
// GPU nodes, pending and bound GPU pods, and an extender built from lists.

#ifndef GPUSHARE_TESTS_EXTENDER_K8S_OBJECTS_H_
#define GPUSHARE_TESTS_EXTENDER_K8S_OBJECTS_H_

#include <memory>
#include <string>
#include <vector>

#include "gpushare/gpushare.h"
#include "gpushare/kubernetes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::extender::testing {

// A node of `gpus` GPUs of `per_gpu` units each.
inline nlohmann::json GpuNode(const std::string& name, int gpus, int per_gpu) {
  return nlohmann::json{{"kind", "Node"},
                        {"metadata", {{"name", name}, {"labels", {{"gpushare", "true"}}}}},
                        {"spec", nlohmann::json::object()},
                        {"status",
                         {{"capacity",
                           {{"aliyun.com/gpu-mem", std::to_string(gpus * per_gpu)},
                            {"aliyun.com/gpu-count", std::to_string(gpus)},
                            {"cpu", "32"},
                            {"memory", "128Gi"}}}}}};
}

// A pending pod asking `units` of one GPU.
inline nlohmann::json GpuPod(const std::string& name, int units) {
  return nlohmann::json{
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
      {"spec",
       {{"containers",
         nlohmann::json::array(
             {{{"name", "main"},
               {"resources", {{"limits", {{"aliyun.com/gpu-mem", std::to_string(units)}}}}}}})}}},
      {"status", {{"phase", "Pending"}}}};
}

// The pod bound to GPU `gpu` of `node`, with the bind annotations gpushare
// writes.
inline nlohmann::json BoundPod(const std::string& name, int units, const std::string& node,
                               int gpu) {
  nlohmann::json pod = GpuPod(name, units);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  pod["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", std::to_string(gpu)},
                                    {"ALIYUN_COM_GPU_MEM_POD", std::to_string(units)},
                                    {"ALIYUN_COM_GPU_MEM_ASSIGNED", "true"}};
  return pod;
}

// A cluster, its scheduler and extender, built the way the extender builds
// them from the API server's lists.
struct World {
  World(const std::vector<nlohmann::json>& nodes, const std::vector<nlohmann::json>& pods) {
    nodes_json = nlohmann::json{{"kind", "NodeList"}, {"items", nodes}}.dump();
    pods_json = nlohmann::json{{"kind", "PodList"}, {"items", pods}}.dump();
    auto cluster = k8s::RebuildCluster(nodes_json, pods_json);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    auto s = Scheduler::Create(*std::move(cluster));
    EXPECT_TRUE(s.ok()) << s.status();
    scheduler = *std::move(s);
    ext = std::make_unique<k8s::Extender>(scheduler.get());
  }
  std::string nodes_json, pods_json;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<k8s::Extender> ext;
};

}  // namespace gpushare::extender::testing

#endif  // GPUSHARE_TESTS_EXTENDER_K8S_OBJECTS_H_
