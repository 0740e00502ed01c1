// The list-then-watch state machine against recorded streams: events cut at
// every byte, bookmarks, 410 Gone (as an event and as a reply), other ERROR
// events, malformed lines, dropped connections, and RunReflector() over a
// scripted transport converging to the API server's objects.

#include "kubeclient/reflector.h"

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::kubeclient {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Verdict = Reflector::Verdict;

json Pod(const std::string& name, const std::string& rv, const std::string& uid = "") {
  return json{{"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", "default"},
                {"uid", uid.empty() ? "uid-" + name : uid},
                {"resourceVersion", rv}}}};
}

std::string Event(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

std::string Bookmark(const std::string& rv) {
  return Event("BOOKMARK", json{{"kind", "Pod"}, {"metadata", {{"resourceVersion", rv}}}});
}

std::string Gone() {
  return Event("ERROR", json{{"kind", "Status"},
                             {"status", "Failure"},
                             {"message", "too old resource version: 5 (90)"},
                             {"reason", "Expired"},
                             {"code", 410}});
}

std::string List(const std::vector<json>& items, const std::string& rv) {
  return json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", rv}}}, {"items", items}}
      .dump();
}

// Records what the handler saw, and the state it converges to.
struct Recorder {
  std::vector<std::string> log;               // "TYPE name@rv".
  std::map<std::string, std::string> state;   // name -> resourceVersion.
  Reflector::Handler Handler() {
    return [this](const std::string& type, const std::string& object) {
      json o = json::parse(object);
      const std::string name = o["metadata"]["name"];
      const std::string rv = o["metadata"].value("resourceVersion", "");
      log.push_back(type + " " + name + "@" + rv);
      if (type == "DELETED") {
        state.erase(name);
      } else {
        state[name] = rv;
      }
    };
  }
};

TEST(ReflectorTest, AppliesEventsCutAtAnyByte) {
  const std::string stream = Event("ADDED", Pod("a", "11")) + Bookmark("12") +
                             Event("MODIFIED", Pod("a", "13")) + "\r\n" +
                             Event("ADDED", Pod("b", "14")) + Event("DELETED", Pod("a", "15"));
  std::vector<std::string> want;
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    for (size_t second = cut; second <= stream.size(); second += 37) {
      Recorder rec;
      Reflector r("/api/v1/pods", rec.Handler());
      ASSERT_OK(r.ApplyList(List({}, "10")));
      r.StartWatch();
      ASSERT_EQ(r.OnWatchData(stream.substr(0, cut)), Verdict::kContinue);
      ASSERT_EQ(r.OnWatchData(stream.substr(cut, second - cut)), Verdict::kContinue);
      ASSERT_EQ(r.OnWatchData(stream.substr(second)), Verdict::kContinue);
      EXPECT_THAT(rec.log, ElementsAre("ADDED a@11", "MODIFIED a@13", "ADDED b@14", "DELETED a@15"))
          << "cut at " << cut << " and " << second;
      EXPECT_EQ(r.resource_version(), "15");
      EXPECT_EQ(r.Snapshot().size(), 1u);
    }
  }
  // One byte at a time.
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({}, "10")));
  r.StartWatch();
  for (char c : stream) ASSERT_EQ(r.OnWatchData(std::string(1, c)), Verdict::kContinue);
  EXPECT_EQ(rec.log.size(), 4u);
}

TEST(ReflectorTest, BookmarksMoveTheResourceVersionOnly) {
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({Pod("a", "3")}, "7"), /*notify=*/false));
  EXPECT_TRUE(rec.log.empty());  // The state was built from this list.
  EXPECT_EQ(r.WatchPath(60),
            "/api/v1/pods?watch=1&resourceVersion=7&allowWatchBookmarks=true&timeoutSeconds=60");
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData(Bookmark("42")), Verdict::kContinue);
  EXPECT_TRUE(rec.log.empty());
  EXPECT_EQ(r.resource_version(), "42");
  EXPECT_THAT(r.WatchPath(1), HasSubstr("resourceVersion=42&"));
}

