#include "gpushare/inspect.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpushare {
namespace {

constexpr int kRuleWidth = 58;

std::string Percent(int64_t used, int64_t total) {
  const int64_t pct = total > 0 ? used * 100 / total : 0;
  return absl::StrCat(used, "/", total, " (", pct, "%)");
}

// Lays out rows in left-aligned columns two spaces apart; the last column is
// not padded.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      out += row[c];
      if (c + 1 < row.size()) out.append(width[c] + 2 - row[c].size(), ' ');
    }
    out += '\n';
  }
  return out;
}

std::string Rule() { return std::string(kRuleWidth, '-') + "\n"; }

// Memory `p` holds on GPU `gpu` of `node`.
int64_t HeldOn(const NodeStatus& node, const Placement& p, int gpu) {
  if (std::find(p.gpus.begin(), p.gpus.end(), gpu) == p.gpus.end()) return 0;
  return p.exclusive ? node.gpus[gpu].memory : p.memory_per_gpu;
}

std::string NodeDetails(const Cluster& cluster, const NodeStatus& node) {
  std::string out = absl::StrCat("NAME:       ", node.name, "\nIPADDRESS:  ",
                                 node.address.empty() ? "-" : node.address, "\n");
  // Nodes with a GPU topology also show it and each request's weakest link.
  const bool topology = node.topology != nullptr;
  if (topology) {
    absl::StrAppend(&out, "TOPOLOGY:   links ", LinkName(node.topology->worst_link()), " to ",
                    LinkName(node.topology->best_link()), "\n");
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"NAME", "NAMESPACE"};
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    header.push_back(absl::StrCat("GPU", g, "(Allocated)"));
  }
  if (topology) header.push_back("WEAKEST LINK");
  rows.push_back(header);
  std::vector<std::string> ids = node.requests;
  std::sort(ids.begin(), ids.end());
  for (const std::string& id : ids) {
    const Placement* p = cluster.FindPlacement(id);
    if (p == nullptr) continue;
    const size_t slash = id.find('/');
    std::vector<std::string> row;
    row.push_back(slash == std::string::npos ? id : id.substr(slash + 1));
    row.push_back(slash == std::string::npos ? "default" : id.substr(0, slash));
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      row.push_back(absl::StrCat(HeldOn(node, *p, static_cast<int>(g))));
    }
    if (topology) row.push_back(p->weakest_link.empty() ? "-" : p->weakest_link);
    rows.push_back(std::move(row));
  }
  const int64_t used = node.gpu_memory_used(), total = node.gpu_memory();
  rows.push_back({"Allocated :", absl::StrCat(used, " (", total > 0 ? used * 100 / total : 0, "%)")});
  rows.push_back({"Total :", absl::StrCat(node.gpu_memory())});
  return out + Columns(rows) + Rule();
}

}  // namespace

std::string InspectTable(const Cluster& cluster) {
  size_t max_gpus = 0;
  for (const std::string& name : cluster.node_names()) {
    max_gpus = std::max(max_gpus, cluster.FindNode(name)->gpus.size());
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"NAME", "IPADDRESS"};
  for (size_t g = 0; g < max_gpus; ++g) header.push_back(absl::StrCat("GPU", g, "(Allocated/Total)"));
  header.push_back(absl::StrCat("GPU Memory(", MemoryUnitName(cluster.options().memory_unit), ")"));
  rows.push_back(header);
  int64_t used = 0, total = 0;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus& node = *cluster.FindNode(name);
    if (node.gpus.empty()) continue;
    std::vector<std::string> row = {node.name, node.address.empty() ? "-" : node.address};
    for (size_t g = 0; g < max_gpus; ++g) {
      if (g >= node.gpus.size()) {
        row.push_back("-");
        continue;
      }
      const GpuStatus& gpu = node.gpus[g];
      row.push_back(absl::StrCat(gpu.memory_used, "/", gpu.memory,
                                 gpu.healthy ? "" : "(unhealthy)"));
    }
    row.push_back(absl::StrCat(node.gpu_memory_used(), "/", node.gpu_memory()));
    used += node.gpu_memory_used();
    total += node.gpu_memory();
    rows.push_back(std::move(row));
  }
  return Columns(rows) + Rule() + "Allocated/Total GPU Memory In Cluster:\n" +
         Percent(used, total) + "\n";
}

std::string InspectDetails(const Cluster& cluster) {
  std::string out;
  int64_t used = 0, total = 0;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus& node = *cluster.FindNode(name);
    if (node.gpus.empty()) continue;
    out += NodeDetails(cluster, node);
    used += node.gpu_memory_used();
    total += node.gpu_memory();
  }
  return out + "\nAllocated/Total GPU Memory In Cluster:  " + Percent(used, total) + "\n";
}

absl::StatusOr<std::string> InspectNode(const Cluster& cluster, std::string_view name) {
  const NodeStatus* node = cluster.FindNode(name);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("unknown node '", absl::string_view(name.data(), name.size()), "'"));
  return NodeDetails(cluster, *node);
}

}  // namespace gpushare
