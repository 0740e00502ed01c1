// The topology model: link kinds, weights, the interned immutable graph and
// its compact JSON form.

#include "gpushare/topology.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/internal/json_text.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"
#include "src/topology/topology_impl.h"

namespace gpushare {
namespace {

std::atomic<int64_t> live_topologies{0};

// Interned topologies by their canonical text.
struct Registry {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<const Topology>> by_key;
};
Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

int PopCount(uint64_t x) { return __builtin_popcountll(x); }

// Every subset of `size` GPUs among `allowed` (bit mask) whose pairs are all
// adjacent in `adj`, appended to `out`; stops after `limit` + 1 of them.
void Cliques(const std::vector<uint64_t>& adj, uint64_t allowed, int size, uint64_t chosen,
             size_t limit, std::vector<uint64_t>* out) {
  if (out->size() > limit) return;
  if (size == 0) {
    out->push_back(chosen);
    return;
  }
  while (allowed != 0 && PopCount(allowed) >= size) {
    const int v = __builtin_ctzll(allowed);
    allowed &= allowed - 1;
    Cliques(adj, allowed & adj[v], size - 1, chosen | (uint64_t{1} << v), limit, out);
    if (out->size() > limit) return;
  }
}

}  // namespace

std::string LinkName(const Link& link) {
  switch (link.kind) {
    case LinkKind::kSys: return "SYS";
    case LinkKind::kNode: return "NODE";
    case LinkKind::kPhb: return "PHB";
    case LinkKind::kPxb: return "PXB";
    case LinkKind::kPix: return "PIX";
    case LinkKind::kNvLink: return absl::StrCat("NV", link.nvlinks);
  }
  return "?";
}

absl::StatusOr<Link> ParseLink(std::string_view text) {
  const absl::string_view t(text.data(), text.size());
  if (t == "SYS" || t == "SOC") return Link{LinkKind::kSys, 0};
  if (t == "NODE") return Link{LinkKind::kNode, 0};
  if (t == "PHB") return Link{LinkKind::kPhb, 0};
  if (t == "PXB") return Link{LinkKind::kPxb, 0};
  if (t == "PIX") return Link{LinkKind::kPix, 0};
  if (t == "NVLINK") return Link{LinkKind::kNvLink, 1};
  int n = 0;
  if (t.size() > 2 && t.substr(0, 2) == "NV" && t.size() <= 4 &&
      std::all_of(t.begin() + 2, t.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      absl::SimpleAtoi(t.substr(2), &n) && n >= 1 && n <= 64) {
    return Link{LinkKind::kNvLink, n};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown link '", internal::Echo(text),
                   "' (expected SYS, NODE, PHB, PXB, PIX or NV1..NV64)"));
}

double LinkWeights::Of(const Link& link) const {
  switch (link.kind) {
    case LinkKind::kSys: return sys;
    case LinkKind::kNode: return node;
    case LinkKind::kPhb: return phb;
    case LinkKind::kPxb: return pxb;
    case LinkKind::kPix: return pix;
    case LinkKind::kNvLink: return nvlink * link.nvlinks;
  }
  return 0;
}

bool operator==(const LinkWeights& a, const LinkWeights& b) {
  return a.sys == b.sys && a.node == b.node && a.phb == b.phb && a.pxb == b.pxb &&
         a.pix == b.pix && a.nvlink == b.nvlink;
}

absl::Status ValidateLinkWeights(const LinkWeights& w) {
  const std::pair<const char*, double> order[] = {{"sys", w.sys}, {"node", w.node},
                                                  {"phb", w.phb}, {"pxb", w.pxb},
                                                  {"pix", w.pix}, {"nvlink", w.nvlink}};
  for (size_t i = 0; i < 6; ++i) {
    if (!(order[i].second > 0) || !std::isfinite(order[i].second) || order[i].second > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat("link weight ", order[i].first, " ",
                                                     order[i].second,
                                                     " is not a positive number up to 1e9"));
    }
    if (i > 0 && !(order[i - 1].second < order[i].second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "link weight ", order[i].first, " ", order[i].second, " is not above ",
          order[i - 1].first, " ", order[i - 1].second));
    }
  }
  return absl::OkStatus();
}

const char* TopologyModeName(TopologyNeed::Mode mode) {
  switch (mode) {
    case TopologyNeed::Mode::kNone: return "none";
    case TopologyNeed::Mode::kPrefer: return "prefer";
    case TopologyNeed::Mode::kRequire: return "require";
  }
  return "?";
}

Topology::Topology() : impl_(std::make_unique<Impl>()) { ++live_topologies; }
Topology::~Topology() { --live_topologies; }
int64_t Topology::LiveCount() { return live_topologies.load(); }

