// Value types: Gpu, Node, Request, Placement, FitResult and the status
// snapshots GpuStatus, NodeStatus and Usage.

#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {

// What may stand for a Gpu in a list of GPUs: a memory size.
struct GpuSize {
  int64_t memory = 0;
};

}  // namespace gpushare::python

namespace pybind11::detail {

// Consulted only for what is not a Gpu: takes ints (as ReadInt() does) and
// raises TypeError naming the list for anything else.
template <>
struct type_caster<gpushare::python::GpuSize> {
  PYBIND11_TYPE_CASTER(gpushare::python::GpuSize, const_name("int"));

  bool load(handle src, bool /*convert*/) {
    constexpr const char* kName = "an item of gpus";
    if (PyBool_Check(src.ptr()) || !PyIndex_Check(src.ptr())) {
      throw type_error(std::string(kName) + " must be a gpushare.Gpu or an int, not " +
                       std::string(str(type::handle_of(src).attr("__name__"))));
    }
    value.memory = gpushare::python::ReadInt<int64_t>(src, kName);
    return true;
  }

  static handle cast(const gpushare::python::GpuSize& src, return_value_policy, handle) {
    return PyLong_FromLongLong(src.memory);
  }
};

}  // namespace pybind11::detail

namespace gpushare::python {
namespace {

using StrMap = std::map<std::string, std::string>;
using GpuIndices = std::vector<Int<int, arg::gpus_item>>;

std::vector<int> ToInts(const GpuIndices& gpus) {
  return std::vector<int>(gpus.begin(), gpus.end());
}

// Snapshot types compare field by field (requests of a node as a set).
bool SameGpu(const Gpu& a, const Gpu& b) {
  return a.memory == b.memory && a.model == b.model && a.uuid == b.uuid &&
         a.healthy == b.healthy;
}

bool SameGpuStatus(const GpuStatus& a, const GpuStatus& b) {
  return a.index == b.index && a.memory == b.memory && a.memory_used == b.memory_used &&
         a.compute_used == b.compute_used && a.holders == b.holders &&
         a.healthy == b.healthy && a.model == b.model && a.uuid == b.uuid;
}

std::vector<std::string> SortedRequests(const NodeStatus& n) {
  std::vector<std::string> ids = n.requests;
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool SameNodeStatus(const NodeStatus& a, const NodeStatus& b) {
  return a.name == b.name && a.address == b.address && a.labels == b.labels &&
         a.schedulable == b.schedulable && a.gpu_sharing == b.gpu_sharing &&
         a.cpu == b.cpu && a.cpu_used == b.cpu_used && a.host_memory == b.host_memory &&
         a.host_memory_used == b.host_memory_used && a.version == b.version &&
         std::equal(a.gpus.begin(), a.gpus.end(), b.gpus.begin(), b.gpus.end(),
                    SameGpuStatus) &&
         SortedRequests(a) == SortedRequests(b);
}

bool SameUsage(const Usage& a, const Usage& b) {
  return a.gpu_memory == b.gpu_memory && a.gpu_memory_used == b.gpu_memory_used &&
         a.gpus == b.gpus && a.idle_gpus == b.idle_gpus && a.compute_used == b.compute_used &&
         a.cpu == b.cpu && a.cpu_used == b.cpu_used && a.host_memory == b.host_memory &&
         a.host_memory_used == b.host_memory_used && a.placements == b.placements;
}

constexpr const char* kReprDoc = "A constructor call that makes an equal value.";
constexpr const char* kEqDoc = "Equal when every field is equal.";

std::string GpuStatusRepr(const GpuStatus& g) {
  std::string out = absl::StrCat("GpuStatus(index=", g.index, ", memory=", g.memory,
                                 ", memory_used=", g.memory_used,
                                 ", compute_used=", g.compute_used, ", holders=", g.holders);
  if (!g.healthy) absl::StrAppend(&out, ", healthy=False");
  if (!g.model.empty()) absl::StrAppend(&out, ", model=", PyQuote(g.model));
  if (!g.uuid.empty()) absl::StrAppend(&out, ", uuid=", PyQuote(g.uuid));
  return out + ")";
}

std::string NodeStatusRepr(const NodeStatus& n) {
  std::string out = absl::StrCat("NodeStatus(name=", PyQuote(n.name), ", gpus=[");
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", GpuStatusRepr(n.gpus[i]));
  }
  out += "]";
  if (!n.address.empty()) absl::StrAppend(&out, ", address=", PyQuote(n.address));
  if (!n.labels.empty()) {
    absl::StrAppend(&out, ", labels=", std::string(py::repr(py::cast(n.labels))));
  }
  if (!n.schedulable) out += ", schedulable=False";
  if (n.gpu_sharing) out += ", gpu_sharing=True";
  if (n.cpu != 0 || n.cpu_used != 0) {
    absl::StrAppend(&out, ", cpu=", n.cpu, ", cpu_used=", n.cpu_used);
  }
  if (n.host_memory != 0 || n.host_memory_used != 0) {
    absl::StrAppend(&out, ", host_memory=", n.host_memory,
                    ", host_memory_used=", n.host_memory_used);
  }
  if (!n.requests.empty()) {
    absl::StrAppend(&out, ", requests=", std::string(py::repr(py::cast(SortedRequests(n)))));
  }
  if (n.version != 0) absl::StrAppend(&out, ", version=", n.version);
  return out + ")";
}

std::string UsageRepr(const Usage& u) {
  return absl::StrCat("Usage(gpu_memory=", u.gpu_memory, ", gpu_memory_used=", u.gpu_memory_used,
                      ", gpus=", u.gpus, ", idle_gpus=", u.idle_gpus,
                      ", compute_used=", u.compute_used, ", cpu=", u.cpu,
                      ", cpu_used=", u.cpu_used, ", host_memory=", u.host_memory,
                      ", host_memory_used=", u.host_memory_used,
                      ", placements=", u.placements, ")");
}

}  // namespace

void RegisterTypes(py::module_& m) {
  m.attr("GPU_COMPUTE") = kGpuCompute;
  m.attr("MAX_QUANTITY") = kMaxQuantity;
  m.attr("MAX_GPUS_PER_NODE") = kMaxGpusPerNode;
  m.def("version", &Version, "The library's version, e.g. '0.1.0'.");

  py::class_<Gpu> gpu(m, "Gpu", "One GPU as it is installed in a node.");
  gpu.def(py::init([](Int<int64_t, arg::memory> memory, std::string model, std::string uuid,
                      bool healthy) {
             return Gpu{memory, std::move(model), std::move(uuid), healthy};
           }),
           py::arg("memory"), py::arg("model") = "", py::arg("uuid") = "",
           py::arg("healthy") = true,
           "A GPU with `memory` memory units (1..MAX_QUANTITY), an optional model name "
           "(e.g. 'T4') and UUID; unhealthy GPUs take no new work.");
  IntAttribute<arg::memory>(gpu, &Gpu::memory, "Memory capacity, memory units.");
  gpu.def_readwrite("model", &Gpu::model, "Model name, e.g. 'T4'; may be empty.")
      .def_readwrite("uuid", &Gpu::uuid, "UUID, e.g. 'GPU-0b3c...'; empty when unknown.")
      .def_readwrite("healthy", &Gpu::healthy, "Unhealthy GPUs take no new work.")
      .def("__repr__", &Repr<Gpu>, kReprDoc)
      .def("__eq__", &SameGpu, py::arg("other"), py::is_operator(), kEqDoc)
      .def(py::pickle([](const Gpu& g) { return py::make_tuple(g.memory, g.model, g.uuid, g.healthy); },
                      [](py::tuple t) {
                        return Gpu{ReadInt<int64_t>(t[0], arg::memory), t[1].cast<std::string>(),
                                   t[2].cast<std::string>(), t[3].cast<bool>()};
                      }));
  // A plain int in a list of GPUs is a GPU of that memory size (checked as
  // ReadInt() checks arguments, so that True is no GPU of 1 unit).
  py::implicitly_convertible<GpuSize, Gpu>();

  py::class_<Node> node(m, "Node",
                        "A node (a machine) and everything it can offer; the argument of "
                        "Cluster.add_node() and Cluster.nodes_needed().");
  node.def(py::init([](std::string name, std::vector<Gpu> gpus, StrMap labels,
                       std::string address, Int<int64_t, arg::cpu> cpu,
                       Int<int64_t, arg::host_memory> host_memory,
                       bool schedulable, std::optional<bool> gpu_sharing,
                       std::shared_ptr<Topology> topology) {
             Node n;
             n.topology = std::move(topology);
             n.name = std::move(name);
             n.gpus = std::move(gpus);
             n.labels = std::move(labels);
             n.address = std::move(address);
             n.cpu = cpu;
             n.host_memory = host_memory;
             n.schedulable = schedulable;
             n.gpu_sharing = gpu_sharing;
             return n;
           }),
           py::arg("name"), py::arg("gpus") = std::vector<Gpu>{}, py::arg("labels") = StrMap{},
           py::arg("address") = "", py::arg("cpu") = 0, py::arg("host_memory") = 0,
           py::arg("schedulable") = true, py::arg("gpu_sharing") = py::none(),
           py::arg("topology") = py::none(),
           "A node called `name` with `gpus` (Gpu objects or plain memory sizes). "
           "`cpu` is in thousandths of a core and `host_memory` in MiB (0 = not tracked). "
           "`gpu_sharing` None lets the labels decide (gpushare=true, cgpu=true, ...). "
           "`topology` (a Topology over as many GPUs, or None: topology-blind) chooses "
           "the best connected GPUs for multi-GPU requests.")
      .def_readwrite("name", &Node::name, "Unique in the cluster.")
      .def_readwrite("address", &Node::address, "Optional, e.g. '192.168.1.214'.")
      .def_readwrite("labels", &Node::labels, "Labels (a copy: assign a new dict to change).")
      .def_readwrite("gpus", &Node::gpus, "The GPUs (a copy: assign a new list to change).");
  IntAttribute<arg::cpu>(node, &Node::cpu, "Host CPU, thousandths of a core; 0 = not tracked.");
  IntAttribute<arg::host_memory>(node, &Node::host_memory, "Host memory, MiB; 0 = not tracked.");
  node.def_readwrite("schedulable", &Node::schedulable, "Unschedulable nodes take no new work.")
      .def_readwrite("gpu_sharing", &Node::gpu_sharing,
                     "Whether the node takes shared GPU work; None: decided by the labels.")
      .def_property_readonly("takes_shared_gpu_work", &TakesSharedGpuWork,
                             "gpu_sharing if set, else whether a sharing label is present.")
      .def_property(
          "topology", [](const Node& n) { return Mutable(n.topology); },
          [](Node& n, std::shared_ptr<Topology> t) { n.topology = std::move(t); },
          "How the GPUs are wired (a Topology), or None: topology-blind.")
      .def("__repr__", &Repr<Node>, kReprDoc)
      .def("__eq__", [](const Node& a, const Node& b) {
        return a.name == b.name && a.address == b.address && a.labels == b.labels &&
               a.topology == b.topology &&
               a.cpu == b.cpu && a.host_memory == b.host_memory &&
               a.schedulable == b.schedulable && a.gpu_sharing == b.gpu_sharing &&
               std::equal(a.gpus.begin(), a.gpus.end(), b.gpus.begin(), b.gpus.end(), SameGpu);
      }, py::arg("other"), py::is_operator(), kEqDoc);

  py::class_<Request> request(m, "Request",
                              "A request for resources: one pod. Shared when gpu_memory or "
                              "compute is set, exclusive when whole_gpus is set, else CPU-only.");
  request.def(py::init([](std::string id, Int<int64_t, arg::gpu_memory> gpu_memory,
                       Int<int64_t, arg::gpu_count> gpu_count, Int<int64_t, arg::compute> compute,
                       Int<int64_t, arg::whole_gpus> whole_gpus, Int<int64_t, arg::cpu> cpu,
                       Int<int64_t, arg::host_memory> host_memory,
                       std::vector<std::string> gpu_models, StrMap node_selector,
                       const std::string& topology, const std::string& topology_objective) {
             Request r;
             r.topology = ParseTopologyNeed(topology, topology_objective);
             r.id = std::move(id);
             r.gpu_memory = gpu_memory;
             r.gpu_count = gpu_count;
             r.compute = compute;
             r.whole_gpus = whole_gpus;
             r.cpu = cpu;
             r.host_memory = host_memory;
             r.gpu_models = std::move(gpu_models);
             r.node_selector = std::move(node_selector);
             return r;
           }),
           py::arg("id"), py::arg("gpu_memory") = 0, py::arg("gpu_count") = 1,
           py::arg("compute") = 0, py::arg("whole_gpus") = 0, py::arg("cpu") = 0,
           py::arg("host_memory") = 0, py::arg("gpu_models") = std::vector<std::string>{},
           py::arg("node_selector") = StrMap{}, py::arg("topology") = "prefer",
           py::arg("topology_objective") = "weakest_link",
           "A request `id` (unique among placed requests, e.g. 'ns/pod'): `gpu_memory` "
           "units split over `gpu_count` distinct GPUs of one node plus `compute` "
           "thousandths of each; or `whole_gpus` exclusive GPUs; `cpu` in thousandths "
           "of a core, `host_memory` in MiB; `gpu_models` allowed (empty = any); "
           "`node_selector` label equality. `topology`: 'prefer' (best connected GPUs "
           "on nodes with a topology), 'none', or a required minimum link such as 'NV1' "
           "(every pair of the GPUs at least that good; other nodes are infeasible); "
           "`topology_objective`: 'weakest_link' (weakest pair, then total) or 'total'.")
      .def_readwrite("id", &Request::id, "Unique among placed requests, e.g. 'ns/pod'.");
  IntAttribute<arg::gpu_memory>(request, &Request::gpu_memory, "Total GPU memory, memory units.");
  IntAttribute<arg::gpu_count>(request, &Request::gpu_count,
                               "Distinct GPUs sharing gpu_memory; 1..64.");
  IntAttribute<arg::compute>(request, &Request::compute,
                             "Per GPU, thousandths of a GPU; 0 or 1..1000.");
  IntAttribute<arg::whole_gpus>(request, &Request::whole_gpus, "Exclusive whole GPUs; 0 = none.");
  IntAttribute<arg::cpu>(request, &Request::cpu, "Host CPU, thousandths of a core.");
  IntAttribute<arg::host_memory>(request, &Request::host_memory, "Host memory, MiB.");
  request.def_readwrite("gpu_models", &Request::gpu_models, "Allowed GPU models; empty = any.")
      .def_readwrite("node_selector", &Request::node_selector, "Required node labels.")
      .def_property(
          "topology", [](const Request& r) { return TopologyNeedName(r.topology); },
          [](Request& r, const std::string& v) {
            const TopologyNeed n = ParseTopologyNeed(v, "weakest_link");
            r.topology.mode = n.mode;
            r.topology.min_link = n.min_link;
          },
          "'prefer', 'none' or the required minimum link, e.g. 'NV1'.")
      .def_property(
          "topology_objective",
          [](const Request& r) {
            return r.topology.objective == TopologyObjective::kTotal ? "total" : "weakest_link";
          },
          [](Request& r, const std::string& v) {
            r.topology.objective = ParseTopologyNeed("prefer", v).objective;
          },
          "'weakest_link' or 'total'.")
      .def("__repr__", &Repr<Request>, kReprDoc)
      .def("__eq__", [](const Request& a, const Request& b) {
        return a.id == b.id && a.gpu_memory == b.gpu_memory && a.gpu_count == b.gpu_count &&
               a.compute == b.compute && a.whole_gpus == b.whole_gpus && a.cpu == b.cpu &&
               a.host_memory == b.host_memory && a.gpu_models == b.gpu_models &&
               a.node_selector == b.node_selector &&
               TopologyNeedName(a.topology) == TopologyNeedName(b.topology) &&
               a.topology.objective == b.topology.objective;
      }, py::arg("other"), py::is_operator(), kEqDoc);

  py::class_<BoundPlacement> placement(
      m, "Placement",
      "Where a request went: returned by Cluster.place() and Cluster.plan(), taken back "
      "by Cluster.commit(). A snapshot: changing it changes nothing in the cluster.");
  placement.def(py::init([](std::string request_id, std::string node, GpuIndices gpus,
                       Int<int64_t, arg::memory_per_gpu> memory_per_gpu,
                       Int<int64_t, arg::compute_per_gpu> compute_per_gpu, bool exclusive,
                       Int<int64_t, arg::cpu> cpu, Int<int64_t, arg::host_memory> host_memory) {
             BoundPlacement p;
             p.request_id = std::move(request_id);
             p.node = std::move(node);
             p.gpus = ToInts(gpus);
             p.memory_per_gpu = memory_per_gpu;
             p.compute_per_gpu = compute_per_gpu;
             p.exclusive = exclusive;
             p.cpu = cpu;
             p.host_memory = host_memory;
             return p;
           }),
           py::arg("request_id") = "", py::arg("node") = "", py::arg("gpus") = GpuIndices{},
           py::arg("memory_per_gpu") = 0, py::arg("compute_per_gpu") = 0,
           py::arg("exclusive") = false, py::arg("cpu") = 0, py::arg("host_memory") = 0,
           "A placement by hand (e.g. to commit a plan edited by a host).")
      .def_readwrite("request_id", &Placement::request_id, "The request's id.")
      .def_readwrite("node", &Placement::node, "The node's name.")
      .def_property(
          "gpus", [](const BoundPlacement& p) { return p.gpus; },
          [](BoundPlacement& p, const GpuIndices& gpus) { p.gpus = ToInts(gpus); },
          "GPU indices on `node`, ascending.");
  IntAttribute<arg::memory_per_gpu>(placement, &Placement::memory_per_gpu,
                                    "Memory units on each GPU (shared requests).");
  IntAttribute<arg::compute_per_gpu>(placement, &Placement::compute_per_gpu,
                                     "Thousandths of a GPU on each GPU (shared requests).");
  placement.def_readwrite("exclusive", &Placement::exclusive, "The GPUs are held whole.");
  IntAttribute<arg::cpu>(placement, &Placement::cpu, "Host CPU, thousandths of a core.");
  IntAttribute<arg::host_memory>(placement, &Placement::host_memory, "Host memory, MiB.");
  placement.def_property_readonly("total_memory", &Placement::total_memory,
                             "Total GPU memory units: memory_per_gpu * len(gpus).")
      .def_property_readonly(
          "weakest_link",
          [](const BoundPlacement& p) -> py::object {
            if (p.weakest_link.empty()) return py::none();
            return py::str(p.weakest_link);
          },
          "The weakest link between two of the GPUs ('NV2', 'PIX', ...) on a node with a "
          "topology; None for one GPU or a topology-blind node.")
      .def_property_readonly(
          "env", [](const BoundPlacement& p) { return DeviceViewOf(p, 0).env; },
          "The container environment the device plugin sets (a dict of str): "
          "NVIDIA_VISIBLE_DEVICES, ALIYUN_COM_GPU_MEM_CONTAINER, ALIYUN_COM_GPU_MEM_DEV, ... "
          "Computed on the cluster that made the placement.")
      .def_property_readonly(
          "annotations", [](const BoundPlacement& p) { return DeviceViewOf(p, 0).annotations; },
          "The pod annotations written at bind time (a dict of str): ALIYUN_COM_GPU_MEM_IDX, "
          "ALIYUN_COM_GPU_MEM_POD, ..., with ALIYUN_COM_GPU_MEM_ASSUME_TIME = now.")
      .def("__repr__", [](const BoundPlacement& p) { return Repr<Placement>(p); }, kReprDoc)
      .def("__eq__", [](const BoundPlacement& a, const BoundPlacement& b) {
        return static_cast<const Placement&>(a) == static_cast<const Placement&>(b);
      }, py::arg("other"), py::is_operator(),
      "Equal when every field is equal (the cluster it came from does not count).");

  py::class_<FitResult>(m, "FitResult", "One node's answer to 'can this request go here?'.")
      .def(py::init([](std::string node, bool feasible, std::string reason) {
             return FitResult{std::move(node), feasible, std::move(reason)};
           }),
           py::arg("node"), py::arg("feasible"), py::arg("reason") = "",
           "A fit result (normally made by Cluster.fit()).")
      .def_readonly("node", &FitResult::node, "The node's name.")
      .def_readonly("feasible", &FitResult::feasible, "Whether the request can go there now.")
      .def_readonly("reason", &FitResult::reason,
                    "Why not, in kube-scheduler's style; empty if feasible.")
      .def("__bool__", [](const FitResult& f) { return f.feasible; }, "feasible.")
      .def("__repr__", &Repr<FitResult>, kReprDoc)
      .def("__eq__", [](const FitResult& a, const FitResult& b) {
        return a.node == b.node && a.feasible == b.feasible && a.reason == b.reason;
      }, py::arg("other"), py::is_operator(), kEqDoc);

  py::class_<GpuStatus>(m, "GpuStatus", "A GPU as the cluster sees it now (a snapshot).")
      .def(py::init([](Int<int, arg::index> index, Int<int64_t, arg::memory> memory,
                       Int<int64_t, arg::memory_used> memory_used,
                       Int<int64_t, arg::compute_used> compute_used,
                       Int<int, arg::holders> holders, bool healthy, std::string model,
                       std::string uuid) {
             GpuStatus g;
             g.index = index;
             g.memory = memory;
             g.memory_used = memory_used;
             g.compute_used = compute_used;
             g.holders = holders;
             g.healthy = healthy;
             g.model = std::move(model);
             g.uuid = std::move(uuid);
             return g;
           }),
           py::kw_only(), py::arg("index") = 0, py::arg("memory") = 0,
           py::arg("memory_used") = 0, py::arg("compute_used") = 0, py::arg("holders") = 0,
           py::arg("healthy") = true, py::arg("model") = "", py::arg("uuid") = "",
           "A GPU status by hand (normally made by Cluster.get_node()), e.g. to test a "
           "Policy's evaluate().")
      .def_readonly("index", &GpuStatus::index, "Index on its node.")
      .def_readonly("memory", &GpuStatus::memory, "Capacity, memory units.")
      .def_readonly("memory_used", &GpuStatus::memory_used, "Allocated, memory units.")
      .def_readonly("compute_used", &GpuStatus::compute_used, "Allocated, thousandths.")
      .def_readonly("holders", &GpuStatus::holders, "Requests holding a share of it.")
      .def_readonly("healthy", &GpuStatus::healthy, "Unhealthy GPUs take no new work.")
      .def_readonly("model", &GpuStatus::model, "Model name; may be empty.")
      .def_readonly("uuid", &GpuStatus::uuid, "UUID; may be empty.")
      .def_property_readonly("memory_free", &GpuStatus::memory_free, "Free memory units.")
      .def_property_readonly("compute_free", &GpuStatus::compute_free, "Free thousandths.")
      .def_property_readonly("idle", &GpuStatus::idle, "Nothing allocated on it.")
      .def("__repr__", &GpuStatusRepr, kReprDoc)
      .def("__eq__", &SameGpuStatus, py::arg("other"), py::is_operator(), kEqDoc);

  py::class_<NodeStatus>(m, "NodeStatus", "A node as the cluster sees it now (a snapshot).")
      .def(py::init([](std::string name, std::vector<GpuStatus> gpus, std::string address,
                       StrMap labels, bool schedulable, bool gpu_sharing,
                       Int<int64_t, arg::cpu> cpu, Int<int64_t, arg::cpu_used> cpu_used,
                       Int<int64_t, arg::host_memory> host_memory,
                       Int<int64_t, arg::host_memory_used> host_memory_used,
                       std::vector<std::string> requests, Int<uint64_t, arg::version> version) {
             NodeStatus n;
             n.name = std::move(name);
             n.gpus = std::move(gpus);
             n.address = std::move(address);
             n.labels = std::move(labels);
             n.schedulable = schedulable;
             n.gpu_sharing = gpu_sharing;
             n.cpu = cpu;
             n.cpu_used = cpu_used;
             n.host_memory = host_memory;
             n.host_memory_used = host_memory_used;
             n.requests = std::move(requests);
             n.version = version;
             return n;
           }),
           py::arg("name"), py::arg("gpus") = std::vector<GpuStatus>{}, py::kw_only(),
           py::arg("address") = "", py::arg("labels") = StrMap{}, py::arg("schedulable") = true,
           py::arg("gpu_sharing") = false, py::arg("cpu") = 0, py::arg("cpu_used") = 0,
           py::arg("host_memory") = 0, py::arg("host_memory_used") = 0,
           py::arg("requests") = std::vector<std::string>{}, py::arg("version") = 0,
           "A node status by hand (normally made by Cluster.get_node()), e.g. to test a "
           "Policy's evaluate().")
      .def_readonly("name", &NodeStatus::name, "The node's name.")
      .def_readonly("address", &NodeStatus::address, "Its address; may be empty.")
      .def_readonly("labels", &NodeStatus::labels, "Its labels.")
      .def_readonly("schedulable", &NodeStatus::schedulable, "False when cordoned.")
      .def_readonly("gpu_sharing", &NodeStatus::gpu_sharing, "Takes shared GPU work.")
      .def_readonly("cpu", &NodeStatus::cpu, "Capacity, thousandths of a core; 0 = untracked.")
      .def_readonly("cpu_used", &NodeStatus::cpu_used, "Allocated, thousandths of a core.")
      .def_readonly("host_memory", &NodeStatus::host_memory, "Capacity, MiB; 0 = untracked.")
      .def_readonly("host_memory_used", &NodeStatus::host_memory_used, "Allocated, MiB.")
      .def_readonly("gpus", &NodeStatus::gpus, "GpuStatus of each GPU.")
      .def_property_readonly("requests", &SortedRequests,
                             "Ids of the requests placed here, sorted.")
      .def_readonly("version", &NodeStatus::version, "Incremented by every change to the node.")
      .def_property_readonly(
          "topology", [](const NodeStatus& n) { return Mutable(n.topology); },
          "How the GPUs are wired (a Topology), or None.")
      .def_property_readonly("gpu_memory", &NodeStatus::gpu_memory,
                             "Sum of GPU capacities, memory units.")
      .def_property_readonly("gpu_memory_used", &NodeStatus::gpu_memory_used,
                             "Sum of allocated GPU memory, memory units.")
      .def("__repr__", &NodeStatusRepr, kReprDoc)
      .def("__eq__", &SameNodeStatus, py::arg("other"), py::is_operator(), kEqDoc);

  py::class_<Usage>(m, "Usage", "Totals over the cluster (a snapshot).")
      .def(py::init([](Int<int64_t, arg::gpu_memory> gpu_memory,
                       Int<int64_t, arg::gpu_memory_used> gpu_memory_used,
                       Int<int64_t, arg::gpus> gpus, Int<int64_t, arg::idle_gpus> idle_gpus,
                       Int<int64_t, arg::compute_used> compute_used, Int<int64_t, arg::cpu> cpu,
                       Int<int64_t, arg::cpu_used> cpu_used,
                       Int<int64_t, arg::host_memory> host_memory,
                       Int<int64_t, arg::host_memory_used> host_memory_used,
                       Int<int64_t, arg::placements> placements) {
             Usage u;
             u.gpu_memory = gpu_memory;
             u.gpu_memory_used = gpu_memory_used;
             u.gpus = gpus;
             u.idle_gpus = idle_gpus;
             u.compute_used = compute_used;
             u.cpu = cpu;
             u.cpu_used = cpu_used;
             u.host_memory = host_memory;
             u.host_memory_used = host_memory_used;
             u.placements = placements;
             return u;
           }),
           py::kw_only(), py::arg("gpu_memory") = 0, py::arg("gpu_memory_used") = 0,
           py::arg("gpus") = 0, py::arg("idle_gpus") = 0, py::arg("compute_used") = 0,
           py::arg("cpu") = 0, py::arg("cpu_used") = 0, py::arg("host_memory") = 0,
           py::arg("host_memory_used") = 0, py::arg("placements") = 0,
           "Totals by hand (normally made by Cluster.usage()).")
      .def_readonly("gpu_memory", &Usage::gpu_memory, "Capacity, memory units (all GPUs).")
      .def_readonly("gpu_memory_used", &Usage::gpu_memory_used, "Allocated, memory units.")
      .def_readonly("gpus", &Usage::gpus, "Number of GPUs.")
      .def_readonly("idle_gpus", &Usage::idle_gpus, "GPUs holding nothing.")
      .def_readonly("compute_used", &Usage::compute_used, "Thousandths, summed over GPUs.")
      .def_readonly("cpu", &Usage::cpu, "Host CPU capacity, thousandths of a core.")
      .def_readonly("cpu_used", &Usage::cpu_used, "Host CPU allocated, thousandths of a core.")
      .def_readonly("host_memory", &Usage::host_memory, "Host memory capacity, MiB.")
      .def_readonly("host_memory_used", &Usage::host_memory_used, "Host memory allocated, MiB.")
      .def_readonly("placements", &Usage::placements, "Requests placed.")
      .def("__repr__", &UsageRepr, kReprDoc)
      .def("__eq__", &SameUsage, py::arg("other"), py::is_operator(), kEqDoc);
}

}  // namespace gpushare::python
