#include "cli/args.h"

#include <algorithm>
#include <iostream>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gpushare/gpushare.h"
#include "src/internal/text.h"

namespace gpushare::cli {

std::vector<std::string> PaperPolicies() { return absl::StrSplit(kPaperPolicies, ','); }

std::vector<uint64_t> DefaultSeeds() {
  std::vector<uint64_t> seeds;
  ParseSeeds(kDefaultSeeds, &seeds);
  return seeds;
}

std::string ParseSeeds(const std::string& text, std::vector<uint64_t>* seeds) {
  const std::string shown = absl::StrCat("--seeds '", internal::Echo(text), "'");
  std::set<uint64_t> seen;
  auto add = [&](uint64_t seed) -> std::string {
    if (!seen.insert(seed).second) {
      return absl::StrCat(shown, " lists seed ", seed, " twice");
    }
    if (seeds->size() >= kMaxSeeds) {
      return absl::StrCat(shown, " gives more than ", kMaxSeeds, " seeds");
    }
    seeds->push_back(seed);
    return "";
  };
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    uint64_t a = 0, b = 0;
    if (range.size() == 1 && absl::SimpleAtoi(range[0], &a)) {
      if (std::string e = add(a); !e.empty()) return e;
    } else if (range.size() == 2 && absl::SimpleAtoi(range[0], &a) &&
               absl::SimpleAtoi(range[1], &b) && a <= b) {
      // b - a + 1 may not fit in 64 bits (0-18446744073709551615): compare
      // the difference, and count rather than loop to b, which would wrap.
      if (b - a >= kMaxSeeds) {
        return absl::StrCat(shown, ": the range ", a, "-", b, " has more than ", kMaxSeeds,
                            " seeds");
      }
      for (uint64_t i = 0; i <= b - a; ++i) {
        if (std::string e = add(a + i); !e.empty()) return e;
      }
    } else {
      return absl::StrCat(shown, " is not A-B or A,B,... (seeds are integers 0..",
                          UINT64_MAX, ", a range A-B has A <= B)");
    }
  }
  if (seeds->empty()) return absl::StrCat(shown, " gives no seeds");
  return "";
}

std::string ParsePolicies(const std::string& text, std::vector<std::string>* names) {
  // An empty list would run nothing and print an empty table.
  const std::vector<std::string> known = PolicyNames();
  *names = absl::StrSplit(text, ',', absl::SkipEmpty());
  std::string bad;
  if (names->empty()) bad = absl::StrCat("--policies '", internal::Echo(text), "' names no policy");
  for (const std::string& name : *names) {
    if (bad.empty() && std::find(known.begin(), known.end(), name) == known.end()) {
      bad = absl::StrCat("--policies: unknown policy '", internal::Echo(name), "'");
    }
  }
  if (bad.empty()) return "";
  return absl::StrCat(bad, "; known policies: ", absl::StrJoin(known, ","));
}

flags::FlagSet::Setter SetSeeds(std::vector<uint64_t>* out) {
  return [out](const char* v) -> std::string {
    if (v == nullptr) return "--seeds takes a value";
    std::vector<uint64_t> seeds;
    if (std::string error = ParseSeeds(v, &seeds); !error.empty()) return error;
    *out = std::move(seeds);
    return "";
  };
}

flags::FlagSet::Setter SetPolicies(std::vector<std::string>* out) {
  return [out](const char* v) -> std::string {
    if (v == nullptr) return "--policies takes a value";
    std::vector<std::string> names;
    if (std::string error = ParsePolicies(v, &names); !error.empty()) return error;
    *out = std::move(names);
    return "";
  };
}

void AddExperimentFlags(flags::FlagSet* f, const std::string& group,
                        const std::string& policies_flag, std::vector<std::string>* policies,
                        std::vector<uint64_t>* seeds, int* threads) {
  f->Add(group, policies_flag, "LIST",
         absl::StrCat("comma-separated policy names (default: the six\n"
                      "of the FGD paper,\n",
                      kPaperPolicies, ")"),
         SetPolicies(policies));
  f->Add(group, "--seeds", "A-B|A,B,..",
         absl::StrCat("seeds, each at most once, at most ", kMaxSeeds, "\n(default ",
                      kDefaultSeeds, ")"),
         SetSeeds(seeds));
  f->Add(group, "--threads", "N", "worker threads (default 0: all cores)",
         flags::SetInt("--threads", "a count", 0, std::numeric_limits<int>::max(), threads));
}

std::optional<int> ExitBeforeRunning(const char* command, const absl::Status& parsed, bool help,
                                     std::string (*help_text)()) {
  if (!parsed.ok()) {
    std::cerr << "gpushare " << command << ": " << parsed.message() << "\n(gpushare " << command
              << " --help lists the flags)\n";
    return 2;
  }
  if (help) {
    std::cout << help_text();
    return 0;
  }
  return std::nullopt;
}

}  // namespace gpushare::cli
