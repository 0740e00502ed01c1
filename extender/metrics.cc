// Prometheus text exposition of gpushare-extender's metrics; see metrics.h.

#include "extender/metrics.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpushare/fragmentation.h"
#include "nlohmann/json.hpp"

namespace gpushare::extender {

namespace {

std::string Escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

std::string Braces(const std::string& labels) {
  return labels.empty() ? "" : "{" + labels + "}";
}

const char* TypeName(Metrics::Type t) {
  switch (t) {
    case Metrics::Type::kCounter:
      return "counter";
    case Metrics::Type::kGauge:
      return "gauge";
    case Metrics::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string Header(const std::string& name, const std::string& help, Metrics::Type type) {
  return absl::StrCat("# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ",
                      TypeName(type), "\n");
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, k, "=\"", Escape(v, true), "\"");
  }
  return out;
}

void Metrics::Declare(const std::string& name, Type type, const std::string& help,
                      std::vector<double> buckets) {
  std::lock_guard lock(mu_);
  auto [it, added] = families_.try_emplace(name);
  it->second.help = help;
  if (!added) return;
  it->second.type = type;
  std::sort(buckets.begin(), buckets.end());
  it->second.buckets = std::move(buckets);
  order_.push_back(name);
}

Metrics::Family* Metrics::Find(const std::string& name, Type type) {
  auto it = families_.find(name);
  return it == families_.end() || it->second.type != type ? nullptr : &it->second;
}

void Metrics::Add(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  if (Family* f = Find(name, Type::kCounter)) f->series[RenderLabels(labels)].value += value;
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  if (Family* f = Find(name, Type::kGauge)) f->series[RenderLabels(labels)].value = value;
}

void Metrics::Observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Family* f = Find(name, Type::kHistogram);
  if (!f) return;
  Series& s = f->series[RenderLabels(labels)];
  if (s.counts.empty()) s.counts.assign(f->buckets.size() + 1, 0);
  const size_t i = static_cast<size_t>(
      std::lower_bound(f->buckets.begin(), f->buckets.end(), value) - f->buckets.begin());
  ++s.counts[i];
  s.sum += value;
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(RenderLabels(labels));
  return s == it->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    out += Header(name, f.help, f.type);
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        absl::StrAppend(&out, name, Braces(labels), " ", Number(s.value), "\n");
        continue;
      }
      const std::string sep = labels.empty() ? "" : labels + ",";
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= f.buckets.size(); ++i) {
        cumulative += s.counts[i];
        absl::StrAppend(&out, name, "_bucket{", sep, "le=\"",
                        i < f.buckets.size() ? Number(f.buckets[i]) : "+Inf", "\"} ",
                        cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", Braces(labels), " ", Number(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", Braces(labels), " ", cumulative, "\n");
    }
  }
  return out;
}

std::string GaugeFamily(const std::string& name, const std::string& help,
                        const std::vector<std::pair<Labels, double>>& series,
                        Metrics::Type type) {
  std::string out = Header(name, help, type);
  for (const auto& [labels, v] : series) {
    absl::StrAppend(&out, name, Braces(RenderLabels(labels)), " ", Number(v), "\n");
  }
  return out;
}

ClusterSample SampleCluster(const Cluster& cluster) {
  ClusterSample sample;
  sample.nodes.reserve(cluster.node_names().size());
  auto model_of = [](const std::string& m) -> const std::string& {
    static const std::string kUnknown = "unknown";
    return m.empty() ? kUnknown : m;
  };
  std::map<std::tuple<int64_t, int, bool>, int> shapes;
  int placed = 0;
  // The last model's entry: a node's GPUs are nearly always of one model.
  std::pair<int64_t, int64_t>* last = nullptr;
  const std::string* last_model = nullptr;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus* n = cluster.FindNode(name);
    if (n == nullptr || n->gpus.empty()) continue;
    sample.nodes.push_back(
        {name, model_of(n->gpus[0].model), n->gpu_memory(), n->gpu_memory_used()});
    for (const GpuStatus& g : n->gpus) {
      const std::string& model = model_of(g.model);
      if (last_model == nullptr || *last_model != model) {
        last = &sample.models[model];
        last_model = &model;
      }
      last->first += g.memory;
      last->second += g.memory_used;
    }
    // The workload placed now, as FGD's target: shapes weighted by frequency
    // (found by id: placements() would copy and sort them all).
    for (const std::string& id : n->requests) {
      const Placement* p = cluster.FindPlacement(id);
      if (p == nullptr || p->gpus.empty()) continue;
      ++shapes[{p->exclusive ? 0 : p->memory_per_gpu, static_cast<int>(p->gpus.size()),
                p->exclusive}];
      ++placed;
    }
  }
  TargetWorkload target;
  target.resource = FragResource::kMemory;
  for (const auto& [shape, n] : shapes) {
    TargetTask t;
    t.gpu_share = std::get<0>(shape);
    t.gpu_count = std::get<1>(shape);
    t.weight = static_cast<double>(n) / placed;
    target.tasks.push_back(t);
  }
  if (!target.tasks.empty()) {
    const ClusterFragmentation frag = Fragmentation(cluster, target);
    sample.fragmentation = frag.amount;
    sample.fragmentation_rate = frag.rate;
  }
  return sample;
}

