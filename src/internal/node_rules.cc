// The per-node rules: request and node validation, feasibility with reasons,
// and applying or undoing a placement on a node.

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/internal/cluster_state.h"
#include "src/internal/text.h"
#include "src/topology/node_gpus.h"

namespace gpushare::internal {
namespace {

ABSL_ATTRIBUTE_NOINLINE absl::Status QuantityOutOfRange(const char* what, int64_t value,
                                                        int64_t min) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", value, " is out of range [", min, ", ", kMaxQuantity, "]"));
}

// Inline, with the error built out of line: every place and commit checks
// several quantities, and the usual OK status then costs a comparison.
inline absl::Status CheckQuantity(const char* what, int64_t value, int64_t min) {
  if (ABSL_PREDICT_FALSE(value < min || value > kMaxQuantity)) {
    return QuantityOutOfRange(what, value, min);
  }
  return absl::OkStatus();
}

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t TieKey(uint64_t seed, const std::string& name, uint64_t sequence) {
  if (seed == 0) return sequence;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, stable across platforms.
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return Mix(h ^ Mix(seed));
}

absl::StatusOr<Demand> ValidateRequest(const Request& r, int max_gpus) {
  if (r.id.empty()) return absl::InvalidArgumentError("request id is empty");
  // The prefix is built only on error: this runs on every placement.
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("request '", Echo(r.id), "': ", parts...));
  };
  if (absl::Status s = CheckQuantity("gpu memory", r.gpu_memory, 0); !s.ok())
    return bad(s.message());
  if (absl::Status s = CheckQuantity("cpu", r.cpu, 0); !s.ok()) return bad(s.message());
  if (absl::Status s = CheckQuantity("host memory", r.host_memory, 0); !s.ok())
    return bad(s.message());
  if (r.compute < 0 || r.compute > kGpuCompute) {
    return bad("compute ", r.compute, " is out of range [0, ", kGpuCompute, "]");
  }
  if (r.whole_gpus < 0 || r.whole_gpus > kMaxGpusPerNode) {
    return bad("whole gpus ", r.whole_gpus, " is out of range [0, ", kMaxGpusPerNode, "]");
  }
  if (r.gpu_count < 1 || r.gpu_count > kMaxGpusPerNode) {
    return bad("gpu count ", r.gpu_count, " is out of range [1, ", kMaxGpusPerNode, "]");
  }
  for (const std::string& m : r.gpu_models) {
    if (m.empty()) return bad("gpu model names must not be empty");
  }
  if (r.topology.mode == TopologyNeed::Mode::kRequire) {
    const Link& l = r.topology.min_link;
    if (l.kind == LinkKind::kNvLink ? (l.nvlinks < 1 || l.nvlinks > 64) : l.nvlinks != 0) {
      return bad("required minimum link has ", l.nvlinks, " NVLinks");
    }
  }
  Demand d;
  d.cpu = r.cpu;
  d.host_memory = r.host_memory;
  const bool shared = r.gpu_memory > 0 || r.compute > 0;
  if (shared && r.whole_gpus > 0) {
    return bad("asks for both shared GPU resources (gpu memory ", r.gpu_memory,
               ", compute ", r.compute, ") and ", r.whole_gpus,
               " exclusive whole GPUs; use one or the other");
  }
  if (r.whole_gpus > 0) {
    if (r.gpu_count != 1) {
      return bad("gpu count ", r.gpu_count,
                 " applies to shared requests; an exclusive request gives only "
                 "whole gpus (", r.whole_gpus, ")");
    }
    d.kind = Demand::Kind::kExclusive;
    d.gpu_count = static_cast<int>(r.whole_gpus);
  } else if (shared) {
    if (r.gpu_memory % r.gpu_count != 0) {
      return bad("gpu memory ", r.gpu_memory, " is not divisible by gpu count ",
                 r.gpu_count);
    }
    d.kind = Demand::Kind::kShared;
    d.gpu_count = static_cast<int>(r.gpu_count);
    d.memory_per_gpu = r.gpu_memory / r.gpu_count;
    d.compute_per_gpu = r.compute;
  } else if (r.gpu_count != 1) {
    return bad("gpu count ", r.gpu_count, " without gpu memory or compute");
  }
  if (d.gpu_count > max_gpus) {
    return bad("needs ", d.gpu_count, " GPUs on one node but the largest node has ",
               max_gpus);
  }
  return d;
}

