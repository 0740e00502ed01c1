// Nvml: NVML through dlopen (see nvml.h).

#include "device-plugin/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device-plugin/nvml_abi.h"

namespace gpushare::deviceplugin {

struct Nvml::Api {
  void* handle = nullptr;
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn by_index = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  nvmlDeviceGetPciInfo_v3_fn pci = nullptr;
  nvmlDeviceGetCudaComputeCapability_fn compute = nullptr;
  // Optional: absent in older drivers.
  nvmlDeviceGetMigMode_fn mig = nullptr;
  nvmlDeviceGetNumaNodeId_fn numa = nullptr;
  nvmlDeviceGetMinorNumber_fn minor = nullptr;
  nvmlDeviceGetTopologyCommonAncestor_fn common_ancestor = nullptr;
  nvmlDeviceGetNvLinkState_fn nvlink_state = nullptr;
  nvmlDeviceGetNvLinkRemotePciInfo_v2_fn nvlink_remote = nullptr;
  nvmlEventSetCreate_fn event_set_create = nullptr;
  nvmlEventSetFree_fn event_set_free = nullptr;
  nvmlDeviceRegisterEvents_fn register_events = nullptr;
  nvmlEventSetWait_v2_fn event_wait = nullptr;
  nvmlEventSet_t events = nullptr;
  std::vector<nvmlDevice_t> watched;  // By GPU index.

  std::string Error(nvmlReturn_t r) const {
    const char* text = error_string ? error_string(r) : nullptr;
    return text ? std::string(text) : absl::StrCat("NVML error ", r);
  }
};

namespace {

// Looks `name` up; false when the library lacks it.
template <class Fn>
bool Find(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load ", library, " (", why ? why : "?",
                                            "): is the NVIDIA driver installed on this node?"));
  }
  // The handle is closed by ~Nvml() once an Nvml owns it; until then, here.
  struct Closer {
    Api* api;
    ~Closer() {
      if (api) dlclose(api->handle);
    }
  } closer{api.get()};
  const char* missing = nullptr;  // The first required call the library lacks.
  auto need = [&](const char* name, auto* slot) {
    if (missing == nullptr && !Find(api->handle, name, slot)) missing = name;
  };
  need("nvmlInit_v2", &api->init);
  need("nvmlShutdown", &api->shutdown);
  need("nvmlErrorString", &api->error_string);
  need("nvmlSystemGetDriverVersion", &api->driver_version);
  need("nvmlDeviceGetCount_v2", &api->count);
  need("nvmlDeviceGetHandleByIndex_v2", &api->by_index);
  need("nvmlDeviceGetUUID", &api->uuid);
  need("nvmlDeviceGetName", &api->name);
  need("nvmlDeviceGetMemoryInfo", &api->memory);
  need("nvmlDeviceGetPciInfo_v3", &api->pci);
  need("nvmlDeviceGetCudaComputeCapability", &api->compute);
  if (missing != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        library, " has no ", missing, ": the NVIDIA driver is too old for gpushare-device-plugin"));
  }
  Find(api->handle, "nvmlDeviceGetMigMode", &api->mig);
  Find(api->handle, "nvmlDeviceGetNumaNodeId", &api->numa);
  Find(api->handle, "nvmlDeviceGetMinorNumber", &api->minor);
  Find(api->handle, "nvmlDeviceGetTopologyCommonAncestor", &api->common_ancestor);
  Find(api->handle, "nvmlDeviceGetNvLinkState", &api->nvlink_state);
  Find(api->handle, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api->nvlink_remote);
  Find(api->handle, "nvmlEventSetCreate", &api->event_set_create);
  Find(api->handle, "nvmlEventSetFree", &api->event_set_free);
  Find(api->handle, "nvmlDeviceRegisterEvents", &api->register_events);
  Find(api->handle, "nvmlEventSetWait_v2", &api->event_wait);
  if (const nvmlReturn_t r = api->init(); r != NVML_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("nvmlInit_v2 failed: ", api->Error(r)));
  }
  closer.api = nullptr;
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  if (api_->events != nullptr && api_->event_set_free != nullptr) api_->event_set_free(api_->events);
  api_->shutdown();
  dlclose(api_->handle);
}

absl::StatusOr<std::string> Nvml::DriverVersion() const {
  char buffer[kNvmlDriverVersionBufferSize] = {};
  if (const nvmlReturn_t r = api_->driver_version(buffer, sizeof buffer); r != NVML_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvmlSystemGetDriverVersion: ", api_->Error(r)));
  }
  return std::string(buffer);
}

