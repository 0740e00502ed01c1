// A stand-in for the NVIDIA driver's libnvidia-ml.so.1 in tests: the NVML
// calls gpushare makes (device-plugin/nvml_abi.h), answered from a fixture
// file named by $GPUSHARE_NVML_FIXTURE, in the form of
// ../shared/nvml/h200-nvml.json (what NVML answered on a real H200): a JSON
// object with "driver_version" and "devices", each device with "uuid",
// "name", "memory" {"total"}, "pci" {"busId", ...}, "compute_capability"
// [major, minor], "mig_mode" [current, pending] and "numa_node". A value
// recorded as {"error": "NVMLError_NotSupported: ..."} makes its call return
// that error. Built as libnvidia-ml.so.1 in the test build only.
//
// Topology: a device's "common_ancestor" lists its nvmlGpuTopologyLevel_t
// to each device by index (absent: NotSupported); "nvlink" lists its links
// by number, each {"state": 0|1, "remote_bus_id": "..."} or an error (the
// H200 fixture records NotSupported); a link past the list is
// INVALID_ARGUMENT, as past the GPU's link count.
//
// Faults, injected while a program runs: $GPUSHARE_NVML_FAULTS names a JSON
// file, re-read on every memory query and event wait:
//   {"lost": [1], "events": [{"gpu": 0, "xid": 79}, {"gpu": 1, "dbe": true}]}
// A lost GPU answers NVML_ERROR_GPU_IS_LOST to nvmlDeviceGetMemoryInfo; each
// event is delivered once, in order, by nvmlEventSetWait_v2 to a set that
// registered its GPU (a wait without one sleeps up to 100 ms, then times out);
// an event {"unknown": true, "xid": 79} comes from a device NVML does not
// name. "event_wait_error": N makes every wait return NVML error N.
// A device's "events": {"registered": false} refuses every registration,
// {"ecc": false} one that asks for double-bit ECC events. "driver_reload": N
// stands for a driver reloaded N times: while N differs from its value at
// the last nvmlInit_v2, device calls and waits answer Uninitialized.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "device-plugin/nvml_abi.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

struct State {
  std::mutex mu;
  bool initialised = false;
  json fixture;
  std::vector<json> devices;
  size_t events_delivered = 0;
  unsigned long long registered = 0;  // Bit i: GPU i registered for events.
  int generation = 0;                 // "driver_reload" at the last nvmlInit_v2.
};

State& S() {
  static State* state = new State;
  return *state;
}

// The device a handle stands for: handles are 1-based indexes.
const json* DeviceOf(nvmlDevice_t handle) {
  const auto i = reinterpret_cast<uintptr_t>(handle);
  if (i == 0 || i > S().devices.size()) return nullptr;
  return &S().devices[i - 1];
}

// NVML's error for a fixture value recorded as {"error": "NVMLError_X: ..."}.
nvmlReturn_t RecordedError(const json& v) {
  if (!v.is_object() || !v.contains("error")) return NVML_SUCCESS;
  const std::string e = v["error"].get<std::string>();
  if (e.rfind("NVMLError_NotSupported", 0) == 0) return NVML_ERROR_NOT_SUPPORTED;
  if (e.rfind("NVMLError_GpuIsLost", 0) == 0) return NVML_ERROR_GPU_IS_LOST;
  if (e.rfind("NVMLError_NoPermission", 0) == 0) return NVML_ERROR_NO_PERMISSION;
  return NVML_ERROR_UNKNOWN;
}

