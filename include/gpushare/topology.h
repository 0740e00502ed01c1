// File: gpushare/topology.h
// -----------------------------------------------------------------------------
// How the GPUs of one node are wired together, and which GPUs a multi-GPU
// request should get so that its collective communication runs fast.
//
//   auto topo = gpushare::Topology::FromNvidiaSmi(text);   // `nvidia-smi topo -m`
//   if (!topo.ok()) return topo.status();   // names the bad line and token
//   gpushare::Node node;
//   node.name = "dgx-01";
//   node.gpus.assign(8, gpushare::Gpu{32, "V100"});
//   node.topology = *topo;                 // shared, immutable
//   // cluster.AddNode(node); a 4-GPU request now gets a fully NVLinked quad.
//
// The model. A topology is an undirected weighted graph (Boost.Graph) whose
// vertices are the node's GPUs and whose edges carry, for every pair of GPUs,
// the link kind `nvidia-smi topo -m` reports and that kind's bandwidth weight.
// Link kinds, worst first (the legend of `nvidia-smi topo -m`):
//
//   SYS   the path crosses the inter-socket link (QPI/UPI) between NUMA nodes
//   NODE  within one NUMA node, across the host bridges of that node
//   PHB   through one PCIe host bridge (the CPU)
//   PXB   through several PCIe bridges, without the host bridge
//   PIX   through at most one PCIe bridge (one PCIe switch)
//   NV#   # bonded NVLinks (NVLink directly or through an NVSwitch)
//
// `X` is a GPU's link to itself. Older drivers print SOC for SYS; it is read
// as SYS.
//
// Identical topologies are one object: Make(), FromNvidiaSmi() and FromJson()
// return a shared pointer to an interned immutable instance, so 10,000 DGX
// nodes hold one graph. Topology objects are thread-safe.

#ifndef GPUSHARE_TOPOLOGY_H_
#define GPUSHARE_TOPOLOGY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpushare {

// The kind of path between two GPUs, worst first; compare with < / >.
enum class LinkKind { kSys = 0, kNode, kPhb, kPxb, kPix, kNvLink };

// The link between two GPUs: its kind and, for NVLink, how many links are
// bonded (1..64; 0 for every other kind).
struct Link {
  LinkKind kind = LinkKind::kSys;
  int nvlinks = 0;  // Bonded NVLinks; only for kNvLink.

  friend bool operator==(const Link& a, const Link& b) {
    return a.kind == b.kind && a.nvlinks == b.nvlinks;
  }
  friend bool operator!=(const Link& a, const Link& b) { return !(a == b); }
  // Worse-than: by kind, then by the number of NVLinks.
  friend bool operator<(const Link& a, const Link& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.nvlinks < b.nvlinks;
  }
};

// "SYS", "NODE", "PHB", "PXB", "PIX" or "NV<n>".
std::string LinkName(const Link& link);

// The inverse of LinkName(); also accepts "SOC" (older drivers) for SYS and
// "NVLINK" for NV1. Errors: InvalidArgument naming `text`.
absl::StatusOr<Link> ParseLink(std::string_view text);

// Bandwidth weight of each link kind, in GB/s per direction (rough, for
// ranking only: only the order and ratios of the weights matter). The
// defaults: a PCIe 3.0 x16 path through one switch is about 16 GB/s and every
// further bridge or socket hop costs more; one NVLink 2.0 link is 25 GB/s, and
// NV# is # times that (DGX-1 NV2 = 50, DGX A100 NV12 = 300, DGX H100 NV18 =
// 450). Overrides must be positive and keep the kinds in order
// (sys < node < phb < pxb < pix < nvlink).
struct LinkWeights {
  double sys = 8;             // GB/s.
  double node = 10;           // GB/s.
  double phb = 12;            // GB/s.
  double pxb = 14;            // GB/s.
  double pix = 16;            // GB/s.
  double nvlink = 25;         // GB/s per bonded NVLink.

  double Of(const Link& link) const;
  friend bool operator==(const LinkWeights& a, const LinkWeights& b);
};

