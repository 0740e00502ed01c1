// TargetWorkloadToJson() and TargetWorkloadFromJson() (gpushare/fragmentation.h).

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/fragmentation.h"
#include "nlohmann/json.hpp"
#include "src/internal/status_macros.h"

namespace gpushare {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// An integer field of `obj` (0 when absent) within lo..hi.
absl::Status ReadInt(const json& obj, const char* key, const std::string& where, int64_t lo,
                     int64_t hi, int64_t* out) {
  *out = 0;
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  const std::string field = absl::StrCat(where, ".", key);
  if (!it->is_number_integer()) return Bad(field, absl::StrCat(it->dump(), " is not an integer"));
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX}
                        ? INT64_MAX
                        : it->get<int64_t>();
  if (v < lo || v > hi) {
    return Bad(field, absl::StrCat(it->dump(), " is outside ", lo, "..", hi));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadTask(const json& t, const std::string& where, TargetTask* task) {
  if (!t.is_object()) return Bad(where, "is not an object");
  for (const auto& [key, value] : t.items()) {
    if (key != "cpu" && key != "gpu_share" && key != "gpu_count" && key != "gpu_models" &&
        key != "weight") {
      return Bad(where, absl::StrCat("unknown key '", key,
                                     "' (known: cpu, gpu_share, gpu_count, gpu_models, weight)"));
    }
  }
  int64_t v = 0;
  GPUSHARE_RETURN_IF_ERROR(ReadInt(t, "cpu", where, 0, kMaxQuantity, &task->cpu));
  GPUSHARE_RETURN_IF_ERROR(ReadInt(t, "gpu_share", where, 0, kMaxQuantity, &task->gpu_share));
  GPUSHARE_RETURN_IF_ERROR(ReadInt(t, "gpu_count", where, 0, kMaxGpusPerNode, &v));
  task->gpu_count = static_cast<int>(v);
  if (task->gpu_share > 0 && task->gpu_count == 0) {
    return Bad(where, absl::StrCat("gpu_share ", task->gpu_share, " with gpu_count 0"));
  }
  if (auto it = t.find("gpu_models"); it != t.end()) {
    if (!it->is_array()) return Bad(where + ".gpu_models", "is not a list of strings");
    for (const json& m : *it) {
      if (!m.is_string()) {
        return Bad(where + ".gpu_models", absl::StrCat(m.dump(), " is not a string"));
      }
      task->gpu_models.push_back(m.get<std::string>());
    }
  }
  auto w = t.find("weight");
  if (w == t.end()) return Bad(where, "field 'weight' is missing");
  if (!w->is_number() || !std::isfinite(w->get<double>()) || w->get<double>() <= 0) {
    return Bad(where + ".weight", absl::StrCat(w->dump(), " is not a positive number"));
  }
  task->weight = w->get<double>();
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTargetWorkload(const TargetWorkload& target) {
  if (target.tasks.empty()) return Bad("tasks", "the list is empty");
  for (size_t i = 0; i < target.tasks.size(); ++i) {
    const TargetTask& t = target.tasks[i];
    const std::string where = absl::StrCat("tasks[", i, "]");
    auto range = [&](const char* key, int64_t v, int64_t hi) {
      return v < 0 || v > hi ? Bad(absl::StrCat(where, ".", key),
                                   absl::StrCat(v, " is outside 0..", hi))
                             : absl::OkStatus();
    };
    GPUSHARE_RETURN_IF_ERROR(range("cpu", t.cpu, kMaxQuantity));
    GPUSHARE_RETURN_IF_ERROR(range("gpu_share", t.gpu_share, kMaxQuantity));
    GPUSHARE_RETURN_IF_ERROR(range("gpu_count", t.gpu_count, kMaxGpusPerNode));
    if (t.gpu_share > 0 && t.gpu_count == 0) {
      return Bad(where, absl::StrCat("gpu_share ", t.gpu_share, " with gpu_count 0"));
    }
    if (!std::isfinite(t.weight) || t.weight <= 0) {
      return Bad(where + ".weight", absl::StrCat(t.weight, " is not a positive number"));
    }
  }
  return absl::OkStatus();
}

std::string TargetWorkloadToJson(const TargetWorkload& target) {
  json tasks = json::array();
  for (const TargetTask& t : target.tasks) {
    json task = {{"cpu", t.cpu},
                 {"gpu_share", t.gpu_share},
                 {"gpu_count", t.gpu_count},
                 {"weight", t.weight}};
    if (!t.gpu_models.empty()) task["gpu_models"] = t.gpu_models;
    tasks.push_back(std::move(task));
  }
  json out = {{"resource", target.resource == FragResource::kMemory ? "memory" : "compute"},
              {"tasks", std::move(tasks)}};
  return out.dump(1) + "\n";
}

absl::StatusOr<TargetWorkload> TargetWorkloadFromJson(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("target workload: malformed JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("target workload: not a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "resource" && key != "tasks") {
      return Bad("target workload",
                 absl::StrCat("unknown key '", key, "' (known: resource, tasks)"));
    }
  }
  TargetWorkload target;
  if (auto r = doc.find("resource"); r != doc.end()) {
    if (!r->is_string() || (*r != "compute" && *r != "memory")) {
      return Bad("resource", absl::StrCat(r->dump(), " is not \"compute\" or \"memory\""));
    }
    target.resource = *r == "memory" ? FragResource::kMemory : FragResource::kCompute;
  }
  auto tasks = doc.find("tasks");
  if (tasks == doc.end()) {
    return absl::InvalidArgumentError("target workload: field 'tasks' is missing");
  }
  if (!tasks->is_array()) return Bad("tasks", "is not a list");
  if (tasks->empty()) return Bad("tasks", "the list is empty");
  for (size_t i = 0; i < tasks->size(); ++i) {
    TargetTask task;
    GPUSHARE_RETURN_IF_ERROR(ReadTask((*tasks)[i], absl::StrCat("tasks[", i, "]"), &task));
    target.tasks.push_back(std::move(task));
  }
  return target;
}

}  // namespace gpushare
