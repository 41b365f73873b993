#pragma once
// The IPv4 loopback address of a port, for tests that send with the raw socket calls
// (sendmsg with GSO, sendmmsg bursts) rather than asio.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>

namespace dtrain::testing {

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

}  // namespace dtrain::testing
