// Topology::FromNvidiaSmi: reads the matrix `nvidia-smi topo -m` prints.

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gpushare/topology.h"
#include "src/internal/text.h"

namespace gpushare {
namespace {

// Removes the ANSI escape sequences (ESC [ ... letter) a terminal gets, e.g.
// the underlined header row.
std::string StripAnsi(absl::string_view line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && !absl::ascii_isalpha(static_cast<unsigned char>(line[i]))) ++i;
      continue;
    }
    out += line[i];
  }
  return out;
}

std::vector<std::string> Tokens(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// "GPU<n>" -> n, else -1.
int GpuNumber(absl::string_view name) {
  int n = -1;
  if (!absl::ConsumePrefix(&name, "GPU") || name.empty() ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      name.size() > 2 || !absl::SimpleAtoi(name, &n)) {
    return -1;
  }
  return n;
}

absl::Status Bad(int line, absl::string_view what, absl::string_view token) {
  return absl::InvalidArgumentError(absl::StrCat("nvidia-smi topo -m, line ", line, ": ", what,
                                                 " '", internal::Echo(token), "'"));
}

}  // namespace

absl::StatusOr<TopologyPtr> Topology::FromNvidiaSmi(std::string_view text,
                                                    const LinkWeights& weights) {
  const std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(text.data(), text.size()), '\n');
  int header_line = 0;
  std::vector<std::string> devices;  // Column names, in order.
  int affinity_columns = 0;          // CPU Affinity, NUMA Affinity, GPU NUMA ID.
  int numa_column = -1;              // Which of them is NUMA Affinity.
  std::vector<std::vector<std::string>> cells;  // Per device row: its links.
  std::vector<int> row_line;
  std::vector<int> numa;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    std::string line = StripAnsi(lines[i]);
    absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty()) continue;
    if (absl::StartsWith(trimmed, "Legend") || absl::StartsWith(trimmed, "NIC Legend")) break;
    if (header_line == 0) {
      // The header: device names, then the affinity titles (with spaces).
      absl::string_view rest = trimmed;
      for (const char* title : {"CPU Affinity", "NUMA Affinity", "GPU NUMA ID"}) {
        const size_t at = rest.find(title);
        if (at == absl::string_view::npos) continue;
        if (std::string_view(title) == "NUMA Affinity") numa_column = affinity_columns;
        ++affinity_columns;
      }
      const size_t first_title = std::min({trimmed.find("CPU Affinity"),
                                           trimmed.find("NUMA Affinity"),
                                           trimmed.find("GPU NUMA ID")});
      if (first_title != absl::string_view::npos) rest = trimmed.substr(0, first_title);
      devices = Tokens(rest);
      if (devices.empty()) return Bad(line_no, "header row names no device in", trimmed);
      for (const std::string& d : devices) {
        if (std::count(devices.begin(), devices.end(), d) > 1) {
          return Bad(line_no, "header row names a device twice:", d);
        }
        if (d == "X" || absl::StrContains(d, "Affinity") ||
            !std::all_of(d.begin(), d.end(), [](char c) {
              return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
            })) {
          return Bad(line_no, "header row has a bad device name", d);
        }
      }
      header_line = line_no;
      continue;
    }
    std::vector<std::string> tokens = Tokens(trimmed);
    const std::string& name = tokens[0];
    const size_t row = cells.size();
    if (row >= devices.size()) {
      return Bad(line_no, "more rows than the header's devices; unexpected row", name);
    }
    if (name != devices[row]) {
      return Bad(line_no, absl::StrCat("row ", row + 1, " should be '", devices[row], "', not"),
                 name);
    }
    const size_t links = tokens.size() - 1;
    if (links < devices.size()) {
      return Bad(line_no,
                 absl::StrCat("row has ", links, " entries for ", devices.size(),
                              " devices; row"),
                 name);
    }
    if (links > devices.size() + affinity_columns) {
      return Bad(line_no, "unexpected extra column", tokens[devices.size() + affinity_columns + 1]);
    }
    std::vector<std::string> row_cells(tokens.begin() + 1, tokens.begin() + 1 + devices.size());
    for (size_t j = 0; j < row_cells.size(); ++j) {
      const std::string& cell = row_cells[j];
      if (j == row) {
        if (cell != "X") return Bad(line_no, absl::StrCat("the diagonal entry of ", name, " is not X:"), cell);
        continue;
      }
      if (absl::StartsWith(devices[j], "GPU") || absl::StartsWith(name, "GPU")) {
        absl::StatusOr<Link> l = ParseLink(cell);
        if (!l.ok()) return Bad(line_no, absl::StrCat("unknown link from ", name, " to ", devices[j]), cell);
      } else if (cell != "X" && !ParseLink(cell).ok()) {
        return Bad(line_no, absl::StrCat("unknown link from ", name, " to ", devices[j]), cell);
      }
    }
    int numa_node = -1;
    if (numa_column >= 0 && links > devices.size() + numa_column) {
      const std::string& v = tokens[1 + devices.size() + numa_column];
      if (v != "N/A" && (!absl::SimpleAtoi(v, &numa_node) || numa_node < 0 || numa_node > 4095)) {
        return Bad(line_no, "bad NUMA Affinity", v);
      }
      if (v == "N/A") numa_node = -1;
    }
    cells.push_back(std::move(row_cells));
    row_line.push_back(line_no);
    numa.push_back(numa_node);
  }
  if (header_line == 0) {
    return absl::InvalidArgumentError("nvidia-smi topo -m: no header row (the text is empty)");
  }
  if (cells.size() != devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nvidia-smi topo -m: the header names ", devices.size(), " devices but ", cells.size(),
        " rows follow; missing row '", devices[cells.size()], "'"));
  }
  // Symmetry over every device pair.
  for (size_t a = 0; a < devices.size(); ++a) {
    for (size_t b = a + 1; b < devices.size(); ++b) {
      if (cells[a][b] != cells[b][a]) {
        return Bad(row_line[b],
                   absl::StrCat("link ", devices[b], "-", devices[a], " differs from ",
                                devices[a], "-", devices[b], " '", cells[a][b], "' on line ",
                                row_line[a], ":"),
                   cells[b][a]);
      }
    }
  }
  // The GPUs: GPU0..GPU<n-1> in any column order.
  std::vector<int> column_of;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (!absl::StartsWith(devices[d], "GPU")) continue;
    const int g = GpuNumber(devices[d]);
    if (g < 0) return Bad(header_line, "bad GPU name", devices[d]);
    if (g >= static_cast<int>(column_of.size())) column_of.resize(g + 1, -1);
    column_of[g] = static_cast<int>(d);
  }
  if (column_of.empty()) return Bad(header_line, "header row names no GPU in", lines[header_line - 1]);
  for (size_t g = 0; g < column_of.size(); ++g) {
    if (column_of[g] < 0) return Bad(header_line, absl::StrCat("GPU", g, " is missing; header"), lines[header_line - 1]);
  }
  const int n = static_cast<int>(column_of.size());
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  std::vector<int> gpu_numa(n, -1);
  for (int a = 0; a < n; ++a) {
    gpu_numa[a] = numa[column_of[a]];
    for (int b = 0; b < n; ++b) {
      if (a != b) links[a][b] = *ParseLink(cells[column_of[a]][column_of[b]]);
    }
  }
  if (std::all_of(gpu_numa.begin(), gpu_numa.end(), [](int v) { return v < 0; })) gpu_numa.clear();
  absl::StatusOr<TopologyPtr> t = Make(links, gpu_numa, weights);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("nvidia-smi topo -m: ", t.status().message()));
  }
  return t;
}

}  // namespace gpushare
