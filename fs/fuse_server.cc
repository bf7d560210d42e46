#define FUSE_USE_VERSION 314
#include "fs/fuse_server.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/engine/tuning.h"
#include "core/util/process.h"
#include "fs/errno_map.h"
#include "fs/mount_recovery.h"
#include "fs/stats.h"

namespace tensorfs {

// The engine tells a reader's requests apart by their largest size.
static_assert(FuseServer::kMaxRead == Tuning{}.max_request, "the engine's max_request is the mount's max_read");

// The request handlers. Each decodes, calls the Namespace, replies once.
struct FuseHandlers {
  static FuseServer& Server(fuse_req_t req) { return *static_cast<FuseServer*>(fuse_req_userdata(req)); }
  static Namespace& Ns(fuse_req_t req) { return Server(req).ns_; }

  static void ReplyError(fuse_req_t req, const Status& status) {
    int err = ToErrno(status);
    if (err == ENOENT) {
      spdlog::trace("{}", status.message());
    } else if (std::optional<uint64_t> suppressed = Server(req).error_log_limiter_.Allow()) {
      // What an application sees as an I/O error deserves a warning, but a
      // failing mmap can fault thousands of times a second: one a second.
      spdlog::warn("request failed ({}): {}{}", std::strerror(err), status.ToString(), SuppressedSuffix(*suppressed));
    } else {
      spdlog::debug("request failed ({}): {}", std::strerror(err), status.ToString());
    }
    fuse_reply_err(req, err);
  }

  static struct stat StatOf(fuse_req_t req, const NodeAttr& attr) {
    const FuseServer& server = Server(req);
    struct stat st = {};
    st.st_ino = attr.id.value;
    st.st_mode = attr.is_dir ? (S_IFDIR | server.options_.dir_mode) : (S_IFREG | server.options_.file_mode);
    st.st_nlink = attr.is_dir ? 2 : 1;
    st.st_uid = server.uid_;
    st.st_gid = server.gid_;
    st.st_size = static_cast<off_t>(attr.size);
    // The preferred I/O size: stdio and Python size their buffers by it, so a
    // loader reading an 8-byte header length asks for this much, which must
    // stay within the head chunk fetched for headers.
    st.st_blksize = 128 << 10;
    st.st_blocks = static_cast<blkcnt_t>((attr.size + 511) / 512);
    st.st_mtim.tv_sec = attr.mtime_ns / 1000000000;
    st.st_mtim.tv_nsec = attr.mtime_ns % 1000000000;
    st.st_atim = st.st_mtim;
    st.st_ctim = st.st_mtim;
    return st;
  }

  static fuse_entry_param EntryOf(fuse_req_t req, const NodeAttr& attr) {
    fuse_entry_param e = {};
    e.ino = attr.id.value;
    e.generation = 1;
    e.attr = StatOf(req, attr);
    e.attr_timeout = Server(req).options_.attr_timeout_s;
    e.entry_timeout = Server(req).options_.entry_timeout_s;
    return e;
  }

  // The kernel did not take a reply that handed it `node` (the request was
  // interrupted): the reference counted for it is given back.
  static void Unreferenced(fuse_req_t req, NodeId node) {
    const Namespace::Forgotten forgotten[] = {{node, 1}};
    Ns(req).Forget(forgotten);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    StatusOr<NodeAttr> attr = Ns(req).Lookup(NodeId{parent}, name);
    if (!attr.ok() && attr.status().code() == ErrorCode::kNotFound) {
      // A negative entry: the kernel remembers the name is absent until the
      // namespace would look for it again (negative_ttl), so repeated probes
      // cost nothing.
      fuse_entry_param e = {};
      e.entry_timeout = Server(req).negative_timeout_s_;
      fuse_reply_entry(req, &e);
      return;
    }
    if (!attr.ok()) return ReplyError(req, attr.status());
    fuse_entry_param e = EntryOf(req, *attr);
    if (fuse_reply_entry(req, &e) == -ENOENT) Unreferenced(req, attr->id);
  }

