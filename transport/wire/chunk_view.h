#pragma once
// The reassembler's view of a received chunk (its datagram already parsed and checked).
#include "transport/reliability/reassembler.h"
#include "transport/wire/datagram.h"

namespace dtrain::transport {

inline ChunkView chunk_view(const ParsedDatagram& d) {
  const ChunkFields& c = d.chunk;
  ChunkView v;
  v.key = {c.job_id, c.origin, c.message_id};
  v.index = c.index;
  v.count = c.count;
  v.total_bytes = c.total_bytes;
  v.chunk_bytes = c.chunk_bytes;
  v.data = d.chunk_data;
  v.size = d.chunk_size;
  return v;
}

}  // namespace dtrain::transport
