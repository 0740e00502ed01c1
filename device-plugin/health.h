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
// Not thread-safe: one thread (the program's health loop, HealthMonitor)
// owns it.

#ifndef GPUSHARE_DEVICE_PLUGIN_HEALTH_H_
#define GPUSHARE_DEVICE_PLUGIN_HEALTH_H_

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "device-plugin/inventory.h"
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

// The plugin's health loop, a step at a time (one thread owns it): it waits
// up to 100 ms for NVML events (NVML's indices mapped to the advertised
// GPUs'; a GPU left out is ignored), probes every GPU each
// `probe_interval`, and on a failing wait (the driver reloaded, say) marks
// every GPU unhealthy, sleeps (100 ms, doubling up to 5 s) and initialises
// NVML again. Changes of health are written to `out`, trouble to `err`.
//
//   HealthMonitor health(nvml.get(), &inventory, {});
//   health.Start();
//   while (running) {
//     switch (health.Step()) {
//       case HealthMonitor::Result::kChanged: publish(health.unhealthy()); break;
//       case HealthMonitor::Result::kGpusChanged: restart();  // Other GPUs than advertised.
//       case HealthMonitor::Result::kSame: break;
//     }
//   }
class HealthMonitor {
 public:
  struct Options {
    // Off: no events, no probes; every GPU stays healthy.
    bool checks = true;
    std::chrono::milliseconds probe_interval{5'000};
    // How the monitor waits (the loop's pace without events, its backoff);
    // empty: this thread sleeps.
    std::function<void(std::chrono::milliseconds)> sleep;
    std::ostream* out = &std::cout;
    std::ostream* err = &std::cerr;
  };
  enum class Result { kSame, kChanged, kGpusChanged };

  // `nvml` and `inventory` must outlive the monitor.
  HealthMonitor(Nvml* nvml, const Inventory* inventory, Options options);

  // Watches NVML events when checks are on; the GPUs that report none (and
  // a driver that reports none at all) are named on `err`: their health
  // rests on the probes.
  void Start();

  // One step (see above). kGpusChanged: NVML came back with other GPUs than
  // the inventory's; the plugin must start again to advertise them.
  Result Step();

  // Unhealthy GPUs (indices of the inventory's GPUs) and why, as of the last
  // Step().
  const std::map<int, std::string>& unhealthy() const { return unhealthy_; }
  // Whether NVML events are watched.
  bool watching() const { return watching_; }

 private:
  void Sleep(std::chrono::milliseconds d) const;

  Nvml* const nvml_;
  const Inventory* const inventory_;
  const Options options_;
  HealthTracker tracker_;
  bool watching_ = false;
  std::chrono::milliseconds backoff_{100};
  std::chrono::steady_clock::time_point next_probe_{};
  std::map<int, std::string> unhealthy_;
};

// One line of --discover --watch-health's stream: the unhealthy GPUs keyed
// by their NVML index (as the inventory names them, not their position in
// it) with the reason, e.g. {"unhealthy":{"1":"XID 79"}}; {"unhealthy":{}}
// when all are healthy. `unhealthy` is keyed by position, as
// HealthMonitor::unhealthy() is; positions outside the inventory are left
// out.
std::string HealthLineJson(const Inventory& inventory, const std::map<int, std::string>& unhealthy);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_HEALTH_H_
