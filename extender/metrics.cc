// Prometheus text exposition of gpushare-extender's metrics; see metrics.h.

#include "extender/metrics.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpushare/fragmentation.h"

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

}  // namespace gpushare::extender
