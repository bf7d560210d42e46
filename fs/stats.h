// `tensorfs stats MOUNTPOINT`: a running mount publishes its Metrics as JSON in
// the extended attribute kStatsXattr of its root directory.
#ifndef TENSORFS_FS_STATS_H_
#define TENSORFS_FS_STATS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "core/util/status.h"

namespace tensorfs {

inline constexpr char kStatsXattr[] = "user.tensorfs.stats";

// Reads the counters of the mount at `mountpoint`; says so if it is no tensorfs mount.
StatusOr<nlohmann::json> ReadMountStats(const std::string& mountpoint);

// A readable summary of Metrics::ToJson().
std::string RenderStatsText(const nlohmann::json& stats);

}  // namespace tensorfs

#endif  // TENSORFS_FS_STATS_H_
