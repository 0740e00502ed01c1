// Choosing the best connected GPU set on a topology (Topology::Choose) and
// its brute-force reference.

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "gpushare/topology.h"
#include "src/topology/topology_impl.h"

namespace gpushare {
namespace {

uint64_t Bit(int g) { return uint64_t{1} << g; }

uint64_t MaskOf(const std::vector<int>& gpus) {
  uint64_t m = 0;
  for (int g : gpus) m |= Bit(g);
  return m;
}

double Choose2(int n, int k) {  // C(n, k) as a double (exact for n <= 64, small k).
  if (k < 0 || k > n) return 0;
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

// Everything a set is judged by, best first (see Topology::Choose).
struct Verdict {
  bool valid = false;
  double primary = 0, secondary = 0;
  double groups[3] = {0, 0, 0};
  double rest_total = 0;
  std::vector<int> ranks;  // Ascending.
  GpuSetChoice rated;
};

bool Better(const Verdict& a, const Verdict& b) {
  if (!b.valid) return a.valid;
  if (!a.valid) return false;
  if (a.primary != b.primary) return a.primary > b.primary;
  if (a.secondary != b.secondary) return a.secondary > b.secondary;
  for (int i = 0; i < 3; ++i) {
    if (a.groups[i] != b.groups[i]) return a.groups[i] > b.groups[i];
  }
  if (a.rest_total != b.rest_total) return a.rest_total > b.rest_total;
  return a.ranks < b.ranks;
}

class Judge {
 public:
  Judge(const Topology& t, const Topology::Impl& impl, uint64_t idle, TopologyObjective objective,
        double min_weight, const std::vector<int>& preference)
      : t_(t), impl_(impl), idle_(idle), objective_(objective), min_weight_(min_weight),
        rank_(t.num_gpus()) {
    const int n = t.num_gpus();
    for (int g = 0; g < n; ++g) rank_[g] = static_cast<int>(preference.size()) + g;
    for (size_t i = 0; i < preference.size(); ++i) {
      const int g = preference[i];
      if (g >= 0 && g < n && rank_[g] >= static_cast<int>(preference.size())) {
        rank_[g] = static_cast<int>(i);
      }
    }
  }

  int rank(int g) const { return rank_[g]; }

  // `gpus` ascending.
  Verdict Judge1(const std::vector<int>& gpus) const {
    Verdict v;
    v.rated = t_.Rate(gpus);
    if (gpus.size() >= 2 && v.rated.weakest_weight < min_weight_) return v;
    v.valid = true;
    if (objective_ == TopologyObjective::kWeakestLink) {
      v.primary = v.rated.weakest_weight;
      v.secondary = v.rated.total_weight;
    } else {
      v.primary = v.rated.total_weight;
      v.secondary = v.rated.weakest_weight;
    }
    const uint64_t rest = idle_ & ~MaskOf(gpus);
    for (size_t i = 0; i < impl_.levels.size(); ++i) {
      const Topology::Impl::GroupLevel& level = impl_.levels[i];
      const int slot = level.size == 8 ? 0 : level.size == 4 ? 1 : 2;
      if (level.skipped) continue;
      if (level.all_groups) {
        v.groups[slot] = Choose2(__builtin_popcountll(rest), level.size);
        continue;
      }
      double count = 0;
      for (uint64_t g : level.groups) count += (g & ~rest) == 0 ? 1 : 0;
      v.groups[slot] = count;
    }
    const int n = t_.num_gpus();
    for (int a = 0; a < n; ++a) {
      if (!(rest & Bit(a))) continue;
      for (int b = a + 1; b < n; ++b) {
        if (rest & Bit(b)) v.rest_total += t_.weight(a, b);
      }
    }
    v.ranks.reserve(gpus.size());
    for (int g : gpus) v.ranks.push_back(rank_[g]);
    std::sort(v.ranks.begin(), v.ranks.end());
    return v;
  }

 private:
  const Topology& t_;
  const Topology::Impl& impl_;
  uint64_t idle_;
  TopologyObjective objective_;
  double min_weight_;
  std::vector<int> rank_;
};

GpuSetChoice Result(const Verdict& v) {
  if (!v.valid) return GpuSetChoice{};
  return v.rated;
}

bool Usable(const Topology& t, const std::vector<int>& candidates, int k) {
  if (k < 1 || static_cast<int>(candidates.size()) < k) return false;
  for (int g : candidates) {
    if (g < 0 || g >= t.num_gpus()) return false;
  }
  return true;
}

}  // namespace

GpuSetChoice Topology::ChooseByBruteForce(const std::vector<int>& candidates_in,
                                          const std::vector<int>& idle, int k,
                                          TopologyObjective objective, double min_weight,
                                          const std::vector<int>& preference) const {
  std::vector<int> candidates = candidates_in;
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  if (!Usable(*this, candidates, k)) return GpuSetChoice{};
  Judge judge(*this, *impl_, MaskOf(idle), objective, min_weight, preference);
  Verdict best;
  const int c = static_cast<int>(candidates.size());
  std::vector<int> pick(k);
  for (int i = 0; i < k; ++i) pick[i] = i;
  std::vector<int> gpus(k);
  while (true) {
    for (int i = 0; i < k; ++i) gpus[i] = candidates[pick[i]];
    Verdict v = judge.Judge1(gpus);
    if (Better(v, best)) best = std::move(v);
    int i = k - 1;
    while (i >= 0 && pick[i] == c - k + i) --i;
    if (i < 0) break;
    ++pick[i];
    for (int j = i + 1; j < k; ++j) pick[j] = pick[j - 1] + 1;
  }
  return Result(best);
}

GpuSetChoice Topology::Choose(const std::vector<int>& candidates_in, const std::vector<int>& idle,
                              int k, TopologyObjective objective, double min_weight,
                              const std::vector<int>& preference) const {
  // Callers mostly pass sorted, distinct candidates (a fitting list): no copy.
  std::vector<int> sorted;
  const bool clean =
      std::is_sorted(candidates_in.begin(), candidates_in.end()) &&
      std::adjacent_find(candidates_in.begin(), candidates_in.end()) == candidates_in.end();
  if (!clean) {
    sorted = candidates_in;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  }
  const std::vector<int>& candidates = clean ? candidates_in : sorted;
  if (!Usable(*this, candidates, k)) return GpuSetChoice{};
  const uint64_t idle_mask = MaskOf(idle);

  // The memo key, built on the stack: a hit allocates nothing but the result.
  const uint64_t cand_mask = MaskOf(candidates);
  char stack[32 + sizeof(int) * 64];
  std::string heap;
  char* key = stack;
  const size_t need = 32 + sizeof(int) * preference.size();
  if (need > sizeof stack) {
    heap.resize(need);
    key = heap.data();
  }
  size_t size = 0;
  auto put = [&](const void* p, size_t n) {
    std::memcpy(key + size, p, n);
    size += n;
  };
  const int obj = static_cast<int>(objective);
  put(&cand_mask, sizeof cand_mask);
  put(&idle_mask, sizeof idle_mask);
  put(&k, sizeof k);
  put(&obj, sizeof obj);
  put(&min_weight, sizeof min_weight);
  for (int g : preference) put(&g, sizeof g);
  const absl::string_view key_view(key, size);
  {
    std::lock_guard<std::mutex> lock(impl_->memo_mutex);
    auto it = impl_->memo.find(key_view);
    if (it != impl_->memo.end()) return it->second;
  }

  Judge judge(*this, *impl_, idle_mask, objective, min_weight, preference);
  // Classes of interchangeable candidates: same twin class, same idle state;
  // each sorted by rank, so taking the first x of a class is the best pick.
  std::vector<std::pair<int, int>> keys;  // (twin, idle) per class.
  std::vector<std::vector<int>> classes;
  for (int g : candidates) {
    const std::pair<int, int> cls{impl_->twin[g], (idle_mask & Bit(g)) ? 1 : 0};
    auto it = std::find(keys.begin(), keys.end(), cls);
    if (it == keys.end()) {
      keys.push_back(cls);
      classes.push_back({g});
    } else {
      classes[it - keys.begin()].push_back(g);
    }
  }
  for (auto& cls : classes) {
    std::sort(cls.begin(), cls.end(),
              [&](int a, int b) { return judge.rank(a) < judge.rank(b); });
  }
  // The classes whose GPUs bring the most weight among themselves first
  // (twins share one link to each other), so that the first sets tried are
  // good ones: the answer does not depend on the order when the search ends
  // within its bounds, and is the best set found when it does not.
  auto inner = [&](const std::vector<int>& cls) {
    return cls.size() < 2 ? 0.0 : weight(cls[0], cls[1]) * static_cast<double>(cls.size() - 1);
  };
  std::stable_sort(classes.begin(), classes.end(),
                   [&](const std::vector<int>& a, const std::vector<int>& b) {
                     return inner(a) > inner(b);
                   });
  std::vector<int> after(classes.size() + 1, 0);  // Candidates in classes >= i.
  for (size_t i = classes.size(); i-- > 0;) {
    after[i] = after[i + 1] + static_cast<int>(classes[i].size());
  }
  Verdict best;
  std::vector<int> chosen;
  std::vector<int> gpus;
  // What the bound below needs of `chosen`, kept as the search goes: one
  // frame per class depth, made when the search enters it. The GPUs of a
  // class are twins, so each has the same links to every GPU outside the
  // class (the chosen ones among them): a class's links to `chosen` are its
  // first GPU's. Frame d, for classes >= d: gain[d * C + c], the sum of one
  // GPU of class c's links to `chosen`, and low[d * C + c], the weakest of
  // them (top_weight while `chosen` is empty); total[d], of the links among
  // `chosen`, and weakest[d], the weakest of them (top_weight while fewer
  // than two). On the stack for nodes of up to 8 classes.
  const double top_weight = weights_.Of(best_);
  const size_t num_classes = classes.size();
  const size_t frame_size = num_classes + 1;
  absl::InlinedVector<double, 2 * 9 * 8 + 2 * 9> frames(2 * frame_size * num_classes +
                                                        2 * frame_size);
  double* const gain = frames.data();
  double* const low = gain + frame_size * num_classes;
  double* const total = low + frame_size * num_classes;
  double* const weakest = total + frame_size;
  std::fill(low, low + num_classes, top_weight);
  weakest[0] = top_weight;
  // Frame cls + 1 from frame cls, with the first x GPUs of class cls chosen.
  auto descend = [&](size_t cls, int x) {
    const size_t from = cls * num_classes, to = from + num_classes;
    total[cls + 1] = total[cls];
    weakest[cls + 1] = weakest[cls];
    if (x == 0) {
      std::copy(gain + from + cls + 1, gain + to, gain + to + cls + 1);
      std::copy(low + from + cls + 1, low + to, low + to + cls + 1);
      return;
    }
    const int g = classes[cls][0];
    // The x new GPUs' links to the GPUs chosen before them (none: a gain of
    // 0 and a low of top_weight change nothing).
    total[cls + 1] += x * gain[from + cls];
    weakest[cls + 1] = std::min(weakest[cls + 1], low[from + cls]);
    if (x >= 2) {  // Their links to each other: one weight within a class.
      const double inner = weight(g, classes[cls][1]);
      total[cls + 1] += inner * (x * (x - 1) / 2);
      weakest[cls + 1] = std::min(weakest[cls + 1], inner);
    }
    for (size_t c = cls + 1; c < num_classes; ++c) {
      const double w = weight(classes[c][0], g);
      gain[to + c] = gain[from + c] + x * w;
      low[to + c] = std::min(low[from + c], w);
    }
  };
  // (gain, GPUs) of the classes left, for the bound; at most 64 GPUs.
  std::array<std::pair<double, int>, 64> gains;
  // Whether no completion of `chosen` with `need` GPUs of classes >= cls can
  // beat `best` on (primary, secondary), or meet min_weight: bounds on the
  // weakest pair (it only falls) and on the total (each new GPU adds at most
  // its links to `chosen` plus the best link to every other new GPU).
  auto hopeless = [&](size_t cls, int need) {
    double sum = total[cls], weakest_link = weakest[cls];
    double reach = 0;  // The best of the future GPUs' weakest link to `chosen`.
    size_t left_classes = 0;
    for (size_t c = cls; c < num_classes; ++c) {
      gains[left_classes++] = {gain[cls * num_classes + c], static_cast<int>(classes[c].size())};
      reach = std::max(reach, low[cls * num_classes + c]);
    }
    std::sort(gains.begin(), gains.begin() + left_classes, std::greater<>());
    int left = need;
    for (size_t i = 0; i < left_classes && left > 0; ++i) {
      const int take = std::min(left, gains[i].second);
      sum += take * gains[i].first;
      left -= take;
    }
    sum += top_weight * need * (need - 1) / 2;
    weakest_link = std::min(weakest_link, reach);
    if (weakest_link < min_weight) return true;
    if (!best.valid) return false;
    const double p = objective == TopologyObjective::kWeakestLink ? weakest_link : sum;
    const double q = objective == TopologyObjective::kWeakestLink ? sum : weakest_link;
    // A margin for rounding: sums taken in another order may differ slightly.
    auto below = [](double bound, double value) {
      return bound < value - 1e-9 * std::max(1.0, std::abs(value));
    };
    return below(p, best.primary) ||
           (!below(best.primary, p) && !below(p, best.primary) && below(q, best.secondary));
  };
  // Depth-first over how many GPUs each class gives (the first tries take
  // the most GPUs of the first classes), in at most kMaxChooseSteps steps
  // and kMaxChooseSets complete sets judged.
  int64_t steps = 0, sets = 0;
  auto visit = [&](auto&& self, size_t cls, int need) -> void {
    if (++steps > kMaxChooseSteps) return;
    if (need == 0) {
      if (++sets > kMaxChooseSets) return;
      gpus = chosen;
      std::sort(gpus.begin(), gpus.end());
      Verdict v = judge.Judge1(gpus);
      if (Better(v, best)) best = std::move(v);
      return;
    }
    if (cls == classes.size() || after[cls] < need) return;
    if (!chosen.empty() && k >= 2 && hopeless(cls, need)) return;
    const int most = std::min<int>(need, static_cast<int>(classes[cls].size()));
    for (int x = most; x >= 0; --x) {
      if (after[cls + 1] < need - x) break;
      for (int i = 0; i < x; ++i) chosen.push_back(classes[cls][i]);
      descend(cls, x);
      self(self, cls + 1, need - x);
      chosen.resize(chosen.size() - x);
    }
  };
  visit(visit, 0, k);
  GpuSetChoice result = Result(best);
  std::lock_guard<std::mutex> lock(impl_->memo_mutex);
  if (impl_->memo.size() >= kMaxMemo) impl_->memo.clear();
  impl_->memo.emplace(std::string(key_view), result);
  return result;
}

double Topology::IdealMeasure(int k, TopologyObjective objective) const {
  if (k < 2 || k > n_) return 0;
  std::atomic<double>& slot = impl_->ideal[static_cast<int>(objective)][k];
  double v = slot.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  std::vector<int> all(n_);
  for (int g = 0; g < n_; ++g) all[g] = g;
  v = MeasureOf(Choose(all, all, k, objective), objective);
  slot.store(v, std::memory_order_relaxed);  // Racing writers store the same value.
  return v;
}

}  // namespace gpushare
