#include "transport/endpoint/datagram_batch.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dtrain::transport {

void set_segment_size(msghdr& h, char (&control)[kSegmentControlBytes], uint16_t segment) {
  std::memset(control, 0, kSegmentControlBytes);
  h.msg_control = control;
  h.msg_controllen = kSegmentControlBytes;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof segment);
  std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
}

size_t coalesced_segment_size(const msghdr& h) {
  for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c)))
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int size = 0;
      std::memcpy(&size, CMSG_DATA(c), sizeof size);
      return size > 0 ? size_t(size) : 0;
    }
  return 0;
}

std::vector<SegmentRun> segment_runs(const std::vector<size_t>& sizes,
                                     const std::vector<size_t>& destinations, bool segmentation) {
  std::vector<SegmentRun> runs;
  size_t i = 0;
  while (i < sizes.size()) {
    SegmentRun run{i, 1, sizes[i]};
    size_t bytes = sizes[i];
    while (segmentation && i + run.count < sizes.size()) {
      const size_t j = i + run.count;
      // The previous datagram must be a full segment for another to follow it.
      if (sizes[j - 1] != run.segment || destinations[j] != destinations[i] ||
          sizes[j] > run.segment || sizes[j] == 0 || run.count == kMaxSegments ||
          bytes + sizes[j] > kMaxRunBytes)
        break;
      bytes += sizes[j];
      ++run.count;
    }
    runs.push_back(run);
    i += run.count;
  }
  return runs;
}

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

void DatagramBatch::commit_untagged(int fd, const TagContext& context) {
  // set_tagging() first, and never for an insecure endpoint: no slot leaves untagged.
  if (!auth_ || !workers_ || auth_->insecure()) std::abort();
  untagged_.push_back({size_, context});
  commit(fd);
}

void DatagramBatch::seal_untagged() {
  // The keys are looked up here, on the owning thread; should the cache start over meanwhile
  // (after thousands of keys), the earlier ones are stale: look them all up again.
  keys_.resize(untagged_.size());
  for (;;) {
    const uint64_t generation = auth_->cache_generation();
    for (size_t i = 0; i < untagged_.size(); ++i) keys_[i] = auth_->seal_key(untagged_[i].context);
    if (auth_->cache_generation() == generation) break;
  }
  workers_->run(untagged_.size(), [this](size_t i) {
    std::vector<uint8_t>& bytes = bytes_[untagged_[i].slot];
    Authenticator::seal_with(*keys_[i], bytes.data(), bytes.size() - kTagBytes,
                             untagged_[i].context);
  });
  untagged_.clear();
}

void DatagramBatch::flush(int fd) {
  if (!untagged_.empty()) seal_untagged();
  if (size_ == 0) return;
  std::vector<size_t> sizes(size_), destinations(size_);
  for (size_t i = 0; i < size_; ++i) {
    sizes[i] = bytes_[i].size();
    // Datagrams to one peer share its endpoint; equal addresses get equal numbers (a batch
    // holds at most kMax datagrams).
    destinations[i] = i;
    for (size_t k = 0; segmentation_ && k < i; ++k)
      if (to_[k] == to_[i]) {
        destinations[i] = destinations[k];
        break;
      }
  }
  size_t first_unsent = 0;
  if (!send_runs(fd, segment_runs(sizes, destinations, segmentation_), first_unsent)) {
    // This kernel or device cannot segment UDP (no checksum offload, a segment larger than the
    // path MTU): the rest goes out datagram by datagram, now and from now on.
    spdlog::warn("UDP segmentation offload refused ({}): sending datagram by datagram",
                 std::strerror(errno));
    segmentation_ = false;
    std::vector<SegmentRun> rest;
    for (size_t i = first_unsent; i < size_; ++i) rest.push_back({i, 1, sizes[i]});
    send_runs(fd, rest, first_unsent);
  }
  size_ = 0;
}

bool DatagramBatch::send_runs(int fd, const std::vector<SegmentRun>& runs, size_t& first_unsent) {
  mmsghdr msgs[kMax];
  iovec iov[kMax];
  alignas(cmsghdr) char control[kMax][kSegmentControlBytes];
  for (size_t r = 0; r < runs.size(); ++r) {
    const SegmentRun& run = runs[r];
    for (size_t k = 0; k < run.count; ++k)
      iov[run.first + k] = {bytes_[run.first + k].data(), bytes_[run.first + k].size()};
    msghdr& h = msgs[r].msg_hdr;
    h = {};
    h.msg_iov = &iov[run.first];
    h.msg_iovlen = run.count;
    h.msg_name = to_[run.first].data();
    h.msg_namelen = static_cast<socklen_t>(to_[run.first].size());
    if (run.count > 1) set_segment_size(h, control[r], static_cast<uint16_t>(run.segment));
  }
  size_t done = 0;
  while (done < runs.size()) {
    const int n = ::sendmmsg(fd, msgs + done, static_cast<unsigned>(runs.size() - done), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return true;
      if (runs[done].count > 1 && (errno == EIO || errno == EINVAL)) {
        first_unsent = runs[done].first;
        return false;
      }
      ++done;  // this message cannot go (its peer's address, say): the others still can
      continue;
    }
    for (int m = 0; m < n; ++m) {
      const SegmentRun& run = runs[done + m];
      for (size_t k = 0; k < run.count; ++k)
        if (PeerCounters* c = counters_[run.first + k]) {
          ++c->datagrams_out;
          c->bytes_out += bytes_[run.first + k].size();
        }
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace dtrain::transport
