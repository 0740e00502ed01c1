// gs.Cluster: nodes, requests, placements, bulk calls for simulators, JSON
// snapshots and notebook-friendly records.

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {
namespace {

using StrMap = std::map<std::string, std::string>;
using Box = std::shared_ptr<ClusterBox>;

MemoryUnit ParseUnit(const std::string& unit) {
  if (unit == "GiB") return MemoryUnit::kGiB;
  if (unit == "MiB") return MemoryUnit::kMiB;
  ThrowIfError(absl::InvalidArgumentError(
      absl::StrCat("unknown memory unit '", unit, "'; known units: GiB, MiB")));
  return MemoryUnit::kGiB;
}

BoundPlacement Bind(ClusterBox& self, Placement p) {
  return BoundPlacement(std::move(p), self.weak_from_this());
}

py::list BindAll(ClusterBox& self, std::vector<Placement> placements) {
  py::list out(placements.size());
  for (size_t i = 0; i < placements.size(); ++i) {
    out[i] = py::cast(Bind(self, std::move(placements[i])));
  }
  return out;
}

// Places every request of a batch in order; a request that does not fit gets
// nullopt. The batch is checked first (valid requests, distinct ids, none
// placed); on a later error the requests placed by the call are released.
absl::Status PlaceAll(Cluster& c, const std::vector<const Request*>& requests, Policy& policy,
                      std::vector<std::optional<Placement>>& out) {
  std::unordered_set<std::string_view> ids;
  ids.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = *requests[i];
    if (absl::Status s = c.Validate(r).status(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("requests[", i, "]: ", s.message()));
    }
    if (!ids.insert(r.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("requests[", i, "]: id '", r.id, "' appears twice in the batch"));
    }
    if (c.FindPlacement(r.id) != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("requests[", i, "]: request '", r.id, "' is already placed"));
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<Placement> p = c.Place(*requests[i], policy);
    if (p.ok()) {
      out[i] = *std::move(p);
    } else if (p.status().code() != absl::StatusCode::kResourceExhausted) {
      for (size_t j = 0; j < i; ++j) {
        if (out[j].has_value()) c.Release(out[j]->request_id).IgnoreError();
      }
      return absl::Status(p.status().code(),
                          absl::StrCat("requests[", i, "]: ", p.status().message()));
    }
  }
  return absl::OkStatus();
}

// Releases every id, or none: all must be placed and distinct.
absl::Status ReleaseAll(Cluster& c, const std::vector<std::string>& ids) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(ids.size());
  for (const std::string& id : ids) {
    if (c.FindPlacement(id) == nullptr) return c.Release(id);  // Fails; changes nothing.
    if (!seen.insert(id).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("request '", id, "' appears twice in the batch"));
    }
  }
  for (const std::string& id : ids) {
    if (absl::Status s = c.Release(id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

py::list ToRecords(const Cluster& c) {
  py::list records;
  for (const std::string& name : c.node_names()) {
    const NodeStatus& n = *c.FindNode(name);
    for (const GpuStatus& g : n.gpus) {
      py::dict r;
      r["node"] = n.name;
      r["address"] = n.address;
      r["gpu"] = g.index;
      r["model"] = g.model;
      r["uuid"] = g.uuid;
      r["healthy"] = g.healthy;
      r["schedulable"] = n.schedulable;
      r["gpu_sharing"] = n.gpu_sharing;
      r["memory"] = g.memory;
      r["memory_used"] = g.memory_used;
      r["memory_free"] = g.memory_free();
      r["compute_used"] = g.compute_used;
      r["holders"] = g.holders;
      records.append(std::move(r));
    }
  }
  return records;
}

}  // namespace

std::unique_lock<std::recursive_mutex> ClusterBox::Lock() {
  std::unique_lock<std::recursive_mutex> lock(mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    py::gil_scoped_release release;
    lock.lock();
  }
  return lock;
}

void RegisterCluster(py::module_& m) {
  py::class_<ClusterBox, Box> cls(
      m, "Cluster",
      "Nodes, their GPUs and everything placed on them, with the operations a scheduler "
      "needs. No GPU is ever promised more than it has; a call that raises changes "
      "nothing. Results are snapshots (lists, dicts, value objects), not live views. "
      "Safe to share between threads: calls are serialised.");

  cls.def(py::init([](const std::string& memory_unit,
                      Int<uint64_t, arg::tie_break_seed> tie_break_seed,
                      Int<int, arg::remembered_releases> remembered_releases) {
            ClusterOptions options;
            options.memory_unit = ParseUnit(memory_unit);
            options.tie_break_seed = tie_break_seed;
            if (remembered_releases < 0) {
              ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
                  "remembered_releases ", int{remembered_releases}, " is negative")));
            }
            options.remembered_releases = remembered_releases;
            return std::make_shared<ClusterBox>(Cluster(options));
          }),
          py::arg("memory_unit") = "GiB", py::arg("tie_break_seed") = 0,
          py::arg("remembered_releases") = 65536,
          "An empty cluster. `memory_unit` ('GiB' or 'MiB') is the display name of GPU "
          "memory units. `tie_break_seed` 0 lets the most recently added node win ties; "
          "any other value a fixed pseudo-random order. The ids of the last "
          "`remembered_releases` releases are remembered, so releasing one again (while it "
          "is not placed) is a ConflictError rather than a KeyError; 0 remembers none, a "
          "negative count is a ValueError.");

  cls.def_property_readonly(
         "memory_unit",
         [](ClusterBox& self) { return MemoryUnitName(self.cluster.options().memory_unit); },
         "'GiB' or 'MiB'.")
      .def_property_readonly(
          "tie_break_seed", [](ClusterBox& self) { return self.cluster.options().tie_break_seed; },
          "0: the newest node wins ties; else the seed of a fixed random order.")
      .def_property_readonly(
          "remembered_releases",
          [](ClusterBox& self) { return self.cluster.options().remembered_releases; },
          "How many of the latest releases are remembered (their ids).")
      .def_property_readonly(
          "num_nodes", [](ClusterBox& self) { auto l = self.Lock(); return self.cluster.num_nodes(); },
          "Number of nodes.")
      .def_property_readonly(
          "num_placements",
          [](ClusterBox& self) { auto l = self.Lock(); return self.cluster.num_placements(); },
          "Number of placed requests.");

  // ---- Nodes ----
  cls.def(
         "add_node",
         [](ClusterBox& self, const std::string& name, std::vector<Gpu> gpus, StrMap labels,
            std::string address, Int<int64_t, arg::cpu> cpu,
            Int<int64_t, arg::host_memory> host_memory, bool schedulable,
            std::optional<bool> gpu_sharing, std::shared_ptr<Topology> topology) {
           Node n;
           n.topology = std::move(topology);
           n.name = name;
           n.gpus = std::move(gpus);
           n.labels = std::move(labels);
           n.address = std::move(address);
           n.cpu = cpu;
           n.host_memory = host_memory;
           n.schedulable = schedulable;
           n.gpu_sharing = gpu_sharing;
           auto l = self.Lock();
           ThrowIfError(self.cluster.AddNode(n));
         },
         py::arg("name"), py::arg("gpus") = std::vector<Gpu>{}, py::arg("labels") = StrMap{},
         py::arg("address") = "", py::arg("cpu") = 0, py::arg("host_memory") = 0,
         py::arg("schedulable") = true, py::arg("gpu_sharing") = py::none(),
         py::arg("topology") = py::none(),
         "Adds a node with nothing allocated; the arguments are those of Node(). "
         "Raises InvalidArgumentError for a bad size or an empty name, "
         "AlreadyExistsError for a name already in the cluster.")
      .def(
          "add_node",
          [](ClusterBox& self, const Node& node) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.AddNode(node));
          },
          py::arg("node"), "Adds a Node object.")
      .def(
          "remove_node",
          [](ClusterBox& self, const std::string& name) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.RemoveNode(name));
          },
          py::arg("name"),
          "Removes a node that holds no placements. Raises NotFoundError (a KeyError) for "
          "an unknown node, ConflictError if requests are still placed on it.")
      .def(
          "set_gpu_healthy",
          [](ClusterBox& self, const std::string& node, Int<int, arg::gpu> gpu, bool healthy) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.SetGpuHealthy(node, gpu, healthy));
          },
          py::arg("node"), py::arg("gpu"), py::arg("healthy") = true,
          "Marks GPU `gpu` of `node` healthy or not; unhealthy GPUs take no new work.")
      .def(
          "set_node_schedulable",
          [](ClusterBox& self, const std::string& node, bool schedulable) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.SetNodeSchedulable(node, schedulable));
          },
          py::arg("node"), py::arg("schedulable") = true,
          "Cordons (False) or uncordons (True) a node.")
      .def(
          "node_names",
          [](ClusterBox& self) { auto l = self.Lock(); return self.cluster.node_names(); },
          "Node names in the order the nodes were added.")
      .def(
          "get_node",
          [](ClusterBox& self, const std::string& name) {
            auto l = self.Lock();
            return ValueOrThrow(self.cluster.GetNode(name));
          },
          py::arg("name"), "A NodeStatus snapshot of one node; NotFoundError if unknown.")
      .def(
          "nodes",
          [](ClusterBox& self) {
            auto l = self.Lock();
            std::vector<NodeStatus> all;
            for (const std::string& name : self.cluster.node_names()) {
              all.push_back(*self.cluster.FindNode(name));
            }
            return all;
          },
          "NodeStatus snapshots of every node, in the order they were added.");

  // ---- Requests ----
  cls.def(
         "validate",
         [](ClusterBox& self, const Request& r) {
           auto l = self.Lock();
           return ValueOrThrow(self.cluster.Validate(r));
         },
         py::arg("request"),
         "Checks a request and returns its per-GPU Demand; InvalidArgumentError naming "
         "the bad value otherwise.")
      .def(
          "fit",
          [](ClusterBox& self, const Request& r) {
            auto l = self.Lock();
            return ValueOrThrow(self.cluster.Fit(r));
          },
          py::arg("request"),
          "Every node, in the order added, as a FitResult with .node, .feasible and "
          ".reason (why not). Changes nothing.")
      .def(
          "plan",
          [](ClusterBox& self, const Request& r, py::handle policy) {
            absl::StatusOr<Placement> p = WithPolicy(
                self, policy, false, [&](Policy& pol) { return self.cluster.Plan(r, pol); });
            return Bind(self, ValueOrThrow(std::move(p)));
          },
          py::arg("request"), py::arg("policy") = "binpack",
          "Chooses where `request` goes under `policy` (a name or a Policy) without "
          "changing anything. Raises InsufficientCapacityError when nothing fits, "
          "AlreadyExistsError if the id is placed, InvalidArgumentError for a bad request.")
      .def(
          "commit",
          [](ClusterBox& self, const BoundPlacement& p) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.Commit(p));
          },
          py::arg("placement"),
          "Applies a placement from plan(), possibly after other changes. Raises "
          "ConflictError if it no longer fits, AlreadyExistsError if its id is placed, "
          "NotFoundError if its node is gone.")
      .def(
          "place",
          [](ClusterBox& self, const Request& r, py::handle policy) {
            absl::StatusOr<Placement> p = WithPolicy(
                self, policy, false, [&](Policy& pol) { return self.cluster.Place(r, pol); });
            return Bind(self, ValueOrThrow(std::move(p)));
          },
          py::arg("request"), py::arg("policy") = "binpack",
          "plan() then commit(): chooses and applies; returns the Placement.")
      .def(
          "place_many",
          [](ClusterBox& self, py::iterable requests, py::handle policy) {
            py::list keep;  // Keeps the requests alive while the GIL is released.
            std::vector<const Request*> batch;
            for (py::handle h : requests) {
              if (!py::isinstance<Request>(h)) {
                throw py::type_error(absl::StrCat(
                    "requests[", batch.size(), "] must be a gpushare.Request, not ",
                    std::string(py::str(py::type::handle_of(h).attr("__name__")))));
              }
              keep.append(h);
              batch.push_back(&h.cast<const Request&>());
            }
            std::vector<std::optional<Placement>> out(batch.size());
            absl::Status status = WithPolicy(self, policy, true, [&](Policy& pol) {
              return PlaceAll(self.cluster, batch, pol, out);
            });
            ThrowIfError(status);
            py::list result(out.size());
            for (size_t i = 0; i < out.size(); ++i) {
              result[i] = out[i].has_value() ? py::cast(Bind(self, *std::move(out[i])))
                                             : py::none();
            }
            return result;
          },
          py::arg("requests"), py::arg("policy") = "binpack",
          "Places a list of requests in order, in one call without the GIL; returns a "
          "list with a Placement for each, or None where nothing fitted. Raises (and "
          "places nothing) if any request is invalid, already placed, or repeated in the "
          "batch. Do not change the requests while it runs.")
      .def(
          "release",
          [](ClusterBox& self, const std::string& id) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.Release(id));
          },
          py::arg("id"),
          "Frees everything request `id` holds. Raises NotFoundError (a KeyError) for an "
          "unknown id, ConflictError for an id released recently.")
      .def(
          "release_many",
          [](ClusterBox& self, std::vector<std::string> ids) {
            absl::Status status;
            {
              Guard guard(self, true);
              status = ReleaseAll(self.cluster, ids);
            }
            ThrowIfError(status);
          },
          py::arg("ids"),
          "Releases a list of ids in one call without the GIL: all of them, or none if "
          "one is unknown (NotFoundError), released already or repeated (ConflictError).")
      .def(
          "get_placement",
          [](ClusterBox& self, const std::string& id) {
            auto l = self.Lock();
            return Bind(self, ValueOrThrow(self.cluster.GetPlacement(id)));
          },
          py::arg("id"), "The placement of request `id`; NotFoundError if unknown.")
      .def(
          "placements",
          [](ClusterBox& self) {
            std::vector<Placement> all;
            {
              auto l = self.Lock();
              all = self.cluster.placements();
            }
            return BindAll(self, std::move(all));
          },
          "Every placement, sorted by request id.")
      .def(
          "__contains__",
          [](ClusterBox& self, const std::string& id) {
            auto l = self.Lock();
            return self.cluster.FindPlacement(id) != nullptr;
          },
          py::arg("id"), "Whether request `id` is placed.");

  // ---- Replicas and capacity ----
  cls.def(
         "place_replicas",
         [](ClusterBox& self, const Request& r, Int<int, arg::count> count, py::handle policy,
            bool all_or_nothing) {
           const ReplicaMode mode =
               all_or_nothing ? ReplicaMode::kAllOrNothing : ReplicaMode::kAsManyAsFit;
           auto placed = WithPolicy(self, policy, true, [&](Policy& pol) {
             return self.cluster.PlaceReplicas(r, count, pol, mode);
           });
           return BindAll(self, ValueOrThrow(std::move(placed)));
         },
         py::arg("request"), py::arg("count"), py::arg("policy") = "binpack",
         py::arg("all_or_nothing") = true,
         "Places `count` copies with ids '<id>-0' .. '<id>-<count-1>'. With "
         "all_or_nothing, all or none (InsufficientCapacityError); otherwise as many as "
         "fit, possibly none. Returns the placements.")
      .def(
          "capacity",
          [](ClusterBox& self, const Request& r, const std::string& policy,
             Int<int64_t, arg::limit> limit) {
            absl::StatusOr<int64_t> n;
            {
              Guard guard(self, true);
              n = self.cluster.Capacity(r, policy, limit);
            }
            return ValueOrThrow(std::move(n));
          },
          py::arg("request"), py::arg("policy") = "binpack", py::arg("limit") = int64_t{1} << 40,
          "How many more copies of `request` fit now, placed one after the other under the "
          "built-in policy `policy`; counts up to `limit`. Changes nothing.")
      .def(
          "nodes_needed",
          [](ClusterBox& self, const Request& r, Int<int64_t, arg::count> count, const Node& shape,
             const std::string& policy) {
            absl::StatusOr<int64_t> n;
            {
              Guard guard(self, true);
              n = self.cluster.NodesNeeded(r, count, shape, policy);
            }
            return ValueOrThrow(std::move(n));
          },
          py::arg("request"), py::arg("count"), py::arg("shape"), py::arg("policy") = "binpack",
          "How many nodes shaped like `shape` must be added so that `count` more copies "
          "fit (0 if they fit now). InsufficientCapacityError if even an empty node of "
          "that shape cannot host one copy.");

  // ---- Totals, snapshots, views ----
  cls.def(
         "usage",
         [](ClusterBox& self) { auto l = self.Lock(); return self.cluster.TotalUsage(); },
         "Totals over the cluster (a Usage).")
      .def(
          "check_invariants",
          [](ClusterBox& self) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.CheckInvariants());
          },
          "Recomputes every counter and checks capacities; raises gs.Error if broken.")
      .def(
          "to_json",
          [](ClusterBox& self, std::optional<Int<int, arg::indent>> indent) {
            Guard guard(self, true);
            return self.cluster.ToJson(indent.has_value() ? int{*indent} : -1);
          },
          py::arg("indent") = py::none(),
          "The whole state (options, nodes, health, placements) as a JSON string.")
      .def_static(
          "from_json",
          [](const std::string& json) {
            absl::StatusOr<Cluster> c;
            {
              py::gil_scoped_release release;
              c = Cluster::FromJson(json);
            }
            return std::make_shared<ClusterBox>(ValueOrThrow(std::move(c)));
          },
          py::arg("json"),
          "Rebuilds a cluster from to_json() output; InvalidArgumentError naming the "
          "bad field otherwise.")
      .def(
          "copy",
          [](ClusterBox& self) {
            auto l = self.Lock();
            return std::make_shared<ClusterBox>(self.cluster);
          },
          "An independent copy of the whole state (for what-if questions).")
      .def("__copy__", [](ClusterBox& self) {
        auto l = self.Lock();
        return std::make_shared<ClusterBox>(self.cluster);
      }, "An independent copy.")
      .def("__deepcopy__", [](ClusterBox& self, py::dict) {
        auto l = self.Lock();
        return std::make_shared<ClusterBox>(self.cluster);
      }, py::arg("memo"), "An independent copy.")
      .def(py::pickle(
          [](ClusterBox& self) {
            auto l = self.Lock();
            return py::make_tuple(self.cluster.ToJson());
          },
          [](py::tuple state) {
            return std::make_shared<ClusterBox>(
                ValueOrThrow(Cluster::FromJson(state[0].cast<std::string>())));
          }))
      .def(
          "inspect",
          [](ClusterBox& self, bool details, std::optional<std::string> node) {
            auto l = self.Lock();
            if (node.has_value()) return ValueOrThrow(InspectNode(self.cluster, *node));
            return details ? InspectDetails(self.cluster) : InspectTable(self.cluster);
          },
          py::arg("details") = false, py::arg("node") = py::none(),
          "The `kubectl inspect gpushare` table; with details=True, every request per "
          "node and GPU (`kubectl inspect gpushare -d`); with node=..., one node's details.")
      .def(
          "to_records",
          [](ClusterBox& self) {
            auto l = self.Lock();
            return ToRecords(self.cluster);
          },
          "One dict per GPU (node, address, gpu, model, uuid, healthy, schedulable, "
          "gpu_sharing, memory, memory_used, memory_free, compute_used, holders), in node "
          "order: pandas.DataFrame(cluster.to_records()) works directly.")
      .def("__repr__", [](ClusterBox& self) {
        auto l = self.Lock();
        const Usage u = self.cluster.TotalUsage();
        return absl::StrCat("<gpushare.Cluster memory_unit='",
                            MemoryUnitName(self.cluster.options().memory_unit),
                            "' nodes=", self.cluster.num_nodes(), " gpus=", u.gpus,
                            " gpu_memory_used=", u.gpu_memory_used, "/", u.gpu_memory,
                            " placements=", u.placements, ">");
      }, "A summary in angle brackets: a cluster's state is no constructor call "
         "(Cluster.from_json(c.to_json()) rebuilds it).");
}

}  // namespace gpushare::python
