// `tensorfs stats MOUNTPOINT`: a running mount publishes its Metrics as JSON in
// the extended attribute kStatsXattr of its root directory, with the settings
// it runs with under "mount" (MountSettingsJson), so that a user sees which
// options reached a mount that someone else started (a node plugin, a unit).
#ifndef TENSORFS_FS_STATS_H_
#define TENSORFS_FS_STATS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "core/options/mount_options.h"
#include "core/util/status.h"

namespace tensorfs {

inline constexpr char kStatsXattr[] = "user.tensorfs.stats";

// Reads the counters of the mount at `mountpoint`; says so if it is no tensorfs mount.
StatusOr<nlohmann::json> ReadMountStats(const std::string& mountpoint);

// The settings of a validated mount: source, cache and fetch sizes, shard,
// views, and the owner and modes its files report.
nlohmann::json MountSettingsJson(const MountOptions& options, uint32_t uid, uint32_t gid);

// The CPU time this process (the mount's daemon) has used since it started,
// user and system, in seconds: {"user": U, "system": S}. Read at each stats
// request (getrusage), so it costs the data path nothing.
nlohmann::json ProcessCpuJson();

// A readable summary of Metrics::ToJson() (and "mount" and "cpu_seconds",
// when present), with what a GB served cost: CPU-seconds, FUSE reads and
// range requests per GB.
std::string RenderStatsText(const nlohmann::json& stats);

}  // namespace tensorfs

#endif  // TENSORFS_FS_STATS_H_
