// Leader election over a fake coordination.k8s.io/v1 Lease API that enforces
// optimistic concurrency (409 on a stale resourceVersion), with fake clocks:
// one leader at a time, takeover only after the lease duration, a holder
// that cannot renew stops binding before anyone else may take over, release
// on shutdown, and binding only after the new leader's resync.

#include "kubeclient/leader.h"

#include <chrono>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::kubeclient {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kPath[] = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpushare-extender";
constexpr char kCollection[] = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

// One Lease as kube-apiserver keeps it.
struct FakeLeaseApi {
  std::optional<json> lease;
  int64_t rv = 0;
  bool down = false;  // Every call fails (a partition).
  int writes = 0;

  absl::StatusOr<std::string> Call(http::verb m, const std::string& path, const std::string& body) {
    if (down) return absl::UnavailableError("connection refused");
    if (m == http::verb::get) {
      if (path != kPath) return absl::InvalidArgumentError("bad path " + path);
      if (!lease) return absl::NotFoundError("leases \"gpushare-extender\" not found");
      return lease->dump();
    }
    json in = json::parse(body);
    if (m == http::verb::post) {
      if (path != kCollection) return absl::InvalidArgumentError("bad path " + path);
      if (lease) return absl::AlreadyExistsError("already exists");
    } else if (m == http::verb::put) {
      if (path != kPath || !lease) return absl::NotFoundError("not found");
      if (in["metadata"].value("resourceVersion", "") !=
          (*lease)["metadata"]["resourceVersion"].get<std::string>()) {
        return absl::AlreadyExistsError("409 Conflict: the object has been modified");
      }
    } else {
      return absl::InvalidArgumentError("unexpected method");
    }
    in["metadata"]["resourceVersion"] = std::to_string(++rv);
    lease = in;
    ++writes;
    return lease->dump();
  }
  std::string holder() const { return lease ? (*lease)["spec"].value("holderIdentity", "") : ""; }
};

struct Replica {
  Replica(FakeLeaseApi* api, const std::string& id, Clock::time_point* now)
      : elector(Options(id),
                [api](http::verb m, const std::string& p, const std::string& b) {
                  return api->Call(m, p, b);
                },
                [now] { return *now; }) {}
  static LeaseOptions Options(const std::string& id) {
    LeaseOptions o;
    o.identity = id;
    return o;
  }
  LeaderElector elector;
};

class LeaderTest : public ::testing::Test {
 protected:
  void Advance(milliseconds d) { now += d; }
  // Both replicas do a round every retry period for `d`; returns the first
  // time (since the start) at which b became the leader, if it did.
  std::optional<milliseconds> Rounds(milliseconds d, bool a_alive) {
    for (milliseconds t{0}; t < d; t += milliseconds(2000)) {
      Advance(milliseconds(2000));
      if (a_alive) a.elector.TryAcquireOrRenew();
      if (b.elector.TryAcquireOrRenew()) return t + milliseconds(2000);
    }
    return std::nullopt;
  }

  FakeLeaseApi api;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  Replica a{&api, "replica-a", &now};
  Replica b{&api, "replica-b", &now};
};

TEST(LeaseOptionsTest, RejectsInconsistentDurations) {
  LeaseOptions o;
  o.identity = "x";
  EXPECT_TRUE(ValidateLeaseOptions(o).ok());
  o.renew_deadline = milliseconds(15'000);
  absl::Status s = ValidateLeaseOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("15000 ms"), std::string::npos) << s;
  o = LeaseOptions();
  o.identity = "x";
  o.lease_duration = milliseconds(15'500);
  EXPECT_NE(ValidateLeaseOptions(o).message().find("15500"), std::string::npos);
  o = LeaseOptions();
  EXPECT_NE(ValidateLeaseOptions(o).message().find("identity"), std::string::npos);
}

TEST_F(LeaderTest, TheFirstReplicaCreatesTheLeaseAndTheOtherFollows) {
  EXPECT_TRUE(a.elector.TryAcquireOrRenew());
  EXPECT_FALSE(b.elector.TryAcquireOrRenew());
  EXPECT_EQ(api.holder(), "replica-a");
  EXPECT_TRUE(a.elector.is_leader());
  EXPECT_FALSE(b.elector.is_leader());
  EXPECT_EQ(b.elector.holder(), "replica-a");
  EXPECT_EQ(b.elector.Describe(), "follower (leader: replica-a)");
  const json lease = *api.lease;
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  EXPECT_EQ(lease["spec"]["renewTime"].get<std::string>().size(), 27u);  // ...ss.uuuuuuZ
}

TEST_F(LeaderTest, BindingWaitsForTheResyncOfANewTenure) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  EXPECT_TRUE(a.elector.is_leader());
  EXPECT_FALSE(a.elector.may_bind());
  EXPECT_EQ(a.elector.Describe(), "leader (syncing state from the API server)");
  a.elector.MarkSynced();
  EXPECT_TRUE(a.elector.may_bind());
  // Renewals keep the tenure (and the sync).
  Advance(milliseconds(2000));
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  EXPECT_TRUE(a.elector.may_bind());
  // A follower cannot be marked synced.
  b.elector.TryAcquireOrRenew();
  b.elector.MarkSynced();
  EXPECT_FALSE(b.elector.may_bind());
}

