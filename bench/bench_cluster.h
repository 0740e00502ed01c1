// Shared set-up for the benchmark programs: clusters of identical 8-GPU nodes
// brought to a steady state of about 70% GPU memory used, with fixed seeds so
// that every run measures the same states.
//
//   gpushare::Cluster cluster = gpushare::bench::BackgroundCluster(10000);
//   gpushare::bench::Window window(256);
//   for (auto _ : state) {
//     ... place a request with id window.Next() ...
//     if (const std::string* old = window.Placed()) (void)cluster.Release(*old);
//   }

#ifndef GPUSHARE_BENCH_BENCH_CLUSTER_H_
#define GPUSHARE_BENCH_BENCH_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpushare/gpushare.h"

namespace gpushare::bench {

inline constexpr int kGpusPerNode = 8;
inline constexpr int64_t kGpuMemory = 32;  // Memory units (GiB) per GPU.
inline constexpr uint64_t kSeed = 20240607;

// In a "minority" cluster, every kMinorityEvery-th node has GPUs of model
// kMinorityModel and the label kMinorityLabel=kMinorityValue.
inline constexpr int kMinorityEvery = 32;
inline constexpr const char* kMinorityModel = "A100M32";
inline constexpr const char* kMinorityLabel = "accelerator";
inline constexpr const char* kMinorityValue = "a100";

inline Node BenchNode(int i, bool minority = false) {
  const bool odd_one = minority && i % kMinorityEvery == 0;
  Node n;
  n.name = absl::StrCat("node-", i);
  n.labels = {{"gpushare", "true"}, {"zone", i % 2 == 0 ? "a" : "b"}};
  if (odd_one) n.labels[kMinorityLabel] = kMinorityValue;
  n.gpus.assign(kGpusPerNode, Gpu{kGpuMemory, odd_one ? kMinorityModel : "V100M32", "", true});
  n.cpu = 96000;          // Thousandths of a core.
  n.host_memory = 393216;  // MiB.
  return n;
}

// The background load: each GPU is idle with probability 0.2 and otherwise
// holds one pod of 22..32 units (about 67% of all GPU memory used). Calls
// `commit(placement)` for each pod.
template <typename CommitFn>
void ApplyBackground(int nodes, CommitFn commit) {
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<int> idle(0, 4), size(22, 32);
  Placement p;
  for (int i = 0; i < nodes; ++i) {
    p.node = absl::StrCat("node-", i);
    for (int g = 0; g < kGpusPerNode; ++g) {
      if (idle(rng) == 0) continue;
      p.request_id = absl::StrCat("bg-", i, "-", g);
      p.gpus = {g};
      p.memory_per_gpu = size(rng);
      commit(p);
    }
  }
}

inline Cluster BackgroundCluster(int nodes, bool minority = false, uint64_t tie_break_seed = 0) {
  ClusterOptions options;
  options.tie_break_seed = tie_break_seed;
  Cluster cluster(options);
  for (int i = 0; i < nodes; ++i) (void)cluster.AddNode(BenchNode(i, minority));
  ApplyBackground(nodes, [&](const Placement& p) { (void)cluster.Commit(p); });
  return cluster;
}

// Fixed pseudo-random per-GPU sizes for the timed loops.
inline std::vector<int64_t> Sizes(int64_t lo, int64_t hi, size_t n = 4096) {
  std::mt19937_64 rng(kSeed + 1);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<int64_t> sizes(n);
  for (int64_t& s : sizes) s = d(rng);
  return sizes;
}

// Keeps `window` placed requests in flight: each new placement releases the
// oldest one, so the cluster stays at the same load. The ids are made before
// timing ("p0", "p1", ... for prefix "p") and come round again after
// kRounds * window requests, long after their release, so that the timed loop
// measures the library and not the making of strings.
class Window {
 public:
  static constexpr size_t kRounds = 16;
  explicit Window(size_t window, std::string_view prefix = "p")
      : window_(window), ids_(kRounds * window + 1) {
    for (size_t i = 0; i < ids_.size(); ++i) ids_[i] = std::string(prefix) + std::to_string(i);
  }
  // The id of the next request to place.
  const std::string& Next() const { return ids_[next_ % ids_.size()]; }
  // That request was placed: returns the id to release (placed `window`
  // requests earlier), or nullptr while the window is filling.
  const std::string* Placed() {
    ++next_;
    if (next_ <= window_) return nullptr;
    return &ids_[(next_ - 1 - window_) % ids_.size()];
  }

 private:
  size_t window_;
  std::vector<std::string> ids_;
  uint64_t next_ = 0;  // Requests placed.
};

}  // namespace gpushare::bench

#endif  // GPUSHARE_BENCH_BENCH_CLUSTER_H_
