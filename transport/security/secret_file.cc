#include "transport/security/secret_file.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
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

std::string read_secret_file(const std::string& path, const std::string& what,
                             const std::string& missing_fix) {
  init_sodium();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw TransportError("cannot read " + what + " file " + path + ": " + std::strerror(errno),
                         missing_fix);
  if (!S_ISREG(st.st_mode))
    throw TransportError(what + " " + path + " is not a regular file",
                         "point at the file itself");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw TransportError(what + " " + path + " has mode " + mode +
                             ": group or others may read it, so it is refused",
                         "chmod 600 " + path);
  }
  if (st.st_size > 4096)
    throw TransportError(what + " " + path + " is " + std::to_string(st.st_size) +
                             " bytes: not a dtrain key file",
                         "point at a file made by `dtraind keygen`");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ClusterKey parse_key_hex(const std::string& text, const std::string& path, const std::string& what,
                         const std::string& make) {
  std::string hex;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) hex += c;
  ClusterKey key{};
  size_t decoded = 0;
  if (hex.size() != 64 ||
      sodium_hex2bin(key.data(), key.size(), hex.data(), hex.size(), nullptr, &decoded, nullptr) !=
          0 ||
      decoded != key.size())
    throw TransportError(what + " " + path + " does not hold a key of 64 hexadecimal digits",
                         "generate a new one with `" + make + "`");
  return key;
}

ClusterKey random_key() {
  init_sodium();
  ClusterKey key;
  randombytes_buf(key.data(), key.size());
  return key;
}

std::string key_hex(const ClusterKey& key) {
  char hex[65];
  sodium_bin2hex(hex, sizeof hex, key.data(), key.size());
  return hex;
}

void write_secret_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    throw TransportError("cannot create the key file " + path + ": " + std::strerror(errno),
                         errno == EEXIST ? "remove it first, or keep using it"
                                         : "choose a writable path");
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw TransportError("cannot write the key file " + path, "check the disk");
}

}  // namespace dtrain::transport