// The faults file's content, {} when there is none.
json Faults() {
  const char* path = std::getenv("GPUSHARE_NVML_FAULTS");
  if (path == nullptr) return json::object();
  std::ifstream in(path);
  if (!in) return json::object();
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

// The driver was reloaded since nvmlInit_v2 (see the file comment).
bool Reloaded() { return Faults().value("driver_reload", 0) != S().generation; }

bool Lost(nvmlDevice_t handle) {
  const auto i = reinterpret_cast<uintptr_t>(handle) - 1;
  json faults = Faults();
  if (!faults.contains("lost")) return false;
  for (const json& g : faults["lost"]) {
    if (g.is_number_unsigned() && g.get<uintptr_t>() == i) return true;
  }
  return false;
}

nvmlReturn_t CopyString(const std::string& text, char* out, unsigned size) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (text.size() + 1 > size) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard lock(S().mu);
  const char* path = std::getenv("GPUSHARE_NVML_FIXTURE");
  if (path == nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::ifstream in(path);
  if (!in) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::stringstream text;
  text << in.rdbuf();
  S().fixture = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!S().fixture.is_object() || !S().fixture.contains("devices")) return NVML_ERROR_UNKNOWN;
  S().devices.assign(S().fixture["devices"].begin(), S().fixture["devices"].end());
  S().events_delivered = 0;
  S().registered = 0;
  S().generation = Faults().value("driver_reload", 0);
  S().initialised = true;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard lock(S().mu);
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  S().initialised = false;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* out,
                                                                            unsigned size) {
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  return CopyString(S().fixture.value("driver_version", ""), out, size);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned>(S().devices.size());
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(
    unsigned i, nvmlDevice_t* out) {
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  if (i >= S().devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *out = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(i) + 1);
  return NVML_SUCCESS;
}

#define GPUSHARE_DEVICE_OR_RETURN(d, handle)                        \
  const json* d = DeviceOf(handle);                                 \
  if (!S().initialised || Reloaded()) return NVML_ERROR_UNINITIALIZED; \
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char* out,
                                                                   unsigned size) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  return CopyString(d->value("uuid", ""), out, size);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char* out,
                                                                   unsigned size) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  return CopyString(d->value("name", ""), out, size);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h,
                                                                         nvmlMemory_t* out) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  const json& m = d->at("memory");
  if (nvmlReturn_t r = RecordedError(m); r != NVML_SUCCESS) return r;
  if (Lost(h)) return NVML_ERROR_GPU_IS_LOST;
  out->total = m.value("total", 0ull);
  out->free = m.value("free", 0ull);
  out->used = m.value("used", 0ull);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h,
                                                                         nvmlPciInfo_t* out) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  const json& p = d->at("pci");
  if (nvmlReturn_t r = RecordedError(p); r != NVML_SUCCESS) return r;
  *out = nvmlPciInfo_t{};
  const std::string bus = p.value("busId", "");
  std::strncpy(out->busId, bus.c_str(), sizeof out->busId - 1);
  out->domain = p.value("domain", 0u);
  out->bus = p.value("bus", 0u);
  out->device = p.value("device", 0u);
  out->pciDeviceId = p.value("pciDeviceId", 0u);
  out->pciSubSystemId = p.value("pciSubSystemId", 0u);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCudaComputeCapability(
    nvmlDevice_t h, int* major, int* minor) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  const json& c = d->at("compute_capability");
  if (nvmlReturn_t r = RecordedError(c); r != NVML_SUCCESS) return r;
  *major = c.at(0).get<int>();
  *minor = c.at(1).get<int>();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h,
                                                                      unsigned* current,
                                                                      unsigned* pending) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  if (!d->contains("mig_mode")) return NVML_ERROR_NOT_SUPPORTED;
  const json& m = d->at("mig_mode");
  if (nvmlReturn_t r = RecordedError(m); r != NVML_SUCCESS) return r;
  *current = m.at(0).get<unsigned>();
  *pending = m.at(1).get<unsigned>();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t h,
                                                                         unsigned* node) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  if (!d->contains("numa_node")) return NVML_ERROR_NOT_SUPPORTED;
  const json& n = d->at("numa_node");
  if (nvmlReturn_t r = RecordedError(n); r != NVML_SUCCESS) return r;
  *node = n.get<unsigned>();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h,
                                                                          unsigned* minor) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  if (!d->contains("minor_number")) return NVML_ERROR_NOT_SUPPORTED;
  const json& n = d->at("minor_number");
  if (nvmlReturn_t r = RecordedError(n); r != NVML_SUCCESS) return r;
  *minor = n.get<unsigned>();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(
    nvmlDevice_t h1, nvmlDevice_t h2, int* level) {
  GPUSHARE_DEVICE_OR_RETURN(d, h1);
  if (DeviceOf(h2) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d->contains("common_ancestor")) return NVML_ERROR_NOT_SUPPORTED;
  const json& levels = d->at("common_ancestor");
  if (nvmlReturn_t r = RecordedError(levels); r != NVML_SUCCESS) return r;
  *level = levels.at(reinterpret_cast<uintptr_t>(h2) - 1).get<int>();
  return NVML_SUCCESS;
}

