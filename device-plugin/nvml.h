// File: device-plugin/nvml.h
// -----------------------------------------------------------------------------
// What gpushare-device-plugin reads of a node's GPUs, through NVML loaded at
// run time: dlopen("libnvidia-ml.so.1"), so the program has no link-time
// dependency on the driver and starts (with a clear message) on a node
// without one.
//
//   absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load();
//   if (!nvml.ok()) { ... nvml.status().message() says what is missing ... }
//   absl::StatusOr<std::vector<GpuInfo>> gpus = (*nvml)->Devices();
//
// Only the calls below are used, each looked up by name; a driver that lacks
// one of the required calls is "too old", named in the error. Optional facts
// (NUMA node, MIG mode) that a GPU or driver does not support are left at
// their "unknown" values, not errors, as NVML reports them NotSupported on
// many real machines (the H200 fixture of ../shared/nvml/ has no NUMA node).
//
// Not thread-safe: one Nvml per program, used from one thread at a time.

#ifndef GPUSHARE_DEVICE_PLUGIN_NVML_H_
#define GPUSHARE_DEVICE_PLUGIN_NVML_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/topology.h"

namespace gpushare::deviceplugin {

// One GPU as NVML describes it.
struct GpuInfo {
  int index = 0;                 // NVML's index (nvidia-smi's order).
  std::string uuid;              // "GPU-73009919-..."
  std::string name;              // "NVIDIA H200": the model.
  uint64_t memory_bytes = 0;     // Total memory (nvmlDeviceGetMemoryInfo).
  std::string pci_bus_id;        // "00000000:00:06.0"
  int numa_node = -1;            // -1: unknown (not supported).
  int compute_major = 0, compute_minor = 0;
  bool mig_enabled = false;      // MIG mode now (false when unsupported).
  int minor_number = -1;         // Of /dev/nvidia<minor>; -1: unknown.
};

// A critical event of one GPU (nvmlEventSetWait).
struct GpuEvent {
  int gpu = 0;            // Its index; -1: a GPU NVML did not name.
  bool double_bit_ecc = false;  // Else a critical XID:
  unsigned long long xid = 0;
};

class Nvml {
 public:
  // Loads `library` (a file name searched as dlopen searches, or a path) and
  // initialises NVML. Errors: NotFound when the library is absent (no NVIDIA
  // driver on this node); FailedPrecondition when a required call is missing
  // (a driver too old) or nvmlInit fails, with NVML's own message.
  static absl::StatusOr<std::unique_ptr<Nvml>> Load(
      const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();  // nvmlShutdown, then dlclose.
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Every GPU, by index. Errors name the GPU and the call that failed.
  absl::StatusOr<std::vector<GpuInfo>> Devices() const;
  // "580.159.04"
  absl::StatusOr<std::string> DriverVersion() const;

  // How the GPUs of `gpus` (from Devices()) are linked, as `nvidia-smi topo
  // -m` reports it: NV# where GPUs share # active NVLinks (directly, or
  // through NVSwitches: then the smaller of the two GPUs' switch link
  // counts), else the PCIe common ancestor (PIX, PXB, PHB, NODE, SYS; GPUs
  // on one board count as PIX), with each GPU's NUMA node. Errors:
  // Unimplemented when the driver cannot tell the common ancestor (no
  // topology is published then), others naming the GPUs and the call.
  absl::StatusOr<TopologyPtr> Topology(const std::vector<GpuInfo>& gpus) const;

  // Whether GPU `index` still answers (its memory information): OK, or
  // Unavailable with NVML's message ("GPU is lost").
  absl::Status Probe(int index) const;
  // Registers for critical XID and double-bit ECC events on each GPU, each
  // with the types it supports (a GPU without ECC still reports XIDs).
  // Returns the GPUs (by index) that report no event at all, and why:
  // their health rests on Probe(); the others' does not depend on them.
  // Errors: Unimplemented when the driver lacks the event calls.
  absl::StatusOr<std::map<int, std::string>> WatchEvents();
  // After the driver was reloaded (NVML answers Uninitialized, its handles
  // are stale): shuts NVML down and initialises it again, and registers for
  // events again if they were watched (returning what WatchEvents() does).
  // Errors: FailedPrecondition with NVML's message when it cannot start.
  absl::StatusOr<std::map<int, std::string>> Reinit();
  // The events that arrive within `timeout_ms` (at most one wait; empty on
  // a timeout). An event of a device NVML does not name, or that is not one
  // of Devices(), has gpu -1. Errors: FailedPrecondition before
  // WatchEvents(); Unavailable with NVML's message when the wait fails.
  absl::StatusOr<std::vector<GpuEvent>> WaitEvents(unsigned timeout_ms);

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_NVML_H_
