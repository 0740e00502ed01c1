// Batch placement and the defragmentation planner: gs.BatchResult,
// gs.Migration, gs.MigrationPlan and the Cluster methods place_batch,
// plan_defragmentation, plan_free_gpus, plan_lower_fragmentation and
// apply_migrations.

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {
namespace {

using Box = std::shared_ptr<ClusterBox>;

// What place_batch() returns: the C++ result with placements bound to the
// cluster they are on.
struct PyBatchResult {
  py::list placements;
  int placed = 0;
  bool proven_optimal = false;
  std::string method;
};

std::vector<Request> ReadRequests(py::iterable requests) {
  std::vector<Request> out;
  for (py::handle h : requests) {
    if (!py::isinstance<Request>(h)) {
      throw py::type_error(absl::StrCat(
          "requests[", out.size(), "] must be a gpushare.Request, not ",
          std::string(py::str(py::type::handle_of(h).attr("__name__")))));
    }
    out.push_back(h.cast<const Request&>());
  }
  return out;
}

BoundPlacement Unbound(const Placement& p) { return BoundPlacement(p, {}); }

}  // namespace

void RegisterBatch(py::module_& m) {
  py::class_<PyBatchResult>(
      m, "BatchResult",
      "What Cluster.place_batch() did (made only by it). See the C++ Cluster::PlaceBatch for "
      "the methods and what is exact.")
      .def_property_readonly(
          "placements", [](const PyBatchResult& r) { return r.placements; },
          "One entry per request, in the order given: its Placement, or None.")
      .def_readonly("placed", &PyBatchResult::placed, "Number of requests placed.")
      .def_readonly("proven_optimal", &PyBatchResult::proven_optimal,
                    "No assignment of the batch places more requests.")
      .def_readonly("method", &PyBatchResult::method,
                    "'sequential', 'flow' or 'search': the method whose result was kept.")
      .def("__repr__", [](const PyBatchResult& r) {
        return absl::StrCat("BatchResult(placed=", r.placed, ", proven_optimal=",
                            r.proven_optimal ? "True" : "False", ", method='", r.method,
                            "')");
      }, "A summary: the count placed, whether it is proven optimal, the method.");

  py::class_<Migration>(m, "Migration",
                        "One move of a MigrationPlan: pod `pod.id` leaves `source` for "
                        "`target` (made only by plan_defragmentation()).")
      .def_readonly("pod", &Migration::pod,
                    "The moved pod as the planner understood it (shape, models, selector).")
      .def_property_readonly(
          "source", [](const Migration& mv) { return Unbound(mv.from); },
          "Where the pod is now.")
      .def_property_readonly(
          "target", [](const Migration& mv) { return Unbound(mv.to); },
          "Where the pod goes.")
      .def("__repr__", [](const Migration& mv) {
        return absl::StrCat("Migration(pod='", mv.pod.id, "', source='", mv.from.node,
                            "', target='", mv.to.node, "')");
      }, "A summary: the pod and the nodes it leaves and goes to.");

  py::class_<MigrationPlan>(
      m, "MigrationPlan",
      "What Cluster.plan_defragmentation() found; Cluster.apply_migrations() applies it.")
      .def_readonly("found", &MigrationPlan::found,
                    "The moves make the request fit (no moves: it fits now).")
      .def_readonly("proven", &MigrationPlan::proven,
                    "Exact: no shorter plan exists, or (not found) none within max_moves.")
      .def_readonly("moves", &MigrationPlan::moves, "The moves, in the order to apply them.")
      .def_property_readonly(
          "then",
          [](const MigrationPlan& p) -> std::optional<BoundPlacement> {
            if (!p.then.has_value()) return std::nullopt;
            return Unbound(*p.then);
          },
          "Where the request would go after the moves (binpack), or None.")
      .def_readonly("request", &MigrationPlan::request, "The request the plan is for.")
      .def_readonly("free_gpus_goal", &MigrationPlan::free_gpus_goal,
                    "Goal form (plan_free_gpus): the whole GPUs the moves free; else 0.")
      .def_readonly("fragmentation_before", &MigrationPlan::fragmentation_before,
                    "Goal form plan_lower_fragmentation: the measure now; else 0.")
      .def_readonly("fragmentation_after", &MigrationPlan::fragmentation_after,
                    "Goal form plan_lower_fragmentation: the measure after the moves; else 0.")
      .def_readonly("reason", &MigrationPlan::reason, "When not found: why.")
      .def("__repr__", [](const MigrationPlan& p) {
        return absl::StrCat("MigrationPlan(request='", p.request.id, "', found=",
                            p.found ? "True" : "False", ", proven=",
                            p.proven ? "True" : "False", ", moves=", p.moves.size(), ")");
      }, "A summary: the request, whether a plan was found and proven, the move count.");

  auto cls = py::reinterpret_borrow<py::class_<ClusterBox, Box>>(m.attr("Cluster"));
  cls.def(
         "place_batch",
         [](ClusterBox& self, py::iterable requests, py::handle policy, bool all_or_nothing,
            bool gang, Int<int64_t, arg::search_budget> search_budget) {
           const std::vector<Request> batch = ReadRequests(requests);
           BatchOptions options;
           options.all_or_nothing = all_or_nothing;
           options.gang_anti_sharing = gang;
           options.search_budget = search_budget;
           absl::StatusOr<BatchResult> r = WithPolicy(self, policy, true, [&](Policy& pol) {
             return self.cluster.PlaceBatch(batch, pol, options);
           });
           BatchResult result = ValueOrThrow(std::move(r));
           PyBatchResult out;
           for (std::optional<Placement>& p : result.placements) {
             out.placements.append(p.has_value()
                                       ? py::cast(BoundPlacement(*std::move(p),
                                                                 self.weak_from_this()))
                                       : py::none());
           }
           out.placed = result.placed;
           out.proven_optimal = result.proven_optimal;
           out.method = std::move(result.method);
           return out;
         },
         py::arg("requests"), py::arg("policy") = "binpack", py::arg("all_or_nothing") = false,
         py::arg("gang") = false, py::arg("search_budget") = 200000,
         "Places the requests at once, maximising the number placed; never fewer than "
         "place() one by one in the given order. With all_or_nothing, all or none "
         "(InsufficientCapacityError, nothing changed). With gang, no two of them share a "
         "GPU. search_budget bounds the exact search (then proven_optimal may be False). "
         "Raises, changing nothing, for an invalid, repeated or placed request.")
      .def(
          "plan_defragmentation",
          [](ClusterBox& self, const Request& request, Int<int, arg::max_moves> max_moves,
             std::optional<std::vector<Request>> movable,
             Int<int64_t, arg::search_budget> search_budget) {
            absl::StatusOr<MigrationPlan> plan;
            {
              Guard guard(self, true);
              plan = self.cluster.PlanMigrations(request, max_moves,
                                                 movable.value_or(std::vector<Request>{}),
                                                 search_budget);
            }
            return ValueOrThrow(std::move(plan));
          },
          py::arg("request"), py::arg("max_moves") = 1, py::arg("movable") = py::none(),
          py::arg("search_budget") = 200000,
          "The fewest moves of placed pods after which `request` fits, changing nothing. "
          "`movable`: the pods that may move, as submitted (their models and selector "
          "constrain the moves); None: every placed pod, kept to its GPU models and to "
          "nodes with all labels of its node. Returns a MigrationPlan (check .found).")
      .def(
          "plan_free_gpus",
          [](ClusterBox& self, Int<int64_t, arg::gpus> gpus, Int<int, arg::max_moves> max_moves,
             std::optional<std::vector<Request>> movable,
             Int<int64_t, arg::search_budget> search_budget) {
            absl::StatusOr<MigrationPlan> plan;
            {
              Guard guard(self, true);
              plan = self.cluster.PlanMigrationsToFreeGpus(
                  gpus, max_moves, movable.value_or(std::vector<Request>{}), search_budget);
            }
            return ValueOrThrow(std::move(plan));
          },
          py::arg("gpus"), py::arg("max_moves") = 1, py::arg("movable") = py::none(),
          py::arg("search_budget") = 200000,
          "The fewest moves after which at least `gpus` healthy GPUs on schedulable nodes "
          "hold nothing; like plan_defragmentation() otherwise.")
      .def(
          "plan_lower_fragmentation",
          [](ClusterBox& self, py::object target, Int<int, arg::max_moves> max_moves,
             const std::string& resource, double coverage,
             std::optional<std::vector<Request>> movable,
             Int<int64_t, arg::search_budget> search_budget) {
            const TargetWorkload t = TargetArg(target, ResourceArg(resource), coverage);
            absl::StatusOr<MigrationPlan> plan;
            {
              Guard guard(self, true);
              plan = self.cluster.PlanMigrationsToLowerFragmentation(
                  t, max_moves, movable.value_or(std::vector<Request>{}), search_budget);
            }
            return ValueOrThrow(std::move(plan));
          },
          py::arg("target"), py::arg("max_moves") = 1, py::arg("resource") = "compute",
          py::arg("coverage") = 0.95, py::arg("movable") = py::none(),
          py::arg("search_budget") = 200000,
          "The moves (at most max_moves) that lower gs.fragmentation(cluster, target)['amount'] "
          "the most, the fewest among equals; found when it drops. `target`, `resource` and "
          "`coverage` as in gs.fragmentation(); `movable` as in plan_defragmentation(). "
          "Exhaustive: proven unless search_budget ran out (then the best plan seen).")
      .def(
          "apply_migrations",
          [](ClusterBox& self, const MigrationPlan& plan) {
            auto l = self.Lock();
            ThrowIfError(self.cluster.ApplyMigrations(plan));
          },
          py::arg("plan"),
          "Applies a found plan's moves after checking that they all still hold; "
          "ConflictError (changing nothing) if one does not. Does not place the request.");
}

}  // namespace gpushare::python
