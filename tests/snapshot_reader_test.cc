// The two snapshot readers (src/formats/snapshot_reader.h) agree: whenever
// the fast one accepts a text, the reference accepts it too and builds the
// same cluster; Cluster::FromJson() always gives the reference's result (the
// same cluster, or the same error). On the fuzz corpus, random snapshots, and
// malformed texts derived from them.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "src/formats/snapshot_reader.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

// Checks the promise of snapshot_reader.h for `text`; returns whether the
// fast reader accepted it.
bool ExpectReadersAgree(const std::string& text) {
  absl::StatusOr<Cluster> reference = internal::SnapshotFromJsonReference(text);
  absl::StatusOr<Cluster> fast = internal::SnapshotFromJsonFast(text);
  absl::StatusOr<Cluster> loaded = Cluster::FromJson(text);
  const std::string shown = text.size() > 300 ? text.substr(0, 300) + "..." : text;
  if (fast.ok()) {
    EXPECT_TRUE(reference.ok()) << "fast accepts, reference says " << reference.status()
                                << "\n" << shown;
    if (reference.ok()) {
      EXPECT_EQ(fast->ToJson(), reference->ToJson()) << shown;
    }
  } else {
    EXPECT_TRUE(absl::IsInvalidArgument(fast.status())) << fast.status();
  }
  EXPECT_EQ(loaded.ok(), reference.ok()) << shown;
  if (loaded.ok() && reference.ok()) {
    EXPECT_EQ(loaded->ToJson(), reference->ToJson()) << shown;
    EXPECT_OK(loaded->CheckInvariants());
  } else if (!loaded.ok() && !reference.ok()) {
    EXPECT_EQ(loaded.status(), reference.status()) << shown;
  }
  return fast.ok();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SnapshotReaderTest, FastReaderLoadsTheCorpusAsTheReferenceDoes) {
  for (const char* name : {"empty.json", "mib.json", "two_nodes.json"}) {
    const std::string text =
        ReadFile(absl::StrCat(GPUSHARE_SOURCE_DIR, "/fuzz/corpus/snapshot/", name));
    ASSERT_FALSE(text.empty()) << name;
    EXPECT_TRUE(ExpectReadersAgree(text)) << name << " refused by the fast reader";
  }
}

// A random cluster: odd names and labels (escapes, UTF-8), unhealthy GPUs,
// cordons, topologies, shared and exclusive placements, random options.
Cluster RandomCluster(absl::BitGen& gen) {
  ClusterOptions options;
  options.memory_unit = absl::Bernoulli(gen, 0.5) ? MemoryUnit::kGiB : MemoryUnit::kMiB;
  options.tie_break_seed = absl::Bernoulli(gen, 0.5) ? 0 : absl::Uniform<uint64_t>(gen);
  options.remembered_releases = absl::Uniform(gen, 0, 100000);
  Cluster c(options);
  const std::vector<std::string> odd = {"", "a\"b", "back\\slash", "tab\there", "\xc3\xa9t\xc3\xa9",
                                        "\xe2\x82\xac", "node-0", "-0", "x/y"};
  const int nodes = absl::Uniform(gen, 0, 12);
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) {
    Node n;
    n.name = absl::StrCat("n", i, odd[absl::Uniform<size_t>(gen, 0, odd.size())]);
    if (absl::Bernoulli(gen, 0.5)) n.address = absl::StrCat("10.0.0.", i);
    for (int l = absl::Uniform(gen, 0, 4); l > 0; --l) {
      n.labels[absl::StrCat("k", l, odd[absl::Uniform<size_t>(gen, 0, odd.size())])] =
          odd[absl::Uniform<size_t>(gen, 0, odd.size())];
    }
    const int gpus = absl::Uniform(gen, 0, 9);
    for (int g = 0; g < gpus; ++g) {
      n.gpus.push_back(Gpu{absl::Uniform<int64_t>(gen, 1, 80), absl::Bernoulli(gen, 0.5) ? "T4" : "",
                           absl::Bernoulli(gen, 0.3) ? absl::StrCat("GPU-", i, "-", g) : "", true});
    }
    if (absl::Bernoulli(gen, 0.5)) {
      n.cpu = absl::Uniform<int64_t>(gen, 1, 128000);
      n.host_memory = absl::Uniform<int64_t>(gen, 1, 1 << 20);
    }
    n.gpu_sharing = absl::Bernoulli(gen, 0.7);
    if (gpus >= 2 && absl::Bernoulli(gen, 0.3)) {
      std::vector<std::vector<Link>> links(gpus, std::vector<Link>(gpus));
      for (int a = 0; a < gpus; ++a) {
        for (int b = a + 1; b < gpus; ++b) {
          const Link l = absl::Bernoulli(gen, 0.5) ? Link{LinkKind::kNvLink, 2} : Link{};
          links[a][b] = links[b][a] = l;
        }
      }
      n.topology = *Topology::Make(links);
    }
    if (c.AddNode(n).ok()) names.push_back(n.name);
  }
  for (int i = absl::Uniform(gen, 0, 30); i > 0; --i) {
    Request r;
    r.id = absl::StrCat("pod-", i, odd[absl::Uniform<size_t>(gen, 0, odd.size())]);
    if (absl::Bernoulli(gen, 0.2)) {
      r.whole_gpus = absl::Uniform(gen, 1, 3);
    } else {
      r.gpu_memory = absl::Uniform(gen, 1, 20);
    }
    (void)c.Place(r);
  }
  for (const std::string& name : names) {
    const NodeStatus& n = *c.FindNode(name);
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (absl::Bernoulli(gen, 0.1)) (void)c.SetGpuHealthy(name, static_cast<int>(g), false);
    }
    if (absl::Bernoulli(gen, 0.2)) (void)c.SetNodeSchedulable(name, false);
  }
  return c;
}

