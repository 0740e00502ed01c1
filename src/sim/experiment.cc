// Simulate(), SimulateSeeds() and Replay(): the experiment of the FGD paper
// and the time-driven replay, on the engines of src/sim/engine.h.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/policy.h"
#include "gpushare/simulate.h"
#include "src/internal/status_macros.h"
#include "src/sim/breakdown.h"
#include "src/sim/engine.h"

namespace gpushare {
namespace {

// SplitMix64: the same stream on every platform, so runs are reproducible.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

void CountFailure(sim::TaskClass c, FailureCounts* f) {
  switch (c) {
    case sim::TaskClass::kCpuOnly: ++f->cpu_only; break;
    case sim::TaskClass::kShared: ++f->shared; break;
    case sim::TaskClass::kOneGpu: ++f->one_gpu; break;
    case sim::TaskClass::kMultiGpu: ++f->multi_gpu; break;
  }
}

absl::StatusOr<std::unique_ptr<Policy>> MakeRunPolicy(const sim::Prepared& p,
                                                      const SimulationOptions& options) {
  PolicyOptions po;
  po.seed = options.seed;
  po.fgd_target = p.target;
  return MakePolicy(options.policy, po);
}

double ReadCurve(const std::vector<double>& ys, double x) {
  if (ys.empty() || std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  if (x <= 0) return ys.front();
  const double last = static_cast<double>(ys.size() - 1);
  if (x >= last) return ys.back();
  const size_t i = static_cast<size_t>(x);
  const double frac = x - static_cast<double>(i);
  return ys[i] + frac * (ys[i + 1] - ys[i]);
}

// The migration step after request k (task `task`, slot k) found no node:
// moves within the budget earned so far (SimulationOptions::
// migration_budget), then the request again. Records where moved requests
// are now and the request's own place; returns its node, `gpus` its GPUs.
int Migrate(const SimulationOptions& options, int task, size_t k, sim::Engine& engine,
            uint64_t* gpus, SimulationResult* r, std::vector<uint64_t>* touched) {
  const int64_t earned = static_cast<int64_t>(k + 1) * options.migration_budget / 100;
  const int64_t left = earned - r->migrations;
  if (left <= 0) return -1;
  sim::MoveLimits limits;
  limits.max_moves = static_cast<int>(std::min<int64_t>(left, options.max_moves_per_request));
  limits.nodes = options.migration_nodes;
  limits.search_budget = options.migration_search_budget;
  ++r->migration_plans;
  std::vector<sim::Engine::Moved> moved;
  const int node = engine.PlaceMoving(task, static_cast<int64_t>(k), limits, gpus, &moved);
  r->migrations += static_cast<int64_t>(moved.size());
  for (const sim::Engine::Moved& m : moved) {
    r->node_of_request[m.slot] = m.node;
    r->gpus_of_request[m.slot] = m.gpus;
    (*touched)[m.node] |= m.gpus;
  }
  if (node >= 0) {
    ++r->rescued;
    r->node_of_request[k] = node;
    r->gpus_of_request[k] = *gpus;
  }
  return node;
}

absl::StatusOr<SimulationResult> Run(const sim::Prepared& p, const SimulationOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy, MakeRunPolicy(p, options));
  // Moving placed tasks needs the Cluster (the specialised engine cannot).
  const bool through_cluster = options.through_cluster || options.migration_budget > 0;
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<sim::Engine> engine,
                            sim::MakeEngine(p, *policy, options.seed, through_cluster));
  // The order: the shuffled requests, then samples until the inflation target.
  const size_t n = p.tasks.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  Rng rng(options.seed);
  if (options.shuffle) {
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  }
  int64_t total = 0;
  for (const sim::Task& t : p.tasks) total += t.gpu_request;
  const double goal = options.inflate * static_cast<double>(p.gpu_capacity);
  if (total > 0) {
    while (static_cast<double>(total) < goal) {
      const int k = static_cast<int>(rng.Below(n));
      order.push_back(k);
      total += p.tasks[k].gpu_request;
    }
  }

