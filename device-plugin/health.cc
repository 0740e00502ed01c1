// HealthTracker: GPU health from NVML events and probes (see health.h).

#include "device-plugin/health.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

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

HealthMonitor::HealthMonitor(Nvml* nvml, const Inventory* inventory, Options options)
    : nvml_(nvml),
      inventory_(inventory),
      options_(std::move(options)),
      tracker_(inventory->gpu_count()) {}

void HealthMonitor::Sleep(std::chrono::milliseconds d) const {
  if (options_.sleep) {
    options_.sleep(d);
  } else {
    std::this_thread::sleep_for(d);
  }
}

void HealthMonitor::Start() {
  std::ostream& err = *options_.err;
  if (!options_.checks) {
    err << "gpushare-device-plugin: health checks are off: every GPU stays healthy" << std::endl;
    return;
  }
  absl::StatusOr<std::map<int, std::string>> unwatched = nvml_->WatchEvents();
  watching_ = unwatched.ok();
  if (!unwatched.ok()) {
    err << "gpushare-device-plugin: no NVML events (" << unwatched.status().message()
        << "); health from probes only" << std::endl;
    return;
  }
  for (const auto& [index, why] : *unwatched) {
    err << "gpushare-device-plugin: GPU " << index << " reports no NVML events (" << why
        << "); its health from probes only" << std::endl;
  }
}

HealthMonitor::Result HealthMonitor::Step() {
  using std::chrono::milliseconds;
  if (watching_) {
    absl::StatusOr<std::vector<GpuEvent>> got = nvml_->WaitEvents(100);
    tracker_.OnWait(got.status());
    if (got.ok()) {
      backoff_ = milliseconds(100);
      for (GpuEvent e : *got) {
        if (e.gpu >= 0) {
          std::optional<int> g = inventory_->GpuOfNvmlIndex(e.gpu);
          if (!g.has_value()) continue;  // A GPU left out.
          e.gpu = *g;
        }
        tracker_.OnEvent(e);
      }
    } else {
      // The driver in trouble (reloaded, say): every GPU unhealthy
      // meanwhile, NVML initialised again, tries spaced out instead of
      // spinning.
      if (backoff_ == milliseconds(100)) {
        *options_.err << "gpushare-device-plugin: " << got.status().message()
                      << "; initialising NVML again" << std::endl;
      }
      Sleep(backoff_);
      backoff_ = std::min(backoff_ * 2, milliseconds(5'000));
      if (nvml_->Reinit().ok()) {
        absl::StatusOr<std::vector<GpuInfo>> now_gpus = nvml_->Devices();
        if (now_gpus.ok() && !SameGpus(*inventory_, *now_gpus)) {
          *options_.err << "gpushare-device-plugin: the GPUs changed while NVML was away; "
                           "starting again to advertise them"
                        << std::endl;
          return Result::kGpusChanged;
        }
        if (now_gpus.ok()) {
          *options_.err << "gpushare-device-plugin: NVML initialised again" << std::endl;
        }
      }
    }
  } else {
    Sleep(milliseconds(100));
  }
  const auto now = std::chrono::steady_clock::now();
  if (options_.checks && now >= next_probe_) {
    next_probe_ = now + options_.probe_interval;
    for (int g = 0; g < inventory_->gpu_count(); ++g) {
      tracker_.OnProbe(g, nvml_->Probe(inventory_->gpus()[g].index));
    }
  }
  std::map<int, std::string> now_unhealthy = tracker_.Unhealthy();
  if (now_unhealthy == unhealthy_) return Result::kSame;
  for (int g = 0; g < inventory_->gpu_count(); ++g) {
    auto it = now_unhealthy.find(g);
    const bool healthy = it == now_unhealthy.end();
    if (healthy != (unhealthy_.count(g) == 0)) {
      *options_.out << "gpushare-device-plugin: GPU " << g << " "
                    << (healthy ? "healthy again" : "unhealthy: " + it->second) << std::endl;
    }
  }
  unhealthy_ = std::move(now_unhealthy);
  return Result::kChanged;
}

std::string HealthLineJson(const Inventory& inventory,
                           const std::map<int, std::string>& unhealthy) {
  nlohmann::json gpus = nlohmann::json::object();
  for (const auto& [g, why] : unhealthy) {
    if (g < 0 || g >= inventory.gpu_count()) continue;
    gpus[std::to_string(inventory.gpus()[g].index)] = why;
  }
  return nlohmann::json{{"unhealthy", gpus}}.dump();
}

}  // namespace gpushare::deviceplugin
