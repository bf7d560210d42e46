#include "core/store/s3/s3_xml.h"

#include <expat.h>

#include <charconv>
#include <functional>
#include <memory>

namespace tensorfs {
namespace {

// Walks a document with expat, calling on_start when an element opens and
// on_end (with the element's own text) when it closes; `path` holds the names
// of the open elements, the current one last.
class XmlWalker {
 public:
  using Path = std::vector<std::string>;
  using OnStart = std::function<void(const Path& path)>;
  using OnEnd = std::function<Status(const Path& path, std::string_view text)>;

  XmlWalker(const XmlLimits& limits, OnStart on_start, OnEnd on_end)
      : limits_(limits), on_start_(std::move(on_start)), on_end_(std::move(on_end)) {}

  Status Parse(std::string_view xml) {
    if (xml.size() > limits_.max_bytes) {
      return InternalError("the XML document is " + std::to_string(xml.size()) + " bytes, over the limit of " +
                           std::to_string(limits_.max_bytes));
    }
    std::unique_ptr<XML_ParserStruct, void (*)(XML_Parser)> parser(XML_ParserCreate("UTF-8"), XML_ParserFree);
    if (parser == nullptr) return InternalError("cannot create an XML parser (out of memory)");
    parser_ = parser.get();
    XML_SetUserData(parser_, this);
    XML_SetElementHandler(parser_, &XmlWalker::Start, &XmlWalker::End);
    XML_SetCharacterDataHandler(parser_, &XmlWalker::Text);
    XML_SetStartDoctypeDeclHandler(parser_, &XmlWalker::Doctype);
    XML_SetEntityDeclHandler(parser_, &XmlWalker::EntityDecl);
    XML_SetParamEntityParsing(parser_, XML_PARAM_ENTITY_PARSING_NEVER);
    const XML_Status status = XML_Parse(parser_, xml.data(), static_cast<int>(xml.size()), /*isFinal=*/XML_TRUE);
    if (!failure_.ok()) return failure_;
    if (status != XML_STATUS_OK) {
      return UnavailableError(std::string("the XML document is malformed: ") +
                           XML_ErrorString(XML_GetErrorCode(parser_)) + " at line " +
                           std::to_string(XML_GetCurrentLineNumber(parser_)));
    }
    return OkStatus();
  }

 private:
  void Fail(Status s) {
    if (failure_.ok()) failure_ = std::move(s);
    XML_StopParser(parser_, XML_FALSE);
  }

  static void Start(void* data, const XML_Char* name, const XML_Char**) {
    auto* w = static_cast<XmlWalker*>(data);
    if (!w->failure_.ok()) return;
    if (++w->elements_ > w->limits_.max_elements) {
      return w->Fail(InternalError("the XML document has more than " + std::to_string(w->limits_.max_elements) +
                                   " elements"));
    }
    if (static_cast<int>(w->path_.size()) >= w->limits_.max_depth) {
      return w->Fail(InternalError("the XML document nests deeper than " + std::to_string(w->limits_.max_depth) +
                                   " elements"));
    }
    w->path_.emplace_back(name);
    w->texts_.emplace_back();
    if (w->on_start_) w->on_start_(w->path_);
  }

  static void End(void* data, const XML_Char*) {
    auto* w = static_cast<XmlWalker*>(data);
    if (!w->failure_.ok()) return;
    if (Status s = w->on_end_(w->path_, w->texts_.back()); !s.ok()) return w->Fail(std::move(s));
    w->path_.pop_back();
    w->texts_.pop_back();
  }

  static void Text(void* data, const XML_Char* s, int len) {
    auto* w = static_cast<XmlWalker*>(data);
    if (!w->failure_.ok() || w->texts_.empty()) return;
    std::string& text = w->texts_.back();
    if (text.size() + static_cast<size_t>(len) > w->limits_.max_text) {
      return w->Fail(InternalError("an XML element's text is longer than " + std::to_string(w->limits_.max_text) +
                                   " bytes"));
    }
    text.append(s, static_cast<size_t>(len));
  }

  static void Doctype(void* data, const XML_Char*, const XML_Char*, const XML_Char*, int) {
    static_cast<XmlWalker*>(data)->Fail(
        InternalError("the XML document has a document type declaration, which is refused"));
  }

  static void EntityDecl(void* data, const XML_Char*, int, const XML_Char*, int, const XML_Char*, const XML_Char*,
                         const XML_Char*, const XML_Char*) {
    static_cast<XmlWalker*>(data)->Fail(InternalError("the XML document declares an entity, which is refused"));
  }