  SimulationResult r;
  r.policy = options.policy;
  r.seed = options.seed;
  r.gpu_capacity = p.gpu_capacity;
  r.requests = static_cast<int64_t>(order.size());
  r.node_of_request.reserve(order.size());
  r.gpus_of_request.reserve(order.size());
  r.arrived_after.reserve(order.size());
  r.allocated_after.reserve(order.size());
  r.frag_amount_after.reserve(order.size());
  r.frag_rate_after.reserve(order.size());
  const double capacity = static_cast<double>(std::max<int64_t>(p.gpu_capacity, 1));
  auto record = [&](int bin) {
    while (static_cast<int>(r.arrived_pct.size()) <= bin) {
      r.arrived_pct.push_back(static_cast<int>(r.arrived_pct.size()));
      const double allocated = static_cast<double>(engine->allocated());
      const double idle = capacity - allocated;
      r.unallocated_pct.push_back(100.0 - 100.0 * allocated / capacity);
      r.frag_amount.push_back(engine->frag());
      r.frag_rate.push_back(idle > 0 ? engine->frag() / idle : 0.0);
    }
  };
  int64_t arrived = 0;
  // GPUs each node has handed out so far (tasks never leave here), to judge
  // the connectivity multi-GPU tasks get on nodes with a topology.
  std::vector<uint64_t> touched(p.nodes->size(), 0);
  std::map<Link, int64_t> weakest;
  for (size_t k = 0; k < order.size(); ++k) {
    const sim::Task& t = p.tasks[order[k]];
    // Bins below the arrived request with this one hold the state before it.
    arrived += t.gpu_request;
    const int bin = static_cast<int>(std::ceil(100.0 * static_cast<double>(arrived) / capacity));
    if (bin > 0) record(bin - 1);
    uint64_t gpus = 0;
    int node = engine->Place(order[k], static_cast<int64_t>(k), &gpus);
    r.node_of_request.push_back(node);
    r.gpus_of_request.push_back(gpus);
    if (node < 0 && options.migration_budget > 0) {
      node = Migrate(options, order[k], k, *engine, &gpus, &r, &touched);
    }
    if (node >= 0) {
      const TopologyPtr& topology = (*p.nodes)[node].topology;
      if (topology != nullptr && __builtin_popcountll(gpus) >= 2) {
        std::vector<int> idle, chosen;
        for (int g = 0; g < topology->num_gpus(); ++g) {
          if (!(touched[node] >> g & 1)) idle.push_back(g);
          if (gpus >> g & 1) chosen.push_back(g);
        }
        const GpuSetChoice best = topology->Choose(idle, idle, static_cast<int>(chosen.size()),
                                                   TopologyObjective::kWeakestLink);
        ++r.topology_tasks;
        const GpuSetChoice got = topology->Rate(chosen);
        if (got.weakest_weight >= best.weakest_weight) ++r.topology_best;
        ++weakest[got.weakest];
      }
      touched[node] |= gpus;
    }
    const int64_t allocated = engine->allocated();
    const double idle = capacity - static_cast<double>(allocated);
    r.arrived_after.push_back(arrived);
    r.allocated_after.push_back(allocated);
    r.frag_amount_after.push_back(engine->frag());
    r.frag_rate_after.push_back(idle > 0 ? engine->frag() / idle : 0.0);
    if (node >= 0) {
      ++r.placed;
    } else {
      CountFailure(t.task_class, &r.failed);
    }
  }
  record(static_cast<int>(std::floor(100.0 * static_cast<double>(arrived) / capacity)));
  for (auto it = weakest.rbegin(); it != weakest.rend(); ++it) {
    r.topology_weakest.emplace_back(LinkName(it->first), it->second);
  }
  r.unallocated = sim::ClassifyUnallocated(p, order, r.node_of_request, r.gpus_of_request);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

absl::Status CheckOptions(const SimulationOptions& options) {
  if (!(options.inflate >= 0 && options.inflate <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("inflate ", options.inflate, " is outside [0, 100]"));
  }
  if (options.migration_budget < 0 || options.migration_budget > 10000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migration budget ", options.migration_budget, " is outside 0..10000 moves per 100"));
  }
  if (options.max_moves_per_request < 1 || options.max_moves_per_request > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max moves per request ", options.max_moves_per_request, " is outside 1..3"));
  }
  if (options.migration_nodes < 1 || options.migration_nodes > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migration nodes ", options.migration_nodes, " is outside 1..1000000"));
  }
  if (options.migration_search_budget < 1 ||
      options.migration_search_budget > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migration search budget ", options.migration_search_budget, " is outside 1..2^40"));
  }
  return MakePolicy(options.policy).status();
}

// `nodes`, or copies with options.topologies attached (kept in `*storage`).
const std::vector<Node>& WithTopologies(const std::vector<Node>& nodes,
                                        const SimulationOptions& options,
                                        std::vector<Node>* storage) {
  if (options.topologies.empty()) return nodes;
  *storage = AttachTopologies(nodes, options.topologies);
  return *storage;
}

}  // namespace

double SimulationResult::UnallocatedAt(double arrived) const {
  return ReadCurve(unallocated_pct, arrived);
}

double SimulationResult::FragRateAt(double arrived) const {
  return ReadCurve(frag_rate, arrived);
}

absl::StatusOr<SimulationResult> Simulate(const std::vector<Node>& nodes,
                                          const std::vector<Request>& requests,
                                          const SimulationOptions& options) {
  GPUSHARE_RETURN_IF_ERROR(CheckOptions(options));
  std::vector<Node> attached;  // Outlives `p`, which points to its nodes.
  GPUSHARE_ASSIGN_OR_RETURN(
      std::shared_ptr<const sim::Prepared> p,
      sim::Prepare(WithTopologies(nodes, options, &attached), requests, options.target));
  return Run(*p, options);
}

absl::StatusOr<std::vector<SimulationResult>> SimulateSeeds(
    const std::vector<Node>& nodes, const std::vector<Request>& requests,
    const SimulationOptions& options, const std::vector<uint64_t>& seeds, int threads) {
  if (seeds.empty()) return absl::InvalidArgumentError("no seeds to simulate");
  GPUSHARE_RETURN_IF_ERROR(CheckOptions(options));
  std::vector<Node> attached;  // Outlives `p`, which points to its nodes.
  GPUSHARE_ASSIGN_OR_RETURN(
      std::shared_ptr<const sim::Prepared> p,
      sim::Prepare(WithTopologies(nodes, options, &attached), requests, options.target));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(seeds.size()));
  std::vector<absl::StatusOr<SimulationResult>> results(seeds.size(),
                                                        absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t i = next++; i < seeds.size(); i = next++) {
      SimulationOptions o = options;
      o.seed = seeds[i];
      results[i] = Run(*p, o);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::vector<SimulationResult> out;
  out.reserve(seeds.size());
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return out;
}

absl::StatusOr<ReplayResult> Replay(const std::vector<Node>& nodes,
                                    const std::vector<TimedRequest>& requests,
                                    const SimulationOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  GPUSHARE_RETURN_IF_ERROR(CheckOptions(options));
  if (options.migration_budget > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migration budget ", options.migration_budget, ": replay does not migrate"));
  }
  std::vector<Request> plain;
  plain.reserve(requests.size());
  for (const TimedRequest& t : requests) {
    if (t.end >= 0 && t.end < t.start) {
      return absl::InvalidArgumentError(absl::StrCat("request '", t.request.id, "' ends at ",
                                                     t.end, " before it starts at ", t.start));
    }
    plain.push_back(t.request);
  }
  std::vector<Node> attached;  // Outlives `p`, which points to its nodes.
  GPUSHARE_ASSIGN_OR_RETURN(std::shared_ptr<const sim::Prepared> p,
                            sim::Prepare(WithTopologies(nodes, options, &attached), plain,
                                         options.target));
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy, MakeRunPolicy(*p, options));
  GPUSHARE_ASSIGN_OR_RETURN(std::unique_ptr<sim::Engine> engine,
                            sim::MakeEngine(*p, *policy, options.seed, options.through_cluster));
  // Events: (time, 0 = departure / 1 = arrival, request index).
  std::vector<std::tuple<int64_t, int, size_t>> events;
  events.reserve(2 * requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    events.emplace_back(requests[i].start, 1, i);
    if (requests[i].end >= 0) events.emplace_back(requests[i].end, 0, i);
  }
  std::sort(events.begin(), events.end());
  ReplayResult r;
  r.policy = options.policy;
  r.gpu_capacity = p->gpu_capacity;
  r.requests = static_cast<int64_t>(requests.size());
  const double capacity = static_cast<double>(std::max<int64_t>(p->gpu_capacity, 1));
  std::vector<uint8_t> arrived(requests.size(), 0);
  int64_t requested = 0;
  for (const auto& [time, kind, i] : events) {
    const sim::Task& t = p->tasks[i];
    if (kind == 0) {
      if (!arrived[i]) continue;  // Departs before it arrives: never present.
      requested -= t.gpu_request;
      engine->Release(static_cast<int64_t>(i));
      continue;
    }
    arrived[i] = 1;
    requested += t.gpu_request;
    uint64_t gpus = 0;
    if (engine->Place(static_cast<int>(i), static_cast<int64_t>(i), &gpus) >= 0) {
      ++r.placed;
    } else {
      CountFailure(t.task_class, &r.failed);
    }
    if (requests[i].end == requests[i].start) {
      // Its departure sorted before its arrival and found nothing to
      // remove: a zero-length task leaves right after its attempt.
      requested -= t.gpu_request;
      engine->Release(static_cast<int64_t>(i));
    }
    const double allocated = static_cast<double>(engine->allocated());
    r.time.push_back(time);
    r.requested_pct.push_back(100.0 * static_cast<double>(requested) / capacity);
    r.allocated_pct.push_back(100.0 * allocated / capacity);
    r.frag_rate.push_back(capacity > allocated ? engine->frag() / (capacity - allocated) : 0.0);
    r.peak_allocated_pct = std::max(r.peak_allocated_pct, r.allocated_pct.back());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace gpushare
