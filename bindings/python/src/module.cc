// gpushare._core: the compiled part of the `gpushare` Python package. Each
// area registers itself; the package gpushare/__init__.py re-exports it.

#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  namespace python = gpushare::python;
  m.doc() = "gpushare's C++ core (private: import gpushare instead).";
  python::RegisterErrors(m);
  python::RegisterTopology(m);  // Before RegisterTypes: Node takes a Topology.
  python::RegisterTypes(m);
  python::RegisterPolicy(m);
  python::RegisterCluster(m);
  python::RegisterInspect(m);  // After RegisterCluster: adds Cluster.device_view().
  python::RegisterSimulate(m);
  python::RegisterBatch(m);  // After RegisterCluster: adds Cluster methods.
}