// Checks the rules above. Errors: InvalidArgument naming the bad weight.
absl::Status ValidateLinkWeights(const LinkWeights& weights);

// How a multi-GPU set is judged (both objectives known from GPU allocators).
enum class TopologyObjective {
  // The weakest pair's weight first, then the total of all pair weights.
  kWeakestLink,
  // The total of all pair weights first, then the weakest pair.
  kTotal,
};

// How much topology matters to a request (Request::topology).
struct TopologyNeed {
  enum class Mode {
    kNone,     // Choose GPUs as on a topology-blind node.
    kPrefer,   // Best connected set among those the node can offer (default).
    kRequire,  // Like kPrefer, and every pair must be at least `min_link`;
               // nodes that cannot offer such a set are infeasible, and so
               // are nodes without a topology.
  };
  Mode mode = Mode::kPrefer;
  Link min_link;  // For kRequire, e.g. {kNvLink, 1}: every pair over NVLink.
  TopologyObjective objective = TopologyObjective::kWeakestLink;
};

// "none", "prefer" or "require".
const char* TopologyModeName(TopologyNeed::Mode mode);

class Topology;
using TopologyPtr = std::shared_ptr<const Topology>;

// A GPU set chosen on a topology.
struct GpuSetChoice {
  std::vector<int> gpus;       // Ascending GPU indices; empty if none found.
  Link weakest;                // The weakest pair (meaningless for < 2 GPUs).
  double weakest_weight = 0;   // Its weight; 0 for < 2 GPUs.
  double total_weight = 0;     // Sum over all pairs.
};

class Topology {
 public:
  // A topology over `links.size()` GPUs (1..64): links[i][j] for i != j is
  // the link between GPU i and GPU j (the matrix must be symmetric; the
  // diagonal is ignored). `gpu_numa` gives each GPU's NUMA node (-1 or empty:
  // unknown). Returns the interned instance.
  // Errors: InvalidArgument for a matrix that is not square or symmetric, too
  // many GPUs, bad weights, a NUMA list of the wrong length.
  static absl::StatusOr<TopologyPtr> Make(const std::vector<std::vector<Link>>& links,
                                          const std::vector<int>& gpu_numa = {},
                                          const LinkWeights& weights = {});

  // Parses the text `nvidia-smi topo -m` prints: the header row of device
  // names (GPU<n>, NIC<n>, mlx5_<n>, ...) then `CPU Affinity`, `NUMA Affinity`
  // and `GPU NUMA ID` columns when present, one row per device, then the
  // legend (ignored, like a `NIC Legend` block). NIC rows and columns are
  // read and checked but only GPU-GPU links enter the model. GPU i is the row
  // named GPU<i>; rows must name GPU0..GPU<n-1>.
  // Errors: InvalidArgument "line <n>: <what> '<token>'".
  static absl::StatusOr<TopologyPtr> FromNvidiaSmi(std::string_view text,
                                                   const LinkWeights& weights = {});

  // The compact JSON form, e.g. for a 4-GPU node:
  //   {"gpus":4,"links":["NV2 NV1 SYS","NV1 SYS","NV2"],"numa":[0,0,1,1]}
  // `links` is the upper triangle: entry i lists the links of GPU i to GPUs
  // i+1..n-1, separated by single spaces; for 1 GPU it is []. `numa` is
  // optional; "weights" (an object with keys sys,node,phb,pxb,pix,nvlink) is
  // optional and written only when not the defaults. The node annotation
  // kKubernetesAnnotation carries this form.
  // Errors: InvalidArgument naming the bad field or token.
  static absl::StatusOr<TopologyPtr> FromJson(std::string_view json);
  std::string ToJson() const;

  // The node annotation the extender reads a node's topology from.
  static constexpr const char* kKubernetesAnnotation = "gpushare.io/gpu-topology";