  static void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    const Namespace::Forgotten forgotten[] = {{NodeId{ino}, nlookup}};
    Ns(req).Forget(forgotten);
    fuse_reply_none(req);
  }

  static void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
    std::vector<Namespace::Forgotten> forgotten;
    forgotten.reserve(count);
    for (size_t i = 0; i < count; ++i) forgotten.push_back({NodeId{forgets[i].ino}, forgets[i].nlookup});
    Ns(req).Forget(forgotten);
    fuse_reply_none(req);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    StatusOr<NodeAttr> attr = Ns(req).GetAttr(NodeId{ino});
    if (!attr.ok()) return ReplyError(req, attr.status());
    struct stat st = StatOf(req, *attr);
    fuse_reply_attr(req, &st, Server(req).options_.attr_timeout_s);
  }

  // A directory handle holds the listing taken at opendir, so a long readdir
  // sequence sees one consistent list and costs one copy.
  struct DirHandle {
    std::vector<DirEntry> entries;  // with "." and ".." first
  };

  static void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    StatusOr<Namespace::Directory> dir = Ns(req).ReadDir(NodeId{ino});
    if (!dir.ok()) return ReplyError(req, dir.status());
    StatusOr<NodeAttr> self = Ns(req).GetAttr(NodeId{ino});
    if (!self.ok()) return ReplyError(req, self.status());
    auto handle = std::make_unique<DirHandle>();
    handle->entries.reserve(dir->entries.size() + 2);
    handle->entries.push_back(DirEntry{".", *self});
    handle->entries.push_back(DirEntry{"..", *self});  // the kernel fills in the real parent
    for (DirEntry& e : dir->entries) handle->entries.push_back(std::move(e));
    fi->fh = Server(req).handles_.Add(std::move(handle));  // freed at ReleaseDir (see Open)
    // The kernel keeps what it read of the directory across opens until the
    // listing changes (it is also told so then, see KernelNotifier).
    fi->cache_readdir = 1;
    fi->keep_cache = dir->changed ? 0 : 1;
    if (fuse_reply_open(req, fi) == -ENOENT) Server(req).handles_.Remove(fi->fh);
  }

  static void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    Server(req).handles_.Remove(fi->fh);
    fuse_reply_err(req, 0);
  }

  static void FillDir(fuse_req_t req, size_t size, off_t offset, fuse_file_info* fi, bool plus) {
    const auto& entries = HandleTable::Get<DirHandle>(fi->fh).entries;
    std::vector<char> buf(size);
    size_t used = 0;
    std::vector<NodeId> handed;  // entries of a READDIRPLUS reply: each one a kernel reference
    for (size_t i = static_cast<size_t>(offset); i < entries.size(); ++i) {
      const DirEntry& entry = entries[i];
      const off_t next = static_cast<off_t>(i + 1);
      size_t n;
      if (plus) {
        // How much the entry takes, before it is counted as handed out.
        if (fuse_add_direntry_plus(req, nullptr, 0, entry.name.c_str(), nullptr, 0) > size - used) break;
        fuse_entry_param e = EntryOf(req, entry.attr);
        if (i >= 2) {  // not "." or "..": the kernel takes a reference to the others
          StatusOr<NodeAttr> attr = Ns(req).Acquire(entry.attr.id);
          if (!attr.ok()) continue;  // freed since the directory was opened: left out
          e = EntryOf(req, *attr);
          handed.push_back(attr->id);
        }
        n = fuse_add_direntry_plus(req, buf.data() + used, size - used, entry.name.c_str(), &e, next);
      } else {
        struct stat st = StatOf(req, entry.attr);
        n = fuse_add_direntry(req, buf.data() + used, size - used, entry.name.c_str(), &st, next);
      }
      if (n > size - used) break;
      used += n;
    }
    if (fuse_reply_buf(req, buf.data(), used) == -ENOENT) {
      for (NodeId id : handed) Unreferenced(req, id);
    }
  }

  static void ReadDir(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
    FillDir(req, size, offset, fi, /*plus=*/false);
  }
  static void ReadDirPlus(fuse_req_t req, fuse_ino_t, size_t size, off_t offset, fuse_file_info* fi) {
    FillDir(req, size, offset, fi, /*plus=*/true);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) return (void)fuse_reply_err(req, EROFS);
    FuseServer& server = Server(req);
    // The engine tells readers apart by the handle, and groups them by the
    // process that opened them (the request names the opening thread).
    const ReaderId reader{server.next_reader_.fetch_add(1, std::memory_order_relaxed),
                          ThreadGroupOf(static_cast<uint64_t>(fuse_req_ctx(req)->pid))};
    Status status = Ns(req).Open(NodeId{ino}, reader);
    if (status.code() == ErrorCode::kStale) {
      // The file was replaced or removed: the kernel looks its name up again
      // and opens what it names now. Expected as a bucket changes.
      spdlog::debug("{}", status.message());
      return (void)fuse_reply_err(req, ESTALE);
    }
    if (!status.ok()) return ReplyError(req, status);
    fi->keep_cache = 1;  // a node is one version of an object: its pages never change
    fi->noflush = 1;
    // An open file's handle: the reader its reads are for; freed at Release.
    fi->fh = server.handles_.Add(std::make_unique<ReaderId>(reader));
    // The kernel gives the file the mount's readahead once this reply is in.
    if (const uint64_t ra = server.read_ahead_in_force_.load(std::memory_order_relaxed); ra > 0) {
      server.metrics_.CountOpen(ra);
    }
    // An open interrupted before the reply arrived is never released: its
    // handle goes now.
    if (fuse_reply_open(req, fi) == -ENOENT) server.handles_.Remove(fi->fh);
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, fuse_file_info* fi) {
    Server(req).metrics_.CountReadSize(size);
    // The open file's reader, read by the thread the request names (the one
    // that faulted or called read()): each thread of a loader is a reader.
    ReaderId reader = HandleTable::Get<const ReaderId>(fi->fh);
    reader.thread = static_cast<uint64_t>(fuse_req_ctx(req)->pid);
    Ns(req).Read(NodeId{ino}, static_cast<uint64_t>(offset), size, [req](StatusOr<ReadResult> result) {
      if (!result.ok()) {
        if (ToErrno(result.status()) == EIO) Server(req).metrics_.reads_failed_eio.fetch_add(1, std::memory_order_relaxed);
        return ReplyError(req, result.status());
      }
      std::vector<iovec> iov;
      iov.reserve(result->pieces.size());
      for (const auto& piece : result->pieces) {
        iov.push_back(iovec{const_cast<std::byte*>(piece.data()), piece.size()});
      }
      fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
    }, reader);
  }

  static void Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
    Ns(req).Release(HandleTable::Get<const ReaderId>(fi->fh));
    Server(req).handles_.Remove(fi->fh);
    fuse_reply_err(req, 0);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    Namespace::FsStats stats = Ns(req).Stats();
    struct statvfs sv = {};
    sv.f_bsize = FuseServer::kMaxRead;
    sv.f_frsize = 4096;
    sv.f_blocks = (stats.total_bytes + sv.f_frsize - 1) / sv.f_frsize;
    sv.f_files = stats.nodes;
    sv.f_namemax = 1024;  // the longest GCS object name
    sv.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &sv);
  }

  // The root carries the mount's counters for `tensorfs stats`; nothing else
  // has extended attributes.
  static void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    if (ino != FUSE_ROOT_ID || std::strcmp(name, kStatsXattr) != 0) return (void)fuse_reply_err(req, ENODATA);
    const FuseServer& server = Server(req);
    nlohmann::json stats = server.metrics_.ToJson();
    stats["mount"] = MountSettingsJson(server.options_, server.uid_, server.gid_);
    stats["cpu_seconds"] = ProcessCpuJson();
    const std::string json = stats.dump();
    if (size == 0) return (void)fuse_reply_xattr(req, json.size());
    if (size < json.size()) return (void)fuse_reply_err(req, ERANGE);
    fuse_reply_buf(req, json.data(), json.size());
  }

  // Everything that would change the tree.
  static void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }
  static void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { ReadOnly(req); }
  static void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { ReadOnly(req); }
  static void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { ReadOnly(req); }
  static void Unlink(fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); }
  static void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) { ReadOnly(req); }
  static void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) { ReadOnly(req); }
  static void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { ReadOnly(req); }
  static void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) { ReadOnly(req); }
  static void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { ReadOnly(req); }
  static void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { ReadOnly(req); }
  static void RemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); }

  static void Init(void* userdata, fuse_conn_info* conn) {
    auto& server = *static_cast<FuseServer*>(userdata);
    conn->max_read = FuseServer::kMaxRead;  // must match the max_read mount option
    conn->max_readahead = FuseServer::kInitMaxReadahead;
    // How many readahead reads the kernel keeps queued for us, and where it
    // holds readahead back (ValidateMountOptions derives them from the CPUs).
    const int background = server.options_.max_background > 0 ? server.options_.max_background
                                                                : DefaultMaxBackground(UsableCpus());
    conn->max_background = static_cast<unsigned>(background);
    conn->congestion_threshold = static_cast<unsigned>(
        server.options_.congestion_threshold > 0 ? server.options_.congestion_threshold : background * 3 / 4);
    if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
    if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
    // At debug: a background mount's terminal hears nothing when all is well.
    spdlog::debug("{} {} (kernel FUSE {}.{}, {} worker threads)",
                 server.adopted_fd() ? "serving" : "mounted", server.options_.source, conn->proto_major,
                 conn->proto_minor, server.options_.max_threads);
  }

  static const fuse_lowlevel_ops& Ops() {
    static const fuse_lowlevel_ops ops = [] {
      fuse_lowlevel_ops o = {};
      o.init = Init;
      o.lookup = Lookup;
      o.forget = Forget;
      o.forget_multi = ForgetMulti;
      o.getattr = GetAttr;
      o.setattr = SetAttr;
      o.mknod = MkNod;
      o.mkdir = MkDir;
      o.unlink = Unlink;
      o.rmdir = Unlink;
      o.symlink = SymLink;
      o.rename = Rename;
      o.link = Link;
      o.open = Open;
      o.read = Read;
      o.write = Write;
      o.release = Release;
      o.opendir = OpenDir;
      o.readdir = ReadDir;
      o.readdirplus = ReadDirPlus;
      o.releasedir = ReleaseDir;
      o.statfs = StatFs;
      o.setxattr = SetXattr;
      o.getxattr = GetXattr;
      o.removexattr = RemoveXattr;
      o.create = Create;
      return o;
    }();
    return ops;
  }
};

