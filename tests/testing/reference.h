// A slow, obviously correct reference for the built-in "binpack" and "spread"
// policies: a plain scan over every node and every GPU, written from the
// documentation in gpushare/policy.h and gpushare/cluster.h and sharing no code
// with the library. Tests and benchmarks compare the library against it.
//
//   gpushare::testing::ReferenceCluster ref;
//   ref.AddNode(node);
//   std::optional<gpushare::Placement> p = ref.Plan(request, "binpack");

#ifndef GPUSHARE_TESTS_TESTING_REFERENCE_H_
#define GPUSHARE_TESTS_TESTING_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gpushare/types.h"

namespace gpushare::testing {

class ReferenceCluster {
 public:
  struct RefGpu {
    int64_t memory = 0, used = 0, compute_used = 0;
    int holders = 0;
    bool healthy = true;
    std::string model;
  };
  struct RefNode {
    std::string name;
    std::map<std::string, std::string> labels;
    bool sharing = false, schedulable = true;
    int64_t cpu = 0, cpu_used = 0, host_memory = 0, host_memory_used = 0;
    std::vector<RefGpu> gpus;
    uint64_t seq = 0;  // Insertion order: larger wins ties.
  };

  // Adds a node (assumed valid and new).
  void AddNode(const Node& node) {
    RefNode n;
    n.name = node.name;
    n.labels = node.labels;
    n.sharing = TakesSharedGpuWork(node);
    n.schedulable = node.schedulable;
    n.cpu = node.cpu;
    n.host_memory = node.host_memory;
    for (const Gpu& g : node.gpus) {
      RefGpu r;
      r.memory = g.memory;
      r.healthy = g.healthy;
      r.model = g.model;
      n.gpus.push_back(r);
    }
    n.seq = next_seq_++;
    nodes_.push_back(n);
  }

  RefNode* Find(const std::string& name) {
    for (RefNode& n : nodes_) {
      if (n.name == name) return &n;
    }
    return nullptr;
  }

  bool IsPlaced(const std::string& id) const { return placements_.count(id) > 0; }
  const std::map<std::string, Placement>& placements() const { return placements_; }
  std::vector<RefNode>& nodes() { return nodes_; }

  // Whether `n` can host `r` (assumed valid), and the GPUs that fit one share.
  static bool Feasible(const RefNode& n, const Request& r, std::vector<int>* fitting) {
    fitting->clear();
    if (!n.schedulable) return false;
    for (const auto& [k, v] : r.node_selector) {
      auto it = n.labels.find(k);
      if (it == n.labels.end() || it->second != v) return false;
    }
    const bool shared = r.gpu_memory > 0 || r.compute > 0;
    if (shared && !n.sharing) return false;
    if (n.cpu > 0 && n.cpu_used + r.cpu > n.cpu) return false;
    if (n.host_memory > 0 && n.host_memory_used + r.host_memory > n.host_memory) return false;
    int want = 0;
    for (int i = 0; i < static_cast<int>(n.gpus.size()); ++i) {
      const RefGpu& g = n.gpus[i];
      bool model_ok = r.gpu_models.empty();
      for (const std::string& m : r.gpu_models) model_ok = model_ok || m == g.model;
      if (!model_ok || !g.healthy) continue;
      if (r.whole_gpus > 0) {
        if (g.holders == 0) fitting->push_back(i);
      } else if (shared) {
        if (g.memory - g.used >= r.gpu_memory / r.gpu_count &&
            1000 - g.compute_used >= r.compute) {
          fitting->push_back(i);
        }
      }
    }
    if (r.whole_gpus > 0) want = static_cast<int>(r.whole_gpus);
    else if (shared) want = static_cast<int>(r.gpu_count);
    return static_cast<int>(fitting->size()) >= want;
  }

