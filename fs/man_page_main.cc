// tensorfs-man-page VERSION OUTPUT: writes the tensorfs(8) man page, rendered
// from the command line's definitions (fs/command_line.h), to OUTPUT. Run by
// the build (fs/CMakeLists.txt); not installed.
#include <cstdio>
#include <fstream>
#include <string>

#include "fs/command_line.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tensorfs-man-page VERSION OUTPUT\n");
    return 2;
  }
  tensorfs::CommandLine line;
  const std::string page = tensorfs::RenderManPage(*tensorfs::MakeCommandLine(line), argv[1]);
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out << page;
  out.close();
  if (!out) {
    std::fprintf(stderr, "tensorfs-man-page: cannot write %s\n", argv[2]);
    return 1;
  }
  return 0;
}
