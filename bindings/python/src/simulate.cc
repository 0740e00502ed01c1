// Trace-driven simulation: gs.simulate(), gs.replay(), the openb loaders and
// fragmentation: gs.typical_tasks(), gs.fragmentation() (gpushare/simulate.h,
// trace.h, fragmentation.h).

#include <pybind11/stl.h>

#include <cmath>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {
namespace {

bool IsPath(py::handle h) {
  return py::isinstance<py::str>(h) ||
         py::isinstance(h, py::module_::import("os").attr("PathLike"));
}

std::string PathOf(py::handle h) {
  return py::module_::import("os").attr("fspath")(h).cast<std::string>();
}

std::vector<Node> NodesArg(py::handle nodes) {
  if (IsPath(nodes)) return ValueOrThrow(LoadOpenbNodes(PathOf(nodes)));
  return nodes.cast<std::vector<Node>>();
}

std::vector<Request> RequestsArg(py::handle tasks) {
  if (IsPath(tasks)) return ToRequests(ValueOrThrow(LoadOpenbTasks(PathOf(tasks))));
  return tasks.cast<std::vector<Request>>();
}

// More seeds than this is a typing error, as in `gpushare simulate --seeds`
// (each seed is a whole run).
constexpr size_t kMaxSeeds = 10000;

// The seeds of gs.simulate(seed=[...]): any iterable of ints (a list, a
// range, a generator), each at most once, at most kMaxSeeds of them. Reads no
// more than kMaxSeeds + 1 items, so that range(10**18) fails at once.
std::vector<uint64_t> SeedsArg(py::handle seed) {
  py::iterator items;
  try {
    items = py::iter(seed);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    throw py::type_error(absl::StrCat(
        "seed must be an int or an iterable of ints, not ",
        std::string(py::str(py::type::handle_of(seed).attr("__name__")))));
  }
  std::vector<uint64_t> seeds;
  std::unordered_set<uint64_t> seen;
  for (py::handle item : items) {
    if (seeds.size() == kMaxSeeds) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("seed gives more than ", kMaxSeeds, " seeds")));
    }
    const uint64_t s = ReadInt<uint64_t>(item, "an item of seed");
    if (!seen.insert(s).second) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat("seed lists seed ", s, " twice")));
    }
    seeds.push_back(s);
  }
  return seeds;
}

py::dict Failures(const FailureCounts& f) {
  return py::dict(py::arg("cpu_only") = f.cpu_only, py::arg("shared") = f.shared,
                  py::arg("one_gpu") = f.one_gpu, py::arg("multi_gpu") = f.multi_gpu,
                  py::arg("total") = f.total());
}

py::dict Breakdown(const UnallocatedBreakdown& b) {
  return py::dict(py::arg("gpu_model") = b.gpu_model, py::arg("cpu") = b.cpu,
                  py::arg("host_memory") = b.host_memory, py::arg("gpu_shape") = b.gpu_shape,
                  py::arg("placeable") = b.placeable, py::arg("total") = b.total());
}

py::dict Summary(const SimulationResult& r) {
  py::dict d;
  d["policy"] = r.policy;
  d["seed"] = r.seed;
  for (int pct : {90, 95, 100, 110}) {
    d[py::str(absl::StrCat("unallocated_at_", pct))] = r.UnallocatedAt(pct);
  }
  d["frag_rate_at_100"] = r.FragRateAt(100);
  d["requests"] = r.requests;
  d["placed"] = r.placed;
  d["failed"] = Failures(r.failed);
  d["seconds"] = r.seconds;
  d["topology_tasks"] = r.topology_tasks;
  d["topology_best"] = r.topology_best;
  py::dict weakest;  // Best link first.
  for (const auto& [link, n] : r.topology_weakest) weakest[py::str(link)] = n;
  d["topology_weakest"] = weakest;
  d["migrations"] = r.migrations;
  d["rescued"] = r.rescued;
  return d;
}

