#include "cli/typical_tasks_command.h"

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "gpushare/gpushare.h"
#include "tools/flags/flags.h"

namespace gpushare::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpushare typical-tasks (--tasks FILE.csv | --pods FILE.json) [flags]";
constexpr char kAbout[] =
    "\n"
    "Prints the target workload of a workload as JSON: its request shapes, the\n"
    "most frequent first, until they cover --coverage of the requests (the FGD\n"
    "paper's typical tasks). gpushare-extender --target-workload reads it.\n";
constexpr char kGroup[] = "Flags (--flag VALUE or --flag=VALUE)";

// Every flag of `gpushare typical-tasks`, into `c`.
void DefineFlags(flags::FlagSet* f, TypicalTasksConfig* c) {
  f->Add(kGroup, "--tasks", "FILE", "an openb task CSV (shares of GPU compute)",
         flags::SetString("--tasks", &c->tasks));
  f->Add(kGroup, "--pods", "FILE",
         "a Kubernetes pod list, `kubectl get pods -A -o json`\n"
         "(shares of GPU memory, aliyun.com/gpu-mem units)",
         flags::SetString("--pods", &c->pods));
  f->Add(kGroup, "--coverage", "C",
         absl::StrCat("fraction of the requests the shapes cover, in\n(0, 1] (default ",
                      c->coverage, ")"),
         flags::SetDouble("--coverage", &c->coverage));
  f->Add(kGroup, "--out", "FILE", "write there instead of standard output",
         flags::SetString("--out", &c->out));
}

int Fail(const std::string& why) {
  std::cerr << "gpushare typical-tasks: " << why << "\n";
  return 1;
}

constexpr CommandFlags<TypicalTasksConfig> kFlags = {"gpushare typical-tasks", kUsage, kAbout,
                                                     DefineFlags};

}  // namespace

absl::StatusOr<TypicalTasksConfig> ParseTypicalTasksFlags(int argc, const char* const* argv) {
  absl::StatusOr<TypicalTasksConfig> parsed = kFlags.Parse(argc, argv);
  if (!parsed.ok() || parsed->help) return parsed;
  const TypicalTasksConfig& c = *parsed;
  if (c.tasks.empty() == c.pods.empty()) {
    return absl::InvalidArgumentError("give one of --tasks and --pods");
  }
  return parsed;
}

std::string TypicalTasksHelp() { return kFlags.Help(); }

int RunTypicalTasks(int argc, char** argv) {
  const absl::StatusOr<TypicalTasksConfig> parsed = ParseTypicalTasksFlags(argc, argv);
  if (std::optional<int> code = ExitBeforeRunning("typical-tasks", parsed.status(),
                                                  parsed.ok() && parsed->help, TypicalTasksHelp)) {
    return *code;
  }
  const TypicalTasksConfig& c = *parsed;
  std::vector<Request> requests;
  FragResource resource = FragResource::kCompute;
  if (!c.tasks.empty()) {
    absl::StatusOr<std::vector<TraceTask>> tasks = LoadOpenbTasks(c.tasks);
    if (!tasks.ok()) return Fail(std::string(tasks.status().message()));
    requests = ToRequests(*tasks);
  } else {
    std::ifstream in(c.pods, std::ios::binary);
    if (!in) return Fail("cannot read " + c.pods);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<k8s::Pod>> pods = k8s::ParsePodList(text.str());
    if (!pods.ok()) return Fail(c.pods + ": " + std::string(pods.status().message()));
    for (const k8s::Pod& pod : *pods) requests.push_back(pod.request);
    resource = FragResource::kMemory;
  }
  absl::StatusOr<TargetWorkload> target = TypicalTasks(requests, c.coverage, resource);
  if (!target.ok()) return Fail(std::string(target.status().message()));
  const std::string json = TargetWorkloadToJson(*target);
  if (c.out.empty()) {
    std::cout << json;
    return 0;
  }
  std::ofstream out(c.out, std::ios::binary | std::ios::trunc);
  if (!(out << json) || !out.flush()) return Fail("cannot write " + c.out);
  return 0;
}

}  // namespace gpushare::cli
