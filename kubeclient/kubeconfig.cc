// kubeconfig, in-cluster config and bearer tokens (see kubeconfig.h).

#include "kubeclient/kubeconfig.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpushare::kubeclient {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

// A string field of a YAML map; "" when absent. yaml-cpp throws on a node of
// another shape, so every access is guarded by the caller's try.
std::string Str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  if (!v || v.IsNull()) return "";
  if (!v.IsScalar()) throw YAML::Exception(v.Mark(), std::string(key) + " must be a string");
  return v.as<std::string>();
}

// The entry named `name` of a kubeconfig list (clusters, users, contexts),
// its `field` member (cluster, user, context).
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list, const char* field,
                                 const std::string& name, const std::string& what,
                                 const char* kind) {
  const YAML::Node items = root[list];
  if (items && items.IsSequence()) {
    for (const YAML::Node& item : items) {
      if (item.IsMap() && Str(item, "name") == name) {
        YAML::Node v = item[field];
        if (!v || !v.IsMap()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": ", kind, " '", name, "' has no ", field, " map"));
        }
        return v;
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown ", kind, " '", name, "' (not in ", list, ")"));
}

// PEM text from a `<key>-data` field (base64) or a `<key>` file.
absl::Status Pem(const YAML::Node& map, const std::string& key, const std::string& dir,
                 const std::string& where, std::string* out) {
  const std::string data = Str(map, (key + "-data").c_str());
  if (!data.empty()) {
    if (!absl::Base64Unescape(data, out) || out->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", key, "-data is not valid base64"));
    }
    return absl::OkStatus();
  }
  const std::string file = Str(map, key.c_str());
  if (file.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadWholeFile(Resolve(dir, file));
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(where, ": ", key, ": ", text.status().message()));
  }
  *out = *std::move(text);
  return absl::OkStatus();
}

