// The XML documents of the S3 and STS APIs that tensorfs reads: a
// ListObjectsV2 page, an error body, and the credentials of an STS
// AssumeRoleWithWebIdentity answer. Parsed by libexpat (a streaming parser)
// within limits: a document larger than XmlLimits::max_bytes, deeper than
// max_depth, with more than max_elements elements or a text over max_text is
// refused, and so is any document type declaration (no DTD, so no entity but
// the five predefined ones and character references can be expanded).
//
// Thread-safety: pure functions; safe to call from any thread.
#ifndef TENSORFS_CORE_STORE_S3_S3_XML_H_
#define TENSORFS_CORE_STORE_S3_S3_XML_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

struct XmlLimits {
  // A page of 1000 keys of 1024 bytes with their metadata is about 1.5 MiB.
  size_t max_bytes = 16 << 20;
  int max_depth = 16;
  size_t max_elements = 100000;
  size_t max_text = 64 << 10;  // characters of one element's text
};

// One <Contents> of a listing.
struct ListedObject {
  std::string key;  // the full key, decoded when the page was url-encoded
  uint64_t size = 0;
  std::string etag;         // as sent, quotes included
  std::string last_modified;  // ISO 8601, as sent
};

struct ListObjectsPage {
  std::vector<ListedObject> objects;
  std::vector<std::string> common_prefixes;  // decoded
  bool is_truncated = false;
  std::string next_continuation_token;
  int key_count = -1;  // <KeyCount>, -1 when absent
};

// A ListObjectsV2 result (<ListBucketResult>). With <EncodingType>url</EncodingType>
// the keys and prefixes are decoded (PercentDecode). Errors say what is wrong:
// kUnavailable for a document that is not well-formed XML (one cut short may
// come whole next time), kInternal for one refused (a limit, a document type
// declaration, another document, a malformed size).
StatusOr<ListObjectsPage> ParseListObjectsV2(std::string_view xml, const XmlLimits& limits = {});

// An S3 or STS error body: <Error><Code>..</Code><Message>..</Message></Error>,
// or STS's <ErrorResponse><Error>...</Error></ErrorResponse>.
struct AwsError {
  std::string code;     // "NoSuchBucket", "SignatureDoesNotMatch"
  std::string message;
  std::string region;   // <Region> of a wrong-region answer, "" if none
  std::string endpoint;  // <Endpoint> of a PermanentRedirect, "" if none
};
// nullopt when `body` is not such a document (empty, HTML from a proxy).
std::optional<AwsError> ParseAwsError(std::string_view body);

// <Credentials> of an AssumeRoleWithWebIdentityResponse.
struct StsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string expiration;  // ISO 8601
};
StatusOr<StsCredentials> ParseAssumeRoleWithWebIdentity(std::string_view xml);

// Decodes a name of a ListObjectsV2 page with encoding-type=url, which S3
// form-encodes: %XX escapes, and '+' for a space (a '+' itself is %2B).
// nullopt on a malformed escape.
std::optional<std::string> PercentDecode(std::string_view in);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_S3_XML_H_
