// The JSON snapshot of a cluster (Cluster::ToJson / Cluster::FromJson).
//
// {"format": "gpushare.cluster", "version": 1,
//  "options": {"memory_unit": "GiB", "tie_break_seed": 0, "remembered_releases": 65536},
//  "nodes": [{"name", "address", "labels", "cpu", "host_memory", "schedulable",
//             "gpu_sharing", "gpus": [{"memory", "model", "uuid", "healthy"}],
//             "topology" (only when set: the compact JSON form of
//             gpushare/topology.h, as a string)}],
//  "placements": [{"request_id", "node", "gpus", "memory_per_gpu",
//                  "compute_per_gpu", "exclusive", "cpu", "host_memory"}]}
//
// Two readers: the reference below (nlohmann::json) and the fast one in
// snapshot_fast.cc (simdjson), which FromJson() tries first; a change of the
// format's rules goes into both (tests/snapshot_reader_test.cc compares them).

#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "nlohmann/json.hpp"
#include "src/formats/snapshot_reader.h"
#include "src/internal/json_text.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"

namespace gpushare {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "gpushare.cluster";
constexpr int kVersion = 1;

// The readers below take field `key` of object `obj` (at `where`); a
// missing key gives `fallback` when one is supplied, else an error. Values of
// the wrong type or out of range are errors naming the field and the value:
// nothing is converted silently (1.9 is not 1, 2^40 is not 0).

// The value of `key`, or nullptr (then *out is the fallback, or an error).
template <typename T>
absl::StatusOr<const json*> Field(const json& obj, const char* key, const std::string& where,
                                  T* out, const std::optional<T>& fallback) {
  auto it = obj.find(key);
  if (it != obj.end()) return &*it;
  if (!fallback.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing field '", key, "'"));
  }
  *out = *fallback;
  return nullptr;
}

absl::Status WrongType(const json& v, const std::string& key, const std::string& where,
                       const char* want) {
  // Numbers are shown (1.9, 1e+300); other values by their type.
  const std::string shown = v.is_number() ? absl::StrCat(v.dump(), " (a ", v.type_name(), ")")
                                          : absl::StrCat("a ", v.type_name());
  return absl::InvalidArgumentError(absl::StrCat(where, ": field '", key, "' must be ", want,
                                                 ", not ", shown));
}

// An integer in [min, max]: a JSON number without fraction or exponent.
// `key` names the value in errors.
absl::Status IntValue(const json& v, const std::string& key, const std::string& where,
                      int64_t min, int64_t max, int64_t* out) {
  auto out_of_range = [&](const std::string& value) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": field '", key, "' value ", value,
                                                   " is out of range [", min, ", ", max, "]"));
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return out_of_range(absl::StrCat(u));
    *out = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < min || i > max) return out_of_range(absl::StrCat(i));
    *out = i;
    return absl::OkStatus();
  }
  return WrongType(v, key, where, "an integer");
}

absl::Status GetInt(const json& obj, const char* key, const std::string& where, int64_t min,
                    int64_t max, int64_t* out, std::optional<int64_t> fallback = std::nullopt) {
  GPUSHARE_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where, out, fallback));
  if (v == nullptr) return absl::OkStatus();
  return IntValue(*v, key, where, min, max, out);
}

template <typename Int>
absl::Status GetInt(const json& obj, const char* key, const std::string& where, int64_t min,
                    int64_t max, Int* out, std::optional<int64_t> fallback = std::nullopt) {
  int64_t value = 0;
  GPUSHARE_RETURN_IF_ERROR(GetInt(obj, key, where, min, max, &value, fallback));
  *out = static_cast<Int>(value);  // [min, max] lies within Int's range.
  return absl::OkStatus();
}

absl::Status GetUint64(const json& obj, const char* key, const std::string& where,
                       uint64_t* out, std::optional<uint64_t> fallback) {
  GPUSHARE_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where, out, fallback));
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
    return absl::OkStatus();
  }
  if (v->is_number_integer()) {  // Negative: nlohmann keeps others unsigned.
    return absl::InvalidArgumentError(absl::StrCat(where, ": field '", key, "' value ",
                                                   v->get<int64_t>(), " is out of range [0, ",
                                                   UINT64_MAX, "]"));
  }
  return WrongType(*v, key, where, "an integer");
}

absl::Status GetString(const json& obj, const char* key, const std::string& where,
                       std::string* out, std::optional<std::string> fallback = std::nullopt) {
  GPUSHARE_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where, out, fallback));
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return WrongType(*v, key, where, "a string");
  *out = v->get_ref<const std::string&>();
  return absl::OkStatus();
}

absl::Status GetBool(const json& obj, const char* key, const std::string& where, bool* out,
                     std::optional<bool> fallback = std::nullopt) {
  GPUSHARE_ASSIGN_OR_RETURN(const json* v, Field(obj, key, where, out, fallback));
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return WrongType(*v, key, where, "true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

// An object of strings; missing means empty.
absl::Status GetLabels(const json& obj, const char* key, const std::string& where,
                       std::map<std::string, std::string>* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  if (!it->is_object()) return WrongType(*it, key, where, "an object of strings");
  for (auto label = it->begin(); label != it->end(); ++label) {
    if (!label->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": field '", key, "' entry '", internal::Echo(label.key()),
                       "' must be a string, not a ", label->type_name()));
    }
    out->emplace(label.key(), label->get_ref<const std::string&>());
  }
  return absl::OkStatus();
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
        out_.append(internal::DumpJson(json(std::string(s))));
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
    if (n.topology != nullptr) w.Key("topology").String(n.topology->ToJson());
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
  absl::StatusOr<Cluster> fast = internal::SnapshotFromJsonFast(text);
  if (fast.ok()) return fast;
  return internal::SnapshotFromJsonReference(text);
}

