// Inventory: NVML's GPUs as the kubelet's devices (see inventory.h).

#include "device-plugin/inventory.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {

namespace {
constexpr char kMemInfix[] = "-mem-";
constexpr size_t kMemInfixSize = sizeof(kMemInfix) - 1;
}  // namespace

absl::StatusOr<MemoryUnit> ParseMemoryUnit(std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  if (lower == "gib") return MemoryUnit::kGiB;
  if (lower == "mib") return MemoryUnit::kMiB;
  return absl::InvalidArgumentError(
      absl::StrCat("memory unit \"", std::string(text), "\" is neither GiB nor MiB"));
}

const char* MemoryUnitName(MemoryUnit unit) { return unit == MemoryUnit::kGiB ? "GiB" : "MiB"; }

int64_t MibPerUnit(MemoryUnit unit) { return unit == MemoryUnit::kGiB ? 1024 : 1; }

int64_t Inventory::total_units() const {
  int64_t total = 0;
  for (int64_t u : units_) total += u;
  return total;
}

std::string Inventory::MemDeviceId(int gpu, int64_t k) const {
  return absl::StrCat(gpus_[gpu].uuid, kMemInfix, k);
}

std::optional<int> Inventory::GpuOfDevice(std::string_view id) const {
  std::string_view uuid = id;
  const size_t infix = id.rfind(kMemInfix);
  if (infix != std::string_view::npos) {
    int64_t k = 0;
    if (absl::SimpleAtoi(std::string(id.substr(infix + kMemInfixSize)), &k) && k >= 0) {
      uuid = id.substr(0, infix);
      for (int g = 0; g < gpu_count(); ++g) {
        if (gpus_[g].uuid == uuid) return k < units_[g] ? std::optional<int>(g) : std::nullopt;
      }
      return std::nullopt;
    }
  }
  for (int g = 0; g < gpu_count(); ++g) {
    if (gpus_[g].uuid == uuid) return g;
  }
  return std::nullopt;
}

std::string InventoryJson(const Inventory& inv, const std::string& driver_version,
                          const std::string& topology_json) {
  nlohmann::json gpus = nlohmann::json::array();
  for (int g = 0; g < inv.gpu_count(); ++g) {
    const GpuInfo& i = inv.gpus()[g];
    gpus.push_back({{"index", i.index},
                    {"uuid", i.uuid},
                    {"name", i.name},
                    {"memory_bytes", i.memory_bytes},
                    {"units", inv.units(g)},
                    {"pci_bus_id", i.pci_bus_id},
                    {"numa_node", i.numa_node},
                    {"compute_capability", absl::StrCat(i.compute_major, ".", i.compute_minor)},
                    {"mig_enabled", i.mig_enabled}});
  }
  nlohmann::json out = {{"driver_version", driver_version},
                        {"memory_unit", MemoryUnitName(inv.unit())},
                        {"gpus", gpus}};
  if (!topology_json.empty()) {
    out["topology"] = nlohmann::json::parse(topology_json, nullptr, /*allow_exceptions=*/false);
  }
  return out.dump(1);
}

std::optional<int> Inventory::GpuOfNvmlIndex(int nvml_index) const {
  for (int g = 0; g < gpu_count(); ++g) {
    if (gpus_[g].index == nvml_index) return g;
  }
  return std::nullopt;
}

std::vector<GpuInfo> SharableGpus(const std::vector<GpuInfo>& gpus,
                                  std::vector<std::string>* left_out) {
  std::vector<GpuInfo> out;
  for (const GpuInfo& g : gpus) {
    if (g.mig_enabled) {
      left_out->push_back(absl::StrCat("GPU ", g.index, " (", g.uuid,
                                       ") is in MIG mode: not advertised (gpushare does not "
                                       "share MIG instances yet; turn MIG off to share it)"));
      continue;
    }
    out.push_back(g);
  }
  return out;
}

bool SameGpus(const Inventory& inventory, const std::vector<GpuInfo>& gpus) {
  std::vector<std::string> left_out;
  const std::vector<GpuInfo> now = SharableGpus(gpus, &left_out);
  if (static_cast<int>(now.size()) != inventory.gpu_count()) return false;
  for (int g = 0; g < inventory.gpu_count(); ++g) {
    if (now[g].uuid != inventory.gpus()[g].uuid) return false;
  }
  return true;
}

absl::StatusOr<Inventory> MakeInventory(std::vector<GpuInfo> gpus, MemoryUnit unit) {
  if (gpus.empty()) return absl::FailedPreconditionError("NVML reports no GPU on this node");
  Inventory inv;
  std::set<std::string> seen;
  const uint64_t bytes_per_unit = static_cast<uint64_t>(MibPerUnit(unit)) << 20;
  for (const GpuInfo& g : gpus) {
    if (g.uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("GPU ", g.index, " has no UUID"));
    }
    if (!seen.insert(g.uuid).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", g.index, " has the UUID ", g.uuid, " of another GPU"));
    }
    const int64_t units = static_cast<int64_t>(g.memory_bytes / bytes_per_unit);
    if (units < 1) {
      return absl::InvalidArgumentError(absl::StrCat("GPU ", g.index, " (", g.uuid, ") has ",
                                                     g.memory_bytes, " bytes: less than one ",
                                                     MemoryUnitName(unit)));
    }
    inv.units_.push_back(units);
  }
  inv.gpus_ = std::move(gpus);
  inv.unit_ = unit;
  return inv;
}

}  // namespace gpushare::deviceplugin
