#include "tests/support/gcs_test_server.h"

#include <curl/curl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

namespace tensorfs::testing {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kScript[] = TENSORFS_SOURCE_DIR "/tests/support/gcs_test_server.py";
constexpr auto kStartTimeout = std::chrono::seconds(60);  // only a hung start takes this long
constexpr auto kStopGrace = std::chrono::seconds(2);
constexpr auto kPollInterval = std::chrono::milliseconds(20);

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendToString(char* data, size_t size, size_t nmemb, void* out) {
  static_cast<std::string*>(out)->append(data, size * nmemb);
  return size * nmemb;
}

// Percent-encodes everything but RFC 3986 unreserved characters, so '/' in an
// object name becomes %2F as GCS expects.
std::string UrlEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped (wait status " + std::to_string(status) + ")";
}

// The port written by --port-file, or 0 while the file does not exist yet (it
// appears complete, by rename).
int ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  if (in >> port) return port;
  return 0;
}

}  // namespace

GcsTestServer::GcsTestServer(GcsTestServerOptions options, std::string run_dir)
    : options_(std::move(options)), run_dir_(std::move(run_dir)) {}

std::unique_ptr<GcsTestServer> GcsTestServer::Start(GcsTestServerOptions options, std::string* error) {
  std::string ignored;
  if (error == nullptr) error = &ignored;
  InitCurlOnce();
  struct stat st;
  if (options.data_dir.empty() || ::stat(options.data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "GcsTestServer: data_dir '" + options.data_dir + "' is not a directory";
    return nullptr;
  }
  if (::access(kScript, R_OK) != 0) {
    *error = std::string("GcsTestServer: cannot read ") + kScript + ": " + std::strerror(errno);
    return nullptr;
  }
  std::string run_dir_template = "/tmp/gcs_test_server.XXXXXX";
  if (::mkdtemp(run_dir_template.data()) == nullptr) {
    *error = std::string("GcsTestServer: mkdtemp failed: ") + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<GcsTestServer> server(new GcsTestServer(std::move(options), run_dir_template));
  if (!server->Launch(0, error)) return nullptr;
  return server;
}

GcsTestServer::~GcsTestServer() {
  Stop();
  ::unlink((run_dir_ + "/port").c_str());
  ::unlink((run_dir_ + "/port.tmp").c_str());
  ::rmdir(run_dir_.c_str());
}

std::string GcsTestServer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

bool GcsTestServer::Launch(int port, std::string* error) {
  const std::string port_file = run_dir_ + "/port";
  ::unlink(port_file.c_str());
  std::vector<std::string> args = {kPython, kScript, "--data", options_.data_dir, "--host", "127.0.0.1",
                                   "--port", std::to_string(port), "--port-file", port_file};
  if (std::getenv("TENSORFS_GCS_TEST_SERVER_VERBOSE") == nullptr) args.push_back("--quiet");
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("GcsTestServer: fork failed: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::close_range(3, ~0U, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  std::string last_problem = "it did not write its port file";
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *error = "GcsTestServer: " + std::string(kScript) + " " + DescribeWaitStatus(status) +
               " before answering (its stderr is above)";
      return false;
    }
    // The port file was removed above, so its presence means this child listens.
    if (const int written = ReadPortFile(port_file); written != 0) {
      port_ = written;
      HttpResult health = Request("GET", "/_control/health", "");
      if (health.status == 200) return true;
      last_problem = health.status != 0 ? "/_control/health answered " + std::to_string(health.status)
                                        : "/_control/health: " + health.error;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  Stop();
  *error = "GcsTestServer: no healthy server within " + std::to_string(kStartTimeout.count()) +
           " s: " + last_problem;
  return false;
}

void GcsTestServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool GcsTestServer::Restart() {
  Stop();
  std::string error;
  if (!Launch(port_, &error)) {
    SetLastError(std::move(error));
    return false;
  }
  return true;
}

bool GcsTestServer::InjectFaults(const std::string& rules_json) {
  return Call("POST", "/_control/faults", rules_json);
}

bool GcsTestServer::ClearFaults() { return Call("DELETE", "/_control/faults", ""); }

nlohmann::json GcsTestServer::Stats() {
  std::string body;
  if (!Call("GET", "/_control/stats", "", &body)) return nlohmann::json();
  nlohmann::json stats = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (stats.is_discarded()) {
    SetLastError("GcsTestServer: /_control/stats did not return JSON: " + body);
    return nlohmann::json();
  }
  return stats;
}

bool GcsTestServer::ResetStats() { return Call("POST", "/_control/stats/reset", ""); }

bool GcsTestServer::SetShaping(double latency_ms, double conn_rate, double total_rate) {
  nlohmann::json body = {{"latency_ms", latency_ms}, {"conn_rate", conn_rate}, {"total_rate", total_rate}};
  return Call("POST", "/_control/shaping", body.dump());
}

bool GcsTestServer::Upload(const std::string& bucket, const std::string& name, const std::string& bytes) {
  return Call("POST", "/upload/storage/v1/b/" + UrlEncode(bucket) + "/o?uploadType=media&name=" + UrlEncode(name),
              bytes);
}

nlohmann::json GcsTestServer::NewS3Session(double lifetime_s) {
  std::string body;
  if (!Call("POST", "/_control/s3/sessions", nlohmann::json{{"lifetime", lifetime_s}}.dump(), &body)) {
    return nlohmann::json();
  }
  nlohmann::json session = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  return session.is_discarded() ? nlohmann::json() : session;
}

bool GcsTestServer::ExpireS3Sessions() { return Call("POST", "/_control/s3/expire_sessions", ""); }

std::string GcsTestServer::last_error() const {
  MutexLock lock(mu_);
  return last_error_;
}

void GcsTestServer::SetLastError(std::string error) {
  MutexLock lock(mu_);
  last_error_ = std::move(error);
}

bool GcsTestServer::Call(const std::string& method, const std::string& path, const std::string& body,
                         std::string* response) {
  if (pid_ <= 0) {
    SetLastError("GcsTestServer: " + method + " " + path + ": the server is not running");
    return false;
  }
  HttpResult result = Request(method, path, body);
  if (result.status >= 200 && result.status < 300) {
    if (response != nullptr) *response = std::move(result.body);
    return true;
  }
  SetLastError("GcsTestServer: " + method + " " + path + ": " +
               (result.status == 0 ? result.error : "HTTP " + std::to_string(result.status) + " " + result.body));
  return false;
}

GcsTestServer::HttpResult GcsTestServer::Request(const std::string& method, const std::string& path,
                                                 const std::string& body) const {
  HttpResult result;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.error = "curl_easy_init failed";
    return result;
  }
  const std::string url = endpoint() + path;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, path.starts_with("/upload/") ? "Content-Type: application/octet-stream"
                                                                     : "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 60000L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &result.body);
  if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else if (method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  } else {
    result.error = curl_easy_strerror(code);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return result;
}

}  // namespace tensorfs::testing
