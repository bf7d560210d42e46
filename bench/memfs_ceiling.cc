// memfs_ceiling: the fastest a FUSE file system can serve files on this
// machine, as the benchmark's ceiling for warm and cold mmap loads.
//
//   memfs_ceiling [-f] [--threads N] [--clone-fd 0|1] [--read-ahead-kb KB]
//                 [--read-ahead-at-opens KB:N,KB:N,...]
//                 [--max-background N] [--congestion-threshold N] [--read-sizes FILE]
//                 MOUNTPOINT FILE...
//
// Reads every FILE into memory, then mounts a read-only directory holding one
// file per FILE (by its base name) and serves reads straight from those bytes:
// no I/O, no locks, no copies beyond the reply. It is set up as tensorfs is:
// low-level API, multithreaded loop with one /dev/fuse descriptor per worker
// (clone_fd, --clone-fd 0 to share one), keep_cache, max_read and
// the mount's kernel readahead raised to 16 MiB (--read-ahead-kb; 0 keeps the
// kernel's; the INIT reply's max_readahead is set above it so that the kernel
// keeps the value asked), attributes cached for an hour, so
// that a loader running on it
// measures the kernel's and the FUSE protocol's share of a load and nothing
// else. --max-background and --congestion-threshold set the connection's
// values in the INIT reply (0, the default, leaves libfuse's), so that the
// kernel queues requests to it as it does to the file system compared.
// --read-ahead-at-opens KB:N,... gives the files opened the readahead another
// mount gave its files, in order: the first N opens at the first KB, the next
// at the second, ..., the last KB from then on (a file keeps the readahead in
// force when it is opened, so the mount's is set before each open is
// answered). --read-sizes FILE counts every READ request by its size rounded up to a
// power of two and writes the counts to FILE as a JSON object
// ({"4096": n, ..., "1048576": n}, bytes as the key) once the session ends. Stays in the foreground with -f (the benchmark runs it that way to
// read its peak RSS); otherwise daemonizes once mounted. Unmount with
// `fusermount3 -u MOUNTPOINT`.
//
// Thread-safety: the file table is built before the session starts and never
// changes, so the handlers read it from any worker thread without locks; the
// read-size counters are atomics, read once the loop has ended.
#define FUSE_USE_VERSION 314

#include <fuse_lowlevel.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr unsigned kMaxRead = 1u << 20;
constexpr double kCacheSeconds = 3600;
constexpr fuse_ino_t kFirstFileInode = 2;  // the root is FUSE_ROOT_ID (1)

struct MemFile {
  std::string name;
  std::string bytes;
};

// Immutable once the session starts.
std::vector<MemFile>* g_files = nullptr;

// Set before the session starts; 0 leaves libfuse's value.
unsigned g_max_background = 0;
unsigned g_congestion_threshold = 0;

// --read-ahead-at-opens: (KiB, opens) in order, and the mount's bdi file; set
// before the session starts. The opens so far and the value last written.
std::vector<std::pair<unsigned, uint64_t>> g_read_ahead_at_opens;
std::string g_read_ahead_path;
std::atomic<uint64_t> g_opens{0};
std::atomic<unsigned> g_read_ahead_set{0};

// The readahead the open numbered `n` (from 0) gets.
unsigned ReadAheadAtOpen(uint64_t n) {
  for (const auto& [kb, count] : g_read_ahead_at_opens) {
    if (n < count) return kb;
    n -= count;
  }
  return g_read_ahead_at_opens.back().first;
}

// READ requests by size rounded up to a power of two: bucket k holds the sizes
// in (2^(k-1), 2^k]; the last one also holds anything larger.
constexpr size_t kReadBuckets = 32;
std::array<std::atomic<uint64_t>, kReadBuckets> g_read_sizes{};

void CountRead(size_t size) {
  const size_t bucket = size <= 1 ? 0 : static_cast<size_t>(std::bit_width(size - 1));
  g_read_sizes[std::min(bucket, kReadBuckets - 1)].fetch_add(1, std::memory_order_relaxed);
}

// The counts as a JSON object, empty buckets left out; false if `path` cannot be written.
bool WriteReadSizes(const std::string& path) {
  std::ofstream out(path);
  out << '{';
  bool first = true;
  for (size_t k = 0; k < kReadBuckets; ++k) {
    const uint64_t n = g_read_sizes[k].load(std::memory_order_relaxed);
    if (n == 0) continue;
    out << (first ? "" : ", ") << '"' << (uint64_t{1} << k) << "\": " << n;
    first = false;
  }
  out << "}\n";
  out.flush();
  return static_cast<bool>(out);
}