absl::StatusOr<Cluster> internal::SnapshotFromJsonReference(std::string_view text) {
  GPUSHARE_ASSIGN_OR_RETURN(const json root,
                            internal::ParseJsonText(text, "malformed cluster JSON"));
  GPUSHARE_RETURN_IF_ERROR(RequireObject(root, "cluster JSON"));
  std::string format;
  int64_t version = 0;
  GPUSHARE_RETURN_IF_ERROR(GetString(root, "format", "cluster JSON", &format));
  if (format != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster JSON: format '", internal::Echo(format), "' is not '", kFormat, "'"));
  }
  GPUSHARE_RETURN_IF_ERROR(GetInt(root, "version", "cluster JSON", INT64_MIN, INT64_MAX,
                                  &version));
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster JSON: version ", version, " is not supported (", kVersion, ")"));
  }

  ClusterOptions options;
  if (auto it = root.find("options"); it != root.end()) {
    GPUSHARE_RETURN_IF_ERROR(RequireObject(*it, "options"));
    std::string unit;
    GPUSHARE_RETURN_IF_ERROR(GetString(*it, "memory_unit", "options", &unit, "GiB"));
    if (unit == "GiB") {
      options.memory_unit = MemoryUnit::kGiB;
    } else if (unit == "MiB") {
      options.memory_unit = MemoryUnit::kMiB;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("options: memory_unit '", internal::Echo(unit), "' is not GiB or MiB"));
    }
    GPUSHARE_RETURN_IF_ERROR(
        GetUint64(*it, "tie_break_seed", "options", &options.tie_break_seed, 0));
    GPUSHARE_RETURN_IF_ERROR(GetInt(*it, "remembered_releases", "options", 0, INT_MAX,
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
    GPUSHARE_RETURN_IF_ERROR(GetString(j, "name", where, &node.name));
    GPUSHARE_RETURN_IF_ERROR(GetString(j, "address", where, &node.address, ""));
    GPUSHARE_RETURN_IF_ERROR(GetLabels(j, "labels", where, &node.labels));
    GPUSHARE_RETURN_IF_ERROR(GetInt(j, "cpu", where, 0, kMaxQuantity, &node.cpu, 0));
    GPUSHARE_RETURN_IF_ERROR(
        GetInt(j, "host_memory", where, 0, kMaxQuantity, &node.host_memory, 0));
    Later l{node.name, {}, true};
    GPUSHARE_RETURN_IF_ERROR(GetBool(j, "schedulable", where, &l.schedulable, true));
    GPUSHARE_RETURN_IF_ERROR(GetBool(j, "gpu_sharing", where, &sharing));
    node.gpu_sharing = sharing;
    GPUSHARE_RETURN_IF_ERROR(RequireArray(j, "gpus", where));
    const json& gpus = j["gpus"];
    for (size_t g = 0; g < gpus.size(); ++g) {
      const std::string gwhere = absl::StrCat(where, ".gpus[", g, "]");
      GPUSHARE_RETURN_IF_ERROR(RequireObject(gpus[g], gwhere));
      Gpu gpu;
      bool healthy = true;
      GPUSHARE_RETURN_IF_ERROR(GetInt(gpus[g], "memory", gwhere, 1, kMaxQuantity, &gpu.memory));
      GPUSHARE_RETURN_IF_ERROR(GetString(gpus[g], "model", gwhere, &gpu.model, ""));
      GPUSHARE_RETURN_IF_ERROR(GetString(gpus[g], "uuid", gwhere, &gpu.uuid, ""));
      GPUSHARE_RETURN_IF_ERROR(GetBool(gpus[g], "healthy", gwhere, &healthy, true));
      if (!healthy) l.unhealthy.push_back(static_cast<int>(g));
      node.gpus.push_back(std::move(gpu));
    }
    std::string topology;
    GPUSHARE_RETURN_IF_ERROR(GetString(j, "topology", where, &topology, ""));
    if (!topology.empty()) {
      absl::StatusOr<TopologyPtr> t = Topology::FromJson(topology);
      if (!t.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".topology: ", t.status().message()));
      }
      node.topology = *std::move(t);
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
    GPUSHARE_RETURN_IF_ERROR(GetString(j, "request_id", where, &p.request_id));
    GPUSHARE_RETURN_IF_ERROR(GetString(j, "node", where, &p.node));
    if (auto gpus = j.find("gpus"); gpus != j.end()) {
      if (!gpus->is_array()) return WrongType(*gpus, "gpus", where, "an array of GPU indices");
      for (size_t g = 0; g < gpus->size(); ++g) {
        int64_t index = 0;
        GPUSHARE_RETURN_IF_ERROR(IntValue((*gpus)[g], absl::StrCat("gpus[", g, "]"), where, 0,
                                          kMaxGpusPerNode - 1, &index));
        p.gpus.push_back(static_cast<int>(index));
      }
    }
    GPUSHARE_RETURN_IF_ERROR(
        GetInt(j, "memory_per_gpu", where, 0, kMaxQuantity, &p.memory_per_gpu, 0));
    GPUSHARE_RETURN_IF_ERROR(
        GetInt(j, "compute_per_gpu", where, 0, kGpuCompute, &p.compute_per_gpu, 0));
    GPUSHARE_RETURN_IF_ERROR(GetBool(j, "exclusive", where, &p.exclusive, false));
    GPUSHARE_RETURN_IF_ERROR(GetInt(j, "cpu", where, 0, kMaxQuantity, &p.cpu, 0));
    GPUSHARE_RETURN_IF_ERROR(
        GetInt(j, "host_memory", where, 0, kMaxQuantity, &p.host_memory, 0));
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
