#include "core/store/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <ctime>

namespace tensorfs {
namespace {

constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";
constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

std::string Hex(const unsigned char* data, size_t n) {
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHexLower[data[i] >> 4];
    out[2 * i + 1] = kHexLower[data[i] & 15];
  }
  return out;
}

// HMAC-SHA256(key, data), raw 32 bytes.
std::string Hmac(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out;
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out.data(), &len);
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Trimmed, with runs of spaces inside collapsed to one (SigV4's Trim()).
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view in, bool encode_slash) {
  std::string out;
  out.reserve(in.size() * 3);
  for (char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (c == '/' && !encode_slash)) {
      out += ch;
    } else {
      out += '%';
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 15];
    }
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out;
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return Hex(out.data(), len);
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm;
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQueryString(const QueryParams& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(UriEncode(name, true), UriEncode(value, true));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

SignatureV4 SignV4(const SignableRequest& request, const SigningCredentials& credentials, std::string_view region,
                   std::string_view service, std::chrono::system_clock::time_point now) {
  // Lower-case names, sorted; a repeated header's values joined with ','.
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers) headers.emplace_back(Lower(name), CanonicalHeaderValue(value));
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers;
  SignatureV4 out;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();  // the '\n' of the previous value
      canonical_headers += ',' + headers[i].second + '\n';
      continue;
    }
    canonical_headers += headers[i].first + ':' + headers[i].second + '\n';
    if (!out.signed_headers.empty()) out.signed_headers += ';';
    out.signed_headers += headers[i].first;
  }

  out.canonical_request = request.method + '\n' + (request.canonical_uri.empty() ? "/" : request.canonical_uri) +
                          '\n' + CanonicalQueryString(request.query) + '\n' + canonical_headers + '\n' +
                          out.signed_headers + '\n' + request.payload_hash;

  const std::string amz_date = AmzDate(now);
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + '/' + std::string(region) + '/' + std::string(service) + "/aws4_request";
  out.string_to_sign =
      std::string(kAlgorithm) + '\n' + amz_date + '\n' + scope + '\n' + Sha256Hex(out.canonical_request);

  const std::string k_date = Hmac("AWS4" + credentials.secret_access_key, date);
  const std::string k_region = Hmac(k_date, region);
  const std::string k_service = Hmac(k_region, service);
  const std::string k_signing = Hmac(k_service, "aws4_request");
  const std::string mac = Hmac(k_signing, out.string_to_sign);
  out.signature = Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  out.authorization = std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + '/' + scope +
                      ",SignedHeaders=" + out.signed_headers + ",Signature=" + out.signature;
  return out;
}

}  // namespace tensorfs