TEST(SnapshotReaderTest, FastReaderLoadsRandomSnapshotsAsTheReferenceDoes) {
  absl::BitGen gen;
  for (int round = 0; round < 200; ++round) {
    const Cluster c = RandomCluster(gen);
    for (int indent : {-1, 2}) {
      const std::string text = c.ToJson(indent);
      EXPECT_TRUE(ExpectReadersAgree(text)) << "refused:\n" << text;
      EXPECT_EQ(Cluster::FromJson(text)->ToJson(indent), text);
    }
  }
}

// Texts that are not snapshots, or not quite: each reader must say the same.
TEST(SnapshotReaderTest, ReadersAgreeOnMalformedSnapshots) {
  const std::string head = R"({"format":"gpushare.cluster","version":1,)";
  const std::string node =
      R"({"name":"a","gpu_sharing":true,"gpus":[{"memory":8}],"labels":{"z":"1"}})";
  const std::vector<std::string> cases = {
      "", " ", "[]", "null", "{}", "{\"format\":1}", "\xef\xbb\xbf" + head +
          R"("nodes":[],"placements":[]})",
      head + R"("nodes":[],"placements":[]} x)",
      head + R"("nodes":[],"placements":[],"x":1e400})",
      head + R"("nodes":[],"placements":[],"x":18446744073709551616})",
      head + R"("nodes":[],"placements":[],"x":"\ud800"})",
      head + R"("nodes":[],"placements":[],"options":{"tie_break_seed":-0}})",
      head + R"("nodes":[],"placements":[],"options":{"tie_break_seed": -0}})",
      head + R"("nodes":[],"placements":[],"options":{"tie_break_seed":0}})",
      head + R"("nodes":[],"placements":[],"options":{"tie_break_seed":-1}})",
      head + R"("nodes":[],"placements":[],"options":{"tie_break_seed":1.0}})",
      head + R"("nodes":[],"placements":[],"options":{"memory_unit":"KiB"}})",
      head + R"("nodes":[],"placements":[],"options":{"remembered_releases":2147483648}})",
      head + R"("nodes":[],"placements":[],"options":null})",
      head + R"("nodes":[],"placements":[],"version":2})",
      head + R"("nodes":[],"placements":[],"version":1,"version":1})",
      head + R"("nodes":[)" + node + "," + node + R"(],"placements":[]})",
      head + R"("nodes":[{"name":"a","name":"b","gpu_sharing":true,"gpus":[]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[],"labels":{"k":1,"k":"v"}}],)"
             R"("placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[],"labels":{"k":"v","k":2}}],)"
             R"("placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[{"memory":0}]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[{"memory":-0}]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[{"memory":1.5}]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[{"memory":4294967297}]}],)"
             R"("placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[{}]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpus":[]}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[],"cpu":-1}],"placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[],"labels":null}],)"
             R"("placements":[]})",
      head + R"("nodes":[{"name":"a","gpu_sharing":true,"gpus":[],"topology":"{"}],)"
             R"("placements":[]})",
      head + R"("nodes":[)" + node + R"(],"placements":[{"request_id":"p","node":"a",)"
             R"("gpus":[0],"memory_per_gpu":9}]})",
      head + R"("nodes":[)" + node + R"(],"placements":[{"request_id":"p","node":"a",)"
             R"("gpus":[0],"memory_per_gpu":8}]})",
      head + R"("nodes":[)" + node + R"(],"placements":[{"request_id":"p","node":"a",)"
             R"("gpus":[64],"memory_per_gpu":1}]})",
      head + R"("nodes":[)" + node + R"(],"placements":[{"request_id":"p","node":"b",)"
             R"("gpus":[0],"memory_per_gpu":1}]})",
      head + R"("nodes":[)" + node + R"(],"placements":[{"request_id":"p","node":"a",)"
             R"("gpus":null}]})",
      head + R"("nodes":[)" + node + R"(]})",
      head + R"("nodes":{},"placements":[]})",
      head + R"("nodes":[],"placements":[],"deep":)" + std::string(5000, '[') +
          std::string(5000, ']') + "}",
  };
  int accepted = 0;
  for (const std::string& text : cases) accepted += ExpectReadersAgree(text) ? 1 : 0;
  EXPECT_GT(accepted, 0);  // The valid ones among them are read fast.
}

// Random damage to random snapshots: truncation, a byte changed, a byte
// dropped or doubled, a piece moved.
TEST(SnapshotReaderTest, ReadersAgreeOnDamagedSnapshots) {
  absl::BitGen gen;
  const std::string bytes = "{}[],:\"\\0123456789-.eE tfnul\xff\x80";
  for (int round = 0; round < 400; ++round) {
    std::string text = RandomCluster(gen).ToJson(absl::Bernoulli(gen, 0.5) ? -1 : 1);
    for (int edits = absl::Uniform(gen, 1, 4); edits > 0 && !text.empty(); --edits) {
      const size_t at = absl::Uniform<size_t>(gen, 0, text.size());
      switch (absl::Uniform(gen, 0, 5)) {
        case 0: text.resize(at); break;
        case 1: text[at] = bytes[absl::Uniform<size_t>(gen, 0, bytes.size())]; break;
        case 2: text.erase(at, 1); break;
        case 3: text.insert(at, 1, text[at]); break;
        default: {
          const size_t len = absl::Uniform<size_t>(gen, 0, text.size() - at + 1);
          const std::string piece = text.substr(at, len);
          text.erase(at, len);
          text.insert(absl::Uniform<size_t>(gen, 0, text.size() + 1), piece);
        }
      }
    }
    ExpectReadersAgree(text);
  }
}

}  // namespace
}  // namespace gpushare