py::dict Records(const SimulationResult& r) {
  py::dict d;
  d["node"] = r.node_of_request;
  d["arrived"] = r.arrived_after;
  d["allocated"] = r.allocated_after;
  d["frag_amount"] = r.frag_amount_after;
  d["frag_rate"] = r.frag_rate_after;
  return d;
}

py::dict Curve(const SimulationResult& r) {
  py::dict d;
  d["arrived_pct"] = r.arrived_pct;
  d["unallocated_pct"] = r.unallocated_pct;
  d["frag_amount"] = r.frag_amount;
  d["frag_rate"] = r.frag_rate;
  return d;
}

}  // namespace

FragResource ResourceArg(const std::string& resource) {
  if (resource == "compute") return FragResource::kCompute;
  if (resource == "memory") return FragResource::kMemory;
  ThrowIfError(absl::InvalidArgumentError(
      absl::StrCat("resource '", resource, "' is not 'compute' or 'memory'")));
  return FragResource::kCompute;
}

py::list TargetToPython(const TargetWorkload& t) {
  py::list out;
  for (const TargetTask& task : t.tasks) {
    py::dict d;
    d["cpu"] = task.cpu;
    d["gpu_share"] = task.gpu_share;
    d["gpu_count"] = task.gpu_count;
    d["gpu_models"] = task.gpu_models;
    d["weight"] = task.weight;
    out.append(d);
  }
  return out;
}

// A target workload from a list of dicts like those of gs.typical_tasks(), or
// the typical tasks of a workload (requests or an openb task CSV path).
TargetWorkload TargetArg(py::handle target, FragResource resource, double coverage) {
  const bool dicts = py::isinstance<py::list>(target) && py::len(target) > 0 &&
                     py::isinstance<py::dict>(py::reinterpret_borrow<py::list>(target)[0]);
  if (!dicts) return ValueOrThrow(TypicalTasks(RequestsArg(target), coverage, resource));
  TargetWorkload t;
  t.resource = resource;
  for (py::handle item : target) {
    if (!py::isinstance<py::dict>(item)) {
      throw py::type_error(absl::StrCat("tasks[", t.tasks.size(), "] is not a dict"));
    }
    py::dict d = item.cast<py::dict>();
    for (const auto& [key, value] : d) {
      const std::string k = py::str(key).cast<std::string>();
      if (k != "cpu" && k != "gpu_share" && k != "gpu_count" && k != "gpu_models" &&
          k != "weight") {
        ThrowIfError(absl::InvalidArgumentError(
            absl::StrCat("tasks[", t.tasks.size(), "]: unknown key '", k,
                         "' (known: cpu, gpu_share, gpu_count, gpu_models, weight)")));
      }
    }
    TargetTask task;
    task.cpu = d.contains("cpu") ? ReadInt<int64_t>(d["cpu"], "target cpu") : 0;
    task.gpu_share =
        d.contains("gpu_share") ? ReadInt<int64_t>(d["gpu_share"], "target gpu_share") : 0;
    task.gpu_count =
        d.contains("gpu_count") ? ReadInt<int>(d["gpu_count"], "target gpu_count") : 0;
    if (d.contains("gpu_models")) task.gpu_models = d["gpu_models"].cast<std::vector<std::string>>();
    task.weight = d.contains("weight") ? d["weight"].cast<double>() : 0.0;
    t.tasks.push_back(std::move(task));
  }
  ThrowIfError(ValidateTargetWorkload(t));
  return t;
}