absl::StatusOr<std::vector<GpuInfo>> Nvml::Devices() const {
  unsigned count = 0;
  if (const nvmlReturn_t r = api_->count(&count); r != NVML_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvmlDeviceGetCount_v2: ", api_->Error(r)));
  }
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < count; ++i) {
    auto failed = [&](const char* call, nvmlReturn_t r) {
      return absl::InternalError(absl::StrCat("GPU ", i, ": ", call, ": ", api_->Error(r)));
    };
    nvmlDevice_t device = nullptr;
    if (nvmlReturn_t r = api_->by_index(i, &device); r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetHandleByIndex_v2", r);
    }
    GpuInfo g;
    g.index = static_cast<int>(i);
    char text[kNvmlUuidBufferSize] = {};
    if (nvmlReturn_t r = api_->uuid(device, text, sizeof text); r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetUUID", r);
    }
    g.uuid = text;
    char name[kNvmlNameBufferSize] = {};
    if (nvmlReturn_t r = api_->name(device, name, sizeof name); r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetName", r);
    }
    g.name = name;
    nvmlMemory_t memory{};
    if (nvmlReturn_t r = api_->memory(device, &memory); r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetMemoryInfo", r);
    }
    g.memory_bytes = memory.total;
    nvmlPciInfo_t pci{};
    if (nvmlReturn_t r = api_->pci(device, &pci); r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetPciInfo_v3", r);
    }
    g.pci_bus_id = std::string(pci.busId, strnlen(pci.busId, sizeof pci.busId));
    if (nvmlReturn_t r = api_->compute(device, &g.compute_major, &g.compute_minor);
        r != NVML_SUCCESS) {
      return failed("nvmlDeviceGetCudaComputeCapability", r);
    }
    if (api_->mig != nullptr) {
      unsigned current = 0, pending = 0;
      const nvmlReturn_t r = api_->mig(device, &current, &pending);
      if (r == NVML_SUCCESS) {
        g.mig_enabled = current != 0;
      } else if (r != NVML_ERROR_NOT_SUPPORTED) {
        return failed("nvmlDeviceGetMigMode", r);
      }
    }
    if (api_->minor != nullptr) {
      unsigned minor = 0;
      if (api_->minor(device, &minor) == NVML_SUCCESS) g.minor_number = static_cast<int>(minor);
    }
    if (api_->numa != nullptr) {
      unsigned node = 0;
      const nvmlReturn_t r = api_->numa(device, &node);
      if (r == NVML_SUCCESS) {
        g.numa_node = static_cast<int>(node);
      } else if (r != NVML_ERROR_NOT_SUPPORTED) {
        return failed("nvmlDeviceGetNumaNodeId", r);
      }
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

namespace {

// "00000000:07:00.0" and "0000:07:00.0" name the same device: compare the
// bus, device and function with the domain as a number, case-insensitively.
std::string CanonicalBusId(std::string_view id) {
  const size_t colon = id.find(':');
  std::string out;
  if (colon != std::string_view::npos) {
    unsigned long domain = std::strtoul(std::string(id.substr(0, colon)).c_str(), nullptr, 16);
    out = absl::StrCat(absl::Hex(domain), ":");
    id.remove_prefix(colon + 1);
  }
  for (char c : id) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

absl::StatusOr<TopologyPtr> Nvml::Topology(const std::vector<GpuInfo>& gpus) const {
  const int n = static_cast<int>(gpus.size());
  if (n == 0) return absl::InvalidArgumentError("no GPU");
  std::vector<nvmlDevice_t> devices(n);
  for (int i = 0; i < n; ++i) {
    if (nvmlReturn_t r = api_->by_index(static_cast<unsigned>(gpus[i].index), &devices[i]);
        r != NVML_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("GPU ", gpus[i].index, ": nvmlDeviceGetHandleByIndex_v2: ", api_->Error(r)));
    }
  }
  // Active NVLinks: to another GPU (by its PCI bus id), or to a switch.
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> to_switch(n, 0);
  if (api_->nvlink_state != nullptr && api_->nvlink_remote != nullptr) {
    for (int i = 0; i < n; ++i) {
      for (unsigned link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
        int active = 0;
        const nvmlReturn_t r = api_->nvlink_state(devices[i], link, &active);
        if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT) break;
        if (r != NVML_SUCCESS) {
          return absl::InternalError(absl::StrCat("GPU ", gpus[i].index, " NVLink ", link,
                                                  ": nvmlDeviceGetNvLinkState: ", api_->Error(r)));
        }
        if (!active) continue;
        nvmlPciInfo_t remote{};
        if (nvmlReturn_t rr = api_->nvlink_remote(devices[i], link, &remote); rr != NVML_SUCCESS) {
          return absl::InternalError(absl::StrCat("GPU ", gpus[i].index, " NVLink ", link,
                                                  ": nvmlDeviceGetNvLinkRemotePciInfo_v2: ",
                                                  api_->Error(rr)));
        }
        const std::string peer = CanonicalBusId(
            std::string_view(remote.busId, strnlen(remote.busId, sizeof remote.busId)));
        int j = -1;
        for (int k = 0; k < n; ++k) {
          if (k != i && CanonicalBusId(gpus[k].pci_bus_id) == peer) j = k;
        }
        if (j >= 0) {
          ++direct[i][j];
        } else {
          ++to_switch[i];
        }
      }
    }
  }
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      Link link;
      const int nv = std::max(direct[i][j], direct[j][i]) + std::min(to_switch[i], to_switch[j]);
      if (nv > 0) {
        link = {LinkKind::kNvLink, nv};
      } else {
        if (api_->common_ancestor == nullptr) {
          return absl::UnimplementedError("this NVML has no nvmlDeviceGetTopologyCommonAncestor");
        }
        int level = 0;
        if (nvmlReturn_t r = api_->common_ancestor(devices[i], devices[j], &level);
            r != NVML_SUCCESS) {
          const std::string why = absl::StrCat("GPUs ", gpus[i].index, " and ", gpus[j].index,
                                               ": nvmlDeviceGetTopologyCommonAncestor: ",
                                               api_->Error(r));
          return r == NVML_ERROR_NOT_SUPPORTED ? absl::UnimplementedError(why)
                                               : absl::InternalError(why);
        }
        link.kind = level <= NVML_TOPOLOGY_SINGLE     ? LinkKind::kPix
                    : level <= NVML_TOPOLOGY_MULTIPLE ? LinkKind::kPxb
                    : level <= NVML_TOPOLOGY_HOSTBRIDGE ? LinkKind::kPhb
                    : level <= NVML_TOPOLOGY_NODE     ? LinkKind::kNode
                                                      : LinkKind::kSys;
      }
      links[i][j] = links[j][i] = link;
    }
  }
  std::vector<int> numa;
  for (const GpuInfo& g : gpus) numa.push_back(g.numa_node);
  return Topology::Make(links, numa);
}

