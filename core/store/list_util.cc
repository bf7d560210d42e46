#include "core/store/list_util.h"

#include <string>

namespace tensorfs {

void AddToListing(ObjectInfo info, std::string_view prefix, std::string_view delimiter,
                  Listing& listing) {
  if (!delimiter.empty()) {
    std::string_view rest = std::string_view(info.name).substr(prefix.size());
    size_t pos = rest.find(delimiter);
    if (pos != std::string_view::npos) {
      std::string common(info.name.substr(0, prefix.size() + pos + delimiter.size()));
      if (listing.prefixes.empty() || listing.prefixes.back() != common) {
        listing.prefixes.push_back(std::move(common));
      }
      return;
    }
  }
  listing.objects.push_back(std::move(info));
}

Status CheckRangeWithin(const ObjectId& object, uint64_t offset, uint64_t length, uint64_t size) {
  if (offset > size || length > size - offset) {
    return InvalidArgumentError("read of " + std::to_string(length) + " bytes at offset " +
                                std::to_string(offset) + " is past the end of " + object.name +
                                " (" + std::to_string(size) + " bytes)");
  }
  return OkStatus();
}

}  // namespace tensorfs