  // The placement `policy` ("binpack" or "spread") would choose, or nullopt.
  std::optional<Placement> Plan(const Request& r, const std::string& policy) const {
    const bool binpack = policy == "binpack";
    const bool shared = r.gpu_memory > 0 || r.compute > 0;
    const int64_t per_gpu = shared ? r.gpu_memory / r.gpu_count : 0;
    const int count = r.whole_gpus > 0 ? static_cast<int>(r.whole_gpus)
                                       : (shared ? static_cast<int>(r.gpu_count) : 0);
    std::optional<Placement> best;
    std::tuple<double, double, double> best_score;
    uint64_t best_seq = 0;
    std::vector<int> fitting;
    for (const RefNode& n : nodes_) {
      if (!Feasible(n, r, &fitting)) continue;
      // Sort every fitting GPU by the policy's order and take the first count.
      std::vector<int> order = fitting;
      std::sort(order.begin(), order.end(), [&](int a, int b) {
        auto key = [&](int i) {
          const RefGpu& g = n.gpus[i];
          int64_t fm = g.memory - g.used, fc = 1000 - g.compute_used;
          return binpack ? std::make_tuple(fm, fc, i) : std::make_tuple(-fm, -fc, i);
        };
        return key(a) < key(b);
      });
      order.resize(count);
      std::sort(order.begin(), order.end());
      double mem_total = 0, mem_used = 0, compute_used = 0, idle = 0, left_mem = 0,
             left_compute = 0;
      for (const RefGpu& g : n.gpus) {
        mem_total += static_cast<double>(g.memory);
        mem_used += static_cast<double>(g.used);
        compute_used += static_cast<double>(g.compute_used);
        if (g.holders == 0 && g.healthy) idle += 1;
      }
      for (int i : order) {
        left_mem += static_cast<double>(n.gpus[i].memory - n.gpus[i].used - per_gpu);
        left_compute += static_cast<double>(1000 - n.gpus[i].compute_used - r.compute);
      }
      auto ratio = [](int64_t a, int64_t b) {
        return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
      };
      std::tuple<double, double, double> score;
      if (r.whole_gpus > 0) {
        score = binpack ? std::make_tuple(-idle, -(mem_total - mem_used), 0.0)
                        : std::make_tuple(idle, mem_total - mem_used, 0.0);
      } else if (shared) {
        const double compute_total = 1000.0 * static_cast<double>(n.gpus.size());
        score = binpack ? std::make_tuple(-left_mem, -left_compute, 0.0)
                        : std::make_tuple(mem_total > 0 ? -mem_used / mem_total : 0.0,
                                          compute_total > 0 ? -compute_used / compute_total : 0.0,
                                          left_mem);
      } else {
        const double c = ratio(n.cpu_used, n.cpu), h = ratio(n.host_memory_used, n.host_memory);
        score = binpack ? std::make_tuple(c, h, 0.0) : std::make_tuple(-c, -h, 0.0);
      }
      if (!best || best_score < score || (score == best_score && n.seq > best_seq)) {
        Placement p;
        p.request_id = r.id;
        p.node = n.name;
        p.gpus = order;
        p.memory_per_gpu = per_gpu;
        p.compute_per_gpu = shared ? r.compute : 0;
        p.exclusive = r.whole_gpus > 0;
        p.cpu = r.cpu;
        p.host_memory = r.host_memory;
        best = p;
        best_score = score;
        best_seq = n.seq;
      }
    }
    return best;
  }

  // Whether `p` fits now (for a commit after other changes).
  bool CanCommit(const Placement& p) {
    RefNode* n = Find(p.node);
    if (n == nullptr || IsPlaced(p.request_id) || !n->schedulable) return false;
    const bool shared = p.memory_per_gpu > 0 || p.compute_per_gpu > 0;
    if (shared && !n->sharing) return false;
    for (int i : p.gpus) {
      const RefGpu& g = n->gpus[i];
      if (!g.healthy) return false;
      if (p.exclusive ? g.holders != 0
                      : (g.memory - g.used < p.memory_per_gpu ||
                         1000 - g.compute_used < p.compute_per_gpu)) {
        return false;
      }
    }
    if (n->cpu > 0 && n->cpu_used + p.cpu > n->cpu) return false;
    if (n->host_memory > 0 && n->host_memory_used + p.host_memory > n->host_memory) return false;
    return true;
  }

  void Commit(const Placement& p) { Apply(p, +1); placements_[p.request_id] = p; }

  bool Release(const std::string& id) {
    auto it = placements_.find(id);
    if (it == placements_.end()) return false;
    Apply(it->second, -1);
    placements_.erase(it);
    return true;
  }

  // Sum of GPU memory used over the cluster.
  int64_t MemoryUsed() const {
    int64_t used = 0;
    for (const RefNode& n : nodes_) {
      for (const RefGpu& g : n.gpus) used += g.used;
    }
    return used;
  }

 private:
  void Apply(const Placement& p, int sign) {
    RefNode& n = *Find(p.node);
    for (int i : p.gpus) {
      RefGpu& g = n.gpus[i];
      g.used += sign * (p.exclusive ? g.memory : p.memory_per_gpu);
      g.compute_used += sign * (p.exclusive ? 1000 : p.compute_per_gpu);
      g.holders += sign;
    }
    n.cpu_used += sign * p.cpu;
    n.host_memory_used += sign * p.host_memory;
  }

  std::vector<RefNode> nodes_;
  std::map<std::string, Placement> placements_;
  uint64_t next_seq_ = 0;
};

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_REFERENCE_H_
