// Test vocabulary shared by the C++ tests: small node and request builders.

#ifndef GPUSHARE_TESTS_TESTING_FIXTURES_H_
#define GPUSHARE_TESTS_TESTING_FIXTURES_H_

#include <string>
#include <vector>

#include "gpushare/gpushare.h"

namespace gpushare::testing {

// A node taking shared work with GPUs of the given sizes, all of `model`.
inline Node SharedNode(const std::string& name, std::vector<int64_t> gpu_memory,
                       const std::string& model = "T4", const std::string& address = "") {
  Node node;
  node.name = name;
  node.address = address;
  node.labels = {{"gpushare", "true"}};
  for (int64_t m : gpu_memory) node.gpus.push_back(Gpu{m, model, "", true});
  return node;
}

// A topology over `gpus` GPUs for randomized tests: NVLink pairs, PCIe
// switches of four and SYS between them; with `all_nvlink`, NVLink between
// every two GPUs (a uniform topology).
inline TopologyPtr PairedTopology(size_t gpus, bool all_nvlink) {
  std::vector<std::vector<Link>> links(gpus, std::vector<Link>(gpus));
  for (size_t i = 0; i < gpus; ++i) {
    for (size_t j = 0; j < gpus; ++j) {
      if (all_nvlink || i / 2 == j / 2) {
        links[i][j] = Link{LinkKind::kNvLink, 2};
      } else {
        links[i][j] = Link{i / 4 == j / 4 ? LinkKind::kPix : LinkKind::kSys, 0};
      }
    }
  }
  absl::StatusOr<TopologyPtr> t = Topology::Make(links);
  return t.ok() ? *t : nullptr;
}

// A topology need for randomized tests, from draws made by the caller (in a
// fixed order): `mode` 0, 1 or 2 for none, prefer or require; a minimum link
// of NV1 or else PIX; the weakest-link or else the total objective.
inline TopologyNeed DrawnTopologyNeed(int mode, bool nvlink, bool weakest_link) {
  static constexpr TopologyNeed::Mode kModes[] = {
      TopologyNeed::Mode::kNone, TopologyNeed::Mode::kPrefer, TopologyNeed::Mode::kRequire};
  TopologyNeed need;
  need.mode = kModes[mode];
  need.min_link = nvlink ? Link{LinkKind::kNvLink, 1} : Link{LinkKind::kPix, 0};
  need.objective = weakest_link ? TopologyObjective::kWeakestLink : TopologyObjective::kTotal;
  return need;
}

inline Request Shared(const std::string& id, int64_t memory, int64_t count = 1) {
  Request r;
  r.id = id;
  r.gpu_memory = memory;
  r.gpu_count = count;
  return r;
}

inline Request Exclusive(const std::string& id, int64_t gpus) {
  Request r;
  r.id = id;
  r.whole_gpus = gpus;
  return r;
}

// The two nodes of scenario S1: one 14 GiB T4 each, labelled for sharing.
inline Cluster S1Cluster() {
  Cluster c;
  (void)c.AddNode(SharedNode("sd-cluster-04", {14}, "T4", "192.168.1.214"));
  (void)c.AddNode(SharedNode("sd-cluster-05", {14}, "T4", "192.168.1.215"));
  return c;
}

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_FIXTURES_H_