TEST(ReflectorTest, GoneMidStreamRelistsAndTheListIsAppliedAsADifference) {
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({Pod("a", "1"), Pod("b", "2"), Pod("c", "3")}, "3")));
  EXPECT_THAT(rec.log, ElementsAre("ADDED a@1", "ADDED b@2", "ADDED c@3"));
  rec.log.clear();
  r.StartWatch();
  // Events after the ERROR in the same chunk are not applied.
  EXPECT_EQ(r.OnWatchData(Event("MODIFIED", Pod("a", "4")) + Gone() +
                          Event("DELETED", Pod("b", "9"))),
            Verdict::kRelist);
  EXPECT_EQ(r.OnWatchData(Event("ADDED", Pod("z", "10"))), Verdict::kRelist);
  EXPECT_EQ(r.OnWatchEnd(absl::CancelledError("stopped")), Verdict::kRelist);
  EXPECT_TRUE(r.needs_list());
  EXPECT_THAT(r.status(), HasSubstr("410"));
  EXPECT_THAT(rec.log, ElementsAre("MODIFIED a@4"));
  rec.log.clear();
  // Meanwhile: b deleted, c recreated (new UID), a modified again, d added.
  ASSERT_OK(r.ApplyList(
      List({Pod("a", "20"), Pod("c", "21", "uid-c2"), Pod("d", "22")}, "25")));
  // Deletions first (they free what additions may need), then by name.
  EXPECT_THAT(rec.log, ElementsAre("DELETED b@2", "DELETED c@3", "MODIFIED a@20", "ADDED c@21",
                                   "ADDED d@22"));
  EXPECT_EQ(r.resource_version(), "25");
  EXPECT_FALSE(r.needs_list());
  // An unchanged list reports nothing.
  rec.log.clear();
  ASSERT_OK(r.ApplyList(List({Pod("a", "20"), Pod("c", "21", "uid-c2"), Pod("d", "22")}, "26")));
  EXPECT_TRUE(rec.log.empty());
}

TEST(ReflectorTest, GoneAsAReplyRelists) {
  Reflector r("/api/v1/nodes", nullptr);
  ASSERT_OK(r.ApplyList(List({}, "5")));
  r.StartWatch();
  EXPECT_EQ(r.OnWatchEnd(absl::OutOfRangeError("HTTP 410")), Verdict::kRelist);
  EXPECT_TRUE(r.needs_list());
}

TEST(ReflectorTest, OtherErrorsAndMalformedLinesRewatchFromTheLastVersion) {
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({}, "5")));
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData(Event("ADDED", Pod("a", "6")) +
                          Event("ERROR", json{{"kind", "Status"}, {"code", 500},
                                              {"message", "etcd is sad"}}) +
                          Event("ADDED", Pod("b", "7"))),
            Verdict::kRewatch);
  EXPECT_EQ(r.OnWatchEnd(absl::CancelledError("stopped")), Verdict::kRewatch);
  EXPECT_FALSE(r.needs_list());
  EXPECT_EQ(r.resource_version(), "6");
  EXPECT_THAT(r.status(), HasSubstr("etcd is sad"));
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"}\n"),
            Verdict::kRewatch);
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData(Event("SURPRISE", Pod("s", "8"))), Verdict::kRewatch);
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData(Event("ADDED", json{{"metadata", {{"resourceVersion", "8"}}}})),
            Verdict::kRewatch);
  EXPECT_THAT(rec.log, ElementsAre("ADDED a@6"));
  EXPECT_EQ(r.resource_version(), "6");
}

TEST(ReflectorTest, ADroppedConnectionLosesOnlyTheCutEvent) {
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({}, "5")));
  r.StartWatch();
  const std::string b = Event("ADDED", Pod("b", "7"));
  EXPECT_EQ(r.OnWatchData(Event("ADDED", Pod("a", "6")) + b.substr(0, 20)), Verdict::kContinue);
  EXPECT_EQ(r.OnWatchEnd(absl::UnavailableError("connection reset")), Verdict::kRewatch);
  EXPECT_EQ(r.resource_version(), "6");
  // The next watch, from 6, delivers b whole; the cut piece is gone.
  r.StartWatch();
  EXPECT_EQ(r.OnWatchData(b), Verdict::kContinue);
  EXPECT_THAT(rec.log, ElementsAre("ADDED a@6", "ADDED b@7"));
  // A clean end (timeoutSeconds) just watches again.
  EXPECT_EQ(r.OnWatchEnd(absl::OkStatus()), Verdict::kContinue);
}

TEST(ReflectorTest, MalformedListsChangeNothing) {
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ASSERT_OK(r.ApplyList(List({Pod("a", "1")}, "3")));
  EXPECT_THAT(r.ApplyList("{"), ::gpushare::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      r.ApplyList(List({json{{"metadata", json::object()}}}, "9")),
      ::gpushare::testing::StatusIs(absl::StatusCode::kInvalidArgument, "no metadata.name"));
  EXPECT_EQ(r.resource_version(), "3");
  EXPECT_EQ(r.Snapshot().size(), 1u);
  EXPECT_EQ(rec.log.size(), 1u);
}

// ---- RunReflector over a scripted transport ----------------------------------------

struct Step {
  std::string expect_prefix;  // The request path starts with this.
  absl::StatusOr<std::string> reply;  // A list body, or the watch stream.
  absl::Status end = absl::OkStatus();  // How a watch ends.
};

class ScriptedTransport : public WatchTransport {
 public:
  ScriptedTransport(std::deque<Step> steps, std::atomic<bool>* stop)
      : steps_(std::move(steps)), stop_(stop) {}

