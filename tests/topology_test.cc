#include "gpushare/topology.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::IsOk;
using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/topology/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TopologyPtr Load(const std::string& name) {
  absl::StatusOr<TopologyPtr> t = Topology::FromNvidiaSmi(Fixture(name));
  EXPECT_THAT(t.status(), IsOk()) << name;
  return t.ok() ? *t : nullptr;
}

Link L(const char* name) { return *ParseLink(name); }

Gpu G(int64_t memory, const char* model) {
  Gpu g;
  g.memory = memory;
  g.model = model;
  return g;
}

// ---- Links and weights ------------------------------------------------------

TEST(LinkTest, NamesRoundTripAndOrder) {
  for (const char* name : {"SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV12", "NV18"}) {
    EXPECT_EQ(LinkName(L(name)), name);
  }
  EXPECT_EQ(L("SOC"), L("SYS"));
  EXPECT_LT(L("SYS"), L("NODE"));
  EXPECT_LT(L("PIX"), L("NV1"));
  EXPECT_LT(L("NV1"), L("NV2"));
  EXPECT_THAT(ParseLink("NVX").status(), StatusIs(absl::StatusCode::kInvalidArgument, "'NVX'"));
  EXPECT_THAT(ParseLink("NV0").status(), StatusIs(absl::StatusCode::kInvalidArgument, "'NV0'"));
  LinkWeights w;
  EXPECT_EQ(w.Of(L("NV12")), 12 * w.nvlink);
  EXPECT_THAT(ValidateLinkWeights(w), IsOk());
  w.pix = w.nvlink + 1;
  EXPECT_THAT(ValidateLinkWeights(w), StatusIs(absl::StatusCode::kInvalidArgument, "nvlink"));
  w = LinkWeights{};
  w.sys = -1;
  EXPECT_THAT(ValidateLinkWeights(w), StatusIs(absl::StatusCode::kInvalidArgument, "sys -1"));
}

// ---- Parser and fixtures ----------------------------------------------------

TEST(NvidiaSmiTest, Dgx1HybridCubeMesh) {
  TopologyPtr t = Load("dgx1_v100.txt");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->num_gpus(), 8);  // The NIC rows are read but not modelled.
  EXPECT_FALSE(t->uniform());
  EXPECT_EQ(t->link(0, 1), L("NV1"));
  EXPECT_EQ(t->link(0, 3), L("NV2"));
  EXPECT_EQ(t->link(0, 4), L("NV2"));
  EXPECT_EQ(t->link(0, 5), L("SYS"));
  EXPECT_EQ(t->link(7, 6), L("NV2"));
  EXPECT_EQ(t->gpu_numa(), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  // Six NVLinks per GPU.
  for (int g = 0; g < 8; ++g) {
    int links = 0;
    for (int h = 0; h < 8; ++h) {
      if (h != g && t->link(g, h).kind == LinkKind::kNvLink) links += t->link(g, h).nvlinks;
    }
    EXPECT_EQ(links, 6) << "GPU" << g;
  }
}

TEST(NvidiaSmiTest, NvSwitchNodesAreUniform) {
  for (const auto& [name, gpus, link] :
       std::vector<std::tuple<std::string, int, std::string>>{
           {"dgx2.txt", 16, "NV6"}, {"dgx_a100.txt", 8, "NV12"}, {"dgx_h100.txt", 8, "NV18"}}) {
    TopologyPtr t = Load(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->num_gpus(), gpus) << name;
    EXPECT_TRUE(t->uniform()) << name;
    EXPECT_EQ(t->worst_link(), L(link.c_str())) << name;
  }
  EXPECT_EQ(Load("dgx_a100.txt")->gpu_numa(), (std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5}));
}

