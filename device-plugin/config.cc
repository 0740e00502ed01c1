// gpushare-device-plugin's flags (see config.h).

#include "device-plugin/config.h"

#include "absl/strings/str_cat.h"
#include "tools/flags/flags.h"

namespace gpushare::deviceplugin {

namespace {

using flags::FlagSet;
using flags::ParseInt;
using flags::SetBool;
using flags::SetInt;
using flags::SetString;

constexpr char kUsage[] = "usage: gpushare-device-plugin [flags]";
constexpr char kAbout[] =
    "Advertises this node's GPUs to the kubelet as aliyun.com/gpu-mem units,\n"
    "aliyun.com/gpu-count and nvidia.com/gpu, and gives each container the GPUs\n"
    "a gpushare scheduler chose for it.";
constexpr char kNodeGroup[] = "This node";
constexpr char kApiGroup[] = "The Kubernetes API (default: the in-cluster service account)";
constexpr char kResourceGroup[] = "What is advertised";

void DefineFlags(FlagSet* f, DevicePluginConfig* c) {
  f->AddSwitch(kNodeGroup, "--discover",
               "print this node's GPUs as NVML reports them and what would\n"
               "be advertised (JSON), then exit", &c->discover);
  f->AddSwitch(kNodeGroup, "--watch-health",
               "with --discover: print the inventory as one JSON line, then\n"
               "a line {\"unhealthy\":{...}} now and whenever GPU health\n"
               "changes, until stopped (gpushare-dra-driver reads it)",
               &c->watch_health);
  f->Add(kNodeGroup, "--node-name", "NAME", "this node (default: $NODE_NAME)",
         SetString("--node-name", &c->node_name));
  f->Add(kNodeGroup, "--device-plugin-path", "DIR",
         "the kubelet's device plugin folder (default " + c->plugin_dir + ")",
         SetString("--device-plugin-path", &c->plugin_dir));
  f->Add(kNodeGroup, "--pod-resources-socket", "FILE",
         "the kubelet's pod-resources API, read at start to learn\n"
         "what was allocated before (default " + c->pod_resources_socket + ")",
         SetString("--pod-resources-socket", &c->pod_resources_socket));
  f->Add(kNodeGroup, "--metrics-bind-address", "HOST:PORT",
         "serve GET /metrics (Prometheus) and /healthz over HTTP\n"
         "there, e.g. 0.0.0.0:9402 (default: not served)",
         [c](const char* v) -> std::string {
           const std::string a = v ? v : "";
           const size_t colon = a.rfind(':');
           int64_t port = 0;
           if (colon == std::string::npos || colon == 0 ||
               !ParseInt(a.c_str() + colon + 1, 1, 65535, &port)) {
             return "--metrics-bind-address takes HOST:PORT with a port in 1..65535, not '" + a +
                    "'";
           }
           c->metrics_bind_address = a;
           return "";
         });
  f->Add(kNodeGroup, "--nvml-library", "FILE",
         "NVML, loaded at run time (default " + c->nvml_library + ")",
         SetString("--nvml-library", &c->nvml_library));
  f->Add(kNodeGroup, "--health-interval-ms", "MS",
         absl::StrCat("how often GPU health is checked (default ", c->health_interval_ms,
                      ", at least 100)"),
         SetInt("--health-interval-ms", "milliseconds", 100, 3'600'000, &c->health_interval_ms));
  f->Add(kNodeGroup, "--health-checks", "BOOL",
         "watch NVML events and probe each GPU (default true); false\n"
         "keeps every GPU healthy",
         SetBool("--health-checks", &c->health_checks));
  flags::AddKubeconfigFlags(f, kApiGroup, &c->kubeconfig, &c->context);
  f->Add(kApiGroup, "--apiserver", "URL", "API server URL; overrides the kubeconfig's server",
         SetString("--apiserver", &c->apiserver));
  f->Add(kResourceGroup, "--memory-unit", "UNIT",
         "GiB (default) or MiB: one aliyun.com/gpu-mem device per unit",
         [c](const char* v) -> std::string {
           absl::StatusOr<MemoryUnit> unit = ParseMemoryUnit(v ? v : "");
           if (!unit.ok()) return "--memory-unit: " + std::string(unit.status().message());
           c->memory_unit = *unit;
           return "";
         });
  f->Add(kResourceGroup, "--exclusive-resource", "NAME",
         "the resource of whole GPUs: nvidia.com/gpu (default),\n"
         "or \"\" to leave it to another device plugin",
         [c](const char* v) -> std::string {
           const std::string name = v ? v : "";
           if (!name.empty() && name != "nvidia.com/gpu") {
             return "--exclusive-resource takes nvidia.com/gpu or \"\", not " + name;
           }
           c->exclusive_resource = name;
           return "";
         });
  f->Add(kResourceGroup, "--device-list-strategy", "LIST",
         "how containers are given their GPUs, comma-separated: envvar\n"
         "(default), volume-mounts, cdi-annotations, cdi-cri",
         [c](const char* v) -> std::string {
           absl::StatusOr<std::vector<DeviceListStrategy>> s =
               ParseDeviceListStrategies(v ? v : "");
           if (!s.ok()) return "--device-list-strategy: " + std::string(s.status().message());
           c->device_list.strategies = *s;
           return "";
         });
  f->Add(kResourceGroup, "--cdi-kind", "KIND",
         "the CDI kind of the GPUs' names <kind>=<uuid> (default\n" + c->device_list.cdi_kind + ")",
         [c](const char* v) -> std::string {
           const std::string kind = v ? v : "";
           const size_t slash = kind.find('/');
           if (slash == std::string::npos || slash == 0 || slash + 1 == kind.size() ||
               kind.find_first_of("=, ") != std::string::npos) {
             return "--cdi-kind takes VENDOR/CLASS, such as nvidia.com/gpu, not \"" + kind + "\"";
           }
           c->device_list.cdi_kind = kind;
           return "";
         });
  f->Add(kResourceGroup, "--pass-device-specs", "BOOL",
         "also pass /dev/nvidia<minor> and the driver's control devices\n"
         "(default false)",
         SetBool("--pass-device-specs", &c->device_list.pass_device_specs));
  f->Add(kResourceGroup, "--dev-root", "DIR",
         "the folder holding dev/nvidia* on the host, at the same path\n"
         "for the plugin (default /)",
         SetString("--dev-root", &c->device_list.dev_root));
  f->Add(kResourceGroup, "--hami-limits", "BOOL",
         "also set HAMi-core's CUDA_DEVICE_MEMORY_LIMIT_<i>, for\n"
         "nodes with that library (default false)",
         SetBool("--hami-limits", &c->hami_limits));
  f->Add(kResourceGroup, "--annotate-node", "BOOL",
         "write gpushare.io/gpu-topology and gpushare.io/unhealthy-gpus\n"
         "on this Node (default true)",
         SetBool("--annotate-node", &c->annotate_node));
}

}  // namespace

absl::StatusOr<DevicePluginConfig> ParseDevicePluginFlags(int argc, const char* const* argv,
                                                          const char* node_name_env) {
  DevicePluginConfig c;
  if (node_name_env != nullptr) c.node_name = node_name_env;
  FlagSet f("gpushare-device-plugin", kUsage, kAbout);
  DefineFlags(&f, &c);
  if (absl::Status s = f.Parse(argc, argv); !s.ok()) return s;
  c.help = f.help_requested();
  c.version = !c.help && f.version_requested();
  if (c.watch_health && !c.discover && !c.help && !c.version) {
    return absl::InvalidArgumentError("--watch-health needs --discover");
  }
  if (c.help || c.version || c.discover) return c;
  if (c.node_name.empty()) {
    return absl::InvalidArgumentError(
        "no node name: pass --node-name, or set NODE_NAME (the DaemonSet sets it from "
        "spec.nodeName)");
  }
  if (c.plugin_dir.empty()) return absl::InvalidArgumentError("--device-plugin-path is empty");
  return c;
}

std::string DevicePluginHelp() {
  DevicePluginConfig c;
  FlagSet f("gpushare-device-plugin", kUsage, kAbout);
  DefineFlags(&f, &c);
  return f.Help();
}

}  // namespace gpushare::deviceplugin