std::string RenderClusterSample(const ClusterSample& sample) {
  std::vector<std::pair<Labels, double>> node_total, node_used, model_total, model_used;
  node_total.reserve(sample.nodes.size());
  node_used.reserve(sample.nodes.size());
  for (const ClusterSample::Node& n : sample.nodes) {
    node_total.push_back({{{"node", n.name}, {"model", n.model}}, double(n.total)});
    node_used.push_back({{{"node", n.name}, {"model", n.model}}, double(n.used)});
  }
  for (const auto& [model, tu] : sample.models) {
    model_total.push_back({{{"model", model}}, double(tu.first)});
    model_used.push_back({{{"model", model}}, double(tu.second)});
  }
  return GaugeFamily("gpushare_node_gpu_memory_total_units",
                     "GPU memory of a node's GPUs, memory units (aliyun.com/gpu-mem).",
                     node_total) +
         GaugeFamily("gpushare_node_gpu_memory_allocated_units",
                     "GPU memory promised to pods on a node, memory units.", node_used) +
         GaugeFamily("gpushare_model_gpu_memory_total_units",
                     "GPU memory of all GPUs of a model, memory units.", model_total) +
         GaugeFamily("gpushare_model_gpu_memory_allocated_units",
                     "GPU memory promised to pods on GPUs of a model, memory units.",
                     model_used) +
         GaugeFamily("gpushare_gpu_memory_fragmentation_units",
                     "Free GPU memory that the workload placed now could not use (FGD "
                     "fragmentation), memory units.",
                     {{{}, sample.fragmentation}}) +
         GaugeFamily("gpushare_gpu_memory_fragmentation_ratio",
                     "Fragmented share of the free GPU memory (0..1).",
                     {{{}, sample.fragmentation_rate}});
}

std::string SharedRender::Get() {
  std::unique_lock lock(mu_);
  const uint64_t want = started_ + 1;  // The first render to start from now.
  while (done_ < want) {
    if (busy_) {
      done_cv_.wait(lock);
      continue;
    }
    busy_ = true;
    ++started_;
    lock.unlock();
    std::string text;
    try {
      text = render_();
    } catch (...) {
      lock.lock();
      busy_ = false;
      ++done_;
      text_.clear();
      done_cv_.notify_all();
      throw;
    }
    lock.lock();
    busy_ = false;
    ++done_;
    text_ = std::move(text);
    done_cv_.notify_all();
  }
  return text_;
}

uint64_t SharedRender::renders() const {
  std::lock_guard lock(mu_);
  return done_;
}

std::string ClusterMetrics(const Cluster& cluster) {
  return RenderClusterSample(SampleCluster(cluster));
}

void DeclareExtenderMetrics(Metrics& m) {
  using T = Metrics::Type;
  m.Declare("gpushare_extender_requests_total", T::kCounter,
            "HTTP requests served, by route (filter, prioritize, bind, ...) and status code.");
  m.Declare("gpushare_extender_request_duration_seconds", T::kHistogram,
            "Time to handle a request (from its parsed body to its reply), by route.",
            {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  m.Declare("gpushare_extender_binds_total", T::kCounter,
            "Bind requests by result: bound, refused (no fit, a concurrent bind, an API "
            "error), forwarded (a follower passed it to the leader), not_leader (a follower "
            "refused it: no leader known or reachable), bad_request, error.");
  m.Declare("gpushare_extender_bind_api_results_total", T::kCounter,
            "Binds written to the API server (one Binding carrying the annotations), by outcome "
            "(a canonical status code: OK, ALREADY_EXISTS, UNAVAILABLE, ...).");
  m.Declare("gpushare_extender_api_requests_total", T::kCounter,
            "Requests to the Kubernetes API server (each retry counted), by method and HTTP "
            "status (none: no reply).");
  m.Declare("gpushare_extender_api_errors_total", T::kCounter,
            "Requests to the API server that failed (no reply, or status 400 and above).");
  m.Declare("gpushare_extender_objects_skipped_total", T::kCounter,
            "Nodes and pods of the start-up lists that could not be read and were left out "
            "(each named in a warning), by kind.");
}

void CountRequest(Metrics& m, const std::string& route, int status, std::string_view body,
                  bool forwarded, double seconds) {
  m.Add("gpushare_extender_requests_total", {{"route", route}, {"code", std::to_string(status)}});
  m.Observe("gpushare_extender_request_duration_seconds", {{"route", route}}, seconds);
  if (route != "bind" || forwarded || status == 503) return;
  std::string result = "error";
  if (status == 200) {
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    result = j.is_object() && j.value("Error", "").empty() ? "bound" : "refused";
  } else if (status == 400) {
    result = "bad_request";
  }
  m.Add("gpushare_extender_binds_total", {{"result", result}});
}

std::string RenderProcessGauges(const std::vector<WatchEnds>& watches, const LeaderSample& leader) {
  std::vector<std::pair<Labels, double>> restarts;
  for (const WatchEnds& w : watches) {
    restarts.push_back({{{"resource", w.resource}, {"reason", "closed"}}, double(w.closed)});
    restarts.push_back({{{"resource", w.resource}, {"reason", "expired"}}, double(w.expired)});
    restarts.push_back({{{"resource", w.resource}, {"reason", "error"}}, double(w.error)});
  }
  std::string text = GaugeFamily(
      "gpushare_extender_watch_restarts_total",
      "Watches of the API server that ended and were started again, by why they ended "
      "(closed by the server, expired: 410 Gone then a new list, error).",
      restarts, Metrics::Type::kCounter);
  text += GaugeFamily("gpushare_extender_leader",
                      "1 when this replica binds (it holds the Lease and has synced), else 0.",
                      {{{{"identity", leader.identity}}, leader.leading ? 1.0 : 0.0}});
  if (leader.transitions.has_value()) {
    text += GaugeFamily("gpushare_extender_leader_transitions",
                        "Leader changes recorded in the Lease (leaseTransitions) when last read.",
                        {{{}, double(*leader.transitions)}});
  }
  return text;
}

}  // namespace gpushare::extender