  absl::StatusOr<std::string> List(const std::string& path) override {
    Step s = Next(path);
    return s.reply;
  }
  absl::Status Watch(const std::string& path,
                     const std::function<bool(std::string_view)>& on_data) override {
    Step s = Next(path);
    if (!s.reply.ok()) return s.reply.status();
    // Deliver in awkward 7-byte chunks.
    for (size_t i = 0; i < s.reply->size(); i += 7) {
      if (!on_data(std::string_view(*s.reply).substr(i, 7))) {
        return absl::CancelledError("stopped");
      }
    }
    now_ += std::chrono::seconds(2);
    return s.end;
  }
  void Sleep(std::chrono::milliseconds d) override {
    sleeps.push_back(d);
    now_ += d;
  }
  std::chrono::steady_clock::time_point Now() override { return now_; }

  std::vector<std::string> paths;
  std::vector<std::chrono::milliseconds> sleeps;

 private:
  Step Next(const std::string& path) {
    paths.push_back(path);
    if (steps_.empty()) {
      stop_->store(true);
      return Step{"", absl::CancelledError("script over")};
    }
    Step s = std::move(steps_.front());
    steps_.pop_front();
    EXPECT_EQ(path.rfind(s.expect_prefix, 0), 0u) << path << " vs " << s.expect_prefix;
    return s;
  }

  std::deque<Step> steps_;
  std::atomic<bool>* stop_;
  std::chrono::steady_clock::time_point now_{};
};

TEST(RunReflectorTest, ConvergesThroughDropsGoneAndErrors) {
  std::atomic<bool> stop{false};
  const std::string w = "/api/v1/pods?watch=1&resourceVersion=";
  ScriptedTransport t(
      {
          {"/api/v1/pods", absl::UnavailableError("apiserver starting")},
          {"/api/v1/pods", List({Pod("a", "1"), Pod("b", "2")}, "2")},
          // Dropped mid-event.
          {w + "2&", Event("ADDED", Pod("c", "3")) + "{\"type\":\"ADD",
           absl::UnavailableError("reset")},
          // Refused: 410 as a reply.
          {w + "3&", absl::OutOfRangeError("HTTP 410 Gone")},
          {"/api/v1/pods", List({Pod("a", "1"), Pod("c", "3"), Pod("d", "8")}, "8")},
          {w + "8&", Bookmark("9") + Event("MODIFIED", Pod("d", "10")) + Gone()},
          {"/api/v1/pods", List({Pod("d", "11"), Pod("e", "12")}, "12")},
          {w + "12&", Event("DELETED", Pod("d", "13"))},
      },
      &stop);
  Recorder rec;
  Reflector r("/api/v1/pods", rec.Handler());
  ReflectorOptions options;
  options.resync = std::chrono::hours(1);
  RunReflector(r, t, options, stop);
  // The handler's state is the API server's last state: only e.
  EXPECT_EQ(rec.state, (std::map<std::string, std::string>{{"e", "12"}}));
  EXPECT_EQ(r.resource_version(), "13");
  // Backoffs after the failed list, the drop, and nothing after 410s.
  ASSERT_EQ(t.sleeps.size(), 2u);
  EXPECT_GE(t.sleeps[0], std::chrono::milliseconds(375));
  EXPECT_GE(t.sleeps[1], std::chrono::milliseconds(375));
  EXPECT_TRUE(r.synced());
}

TEST(RunReflectorTest, ListsAgainWhenTheResyncIsDue) {
  std::atomic<bool> stop{false};
  const std::string w = "/api/v1/nodes?watch=1&resourceVersion=";
  ScriptedTransport t(
      {
          {"/api/v1/nodes", List({Pod("n1", "1")}, "1")},
          // The watch is cut short to the resync (10 s) and ends cleanly.
          {w + "1&allowWatchBookmarks=true&timeoutSeconds=10", std::string()},
          {w + "1&allowWatchBookmarks=true&timeoutSeconds=8", std::string()},
          {w + "1&allowWatchBookmarks=true&timeoutSeconds=6", std::string()},
          {w + "1&allowWatchBookmarks=true&timeoutSeconds=4", std::string()},
          {w + "1&allowWatchBookmarks=true&timeoutSeconds=2", std::string()},
          {"/api/v1/nodes", List({Pod("n2", "5")}, "5")},
          {w + "5&", std::string()},
      },
      &stop);
  Recorder rec;
  Reflector r("/api/v1/nodes", rec.Handler());
  ReflectorOptions options;
  options.resync = std::chrono::seconds(10);
  RunReflector(r, t, options, stop);
  EXPECT_EQ(rec.state, (std::map<std::string, std::string>{{"n2", "5"}}));
  EXPECT_TRUE(t.sleeps.empty());
}

}  // namespace
}  // namespace gpushare::kubeclient