TEST(NvidiaSmiTest, PcieServers) {
  TopologyPtr t = Load("pcie_2socket_8gpu.txt");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->link(0, 1), L("PIX"));
  EXPECT_EQ(t->link(1, 2), L("PXB"));
  EXPECT_EQ(t->link(5, 6), L("NODE"));
  EXPECT_EQ(t->link(3, 4), L("SYS"));
  TopologyPtr t4 = Load("t4x4.txt");
  ASSERT_NE(t4, nullptr);
  EXPECT_EQ(t4->num_gpus(), 4);
  EXPECT_EQ(t4->link(0, 1), L("PHB"));
  EXPECT_EQ(t4->link(1, 2), L("SYS"));
}

TEST(NvidiaSmiTest, IdenticalTopologiesAreOneObject) {
  TopologyPtr a = Load("dgx1_v100.txt");
  const int64_t live = Topology::LiveCount();
  std::vector<TopologyPtr> many;
  for (int i = 0; i < 100; ++i) many.push_back(Load("dgx1_v100.txt"));
  for (const TopologyPtr& t : many) EXPECT_EQ(t.get(), a.get());
  EXPECT_EQ(Topology::LiveCount(), live);
  // The JSON form gives the same object too; other weights give another.
  EXPECT_EQ(Topology::FromJson(a->ToJson())->get(), a.get());
  LinkWeights w;
  w.nvlink = 40;
  TopologyPtr b = *Topology::FromNvidiaSmi(Fixture("dgx1_v100.txt"), w);
  EXPECT_NE(b.get(), a.get());
  EXPECT_EQ(b->weight(0, 3), 80);
}

TEST(NvidiaSmiTest, TerminalEscapesAndOldNames) {
  const std::string text =
      "\t\x1b[4mGPU0\tGPU1\tmlx5_0\tCPU Affinity\x1b[0m\n"
      "GPU0\t X \tSOC\tPHB\t0-7\n"
      "GPU1\tSOC\t X \tSOC\t8-15\n"
      "mlx5_0\tPHB\tSOC\t X \n"
      "\nLegend:\n  X = Self\n";
  absl::StatusOr<TopologyPtr> t = Topology::FromNvidiaSmi(text);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ((*t)->link(0, 1), L("SYS"));
  EXPECT_EQ((*t)->gpu_numa(), (std::vector<int>{-1, -1}));
}

