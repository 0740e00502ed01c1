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
  std::string why;
  if (event.double_bit_ecc) {
    why = "double-bit ECC error";
  } else if (IsCriticalXid(event.xid)) {
    why = absl::StrCat("XID ", event.xid);
  } else {
    return;
  }
  if (event.gpu >= 0) {
    if (event.gpu < static_cast<int>(sticky_.size())) sticky_[event.gpu] = why;
    return;
  }
  for (std::string& s : sticky_) {
    if (s.empty()) s = why + " on a GPU NVML did not name";
  }
}

void HealthTracker::OnWait(const absl::Status& wait) {
  wait_error_ = wait.ok() ? "" : absl::StrCat("NVML event wait failed: ", wait.message());
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
    } else if (!wait_error_.empty()) {
      out[static_cast<int>(g)] = wait_error_;
    }
  }
  return out;
}

}  // namespace gpushare::deviceplugin
