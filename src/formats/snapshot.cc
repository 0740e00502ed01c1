// The JSON snapshot of a cluster (Cluster::ToJson / Cluster::FromJson).
//
// {"format": "gpushare.cluster", "version": 1,
//  "options": {"memory_unit": "GiB", "tie_break_seed": 0, "remembered_releases": 65536},
//  "nodes": [{"name", "address", "labels", "cpu", "host_memory", "schedulable",
//             "gpu_sharing", "gpus": [{"memory", "model", "uuid", "healthy"}]}],
//  "placements": [{"request_id", "node", "gpus", "memory_per_gpu",
//                  "compute_per_gpu", "exclusive", "cpu", "host_memory"}]}

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "nlohmann/json.hpp"
#include "src/internal/status_macros.h"

namespace gpushare {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "gpushare.cluster";
constexpr int kVersion = 1;

// Reads field `key` of object `obj` (at `where`) as T; a missing key gives
// `fallback` when one is supplied, else an error.
template <typename T>
absl::Status Get(const json& obj, const char* key, const std::string& where, T* out,
                 const T* fallback = nullptr) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (fallback != nullptr) {
      *out = *fallback;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing field '", key, "'"));
  }
  try {
    *out = it->template get<T>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field '", key, "' has the wrong type (", it->type_name(), ")"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status GetOr(const json& obj, const char* key, const std::string& where, T* out,
                   T fallback) {
  return Get(obj, key, where, out, &fallback);
}

absl::Status RequireObject(const json& j, const std::string& where) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " must be an object, not ", j.type_name()));
  }
  return absl::OkStatus();
}

absl::Status RequireArray(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field '", key, "' must be an array"));
  }
  return absl::OkStatus();
}

// Writes JSON text straight into a string, exactly as nlohmann::json's
// dump(indent) prints the same document (object keys must be given in
// ascending order, as its std::map holds them), without building the
// document first: a snapshot of 80,000 GPUs would otherwise allocate and free
// a map per GPU.
class JsonWriter {
 public:
  explicit JsonWriter(int indent) : indent_(indent) {}

  JsonWriter& Open(char bracket) {
    BeforeValue();
    out_.push_back(bracket);
    empty_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char bracket) {
    const bool empty = empty_.back();
    empty_.pop_back();
    if (!empty) NewLine();
    out_.push_back(bracket);
    return *this;
  }
  JsonWriter& Key(std::string_view key) {
    BeforeValue();
    AppendString(key);
    out_.append(indent_ >= 0 ? ": " : ":");
    after_key_ = true;
    return *this;
  }
  JsonWriter& String(std::string_view value) {
    BeforeValue();
    AppendString(value);
    return *this;
  }
  template <typename Int>
  JsonWriter& Number(Int value) {
    BeforeValue();
    absl::StrAppend(&out_, value);
    return *this;
  }
  JsonWriter& Bool(bool value) {
    BeforeValue();
    out_.append(value ? "true" : "false");
    return *this;
  }
  std::string Take() { return std::move(out_); }

 private:
  // Separates a value (or a key) from the previous element of its container.
  void BeforeValue() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (empty_.empty()) return;
    if (!empty_.back()) out_.push_back(',');
    empty_.back() = false;
    NewLine();
  }
  void NewLine() {
    if (indent_ < 0) return;
    out_.push_back('\n');
    out_.append(static_cast<size_t>(indent_) * empty_.size(), ' ');
  }
  // Plain printable ASCII is copied; anything else (escapes, UTF-8) is left
  // to nlohmann so that the text stays the same. Bytes that are not UTF-8
  // (a node name from a CSV, say) become U+FFFD: JSON cannot hold them, and
  // nlohmann's default would throw.
  void AppendString(std::string_view s) {
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x80 || c == '"' || c == '\\') {
        out_.append(json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace));
        return;
      }
    }
    out_.push_back('"');
    out_.append(s);
    out_.push_back('"');
  }

  int indent_;
  std::string out_;
  std::vector<bool> empty_;  // Per open container: nothing written in it yet.
  bool after_key_ = false;
};

}  // namespace

