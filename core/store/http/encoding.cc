#include "core/store/http/encoding.h"

#include <array>
#include <cctype>

namespace tensorfs {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

std::string Base64EncodeWith(std::string_view in, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                 static_cast<uint8_t>(in[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  size_t rest = in.size() - i;
  if (rest == 1) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    if (pad) out += "==";
  } else if (rest == 2) {
    uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    if (pad) out += '=';
  }
  return out;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool ReadDigits(std::string_view text, size_t& pos, size_t n, int& out) {
  if (pos + n > text.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  pos += n;
  out = v;
  return true;
}

bool Expect(std::string_view text, size_t& pos, char c) {
  if (pos >= text.size() || (text[pos] != c && std::tolower(static_cast<unsigned char>(text[pos])) != c)) {
    return false;
  }
  ++pos;
  return true;
}

}  // namespace

std::string PercentEncode(std::string_view in) {
  std::string out;
  out.reserve(in.size() * 3);
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c)) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string Base64Encode(std::string_view in) { return Base64EncodeWith(in, kBase64, true); }

std::string Base64UrlEncode(std::string_view in) { return Base64EncodeWith(in, kBase64Url, false); }

std::optional<std::string> Base64Decode(std::string_view in) {
  static const std::array<int8_t, 256> kTable = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kBase64[i])] = static_cast<int8_t>(i);
    return t;
  }();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    int8_t v = kTable[static_cast<unsigned char>(ch)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

StatusOr<int64_t> ParseRfc3339Nanos(std::string_view text) {
  auto bad = [&] {
    return InvalidArgumentError("timestamp '" + std::string(text) +
                                "' is not RFC 3339 (expected like 2024-05-01T12:34:56.789Z)");
  };
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!ReadDigits(text, pos, 4, year) || !Expect(text, pos, '-') || !ReadDigits(text, pos, 2, month) ||
      !Expect(text, pos, '-') || !ReadDigits(text, pos, 2, day) || !Expect(text, pos, 't') ||
      !ReadDigits(text, pos, 2, hour) || !Expect(text, pos, ':') || !ReadDigits(text, pos, 2, minute) ||
      !Expect(text, pos, ':') || !ReadDigits(text, pos, 2, second)) {
    return bad();
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return bad();
  }
  int64_t nanos = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 9) {
        nanos = nanos * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return bad();
    for (; digits < 9; ++digits) nanos *= 10;
  }
  int64_t offset_seconds = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh, om;
    if (!ReadDigits(text, pos, 2, oh) || !Expect(text, pos, ':') || !ReadDigits(text, pos, 2, om)) {
      return bad();
    }
    offset_seconds = sign * (oh * 3600 + om * 60);
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_seconds;
  return seconds * 1'000'000'000 + nanos;
}

StatusOr<int64_t> ParseHttpDateNanos(std::string_view text) {
  auto bad = [&] {
    return InvalidArgumentError("date '" + std::string(text) +
                                "' is not an HTTP date (expected like Sun, 06 Nov 1994 08:49:37 GMT)");
  };
  // "Sun, 06 Nov 1994 08:49:37 GMT": the weekday is not checked.
  constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (text.size() != 29 || text.substr(3, 2) != ", " || text[7] != ' ' || text[11] != ' ' || text[16] != ' ' ||
      text.substr(25) != " GMT") {
    return bad();
  }
  size_t pos = 5;
  int day = 0, year = 0, hour = 0, minute = 0, second = 0;
  if (!ReadDigits(text, pos, 2, day)) return bad();
  int month = 0;
  for (int i = 0; i < 12; ++i) {
    if (text.substr(8, 3) == kMonths[i]) month = i + 1;
  }
  pos = 12;
  if (month == 0 || !ReadDigits(text, pos, 4, year)) return bad();
  pos = 17;
  if (!ReadDigits(text, pos, 2, hour) || !Expect(text, pos, ':') || !ReadDigits(text, pos, 2, minute) ||
      !Expect(text, pos, ':') || !ReadDigits(text, pos, 2, second)) {
    return bad();
  }
  if (day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) return bad();
  const int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return (days * 86400 + hour * 3600 + minute * 60 + second) * 1'000'000'000;
}

std::optional<uint32_t> DecodeCrc32c(std::string_view base64) {
  std::optional<std::string> raw = Base64Decode(base64);
  if (!raw || raw->size() != 4) return std::nullopt;
  return (static_cast<uint32_t>(static_cast<uint8_t>((*raw)[0])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>((*raw)[1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>((*raw)[2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>((*raw)[3]));
}

}  // namespace tensorfs
