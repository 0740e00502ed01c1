#include "cli/sweep_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "gpushare/gpushare.h"

namespace gpushare::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpushare sweep --nodes FILE [options] TASKS.csv...\n"
    "\n"
    "Runs the FGD trace experiment for every task file x policy x seed and writes\n"
    "CSV: trace,policy,seed,arrived,unallocated,frag_amount,frag_rate, one row per\n"
    "run and 1% step of arrived GPU request (% of GPU capacity), unallocated in %\n"
    "of GPUs, frag_amount in thousandths of a GPU, frag_rate 0..1. A trace is named\n"
    "by its file name without 'openb_pod_list_' and '.csv'. Rows come in the order\n"
    "of the task files, policies and seeds given. Every argument and file is\n"
    "checked before the first run. Progress goes to stderr when it is a terminal.\n"
    "\n"
    "options:\n"
    "  --nodes FILE       openb node CSV (sn,cpu_milli,memory_mib,gpu,model)\n"
    "  --tasks FILE       an openb task CSV (repeatable; or list them at the end)\n"
    "  --policies LIST    comma-separated policy names (default: the six FGD-paper\n"
    "                     policies fgd,bestfit,dotprod,gpupacking,gpuclustering,random)\n"
    "  --seeds A-B|A,B,.. seeds, each at most once, at most 10000 (default 42-51)\n"
    "  --inflate X        total GPU request as a multiple of capacity (default 1.3)\n"
    "  --threads N        worker threads (default: all cores)\n"
    "  --out FILE         write the CSV to FILE (default: standard output)\n"
    "  --progress / --no-progress\n"
    "                     force the progress line on stderr on or off\n";

// "openb_pod_list_default.csv" -> "default"; the label of gs.sweep() too.
std::string TraceLabel(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (absl::EndsWith(name, ".csv")) name.resize(name.size() - 4);
  if (absl::StartsWith(name, "openb_pod_list_")) name = name.substr(15);
  return name;
}

}  // namespace

int RunSweep(int argc, char** argv) {
  SplitArgs split;
  if (!SplitFlagValues("sweep", {"--help", "--progress", "--no-progress"}, &argc, &argv, &split)) {
    return 2;
  }
  std::string nodes_path, out_path;
  std::vector<std::string> task_paths;
  std::string policies = kPaperPolicies;
  std::string seeds_text = "42-51";
  double inflate = 1.3;
  int threads = 0;
  int progress = -1;  // -1: when stderr is a terminal.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--progress") {
      progress = 1;
    } else if (arg == "--no-progress") {
      progress = 0;
    } else if (arg == "--nodes" && value(&v)) {
      nodes_path = v;
    } else if (arg == "--tasks" && value(&v)) {
      task_paths.push_back(v);
    } else if (arg == "--policies" && value(&v)) {
      policies = v;
    } else if (arg == "--seeds" && value(&v)) {
      seeds_text = v;
    } else if (arg == "--out" && value(&v)) {
      out_path = v;
    } else if (arg == "--inflate" && value(&v)) {
      if (!absl::SimpleAtod(v, &inflate) || !(inflate >= 0 && inflate <= 100)) {
        std::cerr << "gpushare sweep: --inflate '" << v << "' is not a number in [0, 100]\n";
        return 2;
      }
    } else if (arg == "--threads" && value(&v)) {
      if (!absl::SimpleAtoi(v, &threads) || threads < 0) {
        std::cerr << "gpushare sweep: --threads '" << v << "' is not a count\n";
        return 2;
      }
    } else if (!arg.empty() && arg[0] != '-') {
      task_paths.push_back(arg);
    } else {
      std::cerr << "gpushare sweep: unknown or incomplete option '" << arg << "'\n" << kUsage;
      return 2;
    }
  }
  if (nodes_path.empty() || task_paths.empty()) {
    std::cerr << "gpushare sweep: --nodes and at least one task file are required\n" << kUsage;
    return 2;
  }
  std::vector<std::string> names;
  if (std::string error = ParsePolicies(policies, &names); !error.empty()) {
    std::cerr << "gpushare sweep: " << error << "\n";
    return 2;
  }
  std::vector<uint64_t> seeds;
  if (std::string error = ParseSeeds(seeds_text, &seeds); !error.empty()) {
    std::cerr << "gpushare sweep: " << error << "\n";
    return 2;
  }
  // Every file is read before the first run: a typo in the last one fails
  // at once, not after hours.
  auto nodes = LoadOpenbNodes(nodes_path);
  if (!nodes.ok()) {
    std::cerr << "gpushare sweep: " << nodes.status().message() << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::vector<Request>>> traces;
  for (const std::string& path : task_paths) {
    const std::string label = TraceLabel(path);
    for (const auto& t : traces) {
      if (t.first == label) {
        std::cerr << "gpushare sweep: two task files are named '" << label << "'\n";
        return 2;
      }
    }
    auto tasks = LoadOpenbTasks(path);
    if (!tasks.ok()) {
      std::cerr << "gpushare sweep: " << tasks.status().message() << "\n";
      return 1;
    }
    traces.emplace_back(label, ToRequests(*tasks));
  }
  std::ofstream file;
  if (!out_path.empty()) {
    file.open(out_path);
    if (!file) {
      std::cerr << "gpushare sweep: cannot write '" << out_path << "'\n";
      return 1;
    }
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  const bool show = progress == 1 || (progress == -1 && isatty(STDERR_FILENO) == 1);
  const size_t total = traces.size() * names.size() * seeds.size();
  size_t done = 0;
  auto report = [&](const std::string& now) {
    if (!show) return;
    std::fprintf(stderr, "\rsweep: %zu/%zu runs (%3.0f%%) %-40s", done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), now.c_str());
    std::fflush(stderr);
  };
  out << "trace,policy,seed,arrived,unallocated,frag_amount,frag_rate\n";
  for (const auto& [label, requests] : traces) {
    for (const std::string& policy : names) {
      report(label + " " + policy);
      SimulationOptions options;
      options.policy = policy;
      options.inflate = inflate;
      auto runs = SimulateSeeds(*nodes, requests, options, seeds, threads);
      if (!runs.ok()) {
        if (show) std::fputc('\n', stderr);
        std::cerr << "gpushare sweep: " << label << ", " << policy << ": "
                  << runs.status().message() << "\n";
        return 1;
      }
      for (const SimulationResult& r : *runs) {
        for (size_t b = 0; b < r.arrived_pct.size(); ++b) {
          // %.17g: the doubles of gs.simulate, exactly.
          out << absl::StrFormat("%s,%s,%d,%d,%.17g,%.17g,%.17g\n", label, r.policy, r.seed,
                                 r.arrived_pct[b], r.unallocated_pct[b], r.frag_amount[b],
                                 r.frag_rate[b]);
        }
      }
      out.flush();
      done += seeds.size();
    }
  }
  report("done");
  if (show) std::fputc('\n', stderr);
  if (!out) {
    std::cerr << "gpushare sweep: writing the CSV failed\n";
    return 1;
  }
  return 0;
}

}  // namespace gpushare::cli
