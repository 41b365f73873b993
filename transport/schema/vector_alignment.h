#pragma once
// The FlatBuffers verifier checks that a vector's length word is 4-byte aligned, not that its
// 8-byte elements are 8-byte aligned: reading a misaligned one is undefined behaviour (the
// fuzzers found such frames). A builder aligns them, except for an empty vector, which it may
// leave anywhere; an empty one has no element to misread, so it passes. One rule for every
// reader of a received table (datagram frames, control frames).
#include <cstdint>

#include <flatbuffers/flatbuffers.h>

namespace dtrain::transport {

template <class T>
bool elements_aligned(const flatbuffers::Vector<T>* v) {
  return v == nullptr || v->size() == 0 ||
         reinterpret_cast<uintptr_t>(v->data()) % alignof(T) == 0;
}

}  // namespace dtrain::transport
