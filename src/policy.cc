// The registry of built-in policies: one line per policy in kPolicies.

#include "gpushare/policy.h"

#include <algorithm>
#include <functional>
#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpushare/fragmentation.h"
#include "src/policies/bestfit_policy.h"
#include "src/policies/binpack_policy.h"
#include "src/policies/dotprod_policy.h"
#include "src/policies/dra_policy.h"
#include "src/policies/fgd_policy.h"
#include "src/policies/gpuclustering_policy.h"
#include "src/policies/gpupacking_policy.h"
#include "src/policies/random_policy.h"
#include "src/policies/spread_policy.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"

namespace gpushare {
namespace {

struct Entry {
  const char* name;
  std::function<std::unique_ptr<Policy>(const PolicyOptions&)> make;
};

const std::vector<Entry>& Registry() {
  static const auto* registry = new std::vector<Entry>{
      {"binpack", [](const PolicyOptions&) { return policies::NewBinpackPolicy(); }},
      {"spread", [](const PolicyOptions&) { return policies::NewSpreadPolicy(); }},
      {"fgd", [](const PolicyOptions& o) { return policies::NewFgdPolicy(o); }},
      {"fgdcpu",
       [](const PolicyOptions& o) {
         return policies::NewFgdPolicy(o, policies::FgdVariant::kCpuTies);
       }},
      {"fgdpack",
       [](const PolicyOptions& o) {
         return policies::NewFgdPolicy(o, policies::FgdVariant::kPacking);
       }},
      {"bestfit", [](const PolicyOptions&) { return policies::NewBestFitPolicy(); }},
      {"dotprod", [](const PolicyOptions&) { return policies::NewDotProdPolicy(); }},
      {"gpupacking", [](const PolicyOptions&) { return policies::NewGpuPackingPolicy(); }},
      {"gpuclustering",
       [](const PolicyOptions&) { return policies::NewGpuClusteringPolicy(); }},
      {"random", [](const PolicyOptions& o) { return policies::NewRandomPolicy(o.seed); }},
      {"dra", [](const PolicyOptions&) { return policies::NewDraPolicy(); }},
  };
  return *registry;
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Score& s) {
  os << "Score(" << s.primary << ", " << s.secondary << ", " << s.tertiary;
  if (s.topology != 0) os << ", topology=" << s.topology;
  return os << ")";
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Entry& e : Registry()) {
    names.emplace_back(e.name);
    if (std::string_view(e.name) != "dra") names.push_back(absl::StrCat("dra+", e.name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options) {
  // "dra+<name>": <name> scores the nodes, the DRA allocator's choice the GPUs.
  constexpr std::string_view kDra = "dra+";
  if (name.substr(0, kDra.size()) == kDra) {
    const std::string_view inner = name.substr(kDra.size());
    if (inner == "dra" || inner.substr(0, kDra.size()) == kDra) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy '", internal::Echo(name),
                       "': 'dra+' takes a node-scoring policy, not '", internal::Echo(inner),
                       "' (DRA's device choice is already the second half)"));
    }
    absl::StatusOr<std::unique_ptr<Policy>> node_policy = MakePolicy(inner, options);
    if (!node_policy.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy '", internal::Echo(name), "': ", node_policy.status().message()));
    }
    return policies::NewDraPolicy(*std::move(node_policy));
  }
  for (const Entry& e : Registry()) {
    if (name != e.name) continue;
    if (options.fgd_target != nullptr) {
      if (absl::Status bad = ValidateTargetWorkload(*options.fgd_target); !bad.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("policy '", e.name, "': target workload: ", bad.message()));
      }
    }
    return e.make(options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", internal::Echo(name), "'; known policies: ",
                   absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace gpushare
