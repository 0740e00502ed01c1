// File: device-plugin/health.h
// -----------------------------------------------------------------------------
// GPU health from what NVML reports (nvml.h): critical XID events and
// double-bit ECC errors mark a GPU unhealthy until the plugin restarts (the
// GPU needs a reset, after which the DaemonSet's pod is restarted); a GPU
// that stops answering (Probe fails, e.g. "GPU is lost") is unhealthy while
// it does not answer and recovers when it answers again.
//
//   HealthTracker health(inventory.gpu_count());
//   health.OnEvent(event);                 // from Nvml::WaitEvents
//   health.OnProbe(g, nvml.Probe(g));      // every --health-interval-ms
//   server.SetHealth(...) for each change of health.Unhealthy();
//
// An event NVML delivers without naming a known GPU marks every GPU
// unhealthy, as the event of each could be. A failing event wait (the
// driver in trouble) marks every GPU unhealthy until a wait succeeds again;
// the program backs off meanwhile.
//
// XIDs caused by applications rather than the GPU (13 graphics engine
// exception, 31 memory page fault, 43 stopped processing, 45 preemptive
// cleanup, 68 video processor exception, 109 context switch timeout) are
// not critical: a faulty program must not take its GPU away from others.
//
// Not thread-safe: one thread (the program's health loop) owns it.

#ifndef GPUSHARE_DEVICE_PLUGIN_HEALTH_H_
#define GPUSHARE_DEVICE_PLUGIN_HEALTH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "device-plugin/nvml.h"

namespace gpushare::deviceplugin {

bool IsCriticalXid(unsigned long long xid);

class HealthTracker {
 public:
  explicit HealthTracker(int gpus) : sticky_(gpus), lost_(gpus) {}
  // `event.gpu` is an index of this tracker's GPUs; -1: a GPU NVML did not
  // name, so all of them; another value is not a GPU of this tracker's
  // (ignored).
  void OnEvent(const GpuEvent& event);
  void OnProbe(int gpu, const absl::Status& probe);
  // The result of an event wait: an error marks every GPU unhealthy (the
  // reason is the error), OK clears that.
  void OnWait(const absl::Status& wait);
  // Unhealthy GPUs and why ("XID 79", "double-bit ECC error", "GPU 1: GPU
  // is lost").
  std::map<int, std::string> Unhealthy() const;

 private:
  std::vector<std::string> sticky_;  // Reason of a critical event, "" = none.
  std::vector<std::string> lost_;    // Reason of a failed probe, "" = answers.
  std::string wait_error_;           // The last event wait's error, "" = none.
};

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_HEALTH_H_
