#include "core/store/http/http_parser.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace tensorfs {
namespace {

constexpr uint64_t kMaxLength = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// tchar (RFC 9110 section 5.6.2).
bool IsTokenChar(char c) {
  if (IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar); }

bool IsWhitespace(char c) { return c == ' ' || c == '\t'; }

// VCHAR, obs-text, SP, HTAB: what a field value and a reason phrase may hold.
bool IsTextChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  return c == ' ' || c == '\t' || (u >= 0x21 && u != 0x7f);
}

std::string_view TrimWhitespace(std::string_view s) {
  while (!s.empty() && IsWhitespace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWhitespace(s.back())) s.remove_suffix(1);
  return s;
}

std::string ToLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// `s` quoted for a message: at most 60 characters, others than printable ASCII as \xNN.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u < 0x7f) {
      out += s[i];
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

// A decimal number of at most kMaxLength: 1*DIGIT, nothing else.
bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return false;
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (kMaxLength - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ),
// chunk-ext-val = token / quoted-string (RFC 9112 section 7.1.1).
bool ValidChunkExtensions(std::string_view s) {
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < s.size() && IsWhitespace(s[i])) ++i;
  };
  auto token = [&] {
    const size_t start = i;
    while (i < s.size() && IsTokenChar(s[i])) ++i;
    return i > start;
  };
  while (i < s.size()) {
    skip_ws();
    if (i == s.size() || s[i] != ';') return false;
    ++i;
    skip_ws();
    if (!token()) return false;
    const size_t before_ws = i;
    skip_ws();
    if (i == s.size() || s[i] != '=') {
      if (i == s.size() && i != before_ws) return false;  // whitespace ending the line
      continue;
    }
    ++i;
    skip_ws();
    if (i < s.size() && s[i] == '"') {
      ++i;
      bool closed = false;
      while (i < s.size()) {
        const char c = s[i];
        if (c == '"') {
          closed = true;
          ++i;
          break;
        }
        if (c == '\\') {
          if (i + 1 == s.size() || !IsTextChar(s[i + 1])) return false;
          i += 2;
          continue;
        }
        if (!IsTextChar(c)) return false;
        ++i;
      }
      if (!closed) return false;
    } else if (!token()) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool HttpResponseParser::Fail(std::string message) {
  if (state_ != State::kError) {
    state_ = State::kError;
    error_ = std::move(message);
  }
  return false;
}

bool HttpResponseParser::NextLine(std::string_view in, size_t pos, std::string_view* line, size_t* next) {
  const std::string_view window = in.substr(pos, limits_.max_line);
  const size_t lf = window.find('\n');
  if (lf == std::string_view::npos) {
    if (window.size() >= limits_.max_line) {
      const char* what = state_ == State::kHead         ? "a status or field line"
                         : state_ == State::kTrailers   ? "a trailer line"
                                                        : "a chunk size line";
      Fail(std::string(what) + " longer than " + std::to_string(limits_.max_line) + " bytes");
    }
    return false;
  }
  if (lf == 0 || window[lf - 1] != '\r') return Fail("a line ended by a bare LF: " + Quote(window.substr(0, lf)));
  *line = window.substr(0, lf - 1);
  if (line->find('\r') != std::string_view::npos) return Fail("a bare CR inside the line " + Quote(*line));
  *next = pos + lf + 1;
  return true;
}

bool HttpResponseParser::StatusLine(std::string_view line) {
  // HTTP-version SP status-code SP reason-phrase (RFC 9112 section 4), version 1.x.
  const bool shape = line.size() >= 13 && line.starts_with("HTTP/1.") && IsDigit(line[7]) && line[8] == ' ' &&
                     IsDigit(line[9]) && IsDigit(line[10]) && IsDigit(line[11]) && line[12] == ' ';
  if (!shape) return Fail("status line " + Quote(line) + " is not 'HTTP/1.x SP 3DIGIT SP reason'");
  if (!std::all_of(line.begin() + 13, line.end(), IsTextChar)) {
    return Fail("a control character in the status line " + Quote(line));
  }
  status_ = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (status_ < 100 || status_ > 599) return Fail("status code " + std::to_string(status_) + " outside 100-599");
  http10_ = line[7] == '0';
  return true;
}

bool HttpResponseParser::FieldLine(std::string_view line, bool trailer) {
  if (IsWhitespace(line.front())) return Fail("obs-fold (a field line starting with whitespace): " + Quote(line));
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Fail("a field line without a colon: " + Quote(line));
  const std::string_view name = line.substr(0, colon);
  if (!name.empty() && IsWhitespace(name.back())) {
    return Fail("whitespace between the field name " + Quote(TrimWhitespace(name)) + " and its colon");
  }
  if (!IsToken(name)) return Fail("field name " + Quote(name) + " is not a token");
  const std::string_view value = TrimWhitespace(line.substr(colon + 1));
  if (!std::all_of(value.begin(), value.end(), IsTextChar)) {
    return Fail("a control character in the value of field " + Quote(name));
  }
  if (trailer) return true;  // read and dropped: nothing here uses trailer fields
  std::string key = ToLowerAscii(name);
  if (key == "content-length") {
    if (++content_length_fields_ > 1) return Fail("more than one Content-Length field");
    if (!ParseDecimal(value, &content_length_)) {
      return Fail("Content-Length " + Quote(value) + " is not a decimal number of bytes below 2^63");
    }
  } else if (key == "transfer-encoding") {
    if (++transfer_encoding_fields_ > 1) return Fail("more than one Transfer-Encoding field");
  }
  auto [it, inserted] = headers_.try_emplace(std::move(key), value);
  if (!inserted) {
    it->second += ", ";
    it->second += value;
  }
  return true;
}

bool HttpResponseParser::EndOfHead() {
  if (status_ < 200) {
    if (status_ == 101) return Fail("101 Switching Protocols, which was not asked for");
    if (++interim_ > limits_.max_interim) {
      return Fail("more than " + std::to_string(limits_.max_interim) + " interim (1xx) responses");
    }
    status_line_seen_ = false;
    head_bytes_ = 0;
    headers_.clear();
    content_length_fields_ = 0;
    transfer_encoding_fields_ = 0;
    content_length_ = 0;
    return true;
  }
  head_done_ = true;
  if (transfer_encoding_fields_ > 0) {
    // RFC 9112 section 6.1 and 6.3: a sender must not send both, an HTTP/1.0
    // message with Transfer-Encoding has faulty framing, and chunked is the
    // only coding this client can undo (it sends no TE).
    if (http10_) return Fail("Transfer-Encoding in an HTTP/1.0 response");
    if (content_length_fields_ > 0) return Fail("both Transfer-Encoding and Content-Length");
    const std::string coding = ToLowerAscii(headers_.find("transfer-encoding")->second);
    if (coding != "chunked") {
      return Fail("Transfer-Encoding " + Quote(coding) + " (only 'chunked' alone is accepted)");
    }
  }
  if (status_ == 204 || status_ == 304) {
    framing_ = Framing::kNone;
    state_ = State::kDone;
  } else if (transfer_encoding_fields_ > 0) {
    framing_ = Framing::kChunked;
    state_ = State::kChunkSize;
  } else if (content_length_fields_ > 0) {
    framing_ = Framing::kLength;
    left_ = content_length_;
    state_ = left_ > 0 ? State::kBody : State::kDone;
  } else {
    framing_ = Framing::kUntilClose;
    state_ = State::kBody;
  }
  return true;
}

bool HttpResponseParser::ChunkSizeLine(std::string_view line) {
  size_t i = 0;
  uint64_t size = 0;
  for (int d; i < line.size() && (d = HexValue(line[i])) >= 0; ++i) {
    if (size > (kMaxLength - static_cast<uint64_t>(d)) / 16) {
      return Fail("chunk size " + Quote(line.substr(0, i + 1)) + "... does not fit in 63 bits");
    }
    size = size * 16 + static_cast<uint64_t>(d);
  }
  if (i == 0) return Fail("chunk size line " + Quote(line) + " does not start with a hex number");
  if (!ValidChunkExtensions(line.substr(i))) return Fail("bad chunk extension in " + Quote(line));
  if (size == 0) {
    state_ = State::kTrailers;
  } else {
    left_ = size;
    state_ = State::kChunkData;
  }
  return true;
}

size_t HttpResponseParser::Consume(std::string_view in) {
  size_t pos = 0;
  for (;;) {
    std::string_view line;
    size_t next = 0;
    switch (state_) {
      case State::kHead:
        if (!NextLine(in, pos, &line, &next)) return pos;
        head_bytes_ += next - pos;
        pos = next;
        if (head_bytes_ > limits_.max_head) {
          Fail("a response head longer than " + std::to_string(limits_.max_head) + " bytes");
          return pos;
        }
        if (!status_line_seen_) {
          if (!StatusLine(line)) return pos;
          status_line_seen_ = true;
        } else if (line.empty()) {
          if (!EndOfHead()) return pos;
        } else if (!FieldLine(line, /*trailer=*/false)) {
          return pos;
        }
        break;
      case State::kChunkSize:
        if (!NextLine(in, pos, &line, &next)) return pos;
        pos = next;
        if (!ChunkSizeLine(line)) return pos;
        break;
      case State::kChunkEnd:
        if (in.size() - pos < 2) {
          if (in.size() > pos && in[pos] != '\r') Fail("chunk data not followed by CRLF");
          return pos;
        }
        if (in.substr(pos, 2) != "\r\n") {
          Fail("chunk data not followed by CRLF");
          return pos;
        }
        pos += 2;
        state_ = State::kChunkSize;
        break;
      case State::kTrailers:
        if (!NextLine(in, pos, &line, &next)) return pos;
        trailer_bytes_ += next - pos;
        pos = next;
        if (trailer_bytes_ > limits_.max_trailers) {
          Fail("trailers longer than " + std::to_string(limits_.max_trailers) + " bytes");
          return pos;
        }
        if (line.empty()) {
          state_ = State::kDone;
        } else if (!FieldLine(line, /*trailer=*/true)) {
          return pos;
        }
        break;
      case State::kBody:
      case State::kChunkData:
      case State::kDone:
      case State::kError:
        return pos;
    }
  }
}

uint64_t HttpResponseParser::body_wanted() const {
  if (state_ == State::kBody) {
    return framing_ == Framing::kUntilClose ? std::numeric_limits<uint64_t>::max() : left_;
  }
  return state_ == State::kChunkData ? left_ : 0;
}

void HttpResponseParser::BodyTaken(uint64_t n) {
  if (n > body_wanted()) {
    Fail("the caller took more body bytes than the framing allows");
    return;
  }
  if (state_ == State::kBody && framing_ == Framing::kUntilClose) return;
  left_ -= n;
  if (left_ > 0) return;
  if (state_ == State::kBody) state_ = State::kDone;
  if (state_ == State::kChunkData) state_ = State::kChunkEnd;
}

bool HttpResponseParser::EndOfStream() {
  switch (state_) {
    case State::kDone:
      return true;
    case State::kError:
      return false;
    case State::kHead:
      Fail(head_bytes_ == 0 && interim_ == 0 ? "the connection closed before a response"
                                             : "the connection closed inside the response head");
      return false;
    case State::kBody:
      if (framing_ == Framing::kUntilClose) {
        state_ = State::kDone;
        return true;
      }
      Fail("the connection closed with " + std::to_string(left_) + " of " + std::to_string(content_length_) +
           " body bytes outstanding");
      return false;
    case State::kChunkSize:
    case State::kChunkData:
    case State::kChunkEnd:
      Fail("the connection closed inside a chunked body");
      return false;
    case State::kTrailers:
      Fail("the connection closed inside the trailers of a chunked body");
      return false;
  }
  return false;
}

bool HttpResponseParser::keep_alive() const {
  if (!done() || framing_ == Framing::kUntilClose) return false;
  bool close = false;
  bool keep = false;
  if (auto it = headers_.find("connection"); it != headers_.end()) {
    std::string_view rest = it->second;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string token = ToLowerAscii(TrimWhitespace(rest.substr(0, comma)));
      close = close || token == "close";
      keep = keep || token == "keep-alive";
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return http10_ ? keep && !close : !close;
}

ParsedHttpResponse ParseHttpResponse(std::string_view bytes, bool closed, const HttpParseLimits& limits) {
  HttpResponseParser parser(limits);
  ParsedHttpResponse out;
  size_t pos = 0;
  for (;;) {
    pos += parser.Consume(bytes.substr(pos));
    if (parser.failed() || parser.done()) break;
    const uint64_t wanted = parser.body_wanted();
    if (wanted > 0 && pos < bytes.size()) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(wanted, bytes.size() - pos));
      out.body.append(bytes.substr(pos, take));
      pos += take;
      parser.BodyTaken(take);
      continue;
    }
    if (closed) parser.EndOfStream();  // nothing more comes
    break;
  }
  out.complete = parser.done();
  out.error = parser.error();
  out.interim = parser.interim();
  if (parser.head_done()) {
    out.status = parser.status();
    out.headers = parser.headers();
  }
  out.keep_alive = parser.done() && parser.keep_alive() && pos == bytes.size();
  out.consumed = pos;
  return out;
}

}  // namespace tensorfs
