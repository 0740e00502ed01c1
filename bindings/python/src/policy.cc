// Policies: the built-in ones by name, and gs.Policy for policies written in
// Python.

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {
namespace {

const char* KindName(Demand::Kind kind) {
  switch (kind) {
    case Demand::Kind::kShared: return "shared";
    case Demand::Kind::kExclusive: return "exclusive";
    case Demand::Kind::kCpuOnly: break;
  }
  return "cpu_only";
}

Demand::Kind KindOf(const std::string& name) {
  if (name == "shared") return Demand::Kind::kShared;
  if (name == "exclusive") return Demand::Kind::kExclusive;
  if (name != "cpu_only") {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
        "unknown demand kind '", name, "'; known kinds: cpu_only, exclusive, shared")));
  }
  return Demand::Kind::kCpuOnly;
}

Score ToScore(py::handle h) {
  if (py::isinstance<Score>(h)) return h.cast<Score>();
  if (py::isinstance<py::int_>(h) || py::isinstance<py::float_>(h)) {
    return Score{h.cast<double>(), 0.0, 0.0};
  }
  std::vector<double> keys = h.cast<std::vector<double>>();
  if (keys.size() > 3) throw py::value_error("a score has at most 3 keys");
  keys.resize(3, 0.0);
  return Score{keys[0], keys[1], keys[2]};
}

}  // namespace

std::string PyPolicy::Name() const {
  py::gil_scoped_acquire gil;
  py::function override = py::get_override(static_cast<const Policy*>(this), "name");
  if (!override) return "python_policy";
  return override().cast<std::string>();
}

NodeChoice PyPolicy::Evaluate(const Demand& demand, const NodeStatus& node,
                              const std::vector<int>& fitting, const Cluster& /*cluster*/) {
  py::gil_scoped_acquire gil;
  NodeChoice choice;
  if (error_ == nullptr) {
    try {
      py::function override = py::get_override(static_cast<const Policy*>(this), "evaluate");
      if (!override) throw py::type_error("a gs.Policy subclass must define evaluate()");
      py::object result = override(demand, node, fitting);
      if (!py::isinstance<py::tuple>(result) || py::len(result) != 2) {
        throw py::type_error(absl::StrCat("evaluate() must return (score, gpus), not ",
                                          std::string(py::repr(result))));
      }
      py::tuple pair = py::reinterpret_borrow<py::tuple>(result);
      choice.score = ToScore(pair[0]);
      for (py::handle gpu : py::iter(pair[1])) {
        choice.gpus.push_back(ReadInt<int>(gpu, "an item of the gpus evaluate() returned"));
      }
      return choice;
    } catch (py::error_already_set& e) {
      error_ = std::make_unique<py::error_already_set>(std::move(e));
    } catch (const py::cast_error& e) {
      PyErr_SetString(PyExc_TypeError,
                      absl::StrCat("evaluate() must return (score, gpus): ", e.what()).c_str());
      error_ = std::make_unique<py::error_already_set>();
    } catch (const py::builtin_exception& e) {
      e.set_error();
      error_ = std::make_unique<py::error_already_set>();
    }
  }
  // An answer the cluster always rejects, so that the call fails and rolls back.
  choice.gpus.assign(static_cast<size_t>(demand.gpu_count) + 1, -1);
  return choice;
}

void PyPolicy::OnCommitted(const Placement& placement) {
  py::gil_scoped_acquire gil;
  if (error_ != nullptr) return;
  try {
    py::function override = py::get_override(static_cast<const Policy*>(this), "on_committed");
    if (override) override(BoundPlacement(placement, {}));
  } catch (py::error_already_set& e) {
    error_ = std::make_unique<py::error_already_set>(std::move(e));
  }
}

void PyPolicy::RethrowPolicyError() {
  if (error_ == nullptr) return;
  std::unique_ptr<py::error_already_set> error = std::move(error_);
  error->restore();
  throw py::error_already_set();
}

PolicyArg ToPolicyArg(py::handle policy) {
  PolicyArg arg;
  if (py::isinstance<py::str>(policy)) {
    arg.name = policy.cast<std::string>();
  } else if (py::isinstance<Policy>(policy)) {
    arg.object = policy.cast<Policy*>();
    arg.python = dynamic_cast<PyPolicy*>(arg.object);
  } else {
    throw py::type_error(absl::StrCat("policy must be a name or a gpushare.Policy, not ",
                                      std::string(py::str(py::type::handle_of(policy).attr(
                                          "__name__")))));
  }
  return arg;
}

