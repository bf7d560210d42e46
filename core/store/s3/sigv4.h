// SigV4: AWS Signature Version 4 for S3 requests, header-based, payload in a
// single chunk (the S3 API reference, "Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk"), computed with
// OpenSSL's SHA-256 and HMAC-SHA256:
//
//   canonical request = method \n canonical URI \n canonical query string \n
//                       canonical headers \n signed headers \n payload hash
//   string to sign    = "AWS4-HMAC-SHA256" \n X-Amz-Date \n scope \n hex(SHA256(canonical request))
//   scope             = YYYYMMDD/region/service/aws4_request
//   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" secret, YYYYMMDD), region), service), "aws4_request")
//   signature         = hex(HMAC(signing key, string to sign))
//
// The caller puts every header it signs into the request (host, x-amz-date,
// x-amz-content-sha256, x-amz-security-token ...): SignV4 adds none, so the
// canonical request is exactly what goes on the wire. The canonical URI is the
// path as sent, already encoded with UriEncode(..., /*encode_slash=*/false):
// S3 does not encode it a second time.
//
// Thread-safety: pure functions; safe to call from any thread.
#ifndef TENSORFS_CORE_STORE_S3_SIGV4_H_
#define TENSORFS_CORE_STORE_S3_SIGV4_H_

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensorfs {

// The payload hash of a request whose body is not signed (S3 GETs and HEADs).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
// SHA-256 of the empty string, hex.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// AWS's UriEncode: every byte but A-Z a-z 0-9 - . _ ~ as %XX (upper-case hex),
// UTF-8 byte by byte, a space as %20 (never '+'); '/' kept unless encode_slash.
// Object keys in paths use encode_slash = false, query names and values true.
std::string UriEncode(std::string_view in, bool encode_slash);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// "20130524T000000Z" (ISO 8601 basic, UTC) of `t`.
std::string AmzDate(std::chrono::system_clock::time_point t);

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// The canonical query string: names and values (not encoded yet) UriEncoded,
// sorted by encoded name (then value), joined as n1=v1&n2=v2; a parameter
// without a value is "name=". Also what a URL's query is built from, so that
// what is signed is what is sent.
std::string CanonicalQueryString(const QueryParams& query);

struct SignableRequest {
  std::string method;         // "GET", "HEAD", "PUT"
  std::string canonical_uri;  // the encoded path as sent: "/test%24file.text"; "/" for none
  QueryParams query;          // not encoded; any order
  // Every header to sign, names in any case; values are trimmed and runs of
  // spaces collapsed. Must include host (as sent, with a non-default port).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;   // hex SHA-256 of the body, or kUnsignedPayload
};

struct SigningCredentials {
  std::string access_key_id;
  std::string secret_access_key;
};

struct SignatureV4 {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;       // hex
  // The Authorization header's value: "AWS4-HMAC-SHA256 Credential=KEY/scope,
  // SignedHeaders=...,Signature=...".
  std::string authorization;
};

// Signs `request` for `region` and `service` ("s3", "sts") at `now`, which
// must be the time the request's x-amz-date header gives.
SignatureV4 SignV4(const SignableRequest& request, const SigningCredentials& credentials, std::string_view region,
                   std::string_view service, std::chrono::system_clock::time_point now);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_SIGV4_H_
