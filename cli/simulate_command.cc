#include "cli/simulate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "gpushare/gpushare.h"
#include "src/internal/text.h"
#include "tools/flags/flags.h"

namespace gpushare::cli {
namespace {

constexpr char kUsage[] = "usage: gpushare simulate --nodes FILE --tasks FILE [flags]";
constexpr char kAbout[] =
    "\n"
    "Runs the FGD trace experiment (shuffle by seed, inflate, one attempt per task)\n"
    "for every policy and seed and prints unallocated GPU % at arrived 90/95/100/110%\n"
    "of GPU capacity, the fragmentation rate at 100% and the failed tasks, in total\n"
    "(mean +- standard deviation over seeds) and by kind (mean: CPU-only, GPU-sharing,\n"
    "one whole GPU, several whole GPUs), then why the GPUs idle at the end of the run\n"
    "are idle (% of capacity, mean over seeds; see UnallocatedBreakdown in\n"
    "gpushare/simulate.h). Seeds run in parallel.\n";
constexpr char kGroup[] = "Flags (--flag VALUE or --flag=VALUE)";
constexpr char kMigrationGroup[] = "Migration (a task that finds no node may move placed tasks)";

// Every flag of `gpushare simulate`, into `c`.
void DefineFlags(flags::FlagSet* f, SimulateConfig* c) {
  f->Add(kGroup, "--nodes", "FILE", "openb node CSV (sn,cpu_milli,memory_mib,gpu,model)",
         flags::SetString("--nodes", &c->nodes));
  f->Add(kGroup, "--tasks", "FILE", "openb task CSV", flags::SetString("--tasks", &c->tasks));
  AddExperimentFlags(f, kGroup, "--policies,--policy", &c->policies, &c->seeds, &c->threads);
  f->Add(kGroup, "--inflate", "X",
         absl::StrCat("total GPU request as a multiple of capacity\n(default ", c->inflate, ")"),
         flags::SetDouble("--inflate", &c->inflate));
  f->Add(kGroup, "--curve", "FILE",
         "write the per-bin curve as CSV (policy,seed,\n"
         "arrived_pct,unallocated_pct,frag_amount,frag_rate)",
         flags::SetString("--curve", &c->curve));
  f->AddSwitch(kGroup, "--markdown", "print the tables as markdown", &c->markdown);
  f->AddRepeated(kGroup, "--topology", "N=FILE|MODEL=FILE",
                 "attach the GPU topology in FILE (nvidia-smi topo -m\n"
                 "text or its JSON form) to every N-GPU node, or to\n"
                 "every node of GPU model MODEL with as many GPUs as\n"
                 "FILE has; repeatable, the first matching rule wins.\n"
                 "Then also prints how many multi-GPU tasks got the\n"
                 "best connectivity available on their node and their\n"
                 "weakest links (summed over seeds)",
                 [c](const char* v) -> std::string {
                   if (v == nullptr) return "--topology takes N=FILE or MODEL=FILE";
                   c->topologies.push_back(v);
                   return "";
                 });
  f->AddSwitch(kGroup, "--replay",
               "instead, replay the tasks by creation and deletion\n"
               "time (tasks leave; tie-break by the first seed) and\n"
               "print placed and failed tasks and the peak allocation",
               &c->replay);
  f->Add(kMigrationGroup, "--migrations", "LIST",
         "comma-separated migration budgets, each M moves per\n"
         "100 tasks attempted, accumulated (default 0: none).\n"
         "One row per policy and budget (M > 0 rows are named\n"
         "policy+mM and add moves made and tasks rescued, means)",
         [c](const char* v) -> std::string {
           if (v == nullptr) return "--migrations takes a value";
           std::vector<int> budgets;
           for (absl::string_view b : absl::StrSplit(v, ',', absl::SkipEmpty())) {
             int m = 0;
             if (!absl::SimpleAtoi(b, &m) || m < 0 || m > 10000) {
               return absl::StrCat("--migrations '", internal::Echo(b),
                                   "' is not a budget in 0..10000");
             }
             budgets.push_back(m);
           }
           if (budgets.empty()) {
             return absl::StrCat("--migrations '", internal::Echo(v), "' gives no budget");
           }
           c->migration_budgets = std::move(budgets);
           return "";
         });
  f->Add(kMigrationGroup, "--max-moves", "N",
         absl::StrCat("at most N moves for one task (default ", c->max_moves, ", 1..3)"),
         flags::SetInt("--max-moves", &c->max_moves));
  f->Add(kMigrationGroup, "--migration-nodes", "N",
         absl::StrCat("moved tasks come from the N nodes that need the\n"
                      "fewest tasks removed to take the task, among the 4N\n"
                      "that miss the least of it (default ",
                      c->migration_nodes, ")"),
         flags::SetInt("--migration-nodes", &c->migration_nodes));
  f->Add(kMigrationGroup, "--migration-search", "N",
         absl::StrCat("candidate moves the planner tries per task\n(default ",
                      c->migration_search, ")"),
         flags::SetInt("--migration-search", &c->migration_search));
}

struct Stats {
  double mean = 0, sd = 0;
};

Stats MeanSd(const std::vector<double>& xs) {
  Stats s;
  if (xs.empty()) return s;
  for (double x : xs) s.mean += x;
  s.mean /= static_cast<double>(xs.size());
  if (xs.size() > 1) {
    double v = 0;
    for (double x : xs) v += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(v / static_cast<double>(xs.size() - 1));
  }
  return s;
}

// The connectivity multi-GPU tasks got under one policy, over all seeds:
// "NV2 120 (60.0%), SYS 80 (40.0%)" style.
std::string ConnectivityRow(absl::string_view policy, const std::vector<SimulationResult>& runs,
                            bool markdown) {
  int64_t tasks = 0, best = 0;
  std::vector<std::pair<std::string, int64_t>> weakest;  // Best link first.
  for (const SimulationResult& r : runs) {
    tasks += r.topology_tasks;
    best += r.topology_best;
    for (const auto& [link, n] : r.topology_weakest) {
      auto it = std::find_if(weakest.begin(), weakest.end(),
                             [&](const auto& e) { return e.first == link; });
      if (it == weakest.end()) {
        weakest.emplace_back(link, n);
      } else {
        it->second += n;
      }
    }
  }
  std::stable_sort(weakest.begin(), weakest.end(), [](const auto& a, const auto& b) {
    absl::StatusOr<Link> x = ParseLink(a.first), y = ParseLink(b.first);
    return x.ok() && y.ok() && *y < *x;
  });
  const double denominator = static_cast<double>(std::max<int64_t>(tasks, 1));
  std::string links;
  for (const auto& [link, n] : weakest) {
    absl::StrAppend(&links, links.empty() ? "" : ", ", link, " ", n,
                    absl::StrFormat(" (%.1f%%)", 100.0 * static_cast<double>(n) / denominator));
  }
  const std::string share =
      absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(best) / denominator);
  if (markdown) {
    return absl::StrFormat("| %s | %d | %s | %s |\n", policy, tasks, share, links);
  }
  return absl::StrFormat("%-14s %8d tasks, best available %6s, weakest links: %s\n", policy,
                         tasks, share, links);
}

constexpr CommandFlags<SimulateConfig> kFlags = {"gpushare simulate", kUsage, kAbout, DefineFlags};

}  // namespace

