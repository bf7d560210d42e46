#include "core/store/http/client_options.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tensorfs {
namespace {

Status CheckCaFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError("ca_file " + path + " cannot be read (" + std::strerror(errno) +
                                "): give a PEM file of CA certificates");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return InvalidArgumentError("ca_file " + path +
                                " holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' line): give the CA "
                                "certificates in PEM form, e.g. openssl x509 -in ca.der -inform der -out ca.pem");
  }
  return OkStatus();
}

constexpr const char* kSystemCaFiles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Gentoo
    "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL, Amazon Linux
    "/etc/ssl/ca-bundle.pem",                             // openSUSE
    "/etc/pki/tls/cacert.pem",                            // OpenELEC
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // CentOS, RHEL 7
    "/etc/ssl/cert.pem",                                  // Alpine
};

constexpr std::string_view kUserAgent = "tensorfs/0.1";

}  // namespace

std::string UserAgentFor(const HttpClientOptions& options) {
  if (options.user_agent_prefix.empty()) return std::string(kUserAgent);
  return options.user_agent_prefix + " " + std::string(kUserAgent);
}

std::string SystemCaFile() {
  for (const char* path : kSystemCaFiles) {
    struct stat st;
    if (::stat(path, &st) == 0 && S_ISREG(st.st_mode)) return path;
  }
  return "";
}

Status ValidateHttpClientOptions(const HttpClientOptions& options) {
  if (!options.ca_file.empty()) RETURN_IF_ERROR(CheckCaFile(options.ca_file));
  if (options.max_connections < 1 || options.max_connections > 4096) {
    return InvalidArgumentError("max_connections=" + std::to_string(options.max_connections) +
                                " is out of range (1 to 4096)");
  }
  for (char c : options.user_agent_prefix) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgumentError("user_agent_prefix holds a control character: give printable text");
    }
  }
  if (options.connect_timeout.count() <= 0) return InvalidArgumentError("connect_timeout must be positive");
  if (options.stall_timeout.count() <= 0) return InvalidArgumentError("stall_timeout must be positive");
  if (options.retry_deadline.count() < 0) return InvalidArgumentError("retry_deadline must not be negative");
  if (options.initial_backoff.count() <= 0 || options.max_backoff < options.initial_backoff) {
    return InvalidArgumentError("backoff must satisfy 0 < initial_backoff <= max_backoff");
  }
  return OkStatus();
}

}  // namespace tensorfs
