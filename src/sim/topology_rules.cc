// Attaching fixture topologies to trace nodes (gpushare/simulate.h).

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpushare/simulate.h"
#include "src/internal/status_macros.h"

namespace gpushare {

absl::StatusOr<TopologyRule> LoadTopologyRule(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topology rule '", internal::Sv(spec), "' is not N=FILE or MODEL=FILE"));
  }
  const std::string key(spec.substr(0, eq));
  const std::string path(spec.substr(eq + 1));
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("topology rule '", internal::Sv(spec), "': cannot read '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  const size_t first = body.find_first_not_of(" \t\r\n");
  absl::StatusOr<TopologyPtr> topology = first != std::string::npos && body[first] == '{'
                                             ? Topology::FromJson(body)
                                             : Topology::FromNvidiaSmi(body);
  if (!topology.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology rule '", internal::Sv(spec), "': ", topology.status().message()));
  }
  TopologyRule rule;
  rule.topology = *std::move(topology);
  int count = 0;
  if (absl::SimpleAtoi(key, &count)) {
    if (count != rule.topology->num_gpus()) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology rule '", internal::Sv(spec), "': '", path, "' has ",
                       rule.topology->num_gpus(), " GPUs, not ", count));
    }
  } else {
    rule.model = key;
  }
  return rule;
}

std::vector<Node> AttachTopologies(const std::vector<Node>& nodes,
                                   const std::vector<TopologyRule>& rules) {
  std::vector<Node> out = nodes;
  for (Node& node : out) {
    if (node.topology != nullptr) continue;
    for (const TopologyRule& rule : rules) {
      if (rule.topology == nullptr ||
          static_cast<int>(node.gpus.size()) != rule.topology->num_gpus()) {
        continue;
      }
      if (!rule.model.empty() &&
          !std::all_of(node.gpus.begin(), node.gpus.end(),
                       [&](const Gpu& g) { return g.model == rule.model; })) {
        continue;
      }
      node.topology = rule.topology;
      break;
    }
  }
  return out;
}

}  // namespace gpushare
