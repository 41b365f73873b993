#pragma once
// The reassembler's view of a received Chunk frame (the envelope already verified).
#include "transport/reliability/reassembler.h"
#include "transport/schema/data_generated.h"

namespace dtrain::transport {

inline ChunkView chunk_view(const wire::Envelope& e) {
  const wire::Chunk* c = e.frame_as_Chunk();
  ChunkView v;
  v.key = {e.job_id(), c->origin(), c->message_id()};
  v.index = c->index();
  v.count = c->count();
  v.total_bytes = c->total_bytes();
  v.chunk_bytes = c->chunk_bytes();
  v.data = c->data()->data();
  v.size = c->data()->size();
  return v;
}

}  // namespace dtrain::transport