namespace {

// "/a/b c" as /proc/self/mountinfo writes it ("/a/b\040c").
std::string MountinfoEscape(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// The device ("0:53") of the newest mount on `mountpoint` (canonical), from
// /proc/self/mountinfo: stat() on it would send a request to this very
// process, which does not serve requests yet.
std::optional<std::string> MountDevice(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  const std::string want = MountinfoEscape(mountpoint);
  std::optional<std::string> device;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if ((fields >> id >> parent >> dev >> root >> point) && point == want) device = dev;
  }
  return device;
}

std::optional<uint64_t> ReadKib(const std::string& path) {
  std::ifstream in(path);
  uint64_t kib = 0;
  if (!(in >> kib)) return std::nullopt;
  return kib;
}

// An adopted descriptor must be /dev/fuse (character device 10:229) opened
// read-write, or the kernel's first request would fail obscurely.
Status CheckFuseDescriptor(int fd, const std::string& name) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return InvalidArgumentError(name + " is not an open descriptor (" + std::strerror(errno) +
                                "): the parent must open /dev/fuse, mount it with fd=N and pass the descriptor "
                                "on without O_CLOEXEC");
  }
  if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 || minor(st.st_rdev) != 229) {
    return InvalidArgumentError(name + " is not /dev/fuse: give the descriptor of /dev/fuse that the parent "
                                       "mounted with fd=N, or a directory to mount on");
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    return InvalidArgumentError(name + " is /dev/fuse but not opened read-write (O_RDWR)");
  }
  return OkStatus();
}

