#include "tools/flags/flags.h"

#include <cerrno>
#include <cstdlib>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"

namespace gpushare::flags {

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

std::string Shown(const char* v) { return v == nullptr ? "nothing" : v; }

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
}

FlagSet::~FlagSet() = default;

void FlagSet::Add(const std::string& group, const std::string& name,
                  const std::string& value_name, const std::string& help, Setter set) {
  const std::string key = LongName(name);
  setters_[key] = std::move(set);
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

void FlagSet::AddPositional(const std::string& name, const std::string& help, std::string* out) {
  app_->add_option(name, *out, help)->type_name("");
}

void FlagSet::AddSwitch(const std::string& group, const std::string& name,
                        const std::string& help, bool* out) {
  app_->add_flag(name, *out, help)->group(group);
}

absl::Status FlagSet::Parse(int argc, const char* const* argv) {
  if (app_->get_option_no_throw("--help") == nullptr) {
    app_->add_flag("-h,--help", help_, "this text")->group("Help");
  }
  help_ = false;
  std::vector<std::string> args;  // Reversed, as CLI11 takes them.
  for (int i = argc - 1; i >= 1; --i) {
    const std::string arg = argv[i];
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1 &&
        setters_.count(arg.substr(0, arg.size() - 1)) > 0) {
      args.push_back(kEmptyValue);
      args.push_back(arg.substr(0, arg.size() - 1));
    } else {
      args.push_back(arg);
    }
  }
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
    if (help_) return absl::OkStatus();
    return absl::InvalidArgumentError(e.what());
  }
  if (help_) return absl::OkStatus();
  const std::vector<std::string> left = app_->remaining();
  if (!left.empty()) return absl::InvalidArgumentError("unknown or incomplete flag " + left[0]);
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  if (app_->get_option_no_throw("--help") == nullptr) {
    app_->add_flag("-h,--help", const_cast<FlagSet*>(this)->help_, "this text")->group("Help");
  }
  return app_->help();
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

}  // namespace gpushare::flags