void RegisterPolicy(py::module_& m) {
  py::class_<Score>(m, "Score",
                    "A node's score under a policy; compared lexicographically, higher wins.")
      .def(py::init([](double primary, double secondary, double tertiary, double topology) {
             return Score{primary, secondary, tertiary, topology};
           }),
           py::arg("primary") = 0.0, py::arg("secondary") = 0.0, py::arg("tertiary") = 0.0,
           py::arg("topology") = 0.0,
           "A score of up to three keys; unused keys stay 0. `topology` is set by the "
           "cluster, not by policies.")
      .def_readwrite("primary", &Score::primary, "The first key.")
      .def_readwrite("secondary", &Score::secondary, "The second key.")
      .def_readwrite("tertiary", &Score::tertiary, "The third key.")
      .def_readwrite("topology", &Score::topology,
                     "The connectivity key the cluster adds for multi-GPU requests on nodes "
                     "with a topology (0..1); compared after the three policy keys.")
      .def("__eq__", [](const Score& a, const Score& b) { return a == b; }, py::arg("other"),
           py::is_operator(), "Equal when all three keys are equal.")
      .def("__lt__", [](const Score& a, const Score& b) { return a < b; }, py::arg("other"),
           py::is_operator(), "Lexicographic: primary, then secondary, then tertiary, then topology.")
      .def("__repr__", &Repr<Score>, "A constructor call that makes an equal value.");

  py::class_<Demand>(m, "Demand",
                     "What a validated request needs from one node: the per-GPU shape "
                     "(made by Cluster.validate(), passed to Policy.evaluate()).")
      .def(py::init([](const std::string& kind, Int<int, arg::gpu_count> gpu_count,
                       Int<int64_t, arg::memory_per_gpu> memory_per_gpu,
                       Int<int64_t, arg::compute_per_gpu> compute_per_gpu,
                       Int<int64_t, arg::cpu> cpu, Int<int64_t, arg::host_memory> host_memory) {
             Demand d;
             d.kind = KindOf(kind);
             d.gpu_count = gpu_count;
             d.memory_per_gpu = memory_per_gpu;
             d.compute_per_gpu = compute_per_gpu;
             d.cpu = cpu;
             d.host_memory = host_memory;
             return d;
           }),
           py::kw_only(), py::arg("kind") = "cpu_only", py::arg("gpu_count") = 0,
           py::arg("memory_per_gpu") = 0, py::arg("compute_per_gpu") = 0, py::arg("cpu") = 0,
           py::arg("host_memory") = 0,
           "A demand by hand, e.g. to test a Policy's evaluate(); `kind` is 'shared', "
           "'exclusive' or 'cpu_only' (else InvalidArgumentError).")
      .def_property_readonly("kind", [](const Demand& d) { return KindName(d.kind); },
                             "'shared', 'exclusive' or 'cpu_only'.")
      .def_readonly("gpu_count", &Demand::gpu_count, "GPUs on one node; 0 for CPU-only.")
      .def_readonly("memory_per_gpu", &Demand::memory_per_gpu, "Memory units on each GPU.")
      .def_readonly("compute_per_gpu", &Demand::compute_per_gpu, "Thousandths on each GPU.")
      .def_readonly("cpu", &Demand::cpu, "Thousandths of a core.")
      .def_readonly("host_memory", &Demand::host_memory, "MiB.")
      .def("__repr__", [](const Demand& d) {
        return absl::StrCat("Demand(kind='", KindName(d.kind), "', gpu_count=", d.gpu_count,
                            ", memory_per_gpu=", d.memory_per_gpu, ", compute_per_gpu=",
                            d.compute_per_gpu, ", cpu=", d.cpu, ", host_memory=",
                            d.host_memory, ")");
      }, "A constructor call that makes an equal value.")
      .def("__eq__", [](const Demand& a, const Demand& b) {
        return a.kind == b.kind && a.gpu_count == b.gpu_count &&
               a.memory_per_gpu == b.memory_per_gpu && a.compute_per_gpu == b.compute_per_gpu &&
               a.cpu == b.cpu && a.host_memory == b.host_memory;
      }, py::arg("other"), py::is_operator(), "Equal when every field is equal.");

  py::class_<Policy, PyPolicy>(
      m, "Policy",
      "A placement policy. Built-in ones come from make_policy(); to write one, subclass "
      "it, call super().__init__(), and define evaluate(demand, node, fitting) returning "
      "(score, gpus): score a Score, a number or a tuple of up to 3 numbers (higher wins), gpus "
      "demand.gpu_count indices from `fitting` in ascending order. Optionally define "
      "name() and on_committed(placement). Policies must not change the cluster.")
      .def(py::init<>(), "For subclasses written in Python.")
      .def("name", &Policy::Name, "The stable lower_snake_case name, e.g. 'binpack'.")
      .def("__repr__", [](py::object self) -> std::string {
        // A built-in policy is remade by make_policy(name); one written in
        // Python by its class.
        Policy& p = self.cast<Policy&>();
        if (dynamic_cast<PyPolicy*>(&p) != nullptr) {
          return absl::StrCat(std::string(py::str(py::type::handle_of(self).attr("__name__"))),
                              "()");
        }
        return absl::StrCat("make_policy(", PyQuote(p.Name()), ")");
      }, "make_policy('<name>') for a built-in policy, '<Class>()' for one written in Python.");

  m.def("policy_names", &PolicyNames, "The names of the built-in policies, sorted.");
  m.def(
      "make_policy",
      [](const std::string& name, Int<uint64_t, arg::seed> seed, py::object target,
         const std::string& resource, double coverage) {
        PolicyOptions options;
        options.seed = seed;
        if (!target.is_none()) {
          options.fgd_target = std::make_shared<const TargetWorkload>(
              TargetArg(target, ResourceArg(resource), coverage));
        }
        return ValueOrThrow(MakePolicy(name, options));
      },
      py::arg("name"), py::arg("seed") = 42, py::arg("target") = py::none(),
      py::arg("resource") = "compute", py::arg("coverage") = 0.95,
      "Makes the built-in policy `name` (see policy_names()); `seed` is for randomised "
      "ones. `target` is the workload fgd, fgdcpu and fgdpack measure fragmentation\n"
      "against: a list of dicts like gs.typical_tasks() returns, or a workload (openb CSV\n"
      "path or list of gs.Request) whose typical tasks (`coverage`, on `resource`:\n"
      "'compute' or 'memory') are used; None: a single whole-GPU task. Raises\n"
      "InvalidArgumentError (a ValueError) for an unknown name or a bad target (an unknown\n"
      "key, a value out of range, a weight that is not positive), naming the task and\n"
      "value, e.g. 'tasks[2].weight: -1 is not a positive number'. A policy "
      "object keeps its state between calls; use one per thread.");
}

}  // namespace gpushare::python
