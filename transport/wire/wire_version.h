#pragma once
// The data channel's wire version (the datagram's byte 2, transport/wire/datagram.h), apart from
// the datagram's layout so that a node's registration can carry it (the controller refuses a
// node of another version: docs/operations.md, "Ports and bounds").
#include <cstdint>

namespace dtrain::transport {

// 5: chunks' fields in a fixed layout, not a FlatBuffers table (80 bytes more of each datagram
// carry data: the table's 112 and the 16 kept free around it, against 48). 4: the lane and lane
// count (3 had a reserved word there: a node of version 3 would take every lane's datagrams as
// one link's). 3: the AEAD flag, and the receiver is part of the nonce and key (2:
// XChaCha20-Poly1305 with the nonce (sender, boot, counter); the receiver was authenticated as
// associated data only).
constexpr uint8_t kWireVersion = 5;

}  // namespace dtrain::transport