absl::Status ValidateNode(const Node& node) {
  if (node.name.empty()) return absl::InvalidArgumentError("node name is empty");
  const std::string who = absl::StrCat("node '", Echo(node.name), "': ");
  if (node.gpus.size() > static_cast<size_t>(kMaxGpusPerNode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, node.gpus.size(), " GPUs exceed the limit of ", kMaxGpusPerNode));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    if (absl::Status s = CheckQuantity("memory", node.gpus[i].memory, 1); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(who, "GPU ", i, " ", s.message()));
    }
    // A UUID names one physical GPU (NVIDIA_VISIBLE_DEVICES lists them).
    const std::string& uuid = node.gpus[i].uuid;
    for (size_t j = 0; !uuid.empty() && j < i; ++j) {
      if (node.gpus[j].uuid == uuid) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "GPUs ", j, " and ", i, " have the same UUID '", Echo(uuid), "'"));
      }
    }
  }
  if (node.topology != nullptr &&
      node.topology->num_gpus() != static_cast<int>(node.gpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat(who, "topology has ",
                                                   node.topology->num_gpus(), " GPUs but the node has ",
                                                   node.gpus.size()));
  }
  if (absl::Status s = CheckQuantity("cpu", node.cpu, 0); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(who, s.message()));
  if (absl::Status s = CheckQuantity("host memory", node.host_memory, 0); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(who, s.message()));
  return absl::OkStatus();
}

namespace {

// The status of `node`: its strings, labels and GPU models copied from a
// const Node&, moved from a Node&&.
template <typename N>
NodeStatus StatusOf(N&& node) {
  NodeStatus s;
  s.gpu_sharing = TakesSharedGpuWork(node);
  s.name = std::forward<N>(node).name;
  s.address = std::forward<N>(node).address;
  s.labels = std::forward<N>(node).labels;
  s.schedulable = node.schedulable;
  s.cpu = node.cpu;
  s.host_memory = node.host_memory;
  s.topology = std::forward<N>(node).topology;
  s.gpus.reserve(node.gpus.size());
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    GpuStatus g;
    g.index = static_cast<int>(i);
    g.memory = node.gpus[i].memory;
    g.healthy = node.gpus[i].healthy;
    if constexpr (std::is_rvalue_reference_v<N&&>) {
      g.model = std::move(node.gpus[i].model);
      g.uuid = std::move(node.gpus[i].uuid);
    } else {
      g.model = node.gpus[i].model;
      g.uuid = node.gpus[i].uuid;
    }
    s.gpus.push_back(std::move(g));
  }
  return s;
}

}  // namespace

NodeStatus MakeNodeStatus(const Node& node) { return StatusOf(node); }
NodeStatus MakeNodeStatus(Node&& node) { return StatusOf(std::move(node)); }

