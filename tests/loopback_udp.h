#pragma once
// A UDP socket bound to a free port on loopback, for tests: a peer that takes datagrams and
// never answers, or a sink whose datagrams the test reads back (next(): one, or nothing after
// 5 s).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

namespace dtrain::testing {

struct LoopbackUdp {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  uint16_t port = 0;
  LoopbackUdp() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    const int big = 8 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    timeval t{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  ~LoopbackUdp() { ::close(fd); }
  LoopbackUdp(const LoopbackUdp&) = delete;
  LoopbackUdp& operator=(const LoopbackUdp&) = delete;
  std::vector<uint8_t> next() {
    std::vector<uint8_t> buffer(65536);
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
    buffer.resize(n > 0 ? size_t(n) : 0);
    return buffer;
  }
};

}  // namespace dtrain::testing
