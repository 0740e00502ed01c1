#include "gpushare/types.h"

#include <ostream>

#include "gpushare/version.h"

namespace gpushare {
namespace {

// Writes `s` as a Python string literal in single quotes.
void Quoted(std::ostream& os, const std::string& s) {
  os << '\'';
  for (char c : s) {
    switch (c) {
      case '\\': os << "\\\\"; break;
      case '\'': os << "\\'"; break;
      case '\n': os << "\\n"; break;
      case '\t': os << "\\t"; break;
      default: os << c;
    }
  }
  os << '\'';
}

void QuotedMap(std::ostream& os, const std::map<std::string, std::string>& m) {
  os << '{';
  const char* sep = "";
  for (const auto& [key, value] : m) {
    os << sep;
    Quoted(os, key);
    os << ": ";
    Quoted(os, value);
    sep = ", ";
  }
  os << '}';
}

}  // namespace

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
  if (!p.weakest_link.empty()) os << ", weakest_link='" << p.weakest_link << "'";
  return os << ")";
}

std::ostream& operator<<(std::ostream& os, const Gpu& gpu) {
  os << "Gpu(memory=" << gpu.memory;
  if (!gpu.model.empty()) Quoted(os << ", model=", gpu.model);
  if (!gpu.uuid.empty()) Quoted(os << ", uuid=", gpu.uuid);
  if (!gpu.healthy) os << ", healthy=False";
  return os << ")";
}

std::ostream& operator<<(std::ostream& os, const Node& node) {
  Quoted(os << "Node(name=", node.name);
  os << ", gpus=[";
  for (size_t i = 0; i < node.gpus.size(); ++i) os << (i ? ", " : "") << node.gpus[i];
  os << "]";
  if (!node.labels.empty()) QuotedMap(os << ", labels=", node.labels);
  if (!node.address.empty()) Quoted(os << ", address=", node.address);
  if (node.cpu != 0) os << ", cpu=" << node.cpu;
  if (node.host_memory != 0) os << ", host_memory=" << node.host_memory;
  if (!node.schedulable) os << ", schedulable=False";
  if (node.gpu_sharing.has_value()) {
    os << ", gpu_sharing=" << (*node.gpu_sharing ? "True" : "False");
  }
  if (node.topology != nullptr) {
    Quoted(os << ", topology=Topology.from_json(", node.topology->ToJson());
    os << ")";
  }
  return os << ")";
}

std::ostream& operator<<(std::ostream& os, const Request& r) {
  Quoted(os << "Request(id=", r.id);
  if (r.gpu_memory != 0) os << ", gpu_memory=" << r.gpu_memory;
  if (r.gpu_count != 1) os << ", gpu_count=" << r.gpu_count;
  if (r.compute != 0) os << ", compute=" << r.compute;
  if (r.whole_gpus != 0) os << ", whole_gpus=" << r.whole_gpus;
  if (r.cpu != 0) os << ", cpu=" << r.cpu;
  if (r.host_memory != 0) os << ", host_memory=" << r.host_memory;
  if (!r.gpu_models.empty()) {
    os << ", gpu_models=[";
    for (size_t i = 0; i < r.gpu_models.size(); ++i) Quoted(os << (i ? ", " : ""), r.gpu_models[i]);
    os << "]";
  }
  if (!r.node_selector.empty()) QuotedMap(os << ", node_selector=", r.node_selector);
  if (r.topology.mode != TopologyNeed::Mode::kPrefer) {
    os << ", topology='" << TopologyModeName(r.topology.mode);
    if (r.topology.mode == TopologyNeed::Mode::kRequire) os << ":" << LinkName(r.topology.min_link);
    os << "'";
  }
  if (r.topology.objective == TopologyObjective::kTotal) os << ", topology_objective='total'";
  return os << ")";
}

std::ostream& operator<<(std::ostream& os, const FitResult& fit) {
  Quoted(os << "FitResult(node=", fit.node);
  os << ", feasible=" << (fit.feasible ? "True" : "False");
  if (!fit.reason.empty()) Quoted(os << ", reason=", fit.reason);
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
