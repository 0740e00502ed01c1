// The fast reader of the cluster snapshot (see snapshot_reader.h): the rules
// of SnapshotFromJsonReference() in snapshot.cc, field for field, over
// simdjson's DOM. Any failure returns kRefused; the caller then asks the
// reference.

#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpushare/cluster.h"
#include "src/formats/snapshot_reader.h"
#include "src/internal/cluster_state.h"
#include "src/internal/fast_json.h"

namespace gpushare::internal {
namespace {

using Kind = sj::element_type;

absl::Status Refused() { return absl::InvalidArgumentError("refused by the fast reader"); }

#define GPUSHARE_FAST(cond) \
  do {                      \
    if (!(cond)) return Refused(); \
  } while (0)

// Field readers: absent gives the fallback; present must have the type.
bool Int(bool present, sj::element v, int64_t min, int64_t max, int64_t fallback, int64_t* out) {
  if (!present) {
    *out = fallback;
    return true;
  }
  return FastInt(v, min, max, out);
}
bool Str(bool present, sj::element v, std::string* out) {
  std::string_view s;
  if (!present) return true;  // *out keeps its default.
  if (!FastString(v, &s)) return false;
  out->assign(s.data(), s.size());
  return true;
}
bool Bool(bool present, sj::element v, bool fallback, bool* out) {
  if (!present) {
    *out = fallback;
    return true;
  }
  return FastBool(v, out);
}

constexpr std::array<std::string_view, 5> kRoot = {"format", "version", "options", "nodes",
                                                   "placements"};
constexpr std::array<std::string_view, 3> kOptions = {"memory_unit", "tie_break_seed",
                                                      "remembered_releases"};
constexpr std::array<std::string_view, 9> kNode = {
    "name", "address", "labels", "cpu", "host_memory", "schedulable", "gpu_sharing", "gpus",
    "topology"};
constexpr std::array<std::string_view, 4> kGpu = {"memory", "model", "uuid", "healthy"};
constexpr std::array<std::string_view, 8> kPlacement = {
    "request_id", "node", "gpus", "memory_per_gpu", "compute_per_gpu", "exclusive", "cpu",
    "host_memory"};

}  // namespace

// simdjson's buffers take a few bytes per byte of text, and touching fresh
// pages costs as much as the parse itself: each thread keeps its parser for
// the next load, unless it grew past this many bytes of text.
constexpr size_t kKeptCapacity = size_t{64} << 20;

absl::StatusOr<Cluster> SnapshotFromJsonFast(std::string_view text) {
  thread_local sj::parser parser;
  struct Shrink {
    ~Shrink() {
      if (parser.capacity() > kKeptCapacity) parser = sj::parser();
    }
  } shrink;
  sj::element root;
  GPUSHARE_FAST(parser.parse(text.data(), text.size()).get(root) == simdjson::SUCCESS);
  GPUSHARE_FAST(root.type() == Kind::OBJECT);
  std::array<sj::element, kRoot.size()> r;
  std::array<bool, kRoot.size()> has;
  Members(ObjectOf(root), kRoot, &r, &has);
  std::string_view format;
  int64_t version = 0;
  GPUSHARE_FAST(has[0] && FastString(r[0], &format) && format == "gpushare.cluster");
  GPUSHARE_FAST(has[1] && FastInt(r[1], INT64_MIN, INT64_MAX, &version) && version == 1);

  ClusterOptions options;
  if (has[2]) {
    GPUSHARE_FAST(r[2].type() == Kind::OBJECT);
    std::array<sj::element, kOptions.size()> o;
    std::array<bool, kOptions.size()> ohas;
    Members(ObjectOf(r[2]), kOptions, &o, &ohas);
    std::string unit = "GiB";
    GPUSHARE_FAST(Str(ohas[0], o[0], &unit));
    GPUSHARE_FAST(unit == "GiB" || unit == "MiB");
    options.memory_unit = unit == "GiB" ? MemoryUnit::kGiB : MemoryUnit::kMiB;
    if (ohas[1]) {
      if (o[1].type() == Kind::UINT64) {
        options.tie_break_seed = o[1].get_uint64().value_unsafe();
      } else {
        // nlohmann holds a negative number (and -0) signed: the reference
        // refuses it.
        GPUSHARE_FAST(o[1].type() == Kind::INT64);
        const int64_t seed = o[1].get_int64().value_unsafe();
        GPUSHARE_FAST(seed > 0 || (seed == 0 && !MayHoldMinusZero(text)));
        options.tie_break_seed = static_cast<uint64_t>(seed);
      }
    }
    int64_t remembered = 0;
    GPUSHARE_FAST(Int(ohas[2], o[2], 0, INT_MAX, 65536, &remembered));
    options.remembered_releases = static_cast<int>(remembered);
  }
  Cluster cluster(options);
  GPUSHARE_FAST(has[3] && r[3].type() == Kind::ARRAY);
  GPUSHARE_FAST(has[4] && r[4].type() == Kind::ARRAY);
  size_t gpus = 0;
  for (sj::element item : ArrayOf(r[3])) {
    sj::array a;
    if (item.type() == Kind::OBJECT && ObjectOf(item)["gpus"].get(a) == simdjson::SUCCESS) {
      gpus += a.size();
    }
  }
  ClusterAccess::Reserve(cluster, ArrayOf(r[3]).size(), gpus, ArrayOf(r[4]).size());

  struct Later {
    std::string node;
    std::vector<int> unhealthy;
    bool schedulable;
  };
  std::vector<Later> later;
  later.reserve(ArrayOf(r[3]).size());
  std::array<sj::element, kNode.size()> f;
  std::array<bool, kNode.size()> fhas;
  std::array<sj::element, kGpu.size()> g;
  std::array<bool, kGpu.size()> ghas;
  for (sj::element item : ArrayOf(r[3])) {
    GPUSHARE_FAST(item.type() == Kind::OBJECT);
    Members(ObjectOf(item), kNode, &f, &fhas);
    Node node;
    Later l{"", {}, true};
    bool sharing = false;
    GPUSHARE_FAST(fhas[0] && Str(true, f[0], &node.name));
    GPUSHARE_FAST(Str(fhas[1], f[1], &node.address));
    if (fhas[2]) {
      GPUSHARE_FAST(f[2].type() == Kind::OBJECT);
      for (sj::key_value_pair label : ObjectOf(f[2])) {
        std::string_view value;
        GPUSHARE_FAST(FastString(label.value, &value));
        node.labels.insert_or_assign(std::string(label.key), std::string(value));
      }
    }
    GPUSHARE_FAST(Int(fhas[3], f[3], 0, kMaxQuantity, 0, &node.cpu));
    GPUSHARE_FAST(Int(fhas[4], f[4], 0, kMaxQuantity, 0, &node.host_memory));
    GPUSHARE_FAST(Bool(fhas[5], f[5], true, &l.schedulable));
    GPUSHARE_FAST(fhas[6] && FastBool(f[6], &sharing));
    node.gpu_sharing = sharing;
    GPUSHARE_FAST(fhas[7] && f[7].type() == Kind::ARRAY);
    node.gpus.reserve(ArrayOf(f[7]).size());
    int index = 0;
    for (sj::element gj : ArrayOf(f[7])) {
      GPUSHARE_FAST(gj.type() == Kind::OBJECT);
      Members(ObjectOf(gj), kGpu, &g, &ghas);
      Gpu gpu;
      bool healthy = true;
      GPUSHARE_FAST(ghas[0] && FastInt(g[0], 1, kMaxQuantity, &gpu.memory));
      GPUSHARE_FAST(Str(ghas[1], g[1], &gpu.model));
      GPUSHARE_FAST(Str(ghas[2], g[2], &gpu.uuid));
      GPUSHARE_FAST(Bool(ghas[3], g[3], true, &healthy));
      if (!healthy) l.unhealthy.push_back(index);
      node.gpus.push_back(std::move(gpu));
      ++index;
    }
    std::string topology;
    GPUSHARE_FAST(Str(fhas[8], f[8], &topology));
    if (!topology.empty()) {
      absl::StatusOr<TopologyPtr> t = Topology::FromJson(topology);
      GPUSHARE_FAST(t.ok());
      node.topology = *std::move(t);
    }
    l.node = node.name;
    GPUSHARE_FAST(ClusterAccess::AddNodeMoved(cluster, std::move(node)).ok());
    later.push_back(std::move(l));
  }

  std::array<sj::element, kPlacement.size()> p;
  std::array<bool, kPlacement.size()> phas;
  for (sj::element item : ArrayOf(r[4])) {
    GPUSHARE_FAST(item.type() == Kind::OBJECT);
    Members(ObjectOf(item), kPlacement, &p, &phas);
    Placement placement;
    placement.gpus.reserve(phas[2] && p[2].type() == Kind::ARRAY ? ArrayOf(p[2]).size() : 0);
    GPUSHARE_FAST(phas[0] && Str(true, p[0], &placement.request_id));
    GPUSHARE_FAST(phas[1] && Str(true, p[1], &placement.node));
    if (phas[2]) {
      GPUSHARE_FAST(p[2].type() == Kind::ARRAY);
      for (sj::element gj : ArrayOf(p[2])) {
        int64_t index = 0;
        GPUSHARE_FAST(FastInt(gj, 0, kMaxGpusPerNode - 1, &index));
        placement.gpus.push_back(static_cast<int>(index));
      }
    }
    GPUSHARE_FAST(Int(phas[3], p[3], 0, kMaxQuantity, 0, &placement.memory_per_gpu));
    GPUSHARE_FAST(Int(phas[4], p[4], 0, kGpuCompute, 0, &placement.compute_per_gpu));
    GPUSHARE_FAST(Bool(phas[5], p[5], false, &placement.exclusive));
    GPUSHARE_FAST(Int(phas[6], p[6], 0, kMaxQuantity, 0, &placement.cpu));
    GPUSHARE_FAST(Int(phas[7], p[7], 0, kMaxQuantity, 0, &placement.host_memory));
    GPUSHARE_FAST(ClusterAccess::CommitMoved(cluster, std::move(placement)).ok());
  }
  for (const Later& l : later) {
    for (int gi : l.unhealthy) GPUSHARE_FAST(cluster.SetGpuHealthy(l.node, gi, false).ok());
    // Nodes were added schedulable.
    if (!l.schedulable) GPUSHARE_FAST(cluster.SetNodeSchedulable(l.node, false).ok());
  }
  return cluster;
}

#undef GPUSHARE_FAST

}  // namespace gpushare::internal
