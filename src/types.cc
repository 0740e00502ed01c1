#include "gpushare/types.h"

#include <ostream>

#include "gpushare/version.h"

namespace gpushare {

const char* Version() { return "0.1.0"; }

const char* MemoryUnitName(MemoryUnit unit) {
  return unit == MemoryUnit::kMiB ? "MiB" : "GiB";
}

bool TakesSharedGpuWork(const Node& node) {
  if (node.gpu_sharing.has_value()) return *node.gpu_sharing;
  auto label = [&](const char* key) -> std::string {
    auto it = node.labels.find(key);
    return it == node.labels.end() ? std::string() : it->second;
  };
  if (label("gpushare") == "true" || label("cgpu") == "true") return true;
  const std::string ack = label("ack.node.gpu.schedule");
  return ack == "share" || ack == "cgpu";
}

bool operator==(const Placement& a, const Placement& b) {
  return a.request_id == b.request_id && a.node == b.node && a.gpus == b.gpus &&
         a.memory_per_gpu == b.memory_per_gpu &&
         a.compute_per_gpu == b.compute_per_gpu && a.exclusive == b.exclusive &&
         a.cpu == b.cpu && a.host_memory == b.host_memory;
}

std::ostream& operator<<(std::ostream& os, const Placement& p) {
  os << "Placement(request_id='" << p.request_id << "', node='" << p.node
     << "', gpus=[";
  for (size_t i = 0; i < p.gpus.size(); ++i) os << (i ? ", " : "") << p.gpus[i];
  os << "]";
  if (p.memory_per_gpu != 0) os << ", memory_per_gpu=" << p.memory_per_gpu;
  if (p.compute_per_gpu != 0) os << ", compute_per_gpu=" << p.compute_per_gpu;
  if (p.exclusive) os << ", exclusive=True";
  if (p.cpu != 0) os << ", cpu=" << p.cpu;
  if (p.host_memory != 0) os << ", host_memory=" << p.host_memory;
  return os << ")";
}

int64_t NodeStatus::gpu_memory() const {
  int64_t total = 0;
  for (const GpuStatus& g : gpus) total += g.memory;
  return total;
}

int64_t NodeStatus::gpu_memory_used() const {
  int64_t total = 0;
  for (const GpuStatus& g : gpus) total += g.memory_used;
  return total;
}

}  // namespace gpushare
