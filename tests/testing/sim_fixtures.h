// Test vocabulary for the simulation tests: generated openb-like clusters and
// workloads, and the location of the shared trace folder.

#ifndef GPUSHARE_TESTS_TESTING_SIM_FIXTURES_H_
#define GPUSHARE_TESTS_TESTING_SIM_FIXTURES_H_

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpushare/gpushare.h"

namespace gpushare::testing {

// Nodes with 2, 4 or 8 GPUs of models "A" or "B", CPU and memory set.
inline std::vector<Node> GeneratedNodes(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Node> nodes;
  for (int i = 0; i < count; ++i) {
    Node n;
    n.name = absl::StrCat("gen-node-", i);
    const int gpus = 2 << (rng() % 3);
    const std::string model = rng() % 3 == 0 ? "B" : "A";
    for (int g = 0; g < gpus; ++g) n.gpus.push_back(Gpu{16, model, "", true});
    n.cpu = 16000 * gpus;
    n.host_memory = 65536 * gpus;
    n.gpu_sharing = true;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

// A mix of CPU-only, shared, one-GPU and multi-GPU requests from a few
// repeated shapes, some limited to model "B".
inline std::vector<Request> GeneratedRequests(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t shares[] = {100, 250, 300, 500, 700, 810};
  std::vector<Request> requests;
  for (int i = 0; i < count; ++i) {
    Request r;
    r.id = absl::StrCat("gen-", i);
    r.cpu = 1000 * static_cast<int64_t>(1 + rng() % 8);
    r.host_memory = 1024 * static_cast<int64_t>(1 + rng() % 16);
    const int kind = static_cast<int>(rng() % 10);
    if (kind == 0) {
      // CPU-only.
    } else if (kind <= 5) {
      r.compute = shares[rng() % 6];
    } else if (kind <= 8) {
      r.whole_gpus = 1;
    } else {
      r.whole_gpus = rng() % 2 == 0 ? 2 : 4;
    }
    if (rng() % 10 == 0 && kind > 0) r.gpu_models = {"B"};
    requests.push_back(std::move(r));
  }
  return requests;
}

// The shared data folder: $GPUSHARE_SHARED_DIR if set (as for the
// benchmarks), else ../shared beside the source tree (the layout of a
// checkout: <dir>/main and <dir>/shared).
inline std::string SharedDir() {
  const char* env = std::getenv("GPUSHARE_SHARED_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(GPUSHARE_SHARED_DIR);
}

// The FGD simulator's golden fragmentation vectors.
inline std::string FragVectorsPath() { return SharedDir() + "/fgd/frag_test_vectors.json"; }

// The shared openb trace folder, or "" when it is absent.
inline std::string OpenbDir() {
  const std::string dir = SharedDir() + "/traces/openb";
  std::ifstream probe(dir + "/openb_node_list_gpu_node.csv");
  return probe ? dir : std::string();
}

// The GPU nodes of the openb trace in `dir` and its default tasks, as requests.
struct OpenbDefault {
  std::vector<Node> nodes;
  std::vector<Request> requests;
};
inline absl::StatusOr<OpenbDefault> LoadOpenbDefault(const std::string& dir) {
  OpenbDefault d;
  absl::StatusOr<std::vector<Node>> nodes = LoadOpenbNodes(dir + "/openb_node_list_gpu_node.csv");
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<std::vector<TraceTask>> tasks =
      LoadOpenbTasks(dir + "/openb_pod_list_default.csv");
  if (!tasks.ok()) return tasks.status();
  d.nodes = *std::move(nodes);
  d.requests = ToRequests(*tasks);
  return d;
}

// Unallocated GPU % at 100% arrived under `policy`, the mean of seeds 42-44.
// Inflation 1.05 gives the same tasks up to 100% arrived as 1.3, faster.
inline absl::StatusOr<double> MeanUnallocatedAt100(const OpenbDefault& openb,
                                                   const std::string& policy) {
  SimulationOptions options;
  options.policy = policy;
  options.inflate = 1.05;
  const std::vector<uint64_t> seeds = {42, 43, 44};
  absl::StatusOr<std::vector<SimulationResult>> runs =
      SimulateSeeds(openb.nodes, openb.requests, options, seeds);
  if (!runs.ok()) return runs.status();
  double mean = 0;
  for (const SimulationResult& r : *runs) mean += r.UnallocatedAt(100) / 3;
  return mean;
}

// Runs `command` through the shell; its exit code (-1 if it did not exit)
// and standard output.
inline std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, out};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline bool Quick() { return std::getenv("GPUSHARE_QUICK") != nullptr; }

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_SIM_FIXTURES_H_