// Whether this process may open /dev/fuse itself: one descriptor per worker
// thread (clone_fd) needs it. A daemon handed /dev/fd/N in a sandbox without
// the device node shares the one descriptor instead, without libfuse's error.
bool CanOpenDevFuse() {
  int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

FuseServer::FuseServer(Namespace& ns, const MountOptions& options, Metrics& metrics)
    : ns_(ns),
      options_(options),
      metrics_(metrics),
      uid_(options.uid.value_or(::getuid())),
      gid_(options.gid.value_or(::getgid())),
      negative_timeout_s_(NegativeEntryTimeout(options)),
      notifier_(std::make_unique<KernelNotifier>(metrics)) {}

StatusOr<std::unique_ptr<FuseServer>> FuseServer::Mount(Namespace& ns, const MountOptions& options,
                                                        Metrics& metrics) {
  std::unique_ptr<FuseServer> server(new FuseServer(ns, options, metrics));
  server->loop_thread_ = ::pthread_self();
  if (std::optional<int> fd = FuseFdOfMountPoint(options.mountpoint)) {
    RETURN_IF_ERROR(CheckFuseDescriptor(*fd, options.mountpoint));
    server->fuse_fd_ = *fd;
  }
  // In /dev/fd/N mode these kernel mount options are unused (the parent's
  // mount data counts); max_read must still match what Init() answers.
  std::string fuse_opts = "ro,default_permissions,fsname=" + options.source +
                          ",subtype=tensorfs,max_read=" + std::to_string(kMaxRead);
  if (options.allow_other && !server->adopted_fd()) fuse_opts += ",allow_other";
  // libfuse admits only root and this process's user (and asks the kernel for
  // allow_other, which a parent of /dev/fd/N puts in its own mount data).
  if (options.allow_root) fuse_opts += ",allow_root";
  std::vector<std::string> args_storage = {"tensorfs", "-o", fuse_opts};
  if (options.fuse_debug) args_storage.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : args_storage) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  server->session_ = fuse_session_new(&args, &FuseHandlers::Ops(), sizeof(fuse_lowlevel_ops), server.get());
  fuse_opt_free_args(&args);
  if (server->session_ == nullptr) return InternalError("cannot create a FUSE session (see the message above)");
  if (fuse_set_signal_handlers(server->session_) != 0) return InternalError("cannot install signal handlers");
  server->signals_set_ = true;
  // With /dev/fd/N libfuse adopts the descriptor: no mount(2), no fusermount3.
  if (fuse_session_mount(server->session_, options.mountpoint.c_str()) != 0) {
    if (server->adopted_fd()) return InvalidArgumentError("cannot serve " + options.mountpoint);
    // Only now look at the mount point, to say what is wrong with it.
    RETURN_IF_ERROR(CheckMountPointDirectory(options.mountpoint));
    return UnavailableError("cannot mount on " + options.mountpoint +
                            ": is /dev/fuse available and are you root (or is fuse3 installed)?");
  }
  server->mounted_ = !server->adopted_fd();
  if (server->adopted_fd()) spdlog::debug("serving the FUSE descriptor {} mounted by the parent", options.mountpoint);
  return server;
}

