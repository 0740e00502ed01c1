#include "extender/config.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace gpushare::extender {

namespace {

using flags::FlagSet;
using flags::ParseBytes;
using flags::ParseInt;
using flags::SetBool;
using flags::SetInt;
using flags::SetMs;
using flags::SetString;

constexpr int64_t kDayMs = 86'400'000;

constexpr char kApiGroup[] = "The Kubernetes API (default): found as client-go finds it";
constexpr char kLeaderGroup[] = "Leader election (several replicas; only the leader binds)";
constexpr char kFilesGroup[] = "Files instead of the API (reserve only; no binding)";
constexpr char kServingGroup[] = "Serving";
constexpr char kLimitsGroup[] = "Serving limits (sizes in bytes, or with Ki/Mi/Gi)";

FlagSet::Setter SetBytes(const std::string& flag, uint64_t* out) {
  return [=](const char* v) -> std::string {
    if (!ParseBytes(v, out)) {
      return flag + " takes a byte count like 1048576 or 192Mi, not " + (v ? v : "nothing");
    }
    return "";
  };
}

FlagSet::Setter SetFile(const std::string& flag, std::string* out) {
  return [=](const char* v) -> std::string {
    if (v == nullptr || *v == '\0') return flag + " takes a file name";
    *out = v;
    return "";
  };
}

// Every flag of gpushare-extender, into `c`.
void DefineFlags(FlagSet* f, ExtenderConfig* c) {
  flags::AddKubeconfigFlags(f, kApiGroup, &c->kubeconfig, &c->context);
  f->Add(kApiGroup, "--apiserver", "URL",
         "API server URL; overrides the kubeconfig's server.\n"
         "Without --kubeconfig it is used alone (no credentials,\n"
         "$KUBECONFIG ignored); http://HOST:PORT is plain HTTP,\n"
         "e.g. kubectl proxy",
         SetString("--apiserver", &c->apiserver));
  f->Add(kApiGroup, "--kube-api-qps", "N",
         absl::StrCat("client-side request rate limit, 0 = none (default ", c->qps, "/s)"),
         [c](const char* v) -> std::string {
           char* end = nullptr;
           const double qps = v == nullptr ? 0 : std::strtod(v, &end);
           if (v == nullptr || end == v || *end != '\0' || !(qps >= 0) || qps > 1e6) {
             return std::string("--kube-api-qps takes requests per second in 0..1e6, not ") +
                    (v ? v : "nothing");
           }
           c->qps = qps;
           return "";
         });
  f->Add(kApiGroup, "--kube-api-burst", "N",
         absl::StrCat("requests allowed in a burst (default ", c->burst, ")"),
         SetInt("--kube-api-burst", "a count", 1, 1'000'000, &c->burst));
  f->Add(kApiGroup, "--resync-ms", "MS",
         "full list of nodes and pods this often, a safety net\n"
         "beside the watches (default 300000, at least 100)",
         SetInt("--resync-ms", "milliseconds", 100, kDayMs, &c->resync_ms));
  f->Add(kApiGroup, "--startup-timeout-ms", "MS",
         "keep trying the first list this long (default 120000)",
         SetInt("--startup-timeout-ms", "milliseconds", 0, kDayMs, &c->startup_timeout_ms));
  f->Add(kApiGroup, "--requeue-pending", "BOOL",
         "touch pending GPU pods that fit after GPUs are freed,\n"
         "so kube-scheduler retries them (default true)",
         SetBool("--requeue-pending", &c->requeue));
  f->Add(kApiGroup, "--metrics-token-review", "BOOL",
         "with --client-ca-file, also serve GET /metrics to a\n"
         "client without a certificate whose bearer token the\n"
         "API server authenticates (TokenReview) and allows to\n"
         "get /metrics (SubjectAccessReview), as Kubernetes\n"
         "components do for Prometheus (default true)",
         SetBool("--metrics-token-review", &c->metrics_token_review));

  f->Add(kLeaderGroup, "--leader-elect", "BOOL",
         "hold a coordination.k8s.io/v1 Lease to bind (default false)",
         SetBool("--leader-elect", &c->leader_elect));
  f->Add(kLeaderGroup, "--leader-elect-namespace", "NS",
         "the Lease's namespace (default: the service account's\n"
         "namespace, else kube-system)",
         [c](const char* v) -> std::string {
           if (v == nullptr) return "--leader-elect-namespace takes a namespace";
           c->lease.namespace_name = v;
           c->lease_namespace_given = true;
           return "";
         });
  f->Add(kLeaderGroup, "--leader-elect-name", "NAME",
         "the Lease's name (default " + c->lease.name + ")",
         SetString("--leader-elect-name", &c->lease.name));
  f->Add(kLeaderGroup, "--leader-elect-identity", "ID",
         "this replica's name (default: host name + random)",
         SetString("--leader-elect-identity", &c->lease.identity));
  f->Add(kLeaderGroup, "--leader-elect-lease-duration-ms", "MS",
         absl::StrCat("a takeover waits this long after the last renewal\n"
                      "seen (default ",
                      c->lease.lease_duration.count(), ", whole seconds)"),
         SetMs("--leader-elect-lease-duration-ms", 0, kDayMs, &c->lease.lease_duration));
  f->Add(kLeaderGroup, "--leader-elect-renew-deadline-ms", "MS",
         absl::StrCat("the leader stops binding when it could not renew\n"
                      "for this long (default ",
                      c->lease.renew_deadline.count(), ")"),
         SetMs("--leader-elect-renew-deadline-ms", 0, kDayMs, &c->lease.renew_deadline));
  f->Add(kLeaderGroup, "--leader-elect-retry-period-ms", "MS",
         absl::StrCat("between tries (default ", c->lease.retry_period.count(), ")"),
         SetMs("--leader-elect-retry-period-ms", 0, kDayMs, &c->lease.retry_period));
  f->Add(kLeaderGroup, "--leader-elect-url", "URL",
         "where the other replicas reach this one, e.g.\n"
         "http://$(POD_IP):32766; followers forward /bind there\n"
         "(default none: followers answer /bind with 503)",
         SetString("--leader-elect-url", &c->lease.url));
  f->Add(kLeaderGroup, "--leader-forward-ca", "FILE",
         "PEM CAs of the leader's certificate for an https\n"
         "leader URL (default: the system's)",
         SetString("--leader-forward-ca", &c->forward_ca));
  f->Add(kLeaderGroup, "--leader-forward-cert", "FILE",
         "the client certificate shown to the leader (default:\n"
         "--tls-cert-file). A replica serving TLS forwards only\n"
         "to an https:// leader URL",
         SetString("--leader-forward-cert", &c->forward_cert));
  f->Add(kLeaderGroup, "--leader-forward-key", "FILE",
         "its key (default: --tls-private-key-file)",
         SetString("--leader-forward-key", &c->forward_key));

  f->Add(kFilesGroup, "--nodes", "FILE", "`kubectl get nodes -o json` (with --pods)",
         SetString("--nodes", &c->nodes));
  f->Add(kFilesGroup, "--pods", "FILE", "`kubectl get pods -A -o json` (with --nodes)",
         SetString("--pods", &c->pods));

  f->Add(kServingGroup, "--address", "A", "listen address (default " + c->address + ")",
         SetString("--address", &c->address));
  f->Add(kServingGroup, "--port", "P",
         absl::StrCat("listen port, 0 = any free one (default ", c->port, ")"),
         [c](const char* v) -> std::string {
           int64_t port = 0;
           if (!ParseInt(v, 0, 65535, &port)) {
             return std::string("--port must be in 0..65535, not ") + (v ? v : "nothing");
           }
           c->port = static_cast<int>(port);
           return "";
         });
  f->Add(kServingGroup, "--port-file", "FILE", "write the port there once listening",
         SetString("--port-file", &c->port_file));
  f->Add(kServingGroup, "--policy", "NAME",
         "placement policy (default " + c->policy +
             "; fgdpack for the\n"
             "fewest stranded GPUs, with --target-workload)",
         SetString("--policy", &c->policy));
  f->Add(kServingGroup, "--target-workload", "FILE",
         "the workload fgd, fgdcpu and fgdpack measure\n"
         "fragmentation against, as JSON (`gpushare\n"
         "typical-tasks --pods PODS.json` writes it)",
         SetString("--target-workload", &c->target_workload));
  f->Add(kServingGroup, "--ttl-ms", "MS",
         absl::StrCat("reservation time-to-live (default ", c->ttl_ms, ")"),
         SetInt("--ttl-ms", "milliseconds", 1, kDayMs, &c->ttl_ms));
  f->Add(kServingGroup, "--plan-deadline-ms", "MS",
         absl::StrCat("the longest a POST /plan searches; then it answers\n"
                      "with what it found, not proven (default ",
                      c->plan_deadline_ms, ")"),
         SetInt("--plan-deadline-ms", "milliseconds", 1, 600'000, &c->plan_deadline_ms));
  AddServingFlags(f, &c->serving);
}

FlagSet MakeFlagSet() {
  return FlagSet("gpushare-extender", "usage: gpushare-extender [flags]   (--flag value or --flag=value)");
}

}  // namespace

void AddServingFlags(FlagSet* f, ServerOptions* options) {
  ServerLimits& l = options->limits;
  auto ms = [](std::chrono::milliseconds m) { return std::to_string(m.count()); };
  f->Add(kServingGroup, "--tls-cert-file", "FILE",
         "serve HTTPS (TLS 1.2+) with this PEM certificate chain",
         SetFile("--tls-cert-file", &options->tls_cert_file));
  f->Add(kServingGroup, "--tls-private-key-file", "FILE",
         "its PEM private key (required with --tls-cert-file)",
         SetFile("--tls-private-key-file", &options->tls_private_key_file));
  f->Add(kServingGroup, "--client-ca-file", "FILE",
         "require client certificates signed by these PEM CAs;\n"
         "without one only GET /healthz and /readyz (probes)",
         SetFile("--client-ca-file", &options->client_ca_file));
  f->Add(kServingGroup, "--access-log", "FILE|-",
         "one line per request: time peer method target status\n"
         "bytes-in bytes-out <microseconds>us (default: none)",
         SetFile("--access-log", &options->access_log));
  f->Add(kLimitsGroup, "--max-body-bytes", "N",
         absl::StrCat("largest request body, else 413 (", l.max_body_bytes >> 20,
                      "Mi; 10,000 full\n"
                      "nodes with nodeCacheCapable: false are ~127Mi)"),
         SetBytes("--max-body-bytes", &l.max_body_bytes));
  f->Add(kLimitsGroup, "--body-budget-bytes", "N",
         absl::StrCat("bodies received or handled at once; beyond it a\n"
                      "request waits, then gets 503 + Retry-After (",
                      l.body_budget_bytes >> 20, "Mi)"),
         SetBytes("--body-budget-bytes", &l.body_budget_bytes));
  f->Add(kLimitsGroup, "--budget-wait-ms", "MS",
         absl::StrCat("how long a request waits for the budget (", ms(l.budget_wait), ")"),
         SetMs("--budget-wait-ms", 0, kDayMs, &l.budget_wait));
  f->Add(kLimitsGroup, "--max-header-bytes", "N",
         absl::StrCat("request line + headers, else 414 / 431 (", l.max_header_bytes >> 10,
                      "Ki)"),
         [&l](const char* v) -> std::string {
           uint64_t n = 0;
           if (!ParseBytes(v, &n) || n < 1024 || n > (1u << 20)) {
             return std::string("--max-header-bytes takes a byte count in 1Ki..1Mi, not ") +
                    (v ? v : "nothing");
           }
           l.max_header_bytes = static_cast<uint32_t>(n);
           return "";
         });
  f->Add(kLimitsGroup, "--header-timeout-ms", "MS",
         absl::StrCat("from a request's first byte to its last header (",
                      ms(l.header_timeout), ")"),
         SetMs("--header-timeout-ms", 0, kDayMs, &l.header_timeout));
  f->Add(kLimitsGroup, "--idle-timeout-ms", "MS",
         absl::StrCat("keep-alive connection idle between requests (", ms(l.idle_timeout), ")"),
         SetMs("--idle-timeout-ms", 0, kDayMs, &l.idle_timeout));
  f->Add(kLimitsGroup, "--min-body-rate", "N",
         absl::StrCat("slowest accepted body or reply, bytes/s (", l.min_body_rate >> 20, "Mi)"),
         SetBytes("--min-body-rate", &l.min_body_rate));
  f->Add(kLimitsGroup, "--max-connections", "N",
         absl::StrCat("open connections; beyond it the longest-waiting idle\n"
                      "or header-reading one is closed (",
                      l.max_connections, ")"),
         SetInt("--max-connections", "a number", 1, 1'000'000, &l.max_connections));
  f->Add(kLimitsGroup, "--trim-bytes", "N",
         absl::StrCat("return freed memory to the OS after bodies and API\n"
                      "lists this large (",
                      l.trim_bytes >> 20, "Mi)"),
         SetBytes("--trim-bytes", &l.trim_bytes));
  f->Add(kLimitsGroup, "--io-threads", "N",
         absl::StrCat("socket I/O threads (", options->io_threads, ")"),
         SetInt("--io-threads", "a number", 1, 256, &options->io_threads));
  f->Add(kLimitsGroup, "--worker-threads", "N",
         absl::StrCat("request-handling threads (", options->worker_threads, ")"),
         SetInt("--worker-threads", "a number", 1, 1024, &options->worker_threads));
  f->Add(kLimitsGroup, "--plan-threads", "N",
         absl::StrCat("threads for POST /plan, apart from the others and at a\n"
                      "lower CPU priority (nice 10) (", options->plan_threads, ")"),
         SetInt("--plan-threads", "a number", 1, 64, &options->plan_threads));
  f->Add(kLimitsGroup, "--max-plans", "N",
         absl::StrCat("plans at once, one per client; beyond: 429 (", options->max_plans, ")"),
         SetInt("--max-plans", "a number", 1, 1024, &options->max_plans));
}

absl::StatusOr<ExtenderConfig> ParseExtenderFlags(int argc, const char* const* argv) {
  ExtenderConfig c;
  FlagSet flags = MakeFlagSet();
  DefineFlags(&flags, &c);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (flags.help_requested() || flags.version_requested()) {
    c.help = flags.help_requested();
    c.version = !c.help;
    return c;
  }
  const bool files = c.files();
  if (files && (c.nodes.empty() || c.pods.empty())) {
    return absl::InvalidArgumentError("--nodes and --pods go together");
  }
  if (files && (!c.apiserver.empty() || !c.kubeconfig.empty())) {
    return absl::InvalidArgumentError(
        "--nodes/--pods and --apiserver/--kubeconfig exclude each other");
  }
  if (files && c.leader_elect) {
    return absl::InvalidArgumentError(
        "--leader-elect needs the Kubernetes API, not --nodes/--pods");
  }
  return c;
}

std::string ExtenderHelp() {
  ExtenderConfig c;
  FlagSet flags = MakeFlagSet();
  DefineFlags(&flags, &c);
  return flags.Help();
}

absl::Status CompleteLeaderElection(ExtenderConfig* config, const std::string& namespace_file) {
  if (!config->leader_elect) return absl::OkStatus();
  LeaseOptions& lease = config->lease;
  if (!config->lease_namespace_given) {
    std::ifstream in(namespace_file);
    std::string ns;
    if (in && std::getline(in, ns)) {
      ns = ns.substr(0, ns.find_first_of(" \n"));
      if (!ns.empty()) lease.namespace_name = ns;
    }
  }
  if (lease.identity.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::random_device rd;
    std::ostringstream id;
    id << host << "_" << std::hex << rd() << rd();
    lease.identity = id.str();
  }
  return ValidateLeaseOptions(lease);
}

}  // namespace gpushare::extender
