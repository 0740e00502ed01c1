// Internal to the Python extension gpushare._core: the Register<Area>()
// functions that PYBIND11_MODULE calls (one per area, each in its own .cc),
// the single place where absl::Status becomes a Python exception, and the
// objects shared between areas.
//
// To add an area (e.g. simulation): write bindings/python/src/simulate.cc with
// `void RegisterSimulate(py::module_& m)`, declare it below and call it from
// module.cc. Raise errors only through ThrowIfError().

#ifndef GPUSHARE_BINDINGS_PYTHON_SRC_BINDINGS_H_
#define GPUSHARE_BINDINGS_PYTHON_SRC_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/gpushare.h"

namespace gpushare::python {

namespace py = pybind11;

// ---- Areas -------------------------------------------------------------------

void RegisterErrors(py::module_& m);   // errors.cc: gs.Error and its family.
void RegisterTopology(py::module_& m);  // topology.cc: Topology.
void RegisterTypes(py::module_& m);    // types.cc: Gpu, Node, Request, ...
void RegisterPolicy(py::module_& m);   // policy.cc: Policy, Score, make_policy.
void RegisterCluster(py::module_& m);  // cluster.cc: Cluster.
void RegisterInspect(py::module_& m);  // inspect.cc: inspect views, DeviceView.
void RegisterSimulate(py::module_& m);  // simulate.cc: simulate, replay, openb loaders.
// batch.cc: BatchResult, Migration, MigrationPlan and the Cluster methods
// place_batch, plan_defragmentation, apply_migrations.
void RegisterBatch(py::module_& m);

// simulate.cc: resource="compute" | "memory"; a target workload given as a
// list of dicts like gs.typical_tasks() returns, or the typical tasks of a
// workload (requests or an openb task CSV path). Raise InvalidArgumentError.
FragResource ResourceArg(const std::string& resource);
TargetWorkload TargetArg(py::handle target, FragResource resource, double coverage);

// ---- Topology (topology.cc) ----------------------------------------------------

// The holder pybind11 keeps gs.Topology in (the object stays immutable).
std::shared_ptr<Topology> Mutable(const TopologyPtr& t);
// Request(topology=..., topology_objective=...): "none", "prefer" or a link
// name (required minimum); "weakest_link" or "total". Raises
// InvalidArgumentError for anything else.
TopologyNeed ParseTopologyNeed(const std::string& need, const std::string& objective);
std::string TopologyNeedName(const TopologyNeed& need);

// ---- Errors (errors.cc) --------------------------------------------------------

// Raises the Python exception for a non-OK `status` (throws
// py::error_already_set); does nothing for OK. The one mapping:
//   InvalidArgument, OutOfRange  -> gs.InvalidArgumentError (a ValueError)
//   NotFound                     -> gs.NotFoundError        (a KeyError)
//   AlreadyExists                -> gs.AlreadyExistsError   (a ConflictError)
//   FailedPrecondition, Aborted  -> gs.ConflictError
//   ResourceExhausted            -> gs.InsufficientCapacityError
//   anything else                -> gs.Error
// Every one of them is a gs.Error with `.code` set to the absl code name.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// ---- Integer arguments (ints.cc) ---------------------------------------------

// Reads an integer a user passed as argument `name`: a Python int or any
// object with __index__ (numpy integers), never a bool. Raises TypeError
// naming `name` for a bool or a non-integer, and InvalidArgumentError (a
// ValueError) naming `name`, the value and the range of T when it does not fit
// in T. Only the representable range is checked here; the library checks what
// the value means (e.g. sizes up to MAX_QUANTITY). T: int, int64_t, uint64_t.
template <typename T>
T ReadInt(py::handle src, const char* name);

// An integer parameter called `kName` (the name of its py::arg): declare a
// binding's parameter as Int<int64_t, arg::gpu_memory> instead of int64_t and
// pybind11 reads it with ReadInt(), so that every integer argument is checked
// the same way. The .pyi stubs still say `int`.
template <typename T, const char* kName>
struct Int {
  T value = 0;
  operator T() const { return value; }  // NOLINT: used where a T is expected.
};

// The names of integer parameters (see Int), one per spelling.
namespace arg {
#define GPUSHARE_PY_ARG(n) inline constexpr char n[] = #n
GPUSHARE_PY_ARG(arrived_pct);
GPUSHARE_PY_ARG(assume_time_ns);
GPUSHARE_PY_ARG(compute);
GPUSHARE_PY_ARG(compute_per_gpu);
GPUSHARE_PY_ARG(compute_used);
GPUSHARE_PY_ARG(count);
GPUSHARE_PY_ARG(cpu);
GPUSHARE_PY_ARG(cpu_used);
GPUSHARE_PY_ARG(gpu);
GPUSHARE_PY_ARG(gpu_count);
GPUSHARE_PY_ARG(gpu_memory);
GPUSHARE_PY_ARG(gpu_memory_used);
GPUSHARE_PY_ARG(gpus);
GPUSHARE_PY_ARG(holders);
GPUSHARE_PY_ARG(host_memory);
GPUSHARE_PY_ARG(host_memory_used);
GPUSHARE_PY_ARG(idle_gpus);
GPUSHARE_PY_ARG(indent);
GPUSHARE_PY_ARG(index);
GPUSHARE_PY_ARG(limit);
GPUSHARE_PY_ARG(max_moves);
GPUSHARE_PY_ARG(memory);
GPUSHARE_PY_ARG(memory_per_gpu);
GPUSHARE_PY_ARG(memory_used);
GPUSHARE_PY_ARG(migration_budget);
GPUSHARE_PY_ARG(placements);
GPUSHARE_PY_ARG(remembered_releases);
GPUSHARE_PY_ARG(search_budget);
GPUSHARE_PY_ARG(seed);
GPUSHARE_PY_ARG(threads);
GPUSHARE_PY_ARG(tie_break_seed);
GPUSHARE_PY_ARG(version);
GPUSHARE_PY_ARG(whole_gpus);
#undef GPUSHARE_PY_ARG
// An element of a list of GPU indices.
inline constexpr char gpus_item[] = "an item of gpus";
}  // namespace arg

// Defines the writable attribute `kName` of `cls`, read from and written to
// `field`; assignments are read with ReadInt() (a def_readwrite would take
// True as 1).
template <const char* kName, typename Class, typename C, typename T>
void IntAttribute(Class& cls, T C::*field, const char* doc) {
  using Self = typename Class::type;
  cls.def_property(
      kName, [field](const Self& self) { return self.*field; },
      [field](Self& self, Int<T, kName> value) { self.*field = value; }, doc);
}

// ---- Shared objects ------------------------------------------------------------

// What a Python gs.Cluster holds. Calls that release the GIL lock `mu` so that
// another Python thread cannot change the cluster under them; every call
// takes it through Lock().
struct ClusterBox : std::enable_shared_from_this<ClusterBox> {
  explicit ClusterBox(Cluster c) : cluster(std::move(c)) {}
  std::recursive_mutex mu;
  Cluster cluster;

