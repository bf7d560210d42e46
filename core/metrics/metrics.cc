#include "core/metrics/metrics.h"

#include <nlohmann/json.hpp>

namespace tensorfs {

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Take() const {
  Snapshot s;
  for (size_t i = 0; i < counts_.size(); ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_seconds = static_cast<double>(sum_micros_.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

double LatencyHistogram::Snapshot::Quantile(double q) const {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total) + 0.5);
  uint64_t seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= rank && seen > 0) return i < kBounds.size() ? kBounds[i] : kBounds.back();
  }
  return kBounds.back();
}

std::string_view RetryCauseName(RetryCause cause) {
  switch (cause) {
    case RetryCause::kHttpStatus: return "http";
    case RetryCause::kConnect: return "connect";
    case RetryCause::kReset: return "reset";
    case RetryCause::kTruncated: return "truncated";
    case RetryCause::kStall: return "stall";
    case RetryCause::kCredentials: return "credentials";
    case RetryCause::kOther: return "other";
  }
  return "other";
}

void RetryCounters::Count(RetryCause cause, long http_status) {
  by_cause[static_cast<size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
  if (cause == RetryCause::kHttpStatus && http_status > 0 && static_cast<size_t>(http_status) < by_http_status.size()) {
    by_http_status[static_cast<size_t>(http_status)].fetch_add(1, std::memory_order_relaxed);
  }
}

uint64_t RetryCounters::total() const {
  uint64_t n = 0;
  for (const auto& c : by_cause) n += c.load(std::memory_order_relaxed);
  return n;
}

nlohmann::json RetryCounters::ByCauseJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t code = 0; code < by_http_status.size(); ++code) {
    if (uint64_t n = by_http_status[code].load(std::memory_order_relaxed); n > 0) {
      j["http_" + std::to_string(code)] = n;
    }
  }
  for (size_t i = 0; i < by_cause.size(); ++i) {
    if (static_cast<RetryCause>(i) == RetryCause::kHttpStatus) continue;
    if (uint64_t n = by_cause[i].load(std::memory_order_relaxed); n > 0) {
      j[std::string(RetryCauseName(static_cast<RetryCause>(i)))] = n;
    }
  }
  return j;
}

nlohmann::json Metrics::ToJson() const {
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  nlohmann::json j = {
      {"read_requests", load(read_requests)},   {"bytes_served", load(bytes_served)},
      {"cache_hits", load(cache_hits)},         {"cache_misses", load(cache_misses)},
      {"cache_evictions", load(cache_evictions)}, {"cache_bytes", load(cache_bytes)},
      {"buffers_reused", load(buffers_reused)}, {"buffers_mapped", load(buffers_mapped)},
      {"fetches", load(fetches)},               {"prefetches", load(prefetches)},
      {"bytes_fetched", load(bytes_fetched)},   {"fetches_in_flight", load(fetches_in_flight)},
      {"metadata_requests", load(metadata_requests)},
  };
  nlohmann::json errors = nlohmann::json::object();
  for (size_t i = 1; i < errors_by_code.size(); ++i) {
    if (uint64_t n = load(errors_by_code[i]); n > 0) errors[std::string(ErrorCodeName(static_cast<ErrorCode>(i)))] = n;
  }
  j["errors"] = errors;
  LatencyHistogram::Snapshot h = fetch_latency.Take();
  nlohmann::json buckets = nlohmann::json::array();
  for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
    buckets.push_back({LatencyHistogram::kBounds[i], h.counts[i]});
  }
  buckets.push_back({"+Inf", h.counts.back()});
  j["fetch_latency"] = {{"count", h.count},          {"sum_seconds", h.sum_seconds},
                        {"p50", h.Quantile(0.5)},    {"p90", h.Quantile(0.9)},
                        {"p99", h.Quantile(0.99)},   {"buckets", buckets}};
  j["retries"] = {{"total", retries.total()},
                  {"by_cause", retries.ByCauseJson()},
                  {"resumed_bytes", load(retries.resumed_bytes)},
                  {"exhausted", load(retries.exhausted)}};
  j["reads_failed_eio"] = load(reads_failed_eio);
  j["engine_inconsistencies"] = load(engine_inconsistencies);
  j["listings"] = load(listings);
  j["listings_changed"] = load(listings_changed);
  j["versions_replaced"] = load(versions_replaced);
  j["entries_removed"] = load(entries_removed);
  j["kernel_invalidations"] = load(kernel_invalidations);
  j["nodes"] = load(nodes);
  nlohmann::json sizes = nlohmann::json::object();
  for (size_t i = 0; i < kReadSizeBuckets; ++i) sizes[std::to_string(4096ull << i)] = load(read_sizes[i]);
  j["fuse_read_sizes"] = std::move(sizes);
  nlohmann::json opens = nlohmann::json::object();
  for (size_t i = 0; i < kOpenReadaheadBuckets; ++i) {
    if (const uint64_t n = load(opens_by_read_ahead[i]); n > 0) opens[std::to_string(4096ull << i)] = n;
  }
  j["files_opened_by_read_ahead"] = std::move(opens);
  return j;
}

}  // namespace tensorfs