bool NodeAdmits(const NodeStatus& node, const Demand& demand, const Request& request) {
  if (!node.schedulable) return false;
  for (const auto& [key, value] : request.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  if (demand.kind == Demand::Kind::kShared && !node.gpu_sharing) return false;
  if (node.cpu > 0 && demand.cpu > node.cpu - node.cpu_used) return false;
  return node.host_memory <= 0 || demand.host_memory <= node.host_memory - node.host_memory_used;
}

bool NodeFits(const NodeStatus& node, const Demand& demand, const Request& request,
              std::vector<int>* fitting) {
  fitting->clear();
  if (!NodeAdmits(node, demand, request)) return false;
  if (demand.kind == Demand::Kind::kCpuOnly) return true;
  for (const GpuStatus& g : node.gpus) {
    if (!g.healthy || !ModelAllowed(request, g)) continue;
    const bool fits = demand.kind == Demand::Kind::kExclusive
                          ? g.idle()
                          : g.memory_free() >= demand.memory_per_gpu &&
                                g.compute_free() >= demand.compute_per_gpu;
    if (fits) fitting->push_back(g.index);
  }
  return !node.gpus.empty() && static_cast<int>(fitting->size()) >= demand.gpu_count &&
         MeetsTopologyNeed(node, demand, request, *fitting);
}

std::optional<std::string> CheckNode(const NodeStatus& node, const Demand& demand,
                                     const Request& request,
                                     std::vector<int>* fitting) {
  if (NodeFits(node, demand, request, fitting)) return std::nullopt;
  // The reason: the same rules again, step by step.
  fitting->clear();
  if (!node.schedulable) return std::string("node is unschedulable");
  for (const auto& [key, value] : request.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) {
      return absl::StrCat("node selector ", key, "=", value, " not matched");
    }
  }
  if (demand.kind == Demand::Kind::kShared && !node.gpu_sharing) {
    return std::string("node does not take shared GPU work");
  }
  if (node.cpu > 0 && demand.cpu > node.cpu - node.cpu_used) {
    return absl::StrCat("insufficient cpu: free ", node.cpu - node.cpu_used,
                        ", need ", demand.cpu);
  }
  if (node.host_memory > 0 && demand.host_memory > node.host_memory - node.host_memory_used) {
    return absl::StrCat("insufficient memory: free ",
                        node.host_memory - node.host_memory_used, ", need ",
                        demand.host_memory);
  }
  if (demand.kind == Demand::Kind::kCpuOnly) return std::nullopt;
  if (node.gpus.empty()) return std::string("node has no GPUs");

  int eligible = 0;
  int64_t largest_memory = 0, largest_compute = 0;
  bool any_memory_fits = false;
  for (const GpuStatus& g : node.gpus) {
    if (!ModelAllowed(request, g) || !g.healthy) continue;
    ++eligible;
    bool fits;
    if (demand.kind == Demand::Kind::kExclusive) {
      fits = g.idle();
    } else {
      largest_memory = std::max(largest_memory, g.memory_free());
      const bool memory_fits = g.memory_free() >= demand.memory_per_gpu;
      if (memory_fits) {
        any_memory_fits = true;
        largest_compute = std::max(largest_compute, g.compute_free());
      }
      fits = memory_fits && g.compute_free() >= demand.compute_per_gpu;
    }
    if (fits) fitting->push_back(g.index);
  }
  const int have = static_cast<int>(fitting->size());
  if (have >= demand.gpu_count) return CheckTopologyNeed(node, demand, request, *fitting);

  if (eligible == 0) {
    bool any_model = false;
    for (const GpuStatus& g : node.gpus) any_model = any_model || ModelAllowed(request, g);
    if (!any_model) {
      std::vector<std::string> models;
      for (const GpuStatus& g : node.gpus) {
        if (std::find(models.begin(), models.end(), g.model) == models.end())
          models.push_back(g.model.empty() ? "(unnamed)" : g.model);
      }
      return absl::StrCat("GPU model ", absl::StrJoin(models, ", "), " not in [",
                          absl::StrJoin(request.gpu_models, ", "), "]");
    }
    return std::string("no healthy GPU");
  }
  if (demand.kind == Demand::Kind::kExclusive) {
    return absl::StrCat("needs ", demand.gpu_count, " idle GPU",
                        demand.gpu_count == 1 ? "" : "s", ", has ", have);
  }
  if (demand.gpu_count == 1) {
    if (any_memory_fits) {
      return absl::StrCat("insufficient GPU compute on any single GPU: largest free ",
                          largest_compute, ", need ", demand.compute_per_gpu);
    }
    return absl::StrCat("insufficient GPU memory on any single GPU: largest free ",
                        largest_memory, ", need ", demand.memory_per_gpu);
  }
  std::string each;
  if (demand.memory_per_gpu > 0) absl::StrAppend(&each, demand.memory_per_gpu, " free units");
  if (demand.compute_per_gpu > 0) {
    absl::StrAppend(&each, each.empty() ? "" : " and ", demand.compute_per_gpu,
                    " free compute");
  }
  return absl::StrCat("needs ", demand.gpu_count, " GPUs with ", each, " each, has ",
                      have);
}

void ApplyToNode(NodeStatus& node, const Placement& p) {
  for (int i : p.gpus) {
    GpuStatus& g = node.gpus[i];
    if (p.exclusive) {
      g.memory_used += g.memory;
      g.compute_used += kGpuCompute;
    } else {
      g.memory_used += p.memory_per_gpu;
      g.compute_used += p.compute_per_gpu;
    }
    ++g.holders;
  }
  node.cpu_used += p.cpu;
  node.host_memory_used += p.host_memory;
  node.requests.push_back(p.request_id);
  ++node.version;
}

