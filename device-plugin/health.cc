// HealthTracker: GPU health from NVML events and probes (see health.h).

#include "device-plugin/health.h"

#include "absl/strings/str_cat.h"

namespace gpushare::deviceplugin {

bool IsCriticalXid(unsigned long long xid) {
  switch (xid) {
    case 13: case 31: case 43: case 45: case 68: case 109: return false;
    default: return true;
  }
}

void HealthTracker::OnEvent(const GpuEvent& event) {
  if (event.gpu < 0 || event.gpu >= static_cast<int>(sticky_.size())) return;
  if (event.double_bit_ecc) {
    sticky_[event.gpu] = "double-bit ECC error";
  } else if (IsCriticalXid(event.xid)) {
    sticky_[event.gpu] = absl::StrCat("XID ", event.xid);
  }
}

void HealthTracker::OnProbe(int gpu, const absl::Status& probe) {
  if (gpu < 0 || gpu >= static_cast<int>(lost_.size())) return;
  lost_[gpu] = probe.ok() ? "" : std::string(probe.message());
}

std::map<int, std::string> HealthTracker::Unhealthy() const {
  std::map<int, std::string> out;
  for (size_t g = 0; g < sticky_.size(); ++g) {
    if (!sticky_[g].empty()) {
      out[static_cast<int>(g)] = sticky_[g];
    } else if (!lost_[g].empty()) {
      out[static_cast<int>(g)] = lost_[g];
    }
  }
  return out;
}

}  // namespace gpushare::deviceplugin