namespace {

SimulationOptions Options(const std::string& policy, uint64_t seed, double inflate, bool shuffle,
                          bool through_cluster, int migration_budget = 0, int max_moves = 2) {
  SimulationOptions o;
  o.migration_budget = migration_budget;
  o.max_moves_per_request = max_moves;
  o.policy = policy;
  o.seed = seed;
  o.inflate = inflate;
  o.shuffle = shuffle;
  o.through_cluster = through_cluster;
  return o;
}

// The rules of gs.simulate(topologies={...}): keys are GPU counts (int) or
// GPU models (str), values a gs.Topology or the path of a file holding
// `nvidia-smi topo -m` text or the JSON form.
std::vector<TopologyRule> TopologiesArg(py::handle topologies) {
  std::vector<TopologyRule> rules;
  if (topologies.is_none()) return rules;
  if (!py::isinstance<py::dict>(topologies)) {
    throw py::type_error("topologies must be a dict {gpu count or GPU model: Topology or path}");
  }
  for (const auto& [key, value] : topologies.cast<py::dict>()) {
    const bool by_count = PyIndex_Check(key.ptr()) && !PyBool_Check(key.ptr());
    if (!by_count && !py::isinstance<py::str>(key)) {
      throw py::type_error("a key of topologies must be a GPU count (int) or a GPU model (str)");
    }
    const std::string name = py::str(key).cast<std::string>();
    TopologyRule rule;
    if (py::isinstance<Topology>(value)) {
      rule.topology = value.cast<std::shared_ptr<Topology>>();
      if (!by_count) rule.model = name;
      if (by_count && ReadInt<int>(key, "a key of topologies") != rule.topology->num_gpus()) {
        ThrowIfError(absl::InvalidArgumentError(
            absl::StrCat("topologies[", name, "] has ", rule.topology->num_gpus(),
                         " GPUs, not ", name)));
      }
    } else if (IsPath(value)) {
      rule = ValueOrThrow(LoadTopologyRule(absl::StrCat(name, "=", PathOf(value))));
    } else {
      throw py::type_error(absl::StrCat("topologies[", name,
                                        "] must be a gs.Topology or a path"));
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

}  // namespace

void RegisterSimulate(py::module_& m) {
  py::class_<SimulationResult>(m, "SimulationResult",
                               "One run of the FGD trace experiment (gs.simulate()).")
      .def_readonly("policy", &SimulationResult::policy, "Name of the policy that placed the tasks.")
      .def_readonly("seed", &SimulationResult::seed, "Seed of the shuffle, the inflation and the tie-break order.")
      .def_readonly("gpu_capacity", &SimulationResult::gpu_capacity,
                    "GPU capacity, thousandths of a GPU.")
      .def_readonly("requests", &SimulationResult::requests, "Tasks attempted, after inflation.")
      .def_readonly("placed", &SimulationResult::placed, "Tasks placed (the rest were dropped).")
      .def_readonly("seconds", &SimulationResult::seconds, "Wall time of the run, seconds.")
      .def_readonly("migrations", &SimulationResult::migrations,
                    "Tasks moved to make room (migration_budget > 0), one per move.")
      .def_readonly("rescued", &SimulationResult::rescued,
                    "Tasks that found a node only after moves.")
      .def_readonly("node_of_request", &SimulationResult::node_of_request,
                    "Per task attempted, in order: index of its node in the input, -1 if dropped.")
      .def_property_readonly(
          "failed", [](const SimulationResult& r) { return Failures(r.failed); },
          "Dropped tasks by kind: a dict with cpu_only, shared, one_gpu, multi_gpu and total.")
      .def_property_readonly(
          "unallocated", [](const SimulationResult& r) { return Breakdown(r.unallocated); },
          "Why the GPU compute idle after the last task is idle, thousandths of a GPU: a dict "
          "with gpu_model, cpu, host_memory, gpu_shape, placeable (first cause that holds, in "
          "that order; see gpushare/simulate.h) and total (capacity minus allocated).")
      .def_property_readonly("records", &Records,
                             "Per task attempted, in order, as columns: node (index in the "
                             "input, -1 if dropped), and right after its attempt arrived GPU "
                             "request and allocated GPU (thousandths of a GPU), frag_amount "
                             "(thousandths) and frag_rate (0..1).")
      .def_property_readonly("curve", &Curve,
                             "The per-1% curve as columns: arrived_pct, unallocated_pct, "
                             "frag_amount (thousandths of a GPU), frag_rate (0..1).")
      .def_property_readonly("summary", &Summary,
                             "A dict of the headline numbers: unallocated GPU % at arrived 90/95/100/110 %, "
                             "fragmentation rate at 100 %, requests, placed and failed tasks, seconds, "
                             "topology_tasks / topology_best: multi-GPU tasks on nodes with a "
                             "topology, and those that got the best connectivity available; "
                             "topology_weakest: those tasks by weakest link, best first "
                             "({'NV2': 40, 'SYS': 3}); migrations / rescued (see those attributes).")
      .def("unallocated_at", &SimulationResult::UnallocatedAt, py::arg("arrived_pct"),
           "Unallocated GPU % when arrived GPU request is `arrived_pct` % of capacity.")
      .def("frag_rate_at", &SimulationResult::FragRateAt, py::arg("arrived_pct"),
           "Fragmentation rate (0..1) when arrived GPU request is `arrived_pct` % of capacity.")
      .def("__repr__", [](const SimulationResult& r) {
        return absl::StrCat("SimulationResult(policy=", PyQuote(r.policy), ", seed=", r.seed,
                            ", requests=", r.requests, ", placed=", r.placed,
                            ", unallocated_at_100=", r.UnallocatedAt(100), ")");
      }, "The run's headline: policy, seed, tasks attempted and placed, unallocated GPU % "
         "at 100 % arrived.");

  m.def(
      "simulate",
      [](py::object nodes, py::object tasks, const std::string& policy, py::object seed,
         double inflate, bool shuffle, bool through_cluster, Int<int, arg::threads> threads,
         Int<int, arg::migration_budget> migration_budget,
         Int<int, arg::max_moves> max_moves, py::object topologies) -> py::object {
        const std::vector<TopologyRule> rules = TopologiesArg(topologies);
        // One seed (an int, numpy's too) or several (a bool is neither).
        const bool one_seed = PyIndex_Check(seed.ptr()) && !PyBool_Check(seed.ptr());
        const uint64_t single = one_seed ? ReadInt<uint64_t>(seed, arg::seed) : 0;
        const std::vector<uint64_t> seeds = one_seed ? std::vector<uint64_t>{} : SeedsArg(seed);
        const std::vector<Node> n = NodesArg(nodes);
        const std::vector<Request> r = RequestsArg(tasks);
        if (one_seed) {
          SimulationOptions o = Options(policy, single, inflate, shuffle, through_cluster,
                                        migration_budget, max_moves);
          o.topologies = rules;
          absl::StatusOr<SimulationResult> result;
          {
            py::gil_scoped_release release;
            result = Simulate(n, r, o);
          }
          return py::cast(ValueOrThrow(std::move(result)));
        }
        SimulationOptions o =
            Options(policy, 0, inflate, shuffle, through_cluster, migration_budget, max_moves);
        o.topologies = rules;
        absl::StatusOr<std::vector<SimulationResult>> results;
        {
          py::gil_scoped_release release;
          results = SimulateSeeds(n, r, o, seeds, threads);
        }
        return py::cast(ValueOrThrow(std::move(results)));
      },
      py::arg("nodes"), py::arg("tasks"), py::arg("policy") = "fgd", py::arg("seed") = 42,
      py::arg("inflate") = 1.3, py::arg("shuffle") = true, py::arg("through_cluster") = false,
      py::arg("threads") = 0, py::arg("migration_budget") = 0, py::arg("max_moves") = 2,
      py::arg("topologies") = py::none(),
      "Runs the FGD trace experiment. `nodes` and `tasks` are openb CSV paths or lists of\n"
      "gs.Node / gs.Request; `seed` an int (one SimulationResult) or an iterable of ints,\n"
      "each at most once, at most 10,000 (a list, run in parallel on `threads` threads,\n"
      "0 = all cores). `migration_budget` M > 0: a task that finds no node may have placed\n"
      "tasks moved so that it fits, at most M moves per 100 tasks attempted (accumulated)\n"
      "and `max_moves` (1..3) for one task; runs through a Cluster. `topologies` attaches\n"
      "GPU topologies to nodes without one: {8: gs.Topology or path, 'V100M32': ...}; an\n"
      "int key takes every node with that many GPUs (the topology's count), a str key every\n"
      "node of that GPU model with as many GPUs as the topology; the first matching key\n"
      "wins. A path names a file of `nvidia-smi topo -m` text or the JSON form.");

  m.def(
      "replay",
      [](py::object nodes, py::object tasks, const std::string& policy,
         Int<uint64_t, arg::seed> seed) {
        const std::vector<Node> n = NodesArg(nodes);
        std::vector<TimedRequest> timed;
        if (IsPath(tasks)) {
          for (const TraceTask& t : ValueOrThrow(LoadOpenbTasks(PathOf(tasks)))) {
            timed.push_back(TimedRequest{ToRequest(t), std::max<int64_t>(t.creation_time, 0),
                                         t.deletion_time});
          }
        } else {
          for (py::handle item : tasks) {
            py::tuple t = item.cast<py::tuple>();
            timed.push_back(TimedRequest{t[0].cast<Request>(), ReadInt<int64_t>(t[1], "start_s"),
                                         ReadInt<int64_t>(t[2], "end_s")});
          }
        }
        const SimulationOptions o = Options(policy, seed, 0, false, false);
        absl::StatusOr<ReplayResult> result;
        {
          py::gil_scoped_release release;
          result = Replay(n, timed, o);
        }
        const ReplayResult r = ValueOrThrow(std::move(result));
        py::dict d;
        d["policy"] = r.policy;
        d["requests"] = r.requests;
        d["placed"] = r.placed;
        d["failed"] = Failures(r.failed);
        d["time"] = r.time;
        d["requested_pct"] = r.requested_pct;
        d["allocated_pct"] = r.allocated_pct;
        d["frag_rate"] = r.frag_rate;
        d["peak_allocated_pct"] = r.peak_allocated_pct;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("nodes"), py::arg("tasks"), py::arg("policy") = "fgd", py::arg("seed") = 42,
      "Replays tasks by creation and deletion time (tasks leave). `tasks` is an openb CSV\n"
      "path or a list of (gs.Request, start_s, end_s) with end_s < 0 = never leaves.\n"
      "Returns a dict of columns sampled after every arrival and totals.");

  m.def(
      "typical_tasks",
      [](py::object tasks, double coverage, const std::string& resource) {
        return TargetToPython(
            ValueOrThrow(TypicalTasks(RequestsArg(tasks), coverage, ResourceArg(resource))));
      },
      py::arg("tasks"), py::arg("coverage") = 0.95, py::arg("resource") = "compute",
      "The FGD paper's target workload of `tasks` (an openb CSV path or a list of gs.Request):\n"
      "task shapes grouped by (cpu, per-GPU share, GPU count, models), the most frequent kept\n"
      "until they cover `coverage` of the tasks, weights summing to 1. A list of dicts with\n"
      "cpu, gpu_share (thousandths of a GPU, or memory units with resource='memory'),\n"
      "gpu_count, gpu_models and weight.");

  m.def(
      "fragmentation",
      [](ClusterBox& cluster, py::object target, const std::string& resource, double coverage) {
        const TargetWorkload t = TargetArg(target, ResourceArg(resource), coverage);
        auto lock = cluster.Lock();
        const ClusterFragmentation f = Fragmentation(cluster.cluster, t);
        py::dict d;
        d["amount"] = f.amount;
        d["idle"] = f.idle;
        d["rate"] = f.rate;
        return d;
      },
      py::arg("cluster"), py::arg("target"), py::arg("resource") = "compute",
      py::arg("coverage") = 0.95,
      "The cluster's GPU fragmentation against `target` as the FGD paper defines it: a dict\n"
      "of amount and idle (thousandths of a GPU, or memory units with resource='memory') and\n"
      "rate = amount / idle. `target` is a list of dicts like gs.typical_tasks() returns, or\n"
      "a workload (openb CSV path or list of gs.Request) whose typical tasks are used.");

  m.def(
      "load_openb_nodes", [](py::object path) { return NodesArg(path); }, py::arg("path"),
      "The nodes of an openb node CSV.");
  m.def(
      "load_openb_tasks", [](py::object path) { return RequestsArg(path); }, py::arg("path"),
      "The requests of an openb task CSV (compute = gpu_milli, whole_gpus = num_gpu).");
}

}  // namespace gpushare::python
