// Byte-level encodings the stores need: percent-encoding for URL path
// segments and query values, base64 (standard and URL-safe) for crc32c/md5
// fields and JWTs, RFC 3339 timestamps from object metadata, and HTTP dates
// (Last-Modified).
//
// Thread-safety: pure functions; safe to call from any thread.
#ifndef TENSORFS_CORE_STORE_HTTP_ENCODING_H_
#define TENSORFS_CORE_STORE_HTTP_ENCODING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/util/status.h"

namespace tensorfs {

// Encodes every byte except the RFC 3986 unreserved set (A-Z a-z 0-9 - . _ ~) as
// %XX with upper-case hex. Suitable for one path segment (a '/' in an object name
// becomes %2F) and for query values ('+', '&', '=' and ' ' are all encoded).
// Multi-byte UTF-8 sequences are encoded byte by byte.
std::string PercentEncode(std::string_view in);

// RFC 4648 base64 with '=' padding.
std::string Base64Encode(std::string_view in);
// RFC 4648 section 5 (URL-safe alphabet), without padding, as JWTs use.
std::string Base64UrlEncode(std::string_view in);
// Decodes standard base64 (padding optional). nullopt on a character outside the
// alphabet or a truncated quantum.
std::optional<std::string> Base64Decode(std::string_view in);

// Parses an RFC 3339 timestamp as GCS writes it ("2024-05-01T12:34:56.789Z",
// or with a "+hh:mm"/"-hh:mm" offset) into nanoseconds since the Unix epoch.
StatusOr<int64_t> ParseRfc3339Nanos(std::string_view text);

// Parses an HTTP date (RFC 9110 IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT")
// into nanoseconds since the Unix epoch.
StatusOr<int64_t> ParseHttpDateNanos(std::string_view text);

// Decodes the crc32c field of an object resource: base64 of the checksum in
// big-endian byte order. nullopt if it is not 4 bytes of valid base64.
std::optional<uint32_t> DecodeCrc32c(std::string_view base64);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_ENCODING_H_
