#include "gpushare/fragmentation.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "src/fgd/kernel.h"

namespace gpushare {

double NodeFragmentation(const NodeShape& node, const TargetWorkload& target) {
  const fgd::CompiledTarget compiled = fgd::Compile(target);
  std::vector<uint8_t> allowed(target.tasks.size());
  for (size_t k = 0; k < target.tasks.size(); ++k) {
    const std::vector<std::string>& models = target.tasks[k].gpu_models;
    allowed[k] = models.empty() ||
                 std::find(models.begin(), models.end(), node.model) != models.end();
  }
  return fgd::FragAmount(compiled, node.gpu_left.data(), static_cast<int>(node.gpu_left.size()),
                         node.gpu_full, node.cpu_left, allowed.data());
}

namespace fgd {

double NodeFrag(const NodeStatus& node, const CompiledTarget& target) {
  const bool memory = target.resource == FragResource::kMemory;
  absl::InlinedVector<int64_t, kMaxGpusPerNode> left(node.gpus.size());
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuStatus& g = node.gpus[i];
    left[i] = !g.healthy ? 0 : memory ? g.memory_free() : g.compute_free();
  }
  absl::InlinedVector<uint8_t, 64> allowed(target.types.size());
  TypesAllowed(target, node, allowed.data());
  const int64_t full = memory && !node.gpus.empty() ? node.gpus[0].memory : kGpuCompute;
  const int64_t cpu_left = node.cpu > 0 ? node.cpu - node.cpu_used : fgd::kUnlimitedCpu;
  return FragAmount(target, left.data(), static_cast<int>(left.size()), full, cpu_left,
                    allowed.data());
}

}  // namespace fgd

double NodeFragmentation(const NodeStatus& node, const TargetWorkload& target) {
  return fgd::NodeFrag(node, fgd::Compile(target));
}

ClusterFragmentation Fragmentation(const Cluster& cluster, const TargetWorkload& target) {
  const fgd::CompiledTarget compiled = fgd::Compile(target);
  ClusterFragmentation f;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus* node = cluster.FindNode(name);
    f.amount += fgd::NodeFrag(*node, compiled);
    for (const GpuStatus& g : node->gpus) {
      if (!g.healthy) continue;
      f.idle += static_cast<double>(target.resource == FragResource::kMemory ? g.memory_free()
                                                                           : g.compute_free());
    }
  }
  f.rate = f.idle > 0 ? f.amount / f.idle : 0;
  return f;
}

absl::StatusOr<TargetWorkload> TypicalTasks(const std::vector<Request>& workload,
                                            double coverage, FragResource resource) {
  if (workload.empty()) return absl::InvalidArgumentError("typical tasks of an empty workload");
  if (!(coverage > 0 && coverage <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("coverage ", coverage, " is outside (0, 1]"));
  }
  using Key = std::tuple<int64_t, int64_t, int64_t, std::vector<std::string>>;
  std::map<Key, std::pair<int64_t, size_t>> groups;  // key -> (count, first seen)
  for (size_t i = 0; i < workload.size(); ++i) {
    const Request& r = workload[i];
    int64_t share = 0, count = 0;
    if (r.whole_gpus > 0) {
      share = resource == FragResource::kCompute ? kGpuCompute : 0;
      count = r.whole_gpus;
    } else if (r.compute > 0 || r.gpu_memory > 0) {
      count = r.gpu_count;
      share = resource == FragResource::kCompute ? r.compute
                                                 : (count > 0 ? r.gpu_memory / count : 0);
    }
    std::vector<std::string> models = r.gpu_models;
    std::sort(models.begin(), models.end());
    models.erase(std::unique(models.begin(), models.end()), models.end());
    auto [it, inserted] = groups.try_emplace(Key{r.cpu, share, count, std::move(models)},
                                             std::make_pair(int64_t{0}, i));
    ++it->second.first;
  }
  std::vector<std::pair<const Key*, std::pair<int64_t, size_t>>> order;
  order.reserve(groups.size());
  for (const auto& [key, value] : groups) order.emplace_back(&key, value);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second.first != b.second.first) return a.second.first > b.second.first;
    return a.second.second < b.second.second;
  });
  TargetWorkload target;
  target.resource = resource;
  const double total = static_cast<double>(workload.size());
  int64_t covered = 0;
  for (const auto& [key, value] : order) {
    if (static_cast<double>(covered) >= coverage * total) break;
    TargetTask t;
    t.cpu = std::get<0>(*key);
    t.gpu_share = std::get<1>(*key);
    t.gpu_count = static_cast<int>(std::get<2>(*key));
    t.gpu_models = std::get<3>(*key);
    t.weight = static_cast<double>(value.first);
    covered += value.first;
    target.tasks.push_back(std::move(t));
  }
  for (TargetTask& t : target.tasks) t.weight /= static_cast<double>(covered);
  return target;
}

}  // namespace gpushare
