#include "tools/flags/flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpushare/version.h"
#include "src/internal/text.h"

namespace gpushare::flags {
namespace build_info {
// `git describe` of the checkout built (cmake/GitVersion.cmake); "" outside one.
extern const char kGitVersion[];
}  // namespace build_info

namespace {

// Our usage line first, then the sections; no "[OPTIONS]" line of CLI11's.
class UsageFormatter : public CLI::Formatter {
 public:
  UsageFormatter(std::string usage, std::string about)
      : usage_(std::move(usage)), about_(std::move(about)) {}
  std::string make_usage(const CLI::App*, std::string) const override {
    return usage_ + "\n" + (about_.empty() ? "" : about_ + "\n");
  }
  std::string make_description(const CLI::App*) const override { return ""; }

 private:
  const std::string usage_, about_;
};

// "--port" of "-p,--port"; the name itself when it has no long form.
std::string LongName(const std::string& names) {
  const size_t at = names.find("--");
  if (at == std::string::npos) return names;
  return names.substr(at, names.find(',', at) - at);
}

// Every long name of "-p,--port,--listen-port".
std::vector<std::string> LongNames(const std::string& names) {
  std::vector<std::string> out;
  for (absl::string_view name : absl::StrSplit(names, ',')) {
    if (absl::StartsWith(name, "--")) out.emplace_back(name);
  }
  return out;
}

// A value as a message repeats it: "nothing" when missing, a long one cut.
std::string Shown(const char* v) { return v == nullptr ? "nothing" : internal::Echo(v); }

// CLI11 reads "--flag=" as "--flag" and would take the next argument as its
// value; Parse() passes "--flag" and this instead, read back as "".
constexpr char kEmptyValue[] = "\x01(empty)\x01";

}  // namespace

FlagSet::FlagSet(std::string program, std::string usage, std::string about)
    : program_(std::move(program)), app_(std::make_unique<CLI::App>("", program_)) {
  app_->set_help_flag();  // Ours is a plain switch (below), so that parsing never exits.
  app_->allow_extras();   // Reported by Parse() in our words.
  app_->formatter(std::make_shared<UsageFormatter>(std::move(usage), std::move(about)));
  app_->get_formatter()->column_width(30);
  switches_.insert("--help");  // Defined last, so that its section ends --help.
  switches_.insert("--version");
}

FlagSet::~FlagSet() = default;

std::string FlagSet::AddSetter(const std::string& names, Setter set) {
  const std::string key = LongName(names);
  for (const std::string& name : LongNames(names)) keys_[name] = key;
  setters_[key] = std::move(set);
  return key;
}

void FlagSet::Add(const std::string& group, const std::string& name,
                  const std::string& value_name, const std::string& help, Setter set) {
  const std::string key = AddSetter(name, std::move(set));
  app_->add_option_function<std::string>(
          name,
          [this, key](const std::string& v) {
            const char* value = v == kEmptyValue ? "" : v.c_str();
            if (std::string error = setters_.at(key)(value); !error.empty()) {
              throw CLI::ValidationError(error);
            }
          },
          help)
      ->type_name(value_name)
      ->group(group)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void FlagSet::AddRepeated(const std::string& group, const std::string& name,
                          const std::string& value_name, const std::string& help, Setter set) {
  // No callback: RunOrdered() hands the values to `set` after parsing.
  CLI::Option* option = app_->add_option(name, help)
                            ->type_name(value_name)
                            ->group(group)
                            ->allow_extra_args(false)
                            ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ordered_[option] = set;
  AddSetter(name, std::move(set));
}

void FlagSet::AddPositional(const std::string& name, const std::string& help, std::string* out) {
  app_->add_option(name, *out, help)->type_name("");
}

void FlagSet::AddPositionals(const std::string& name, const std::string& help, Setter set) {
  CLI::Option* option = app_->add_option(name, help)
                            ->type_name("")
                            ->expected(0, CLI::detail::expected_max_vector_size)
                            ->allow_extra_args()
                            ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ordered_[option] = std::move(set);
}

void FlagSet::AddSwitch(const std::string& group, const std::string& name,
                        const std::string& help, bool* out) {
  AddSwitch(group, name, help, [out] { *out = true; });
}

void FlagSet::AddSwitch(const std::string& group, const std::string& name,
                        const std::string& help, std::function<void()> on) {
  for (const std::string& long_name : LongNames(name)) switches_.insert(long_name);
  // Called as each is parsed, so that of two switches the later wins.
  app_->add_flag_callback(name, std::move(on), help)->group(group)->trigger_on_parse();
}

absl::Status FlagSet::RunOrdered() const {
  std::map<const CLI::Option*, size_t> next;  // Each option's next result.
  for (const CLI::Option* option : app_->parse_order()) {
    const auto it = ordered_.find(option);
    if (it == ordered_.end()) continue;
    const std::string& v = option->results().at(next[option]++);
    if (std::string error = it->second(v == kEmptyValue ? "" : v.c_str()); !error.empty()) {
      return absl::InvalidArgumentError(error);
    }
  }
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, const char* const* argv) {
  if (app_->get_option_no_throw("--help") == nullptr) {
    app_->add_flag("-h,--help", help_, "this text")->group("Help");
    app_->add_flag("--version", version_, "the version, and the git commit built")->group("Help");
  }
  help_ = false;
  version_ = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      args.push_back(arg);
    } else if (eq == std::string::npos && keys_.count(arg) > 0 && i + 1 < argc) {
      // The next argument is the value, kept whole even when it looks like a
      // flag ("--flag=" or a switch's "--switch=V").
      args.push_back(arg);
      args.push_back(argv[++i]);
    } else if (eq != std::string::npos && switches_.count(name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " takes no value, got '", internal::Echo(arg), "'"));
    } else if (eq == arg.size() - 1 && keys_.count(name) > 0) {
      args.push_back(name);
      args.push_back(kEmptyValue);
    } else {
      args.push_back(arg);
    }
  }
  std::reverse(args.begin(), args.end());  // As CLI11 takes them.
  try {
    app_->parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // The last flag lacks its value: its setter says what it takes.
    const std::string what = e.what();
    for (const auto& [name, set] : setters_) {
      if (what.rfind(name + ":", 0) == 0) {
        std::string error = set(nullptr);
        return absl::InvalidArgumentError(
            error.empty() ? "unknown or incomplete flag " + name : error);
      }
    }
    return absl::InvalidArgumentError(what);
  } catch (const CLI::ParseError& e) {
    if (help_ || version_) return absl::OkStatus();
    return absl::InvalidArgumentError(e.what());
  }
  if (help_ || version_) return absl::OkStatus();
  const std::vector<std::string> left = app_->remaining();
  if (!left.empty()) {
    return absl::InvalidArgumentError("unknown or incomplete flag " + internal::Echo(left[0]));
  }
  return RunOrdered();
}

