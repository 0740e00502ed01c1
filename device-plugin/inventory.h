// File: device-plugin/inventory.h
// -----------------------------------------------------------------------------
// What gpushare-device-plugin advertises to the kubelet, made from the GPUs
// NVML reports (nvml.h):
//
//   aliyun.com/gpu-mem    one device per memory unit of each GPU, so a node
//                         with a 10 GiB and a 20 GiB GPU offers 30 units;
//                         ids "<uuid>-mem-<k>", k = 0 .. units-1
//   aliyun.com/gpu-count  one device per GPU (id: its UUID), so the Node's
//                         capacity counts its GPUs as the extender reads it
//   nvidia.com/gpu        one device per GPU (id: its UUID), for exclusive
//                         pods; optional (PluginOptions::exclusive_resource)
//
//   absl::StatusOr<Inventory> inventory = MakeInventory(gpus, MemoryUnit::kGiB);
//   inventory->units(0);                        // 140 for an H200
//   inventory->GpuOfDevice("GPU-7300...-mem-5")  // 0
//
// A unit is a GiB (memory / 2^30, rounded down, as the original plugin
// counts: a T4 shows 14) or a MiB. Immutable once made: thread-safe.

#ifndef GPUSHARE_DEVICE_PLUGIN_INVENTORY_H_
#define GPUSHARE_DEVICE_PLUGIN_INVENTORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "device-plugin/nvml.h"

namespace gpushare::deviceplugin {

enum class MemoryUnit { kGiB, kMiB };

// "GiB" or "MiB" (case-insensitive). Errors: InvalidArgument naming the text.
absl::StatusOr<MemoryUnit> ParseMemoryUnit(std::string_view text);
const char* MemoryUnitName(MemoryUnit unit);
// MiB in one unit: 1024 or 1.
int64_t MibPerUnit(MemoryUnit unit);

class Inventory {
 public:
  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  int gpu_count() const { return static_cast<int>(gpus_.size()); }
  MemoryUnit unit() const { return unit_; }
  // Units of GPU `gpu` (an index into gpus()).
  int64_t units(int gpu) const { return units_[gpu]; }
  int64_t total_units() const;

  // The id of unit `k` of GPU `gpu`: "<uuid>-mem-<k>".
  std::string MemDeviceId(int gpu, int64_t k) const;
  // The GPU (index into gpus()) of a gpu-mem device id or of a GPU's UUID;
  // nullopt when the id is none of this node's.
  std::optional<int> GpuOfDevice(std::string_view id) const;
  // The GPU (index into gpus()) whose NVML index is `nvml_index`; nullopt
  // for a GPU not advertised (SharableGpus() left it out).
  std::optional<int> GpuOfNvmlIndex(int nvml_index) const;

 private:
  friend absl::StatusOr<Inventory> MakeInventory(std::vector<GpuInfo>, MemoryUnit);
  std::vector<GpuInfo> gpus_;
  std::vector<int64_t> units_;
  MemoryUnit unit_ = MemoryUnit::kGiB;
};

// What gpushare-device-plugin --discover prints: the driver version, the
// unit, each GPU (index, uuid, name, memory_bytes, units, pci_bus_id,
// numa_node (-1: unknown), compute_capability "9.0", mig_enabled) and the
// topology's compact JSON (omitted when empty), as one JSON object.
std::string InventoryJson(const Inventory& inventory, const std::string& driver_version,
                          const std::string& topology_json);

// The GPUs to advertise, of those NVML reports: all but GPUs in MIG mode,
// whose memory belongs to their MIG instances (gpushare does not share MIG
// instances yet; handing out the parent would give a container a GPU whose
// memory is partitioned away). Each GPU left out gets a line in `left_out`.
std::vector<GpuInfo> SharableGpus(const std::vector<GpuInfo>& gpus,
                                  std::vector<std::string>* left_out);

// Whether `gpus` (what NVML reports now, say after a driver reload) are the
// GPUs `inventory` advertises: the same sharable GPUs, by UUID, in order.
bool SameGpus(const Inventory& inventory, const std::vector<GpuInfo>& gpus);

// Errors: InvalidArgument when a GPU has no UUID, two GPUs share one, or a
// GPU has less than one unit of memory (naming it); FailedPrecondition when
// there is no GPU at all.
absl::StatusOr<Inventory> MakeInventory(std::vector<GpuInfo> gpus, MemoryUnit unit);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_INVENTORY_H_
