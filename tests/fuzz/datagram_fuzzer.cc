// libFuzzer target for everything that reads a received datagram: the header checks, a chunk's
// field checks, the FlatBuffers verifier and the frame checks (authentication off, so the
// fuzzer gets past the tag and exercises the parsers), then the reassembler with whatever chunk
// survived.
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/reliability/reassembler.h"
#include "transport/wire/chunk_view.h"
#include "transport/wire/datagram.h"

using namespace dtrain::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Authenticator auth(ClusterKey{}, /*insecure=*/true);
  static Reassembler reassembler(1 << 20, std::chrono::milliseconds(10));
  std::vector<uint64_t> aligned(size / 8 + 2);
  std::memcpy(aligned.data(), data, size);
  ParsedDatagram d;
  DropReason reason;
  if (!parse_datagram(reinterpret_cast<const uint8_t*>(aligned.data()), size, kLargestDatagram,
                      auth, d, reason))
    return 0;
  if (d.header.chunk) {
    const ChunkView v = chunk_view(d);
    std::vector<uint8_t> message;
    reassembler.add(v, message, /*via=*/1);
    reassembler.expire(std::chrono::steady_clock::now(), [](uint32_t) { return false; });
  } else if (d.envelope->frame_type() == wire::Frame::Nak) {
    uint64_t sum = 0;
    for (uint64_t s : *d.envelope->frame_as_Nak()->missing()) sum += s;
    (void)sum;
  }
  return 0;
}