std::string FlagSet::Help() const {
  if (app_->get_option_no_throw("--help") == nullptr) {
    FlagSet* self = const_cast<FlagSet*>(this);
    app_->add_flag("-h,--help", self->help_, "this text")->group("Help");
    app_->add_flag("--version", self->version_, "the version, and the git commit built")
        ->group("Help");
  }
  return app_->help();
}

std::string FlagSet::Version() const { return VersionLine(program_); }

std::string VersionLine(const std::string& program) {
  const std::string git = build_info::kGitVersion;
  return absl::StrCat(program, " ", gpushare::Version(), git.empty() ? "" : " (git " + git + ")",
                      "\n");
}

FlagSet::Setter SetString(const std::string& flag, std::string* out) {
  return [flag, out](const char* v) -> std::string {
    if (v == nullptr) return flag + " takes a value";
    *out = v;
    return "";
  };
}

bool ParseInt(const char* text, int64_t lo, int64_t hi, int64_t* out) {
  if (text == nullptr || *text == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseBytes(const char* text, uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text) return false;
  const std::string unit(end);
  int shift = 0;
  if (unit == "Ki") {
    shift = 10;
  } else if (unit == "Mi") {
    shift = 20;
  } else if (unit == "Gi") {
    shift = 30;
  } else if (!unit.empty()) {
    return false;
  }
  if (v > (~0ull >> shift)) return false;
  *out = static_cast<uint64_t>(v) << shift;
  return true;
}

FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int64_t* out) {
  return [=](const char* v) -> std::string {
    if (!ParseInt(v, lo, hi, out)) {
      return absl::StrCat(flag, " takes ", what, " in ", lo, "..", hi, ", not ", Shown(v));
    }
    return "";
  };
}

FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int* out) {
  return [=](const char* v) -> std::string {
    int64_t n = 0;
    if (!ParseInt(v, lo, hi, &n)) {
      return absl::StrCat(flag, " takes ", what, " in ", lo, "..", hi, ", not ", Shown(v));
    }
    *out = static_cast<int>(n);
    return "";
  };
}

FlagSet::Setter SetInt(const std::string& flag, int64_t* out) {
  return [=](const char* v) -> std::string {
    if (!ParseInt(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                  out)) {
      return absl::StrCat(flag, " takes a whole number, not ", Shown(v));
    }
    return "";
  };
}

FlagSet::Setter SetInt(const std::string& flag, int* out) {
  return [=](const char* v) -> std::string {
    int64_t n = 0;
    if (!ParseInt(v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), &n)) {
      return absl::StrCat(flag, " takes a whole number, not ", Shown(v));
    }
    *out = static_cast<int>(n);
    return "";
  };
}

FlagSet::Setter SetMs(const std::string& flag, int64_t lo, int64_t hi,
                      std::chrono::milliseconds* out) {
  return [=](const char* v) -> std::string {
    int64_t ms = 0;
    if (!ParseInt(v, lo, hi, &ms)) {
      return absl::StrCat(flag, " takes milliseconds in ", lo, "..", hi, ", not ", Shown(v));
    }
    *out = std::chrono::milliseconds(ms);
    return "";
  };
}

bool ParseDouble(const char* text, double lo, double hi, double* out) {
  if (text == nullptr || *text == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  // ERANGE: too large, or too small to be told from 0.
  if (errno == ERANGE || *end != '\0' || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

FlagSet::Setter SetDouble(const std::string& flag, const std::string& what, double lo, double hi,
                          double* out) {
  return [=](const char* v) -> std::string {
    if (!ParseDouble(v, lo, hi, out)) {
      return absl::StrCat(flag, " takes ", what, " in ", lo, "..", hi, ", not ", Shown(v));
    }
    return "";
  };
}

FlagSet::Setter SetDouble(const std::string& flag, double* out) {
  return [=](const char* v) -> std::string {
    if (!ParseDouble(v, -HUGE_VAL, HUGE_VAL, out)) {
      return absl::StrCat(flag, " takes a number, not ", Shown(v));
    }
    return "";
  };
}

FlagSet::Setter SetBool(const std::string& flag, bool* out) {
  return [=](const char* v) -> std::string {
    const std::string s = v == nullptr ? "" : v;
    if (s == "true" || s == "1") {
      *out = true;
    } else if (s == "false" || s == "0") {
      *out = false;
    } else {
      return flag + " takes true or false, not " + Shown(v);
    }
    return "";
  };
}

void AddKubeconfigFlags(FlagSet* flags, const std::string& group, std::string* kubeconfig,
                        std::string* context) {
  flags->Add(group, "--kubeconfig", "FILE",
             "kubeconfig to use (default: $KUBECONFIG, first file;\n"
             "else the in-cluster service account)",
             SetString("--kubeconfig", kubeconfig));
  flags->Add(group, "--context", "NAME", "kubeconfig context (default: its current-context)",
             SetString("--context", context));
}

}  // namespace gpushare::flags
