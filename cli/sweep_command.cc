#include "cli/sweep_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/args.h"
#include "gpushare/gpushare.h"
#include "src/internal/text.h"
#include "tools/flags/flags.h"

namespace gpushare::cli {
namespace {

constexpr char kUsage[] = "usage: gpushare sweep --nodes FILE [flags] TASKS.csv...";
constexpr char kAbout[] =
    "\n"
    "Runs the FGD trace experiment for every task file x policy x seed and writes\n"
    "CSV: trace,policy,seed,arrived,unallocated,frag_amount,frag_rate, one row per\n"
    "run and 1% step of arrived GPU request (% of GPU capacity), unallocated in %\n"
    "of GPUs, frag_amount in thousandths of a GPU, frag_rate 0..1. A trace is named\n"
    "by its file name without 'openb_pod_list_' and '.csv'. Rows come in the order\n"
    "of the task files, policies and seeds given. Every argument and file is\n"
    "checked before the first run. Progress goes to stderr when it is a terminal.\n";
constexpr char kGroup[] = "Flags (--flag VALUE or --flag=VALUE)";

// A task file, from --tasks or after the flags.
flags::FlagSet::Setter AddTaskFile(const char* what, std::vector<std::string>* out) {
  return [what, out](const char* v) -> std::string {
    if (v == nullptr) return absl::StrCat(what, " takes a file name");
    out->push_back(v);
    return "";
  };
}

// Every flag of `gpushare sweep`, into `c`.
void DefineFlags(flags::FlagSet* f, SweepConfig* c) {
  f->AddPositionals("TASKS.csv", "openb task CSVs", AddTaskFile("a task file", &c->tasks));
  f->Add(kGroup, "--nodes", "FILE", "openb node CSV (sn,cpu_milli,memory_mib,gpu,model)",
         flags::SetString("--nodes", &c->nodes));
  f->AddRepeated(kGroup, "--tasks", "FILE",
                 "an openb task CSV (repeatable; or list them at\nthe end)",
                 AddTaskFile("--tasks", &c->tasks));
  AddExperimentFlags(f, kGroup, "--policies", &c->policies, &c->seeds, &c->threads);
  f->Add(kGroup, "--inflate", "X",
         absl::StrCat("total GPU request as a multiple of capacity\n(default ", c->inflate, ")"),
         flags::SetDouble("--inflate", "a number", 0, 100, &c->inflate));
  f->Add(kGroup, "--out", "FILE", "write the CSV to FILE (default: standard output)",
         flags::SetString("--out", &c->out));
  f->AddSwitch(kGroup, "--progress", "show the progress line on stderr",
               [c] { c->progress = true; });
  f->AddSwitch(kGroup, "--no-progress", "never show it", [c] { c->progress = false; });
}

// "openb_pod_list_default.csv" -> "default"; the label of gs.sweep() too.
std::string TraceLabel(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (absl::EndsWith(name, ".csv")) name.resize(name.size() - 4);
  if (absl::StartsWith(name, "openb_pod_list_")) name = name.substr(15);
  return name;
}

constexpr CommandFlags<SweepConfig> kFlags = {"gpushare sweep", kUsage, kAbout, DefineFlags};

}  // namespace

absl::StatusOr<SweepConfig> ParseSweepFlags(int argc, const char* const* argv) {
  absl::StatusOr<SweepConfig> parsed = kFlags.Parse(argc, argv);
  if (!parsed.ok() || parsed->help) return parsed;
  const SweepConfig& c = *parsed;
  if (c.nodes.empty() || c.tasks.empty()) {
    return absl::InvalidArgumentError("--nodes and at least one task file are required");
  }
  std::set<std::string> labels;  // The trace column tells the files apart.
  for (const std::string& path : c.tasks) {
    if (!labels.insert(TraceLabel(path)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two task files are named '", internal::Echo(TraceLabel(path)), "'"));
    }
  }
  return parsed;
}

std::string SweepHelp() { return kFlags.Help(); }

int RunSweep(int argc, char** argv) {
  const absl::StatusOr<SweepConfig> parsed = ParseSweepFlags(argc, argv);
  if (std::optional<int> code =
          ExitBeforeRunning("sweep", parsed.status(), parsed.ok() && parsed->help, SweepHelp)) {
    return *code;
  }
  const SweepConfig& c = *parsed;
  // Every file is read before the first run: a typo in the last one fails
  // at once, not after hours.
  auto nodes = LoadOpenbNodes(c.nodes);
  if (!nodes.ok()) {
    std::cerr << "gpushare sweep: " << nodes.status().message() << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::vector<Request>>> traces;
  for (const std::string& path : c.tasks) {
    auto tasks = LoadOpenbTasks(path);
    if (!tasks.ok()) {
      std::cerr << "gpushare sweep: " << tasks.status().message() << "\n";
      return 1;
    }
    traces.emplace_back(TraceLabel(path), ToRequests(*tasks));
  }
  std::ofstream file;
  if (!c.out.empty()) {
    file.open(c.out);
    if (!file) {
      std::cerr << "gpushare sweep: cannot write '" << c.out << "'\n";
      return 1;
    }
  }
  std::ostream& out = c.out.empty() ? std::cout : file;
  const bool show = c.progress.value_or(isatty(STDERR_FILENO) == 1);
  const size_t total = traces.size() * c.policies.size() * c.seeds.size();
  size_t done = 0;
  auto report = [&](const std::string& now) {
    if (!show) return;
    std::fprintf(stderr, "\rsweep: %zu/%zu runs (%3.0f%%) %-40s", done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), now.c_str());
    std::fflush(stderr);
  };
  out << "trace,policy,seed,arrived,unallocated,frag_amount,frag_rate\n";
  for (const auto& [label, requests] : traces) {
    for (const std::string& policy : c.policies) {
      report(label + " " + policy);
      SimulationOptions options;
      options.policy = policy;
      options.inflate = c.inflate;
      auto runs = SimulateSeeds(*nodes, requests, options, c.seeds, c.threads);
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
      done += c.seeds.size();
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