absl::StatusOr<SimulateConfig> ParseSimulateFlags(int argc, const char* const* argv) {
  absl::StatusOr<SimulateConfig> parsed = kFlags.Parse(argc, argv);
  if (!parsed.ok() || parsed->help) return parsed;
  const SimulateConfig& c = *parsed;
  if (c.nodes.empty() || c.tasks.empty()) {
    return absl::InvalidArgumentError("--nodes and --tasks are required");
  }
  if (c.replay && *std::max_element(c.migration_budgets.begin(), c.migration_budgets.end()) > 0) {
    return absl::InvalidArgumentError("--replay does not migrate; drop --migrations");
  }
  return parsed;
}

std::string SimulateHelp() { return kFlags.Help(); }

int RunSimulate(int argc, char** argv) {
  const absl::StatusOr<SimulateConfig> parsed = ParseSimulateFlags(argc, argv);
  if (std::optional<int> code = ExitBeforeRunning("simulate", parsed.status(),
                                                  parsed.ok() && parsed->help, SimulateHelp)) {
    return *code;
  }
  const SimulateConfig& c = *parsed;
  std::vector<TopologyRule> topology_rules;
  for (const std::string& spec : c.topologies) {
    absl::StatusOr<TopologyRule> rule = LoadTopologyRule(spec);
    if (!rule.ok()) {
      std::cerr << "gpushare simulate: " << rule.status().message() << "\n";
      return 2;
    }
    topology_rules.push_back(*std::move(rule));
  }
  auto nodes = LoadOpenbNodes(c.nodes);
  if (!nodes.ok()) {
    std::cerr << "gpushare simulate: " << nodes.status().message() << "\n";
    return 1;
  }
  auto tasks = LoadOpenbTasks(c.tasks);
  if (!tasks.ok()) {
    std::cerr << "gpushare simulate: " << tasks.status().message() << "\n";
    return 1;
  }
  const std::vector<Request> requests = ToRequests(*tasks);
  if (c.replay) {
    std::vector<TimedRequest> timed;
    int64_t untimed = 0;
    for (const TraceTask& t : *tasks) {
      untimed += t.creation_time < 0;
      timed.push_back({ToRequest(t), std::max<int64_t>(t.creation_time, 0), t.deletion_time});
    }
    if (untimed > 0) {
      std::cerr << "gpushare simulate: " << untimed << " of " << tasks->size()
                << " tasks have no creation_time; they arrive at time 0\n";
    }
    std::printf("%-14s %8s %8s %14s %9s\n", "policy", "placed", "failed", "peak alloc %",
                "s/run");
    for (const std::string& name : c.policies) {
      SimulationOptions options;
      options.policy = name;
      options.seed = c.seeds.front();
      options.topologies = topology_rules;
      auto run = Replay(*nodes, timed, options);
      if (!run.ok()) {
        std::cerr << "gpushare simulate: " << run.status().message() << "\n";
        return 1;
      }
      std::printf("%-14s %8lld %8lld %14.2f %9.3f\n", name.c_str(),
                  static_cast<long long>(run->placed),
                  static_cast<long long>(run->failed.total()), run->peak_allocated_pct,
                  run->seconds);
    }
    return 0;
  }
  std::ofstream curve;
  if (!c.curve.empty()) {
    curve.open(c.curve);
    if (!curve) {
      std::cerr << "gpushare simulate: cannot write '" << c.curve << "'\n";
      return 1;
    }
    curve << "policy,seed,arrived_pct,unallocated_pct,frag_amount,frag_rate\n";
  }
  std::cout << absl::StrFormat("%d nodes, %d tasks, inflate %.2f, %d seeds\n", nodes->size(),
                               requests.size(), c.inflate, c.seeds.size());
  const bool migrating =
      *std::max_element(c.migration_budgets.begin(), c.migration_budgets.end()) > 0;
  if (c.markdown) {
    std::cout << "| policy | unalloc @90% | @95% | @100% | @110% | frag rate @100% | "
                 "failed tasks | failed cpu/share/1gpu/multi | s/run |"
              << (migrating ? " moves | rescued |" : "")
              << "\n|---|---|---|---|---|---|---|---|---|" << (migrating ? "---|---|" : "")
              << "\n";
  } else {
    std::printf("%-14s %14s %14s %14s %14s %14s %12s %22s %7s%s\n", "policy", "unalloc@90%",
                "@95%", "@100%", "@110%", "frag@100%", "failed", "cpu/share/1gpu/multi",
                "s/run", migrating ? "    moves  rescued" : "");
  }
  std::vector<std::string> connectivity;  // One row per policy, with topologies.
  std::vector<std::string> breakdown_rows;
  std::vector<std::pair<std::string, int>> rows;  // (policy, migration budget).
  for (const std::string& policy : c.policies) {
    for (int budget : c.migration_budgets) rows.emplace_back(policy, budget);
  }
  for (const auto& [policy, budget] : rows) {
    SimulationOptions options;
    options.policy = policy;
    options.inflate = c.inflate;
    options.topologies = topology_rules;
    options.migration_budget = budget;
    options.max_moves_per_request = c.max_moves;
    options.migration_nodes = c.migration_nodes;
    options.migration_search_budget = c.migration_search;
    const std::string name = budget > 0 ? absl::StrCat(policy, "+m", budget) : options.policy;
    auto runs = SimulateSeeds(*nodes, requests, options, c.seeds, c.threads);
    if (!runs.ok()) {
      std::cerr << "gpushare simulate: " << runs.status().message() << "\n";
      return 1;
    }
    std::vector<double> at[4], frag, failed, secs, moves, rescued;
    double by_kind[4] = {0, 0, 0, 0};
    double cause[5] = {0, 0, 0, 0, 0};
    const double points[4] = {90, 95, 100, 110};
    for (const SimulationResult& r : *runs) {
      for (int k = 0; k < 4; ++k) at[k].push_back(r.UnallocatedAt(points[k]));
      frag.push_back(100 * r.FragRateAt(100));
      failed.push_back(static_cast<double>(r.failed.total()));
      by_kind[0] += static_cast<double>(r.failed.cpu_only);
      by_kind[1] += static_cast<double>(r.failed.shared);
      by_kind[2] += static_cast<double>(r.failed.one_gpu);
      by_kind[3] += static_cast<double>(r.failed.multi_gpu);
      const int64_t causes[5] = {r.unallocated.gpu_shape, r.unallocated.cpu,
                                 r.unallocated.host_memory, r.unallocated.gpu_model,
                                 r.unallocated.placeable};
      for (int k = 0; k < 5; ++k) {
        cause[k] += 100.0 * static_cast<double>(causes[k]) /
                    static_cast<double>(std::max<int64_t>(r.gpu_capacity, 1));
      }
      secs.push_back(r.seconds);
      moves.push_back(static_cast<double>(r.migrations));
      rescued.push_back(static_cast<double>(r.rescued));
      for (size_t b = 0; curve.is_open() && b < r.arrived_pct.size(); ++b) {
        curve << absl::StrFormat("%s,%d,%d,%.4f,%.2f,%.6f\n", r.policy, r.seed, r.arrived_pct[b],
                                 r.unallocated_pct[b], r.frag_amount[b], r.frag_rate[b]);
      }
    }
    std::string cells[7];
    for (int k = 0; k < 4; ++k) {
      const Stats s = MeanSd(at[k]);
      cells[k] = absl::StrFormat("%.2f ± %.2f", s.mean, s.sd);
    }
    const Stats f = MeanSd(frag), fl = MeanSd(failed);
    cells[4] = absl::StrFormat("%.1f%% ± %.1f", f.mean, f.sd);
    cells[5] = absl::StrFormat("%.0f ± %.0f", fl.mean, fl.sd);
    const double n = static_cast<double>(runs->size());
    cells[6] = absl::StrFormat("%.0f/%.0f/%.0f/%.0f", by_kind[0] / n, by_kind[1] / n,
                               by_kind[2] / n, by_kind[3] / n);
    const double per_run = MeanSd(secs).mean;
    const double total = cause[0] + cause[1] + cause[2] + cause[3] + cause[4];
    breakdown_rows.push_back(
        c.markdown ? absl::StrFormat("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name,
                                   cause[0] / n, cause[1] / n, cause[2] / n, cause[3] / n,
                                   cause[4] / n, total / n)
                 : absl::StrFormat("%-14s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", name,
                                   cause[0] / n, cause[1] / n, cause[2] / n, cause[3] / n,
                                   cause[4] / n, total / n));
    const std::string moved =
        !migrating ? ""
        : c.markdown ? absl::StrFormat(" %.1f | %.1f |", MeanSd(moves).mean, MeanSd(rescued).mean)
                   : absl::StrFormat(" %8.1f %8.1f", MeanSd(moves).mean, MeanSd(rescued).mean);
    if (c.markdown) {
      std::cout << absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s | %.3f |%s\n", name,
                                   cells[0], cells[1], cells[2], cells[3], cells[4], cells[5],
                                   cells[6], per_run, moved);
    } else {
      // "±" is two bytes: widen the fields by one.
      std::printf("%-14s %15s %15s %15s %15s %15s %13s %22s %7.3f%s\n", name.c_str(),
                  cells[0].c_str(), cells[1].c_str(), cells[2].c_str(), cells[3].c_str(),
                  cells[4].c_str(), cells[5].c_str(), cells[6].c_str(), per_run, moved.c_str());
    }
    std::fflush(stdout);
    if (!topology_rules.empty()) connectivity.push_back(ConnectivityRow(name, *runs, c.markdown));
  }
  if (!connectivity.empty()) {
    std::cout << "\nmulti-GPU tasks on nodes with a topology, summed over seeds: how many got "
                 "the best connectivity available on their node, and their weakest links\n";
    if (c.markdown) {
      std::cout << "| policy | multi-GPU tasks | best available | weakest links |\n"
                   "|---|---|---|---|\n";
    }
    for (const std::string& line : connectivity) std::cout << line;
  }
  std::cout << absl::StrFormat("\nidle GPUs at the end of the run by cause, %% of capacity "
                               "(inflate %.2f):\n", c.inflate);
  if (c.markdown) {
    std::cout << "| policy | gpu shape | cpu | host memory | gpu model | placeable | total |\n"
                 "|---|---|---|---|---|---|---|\n";
  } else {
    std::printf("%-14s %10s %10s %10s %10s %10s %10s\n", "policy", "gpu shape", "cpu",
                "host mem", "gpu model", "placeable", "total");
  }
  for (const std::string& row : breakdown_rows) std::cout << row;
  return 0;
}

}  // namespace gpushare::cli
