// A stand-in for the NVIDIA driver's libnvidia-ml.so.1 in tests: the NVML
// calls gpushare makes (device-plugin/nvml_abi.h), answered from a fixture
// file named by $GPUSHARE_NVML_FIXTURE, in the form of
// ../shared/nvml/h200-nvml.json (what NVML answered on a real H200): a JSON
// object with "driver_version" and "devices", each device with "uuid",
// "name", "memory" {"total"}, "pci" {"busId", ...}, "compute_capability"
// [major, minor], "mig_mode" [current, pending] and "numa_node". A value
// recorded as {"error": "NVMLError_NotSupported: ..."} makes its call return
// that error. Built as libnvidia-ml.so.1 in the test build only.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
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

#define GPUSHARE_DEVICE_OR_RETURN(d, handle)           \
  const json* d = DeviceOf(handle);                    \
  if (!S().initialised) return NVML_ERROR_UNINITIALIZED; \
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

}  // extern "C"
