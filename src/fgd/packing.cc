#include "src/fgd/packing.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>

namespace gpushare::fgd {
namespace {

constexpr double kPivotEps = 1e-9;  // Smallest pivot element taken.
constexpr double kGainEps = 1e-9;
constexpr double kZeroEps = 1e-12;  // Tableau entries below this are zeroed.
// A budget that bounds the solve whatever the target, in multiply-adds of
// the simplex's pivots and the knapsack's rounds (about a third of a second
// here): past it, the prices found so far are scaled down until no pattern
// is worth more than a GPU, still a feasible dual, maybe not the optimal
// one. The openb target needs under 1% of it.
constexpr int64_t kMaxWork = 300'000'000;
// The LP's dual has many optima (shares that only fill holes can be priced
// anywhere from 0 up); the objective is tilted by this much, relative, per
// unit of share / full towards pricing the larger shares, so that among
// the optima the one that prices hole-fillers lowest is found.
constexpr double kTilt = 1e-7;

// max c.y s.t. rows . y <= 1, y >= 0, by a dense tableau simplex from the
// slack basis (feasible, as every right-hand side is 1) with Bland's rule,
// which cannot cycle on these degenerate LPs. The LP is bounded: every item
// has a row of its own with a positive coefficient.
// `work` counts the multiply-adds of the pivots; the solve stops (with the
// feasible basis it has) once it reaches kMaxWork.
std::vector<double> MaximiseUnderPatterns(const std::vector<double>& c,
                                          const std::vector<std::vector<int>>& rows,
                                          int64_t* work) {
  const size_t n = c.size(), m = rows.size(), cols = n + m;
  std::vector<std::vector<double>> t(m, std::vector<double>(cols + 1, 0.0));
  std::vector<size_t> basis(m);
  for (size_t r = 0; r < m; ++r) {
    for (size_t j = 0; j < n; ++j) t[r][j] = rows[r][j];
    t[r][n + r] = 1;
    t[r][cols] = 1;
    basis[r] = n + r;
  }
  std::vector<double> gain(cols, 0.0);  // Reduced costs of the objective.
  for (size_t j = 0; j < n; ++j) gain[j] = c[j];
  for (; *work < kMaxWork; *work += static_cast<int64_t>((m + 1) * (cols + 1))) {
    size_t enter = cols;
    for (size_t j = 0; j < cols; ++j) {
      if (gain[j] > kGainEps) {
        enter = j;
        break;
      }
    }
    if (enter == cols) break;
    size_t leave = m;
    double best_ratio = 0;
    for (size_t r = 0; r < m; ++r) {
      if (t[r][enter] <= kPivotEps) continue;
      const double ratio = t[r][cols] / t[r][enter];
      if (leave == m || ratio < best_ratio - kPivotEps ||
          (ratio <= best_ratio + kPivotEps && basis[r] < basis[leave])) {
        leave = r;
        best_ratio = ratio;
      }
    }
    if (leave == m) break;  // Unbounded: cannot happen (see above).
    const double pivot = t[leave][enter];
    for (double& v : t[leave]) v /= pivot;
    for (size_t r = 0; r < m; ++r) {
      if (r == leave || t[r][enter] == 0) continue;
      const double f = t[r][enter];
      for (size_t j = 0; j <= cols; ++j) {
        t[r][j] -= f * t[leave][j];
        if (std::abs(t[r][j]) < kZeroEps) t[r][j] = 0;
      }
    }
    const double f = gain[enter];
    for (size_t j = 0; j < cols; ++j) {
      gain[j] -= f * t[leave][j];
      if (std::abs(gain[j]) < kZeroEps) gain[j] = 0;
    }
    basis[leave] = enter;
  }
  std::vector<double> y(n, 0.0);
  for (size_t r = 0; r < m; ++r) {
    if (basis[r] < n) y[basis[r]] = std::max(0.0, t[r][cols]);
  }
  return y;
}

// Unbounded knapsack over capacities 0..cells (shares in cells): best[k] =
// the largest total price of a multiset within k cells; take[k] = the item
// added last to reach it (-1: best[k] = best[k - 1] or empty).
void Knapsack(const std::vector<int64_t>& cells_of, const std::vector<double>& price,
              int64_t cells, std::vector<double>* best, std::vector<int>* take) {
  best->assign(cells + 1, 0.0);
  take->assign(cells + 1, -1);
  for (int64_t k = 1; k <= cells; ++k) {
    (*best)[k] = (*best)[k - 1];
    for (size_t i = 0; i < cells_of.size(); ++i) {
      if (cells_of[i] > k) continue;
      const double v = (*best)[k - cells_of[i]] + price[i];
      if (v > (*best)[k] + kPivotEps) {
        (*best)[k] = v;
        (*take)[k] = static_cast<int>(i);
      }
    }
  }
}

}  // namespace

PackingValues SolvePacking(const std::vector<PackingItem>& items, int64_t full) {
  PackingValues out;
  out.full = full;
  if (full <= 1 || full > kMaxPackingFull) return out;
  std::map<int64_t, double> merged;
  double total = 0;
  for (const PackingItem& item : items) {
    if (item.share >= 1 && item.share < full && item.weight > 0 && std::isfinite(item.weight)) {
      merged[item.share] += item.weight;
      total += item.weight;
    }
  }
  if (merged.empty() || !std::isfinite(total)) return out;
  // Every multiset's total is a multiple of the shares' gcd, so the knapsack
  // runs on cells of that size.
  int64_t cell = full;
  for (const auto& [share, weight] : merged) {
    out.items.push_back(PackingItem{share, weight});
    cell = std::gcd(cell, share);
  }
  const size_t n = out.items.size();
  const int64_t cells = full / cell;  // Floor: a GPU holds no more.
  std::vector<int64_t> cells_of(n);
  std::vector<double> weight(n);
  std::vector<std::vector<int>> rows;
  for (size_t i = 0; i < n; ++i) {
    cells_of[i] = out.items[i].share / cell;
    // Normalised (the prices do not depend on the weights' scale, the
    // tolerances do), and tilted.
    weight[i] = out.items[i].weight / total *
                (1 + kTilt * static_cast<double>(out.items[i].share) / static_cast<double>(full));
    std::vector<int> row(n, 0);
    row[i] = static_cast<int>(full / out.items[i].share);
    rows.push_back(std::move(row));
  }
  std::vector<double> best;
  std::vector<int> take;
  int64_t work = 0;
  for (;;) {
    out.price = MaximiseUnderPatterns(weight, rows, &work);
    Knapsack(cells_of, out.price, cells, &best, &take);
    work += cells * static_cast<int64_t>(n);
    if (work >= kMaxWork) break;
    if (best[cells] <= 1 + kGainEps) {
      out.optimal = true;
      break;
    }
    // The most valuable pattern breaks a constraint: add it (unless
    // rounding let a pattern already there look broken: then stop).
    std::vector<int> row(n, 0);
    for (int64_t k = cells; k > 0;) {
      if (take[k] < 0) {
        --k;
        continue;
      }
      ++row[take[k]];
      k -= cells_of[take[k]];
    }
    if (std::find(rows.begin(), rows.end(), row) != rows.end()) break;
    rows.push_back(std::move(row));
  }
  if (best[cells] > 1) {
    // The budget ran out (or rounding): scale to a feasible dual.
    const double scale = 1 / best[cells];
    for (double& y : out.price) y *= scale;
    Knapsack(cells_of, out.price, cells, &best, &take);
  }
  out.patterns = static_cast<int>(rows.size());
  out.gpus_per_weight = 0;
  for (size_t i = 0; i < n; ++i) out.gpus_per_weight += out.items[i].weight * out.price[i];
  out.value.resize(full + 1);
  for (int64_t g = 0; g <= full; ++g) out.value[g] = best[std::min(g / cell, cells)];
  return out;
}

std::shared_ptr<const PackingValues> SharedPacking(const std::vector<PackingItem>& items,
                                                   int64_t full) {
  using Key = std::pair<int64_t, std::vector<std::pair<int64_t, double>>>;
  static constexpr size_t kKept = 64;
  static std::mutex mu;
  static auto* solved = new std::map<Key, std::shared_ptr<const PackingValues>>();
  static auto* order = new std::deque<Key>();  // Oldest first.
  // The items SolvePacking() reads: a NaN weight in the key would break the
  // map's ordering (it compares equal to every weight) and serve another
  // target's values.
  Key key{full, {}};
  for (const PackingItem& item : items) {
    if (item.weight > 0 && std::isfinite(item.weight)) {
      key.second.emplace_back(item.share, item.weight);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = solved->find(key);
    if (it != solved->end()) return it->second;
  }
  // Solved outside the lock: two threads may both solve the same items once;
  // the results are identical.
  auto values = std::make_shared<const PackingValues>(SolvePacking(items, full));
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = solved->emplace(key, values);
  if (inserted) {
    order->push_back(key);
    if (order->size() > kKept) {
      solved->erase(order->front());
      order->pop_front();
    }
  }
  return it->second;
}

}  // namespace gpushare::fgd
