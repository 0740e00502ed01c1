#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpushare/trace.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"

namespace gpushare {
namespace {

using internal::Sv;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool IsNone(absl::string_view cell) { return cell.empty() || cell == "nan" || cell == "NaN"; }

// The rows of a CSV with a header line: cells by column name.
class CsvReader {
 public:
  CsvReader(std::string_view text, std::string_view source)
      : text_(Sv(text)), source_(source) {
    // A UTF-8 byte order mark (as spreadsheet programs write) is not part of
    // the first column's name.
    if (absl::StartsWith(text_, "\xEF\xBB\xBF")) text_.remove_prefix(3);
  }

  // Reads the header; every name in `required` must be present.
  absl::Status Header(const std::vector<std::string>& required) {
    if (!NextLine()) return absl::InvalidArgumentError(absl::StrCat(source_, ": empty file"));
    for (size_t i = 0; i < cells_.size(); ++i) {
      columns_[std::string(absl::StripAsciiWhitespace(cells_[i]))] = static_cast<int>(i);
    }
    for (const std::string& name : required) {
      if (!columns_.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(source_, ":1: missing column '", name, "'"));
      }
    }
    return absl::OkStatus();
  }

  bool Has(const std::string& name) const { return columns_.count(name) > 0; }

  // Advances to the next non-empty row; false at the end.
  bool NextLine() {
    while (pos_ < text_.size()) {
      // Lines end with \n, \r\n or a lone \r (old Mac files).
      size_t end = text_.find_first_of("\r\n", pos_);
      if (end == absl::string_view::npos) end = text_.size();
      absl::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      if (end + 1 < text_.size() && text_[end] == '\r' && text_[end + 1] == '\n') ++pos_;
      ++line_;
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      cells_ = absl::StrSplit(line, ',');
      return true;
    }
    return false;
  }

  absl::string_view Cell(const std::string& name) const {
    auto it = columns_.find(name);
    if (it == columns_.end() || it->second >= static_cast<int>(cells_.size())) return "";
    return absl::StripAsciiWhitespace(cells_[it->second]);
  }

  absl::Status RowWidth() const {
    if (cells_.size() != columns_.size()) {
      return Error("", absl::StrCat("has ", cells_.size(), " cells, the header has ",
                                    columns_.size()));
    }
    return absl::OkStatus();
  }

  // An integer cell in [min, max]; empty or nan gives `none`. A decimal
  // form ("12.0", "1e3") is accepted only when it is a whole number in range:
  // "0.9", "inf" or "1e300" are errors, never truncated.
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t none, int64_t min,
                              int64_t max) const {
    absl::string_view cell = Cell(name);
    if (IsNone(cell)) return none;
    int64_t v = 0;
    if (!absl::SimpleAtoi(cell, &v)) {
      double d = 0;
      if (!absl::SimpleAtod(cell, &d) || !std::isfinite(d) || d != std::trunc(d)) {
        return Error(name, absl::StrCat("'", internal::Echo(cell), "' is not an integer"));
      }
      // Compared as doubles: casting one outside int64's range is undefined.
      // (2^63 itself rounds to INT64_MAX's double, hence the second test).
      if (d < static_cast<double>(min) || d > static_cast<double>(max) ||
          std::fabs(d) >= 0x1p63) {
        return OutOfRange(name, internal::Echo(cell), min, max);
      }
      v = static_cast<int64_t>(d);
    }
    if (v < min || v > max) return OutOfRange(name, absl::StrCat(v), min, max);
    return v;
  }

  absl::Status OutOfRange(const std::string& name, const std::string& value, int64_t min,
                          int64_t max) const {
    if (min == 0 && value[0] == '-') return Error(name, absl::StrCat(value, " is negative"));
    return Error(name, absl::StrCat(value, " is outside ", min, "..", max));
  }

  absl::Status Error(const std::string& column, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ":", line_, ": ", column.empty() ? "row" : absl::StrCat("column '", column, "'"),
        " ", what));
  }

 private:
  absl::string_view text_;
  std::string source_;
  size_t pos_ = 0;
  int line_ = 0;
  std::vector<absl::string_view> cells_;
  std::map<std::string, int> columns_;
};

int64_t ModelMemory(const std::string& model, const TraceOptions& options) {
  static const auto* table = new std::map<std::string, int64_t>{
      {"T4", 16}, {"P100", 16}, {"V100M16", 16}, {"V100M32", 32}, {"A10", 24}};
  auto it = table->find(model);
  return it == table->end() ? options.default_gpu_memory : it->second;
}

}  // namespace

