#include "core/util/nofollow_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/util/error.h"

namespace dtrain::core {

NoFollowFolder::NoFollowFolder(const std::string& path) : path_(path) {
  const std::string fix = "give a folder reached without symbolic links (each one resolved)";
  if (path.empty() || path[0] != '/') throw UserError("'" + path + "' is not absolute", fix);
  fd_ = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t start = 1;
  while (fd_ >= 0 && start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    const int next = ::openat(fd_, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int saved = errno;
    ::close(fd_);
    fd_ = next;
    if (fd_ < 0)
      throw UserError("cannot open the folder '" + path + "' at '" + part + "': " +
                          (saved == ELOOP || saved == ENOTDIR ? "a symbolic link or not a folder"
                                                              : std::strerror(saved)),
                      fix);
  }
  if (fd_ < 0) throw UserError("cannot open '/'", fix);
}

NoFollowFolder::~NoFollowFolder() {
  if (fd_ >= 0) ::close(fd_);
}

std::FILE* NoFollowFolder::create_temporary(const std::string& prefix, std::string& name) {
  std::random_device random;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x%08x", random(), random());
    name = prefix + suffix;
    const int fd = ::openat(fd_, name.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (std::FILE* f = ::fdopen(fd, "w")) return f;
      ::close(fd);
      break;
    }
    if (errno != EEXIST) break;
  }
  throw UserError("cannot create a file in '" + path_ + "': " + std::strerror(errno),
                  "check that the folder is writable and has room");
}

void NoFollowFolder::rename(const std::string& from, const std::string& to) {
  if (::renameat(fd_, from.c_str(), fd_, to.c_str()) != 0)
    throw UserError("cannot rename '" + from + "' to '" + to + "' in '" + path_ + "': " +
                        std::strerror(errno),
                    "check the folder");
}

void NoFollowFolder::make_folder(const std::string& name) {
  // With this folder's permissions (a shared folder the nodes write into as another user may be
  // group-writable, setgid): the umask would take them away, so they are set on the new one.
  struct stat parent;
  const mode_t mode = ::fstat(fd_, &parent) == 0 ? parent.st_mode & 07777 : 0755;
  if (::mkdirat(fd_, name.c_str(), 0700) == 0) {
    const int made = ::openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const bool set = made >= 0 && ::fchmod(made, mode) == 0;
    if (made >= 0) ::close(made);
    if (set) return;
    throw UserError("cannot set the permissions of '" + path_ + "/" + name + "'",
                    "check the folder");
  }
  const int saved = errno;
  throw UserError("cannot make the folder '" + path_ + "/" + name + "': " +
                      (saved == EEXIST ? std::string("it exists already") : std::strerror(saved)),
                  saved == EEXIST ? "move it away, or write into another folder"
                                  : "check that the folder is writable");
}

bool NoFollowFolder::remove(const std::string& name) {
  return ::unlinkat(fd_, name.c_str(), 0) == 0 || errno == ENOENT;
}

std::FILE* NoFollowFolder::open_read(const std::string& name) {
  const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return nullptr;
  }
  std::FILE* f = ::fdopen(fd, "r");
  if (!f) ::close(fd);
  return f;
}

}  // namespace dtrain::core
