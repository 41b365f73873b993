#include "core/util/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <ext/stdio_filebuf.h>

#include "core/util/error.h"

namespace dtrain::core {
namespace {

[[noreturn]] void refuse(const DataRoots& roots, const std::string& path) {
  const auto [what, fix] = roots.refusal(path);
  throw UserError(what, fix);
}

// Where the roots confine: the path is resolved once, to an O_PATH descriptor (nothing is
// opened for reading yet, so a FIFO, a device or a terminal does nothing), which must be a
// regular file inside the roots; the file is then opened for reading through that descriptor,
// the same inode, with no second lookup of the path.
int open_confined(const std::string& path, const DataRoots& roots, int extra_flags) {
  const int located = ::open(path.c_str(), O_PATH | O_CLOEXEC | (extra_flags & O_NOFOLLOW));
  if (located < 0) {
    // A name that leads out is refused as one that exists would be: no existence oracle.
    if (!roots.allows(path)) refuse(roots, path);
    return -1;
  }
  struct stat st;
  const bool known = ::fstat(located, &st) == 0;
  const bool linked = known && S_ISLNK(st.st_mode);  // O_NOFOLLOW asked, and the name is a link
  const bool inside = !linked && roots.allows_opened(located);
  if (!known || linked || !inside || !S_ISREG(st.st_mode)) {
    ::close(located);
    if (known && !linked && !inside) refuse(roots, path);
    errno = linked ? ELOOP : EINVAL;  // EINVAL: a folder, a FIFO, a device: not a data file
    return -1;
  }
  const int fd = ::open(("/proc/self/fd/" + std::to_string(located)).c_str(),
                        O_RDONLY | O_CLOEXEC | O_NOCTTY);
  const int saved = errno;
  ::close(located);
  errno = saved;
  return fd;
}

}  // namespace

int open_input(const std::string& path, const DataRoots* roots, int extra_flags) {
  if (!roots || !roots->confines())
    return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | extra_flags);
  return open_confined(path, *roots, extra_flags);
}

InputFolder::InputFolder(const std::string& path, const DataRoots* roots) {
  if (!roots || !roots->confines()) {
    listing_ = path;
    return;
  }
  fd_ = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    if (!roots->allows(path)) refuse(*roots, path);
    return;
  }
  if (!roots->allows_opened(fd_)) {
    ::close(fd_);
    fd_ = -1;
    refuse(*roots, path);
  }
  listing_ = "/proc/self/fd/" + std::to_string(fd_);
}

InputFolder::~InputFolder() {
  if (fd_ >= 0) ::close(fd_);
}

// libstdc++'s buffer over a descriptor, which it closes when destroyed.
struct InputStream::Buffer : __gnu_cxx::stdio_filebuf<char> {
  explicit Buffer(int fd) : __gnu_cxx::stdio_filebuf<char>(fd, std::ios::in, 1 << 16) {}
};

InputStream::InputStream(const std::string& path, const DataRoots* roots) {
  const int fd = open_input(path, roots);
  if (fd >= 0) {
    buffer_ = std::make_unique<Buffer>(fd);
    if (!buffer_->is_open()) {  // fdopen failed: the descriptor is still ours
      buffer_.reset();
      ::close(fd);
    }
  }
  stream_ = std::make_unique<std::istream>(buffer_.get());  // a null buffer: a failed stream
  if (!buffer_) stream_->setstate(std::ios::badbit);
}

InputStream::~InputStream() = default;

bool InputStream::is_open() const { return buffer_ != nullptr; }

std::istream& InputStream::stream() { return *stream_; }

}  // namespace dtrain::core