TEST(NvidiaSmiTest, ErrorsNameLineAndToken) {
  const std::string good = Fixture("t4x4.txt");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return Topology::FromNvidiaSmi(text).status();
  };
  // Line 2 is GPU0's row.
  EXPECT_THAT(with("GPU0\t X \tPHB", "GPU0\t X \tPHX"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 2: unknown link from GPU0 to GPU1 'PHX'"));
  EXPECT_THAT(with("GPU1\tPHB\t X ", "GPU1\tPHB\t Y "),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 3: the diagonal entry of GPU1 is not X: 'Y'"));
  EXPECT_THAT(with("GPU1\tPHB", "GPU1\tSYS"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 3: link GPU1-GPU0 differs"));
  EXPECT_THAT(with("GPU2\tSYS", "GPU7\tSYS"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 4: row 3 should be 'GPU2', not 'GPU7'"));
  EXPECT_THAT(with("GPU3\tSYS\tSYS\tPHB\t X \t12-23,36-47\t1\tN/A", "GPU3\tSYS\tSYS\tPHB"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 5: row has 3 entries for 4 devices"));
  EXPECT_THAT(with("0-11,24-35\t0\tN/A\nGPU1", "0-11,24-35\tzero\tN/A\nGPU1"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 2: bad NUMA Affinity 'zero'"));
  EXPECT_THAT(with("12-23,36-47\t1\tN/A\nGPU3", "12-23,36-47\t1\tN/A\textra\nGPU3"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 4: unexpected extra column 'extra'"));
  const size_t row4 = good.find("GPU3\tSYS");
  EXPECT_THAT(Topology::FromNvidiaSmi(good.substr(0, row4)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "missing row 'GPU3'"));
  EXPECT_THAT(Topology::FromNvidiaSmi("").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no header row"));
  EXPECT_THAT(Topology::FromNvidiaSmi("\tGPU0\tGPU2\nGPU0\t X \tSYS\nGPU2\tSYS\t X \n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "GPU1 is missing"));
}

// ---- JSON form --------------------------------------------------------------

TEST(TopologyJsonTest, RoundTripAndErrors) {
  for (const char* name : {"dgx1_v100.txt", "dgx2.txt", "pcie_2socket_8gpu.txt", "t4x4.txt"}) {
    TopologyPtr t = Load(name);
    absl::StatusOr<TopologyPtr> back = Topology::FromJson(t->ToJson());
    ASSERT_THAT(back.status(), IsOk()) << name;
    EXPECT_EQ(back->get(), t.get()) << name;
  }
  EXPECT_EQ(Load("t4x4.txt")->ToJson(),
            R"({"gpus":4,"links":["PHB SYS SYS","SYS SYS","PHB"],"numa":[0,0,1,1]})");
  auto bad = [](const std::string& json) { return Topology::FromJson(json).status(); };
  EXPECT_THAT(bad(R"({"gpus":3,"links":["NV1 SYS"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'links' must be an array of 2"));
  EXPECT_THAT(bad(R"({"gpus":3,"links":["NV1 SYS","NVQ"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "links[1]: unknown link 'NVQ'"));
  EXPECT_THAT(bad(R"({"gpus":2,"links":["NV1 NV1"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "has 2 links, not 1"));
  EXPECT_THAT(bad(R"({"gpus":0,"links":[]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'gpus'"));
  EXPECT_THAT(bad(R"({"gpus":2,"links":["NV1"],"color":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown field 'color'"));
  EXPECT_THAT(bad(R"({"gpus":2,"links":["NV1"],"weights":{"pix":100}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "link weight nvlink"));
  EXPECT_THAT(bad("{"), StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<TopologyPtr> one = Topology::FromJson(R"({"gpus":1,"links":[]})");
  ASSERT_THAT(one.status(), IsOk());
  EXPECT_TRUE((*one)->uniform());
}

// ---- The chooser against brute force ------------------------------------------

TopologyPtr RandomTopology(std::mt19937& rng, int n) {
  const std::vector<Link> kinds = {L("SYS"), L("NODE"), L("PHB"), L("PXB"),
                                   L("PIX"), L("NV1"),  L("NV2"), L("NV4")};
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  // Few distinct kinds and repeated rows make ties and twins common.
  const int variety = 1 + static_cast<int>(rng() % 4);
  std::vector<Link> palette;
  for (int i = 0; i < variety; ++i) palette.push_back(kinds[rng() % kinds.size()]);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) links[i][j] = links[j][i] = palette[rng() % palette.size()];
  }
  if (rng() % 2) {  // Blocks: GPUs in one block get the same links outward.
    const int block = 2 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        links[i][j] = links[j][i] =
            i / block == j / block ? palette[0] : palette[(i / block + j / block) % palette.size()];
      }
    }
  }
  return *Topology::Make(links);
}

TEST(TopologyChooseTest, MatchesBruteForceOnRandomTopologies) {
  std::mt19937 rng(15);
  int compared = 0, nonempty = 0;
  for (int round = 0; round < 600; ++round) {
    const int n = 1 + static_cast<int>(rng() % 10);
    TopologyPtr t = RandomTopology(rng, n);
    std::vector<int> candidates, idle, preference;
    for (int g = 0; g < n; ++g) {
      if (rng() % 4 != 0) candidates.push_back(g);
      if (rng() % 3 != 0) idle.push_back(g);
    }
    const int k = 1 + static_cast<int>(rng() % n);
    for (int g : candidates) {
      if (rng() % 3 == 0) preference.push_back(g);
    }
    std::shuffle(preference.begin(), preference.end(), rng);
    const TopologyObjective objective =
        rng() % 2 ? TopologyObjective::kWeakestLink : TopologyObjective::kTotal;
    const double min_weight = rng() % 3 == 0 ? t->weights().Of(L("PXB")) : 0;
    GpuSetChoice fast = t->Choose(candidates, idle, k, objective, min_weight, preference);
    GpuSetChoice slow = t->ChooseByBruteForce(candidates, idle, k, objective, min_weight, preference);
    ASSERT_EQ(fast.gpus, slow.gpus) << "round " << round << " n=" << n << " k=" << k << "\n"
                                    << t->ToMatrixText();
    EXPECT_EQ(fast.weakest_weight, slow.weakest_weight);
    EXPECT_EQ(fast.total_weight, slow.total_weight);
    // Asking again (from the memo) gives the same answer.
    EXPECT_EQ(t->Choose(candidates, idle, k, objective, min_weight, preference).gpus, fast.gpus);
    ++compared;
    nonempty += fast.gpus.empty() ? 0 : 1;
  }
  EXPECT_EQ(compared, 600);
  EXPECT_GT(nonempty, 300);
}

TEST(TopologyChooseTest, ObjectivesDiffer) {
  // GPU0-1 NV4 but GPU2 reaches them over SYS; 3-4-5 all NV1.
  std::vector<std::vector<Link>> links(6, std::vector<Link>(6, L("SYS")));
  auto set = [&](int a, int b, const char* l) { links[a][b] = links[b][a] = L(l); };
  set(0, 1, "NV4");
  set(0, 2, "NV4");
  set(3, 4, "NV1");
  set(3, 5, "NV1");
  set(4, 5, "NV1");
  TopologyPtr t = *Topology::Make(links);
  std::vector<int> all = {0, 1, 2, 3, 4, 5};
  // Weakest link: the all-NV1 triple. Total: 0,1,2 (100 + 100 + 8 > 75).
  EXPECT_THAT(t->Choose(all, all, 3, TopologyObjective::kWeakestLink).gpus, ElementsAre(3, 4, 5));
  EXPECT_THAT(t->Choose(all, all, 3, TopologyObjective::kTotal).gpus, ElementsAre(0, 1, 2));
}

TEST(TopologyChooseTest, SixteenGpusWithoutTwinsStaysCheap) {
  // A 16-GPU hybrid mesh: two DGX-1 meshes joined over SYS; no two GPUs are
  // twins, the worst case for the class search.
  TopologyPtr d = Load("dgx1_v100.txt");
  std::vector<std::vector<Link>> links(16, std::vector<Link>(16, L("SYS")));
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) {
      if (a != b && a / 8 == b / 8) links[a][b] = d->link(a % 8, b % 8);
    }
  }
  TopologyPtr t = *Topology::Make(links);
  std::vector<int> all(16);
  for (int g = 0; g < 16; ++g) all[g] = g;
  GpuSetChoice eight = t->Choose(all, all, 8, TopologyObjective::kWeakestLink);
  EXPECT_THAT(eight.gpus, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(eight.weakest, L("SYS"));
  GpuSetChoice four = t->Choose(all, all, 4, TopologyObjective::kWeakestLink);
  EXPECT_THAT(four.gpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(four.weakest, L("NV1"));
}

// The search's bounds (kMaxChooseSteps, kMaxChooseSets) leave every search
// of a node of up to 16 GPUs whole: the same sets as trying every subset.
TEST(TopologyChooseTest, MatchesBruteForceOnSixteenGpus) {
  std::mt19937 rng(16);
  for (int round = 0; round < 24; ++round) {
    // Two kinds of link at random: few twins, and many sets that tie.
    const int n = 13 + static_cast<int>(rng() % 4);
    std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) links[a][b] = links[b][a] = L(rng() % 3 ? "NV1" : "SYS");
    }
    TopologyPtr t = *Topology::Make(links);
    std::vector<int> all(n), idle;
    for (int g = 0; g < n; ++g) {
      all[g] = g;
      if (rng() % 4 != 0) idle.push_back(g);
    }
    const int k = 4 + static_cast<int>(rng() % 6);
    const TopologyObjective objective =
        rng() % 2 ? TopologyObjective::kWeakestLink : TopologyObjective::kTotal;
    GpuSetChoice fast = t->Choose(all, idle, k, objective);
    GpuSetChoice slow = t->ChooseByBruteForce(all, idle, k, objective);
    ASSERT_EQ(fast.gpus, slow.gpus) << "round " << round << " n=" << n << " k=" << k << "\n"
                                    << t->ToMatrixText();
    EXPECT_EQ(fast.total_weight, slow.total_weight);
  }
}

// Larger nodes with many equally good sets (here 24 NVLinked pairs, PCIe
// between them: C(24, 12) sets of 12 whole pairs tie) are searched in
// bounded time: without the bounds, choosing 24 of 48 GPUs tried some 2.7
// million tied sets, and 32 of 64 some 600 million. The best set is still
// found (the first tries take whole pairs).
TEST(TopologyChooseTest, LargeNodesWithManyTiesAreSearchedInBoundedTime) {
  const int n = 48;
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) links[a][b] = L(a / 2 == b / 2 ? "NV2" : "PXB");
  }
  TopologyPtr t = *Topology::Make(links);
  std::vector<int> all(n);
  for (int g = 0; g < n; ++g) all[g] = g;
  const double nv = t->weights().Of(L("NV2")), pxb = t->weights().Of(L("PXB"));
  const int k = 24;
  const double best_total = 12 * nv + (k * (k - 1) / 2 - 12) * pxb;
  for (TopologyObjective objective :
       {TopologyObjective::kWeakestLink, TopologyObjective::kTotal}) {
    GpuSetChoice got = t->Choose(all, all, k, objective);
    ASSERT_EQ(got.gpus.size(), static_cast<size_t>(k));
    EXPECT_EQ(got.weakest_weight, pxb);
    EXPECT_EQ(got.total_weight, best_total);
  }
  EXPECT_EQ(t->IdealMeasure(k, TopologyObjective::kTotal), best_total);
  // A busy node: every other pair half taken.
  std::vector<int> idle;
  for (int g = 0; g < n; ++g) {
    if (g % 4 != 3) idle.push_back(g);
  }
  GpuSetChoice busy = t->Choose(idle, idle, k, TopologyObjective::kTotal);
  ASSERT_EQ(busy.gpus.size(), static_cast<size_t>(k));
  EXPECT_EQ(busy.total_weight, best_total);  // 12 whole pairs are still idle.
}

// ---- Placement on the fixtures --------------------------------------------------

Node NodeWith(const std::string& name, TopologyPtr t, int64_t memory = 32) {
  Node n;
  n.name = name;
  n.gpus.assign(t->num_gpus(), G(memory, "V100"));
  n.labels = {{"gpushare", "true"}};
  n.topology = std::move(t);
  return n;
}

Request Whole(const std::string& id, int k) {
  Request r;
  r.id = id;
  r.whole_gpus = k;
  return r;
}

Request Shared(const std::string& id, int64_t memory, int count) {
  Request r;
  r.id = id;
  r.gpu_memory = memory;
  r.gpu_count = count;
  return r;
}

TEST(TopologyPlacementTest, Dgx1KeepsNvLinkedQuadsWhole) {
  for (const char* policy : {"binpack", "spread", "fgd", "bestfit", "gpupacking"}) {
    Cluster c;
    ASSERT_THAT(c.AddNode(NodeWith("dgx1", Load("dgx1_v100.txt"))), IsOk());
    absl::StatusOr<Placement> quad = c.Place(Whole("quad", 4), policy);
    ASSERT_THAT(quad.status(), IsOk()) << policy;
    EXPECT_THAT(quad->gpus, ElementsAre(0, 1, 2, 3)) << policy;
    EXPECT_EQ(quad->weakest_link, "NV1");
    ASSERT_THAT(c.Release("quad"), IsOk());
    // A pair first: an NV2 pair inside one quad, so the other stays whole.
    absl::StatusOr<Placement> pair = c.Place(Whole("pair", 2), policy);
    ASSERT_THAT(pair.status(), IsOk()) << policy;
    EXPECT_THAT(pair->gpus, ElementsAre(0, 3)) << policy;
    EXPECT_EQ(pair->weakest_link, "NV2");
    quad = c.Place(Whole("quad", 4), policy);
    ASSERT_THAT(quad.status(), IsOk()) << policy;
    EXPECT_THAT(quad->gpus, ElementsAre(4, 5, 6, 7)) << policy;
    EXPECT_EQ(c.GetPlacement("quad")->weakest_link, "NV1");
    ASSERT_THAT(c.CheckInvariants(), IsOk());
  }
}

TEST(TopologyPlacementTest, Dgx1SharedRequests) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("dgx1", Load("dgx1_v100.txt"))), IsOk());
  absl::StatusOr<Placement> p = c.Place(Shared("s4", 32, 4));
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(p->gpus, ElementsAre(0, 1, 2, 3));
  p = c.Place(Shared("s2", 16, 2));  // Both GPUs of an NV2 pair in the free quad.
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->weakest_link, "NV2");
}

TEST(TopologyPlacementTest, InspectShowsEachRequestsWeakestLink) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("dgx1", Load("dgx1_v100.txt"))), IsOk());
  ASSERT_THAT(c.Place(Whole("team/quad", 4)).status(), IsOk());
  ASSERT_THAT(c.Place(Whole("team/one", 1)).status(), IsOk());
  absl::StatusOr<std::string> view = InspectNode(c, "dgx1");
  ASSERT_THAT(view.status(), IsOk());
  EXPECT_THAT(*view, HasSubstr("TOPOLOGY:   links SYS to NV2"));
  EXPECT_THAT(*view, HasSubstr("WEAKEST LINK"));
  EXPECT_THAT(*view, ::testing::ContainsRegex("quad +team( +[0-9]+){8} +NV1"));
  EXPECT_THAT(*view, ::testing::ContainsRegex("one +team( +[0-9]+){8} +-"));
}

TEST(TopologyPlacementTest, PcieServerPairsShareASwitchQuadsStayOnASocket) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("pcie", Load("pcie_2socket_8gpu.txt"))), IsOk());
  absl::StatusOr<Placement> pair = c.Place(Whole("pair", 2));
  ASSERT_THAT(pair.status(), IsOk());
  // A switch pair; of those, one on the socket whose quad is weaker (NODE), so
  // the PXB quad on socket 0 stays whole.
  EXPECT_THAT(pair->gpus, ElementsAre(4, 5));
  EXPECT_EQ(pair->weakest_link, "PIX");
  absl::StatusOr<Placement> quad = c.Place(Whole("quad", 4));
  ASSERT_THAT(quad.status(), IsOk());
  EXPECT_THAT(quad->gpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(quad->weakest_link, "PXB");
  absl::StatusOr<Placement> second = c.Place(Whole("pair2", 2));
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_THAT(second->gpus, ElementsAre(6, 7));
}

TEST(TopologyPlacementTest, T4AndNvSwitchNodes) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("t4", Load("t4x4.txt"), 16)), IsOk());
  absl::StatusOr<Placement> one = c.Place(Whole("one", 1));
  ASSERT_THAT(one.status(), IsOk());
  EXPECT_THAT(one->gpus, ElementsAre(0));
  absl::StatusOr<Placement> pair = c.Place(Whole("pair", 2));
  ASSERT_THAT(pair.status(), IsOk());
  EXPECT_THAT(pair->gpus, ElementsAre(2, 3));  // The PHB pair, not 1 + a SYS GPU.
  EXPECT_EQ(pair->weakest_link, "PHB");

  for (const char* name : {"dgx2.txt", "dgx_a100.txt", "dgx_h100.txt"}) {
    Cluster d;
    TopologyPtr t = Load(name);
    ASSERT_THAT(d.AddNode(NodeWith("nvs", t)), IsOk());
    absl::StatusOr<Placement> p = d.Place(Whole("half", t->num_gpus() / 2));
    ASSERT_THAT(p.status(), IsOk());
    std::vector<int> first(t->num_gpus() / 2);
    for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int>(i);
    EXPECT_EQ(p->gpus, first) << name;  // Any set is as good: the policy's.
    EXPECT_EQ(p->weakest_link, LinkName(t->worst_link())) << name;
  }
}

TEST(TopologyPlacementTest, SingleGpuKeepsGroupsWhole) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("pcie", Load("pcie_2socket_8gpu.txt"))), IsOk());
  // Three single GPUs: each goes where it breaks the fewest good groups;
  // GPU 0 first (nothing to break differs), and its switch partner next.
  absl::StatusOr<Placement> a = c.Place(Whole("a", 1));
  absl::StatusOr<Placement> b = c.Place(Whole("b", 1));
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(a->gpus.size(), 1u);
  // The second single GPU shares the first one's PCIe switch, so the other
  // switch pairs stay whole.
  EXPECT_EQ(c.FindNode("pcie")->topology->link(a->gpus[0], b->gpus[0]), L("PIX"));
  EXPECT_TRUE(a->weakest_link.empty());
}

