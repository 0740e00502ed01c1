// Internal: the two readers behind Cluster::FromJson(). Not part of the
// public API.
//
// FromJson() runs the fast reader and, only when it fails, the reference:
// so a loaded snapshot is always the reference's result, and every error is
// the reference's message.

#ifndef GPUSHARE_FORMATS_SNAPSHOT_READER_H_
#define GPUSHARE_FORMATS_SNAPSHOT_READER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "gpushare/cluster.h"

namespace gpushare::internal {

// The reference: an nlohmann::json document, read field by field, with
// errors naming the bad value and where ("nodes[3].gpus[1]: field 'memory'
// ..."). Slow (it builds and frees a map per object) but plainly correct.
absl::StatusOr<Cluster> SnapshotFromJsonReference(std::string_view text);

// The fast reader: simdjson's DOM, one pass per object, no message built.
// Either returns what the reference returns for `text`, or fails with an
// uninformative InvalidArgument (then the reference must be asked why; it
// may also accept what this one refuses, e.g. duplicate keys or a byte
// order mark).
absl::StatusOr<Cluster> SnapshotFromJsonFast(std::string_view text);

}  // namespace gpushare::internal

#endif  // GPUSHARE_FORMATS_SNAPSHOT_READER_H_
