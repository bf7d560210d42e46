// libFuzzer target: the HTTP/1.1 response parser of the stores' direct
// body reads (core/store/http/http_parser.h), which reads bytes from the
// network. The first input byte picks how the rest is fed: bit 0, whether the
// connection closes after it; bit 1, small limits (so that every limit is
// reached); the upper six bits, the size of the pieces it arrives in. The
// rest is the response. Each input is parsed twice, whole (ParseHttpResponse)
// and piece by piece as http.cc's DirectExchange feeds the parser, and the two
// must agree on everything: status, fields, body, where it ended, the error.
//
// Built as fuzz_http_response by tests/fuzz/CMakeLists.txt (-DTENSORFS_FUZZ=ON);
// it needs only the parser, so by hand:
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. tests/fuzz/http_response_fuzz.cc
//       core/store/http/http_parser.cc -o fuzz_http_response
//   ./fuzz_http_response -dict=tests/fuzz/http_response.dict -max_total_time=1800 WORK_DIR
//       tests/fuzz/corpus/http_response
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/store/http/http_parser.h"

namespace {

using tensorfs::HttpParseLimits;
using tensorfs::HttpResponseParser;
using tensorfs::ParsedHttpResponse;

void Check(bool ok) {
  if (!ok) std::abort();
}

// `bytes` fed `piece` bytes at a time onto a buffer that the parser consumes
// from, body bytes taken from its front as DirectExchange takes them.
ParsedHttpResponse ParseInPieces(std::string_view bytes, size_t piece, bool closed, const HttpParseLimits& limits) {
  HttpResponseParser parser(limits);
  ParsedHttpResponse out;
  std::string buffer;
  size_t fed = 0;
  size_t used = 0;  // bytes of `bytes` taken by the parser or as body
  for (;;) {
    const size_t consumed = parser.Consume(buffer);
    buffer.erase(0, consumed);
    used += consumed;
    if (parser.failed() || parser.done()) break;
    if (const uint64_t wanted = parser.body_wanted(); wanted > 0 && !buffer.empty()) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(wanted, buffer.size()));
      out.body.append(buffer, 0, take);
      buffer.erase(0, take);
      used += take;
      parser.BodyTaken(take);
      continue;
    }
    if (fed == bytes.size()) {
      if (closed) parser.EndOfStream();
      break;
    }
    const size_t n = std::min(piece, bytes.size() - fed);
    buffer.append(bytes.substr(fed, n));
    fed += n;
  }
  out.complete = parser.done();
  out.error = parser.error();
  out.interim = parser.interim();
  if (parser.head_done()) {
    out.status = parser.status();
    out.headers = parser.headers();
  }
  out.consumed = used;
  out.keep_alive = parser.done() && parser.keep_alive() && used == bytes.size();
  return out;
}

// What the fuzzer calls: parses one input both ways and checks they agree.
int FuzzHttpResponseParser(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const bool closed = (control & 1) != 0;
  HttpParseLimits limits;
  if ((control & 2) != 0) limits = HttpParseLimits{.max_line = 64, .max_head = 256, .max_interim = 2, .max_trailers = 64};
  const size_t piece = static_cast<size_t>(control >> 2) + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  const ParsedHttpResponse whole = tensorfs::ParseHttpResponse(bytes, closed, limits);
  const ParsedHttpResponse pieces = ParseInPieces(bytes, piece, closed, limits);
  Check(whole.complete == pieces.complete);
  Check(whole.error == pieces.error);
  Check(whole.status == pieces.status);
  Check(whole.headers == pieces.headers);
  Check(whole.body == pieces.body);
  Check(whole.interim == pieces.interim);
  Check(whole.keep_alive == pieces.keep_alive);
  Check(whole.consumed <= bytes.size());
  Check(whole.body.size() <= bytes.size());
  if (whole.complete) {
    Check(whole.error.empty());
    Check(whole.consumed == pieces.consumed);
    Check(whole.status >= 200 && whole.status <= 599);
    Check(whole.interim <= limits.max_interim);
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return FuzzHttpResponseParser(data, size); }