TEST(TopologyPlacementTest, RequiredLinkAndFitExplanation) {
  Cluster c;
  ASSERT_THAT(c.AddNode(NodeWith("dgx1", Load("dgx1_v100.txt"))), IsOk());
  Node blind;
  blind.name = "blind";
  blind.gpus.assign(8, G(32, "V100"));
  ASSERT_THAT(c.AddNode(blind), IsOk());
  Request r = Whole("eight", 8);
  r.topology.mode = TopologyNeed::Mode::kRequire;
  r.topology.min_link = L("NV1");
  absl::StatusOr<std::vector<FitResult>> fit = c.Fit(r);
  ASSERT_THAT(fit.status(), IsOk());
  ASSERT_EQ(fit->size(), 2u);
  EXPECT_FALSE((*fit)[0].feasible);
  EXPECT_THAT((*fit)[0].reason,
              HasSubstr("no 8 fitting GPUs are linked by NV1 or better pairwise: the best set "
                        "[0, 1, 2, 3, 4, 5, 6, 7] has weakest link SYS"));
  EXPECT_FALSE((*fit)[1].feasible);
  EXPECT_THAT((*fit)[1].reason, HasSubstr("node has no GPU topology"));
  EXPECT_THAT(c.Place(r).status(), StatusIs(absl::StatusCode::kResourceExhausted, "weakest link SYS"));

  r = Whole("four", 4);
  r.topology.mode = TopologyNeed::Mode::kRequire;
  r.topology.min_link = L("NV1");
  absl::StatusOr<Placement> p = c.Place(r);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->node, "dgx1");
  EXPECT_THAT(p->gpus, ElementsAre(0, 1, 2, 3));
  // NV2 pairs remain in the other quad, but no NV2 triple.
  r = Whole("three", 3);
  r.topology.mode = TopologyNeed::Mode::kRequire;
  r.topology.min_link = L("NV2");
  EXPECT_THAT(c.Place(r).status(), StatusIs(absl::StatusCode::kResourceExhausted, "weakest link NV1"));
  // mode none: the policy's GPUs, even on a node with a topology.
  Cluster d;
  ASSERT_THAT(d.AddNode(NodeWith("pcie", Load("pcie_2socket_8gpu.txt"))), IsOk());
  r = Whole("pair", 2);
  r.topology.mode = TopologyNeed::Mode::kNone;
  p = d.Place(r);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(p->gpus, ElementsAre(0, 1));
  EXPECT_TRUE(p->weakest_link.empty());
  EXPECT_EQ(d.GetPlacement("pair")->weakest_link, "PIX");  // Commit rates it anyway.
  r.topology.mode = TopologyNeed::Mode::kRequire;
  r.topology.min_link = Link{LinkKind::kPix, 3};
  EXPECT_THAT(d.Validate(r).status(), StatusIs(absl::StatusCode::kInvalidArgument, "3 NVLinks"));
}