absl::Status Nvml::Probe(int index) const {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = api_->by_index(static_cast<unsigned>(index), &device);
  if (r == NVML_SUCCESS) {
    nvmlMemory_t memory{};
    r = api_->memory(device, &memory);
  }
  if (r == NVML_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("GPU ", index, ": ", api_->Error(r)));
}

absl::StatusOr<std::map<int, std::string>> Nvml::WatchEvents() {
  if (api_->event_set_create == nullptr || api_->register_events == nullptr ||
      api_->event_wait == nullptr) {
    return absl::UnimplementedError("this NVML has no event calls");
  }
  if (api_->events == nullptr) {
    if (nvmlReturn_t r = api_->event_set_create(&api_->events); r != NVML_SUCCESS) {
      api_->events = nullptr;
      return absl::UnimplementedError(absl::StrCat("nvmlEventSetCreate: ", api_->Error(r)));
    }
  }
  unsigned count = 0;
  if (nvmlReturn_t r = api_->count(&count); r != NVML_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvmlDeviceGetCount_v2: ", api_->Error(r)));
  }
  std::map<int, std::string> unwatched;
  api_->watched.clear();
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlReturn_t r = api_->by_index(i, &device);
    api_->watched.push_back(r == NVML_SUCCESS ? device : nullptr);
    if (r != NVML_SUCCESS) {
      unwatched[static_cast<int>(i)] = absl::StrCat("nvmlDeviceGetHandleByIndex: ", api_->Error(r));
      continue;
    }
    // Both types, else each alone: a GPU without ECC reports XIDs all the same.
    std::string why;
    bool any = false;
    constexpr unsigned long long kXid = nvmlEventTypeXidCriticalError;
    constexpr unsigned long long kEcc = nvmlEventTypeDoubleBitEccError;
    for (unsigned long long types : {kXid | kEcc, kXid, kEcc}) {
      r = api_->register_events(device, types, api_->events);
      if (r == NVML_SUCCESS) {
        any = true;
        if (types != kXid) break;  // Both, or ECC after XID.
        continue;
      }
      if (why.empty()) why = absl::StrCat("nvmlDeviceRegisterEvents: ", api_->Error(r));
      if (types == kEcc) break;
    }
    if (!any) unwatched[static_cast<int>(i)] = why;
  }
  return unwatched;
}

absl::StatusOr<std::map<int, std::string>> Nvml::Reinit() {
  const bool watched = api_->events != nullptr;
  if (watched && api_->event_set_free != nullptr) api_->event_set_free(api_->events);
  api_->events = nullptr;
  api_->watched.clear();
  api_->shutdown();
  if (nvmlReturn_t r = api_->init(); r != NVML_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat("nvmlInit_v2: ", api_->Error(r)));
  }
  if (!watched) return std::map<int, std::string>();
  return WatchEvents();
}

absl::StatusOr<std::vector<GpuEvent>> Nvml::WaitEvents(unsigned timeout_ms) {
  std::vector<GpuEvent> events;
  if (api_->events == nullptr) return absl::FailedPreconditionError("WatchEvents() first");
  nvmlEventData_t data{};
  const nvmlReturn_t r = api_->event_wait(api_->events, &data, timeout_ms);
  if (r == NVML_ERROR_TIMEOUT) return events;
  if (r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlEventSetWait_v2: ", api_->Error(r)));
  }
  GpuEvent e;
  e.gpu = -1;
  for (size_t i = 0; i < api_->watched.size() && data.device != nullptr; ++i) {
    if (api_->watched[i] == data.device) e.gpu = static_cast<int>(i);
  }
  e.double_bit_ecc = (data.eventType & nvmlEventTypeDoubleBitEccError) != 0;
  e.xid = data.eventData;
  events.push_back(e);
  return events;
}

}  // namespace gpushare::deviceplugin