TEST_F(LeaderTest, ARenewingLeaderKeepsTheLease) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  EXPECT_EQ(Rounds(milliseconds(60'000), /*a_alive=*/true), std::nullopt);
  EXPECT_EQ(api.holder(), "replica-a");
  EXPECT_EQ((*api.lease)["spec"]["leaseTransitions"], 0);
}

TEST_F(LeaderTest, AFollowerTakesOverADeadLeaderAfterTheLeaseDuration) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  ASSERT_FALSE(b.elector.TryAcquireOrRenew());  // b observes a's record now.
  // a dies: no more renewals. b takes over once 15 s passed on its own clock
  // since it saw the record change last, not before.
  std::optional<milliseconds> took = Rounds(milliseconds(30'000), /*a_alive=*/false);
  ASSERT_TRUE(took.has_value());
  EXPECT_GE(*took, milliseconds(15'000));
  EXPECT_LE(*took, milliseconds(15'000) + milliseconds(2000));
  EXPECT_EQ(api.holder(), "replica-b");
  EXPECT_EQ((*api.lease)["spec"]["leaseTransitions"], 1);
  EXPECT_EQ(b.elector.transitions(), 1);
  // The old leader comes back: it sees b's lease and follows.
  EXPECT_FALSE(a.elector.TryAcquireOrRenew());
  EXPECT_FALSE(a.elector.is_leader());
}

TEST_F(LeaderTest, ALeaderThatCannotRenewStopsBindingBeforeAnyoneMayTakeOver) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  a.elector.MarkSynced();
  ASSERT_FALSE(b.elector.TryAcquireOrRenew());
  const Clock::time_point last_renew = now;
  // a is cut off from the API server; b still reaches it.
  std::optional<milliseconds> stopped, took;
  for (milliseconds t{0}; t <= milliseconds(30'000); t += milliseconds(500)) {
    Advance(milliseconds(500));
    if (t.count() % 2000 == 0) {
      api.down = true;
      a.elector.TryAcquireOrRenew();
      api.down = false;
      if (!took && b.elector.TryAcquireOrRenew()) {
        took = std::chrono::duration_cast<milliseconds>(now - last_renew);
      }
    }
    if (!stopped && !a.elector.may_bind()) {
      stopped = std::chrono::duration_cast<milliseconds>(now - last_renew);
    }
  }
  ASSERT_TRUE(stopped && took);
  EXPECT_LE(*stopped, milliseconds(10'000));
  EXPECT_GE(*took, milliseconds(15'000));
  EXPECT_LT(*stopped, *took);
  EXPECT_FALSE(a.elector.is_leader());
}

TEST_F(LeaderTest, OnlyOneOfTwoRacingCandidatesWins) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  // c reads the Lease, and b's takeover lands between c's GET and PUT.
  int puts = 0;
  LeaderElector c(Replica::Options("replica-c"),
                  [&](http::verb m, const std::string& p, const std::string& body) {
                    if (m == http::verb::put) {
                      ++puts;
                      EXPECT_TRUE(b.elector.TryAcquireOrRenew());
                    }
                    return api.Call(m, p, body);
                  },
                  [&] { return now; });
  ASSERT_FALSE(b.elector.TryAcquireOrRenew());
  ASSERT_FALSE(c.TryAcquireOrRenew());
  Advance(milliseconds(16'000));  // a is gone; both see the Lease expired.
  EXPECT_FALSE(c.TryAcquireOrRenew());  // Its PUT carries a stale version: 409.
  EXPECT_EQ(puts, 1);
  EXPECT_FALSE(c.is_leader());
  EXPECT_TRUE(b.elector.is_leader());
  EXPECT_EQ(api.holder(), "replica-b");
  EXPECT_EQ((*api.lease)["spec"]["leaseTransitions"], 1);
}

TEST_F(LeaderTest, ReleaseLetsTheFollowerTakeOverAtTheNextRound) {
  ASSERT_TRUE(a.elector.TryAcquireOrRenew());
  ASSERT_FALSE(b.elector.TryAcquireOrRenew());
  ASSERT_TRUE(a.elector.Release().ok());
  EXPECT_FALSE(a.elector.is_leader());
  EXPECT_EQ(api.holder(), "");
  EXPECT_EQ((*api.lease)["spec"]["leaseDurationSeconds"], 1);
  Advance(milliseconds(2000));
  EXPECT_TRUE(b.elector.TryAcquireOrRenew());
  EXPECT_EQ(api.holder(), "replica-b");
  EXPECT_EQ((*api.lease)["spec"]["leaseTransitions"], 1);
  // Releasing what one does not hold writes nothing.
  const int writes = api.writes;
  EXPECT_TRUE(a.elector.Release().ok());
  EXPECT_EQ(api.writes, writes);
}

TEST_F(LeaderTest, FollowersLearnTheLeadersUrlFromTheLease) {
  LeaseOptions o = Replica::Options("replica-u");
  o.url = "https://10.0.0.5:32766";
  LeaderElector u(o, [&](http::verb m, const std::string& p, const std::string& body) {
    return api.Call(m, p, body);
  }, [&] { return now; });
  ASSERT_TRUE(u.TryAcquireOrRenew());
  EXPECT_EQ((*api.lease)["metadata"]["annotations"][kLeaderUrlAnnotation], o.url);
  ASSERT_FALSE(b.elector.TryAcquireOrRenew());
  EXPECT_EQ(b.elector.holder_url(), o.url);
  ASSERT_TRUE(u.Release().ok());
  EXPECT_FALSE((*api.lease)["metadata"].contains("annotations"));
  Advance(milliseconds(2000));
  ASSERT_TRUE(b.elector.TryAcquireOrRenew());
  EXPECT_EQ(b.elector.holder_url(), "");  // b advertises none.
}

TEST_F(LeaderTest, AnUnreachableApiNeverMakesALeader) {
  api.down = true;
  EXPECT_FALSE(a.elector.TryAcquireOrRenew());
  EXPECT_FALSE(a.elector.is_leader());
  EXPECT_EQ(a.elector.Describe(), "follower (no leader)");
}

}  // namespace
}  // namespace gpushare::kubeclient