std::string Cluster::ToJson(int indent) const {
  JsonWriter w(indent);
  w.Open('{');
  w.Key("format").String(kFormat);
  w.Key("nodes").Open('[');
  for (const std::string& name : node_names()) {
    const NodeStatus& n = *FindNode(name);
    w.Open('{');
    w.Key("address").String(n.address);
    w.Key("cpu").Number(n.cpu);
    w.Key("gpu_sharing").Bool(n.gpu_sharing);
    w.Key("gpus").Open('[');
    for (const GpuStatus& g : n.gpus) {
      w.Open('{');
      w.Key("healthy").Bool(g.healthy);
      w.Key("memory").Number(g.memory);
      w.Key("model").String(g.model);
      w.Key("uuid").String(g.uuid);
      w.Close('}');
    }
    w.Close(']');
    w.Key("host_memory").Number(n.host_memory);
    w.Key("labels").Open('{');
    for (const auto& [key, value] : n.labels) w.Key(key).String(value);
    w.Close('}');
    w.Key("name").String(n.name);
    w.Key("schedulable").Bool(n.schedulable);
    w.Close('}');
  }
  w.Close(']');
  w.Key("options").Open('{');
  w.Key("memory_unit").String(MemoryUnitName(options().memory_unit));
  w.Key("remembered_releases").Number(options().remembered_releases);
  w.Key("tie_break_seed").Number(options().tie_break_seed);
  w.Close('}');
  w.Key("placements").Open('[');
  for (const Placement& p : placements()) {
    w.Open('{');
    w.Key("compute_per_gpu").Number(p.compute_per_gpu);
    w.Key("cpu").Number(p.cpu);
    w.Key("exclusive").Bool(p.exclusive);
    w.Key("gpus").Open('[');
    for (int g : p.gpus) w.Number(g);
    w.Close(']');
    w.Key("host_memory").Number(p.host_memory);
    w.Key("memory_per_gpu").Number(p.memory_per_gpu);
    w.Key("node").String(p.node);
    w.Key("request_id").String(p.request_id);
    w.Close('}');
  }
  w.Close(']');
  w.Key("version").Number(kVersion);
  w.Close('}');
  return w.Take();
}

