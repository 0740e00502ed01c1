// ParseOpenbNodes and ParseOpenbTasks (trace.h) on arbitrary text; each input
// goes to both parsers (each needs its own header). Properties of what loads:
//  - nodes: a name that is not empty and not "nan", unique; cpu and host
//    memory >= 0; 0..kMaxGpusPerNode GPUs, each with >= 1 memory unit, same
//    model; GPU sharing on; a Cluster refuses them only with InvalidArgument,
//    and its snapshot (ToJson) loads back to the same text;
//  - tasks: a name; cpu and memory >= 0; num_gpu 0..kMaxGpusPerNode; gpu_milli
//    0..1000; a share below 1000 only on one GPU; GPUs iff a share; gpu_spec
//    without duplicates or empty entries; ToRequest() maps as documented;
//  - an error is InvalidArgument naming the source.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "gpushare/trace.h"
#include "gpushare/types.h"

namespace {

using gpushare::kGpuCompute;
using gpushare::kMaxGpusPerNode;

void CheckError(const absl::Status& s, std::string_view source) {
  FUZZ_CHECK(absl::IsInvalidArgument(s), s.ToString());
  FUZZ_CHECK(s.message().find(std::string(source)) != absl::string_view::npos, s.ToString());
}

void CheckNodes(std::string_view text) {
  absl::StatusOr<std::vector<gpushare::Node>> nodes = gpushare::ParseOpenbNodes(text, "n.csv");
  if (!nodes.ok()) return CheckError(nodes.status(), "n.csv");
  std::set<std::string> names;
  gpushare::Cluster cluster;
  for (const gpushare::Node& n : *nodes) {
    FUZZ_CHECK(!n.name.empty() && n.name != "nan" && n.name != "NaN", n.name);
    FUZZ_CHECK(names.insert(n.name).second, "duplicate node " + n.name);
    FUZZ_CHECK(n.cpu >= 0 && n.host_memory >= 0,
               absl::StrCat(n.name, " ", n.cpu, " ", n.host_memory));
    FUZZ_CHECK(n.gpus.size() <= static_cast<size_t>(kMaxGpusPerNode), n.name);
    FUZZ_CHECK(n.gpu_sharing, n.name);
    for (const gpushare::Gpu& g : n.gpus) {
      FUZZ_CHECK(g.memory >= 1, n.name);
      FUZZ_CHECK(g.model == n.gpus[0].model, n.name);
    }
    // The loader does not promise the cluster's limits (cpu, host memory up
    // to kMaxQuantity): a refusal is fine, as an InvalidArgument.
    if (absl::Status s = cluster.AddNode(n); !s.ok()) {
      FUZZ_CHECK(absl::IsInvalidArgument(s), s.ToString());
    }
  }
  FUZZ_CHECK_OK(cluster.CheckInvariants(), "cluster of loaded nodes");
  // What the simulator and the CLI do with them: save a snapshot.
  const std::string dump = cluster.ToJson();
  absl::StatusOr<gpushare::Cluster> again = gpushare::Cluster::FromJson(dump);
  // Bytes that are not UTF-8 are written as U+FFFD (cluster.h), so two names
  // that differ only in such bytes become one name and the snapshot is
  // refused as a duplicate: documented, and only then allowed.
  if (!again.ok() && dump.find("\xef\xbf\xbd") != std::string::npos) {
    FUZZ_CHECK(absl::IsInvalidArgument(again.status()), again.status().ToString());
    return;
  }
  FUZZ_CHECK_OK(again.status(), "the snapshot of loaded nodes does not load: " + dump);
  FUZZ_CHECK(again->ToJson() == dump, "snapshot round trip changed " + dump);
}

void CheckTasks(std::string_view text) {
  absl::StatusOr<std::vector<gpushare::TraceTask>> tasks = gpushare::ParseOpenbTasks(text, "t.csv");
  if (!tasks.ok()) return CheckError(tasks.status(), "t.csv");
  for (const gpushare::TraceTask& t : *tasks) {
    const std::string who = t.name;
    FUZZ_CHECK(!t.name.empty() && t.name != "nan" && t.name != "NaN", who);
    FUZZ_CHECK(t.cpu >= 0 && t.memory_mib >= 0, who);
    FUZZ_CHECK(t.num_gpu >= 0 && t.num_gpu <= kMaxGpusPerNode, who);
    FUZZ_CHECK(t.gpu_milli >= 0 && t.gpu_milli <= kGpuCompute, who);
    FUZZ_CHECK(t.num_gpu <= 1 || t.gpu_milli == kGpuCompute, who);
    FUZZ_CHECK((t.num_gpu > 0) == (t.gpu_milli > 0), who);
    std::set<std::string> models(t.gpu_spec.begin(), t.gpu_spec.end());
    FUZZ_CHECK(models.size() == t.gpu_spec.size(), who + ": duplicate gpu_spec");
    FUZZ_CHECK(!models.count(""), who + ": empty gpu_spec entry");
    const gpushare::Request r = gpushare::ToRequest(t);
    FUZZ_CHECK(r.id == t.name && r.cpu == t.cpu && r.host_memory == t.memory_mib &&
                   r.gpu_models == t.gpu_spec,
               who);
    if (t.num_gpu == 0) {
      FUZZ_CHECK(r.whole_gpus == 0 && r.compute == 0 && r.gpu_memory == 0, who);
    } else if (t.gpu_milli == kGpuCompute) {
      FUZZ_CHECK(r.whole_gpus == t.num_gpu && r.compute == 0, who);
    } else {
      FUZZ_CHECK(r.whole_gpus == 0 && r.compute == t.gpu_milli && r.gpu_count == t.num_gpu, who);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckNodes(text);
  CheckTasks(text);
  return 0;
}