TEST(TopologySimulationTest, CountsMultiGpuTasksThatGotTheBestConnectivity) {
  std::vector<Node> nodes;
  for (int i = 0; i < 4; ++i) {
    Node n = NodeWith(absl::StrCat("n", i), Load(i % 2 ? "dgx1_v100.txt" : "pcie_2socket_8gpu.txt"));
    nodes.push_back(n);
  }
  std::vector<Request> requests;
  for (int i = 0; i < 40; ++i) {
    Request r;
    r.id = absl::StrCat("r", i);
    if (i % 3 == 0) {
      r.compute = 300;
    } else {
      r.whole_gpus = i % 3 == 1 ? 2 : 4;
    }
    requests.push_back(r);
  }
  SimulationOptions options;
  options.policy = "binpack";
  options.inflate = 0.9;
  absl::StatusOr<SimulationResult> aware = Simulate(nodes, requests, options);
  ASSERT_THAT(aware.status(), IsOk());
  EXPECT_GT(aware->topology_tasks, 5);
  EXPECT_EQ(aware->topology_best, aware->topology_tasks);
  for (Request& r : requests) r.topology.mode = TopologyNeed::Mode::kNone;
  absl::StatusOr<SimulationResult> blind = Simulate(nodes, requests, options);
  ASSERT_THAT(blind.status(), IsOk());
  EXPECT_GT(blind->topology_tasks, 5);
  EXPECT_LT(blind->topology_best, blind->topology_tasks);
  // Without topologies nothing is counted.
  for (Node& n : nodes) n.topology = nullptr;
  absl::StatusOr<SimulationResult> none = Simulate(nodes, requests, options);
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_EQ(none->topology_tasks, 0);
}

