// The device-plugin view of placements (DeviceView, Cluster.device_view()).
// The inspect tables are Cluster.inspect() (cluster.cc).

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace gpushare::python {

DeviceView DeviceViewOf(const BoundPlacement& p, int64_t assume_time_ns) {
  if (p.origin.expired()) {
    // A weak_ptr that never pointed anywhere and one whose cluster is gone
    // look alike; the owner_before() test tells them apart.
    const bool never_bound = !p.origin.owner_before(std::weak_ptr<ClusterBox>()) &&
                             !std::weak_ptr<ClusterBox>().owner_before(p.origin);
    ThrowIfError(never_bound
                     ? absl::InvalidArgumentError(absl::StrCat(
                           "placement of '", p.request_id,
                           "' was not made by a cluster; use Cluster.device_view()"))
                     : absl::FailedPreconditionError(absl::StrCat(
                           "the cluster that placed '", p.request_id, "' no longer exists")));
  }
  std::shared_ptr<ClusterBox> box = p.origin.lock();
  auto lock = box->Lock();
  return ValueOrThrow(MakeDeviceView(box->cluster, p, assume_time_ns));
}

void RegisterInspect(py::module_& m) {
  py::class_<DeviceView>(m, "DeviceView",
                         "The pod annotations and container environment of a placement, "
                         "with the names of the GPU-sharing device plugin.")
      .def(py::init([](std::map<std::string, std::string> annotations,
                       std::map<std::string, std::string> env) {
             return DeviceView{std::move(annotations), std::move(env)};
           }),
           py::arg("annotations") = std::map<std::string, std::string>{},
           py::arg("env") = std::map<std::string, std::string>{},
           "A view by hand (normally made by Cluster.device_view()).")
      .def_readonly("annotations", &DeviceView::annotations,
                    "Pod annotations (dict of str): ALIYUN_COM_GPU_MEM_IDX, _POD, _DEV, "
                    "_ASSIGNED, _ASSUME_TIME and scheduler.framework.gpushare.allocation.")
      .def_readonly("env", &DeviceView::env,
                    "Container environment (dict of str): NVIDIA_VISIBLE_DEVICES, "
                    "ALIYUN_COM_GPU_MEM_CONTAINER, _DEV, _IDX, _POD.")
      .def("__repr__", [](const DeviceView& v) {
        return absl::StrCat("DeviceView(annotations=", std::string(py::repr(py::cast(v.annotations))),
                            ", env=", std::string(py::repr(py::cast(v.env))), ")");
      }, "A constructor call that makes an equal value.")
      .def("__eq__", [](const DeviceView& a, const DeviceView& b) {
        return a.annotations == b.annotations && a.env == b.env;
      }, py::arg("other"), py::is_operator(), "Equal when both dicts are equal.");

  py::object cluster = m.attr("Cluster");
  py::reinterpret_borrow<py::class_<ClusterBox, std::shared_ptr<ClusterBox>>>(cluster).def(
      "device_view",
      [](ClusterBox& self, const BoundPlacement& p,
         Int<int64_t, arg::assume_time_ns> assume_time_ns) {
        auto lock = self.Lock();
        return ValueOrThrow(MakeDeviceView(self.cluster, p, assume_time_ns));
      },
      py::arg("placement"), py::arg("assume_time_ns") = 0,
      "The annotations and environment of `placement` on this cluster (which supplies GPU "
      "sizes and UUIDs). `assume_time_ns` is the bind time in Unix ns, 0 = now. Raises "
      "NotFoundError for an unknown node, InvalidArgumentError for a bad GPU index.");
}

}  // namespace gpushare::python
