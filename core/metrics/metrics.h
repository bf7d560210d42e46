// Metrics: the counters a mount keeps about itself. The read engine, the
// stores (retries) and fs/ (reads failed with EIO) update them; `tensorfs stats` (JSON through the mount) and the
// Prometheus endpoint (-o prometheus_port) read them.
//
// Thread-safety: every member is updated with relaxed atomics from any thread;
// Snapshot() gives a consistent-enough copy (each value read once) for display.
#ifndef TENSORFS_CORE_METRICS_METRICS_H_
#define TENSORFS_CORE_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/util/status.h"

namespace tensorfs {

// Fixed buckets (seconds) suited to object-store fetches: 1 ms .. 60 s.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,      2.5,   5,    10,    20,   30,  60};
  void Observe(double seconds);

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> counts{};  // last: above the largest bound
    uint64_t count = 0;
    double sum_seconds = 0;
    // The q-quantile (0..1) estimated from the buckets (upper bound of the bucket).
    double Quantile(double q) const;
  };
  Snapshot Take() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micros_{0};
};

// Why a request to the object store was tried again.
enum class RetryCause : uint8_t {
  kHttpStatus,   // a retryable HTTP status (408, 429, 5xx); RetryCounters keeps the code
  kConnect,      // no connection: refused, unreachable, DNS failure, connect timeout
  kReset,        // the connection was reset or lost mid-response
  kTruncated,    // the body ended before all the requested bytes came
  kStall,        // no byte for stall_timeout, so the transfer was dropped
  kCredentials,  // no access token could be had for the moment
  kOther,        // any other transient failure (a malformed reply, say)
};
inline constexpr size_t kRetryCauses = 7;

// "connect", "reset", ...; "http" for kHttpStatus (see RetryCounters::Json).
std::string_view RetryCauseName(RetryCause cause);

// Retries of store requests by cause, and what the retries saved or lost.
struct RetryCounters {
  std::array<std::atomic<uint64_t>, kRetryCauses> by_cause{};  // index: RetryCause
  std::array<std::atomic<uint64_t>, 600> by_http_status{};     // index: the status code
  std::atomic<uint64_t> resumed_bytes{0};  // bytes kept from cut-short responses, not fetched again
  std::atomic<uint64_t> exhausted{0};      // operations that failed once their retries ran out

  // One retry; `http_status` is the code for kHttpStatus (ignored otherwise).
  void Count(RetryCause cause, long http_status = 0);
  uint64_t total() const;
  // Non-zero counts by cause name, the HTTP ones as "http_503":
  // {"http_503": 22, "connect": 4, "stall": 1}.
  nlohmann::json ByCauseJson() const;
};

struct Metrics {
  // Kernel side.
  std::atomic<uint64_t> read_requests{0};  // FUSE reads answered
  std::atomic<uint64_t> bytes_served{0};   // bytes returned to the kernel
  // Cache.
  std::atomic<uint64_t> cache_hits{0};       // chunk lookups answered from memory
  std::atomic<uint64_t> cache_misses{0};     // chunk lookups that had to fetch (or join a fetch)
  std::atomic<uint64_t> cache_evictions{0};  // chunks dropped to stay within cache_size
  std::atomic<uint64_t> cache_bytes{0};      // bytes held by the cache now
  // Chunk buffers: fetches given an idle buffer, and fetches that mapped a
  // fresh one (which the kernel zeroes before the fetch writes it).
  std::atomic<uint64_t> buffers_reused{0};
  std::atomic<uint64_t> buffers_mapped{0};
  // Store side.
  std::atomic<uint64_t> fetches{0};            // ranged reads issued to the store
  std::atomic<uint64_t> prefetches{0};         // of which started by prefetch
  std::atomic<uint64_t> bytes_fetched{0};      // bytes read from the store
  std::atomic<uint64_t> fetches_in_flight{0};  // now
  std::atomic<uint64_t> metadata_requests{0};  // listings and stats
  // Freshness (core/vfs/namespace.h): directory listings sent to the store,
  // those that found a directory changed (its first listing not counted),
  // objects seen with a new generation, names gone from a listing, kernel
  // cache invalidations sent (fs/), and the nodes the mount holds now.
  std::atomic<uint64_t> listings{0};
  std::atomic<uint64_t> listings_changed{0};
  std::atomic<uint64_t> versions_replaced{0};
  std::atomic<uint64_t> entries_removed{0};
  std::atomic<uint64_t> kernel_invalidations{0};
  std::atomic<uint64_t> nodes{0};  // a gauge
  std::array<std::atomic<uint64_t>, 10> errors_by_code{};  // index: ErrorCode
  LatencyHistogram fetch_latency;
  RetryCounters retries;                        // store requests tried again
  std::atomic<uint64_t> reads_failed_eio{0};    // kernel reads answered with EIO
  // Reads the engine answered with EIO because its own state was inconsistent
  // (a bug, logged once per kind): the mount keeps serving the other reads.
  std::atomic<uint64_t> engine_inconsistencies{0};

  // FUSE read requests by the size the kernel asked for, rounded up to a power
  // of two: index i counts sizes in (2^(11+i), 2^(12+i)] bytes, 4 KiB to 1 MiB
  // (the largest, max_read); smaller ones count in the first, larger in the last.
  static constexpr size_t kReadSizeBuckets = 9;
  std::array<std::atomic<uint64_t>, kReadSizeBuckets> read_sizes{};
  void CountReadSize(uint64_t size) { read_sizes[PageBucket(size, kReadSizeBuckets)].fetch_add(1, std::memory_order_relaxed); }

  // Files opened, by the mount's readahead when they were (a file keeps the
  // readahead it was opened with): index i counts values in (2^(11+i),
  // 2^(12+i)] bytes, 4 KiB to 64 MiB; larger ones count in the last.
  static constexpr size_t kOpenReadaheadBuckets = 15;
  std::array<std::atomic<uint64_t>, kOpenReadaheadBuckets> opens_by_read_ahead{};
  void CountOpen(uint64_t read_ahead) {
    opens_by_read_ahead[PageBucket(read_ahead, kOpenReadaheadBuckets)].fetch_add(1, std::memory_order_relaxed);
  }

  // The bucket of `value` rounded up to a power of two from 4 KiB: i holds
  // (2^(11+i), 2^(12+i)], the first also what is smaller, the last of
  // `buckets` also what is larger.
  static size_t PageBucket(uint64_t value, size_t buckets) {
    size_t i = 0;
    while (i + 1 < buckets && (4096ull << i) < value) ++i;
    return i;
  }

  void CountError(ErrorCode code) { errors_by_code[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed); }

  // {"read_requests": .., ..., "errors": {"UNAVAILABLE": n, ...},
  //  "fetch_latency": {"count", "sum_seconds", "p50", "p90", "p99", "buckets": [[le, n], ...]},
  //  "retries": {"total": n, "by_cause": {"http_503": n, "connect": n, ...}, "resumed_bytes": n,
  //              "exhausted": n},
  //  "reads_failed_eio": n, "engine_inconsistencies": n,
  //  "listings": n, "listings_changed": n, "versions_replaced": n, "entries_removed": n,
  //  "kernel_invalidations": n, "nodes": n,
  //  "fuse_read_sizes": {"4096": n, "8192": n, ..., "1048576": n},
  //  "files_opened_by_read_ahead": {"131072": n, ...}} (the sizes files were opened at, only those)
  nlohmann::json ToJson() const;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_METRICS_METRICS_H_