const MemFile* FileOf(fuse_ino_t ino) {
  if (ino < kFirstFileInode || ino - kFirstFileInode >= g_files->size()) return nullptr;
  return &(*g_files)[ino - kFirstFileInode];
}

struct stat AttrOf(fuse_ino_t ino) {
  struct stat st {};
  st.st_ino = ino;
  st.st_uid = getuid();
  st.st_gid = getgid();
  if (ino == FUSE_ROOT_ID) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(FileOf(ino)->bytes.size());
    st.st_blocks = (st.st_size + 511) / 512;
  }
  return st;
}

// The INIT reply's max_readahead. When the kernel takes the reply it lowers the
// bdi's readahead to it, so a read_ahead_kb written before INIT was answered
// would end at this value: it stays above anything --read-ahead-kb asks for.
constexpr unsigned kInitMaxReadahead = 1u << 30;

void Init(void*, fuse_conn_info* conn) {
  conn->max_read = kMaxRead;
  conn->max_readahead = kInitMaxReadahead;
  if (g_max_background != 0) conn->max_background = g_max_background;
  if (g_congestion_threshold != 0) conn->congestion_threshold = g_congestion_threshold;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != FUSE_ROOT_ID) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  for (size_t i = 0; i < g_files->size(); ++i) {
    if ((*g_files)[i].name == name) {
      fuse_entry_param e{};
      e.ino = kFirstFileInode + i;
      e.attr = AttrOf(e.ino);
      e.attr_timeout = kCacheSeconds;
      e.entry_timeout = kCacheSeconds;
      fuse_reply_entry(req, &e);
      return;
    }
  }
  fuse_reply_err(req, ENOENT);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != FUSE_ROOT_ID && FileOf(ino) == nullptr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st = AttrOf(ino);
  fuse_reply_attr(req, &st, kCacheSeconds);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (ino != FUSE_ROOT_ID) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  // Entries: ".", "..", then the files; `off` is the index of the next one.
  std::vector<char> buf(size);
  size_t used = 0;
  const size_t count = 2 + g_files->size();
  for (size_t i = static_cast<size_t>(off); i < count; ++i) {
    const char* name = i == 0 ? "." : i == 1 ? ".." : (*g_files)[i - 2].name.c_str();
    struct stat st {};
    st.st_ino = i < 2 ? FUSE_ROOT_ID : kFirstFileInode + (i - 2);
    st.st_mode = i < 2 ? S_IFDIR : S_IFREG;
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                                          static_cast<off_t>(i + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (FileOf(ino) == nullptr) {
    fuse_reply_err(req, ino == FUSE_ROOT_ID ? EISDIR : ENOENT);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  fi->keep_cache = 1;
  if (!g_read_ahead_at_opens.empty()) {
    const unsigned kb = ReadAheadAtOpen(g_opens.fetch_add(1, std::memory_order_relaxed));
    if (g_read_ahead_set.exchange(kb, std::memory_order_relaxed) != kb) {
      std::ofstream out(g_read_ahead_path);
      out << kb << '\n';
    }
  }
  fuse_reply_open(req, fi);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  CountRead(size);
  const MemFile* file = FileOf(ino);
  if (file == nullptr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  const size_t offset = std::min(static_cast<size_t>(off), file->bytes.size());
  const size_t n = std::min(size, file->bytes.size() - offset);
  fuse_reply_buf(req, file->bytes.data() + offset, n);
}

int Usage() {
  std::fprintf(stderr,
               "usage: memfs_ceiling [-f] [--threads N] [--clone-fd 0|1] [--read-ahead-kb KB]\n"
               "                     [--read-ahead-at-opens KB:N,...] [--max-background N]\n"
               "                     [--congestion-threshold N] [--read-sizes FILE] MOUNTPOINT FILE...\n");
  return 2;
}

// As tensorfs does: finds the mount's device in /proc/self/mountinfo (a stat()
// would wait on this process) and writes /sys/class/bdi/DEV/read_ahead_kb.
// `point` is resolved before mounting (afterwards it leads into this mount).
// Keeps the file's path for --read-ahead-at-opens.
void SetReadAhead(const std::string& point, unsigned kb) {
  if (kb == 0) return;
  std::ifstream in("/proc/self/mountinfo");
  std::string line, device;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mnt;
    if ((fields >> id >> parent >> dev >> root >> mnt) && mnt == point) device = dev;
  }
  const std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
  if (!device.empty()) g_read_ahead_path = path;
  g_read_ahead_set.store(kb, std::memory_order_relaxed);
  {
    std::ofstream out(path);
    out << kb << '\n';
    out.flush();
    if (device.empty() || !out) std::fprintf(stderr, "memfs_ceiling: cannot set read_ahead_kb of %s\n", point.c_str());
  }
  // The INIT reply (kInitMaxReadahead) cannot lower it any more: what is read
  // back is what the mount runs with.
  std::ifstream in_force(path);
  unsigned got = 0;
  if (!device.empty() && in_force >> got && got != kb) {
    std::fprintf(stderr, "memfs_ceiling: --read-ahead-kb %u: the kernel keeps %s at %u KiB\n", kb, path.c_str(), got);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool foreground = false;
  unsigned threads = 16;
  int clone_fd = 1;
  unsigned read_ahead_kb = 16384;
  std::string read_sizes_path;
  std::string mountpoint;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-f") {
      foreground = true;
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else if (arg == "--clone-fd" && i + 1 < argc) {
      clone_fd = std::atoi(argv[++i]) != 0 ? 1 : 0;
    } else if (arg == "--read-ahead-kb" && i + 1 < argc) {
      read_ahead_kb = static_cast<unsigned>(std::max(0, std::atoi(argv[++i])));
    } else if (arg == "--read-ahead-at-opens" && i + 1 < argc) {
      // KB:N,KB:N,...
      std::istringstream list(argv[++i]);
      std::string item;
      while (std::getline(list, item, ',')) {
        unsigned kb = 0;
        unsigned long long count = 0;
        if (std::sscanf(item.c_str(), "%u:%llu", &kb, &count) != 2 || kb == 0) return Usage();
        g_read_ahead_at_opens.emplace_back(kb, count);
      }
      if (g_read_ahead_at_opens.empty()) return Usage();
    } else if (arg == "--max-background" && i + 1 < argc) {
      g_max_background = static_cast<unsigned>(std::max(0, std::atoi(argv[++i])));
    } else if (arg == "--congestion-threshold" && i + 1 < argc) {
      g_congestion_threshold = static_cast<unsigned>(std::max(0, std::atoi(argv[++i])));
    } else if (arg == "--read-sizes" && i + 1 < argc) {
      read_sizes_path = argv[++i];
    } else if (arg.starts_with("-")) {
      return Usage();
    } else if (mountpoint.empty()) {
      mountpoint = arg;
    } else {
      paths.emplace_back(arg);
    }
  }
  if (mountpoint.empty() || paths.empty()) return Usage();

  std::vector<MemFile> files;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "memfs_ceiling: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
    MemFile file;
    file.name = path.substr(path.find_last_of('/') + 1);
    in.seekg(0, std::ios::end);
    file.bytes.resize(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    if (!in.read(file.bytes.data(), static_cast<std::streamsize>(file.bytes.size()))) {
      std::fprintf(stderr, "memfs_ceiling: cannot read %s\n", path.c_str());
      return 1;
    }
    files.push_back(std::move(file));
  }
  g_files = &files;

  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;

  const std::string fuse_opts = "ro,default_permissions,fsname=memfs_ceiling,subtype=memfs,max_read=" +
                                std::to_string(kMaxRead);
  char arg0[] = "memfs_ceiling";
  char arg1[] = "-o";
  std::vector<char> arg2(fuse_opts.begin(), fuse_opts.end());
  arg2.push_back('\0');
  char* fuse_argv[] = {arg0, arg1, arg2.data(), nullptr};
  fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
  fuse_session* session = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  // The parse leaves `args` allocated by libfuse: freed once the session no longer needs it.
  if (session == nullptr) {
    fuse_opt_free_args(&args);
    return 1;
  }
  int rc = 1;
  if (fuse_set_signal_handlers(session) == 0) {
    char resolved[PATH_MAX];
    const std::string point = realpath(mountpoint.c_str(), resolved) != nullptr ? resolved : mountpoint;
    if (fuse_session_mount(session, mountpoint.c_str()) == 0) {
      SetReadAhead(point, g_read_ahead_at_opens.empty() ? read_ahead_kb : g_read_ahead_at_opens.front().first);
      if (fuse_daemonize(foreground ? 1 : 0) == 0) {
        fuse_loop_config* config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(config, static_cast<unsigned>(clone_fd));
        fuse_loop_cfg_set_max_threads(config, threads);
        fuse_loop_cfg_set_idle_threads(config, std::min(threads, 10u));
        rc = fuse_session_loop_mt(session, config) == 0 ? 0 : 1;
        fuse_loop_cfg_destroy(config);
      }
      fuse_session_unmount(session);
    }
    fuse_remove_signal_handlers(session);
  }
  fuse_session_destroy(session);
  fuse_opt_free_args(&args);
  if (!read_sizes_path.empty() && !WriteReadSizes(read_sizes_path)) {
    std::fprintf(stderr, "memfs_ceiling: cannot write %s\n", read_sizes_path.c_str());
    rc = 1;
  }
  return rc;
}