// A user's exec section; `cluster` gives provideClusterInfo's object.
absl::StatusOr<ExecConfig> ParseExec(const YAML::Node& exec, const std::string& dir,
                                     const RestConfig& cluster, const std::string& where) {
  const std::string exec_where = where + ": exec";
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(exec_where, ": ", why));
  };
  if (!exec.IsMap()) return bad("must be a map");
  ExecConfig e;
  e.where = where;
  e.api_version = Str(exec, "apiVersion");
  if (e.api_version != "client.authentication.k8s.io/v1" &&
      e.api_version != "client.authentication.k8s.io/v1beta1") {
    return bad(absl::StrCat("apiVersion '", e.api_version,
                            "' is not client.authentication.k8s.io/v1 or /v1beta1"));
  }
  e.command = Str(exec, "command");
  if (e.command.empty()) return bad("has no command");
  // As client-go: a relative path with a separator is the kubeconfig's.
  if (e.command.find('/') != std::string::npos) e.command = Resolve(dir, e.command);
  if (const YAML::Node args = exec["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) return bad("args must be a list of strings");
    for (const YAML::Node& a : args) {
      if (!a.IsScalar()) return bad("args must be a list of strings");
      e.args.push_back(a.Scalar());
    }
  }
  if (const YAML::Node env = exec["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) return bad("env must be a list of {name, value}");
    for (const YAML::Node& v : env) {
      if (!v.IsMap() || Str(v, "name").empty()) return bad("env must be a list of {name, value}");
      const std::string name = Str(v, "name");
      if (name.find('=') != std::string::npos) {
        return bad(absl::StrCat("env name '", name, "' holds '='"));
      }
      e.env.emplace_back(name, Str(v, "value"));
    }
  }
  e.install_hint = Str(exec, "installHint");
  const std::string mode = Str(exec, "interactiveMode");
  if (mode.empty()) {
    if (e.api_version == "client.authentication.k8s.io/v1") {
      return bad("interactiveMode is required with apiVersion client.authentication.k8s.io/v1 "
                 "(Never, IfAvailable or Always)");
    }
  } else if (mode != "Never" && mode != "IfAvailable" && mode != "Always") {
    return bad(absl::StrCat("interactiveMode '", mode, "' is not Never, IfAvailable or Always"));
  } else {
    e.interactive_mode = mode;
  }
  if (const YAML::Node p = exec["provideClusterInfo"]; p && !p.IsNull()) {
    bool provide = false;
    if (!p.IsScalar() || !YAML::convert<bool>::decode(p, provide)) {
      return bad("provideClusterInfo must be true or false");
    }
    if (provide) {
      nlohmann::json j = {{"server", cluster.server}};
      if (!cluster.ca_pem.empty()) {
        j["certificate-authority-data"] = absl::Base64Escape(cluster.ca_pem);
      }
      if (!cluster.tls_server_name.empty()) j["tls-server-name"] = cluster.tls_server_name;
      if (cluster.insecure_skip_tls_verify) j["insecure-skip-tls-verify"] = true;
      e.cluster_json = j.dump();
    }
  }
  return e;
}

absl::StatusOr<RestConfig> ParseKubeconfigOrThrow(std::string_view text, const std::string& dir,
                                                  const std::string& context,
                                                  const std::string& what) {
  const YAML::Node root = YAML::Load(std::string(text));
  if (!root.IsMap()) return absl::InvalidArgumentError(what + " is not a kubeconfig map");
  RestConfig c;
  const std::string ctx_name = context.empty() ? Str(root, "current-context") : context;
  if (ctx_name.empty()) {
    return absl::InvalidArgumentError(what + " has no current-context; pass --context");
  }
  absl::StatusOr<YAML::Node> ctx = Named(root, "contexts", "context", ctx_name, what, "context");
  if (!ctx.ok()) return ctx.status();
  const std::string cluster_name = Str(*ctx, "cluster");
  const std::string user_name = Str(*ctx, "user");
  if (cluster_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": context '", ctx_name, "' names no cluster"));
  }
  absl::StatusOr<YAML::Node> cluster =
      Named(root, "clusters", "cluster", cluster_name, what, "cluster");
  if (!cluster.ok()) return cluster.status();
  const std::string cluster_where = absl::StrCat(what, ": cluster '", cluster_name, "'");
  c.server = Str(*cluster, "server");
  if (c.server.empty()) return absl::InvalidArgumentError(cluster_where + " has no server");
  if (absl::Status s = Pem(*cluster, "certificate-authority", dir, cluster_where, &c.ca_pem);
      !s.ok()) {
    return s;
  }
  const YAML::Node insecure = (*cluster)["insecure-skip-tls-verify"];
  if (insecure && !insecure.IsNull()) {
    // A YAML boolean, as client-go reads it; a quoted "yes" or "true" is a
    // string there and an error, never a way to turn verification off.
    bool v = false;
    const bool quoted = insecure.IsScalar() && insecure.Tag() == "!";
    if (!insecure.IsScalar() || quoted || !YAML::convert<bool>::decode(insecure, v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          cluster_where, ": insecure-skip-tls-verify must be a YAML boolean (true or false), not ",
          quoted ? "the string " : "", "'", insecure.IsScalar() ? insecure.Scalar() : "(not a scalar)",
          "'"));
    }
    c.insecure_skip_tls_verify = v;
  }
  if (c.insecure_skip_tls_verify) {
    c.warnings.push_back(cluster_where +
                         " sets insecure-skip-tls-verify: the API server's certificate is NOT "
                         "verified; anyone on the path can impersonate it");
  }
  c.tls_server_name = Str(*cluster, "tls-server-name");
  if (!user_name.empty()) {
    absl::StatusOr<YAML::Node> user = Named(root, "users", "user", user_name, what, "user");
    if (!user.ok()) return user.status();
    const std::string user_where = absl::StrCat(what, ": user '", user_name, "'");
    for (const char* unsupported : {"auth-provider", "username", "password"}) {
      if ((*user)[unsupported]) {
        return absl::InvalidArgumentError(absl::StrCat(
            user_where, " uses ", unsupported,
            ", which gpushare does not support; give it a token, tokenFile, an exec credential "
            "plugin or a client certificate"));
      }
    }
    if (absl::Status s = Pem(*user, "client-certificate", dir, user_where, &c.client_cert_pem);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Pem(*user, "client-key", dir, user_where, &c.client_key_pem); !s.ok()) {
      return s;
    }
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      return absl::InvalidArgumentError(
          user_where + " has a client certificate without a key, or a key without a certificate");
    }
    c.token = Str(*user, "token");
    const std::string token_file = Str(*user, "tokenFile");
    if (!token_file.empty()) c.token_file = Resolve(dir, token_file);
    if (const YAML::Node exec = (*user)["exec"]; exec && !exec.IsNull()) {
      if (!c.token.empty() || !c.token_file.empty()) {
        return absl::InvalidArgumentError(
            user_where + " has both a token (token or tokenFile) and exec; keep one");
      }
      absl::StatusOr<ExecConfig> e = ParseExec(exec, dir, c, user_where);
      if (!e.ok()) return e.status();
      c.exec = *std::move(e);
    }
  }
  c.source = absl::StrCat(what, ", context ", ctx_name);
  return c;
}

}  // namespace

