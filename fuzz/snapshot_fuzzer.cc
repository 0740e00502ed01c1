// Cluster::FromJson on arbitrary bytes. Properties, beyond "no crash":
//  - an error is InvalidArgument;
//  - a loaded cluster passes CheckInvariants();
//  - ToJson() loads again and dumps to the same text (load -> dump -> load
//    gives an equal cluster), compact and indented;
//  - ToJson() is the text nlohmann::json would print for the same document
//    (the writer promises that);
//  - differential: the fast reader (simdjson) accepts only what the
//    reference (nlohmann) accepts, with the same cluster, and FromJson()
//    gives the reference's cluster or error.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "nlohmann/json.hpp"
#include "src/formats/snapshot_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpushare::Cluster> loaded = gpushare::Cluster::FromJson(text);
  absl::StatusOr<gpushare::Cluster> reference = gpushare::internal::SnapshotFromJsonReference(text);
  absl::StatusOr<gpushare::Cluster> fast = gpushare::internal::SnapshotFromJsonFast(text);
  FUZZ_CHECK(loaded.ok() == reference.ok(), reference.status().ToString());
  if (!loaded.ok()) FUZZ_CHECK(loaded.status() == reference.status(), loaded.status().ToString());
  if (fast.ok()) {
    FUZZ_CHECK(reference.ok(), "fast reader accepts, reference: " + reference.status().ToString());
    FUZZ_CHECK(fast->ToJson() == reference->ToJson(), "fast and reference clusters differ");
  }
  if (!loaded.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(loaded.status()), loaded.status().ToString());
    return 0;
  }
  FUZZ_CHECK_OK(loaded->CheckInvariants(), "a loaded snapshot breaks the invariants");

  const std::string dump = loaded->ToJson();
  FUZZ_CHECK(dump == reference->ToJson(), "FromJson() and the reference clusters differ");
  absl::StatusOr<gpushare::Cluster> again = gpushare::Cluster::FromJson(dump);
  FUZZ_CHECK_OK(again.status(), "ToJson() output does not load: " + dump);
  FUZZ_CHECK_OK(again->CheckInvariants(), "the reloaded snapshot breaks the invariants");
  FUZZ_CHECK(again->ToJson() == dump,
             "load -> dump -> load -> dump changed the text:\n" + dump + "\n" + again->ToJson());

  const std::string indented = loaded->ToJson(2);
  FUZZ_CHECK(again->ToJson(2) == indented, "indented dumps differ");
  const nlohmann::json doc = nlohmann::json::parse(dump, nullptr, false);
  FUZZ_CHECK(!doc.is_discarded(), "ToJson() is not JSON: " + dump);
  FUZZ_CHECK(doc.dump() == dump, "ToJson() differs from nlohmann's dump():\n" + dump);
  FUZZ_CHECK(doc.dump(2) == indented, "ToJson(2) differs from nlohmann's dump(2)");
  return 0;
}
