// HttpResponseParser: one HTTP/1.1 response (RFC 9112) read from bytes, with no
// socket, so that what the direct body reads of http.cc accept is decided in
// one place that tests and the fuzzer drive with bytes alone.
//
// The caller owns the receive buffer and feeds the parser from it:
//
//   HttpResponseParser parser;
//   for (;;) {
//     buffer.erase(0, parser.Consume(buffer));   // status line, fields, chunk framing, trailers
//     if (parser.failed() || parser.done()) break;
//     if (uint64_t n = parser.body_wanted()) {    // up to n body bytes come next
//       ... take k <= n of them (from the buffer, or received straight into a sink) ...
//       parser.BodyTaken(k);
//     } else {
//       ... receive more onto the buffer (at its end, 0 bytes: see EndOfStream) ...
//     }
//   }
//
// It is strict where a lax reading could frame the body wrongly or grow
// without bound, and refuses, naming what was wrong:
//  - a status line other than "HTTP/1.x SP 3DIGIT SP reason";
//  - lines not ended by CRLF, a bare CR, control characters in a field;
//  - a field name that is not a token or is followed by whitespace, obs-fold
//    (a line starting with SP or HTAB);
//  - a Content-Length that is not all digits or does not fit, a repeated one;
//    Transfer-Encoding other than exactly "chunked", with a Content-Length, in
//    an HTTP/1.0 response or repeated;
//  - a chunk size that is not all hex digits or does not fit, a bad chunk
//    extension, chunk data not followed by CRLF;
//  - a line, a head or the trailers over HttpParseLimits, more interim (1xx)
//    responses than allowed, a 101 Switching Protocols (never asked for).
// Repeated fields other than the framing ones are joined with ", " (RFC 9110
// section 5.3), so a second value cannot silently replace the first.
//
// Only responses to GET are parsed (a HEAD response's framing differs).
//
// Thread-safety: none; one parser per response, used by one thread.
// ParseHttpResponse is a pure function.
#ifndef TENSORFS_CORE_STORE_HTTP_HTTP_PARSER_H_
#define TENSORFS_CORE_STORE_HTTP_HTTP_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace tensorfs {

// Response fields keyed by lower-case name; a repeated field's values joined by ", ".
using HttpHeaders = std::map<std::string, std::string, std::less<>>;

struct HttpParseLimits {
  size_t max_line = 8 << 10;       // a status line, field line or chunk-size line, CRLF included
  size_t max_head = 64 << 10;      // one response's status line and fields
  int max_interim = 8;             // 1xx responses before the final one
  size_t max_trailers = 8 << 10;   // the trailer section of a chunked body
};

class HttpResponseParser {
 public:
  // How the final response's body is delimited (RFC 9112 section 6.3).
  enum class Framing { kNone, kLength, kChunked, kUntilClose };

  explicit HttpResponseParser(const HttpParseLimits& limits = {}) : limits_(limits) {}

  // Parses what it can from the start of `in` and returns how many bytes it
  // took: whole lines of the heads and of chunked framing, the CRLF after chunk
  // data. It stops before body bytes (body_wanted() > 0), at the end of the
  // response, at an error, or when `in` holds no complete line; the caller
  // then passes the bytes not taken again, with more after them.
  size_t Consume(std::string_view in);

  // Body bytes that may come next before more framing: the rest of the
  // Content-Length, or of the current chunk; UINT64_MAX for a body that runs
  // to the end of the connection; 0 when framing (or nothing) comes next.
  uint64_t body_wanted() const;
  // The caller took `n` <= body_wanted() body bytes.
  void BodyTaken(uint64_t n);
  // The peer closed the connection (no more bytes come). Ends a body that
  // runs to the close; anywhere else the response is cut short: failed(), with
  // a message saying where. Returns done().
  bool EndOfStream();

  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kError; }
  const std::string& error() const { return error_; }

  // Once the final response's head is parsed: its status, fields and framing.
  bool head_done() const { return head_done_; }
  long status() const { return status_; }
  const HttpHeaders& headers() const { return headers_; }
  Framing framing() const { return framing_; }
  uint64_t content_length() const { return content_length_; }  // with Framing::kLength
  bool http10() const { return http10_; }
  // Interim (1xx) responses skipped so far.
  int interim() const { return interim_; }
  // Once done(): whether the connection may carry another request, by the
  // response's version, Connection field and framing. (Bytes left over after
  // the response are the caller's to see: they also forbid reuse.)
  bool keep_alive() const;

 private:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers, kDone, kError };

  // The next CRLF-terminated line of `in` from `pos`, without its CRLF, or
  // nothing (need more bytes, or failed()); `*next` is where the line after it starts.
  bool NextLine(std::string_view in, size_t pos, std::string_view* line, size_t* next);
  bool StatusLine(std::string_view line);
  bool FieldLine(std::string_view line, bool trailer);
  bool EndOfHead();
  bool ChunkSizeLine(std::string_view line);
  bool Fail(std::string message);

  const HttpParseLimits limits_;
  State state_ = State::kHead;
  std::string error_;
  bool head_done_ = false;
  bool status_line_seen_ = false;  // in the head being parsed
  size_t head_bytes_ = 0;          // of the head being parsed
  size_t trailer_bytes_ = 0;
  int interim_ = 0;
  long status_ = 0;
  bool http10_ = false;
  HttpHeaders headers_;
  int content_length_fields_ = 0;
  int transfer_encoding_fields_ = 0;
  Framing framing_ = Framing::kNone;
  uint64_t content_length_ = 0;
  uint64_t left_ = 0;  // of the Content-Length or the current chunk
};

// A whole response parsed from `bytes` at once: for tests and the fuzzer, and
// the reference the incremental use above must agree with.
struct ParsedHttpResponse {
  bool complete = false;  // the response ended within `bytes` (or at the close)
  std::string error;      // set when the response is malformed or cut short
  long status = 0;
  HttpHeaders headers;
  std::string body;
  int interim = 0;
  bool keep_alive = false;  // complete, reusable by its fields, and nothing left over
  size_t consumed = 0;      // bytes of `bytes` that belonged to the response
};

// `closed`: the peer closed the connection after `bytes`, which ends a body
// that runs to the close (and cuts any other short).
ParsedHttpResponse ParseHttpResponse(std::string_view bytes, bool closed, const HttpParseLimits& limits = {});

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_HTTP_PARSER_H_
