// Credential plugins of a kubeconfig (see exec_credential.h).

#include "kubeclient/exec_credential.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace gpushare::kubeclient {
namespace {

// A plugin's answer is a few kilobytes; more is a broken plugin.
constexpr size_t kMaxOutputBytes = 1 << 20;

using Json = nlohmann::json;

std::string Named(const ExecConfig& c) {
  return absl::StrCat(c.where.empty() ? "" : c.where + ": ", "credential plugin '", c.command,
                      "'");
}

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

absl::StatusOr<ExecCredential> ParseExecCredential(std::string_view text,
                                                   const std::string& api_version,
                                                   const std::string& where) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
  };
  if (j.is_discarded() || !j.is_object()) {
    return bad(absl::StrCat("its output is not a JSON object: '", std::string(text.substr(0, 200)), "'"));
  }
  const auto str = [&](const Json& o, const char* key) -> std::optional<std::string> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (str(j, "kind").value_or("") != "ExecCredential") {
    return bad(absl::StrCat("its output has kind '", str(j, "kind").value_or(""),
                            "', not ExecCredential"));
  }
  if (str(j, "apiVersion").value_or("") != api_version) {
    return bad(absl::StrCat("its output has apiVersion '", str(j, "apiVersion").value_or(""),
                            "', not the kubeconfig's ", api_version));
  }
  auto status = j.find("status");
  if (status == j.end() || !status->is_object()) return bad("its output has no status");
  if (str(*status, "clientCertificateData") || str(*status, "clientKeyData")) {
    return bad(
        "it returned a client certificate; gpushare supports credential plugins that return "
        "a token (status.token)");
  }
  ExecCredential c;
  c.token = str(*status, "token").value_or("");
  if (c.token.empty()) return bad("its output has no status.token");
  if (auto ts = str(*status, "expirationTimestamp"); ts && !ts->empty()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, *ts, &t, &err)) {
      return bad(absl::StrCat("status.expirationTimestamp '", *ts, "' is not an RFC 3339 time (",
                              err, ")"));
    }
    c.expiry = absl::ToChronoTime(t);
  }
  return c;
}

absl::StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& config, bool interactive) {
  const std::string name = Named(config);
  Json info = {{"apiVersion", config.api_version},
               {"kind", "ExecCredential"},
               {"spec", {{"interactive", interactive}}}};
  if (!config.cluster_json.empty()) {
    Json cluster = Json::parse(config.cluster_json, nullptr, false);
    if (!cluster.is_discarded()) info["spec"]["cluster"] = std::move(cluster);
  }
  // The environment: ours, then the kubeconfig's entries, then the request.
  std::vector<std::string> env;
  auto overridden = [&](const char* entry) {
    const char* eq = std::strchr(entry, '=');
    const std::string_view key(entry, eq == nullptr ? std::strlen(entry) : eq - entry);
    if (key == "KUBERNETES_EXEC_INFO") return true;
    for (const auto& [k, v] : config.env) {
      if (k == key) return true;
    }
    return false;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!overridden(*e)) env.emplace_back(*e);
  }
  for (const auto& [k, v] : config.env) env.push_back(k + "=" + v);
  env.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_s = {config.command};
  argv_s.insert(argv_s.end(), config.args.begin(), config.args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat(name, ": pipe: ", std::strerror(errno)));
  }
  Fd read_end{pipe_fds[0]};
  Fd write_end{pipe_fds[1]};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.fd, STDOUT_FILENO);
  if (!interactive) posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, config.command.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat(
        name, " cannot be started: ", std::strerror(rc),
        config.install_hint.empty() ? "" : "\n" + config.install_hint));
  }
  close(write_end.fd);
  write_end.fd = -1;

  std::string out;
  bool too_long = false, timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_end.fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = read(read_end.fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // End of output (or an error: the exit status tells).
    out.append(buf, static_cast<size_t>(got));
    if (out.size() > kMaxOutputBytes) {
      too_long = true;
      break;
    }
  }
  if (timed_out || too_long) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        name, " did not finish within ", config.timeout.count(), " ms and was stopped"));
  }
  if (too_long) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " wrote more than ", kMaxOutputBytes, " bytes"));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    const std::string how = WIFEXITED(wstatus)
                                ? absl::StrCat("exited with status ", WEXITSTATUS(wstatus))
                                : absl::StrCat("was killed by signal ", WTERMSIG(wstatus));
    return absl::UnavailableError(absl::StrCat(
        name, " ", how, WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127 && !config.install_hint.empty()
                           ? "\n" + config.install_hint
                           : ""));
  }
  return ParseExecCredential(out, config.api_version, name);
}

ExecCredentialSource::ExecCredentialSource(ExecConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::string> ExecCredentialSource::Get() {
  std::lock_guard lock(mu_);
  if (cached_ && (!cached_->expiry || std::chrono::system_clock::now() + kRefreshMargin <
                                          *cached_->expiry)) {
    return cached_->token;
  }
  const bool terminal = isatty(STDIN_FILENO) == 1;
  if (config_.interactive_mode == "Always" && !terminal) {
    return absl::FailedPreconditionError(absl::StrCat(
        Named(config_), " needs a terminal (interactiveMode: Always), and standard input is not one"));
  }
  const bool interactive = terminal && config_.interactive_mode != "Never";
  ++runs_;
  absl::StatusOr<ExecCredential> c = RunExecPlugin(config_, interactive);
  if (!c.ok()) return c.status();
  cached_ = *std::move(c);
  return cached_->token;
}

void ExecCredentialSource::Invalidate(std::string_view refused) {
  std::lock_guard lock(mu_);
  if (cached_ && !refused.empty() && cached_->token != refused) return;
  cached_.reset();
}

int ExecCredentialSource::runs() const {
  std::lock_guard lock(mu_);
  return runs_;
}

}  // namespace gpushare::kubeclient
