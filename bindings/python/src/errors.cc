// The Python exception family and the one mapping from absl status codes.

#include <string>

#include "bindings.h"

namespace gpushare::python {
namespace {

struct Family {
  py::object error, invalid, not_found, conflict, exists, capacity;
};

Family& Exceptions() {
  static Family* family = new Family();
  return *family;
}

// Makes module.<name>, a subclass of `bases`, documented by `doc`.
py::object MakeException(py::module_& m, const char* name, const char* doc,
                         py::tuple bases) {
  const std::string qualified = std::string("gpushare.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  py::object cls = py::reinterpret_steal<py::object>(type);
  m.attr(name) = cls;
  return cls;
}

}  // namespace

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  const Family& f = Exceptions();
  py::object cls;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      cls = f.invalid;
      break;
    case absl::StatusCode::kNotFound:
      cls = f.not_found;
      break;
    case absl::StatusCode::kAlreadyExists:
      cls = f.exists;
      break;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      cls = f.conflict;
      break;
    case absl::StatusCode::kResourceExhausted:
      cls = f.capacity;
      break;
    default:
      cls = f.error;
  }
  py::object error = cls(std::string(status.message()));
  error.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

void RegisterErrors(py::module_& m) {
  Family& f = Exceptions();
  f.error = MakeException(
      m, "Error",
      "Base class of every error gpushare raises. `code` is the status code name, "
      "e.g. 'RESOURCE_EXHAUSTED'; str(e) is the message, naming the bad value.",
      py::make_tuple(py::handle(PyExc_Exception)));
  f.invalid = MakeException(
      m, "InvalidArgumentError",
      "Malformed input: a bad size, an unknown policy or memory unit, bad JSON. "
      "Also a ValueError.",
      py::make_tuple(f.error, py::handle(PyExc_ValueError)));
  f.not_found = MakeException(
      m, "NotFoundError", "An unknown node name or request id. Also a KeyError.",
      py::make_tuple(f.error, py::handle(PyExc_KeyError)));
  // KeyError's str() would quote the message; show it as it is.
  f.not_found.attr("__str__") = py::cpp_function(
      [](py::object self) -> py::str {
        py::tuple args = self.attr("args");
        return args.empty() ? py::str("") : py::str(args[0]);
      },
      py::name("__str__"), py::is_method(f.not_found));
  f.conflict = MakeException(
      m, "ConflictError",
      "The request contradicts the cluster's state: a stale plan that no longer fits, "
      "a double release, removing a node that still holds requests.",
      py::make_tuple(f.error));
  f.exists = MakeException(
      m, "AlreadyExistsError",
      "A duplicate node name or an id that is already placed. A ConflictError.",
      py::make_tuple(f.conflict));
  f.capacity = MakeException(
      m, "InsufficientCapacityError",
      "Nothing fits now: no node can host the request (the message gives reasons).",
      py::make_tuple(f.error));

  // For the tests of the mapping: raises what a C++ call failing with the
  // status code named `code` (e.g. 'NOT_FOUND') raises; nothing for 'OK'.
  m.def(
      "_raise_status",
      [](const std::string& code, const std::string& message) {
        for (int c = 0; c <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++c) {
          const auto status_code = static_cast<absl::StatusCode>(c);
          if (absl::StatusCodeToString(status_code) == code) {
            ThrowIfError(absl::Status(status_code, message));
            return;
          }
        }
        ThrowIfError(absl::InvalidArgumentError("unknown status code '" + code + "'"));
      },
      py::arg("code"), py::arg("message") = "",
      "Raises the exception of a failed call with status `code` (testing aid).");
}

}  // namespace gpushare::python
