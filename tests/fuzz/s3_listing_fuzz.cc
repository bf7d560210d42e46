// libFuzzer target: the XML of S3 and STS answers (core/store/s3/s3_xml.h) over
// arbitrary bytes: a ListObjectsV2 page, an error body, STS credentials. Parsing
// returns within its limits; an accepted page holds what its limits allow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/store/s3/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorfs;
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  XmlLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_elements = 5000;
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(xml, limits);
  if (page.ok()) {
    if (page->objects.size() + page->common_prefixes.size() > limits.max_elements) std::abort();
    for (const ListedObject& o : page->objects) {
      if (o.key.empty() || o.key.size() > limits.max_text) std::abort();
    }
  }
  (void)ParseAwsError(xml);
  (void)ParseAssumeRoleWithWebIdentity(xml);
  return 0;
}
