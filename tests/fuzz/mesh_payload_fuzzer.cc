// libFuzzer target for every reader of a mesh payload (daemon/protocol/mesh_payloads.h): the
// verifier and the kind's checks, then, for an update, the check that it fits a model, and a
// read of every float a snapshot or a parameter round points at (ASan catches a view that
// reaches past the bytes).
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/codec/message_check.h"
#include "daemon/protocol/mesh_payloads.h"

using namespace dtrain;

namespace {
float sum(const daemon::FloatView& v) {
  float s = 0.f;
  for (size_t i = 0; i < v.size; ++i) s += v.data[i];
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The mesh hands over a std::vector's bytes: heap-aligned, as here.
  std::vector<uint8_t> bytes(data, data + size);
  const daemon::MeshPayloadIn in = daemon::read_mesh_payload(bytes.data(), bytes.size());
  volatile float sink = 0.f;
  std::string error;
  switch (in.kind) {
    case daemon::MeshPayloadIn::Kind::kUpdate:
      if (core::check_message(in.update, 1 << 20, error)) sink = float(in.update.words.size());
      break;
    case daemon::MeshPayloadIn::Kind::kSnapshot:
      sink = sum(in.snapshot.params) + sum(in.snapshot.state);
      break;
    case daemon::MeshPayloadIn::Kind::kParameters:
      sink = sum(in.parameters.values);
      break;
    case daemon::MeshPayloadIn::Kind::kEpochEnd:
      sink = float(in.epoch_end.joiners.size());
      break;
    case daemon::MeshPayloadIn::Kind::kPseudoGradient:
      for (const core::EncodedMessage& m : in.pseudo_gradient.levels)
        if (core::check_message(m, 1 << 20, error)) sink = float(m.words.size());
      break;
    default:  // the rest carry no more than the verifier and their checks read
      break;
  }
  (void)sink;
  return 0;
}
