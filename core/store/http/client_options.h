// HttpClientOptions: how a cloud store's HTTP client connects, waits and
// retries; the same for every store over HTTP (GcsOptions and S3Options start
// with it).
//
// Thread-safety: plain values and a pure function (it reads ca_file).
#ifndef TENSORFS_CORE_STORE_HTTP_CLIENT_OPTIONS_H_
#define TENSORFS_CORE_STORE_HTTP_CLIENT_OPTIONS_H_

#include <chrono>
#include <string>

#include "core/util/status.h"

namespace tensorfs {

struct HttpClientOptions {
  // -o ca_file=PATH: PEM CA certificates that https endpoints are verified
  // against instead of the system's. "" = the system's CA certificates (or
  // what the store's own configuration names).
  std::string ca_file;
  // Upper bound on requests in flight (and so on open connections).
  int max_connections = 64;
  std::chrono::milliseconds connect_timeout{10000};
  // A response that delivers no bytes for this long is abandoned (and retried).
  std::chrono::seconds stall_timeout{30};
  // How long one operation keeps retrying transient failures without progress.
  std::chrono::seconds retry_deadline{120};
  std::chrono::milliseconds initial_backoff{100};
  // Each wait between attempts is at most this long (and at most 1 s after a
  // failure to connect), so a server that recovers is found within seconds.
  std::chrono::milliseconds max_backoff{2000};
  // -o user_agent_prefix: put before "tensorfs/VERSION" in every request's
  // User-Agent ("" = none), as mount-s3's --user-agent-prefix is.
  std::string user_agent_prefix;
};

// Checks the ranges, and that ca_file (if given) is a readable PEM file: a
// wrong path or a file of the wrong kind fails at start-up; whether the
// certificates vouch for the endpoint is for the first TLS handshake to say.
Status ValidateHttpClientOptions(const HttpClientOptions& options);

// The User-Agent of a store's requests: "tensorfs/0.1", after
// user_agent_prefix and a space when there is one.
std::string UserAgentFor(const HttpClientOptions& options);

// The CA bundle https is verified against when no ca_file is given: the first
// of the usual system locations that exists (Debian's
// /etc/ssl/certs/ca-certificates.crt, then Fedora's, Amazon Linux's and RHEL's
// /etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/ca-bundle.pem of openSUSE,
// /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, /etc/ssl/cert.pem of
// Alpine), so that tensorfs started on another distribution's userland (the
// mount-s3 bundle in Mountpoint's CSI driver image) trusts that system's CAs;
// "" when none exists (libcurl's built-in default is used).
std::string SystemCaFile();

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_CLIENT_OPTIONS_H_
