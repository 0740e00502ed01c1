// ReadInt(): how every integer argument is read (see bindings.h).

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {
namespace {

// The value for a message: its digits, or its size when it is too long to
// show (Python refuses to print ints of more than 4300 digits).
std::string Shown(py::handle number) {
  const auto bits = number.attr("bit_length")().cast<uint64_t>();
  if (bits <= 128) return std::string(py::str(number));
  return absl::StrCat("(an integer of ", bits, " bits)");
}

[[noreturn]] void NotAnInt(py::handle src, const char* name) {
  throw py::type_error(absl::StrCat(
      name, " must be an int, not ",
      std::string(py::str(py::type::handle_of(src).attr("__name__")))));
}

template <typename T>
[[noreturn]] void OutOfRange(py::handle number, const char* name) {
  ThrowIfError(absl::InvalidArgumentError(
      absl::StrCat(name, " ", Shown(number), " is out of range [",
                   std::numeric_limits<T>::min(), ", ", std::numeric_limits<T>::max(), "]")));
  throw py::error_already_set();  // Not reached: ThrowIfError() raised.
}

// `number` (a Python int) as T.
template <typename T>
T FromPyLong(py::handle number, const char* name) {
  if constexpr (std::is_signed_v<T>) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
    if (v == -1 && overflow == 0 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow != 0 || v < std::numeric_limits<T>::min() ||
        v > std::numeric_limits<T>::max()) {
      OutOfRange<T>(number, name);
    }
    return static_cast<T>(v);
  } else {
    // Negative or too large: OverflowError.
    const unsigned long long v = PyLong_AsUnsignedLongLong(number.ptr());
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      OutOfRange<T>(number, name);
    }
    if (v > std::numeric_limits<T>::max()) OutOfRange<T>(number, name);
    return static_cast<T>(v);
  }
}

}  // namespace

template <typename T>
T ReadInt(py::handle src, const char* name) {
  PyObject* p = src.ptr();
  if (PyLong_CheckExact(p)) return FromPyLong<T>(src, name);  // The common case.
  // bool is an int subclass: True would be read as 1.
  if (PyBool_Check(p) || !PyIndex_Check(p)) NotAnInt(src, name);
  // An int subclass or an object with __index__ (numpy integers): what
  // operator.index() gives.
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(p));
  if (!number) {
    // A TypeError means "not an integer" (e.g. numpy.bool_); anything else is
    // a bug in __index__ and is raised as it is.
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    NotAnInt(src, name);
  }
  return FromPyLong<T>(number, name);
}

template int ReadInt<int>(py::handle, const char*);
template int64_t ReadInt<int64_t>(py::handle, const char*);
template uint64_t ReadInt<uint64_t>(py::handle, const char*);

}  // namespace gpushare::python