absl::StatusOr<TopologyPtr> Topology::Make(const std::vector<std::vector<Link>>& links,
                                           const std::vector<int>& gpu_numa,
                                           const LinkWeights& weights) {
  const int n = static_cast<int>(links.size());
  if (n < 1 || n > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology has ", links.size(), " GPUs; it must have 1 to 64"));
  }
  GPUSHARE_RETURN_IF_ERROR(ValidateLinkWeights(weights));
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(links[i].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("topology row of GPU", i, " has ",
                                                     links[i].size(), " links, not ", n));
    }
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const Link& l = links[i][j];
      if (l.kind == LinkKind::kNvLink ? (l.nvlinks < 1 || l.nvlinks > 64) : l.nvlinks != 0) {
        return absl::InvalidArgumentError(absl::StrCat("link GPU", i, "-GPU", j, " has ",
                                                       l.nvlinks, " NVLinks"));
      }
      if (links[j][i] != l) {
        return absl::InvalidArgumentError(
            absl::StrCat("link GPU", i, "-GPU", j, " is ", LinkName(l), " but GPU", j,
                         "-GPU", i, " is ", LinkName(links[j][i])));
      }
    }
  }
  if (!gpu_numa.empty() && static_cast<int>(gpu_numa.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology NUMA list has ", gpu_numa.size(), " entries for ", n, " GPUs"));
  }
  for (int v : gpu_numa) {
    if (v < -1 || v > 4095) {
      return absl::InvalidArgumentError(absl::StrCat("NUMA node ", v, " is out of -1..4095"));
    }
  }
  std::shared_ptr<Topology> t(new Topology());
  t->n_ = n;
  t->weights_ = weights;
  t->numa_ = gpu_numa.empty() ? std::vector<int>(n, -1) : gpu_numa;
  t->links_.assign(static_cast<size_t>(n) * n, Link{});
  t->weights_of_.assign(static_cast<size_t>(n) * n, 0);
  // The graph is the model of record; the dense matrices are read off it.
  TopologyGraph& g = t->impl_->graph;
  g = TopologyGraph(n);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) boost::add_edge(i, j, weights.Of(links[i][j]), g);
  }
  auto weight_map = boost::get(boost::edge_weight, g);
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    const int a = static_cast<int>(boost::source(*it, g));
    const int b = static_cast<int>(boost::target(*it, g));
    t->weights_of_[a * n + b] = t->weights_of_[b * n + a] = weight_map[*it];
    t->links_[a * n + b] = t->links_[b * n + a] = links[a][b];
  }
  t->best_ = t->worst_ = n > 1 ? links[0][1] : Link{LinkKind::kNvLink, 1};
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      t->best_ = std::max(t->best_, links[i][j]);
      t->worst_ = std::min(t->worst_, links[i][j]);
    }
  }
  t->uniform_ = t->best_ == t->worst_;

  // Twin classes.
  Impl& impl = *t->impl_;
  impl.twin.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (impl.twin[i] >= 0) continue;
    impl.twin[i] = i;
    for (int j = i + 1; j < n; ++j) {
      if (impl.twin[j] >= 0) continue;
      bool same = true;
      for (int x = 0; x < n && same; ++x) {
        if (x != i && x != j) same = links[i][x] == links[j][x];
      }
      if (same) impl.twin[j] = i;
    }
  }
  // Well-connected groups.
  std::vector<double> levels;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) levels.push_back(t->weights_of_[i * n + j]);
  }
  std::sort(levels.rbegin(), levels.rend());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  for (int size : kGroupSizes) {
    if (size > n) continue;
    Impl::GroupLevel level;
    level.size = size;
    for (double threshold : levels) {
      std::vector<uint64_t> adj(n, 0);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          if (i != j && t->weights_of_[i * n + j] >= threshold) adj[i] |= uint64_t{1} << j;
        }
      }
      std::vector<uint64_t> found;
      Cliques(adj, all, size, 0, kMaxGroups, &found);
      if (found.empty()) continue;
      level.threshold = threshold;
      if (threshold == levels.back()) {
        level.all_groups = true;  // Every pair qualifies.
      } else if (found.size() > kMaxGroups) {
        level.skipped = true;
      } else {
        level.groups = std::move(found);
      }
      break;
    }
    impl.levels.push_back(std::move(level));
  }

  // Intern.
  // The JSON form leaves default weights out, so they are spelled out here.
  const std::string full_key =
      absl::StrCat(t->ToJson(), "|", weights.sys, ",", weights.node, ",", weights.phb, ",",
                   weights.pxb, ",", weights.pix, ",", weights.nvlink);
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto& slot = registry.by_key[full_key];
  if (TopologyPtr existing = slot.lock()) return existing;
  if (registry.by_key.size() > 1024) {
    for (auto it = registry.by_key.begin(); it != registry.by_key.end();) {
      it = it->second.expired() && it->first != full_key ? registry.by_key.erase(it)
                                                           : std::next(it);
    }
  }
  TopologyPtr result = std::move(t);
  registry.by_key[full_key] = result;
  return result;
}