absl::StatusOr<RestConfig> ParseKubeconfig(std::string_view text, const std::string& dir,
                                           const std::string& context, const std::string& what) {
  try {
    return ParseKubeconfigOrThrow(text, dir, context, what);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is malformed: ", e.what()));
  }
}

absl::StatusOr<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("kubeconfig: ", text.status().message()));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return ParseKubeconfig(*text, dir.empty() ? "/" : dir, context, "kubeconfig " + path);
}

absl::StatusOr<RestConfig> InClusterConfig(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return absl::FailedPreconditionError(
        "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; "
        "pass --kubeconfig FILE or --apiserver URL");
  }
  RestConfig c;
  const std::string h = host;
  c.server = absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":",
                          port);
  c.token_file = dir + "/token";
  absl::StatusOr<std::string> token = ReadWholeFile(c.token_file);
  if (!token.ok()) {
    return absl::NotFoundError(absl::StrCat("in-cluster: ", token.status().message()));
  }
  absl::StatusOr<std::string> ca = ReadWholeFile(dir + "/ca.crt");
  if (!ca.ok()) return absl::NotFoundError(absl::StrCat("in-cluster: ", ca.status().message()));
  c.ca_pem = *std::move(ca);
  c.source = "in-cluster service account " + dir;
  return c;
}

absl::StatusOr<RestConfig> ResolveRestConfig(const ConfigFlags& flags) {
  std::string path = flags.kubeconfig;
  std::vector<std::string> warnings;
  if (path.empty() && flags.apiserver.empty()) {
    if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
      std::vector<std::string> files = absl::StrSplit(env, ':', absl::SkipEmpty());
      if (!files.empty()) path = files[0];
      if (files.size() > 1) {
        warnings.push_back("KUBECONFIG lists " + std::to_string(files.size()) +
                           " files; only the first, " + path + ", is read");
      }
    }
  }
  absl::StatusOr<RestConfig> c = absl::UnknownError("unset");
  if (!path.empty()) {
    c = LoadKubeconfig(path, flags.context);
  } else if (!flags.apiserver.empty()) {
    c = RestConfig{};
    c->source = "--apiserver";
  } else {
    if (!flags.context.empty()) {
      return absl::InvalidArgumentError("--context " + flags.context +
                                        " needs a kubeconfig (--kubeconfig or KUBECONFIG)");
    }
    c = InClusterConfig();
  }
  if (!c.ok()) return c.status();
  if (!flags.apiserver.empty()) {
    c->server = flags.apiserver;
    if (!path.empty()) c->source += ", server from --apiserver";
  }
  if (c->server.rfind("http://", 0) == 0 &&
      (!c->token.empty() || !c->token_file.empty() || !c->exec.empty())) {
    warnings.push_back("the bearer token goes over plain HTTP to " + c->server);
  }
  c->warnings.insert(c->warnings.begin(), warnings.begin(), warnings.end());
  return c;
}

absl::StatusOr<std::string> TokenSource::Get() {
  if (exec_ != nullptr) return exec_->Get();
  if (file_.empty()) return token_;
  std::lock_guard lock(mu_);
  struct stat st;
  std::string stamp;
  if (stat(file_.c_str(), &st) == 0) {
    stamp = absl::StrCat(st.st_ino, "/", st.st_size, "/", st.st_mtim.tv_sec, ".",
                         st.st_mtim.tv_nsec);
  }
  if (!stamp.empty() && stamp == stamp_) return cached_;
  absl::StatusOr<std::string> text = ReadWholeFile(file_);
  if (text.ok()) {
    cached_ = std::string(absl::StripAsciiWhitespace(*text));
    stamp_ = stamp;
    return cached_;
  }
  if (!cached_.empty()) return cached_;  // Mid-rotation: keep the last one.
  if (!token_.empty()) return token_;
  return absl::NotFoundError(absl::StrCat("bearer token: ", text.status().message()));
}

void TokenSource::Invalidate(std::string_view refused) {
  if (exec_ != nullptr) return exec_->Invalidate(refused);
  std::lock_guard lock(mu_);
  stamp_.clear();
}

}  // namespace gpushare::kubeclient