absl::StatusOr<std::vector<Node>> ParseOpenbNodes(std::string_view csv, std::string_view source,
                                                  const TraceOptions& options) {
  if (options.default_gpu_memory < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default gpu memory ", options.default_gpu_memory, " must be at least 1"));
  }
  CsvReader reader(csv, source);
  GPUSHARE_RETURN_IF_ERROR(reader.Header({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<Node> nodes;
  absl::flat_hash_set<std::string> names;
  while (reader.NextLine()) {
    GPUSHARE_RETURN_IF_ERROR(reader.RowWidth());
    Node node;
    node.name = std::string(reader.Cell("sn"));
    if (IsNone(node.name)) return reader.Error("sn", "is empty");
    if (!names.insert(node.name).second) {
      return reader.Error("sn", absl::StrCat("repeats node '", internal::Echo(node.name), "'"));
    }
    GPUSHARE_ASSIGN_OR_RETURN(node.cpu, reader.Int("cpu_milli", 0, 0, kMaxQuantity));
    GPUSHARE_ASSIGN_OR_RETURN(node.host_memory, reader.Int("memory_mib", 0, 0, kMaxQuantity));
    GPUSHARE_ASSIGN_OR_RETURN(const int64_t gpus, reader.Int("gpu", 0, 0, kMaxGpusPerNode));
    absl::string_view model = reader.Cell("model");
    const std::string model_name = IsNone(model) ? "" : std::string(model);
    for (int64_t i = 0; i < gpus; ++i) {
      node.gpus.push_back(Gpu{ModelMemory(model_name, options), model_name, "", true});
    }
    node.gpu_sharing = true;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

absl::StatusOr<std::vector<Node>> LoadOpenbNodes(const std::string& path,
                                                 const TraceOptions& options) {
  GPUSHARE_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseOpenbNodes(text, path, options);
}

absl::StatusOr<std::vector<TraceTask>> ParseOpenbTasks(std::string_view csv,
                                                       std::string_view source) {
  CsvReader reader(csv, source);
  GPUSHARE_RETURN_IF_ERROR(
      reader.Header({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  std::vector<TraceTask> tasks;
  while (reader.NextLine()) {
    GPUSHARE_RETURN_IF_ERROR(reader.RowWidth());
    TraceTask t;
    t.name = std::string(reader.Cell("name"));
    if (IsNone(t.name)) return reader.Error("name", "is empty");
    GPUSHARE_ASSIGN_OR_RETURN(t.cpu, reader.Int("cpu_milli", 0, 0, kMaxQuantity));
    GPUSHARE_ASSIGN_OR_RETURN(t.memory_mib, reader.Int("memory_mib", 0, 0, kMaxQuantity));
    GPUSHARE_ASSIGN_OR_RETURN(const int64_t num_gpu,
                              reader.Int("num_gpu", 0, 0, kMaxGpusPerNode));
    t.num_gpu = static_cast<int>(num_gpu);
    GPUSHARE_ASSIGN_OR_RETURN(t.gpu_milli, reader.Int("gpu_milli", 0, 0, kGpuCompute));
    if (t.num_gpu > 1 && t.gpu_milli != kGpuCompute) {
      return reader.Error("gpu_milli", absl::StrCat(t.gpu_milli, " on ", t.num_gpu,
                                                    " GPUs (a share below 1000 needs 1 GPU)"));
    }
    if ((t.num_gpu > 0) != (t.gpu_milli > 0)) {
      return reader.Error("gpu_milli", absl::StrCat(t.gpu_milli, " with num_gpu ", t.num_gpu));
    }
    if (reader.Has("gpu_spec") && !IsNone(reader.Cell("gpu_spec"))) {
      for (absl::string_view m : absl::StrSplit(reader.Cell("gpu_spec"), '|', absl::SkipEmpty())) {
        std::string model(absl::StripAsciiWhitespace(m));
        if (std::find(t.gpu_spec.begin(), t.gpu_spec.end(), model) == t.gpu_spec.end()) {
          t.gpu_spec.push_back(std::move(model));
        }
      }
    }
    if (reader.Has("qos") && !IsNone(reader.Cell("qos"))) t.qos = std::string(reader.Cell("qos"));
    if (reader.Has("pod_phase") && !IsNone(reader.Cell("pod_phase"))) {
      t.phase = std::string(reader.Cell("pod_phase"));
    }
    // Times are seconds from the start of the trace; a negative one is an
    // error rather than "unknown" (which is an empty cell or nan).
    constexpr int64_t kMaxTime = std::numeric_limits<int64_t>::max();
    GPUSHARE_ASSIGN_OR_RETURN(t.creation_time, reader.Int("creation_time", -1, 0, kMaxTime));
    GPUSHARE_ASSIGN_OR_RETURN(t.deletion_time, reader.Int("deletion_time", -1, 0, kMaxTime));
    GPUSHARE_ASSIGN_OR_RETURN(t.scheduled_time, reader.Int("scheduled_time", -1, 0, kMaxTime));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

absl::StatusOr<std::vector<TraceTask>> LoadOpenbTasks(const std::string& path) {
  GPUSHARE_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseOpenbTasks(text, path);
}

Request ToRequest(const TraceTask& task) {
  Request r;
  r.id = task.name;
  r.cpu = task.cpu;
  r.host_memory = task.memory_mib;
  r.gpu_models = task.gpu_spec;
  if (task.num_gpu > 0 && task.gpu_milli >= kGpuCompute) {
    r.whole_gpus = task.num_gpu;
  } else if (task.num_gpu > 0) {
    r.compute = task.gpu_milli;
    r.gpu_count = task.num_gpu;
  }
  return r;
}

std::vector<Request> ToRequests(const std::vector<TraceTask>& tasks) {
  std::vector<Request> out;
  out.reserve(tasks.size());
  for (const TraceTask& t : tasks) out.push_back(ToRequest(t));
  return out;
}

}  // namespace gpushare