GpuSetChoice Topology::Rate(const std::vector<int>& gpus) const {
  GpuSetChoice r;
  r.gpus = gpus;
  bool first = true;
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      const double w = weight(gpus[a], gpus[b]);
      r.total_weight += w;
      if (first || w < r.weakest_weight) {
        r.weakest_weight = w;
        r.weakest = link(gpus[a], gpus[b]);
        first = false;
      }
    }
  }
  return r;
}

std::string Topology::ToMatrixText() const {
  std::string out;
  for (int j = 0; j < n_; ++j) absl::StrAppend(&out, "\tGPU", j);
  out += "\n";
  for (int i = 0; i < n_; ++i) {
    absl::StrAppend(&out, "GPU", i);
    for (int j = 0; j < n_; ++j) absl::StrAppend(&out, "\t", i == j ? " X " : LinkName(link(i, j)));
    out += "\n";
  }
  return out;
}

std::string Topology::ToJson() const {
  nlohmann::json j;
  j["gpus"] = n_;
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i + 1 < n_; ++i) {
    std::string row;
    for (int k = i + 1; k < n_; ++k) {
      if (k > i + 1) row += ' ';
      row += LinkName(link(i, k));
    }
    rows.push_back(row);
  }
  j["links"] = rows;
  if (std::any_of(numa_.begin(), numa_.end(), [](int v) { return v >= 0; })) j["numa"] = numa_;
  if (!(weights_ == LinkWeights{})) {
    j["weights"] = {{"sys", weights_.sys}, {"node", weights_.node}, {"phb", weights_.phb},
                    {"pxb", weights_.pxb}, {"pix", weights_.pix}, {"nvlink", weights_.nvlink}};
  }
  return internal::DumpJson(j);
}

absl::StatusOr<TopologyPtr> Topology::FromJson(std::string_view text) {
  GPUSHARE_ASSIGN_OR_RETURN(nlohmann::json j, internal::ParseJsonText(text, "topology JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError("topology JSON is not an object");
  for (const auto& item : j.items()) {
    if (item.key() != "gpus" && item.key() != "links" && item.key() != "numa" &&
        item.key() != "weights") {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON has unknown field '", internal::Echo(item.key()), "'"));
    }
  }
  if (!j.contains("gpus") || !j["gpus"].is_number_integer() || j["gpus"].get<int64_t>() < 1 ||
      j["gpus"].get<int64_t>() > 64) {
    return absl::InvalidArgumentError("topology JSON field 'gpus' must be an integer 1..64");
  }
  const int n = j["gpus"].get<int>();
  if (!j.contains("links") || !j["links"].is_array() ||
      static_cast<int>(j["links"].size()) != n - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology JSON field 'links' must be an array of ", n - 1, " strings"));
  }
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  for (int i = 0; i + 1 < n; ++i) {
    const nlohmann::json& row = j["links"][i];
    if (!row.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("topology JSON links[", i, "] is not a string"));
    }
    const std::string s = row.get<std::string>();
    std::vector<std::string> tokens = absl::StrSplit(s, ' ');
    if (static_cast<int>(tokens.size()) != n - 1 - i) {
      return absl::InvalidArgumentError(absl::StrCat("topology JSON links[", i, "] '",
                                                     internal::Echo(s), "' has ", tokens.size(),
                                                     " links, not ", n - 1 - i));
    }
    for (int k = i + 1; k < n; ++k) {
      absl::StatusOr<Link> l = ParseLink(tokens[k - i - 1]);
      if (!l.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("topology JSON links[", i, "]: ", l.status().message()));
      }
      links[i][k] = links[k][i] = *l;
    }
  }
  std::vector<int> numa;
  if (j.contains("numa")) {
    const nlohmann::json& a = j["numa"];
    if (!a.is_array() || static_cast<int>(a.size()) != n ||
        !std::all_of(a.begin(), a.end(), [](const nlohmann::json& v) {
          return v.is_number_integer() && v.get<int64_t>() >= -1 && v.get<int64_t>() <= 4095;
        })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "topology JSON field 'numa' must be an array of ", n, " integers -1..4095"));
    }
    for (const auto& v : a) numa.push_back(v.get<int>());
  }
  LinkWeights w;
  if (j.contains("weights")) {
    const nlohmann::json& o = j["weights"];
    if (!o.is_object()) return absl::InvalidArgumentError("topology JSON field 'weights' is not an object");
    std::pair<const char*, double*> fields[] = {{"sys", &w.sys}, {"node", &w.node},
                                                {"phb", &w.phb}, {"pxb", &w.pxb},
                                                {"pix", &w.pix}, {"nvlink", &w.nvlink}};
    for (const auto& item : o.items()) {
      auto f = std::find_if(std::begin(fields), std::end(fields),
                            [&](const auto& p) { return item.key() == p.first; });
      if (f == std::end(fields) || !item.value().is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "topology JSON weights field '", internal::Echo(item.key()), "' is unknown or not a number"));
      }
      *f->second = item.value().get<double>();
    }
  }
  return Make(links, numa, w);
}

}  // namespace gpushare