void UndoOnNode(NodeStatus& node, const Placement& p) {
  for (int i : p.gpus) {
    GpuStatus& g = node.gpus[i];
    if (p.exclusive) {
      g.memory_used -= g.memory;
      g.compute_used -= kGpuCompute;
    } else {
      g.memory_used -= p.memory_per_gpu;
      g.compute_used -= p.compute_per_gpu;
    }
    --g.holders;
  }
  node.cpu_used -= p.cpu;
  node.host_memory_used -= p.host_memory;
  // The list is in no fixed order: the last id fills the gap, so a release
  // moves one string, not every one after it.
  auto it = std::find(node.requests.begin(), node.requests.end(), p.request_id);
  if (it != node.requests.end()) {
    if (it != node.requests.end() - 1) *it = std::move(node.requests.back());
    node.requests.pop_back();
  }
  ++node.version;
}

absl::Status CheckCommit(const NodeStatus& node, const Placement& p, bool running) {
  // The prefix is built only on error: this runs on every commit.
  auto who = [&] {
    return absl::StrCat("placement of '", Echo(p.request_id), "' on node '", Echo(p.node), "': ");
  };
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(who(), parts...));
  };
  auto stale = [&](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat(who(), parts...));
  };
  if (p.request_id.empty()) return absl::InvalidArgumentError("placement has an empty request id");
  if (absl::Status s = CheckQuantity("memory per gpu", p.memory_per_gpu, 0); !s.ok())
    return invalid(s.message());
  if (absl::Status s = CheckQuantity("cpu", p.cpu, 0); !s.ok()) return invalid(s.message());
  if (absl::Status s = CheckQuantity("host memory", p.host_memory, 0); !s.ok())
    return invalid(s.message());
  if (p.compute_per_gpu < 0 || p.compute_per_gpu > kGpuCompute) {
    return invalid("compute per gpu ", p.compute_per_gpu, " is out of range [0, ",
                   kGpuCompute, "]");
  }
  const bool shared = p.memory_per_gpu > 0 || p.compute_per_gpu > 0;
  if (p.exclusive && shared) {
    return invalid("an exclusive placement has no memory or compute per gpu");
  }
  if ((p.exclusive || shared) && p.gpus.empty()) return invalid("no GPUs listed");
  if (!p.exclusive && !shared && !p.gpus.empty()) {
    return invalid("GPUs listed without memory or compute per gpu");
  }
  for (size_t k = 0; k < p.gpus.size(); ++k) {
    const int i = p.gpus[k];
    if (i < 0 || i >= static_cast<int>(node.gpus.size())) {
      return invalid("GPU index ", i, " is out of range [0, ", node.gpus.size(), ")");
    }
    if (k > 0 && p.gpus[k - 1] >= i) return invalid("GPU indices must be ascending and distinct");
  }
  if (!running && !node.schedulable) return stale("node is unschedulable");
  if (!running && shared && !node.gpu_sharing) return stale("node does not take shared GPU work");
  for (int i : p.gpus) {
    const GpuStatus& g = node.gpus[i];
    if (!running && !g.healthy) return stale("GPU ", i, " is unhealthy");
    if (p.exclusive) {
      if (!g.idle()) return stale("GPU ", i, " is not idle");
    } else if (g.memory_free() < p.memory_per_gpu) {
      return stale("GPU ", i, " has ", g.memory_free(), " free units, needs ",
                   p.memory_per_gpu);
    } else if (g.compute_free() < p.compute_per_gpu) {
      return stale("GPU ", i, " has ", g.compute_free(), " free compute, needs ",
                   p.compute_per_gpu);
    }
  }
  if (node.cpu > 0 && p.cpu > node.cpu - node.cpu_used) {
    return stale("insufficient cpu: free ", node.cpu - node.cpu_used, ", need ", p.cpu);
  }
  if (node.host_memory > 0 && p.host_memory > node.host_memory - node.host_memory_used) {
    return stale("insufficient memory: free ", node.host_memory - node.host_memory_used,
                 ", need ", p.host_memory);
  }
  return absl::OkStatus();
}

}  // namespace gpushare::internal