// Written once mounted, before or after the kernel takes the INIT reply: the
// reply's max_readahead (kInitMaxReadahead) is above any value asked, so the
// kernel's min() with it keeps this one. As gcsfuse does, through sysfs.
void FuseServer::SetReadahead(uint64_t bytes) {
  const uint64_t want_kib = bytes >> 10;
  auto warn = [this](const std::string& message) {
    if (read_ahead_warned_) return spdlog::debug("{}", message);
    read_ahead_warned_ = true;
    spdlog::warn("{}", message);
  };
  if (read_ahead_path_.empty()) {
    std::optional<std::string> device = MountDevice(CanonicalMountPath(options_.mountpoint));
    if (!device) {
      return warn("read_ahead: " + options_.mountpoint +
                  " not found in /proc/self/mountinfo; keeping the kernel's readahead");
    }
    read_ahead_path_ = "/sys/class/bdi/" + *device + "/read_ahead_kb";
  }
  std::ofstream out(read_ahead_path_);
  out << want_kib << '\n';
  out.flush();
  const bool written = static_cast<bool>(out);
  const int err = errno;
  out.close();
  std::optional<uint64_t> in_force = ReadKib(read_ahead_path_);
  read_ahead_in_force_.store(in_force ? *in_force << 10 : 0, std::memory_order_relaxed);
  const std::string in_force_text = in_force ? std::to_string(*in_force) + " KiB" : std::string("unknown");
  if (!written) {
    warn("read_ahead=" + std::to_string(want_kib) + " KiB: cannot write " + read_ahead_path_ + " (" +
         std::strerror(err) + "; writing it needs root); the readahead in force is " + in_force_text);
  } else if (in_force != want_kib) {
    warn("read_ahead=" + std::to_string(want_kib) + " KiB: the kernel keeps " + read_ahead_path_ + " at " +
         in_force_text);
  } else {
    spdlog::debug("read_ahead: {} KiB in force for the files opened from now on ({})", *in_force, read_ahead_path_);
  }
}