  // Locks `mu` without ever blocking while holding the GIL.
  std::unique_lock<std::recursive_mutex> Lock();
};

// A placement as Python sees it: the C++ value plus the cluster it came
// from, which supplies the device-plugin view (`env`, `annotations`).
struct BoundPlacement : Placement {
  BoundPlacement() = default;
  BoundPlacement(Placement p, std::weak_ptr<ClusterBox> from)
      : Placement(std::move(p)), origin(std::move(from)) {}
  std::weak_ptr<ClusterBox> origin;
};

// The base of policies written in Python (subclasses of gs.Policy). An
// exception raised by the Python code is kept and the choice made invalid, so
// that the C++ call fails cleanly (and rolls back); the caller then re-raises
// it with RethrowPolicyError().
class PyPolicy : public Policy {
 public:
  std::string Name() const override;
  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster) override;
  void OnCommitted(const Placement& placement) override;

  // Re-raises the exception the Python code raised during the last call, if any.
  void RethrowPolicyError();

 private:
  std::unique_ptr<py::error_already_set> error_;
};

// The `policy=` argument of Cluster methods: a built-in policy's name or a
// gs.Policy object.
struct PolicyArg {
  std::string name;            // Set when a name was given.
  Policy* object = nullptr;    // Set when an object was given.
  PyPolicy* python = nullptr;  // Set when that object is written in Python.
  // Whether the call may run without the GIL.
  bool may_release_gil() const { return python == nullptr; }
};
PolicyArg ToPolicyArg(py::handle policy);

// Holds the cluster's lock, and releases the GIL for the duration when
// `release_gil` (the GIL comes back after the lock is given up).
class Guard {
 public:
  Guard(ClusterBox& box, bool release_gil) {
    if (release_gil) {
      release_.emplace();
      lock_ = std::unique_lock<std::recursive_mutex>(box.mu);
    } else {
      lock_ = box.Lock();
    }
  }

 private:
  std::optional<py::gil_scoped_release> release_;
  std::unique_lock<std::recursive_mutex> lock_;
};

// Runs `call(policy)` under the lock (without the GIL unless the policy is
// written in Python) and re-raises a Python policy's exception.
template <typename Call>
auto WithPolicy(ClusterBox& self, py::handle policy, bool release_gil, Call call) {
  PolicyArg arg = ToPolicyArg(policy);
  std::unique_ptr<Policy> owned;
  if (arg.object == nullptr) {
    owned = ValueOrThrow(MakePolicy(arg.name));
    arg.object = owned.get();
  }
  std::optional<decltype(call(*arg.object))> result;
  {
    Guard guard(self, release_gil && arg.may_release_gil());
    result.emplace(call(*arg.object));
  }
  if (arg.python != nullptr) arg.python->RethrowPolicyError();
  return *std::move(result);
}

// The device-plugin view of `p` on the cluster it came from (inspect.cc).
// Raises InvalidArgumentError for a placement made by hand (no cluster), and
// ConflictError once that cluster is gone.
DeviceView DeviceViewOf(const BoundPlacement& p, int64_t assume_time_ns);

// The repr of a value with a C++ operator<< (which prints constructor calls).
template <typename T>
std::string Repr(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// A Python string literal, e.g. 'T4'.
inline std::string PyQuote(const std::string& s) {
  return py::repr(py::str(s)).cast<std::string>();
}

}  // namespace gpushare::python

namespace pybind11::detail {

// Reads gpushare::python::Int parameters with ReadInt(); see there.
template <typename T, const char* kName>
struct type_caster<gpushare::python::Int<T, kName>> {
  using Value = gpushare::python::Int<T, kName>;
  PYBIND11_TYPE_CASTER(Value, const_name("int"));

  bool load(handle src, bool /*convert*/) {
    value.value = gpushare::python::ReadInt<T>(src, kName);
    return true;
  }

  static handle cast(const Value& src, return_value_policy, handle) {
    return make_caster<T>::cast(src.value, return_value_policy::copy, handle());
  }
};

}  // namespace pybind11::detail

#endif  // GPUSHARE_BINDINGS_PYTHON_SRC_BINDINGS_H_
