// mount-s3 of the tensorfs bundle (packaging/build-eks-image.sh): a static
// program that starts the bundle's tensorfs through the bundle's own ELF
// loader and libraries, so that it runs on any userland (the Mountpoint for
// Amazon S3 CSI driver's image is Amazon Linux, not Debian). The layout, next
// to this program (DIR is the directory it is in, $MOUNTPOINT_BIN_DIR):
//
//   DIR/mount-s3                     this launcher
//   DIR/tensorfs/tensorfs            the tensorfs binary, unchanged
//   DIR/tensorfs/lib/ld.so           its ELF loader (its PT_INTERP, copied)
//   DIR/tensorfs/lib/*.so*           every library ldd lists for it
//
// It runs DIR/tensorfs/lib/ld.so --library-path DIR/tensorfs/lib --argv0 ARGV0
// DIR/tensorfs/tensorfs ARGS..., with the environment, the descriptors and the
// arguments it was given unchanged: tensorfs sees argv[0] ending in mount-s3
// and takes mount-s3's command line (fs/mount_s3.h). DIR comes from
// /proc/self/exe, else from argv[0].
//
// Linked statically (no loader of its own to find), with nothing but libc.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string self;
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    self.assign(buf, static_cast<size_t>(n));
  } else if (argc > 0 && std::strchr(argv[0], '/') != nullptr && ::realpath(argv[0], buf) != nullptr) {
    self = buf;
  } else {
    std::fprintf(stderr, "mount-s3: cannot find the bundle: /proc/self/exe cannot be read (%s) and argv[0] is no "
                         "path\n", std::strerror(errno));
    return 127;
  }
  const std::string dir = self.substr(0, self.rfind('/'));
  const std::string loader = dir + "/tensorfs/lib/ld.so";
  const std::string libraries = dir + "/tensorfs/lib";
  const std::string program = dir + "/tensorfs/tensorfs";
  const std::string argv0 = argc > 0 ? argv[0] : self;

  std::vector<const char*> args = {loader.c_str(), "--library-path", libraries.c_str(), "--argv0", argv0.c_str(),
                                   program.c_str()};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(loader.c_str(), const_cast<char* const*>(args.data()));
  std::fprintf(stderr, "mount-s3: cannot run %s: %s (is the tensorfs bundle complete?)\n", loader.c_str(),
               std::strerror(errno));
  return 127;
}