  const XmlLimits& limits_;
  OnStart on_start_;
  OnEnd on_end_;
  XML_Parser parser_ = nullptr;
  Path path_;
  std::vector<std::string> texts_;
  size_t elements_ = 0;
  Status failure_;
};

bool Is(const XmlWalker::Path& path, std::initializer_list<std::string_view> names) {
  if (path.size() != names.size()) return false;
  size_t i = 0;
  for (std::string_view n : names) {
    if (path[i++] != n) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
      continue;
    }
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return std::nullopt;
    const int hi = HexValue(in[i + 1]);
    const int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

StatusOr<ListObjectsPage> ParseListObjectsV2(std::string_view xml, const XmlLimits& limits) {
  ListObjectsPage page;
  ListedObject current;
  std::string encoding;
  bool root_seen = false;
  XmlWalker walker(
      limits,
      [&](const XmlWalker::Path& path) {
        if (path.size() == 1) root_seen = path[0] == "ListBucketResult";
        if (Is(path, {"ListBucketResult", "Contents"})) current = ListedObject{};
      },
      [&](const XmlWalker::Path& path, std::string_view text) -> Status {
        if (path.empty() || path[0] != "ListBucketResult") {
          return InternalError("the reply is not a ListObjectsV2 result (its root element is <" +
                               (path.empty() ? std::string() : path[0]) + ">)");
        }
        if (Is(path, {"ListBucketResult", "Contents", "Key"})) {
          current.key = std::string(text);
        } else if (Is(path, {"ListBucketResult", "Contents", "Size"})) {
          auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), current.size);
          if (ec != std::errc() || p != text.data() + text.size()) {
            return InternalError("the listing gives the object size '" + std::string(text) + "', not a number");
          }
        } else if (Is(path, {"ListBucketResult", "Contents", "ETag"})) {
          current.etag = std::string(text);
        } else if (Is(path, {"ListBucketResult", "Contents", "LastModified"})) {
          current.last_modified = std::string(text);
        } else if (Is(path, {"ListBucketResult", "Contents"})) {
          if (current.key.empty()) return InternalError("the listing has an object without a <Key>");
          page.objects.push_back(std::move(current));
        } else if (Is(path, {"ListBucketResult", "CommonPrefixes", "Prefix"})) {
          page.common_prefixes.emplace_back(text);
        } else if (Is(path, {"ListBucketResult", "IsTruncated"})) {
          if (text != "true" && text != "false") {
            return InternalError("the listing's <IsTruncated> is '" + std::string(text) + "', not true or false");
          }
          page.is_truncated = text == "true";
        } else if (Is(path, {"ListBucketResult", "NextContinuationToken"})) {
          page.next_continuation_token = std::string(text);
        } else if (Is(path, {"ListBucketResult", "EncodingType"})) {
          encoding = std::string(text);
        } else if (Is(path, {"ListBucketResult", "KeyCount"})) {
          int n = 0;
          auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
          if (ec == std::errc() && p == text.data() + text.size()) page.key_count = n;
        }
        return OkStatus();
      });
  RETURN_IF_ERROR(walker.Parse(xml));
  if (!root_seen) return InternalError("the reply is not a ListObjectsV2 result (no <ListBucketResult>)");
  if (encoding == "url") {
    auto decode = [](std::string& s) -> Status {
      std::optional<std::string> d = PercentDecode(s);
      if (!d) return InternalError("the listing has a malformed url-encoded name '" + s + "'");
      s = std::move(*d);
      return OkStatus();
    };
    for (ListedObject& o : page.objects) RETURN_IF_ERROR(decode(o.key));
    for (std::string& p : page.common_prefixes) RETURN_IF_ERROR(decode(p));
  } else if (!encoding.empty()) {
    return InternalError("the listing has the unknown <EncodingType> '" + encoding + "'");
  }
  return page;
}

std::optional<AwsError> ParseAwsError(std::string_view body) {
  if (body.empty()) return std::nullopt;
  AwsError error;
  bool is_error = false;
  XmlLimits limits;
  limits.max_bytes = 1 << 20;
  XmlWalker walker(
      limits, [&](const XmlWalker::Path& path) { is_error |= path.size() <= 2 && path.back() == "Error"; },
      [&](const XmlWalker::Path& path, std::string_view text) -> Status {
        if (path.size() < 2 || path[path.size() - 2] != "Error") return OkStatus();
        const std::string& field = path.back();
        if (field == "Code") error.code = std::string(text);
        if (field == "Message") error.message = std::string(text);
        if (field == "Region") error.region = std::string(text);
        if (field == "Endpoint") error.endpoint = std::string(text);
        return OkStatus();
      });
  if (!walker.Parse(body).ok() || !is_error || error.code.empty()) return std::nullopt;
  return error;
}

StatusOr<StsCredentials> ParseAssumeRoleWithWebIdentity(std::string_view xml) {
  StsCredentials c;
  XmlLimits limits;
  limits.max_bytes = 1 << 20;
  XmlWalker walker(limits, nullptr, [&](const XmlWalker::Path& path, std::string_view text) -> Status {
    if (!Is(path, {"AssumeRoleWithWebIdentityResponse", "AssumeRoleWithWebIdentityResult", "Credentials",
                   path.back()})) {
      return OkStatus();
    }
    if (path.back() == "AccessKeyId") c.access_key_id = std::string(text);
    if (path.back() == "SecretAccessKey") c.secret_access_key = std::string(text);
    if (path.back() == "SessionToken") c.session_token = std::string(text);
    if (path.back() == "Expiration") c.expiration = std::string(text);
    return OkStatus();
  });
  RETURN_IF_ERROR(walker.Parse(xml).WithContext("the AssumeRoleWithWebIdentity reply"));
  if (c.access_key_id.empty() || c.secret_access_key.empty() || c.session_token.empty()) {
    return InternalError("the AssumeRoleWithWebIdentity reply has no complete <Credentials> (AccessKeyId, "
                         "SecretAccessKey and SessionToken)");
  }
  return c;
}

}  // namespace tensorfs