Status FuseServer::Run() {
  fuse_loop_config* config = fuse_loop_cfg_create();
  // One /dev/fuse descriptor per worker: workers do not contend on one file's
  // lock to read requests and write replies.
  fuse_loop_cfg_set_clone_fd(config, !adopted_fd() || CanOpenDevFuse() ? 1 : 0);
  fuse_loop_cfg_set_max_threads(config, static_cast<unsigned>(options_.max_threads));
  fuse_loop_cfg_set_idle_threads(config, static_cast<unsigned>(std::min(options_.max_threads, 10)));
  notifier_->Start(session_);
  ns_.SetChangeObserver(notifier_.get());
  int rc = fuse_session_loop_mt(session_, config);
  fuse_loop_cfg_destroy(config);
  if (on_stopping_) on_stopping_();
  ns_.SetChangeObserver(nullptr);
  if (!notifier_->Stop()) (void)notifier_.release();  // still inside the kernel, with the session
  if (mounted_) {
    fuse_session_unmount(session_);
    mounted_ = false;
    spdlog::info("unmounted {}", options_.mountpoint);
  } else {
    spdlog::info("stopped serving {}", options_.mountpoint);
  }
  // A positive result is the signal that asked us to stop; 0 an unmount (the
  // kernel ended the session): both clean exits.
  return rc >= 0 ? OkStatus() : InternalError("FUSE session ended with error " + std::to_string(rc));
}

void FuseServer::Stop() {
  fuse_session_exit(session_);
  // Wakes the loop's thread, waiting for its workers, as a signal would.
  ::pthread_kill(loop_thread_, SIGTERM);
}

FuseServer::~FuseServer() {
  if (session_ == nullptr) return;
  if (mounted_) fuse_session_unmount(session_);
  if (signals_set_) fuse_remove_signal_handlers(session_);
  if (notifier_ == nullptr) return;  // its thread may still use the session
  notifier_.reset();
  fuse_session_destroy(session_);
}

}  // namespace tensorfs
