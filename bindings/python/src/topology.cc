// gs.Topology: a node's GPU interconnect (gpushare/topology.h), and the
// conversions Node, Request and Placement use for it.

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {

std::shared_ptr<Topology> Mutable(const TopologyPtr& t) {
  return std::const_pointer_cast<Topology>(t);
}

TopologyNeed ParseTopologyNeed(const std::string& need, const std::string& objective) {
  TopologyNeed n;
  if (need == "none") {
    n.mode = TopologyNeed::Mode::kNone;
  } else if (need == "prefer") {
    n.mode = TopologyNeed::Mode::kPrefer;
  } else {
    absl::StatusOr<Link> link = ParseLink(need);
    if (!link.ok()) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "topology '", need, "' is not 'none', 'prefer' or a minimum link kind such as "
          "'NV1' or 'PIX'")));
    }
    n.mode = TopologyNeed::Mode::kRequire;
    n.min_link = *link;
  }
  if (objective == "weakest_link") {
    n.objective = TopologyObjective::kWeakestLink;
  } else if (objective == "total") {
    n.objective = TopologyObjective::kTotal;
  } else {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
        "topology objective '", objective, "' is not 'weakest_link' or 'total'")));
  }
  return n;
}

std::string TopologyNeedName(const TopologyNeed& n) {
  return n.mode == TopologyNeed::Mode::kRequire ? LinkName(n.min_link)
                                                : TopologyModeName(n.mode);
}

namespace {

LinkWeights ReadWeights(const std::map<std::string, double>& given) {
  LinkWeights w;
  for (const auto& [key, value] : given) {
    double* field = key == "sys"      ? &w.sys
                    : key == "node"   ? &w.node
                    : key == "phb"    ? &w.phb
                    : key == "pxb"    ? &w.pxb
                    : key == "pix"    ? &w.pix
                    : key == "nvlink" ? &w.nvlink
                                      : nullptr;
    if (field == nullptr) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "unknown link weight '", key, "' (known: sys, node, phb, pxb, pix, nvlink)")));
    }
    *field = value;
  }
  return w;
}

}  // namespace