  int num_gpus() const { return n_; }
  Link link(int a, int b) const { return links_[a * n_ + b]; }
  double weight(int a, int b) const { return weights_of_[a * n_ + b]; }
  const LinkWeights& weights() const { return weights_; }
  const std::vector<int>& gpu_numa() const { return numa_; }
  // Every pair of GPUs has the same link (NVSwitch nodes, or one GPU).
  bool uniform() const { return uniform_; }
  // The best link kind some pair has, and the worst one.
  Link best_link() const { return best_; }
  Link worst_link() const { return worst_; }
  // The weakest pair of `gpus` (by weight) and the total weight.
  GpuSetChoice Rate(const std::vector<int>& gpus) const;
  // A text matrix like `nvidia-smi topo -m` prints (GPU rows only).
  std::string ToMatrixText() const;

  // Chooses `k` GPUs among `candidates` (ascending indices of this
  // topology) for a request.
  //  - The best set: highest (weakest pair, total) for kWeakestLink, highest
  //    (total, weakest pair) for kTotal; only sets whose weakest pair is at
  //    least `min_weight` count.
  //  - Among equally good sets: the one leaving the node's remaining `idle`
  //    GPUs (idle minus the set) best connected, judged by, for m = 8, 4, 2
  //    in turn, the number of groups of m idle GPUs as well connected as the
  //    best m-group of this topology (a fully NVLinked quad on a DGX-1), then
  //    the total weight among the remaining idle GPUs.
  //  - Then the set whose ranks in `preference` (the caller's order of the
  //    candidates, best first; GPUs absent from it rank after, by index) are
  //    lexicographically smallest.
  // k = 1 applies the same rules (every single GPU is equally connected).
  // Returns an empty set if fewer than k candidates or none meets min_weight.
  //
  // Cost: GPUs with identical links to every other GPU and the same idle
  // state are interchangeable, so only the distinct counts per class of such
  // twins are tried (1 set on an NVSwitch node, at most 3^4 = 81 on a
  // 2-socket PCIe server with 4 switch pairs, C(8,4) = 70 on a DGX-1), and
  // partial sets whose bounds (the weakest pair so far; the total so far plus
  // the best each further GPU could add) cannot beat the best set found are
  // cut off. A 16-GPU node without twins still has up to C(16,8) = 12,870
  // sets in the worst case, so results are also memoised in the shared
  // topology by (candidates, idle, k, objective, min_weight, preference):
  // every node with this topology and that free pattern reuses them; the
  // memo is bounded (cleared at 65,536 entries). Larger nodes can have far
  // more sets that tie (C(24,12) ways to take 12 of 24 NVLinked pairs), so
  // the search stops after 2^17 steps or 2^14 complete sets, which no node
  // of up to 16 GPUs reaches: the classes whose GPUs are best linked among
  // themselves are tried first, and past the bound the best set found so
  // far is returned (empty if none met min_weight by then). At most about
  // 0.1 s a cold call on 64 GPUs.
  GpuSetChoice Choose(const std::vector<int>& candidates, const std::vector<int>& idle,
                      int k, TopologyObjective objective, double min_weight = 0,
                      const std::vector<int>& preference = {}) const;

  // What an empty node offers: the measure `objective` ranks sets by first
  // (the weakest pair's weight for kWeakestLink, the total for kTotal) of
  // the best set of `k` GPUs when every GPU is idle; 0 for k < 2 or k larger
  // than the GPU count. Computed by Choose() once per (k, objective), then
  // cached. The node score's topology key divides by it (gpushare/policy.h).
  double IdealMeasure(int k, TopologyObjective objective) const;

  // The reference for Choose(): the same rules by trying every subset.
  // Exponential; for tests on up to ~12 GPUs.
  GpuSetChoice ChooseByBruteForce(const std::vector<int>& candidates,
                                  const std::vector<int>& idle, int k,
                                  TopologyObjective objective, double min_weight = 0,
                                  const std::vector<int>& preference = {}) const;

  // How many topology objects exist now (interned ones count once).
  static int64_t LiveCount();

  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  struct Impl;  // Internal.

 private:
  Topology();
  int n_ = 0;
  std::vector<Link> links_;
  std::vector<double> weights_of_;
  std::vector<int> numa_;
  LinkWeights weights_;
  bool uniform_ = true;
  Link best_, worst_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpushare

#endif  // GPUSHARE_TOPOLOGY_H_
