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
  // Uniform in [0, n).
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

class RandomPolicy final : public fgd::KernelPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}

  std::string Name() const override { return "random"; }
  bool Cacheable() const override { return false; }

  double Score(const fgd::KTask& task, const fgd::KNode& /*node*/, const int* fitting,
               int num_fitting, int* gpus) override {
    std::array<int, kMaxGpusPerNode> pool;
    std::copy(fitting, fitting + num_fitting, pool.begin());
    for (int j = 0; j < task.gpu_count; ++j) {
      std::swap(pool[j], pool[j + rng_.Below(num_fitting - j)]);
    }
    std::sort(pool.begin(), pool.begin() + task.gpu_count);
    std::copy(pool.begin(), pool.begin() + task.gpu_count, gpus);
    return static_cast<double>(rng_.Next() >> 11) * 0x1.0p-53;
  }

 private:
  SplitMix64 rng_;
};

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}

}  // namespace gpushare::policies
