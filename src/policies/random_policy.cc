#include "src/policies/random_policy.h"

#include <algorithm>
#include <array>

#include "src/fgd/kernel.h"

namespace gpushare::policies {
namespace {

// SplitMix64: small, fast and the same on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
 private:
  uint64_t state_;
};

class RandomPolicy final : public fgd::KernelPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}

  std::string Name() const override { return "random"; }
  bool Cacheable() const override { return false; }
  bool SplitsScore() const override { return true; }

  double Score(const fgd::KTask& task, const fgd::KNode& /*node*/, const int* fitting,
               int num_fitting, int* gpus) override {
    std::array<uint64_t, kMaxGpusPerNode> draws;
    const double score = DrawScore(task, draws.data());
    GpusFromDraws(task, fitting, num_fitting, draws.data(), gpus);
    return score;
  }

  // One draw per GPU to take, then the node's score: uniform in [0, 1), so
  // the highest is a uniformly random feasible node.
  double DrawScore(const fgd::KTask& task, uint64_t* draws) override {
    for (int j = 0; j < task.gpu_count; ++j) draws[j] = rng_.Next();
    return static_cast<double>(rng_.Next() >> 11) * 0x1.0p-53;
  }

  // A partial Fisher-Yates shuffle of the fitting GPUs: uniformly random
  // distinct GPUs, written in ascending order.
  void GpusFromDraws(const fgd::KTask& task, const int* fitting, int num_fitting,
                     const uint64_t* draws, int* gpus) override {
    std::array<int, kMaxGpusPerNode> pool;
    std::copy(fitting, fitting + num_fitting, pool.begin());
    for (int j = 0; j < task.gpu_count; ++j) {
      const uint64_t left = static_cast<uint64_t>(num_fitting - j);
      std::swap(pool[j], pool[j + static_cast<int>(draws[j] % left)]);
    }
    std::sort(pool.begin(), pool.begin() + task.gpu_count);
    std::copy(pool.begin(), pool.begin() + task.gpu_count, gpus);
  }

 private:
  SplitMix64 rng_;
};

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}

}  // namespace gpushare::policies
