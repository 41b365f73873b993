#include "transport/endpoint/datagram_batch.h"

#include <sys/socket.h>

namespace dtrain::transport {

std::vector<uint8_t>& DatagramBatch::next(const asio::ip::udp::endpoint& to,
                                          PeerCounters* counters) {
  if (bytes_.size() <= size_) {
    bytes_.resize(size_ + 1);
    to_.resize(size_ + 1);
    counters_.resize(size_ + 1);
  }
  to_[size_] = to;
  counters_[size_] = counters;
  return bytes_[size_];
}

void DatagramBatch::commit(int fd) {
  if (++size_ == kMax) flush(fd);
}

void DatagramBatch::flush(int fd) {
  if (size_ == 0) return;
  mmsghdr msgs[kMax];
  iovec iov[kMax];
  for (size_t i = 0; i < size_; ++i) {
    iov[i] = {bytes_[i].data(), bytes_[i].size()};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = to_[i].data();
    msgs[i].msg_hdr.msg_namelen = static_cast<socklen_t>(to_[i].size());
  }
  size_t done = 0;
  while (done < size_) {
    const int n = ::sendmmsg(fd, msgs + done, static_cast<unsigned>(size_ - done), 0);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      if (PeerCounters* c = counters_[done + i]) {
        ++c->datagrams_out;
        c->bytes_out += bytes_[done + i].size();
      }
    }
    done += static_cast<size_t>(n);
  }
  size_ = 0;
}

}  // namespace dtrain::transport
