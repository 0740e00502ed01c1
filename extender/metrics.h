// File: extender/metrics.h
// -----------------------------------------------------------------------------
// Metrics of gpushare-extender in the Prometheus text exposition format
// (version 0.0.4: https://prometheus.io/docs/instrumenting/exposition_formats/),
// served at GET /metrics. A small registry of counters and histograms that
// the serving and API code update, plus gauges computed at scrape time (the
// GPU memory of the cluster, its fragmentation, the leader status).
//
//   Metrics m;
//   m.Add("gpushare_extender_binds_total", {{"result", "bound"}});
//   m.Observe("gpushare_extender_request_duration_seconds", {{"verb", "filter"}}, 0.0012);
//   std::string text = m.Render() + ClusterMetrics(cluster);
//
// Families are declared once with Declare() (name, type, help; histograms
// their bucket bounds); adding to an undeclared family is a programming error
// and is ignored. Label values are escaped as the format requires (\\, \",
// \n); label names are the caller's constants.
//
// Thread-safe.

#ifndef GPUSHARE_EXTENDER_METRICS_H_
#define GPUSHARE_EXTENDER_METRICS_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpushare/cluster.h"

namespace gpushare::extender {

// Label pairs of one series, in the order written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// The Content-Type of the exposition.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Declares a family; `buckets` (ascending upper bounds, +Inf implied) for
  // histograms. Declaring again replaces the help text only.
  void Declare(const std::string& name, Type type, const std::string& help,
               std::vector<double> buckets = {});
  // Adds `value` to a counter series (or sets nothing on other types).
  void Add(const std::string& name, const Labels& labels, double value = 1);
  // Sets a gauge series.
  void Set(const std::string& name, const Labels& labels, double value);
  // One observation of a histogram series.
  void Observe(const std::string& name, const Labels& labels, double value);

  // Every declared family with its series, families in declaration order,
  // series in label order. A family without series is still described.
  std::string Render() const;

  // The value of a counter or gauge series (0 if absent), for tests.
  double Value(const std::string& name, const Labels& labels) const;

 private:
  struct Series {
    double value = 0;               // Counter or gauge.
    std::vector<uint64_t> counts;   // Histogram: per bucket (not cumulative), +Inf last.
    double sum = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // By rendered label set.
  };
  Family* Find(const std::string& name, Type type);

  mutable std::mutex mu_;
  std::vector<std::string> order_;          // Guarded by mu_.
  std::map<std::string, Family> families_;  // Guarded by mu_.
};

// One family of gauges (or counters read elsewhere, `type`) rendered at
// once: HELP, TYPE and a line per series.
std::string GaugeFamily(const std::string& name, const std::string& help,
                        const std::vector<std::pair<Labels, double>>& series,
                        Metrics::Type type = Metrics::Type::kGauge);

// The cluster's gauges from the library's view of it:
//   gpushare_node_gpu_memory_total_units{node,model}      capacity of its GPUs
//   gpushare_node_gpu_memory_allocated_units{node,model}  promised to pods
//   gpushare_model_gpu_memory_{total,allocated}_units{model}  the same per GPU model
//   gpushare_gpu_memory_fragmentation_units / _fragmentation_ratio
// Nodes without GPUs are left out; a GPU without a model label counts as
// model "unknown"; a node's model is that of its first GPU. Fragmentation is
// gpushare::Fragmentation() in GPU memory units (fragmentation.h) against
// the workload placed now (the shapes of the current placements weighted by
// how often each occurs): 0 when nothing is placed.
std::string ClusterMetrics(const Cluster& cluster);

// The numbers behind ClusterMetrics(), taken from the cluster in one pass of
// arithmetic and copies (no formatting), so that the scheduler's lock is
// held for that pass only and the text is rendered after it is released:
//
//   ClusterSample sample;
//   scheduler->Read([&](const Cluster& c) { sample = SampleCluster(c); });
//   text += RenderClusterSample(sample);
//
// ClusterMetrics(c) == RenderClusterSample(SampleCluster(c)).
struct ClusterSample {
  struct Node {
    std::string name, model;
    int64_t total = 0, used = 0;  // GPU memory units.
  };
  std::vector<Node> nodes;                                    // In node_names() order.
  std::map<std::string, std::pair<int64_t, int64_t>> models;  // model -> (total, used)
  double fragmentation = 0, fragmentation_rate = 0;
};
ClusterSample SampleCluster(const Cluster& cluster);
std::string RenderClusterSample(const ClusterSample& sample);

// Renders shared by callers that overlap: Get() returns the text of a render
// that started after the call began (so it is never older than the call),
// and callers that arrive while one runs wait and share the next one instead
// of each starting their own. Many scrapers at once thus cost about one
// render at a time, not one each. Thread-safe; `render` runs unlocked.
class SharedRender {
 public:
  explicit SharedRender(std::function<std::string()> render) : render_(std::move(render)) {}
  std::string Get();
  // Renders run so far, for tests.
  uint64_t renders() const;

 private:
  const std::function<std::string()> render_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  uint64_t started_ = 0;  // Renders started; guarded by mu_.
  uint64_t done_ = 0;     // Renders finished; text_ is the last one's.
  bool busy_ = false;
  std::string text_;
};

// A series' label set as written between braces: a="x",b="y".
std::string RenderLabels(const Labels& labels);

// ---- gpushare-extender's own families ---------------------------------------------

// Declares the families gpushare-extender counts: requests served and their
// durations, binds by result, binds written to the API server, requests to
// the API server and their errors, objects skipped from the start-up lists.
void DeclareExtenderMetrics(Metrics& m);

// Counts one request served (gpushare_extender_requests_total, its
// duration). A bind also counts in gpushare_extender_binds_total by result
// (bound: 200 without an Error; refused: 200 with one; bad_request: 400;
// error: any other status), except one forwarded to the leader or refused
// by a follower (503): those are counted where they are decided.
void CountRequest(Metrics& m, const std::string& route, int status, std::string_view body,
                  bool forwarded, double seconds);

// How often one watch of the API server ended, by why (kubeclient's
// Reflector::watch_ends).
struct WatchEnds {
  std::string resource;  // "nodes", "pods".
  int64_t closed = 0, expired = 0, error = 0;
};

// Whether this replica binds, for the leader gauges.
struct LeaderSample {
  bool leading = false;
  std::string identity;                  // Empty without leader election.
  std::optional<int64_t> transitions;  // The Lease's, with leader election.
};

// The families read at scrape time from the watches and the elector:
//   gpushare_extender_watch_restarts_total{resource,reason}  (counter)
//   gpushare_extender_leader{identity}                       1 or 0
//   gpushare_extender_leader_transitions                     with leader election
std::string RenderProcessGauges(const std::vector<WatchEnds>& watches, const LeaderSample& leader);

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_METRICS_H_