void RegisterTopology(py::module_& m) {
  py::class_<Topology, std::shared_ptr<Topology>>(
      m, "Topology",
      "How a node's GPUs are wired: the link kind between every pair of GPUs, as "
      "`nvidia-smi topo -m` prints it (SYS, NODE, PHB, PXB, PIX, NV#), with a bandwidth "
      "weight per kind. Immutable; identical topologies are one object.")
      .def_static(
          "from_nvidia_smi",
          [](const std::string& text, std::map<std::string, double> weights) {
            return Mutable(ValueOrThrow(Topology::FromNvidiaSmi(text, ReadWeights(weights))));
          },
          py::arg("text"), py::arg("weights") = std::map<std::string, double>{},
          "Parses the output of `nvidia-smi topo -m`. `weights` overrides link weights "
          "(keys sys, node, phb, pxb, pix, nvlink; GB/s, nvlink per link). Raises "
          "InvalidArgumentError naming the bad line and token.")
      .def_static(
          "from_json",
          [](const std::string& text) { return Mutable(ValueOrThrow(Topology::FromJson(text))); },
          py::arg("text"),
          "Reads the compact JSON form (the value of the node annotation "
          "gpushare.io/gpu-topology).")
      .def_static(
          "from_links",
          [](const std::vector<std::vector<std::string>>& rows) {
            std::vector<std::vector<Link>> links(rows.size());
            for (size_t i = 0; i < rows.size(); ++i) {
              for (size_t j = 0; j < rows[i].size(); ++j) {
                if (i == j) {
                  links[i].push_back(Link{});
                  continue;
                }
                absl::StatusOr<Link> l = ParseLink(rows[i][j]);
                if (!l.ok()) {
                  ThrowIfError(absl::InvalidArgumentError(
                      absl::StrCat("links[", i, "][", j, "]: ", l.status().message())));
                }
                links[i].push_back(*l);
              }
            }
            return Mutable(ValueOrThrow(Topology::Make(links)));
          },
          py::arg("links"),
          "A topology from a square matrix of link names (the diagonal is ignored), e.g. "
          "[['X', 'NV2'], ['NV2', 'X']].")
      .def("to_json", &Topology::ToJson, "The compact JSON form.")
      .def_property_readonly("num_gpus", &Topology::num_gpus, "Number of GPUs.")
      .def_property_readonly("uniform", &Topology::uniform,
                             "Every pair of GPUs has the same link (NVSwitch nodes).")
      .def_property_readonly("gpu_numa", &Topology::gpu_numa,
                             "Each GPU's NUMA node (-1 when unknown).")
      .def_property_readonly(
          "worst_link", [](const Topology& t) { return LinkName(t.worst_link()); },
          "The weakest link any pair has.")
      .def_property_readonly(
          "best_link", [](const Topology& t) { return LinkName(t.best_link()); },
          "The best link any pair has.")
      .def(
          "link",
          [](const Topology& t, int a, int b) {
            if (a < 0 || b < 0 || a >= t.num_gpus() || b >= t.num_gpus() || a == b) {
              ThrowIfError(absl::InvalidArgumentError(
                  absl::StrCat("GPU pair (", a, ", ", b, ") is not two distinct GPUs of 0..",
                               t.num_gpus() - 1)));
            }
            return LinkName(t.link(a, b));
          },
          py::arg("a"), py::arg("b"), "The link kind between GPUs a and b, e.g. 'NV2'.")
      .def(
          "weight",
          [](const Topology& t, int a, int b) {
            if (a < 0 || b < 0 || a >= t.num_gpus() || b >= t.num_gpus() || a == b) {
              ThrowIfError(absl::InvalidArgumentError(
                  absl::StrCat("GPU pair (", a, ", ", b, ") is not two distinct GPUs of 0..",
                               t.num_gpus() - 1)));
            }
            return t.weight(a, b);
          },
          py::arg("a"), py::arg("b"), "The bandwidth weight of the link between a and b.")
      .def(
          "best_set",
          [](const Topology& t, int k, std::vector<int> free, const std::string& objective) {
            if (free.empty()) {
              for (int g = 0; g < t.num_gpus(); ++g) free.push_back(g);
            }
            for (int g : free) {
              if (g < 0 || g >= t.num_gpus()) {
                ThrowIfError(absl::InvalidArgumentError(
                    absl::StrCat("GPU ", g, " is out of range 0..", t.num_gpus() - 1)));
              }
            }
            const TopologyNeed need = ParseTopologyNeed("prefer", objective);
            GpuSetChoice c = t.Choose(free, free, k, need.objective);
            py::object weakest = py::none();
            if (c.gpus.size() >= 2) weakest = py::str(LinkName(c.weakest));
            return py::make_tuple(c.gpus, weakest);
          },
          py::arg("k"), py::arg("free") = std::vector<int>{},
          py::arg("objective") = "weakest_link",
          "The k GPUs among `free` (default: all) a request would get, and their weakest "
          "link (None for one GPU): ([0, 1, 2, 3], 'NV1'). [] if fewer than k are free.")
      .def("__repr__",
           [](const Topology& t) { return absl::StrCat("Topology.from_json('", t.ToJson(), "')"); },
           "A constructor call that rebuilds it.")
      .def("__str__", &Topology::ToMatrixText,
           "The link matrix as `nvidia-smi topo -m` prints it (GPU rows only).")
      .def(
          "__eq__", [](const Topology& a, const Topology& b) { return &a == &b; },
          py::arg("other"), py::is_operator(), "Same links, NUMA nodes and weights.")
      .def(
          "__hash__", [](const Topology& t) { return std::hash<const Topology*>()(&t); },
          "Hash of the (interned) object.")
      .def(py::pickle([](const Topology& t) { return t.ToJson(); },
                      [](const std::string& json) {
                        return Mutable(ValueOrThrow(Topology::FromJson(json)));
                      }));
  m.attr("TOPOLOGY_ANNOTATION") = Topology::kKubernetesAnnotation;
}

}  // namespace gpushare::python