TEST(TopologyPlacementTest, NodeValidationAndSnapshotRoundTrip) {
  Cluster c;
  Node wrong = NodeWith("wrong", Load("t4x4.txt"));
  wrong.gpus.pop_back();
  EXPECT_THAT(c.AddNode(wrong), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "topology has 4 GPUs but the node has 3"));
  ASSERT_THAT(c.AddNode(NodeWith("dgx1", Load("dgx1_v100.txt"))), IsOk());
  ASSERT_THAT(c.AddNode(NodeWith("t4", Load("t4x4.txt"), 16)), IsOk());
  Node blind;
  blind.name = "blind";
  blind.gpus.assign(2, G(16, "T4"));
  ASSERT_THAT(c.AddNode(blind), IsOk());
  ASSERT_THAT(c.Place(Whole("a", 2)).status(), IsOk());
  ASSERT_THAT(c.Place(Whole("b", 4)).status(), IsOk());
  const std::string json = c.ToJson();
  absl::StatusOr<Cluster> back = Cluster::FromJson(json);
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_EQ(back->ToJson(), json);
  EXPECT_EQ(back->FindNode("dgx1")->topology.get(), c.FindNode("dgx1")->topology.get());
  EXPECT_EQ(back->FindNode("blind")->topology, nullptr);
  for (const Placement& p : c.placements()) {
    EXPECT_EQ(back->GetPlacement(p.request_id)->weakest_link, p.weakest_link);
    EXPECT_EQ(p.weakest_link.empty(), p.node == "blind") << p;
  }
  std::string broken = json;
  const size_t at = broken.find("PHB SYS SYS");
  ASSERT_NE(at, std::string::npos);
  broken.replace(at, 3, "PHQ");
  EXPECT_THAT(Cluster::FromJson(broken).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "topology: topology JSON links[0]: unknown link 'PHQ'"));
}

}  // namespace
}  // namespace gpushare