// The recorded entry of NVLink `link`, or nullptr past the list.
const json* NvLinkOf(const json& device, unsigned link) {
  if (!device.contains("nvlink") || link >= device["nvlink"].size()) return nullptr;
  return &device["nvlink"][link];
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h,
                                                                          unsigned link,
                                                                          int* active) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  const json* l = NvLinkOf(*d, link);
  if (l == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const json& state = l->at("state");
  if (nvmlReturn_t r = RecordedError(state); r != NVML_SUCCESS) return r;
  *active = state.get<int>();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(
    nvmlDevice_t h, unsigned link, nvmlPciInfo_t* out) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  const json* l = NvLinkOf(*d, link);
  if (l == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *out = nvmlPciInfo_t{};
  const std::string bus = l->value("remote_bus_id", "");
  std::strncpy(out->busId, bus.c_str(), sizeof out->busId - 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  *set = reinterpret_cast<nvmlEventSet_t>(static_cast<uintptr_t>(1));
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t) {
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceRegisterEvents(
    nvmlDevice_t h, unsigned long long types, nvmlEventSet_t) {
  GPUSHARE_DEVICE_OR_RETURN(d, h);
  if (d->contains("events") && (*d)["events"].value("registered", true) == false) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (d->contains("events") && (*d)["events"].value("ecc", true) == false &&
      (types & nvmlEventTypeDoubleBitEccError) != 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if ((types & ~(nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError)) != 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard lock(S().mu);
  S().registered |= 1ull << (reinterpret_cast<uintptr_t>(h) - 1);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t,
                                                                     nvmlEventData_t* data,
                                                                     unsigned timeout_ms) {
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED;
  json faults = Faults();
  if (faults.value("driver_reload", 0) != S().generation) return NVML_ERROR_UNINITIALIZED;
  {
    std::lock_guard lock(S().mu);
    if (faults.contains("event_wait_error")) {
      return static_cast<nvmlReturn_t>(faults["event_wait_error"].get<int>());
    }
    if (faults.contains("events") && faults["events"].is_array()) {
      const json& events = faults["events"];
      while (S().events_delivered < events.size()) {
        const json& e = events[S().events_delivered++];
        if (e.value("unknown", false)) {
          *data = nvmlEventData_t{};
          data->device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(0xdead));
          data->eventType = nvmlEventTypeXidCriticalError;
          data->eventData = e.value("xid", 0ull);
          return NVML_SUCCESS;
        }
        const unsigned gpu = e.value("gpu", 0u);
        if (gpu >= S().devices.size() || !(S().registered & (1ull << gpu))) continue;
        *data = nvmlEventData_t{};
        data->device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(gpu) + 1);
        if (e.value("dbe", false)) {
          data->eventType = nvmlEventTypeDoubleBitEccError;
        } else {
          data->eventType = nvmlEventTypeXidCriticalError;
          data->eventData = e.value("xid", 0ull);
        }
        return NVML_SUCCESS;
      }
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms < 100 ? timeout_ms : 100));
  return NVML_ERROR_TIMEOUT;
}

}  // extern "C"
