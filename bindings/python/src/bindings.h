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

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/gpushare.h"

namespace gpushare::python {

namespace py = pybind11;

// ---- Areas -------------------------------------------------------------------

void RegisterErrors(py::module_& m);   // errors.cc: gs.Error and its family.
void RegisterTypes(py::module_& m);    // types.cc: Gpu, Node, Request, ...
void RegisterPolicy(py::module_& m);   // policy.cc: Policy, Score, make_policy.
void RegisterCluster(py::module_& m);  // cluster.cc: Cluster.
void RegisterInspect(py::module_& m);  // inspect.cc: inspect views, DeviceView.
void RegisterSimulate(py::module_& m);  // simulate.cc: simulate, replay, openb loaders.

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

#endif  // GPUSHARE_BINDINGS_PYTHON_SRC_BINDINGS_H_
