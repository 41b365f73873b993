#include "transport/security/cluster_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "transport/transport_error.h"

namespace dtrain::transport {
namespace {

void init_sodium() {
  if (sodium_init() < 0)
    throw TransportError("libsodium failed to initialise", "check the libsodium23 package");
}

}  // namespace

ClusterKey load_cluster_key(const std::string& path) {
  init_sodium();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw TransportError("cannot read the cluster key file " + path + ": " + std::strerror(errno),
                         "create one with `dtraind keygen " + path +
                             "` and copy it to every machine (mode 0600)");
  if (!S_ISREG(st.st_mode))
    throw TransportError("the cluster key " + path + " is not a regular file",
                         "point key_file at the key file itself");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw TransportError("the cluster key " + path + " has mode " + mode +
                             ": group or others may read it, so it is refused",
                         "chmod 600 " + path);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string hex;
  for (char c : text.str())
    if (!std::isspace(static_cast<unsigned char>(c))) hex += c;
  ClusterKey key{};
  size_t decoded = 0;
  if (hex.size() != 64 ||
      sodium_hex2bin(key.data(), key.size(), hex.data(), hex.size(), nullptr, &decoded, nullptr) !=
          0 ||
      decoded != key.size())
    throw TransportError("the cluster key " + path + " is not 64 hexadecimal digits",
                         "generate a new one with `dtraind keygen " + path + "`");
  return key;
}

void generate_cluster_key(const std::string& path) {
  init_sodium();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    throw TransportError("cannot create the key file " + path + ": " + std::strerror(errno),
                         errno == EEXIST ? "remove it first, or keep using it"
                                         : "choose a writable path");
  ClusterKey key;
  randombytes_buf(key.data(), key.size());
  char hex[65];
  sodium_bin2hex(hex, sizeof hex, key.data(), key.size());
  std::string line = std::string(hex) + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  sodium_memzero(key.data(), key.size());
  if (!ok) throw TransportError("cannot write the key file " + path, "check the disk");
}

}  // namespace dtrain::transport