absl::StatusOr<Cluster> Cluster::FromJson(std::string_view text) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Parse again with exceptions for the position of the error.
    try {
      json again = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("malformed cluster JSON: ", e.what()));
    }
    return absl::InvalidArgumentError("malformed cluster JSON");
  }
  GPUSHARE_RETURN_IF_ERROR(RequireObject(root, "cluster JSON"));
  std::string format;
  int version = 0;
  GPUSHARE_RETURN_IF_ERROR(Get(root, "format", "cluster JSON", &format));
  if (format != kFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster JSON: format '", format, "' is not '", kFormat, "'"));
  }
  GPUSHARE_RETURN_IF_ERROR(Get(root, "version", "cluster JSON", &version));
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster JSON: version ", version, " is not supported (", kVersion, ")"));
  }

  ClusterOptions options;
  if (auto it = root.find("options"); it != root.end()) {
    GPUSHARE_RETURN_IF_ERROR(RequireObject(*it, "options"));
    std::string unit;
    GPUSHARE_RETURN_IF_ERROR(GetOr<std::string>(*it, "memory_unit", "options", &unit, "GiB"));
    if (unit == "GiB") {
      options.memory_unit = MemoryUnit::kGiB;
    } else if (unit == "MiB") {
      options.memory_unit = MemoryUnit::kMiB;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("options: memory_unit '", unit, "' is not GiB or MiB"));
    }
    GPUSHARE_RETURN_IF_ERROR(
        GetOr<uint64_t>(*it, "tie_break_seed", "options", &options.tie_break_seed, 0));
    GPUSHARE_RETURN_IF_ERROR(GetOr<int>(*it, "remembered_releases", "options",
                                        &options.remembered_releases, 65536));
  }
  Cluster cluster(options);

  // Nodes are added healthy and schedulable, placements committed, and then
  // health and cordons applied: a snapshot may hold work on unhealthy GPUs.
  struct Later {
    std::string node;
    std::vector<int> unhealthy;
    bool schedulable;
  };
  std::vector<Later> later;
  GPUSHARE_RETURN_IF_ERROR(RequireArray(root, "nodes", "cluster JSON"));
  const json& nodes = root["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string where = absl::StrCat("nodes[", i, "]");
    const json& j = nodes[i];
    GPUSHARE_RETURN_IF_ERROR(RequireObject(j, where));
    Node node;
    bool sharing = false;
    GPUSHARE_RETURN_IF_ERROR(Get(j, "name", where, &node.name));
    GPUSHARE_RETURN_IF_ERROR(GetOr<std::string>(j, "address", where, &node.address, ""));
    {
      std::map<std::string, std::string> none;
      GPUSHARE_RETURN_IF_ERROR(Get(j, "labels", where, &node.labels, &none));
    }
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "cpu", where, &node.cpu, 0));
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "host_memory", where, &node.host_memory, 0));
    Later l{node.name, {}, true};
    GPUSHARE_RETURN_IF_ERROR(GetOr<bool>(j, "schedulable", where, &l.schedulable, true));
    GPUSHARE_RETURN_IF_ERROR(Get(j, "gpu_sharing", where, &sharing));
    node.gpu_sharing = sharing;
    GPUSHARE_RETURN_IF_ERROR(RequireArray(j, "gpus", where));
    const json& gpus = j["gpus"];
    for (size_t g = 0; g < gpus.size(); ++g) {
      const std::string gwhere = absl::StrCat(where, ".gpus[", g, "]");
      GPUSHARE_RETURN_IF_ERROR(RequireObject(gpus[g], gwhere));
      Gpu gpu;
      bool healthy = true;
      GPUSHARE_RETURN_IF_ERROR(Get(gpus[g], "memory", gwhere, &gpu.memory));
      GPUSHARE_RETURN_IF_ERROR(GetOr<std::string>(gpus[g], "model", gwhere, &gpu.model, ""));
      GPUSHARE_RETURN_IF_ERROR(GetOr<std::string>(gpus[g], "uuid", gwhere, &gpu.uuid, ""));
      GPUSHARE_RETURN_IF_ERROR(GetOr<bool>(gpus[g], "healthy", gwhere, &healthy, true));
      if (!healthy) l.unhealthy.push_back(static_cast<int>(g));
      node.gpus.push_back(std::move(gpu));
    }
    if (absl::Status s = cluster.AddNode(node); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    later.push_back(std::move(l));
  }

  GPUSHARE_RETURN_IF_ERROR(RequireArray(root, "placements", "cluster JSON"));
  const json& placed = root["placements"];
  for (size_t i = 0; i < placed.size(); ++i) {
    const std::string where = absl::StrCat("placements[", i, "]");
    const json& j = placed[i];
    GPUSHARE_RETURN_IF_ERROR(RequireObject(j, where));
    Placement p;
    GPUSHARE_RETURN_IF_ERROR(Get(j, "request_id", where, &p.request_id));
    GPUSHARE_RETURN_IF_ERROR(Get(j, "node", where, &p.node));
    {
      std::vector<int> none;
      GPUSHARE_RETURN_IF_ERROR(Get(j, "gpus", where, &p.gpus, &none));
    }
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "memory_per_gpu", where, &p.memory_per_gpu, 0));
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "compute_per_gpu", where, &p.compute_per_gpu, 0));
    GPUSHARE_RETURN_IF_ERROR(GetOr<bool>(j, "exclusive", where, &p.exclusive, false));
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "cpu", where, &p.cpu, 0));
    GPUSHARE_RETURN_IF_ERROR(GetOr<int64_t>(j, "host_memory", where, &p.host_memory, 0));
    if (absl::Status s = cluster.Commit(p); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }
  for (const Later& l : later) {
    for (int g : l.unhealthy) GPUSHARE_RETURN_IF_ERROR(cluster.SetGpuHealthy(l.node, g, false));
    GPUSHARE_RETURN_IF_ERROR(cluster.SetNodeSchedulable(l.node, l.schedulable));
  }
  return cluster;
}

}  // namespace gpushare
