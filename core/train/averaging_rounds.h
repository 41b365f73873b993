#pragma once
// Parameter averaging across nodes (docs/architecture/core.md, "Sharing"): every node runs the same
// number of rounds per epoch, set by the smallest shard and spread evenly over its own minibatches,
// the last one after its last minibatch, so that every replica is the same at every epoch end.
#include <cstdint>

#include "core/train/node_exchange.h"
#include "core/train/worker.h"

namespace dtrain::core {

// One round; with `with_updater_state` the updater's momentum/moments travel with the
// parameters and are averaged the same way.
void average_round(NodeExchange& exchange, Worker& worker, bool with_updater_state,
                   int64_t round);

// Allreduce at an epoch's end: the replicas are the same bits after every step, so unless each
// survivor did some of a lost node's minibatches alone since, the nodes agree over the ring on a
// digest of the parameters and the updater's state and nothing more crosses the wire (the
// average it replaces sent them all from every node, through the mesh's relays: seconds an
// epoch for a large model, and a stall warning every epoch). Where they differ, the live nodes
// average both. Whether they differed. `epoch`: the agreement's (NodeExchange::replicas_agree);
// `round`: the average's.
bool agree_or_average(NodeExchange& exchange, Worker& worker, int64_t epoch, int64_t round);

// Rounds per epoch, the same on every node: from the smallest of `shards` shards of `examples`.
int64_t rounds_per_epoch(int64_t examples, int shards, int64_t batch, int64_t frequency);

// Whether round `done` (0-based) is due once minibatch `in_epoch` (0-based) of an epoch of
// `batches` minibatches is done.
inline bool round_due(int64_t done, int64_t rounds, int64_t in_epoch, int64_t batches) {
  return done < rounds && in_epoch + 1 >= (done + 1) * batches / rounds;
}

// Round ids: the epoch's regular rounds are even, its takeover round odd (after the last regular
// one), so the ids only grow (MeshExchange drops rounds it has averaged).
inline int64_t regular_round(int64_t epoch, int64_t per_epoch, int64_t k) {
  return 2 * (epoch * per_epoch + k);
}
inline int64_t takeover_round(int64_t epoch, int64_t per_epoch) {
  return regular_round(epoch, per_epoch, per_epoch - 1) + 1;
}

}  // namespace dtrain::core
