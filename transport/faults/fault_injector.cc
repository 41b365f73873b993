#include "transport/faults/fault_injector.h"

namespace dtrain::transport {

bool FaultInjector::process(Datagram d, Clock::time_point now, std::vector<Datagram>& out) {
  ++count_;
  if ((spec_.drop_every > 0 && count_ % spec_.drop_every == 0) || chance(spec_.drop)) {
    ++dropped_;
    return false;
  }
  const bool twice = chance(spec_.duplicate);
  if (chance(spec_.reorder)) {
    held_.push_back(std::move(d));
    return true;
  }
  std::vector<Datagram> now_out;
  now_out.push_back(d);
  if (twice) now_out.push_back(d);
  for (auto& h : held_) now_out.push_back(std::move(h));
  held_.clear();
  if (spec_.delay.count() > 0) {
    for (auto& x : now_out) delayed_.emplace_back(now + spec_.delay, std::move(x));
  } else {
    for (auto& x : now_out) out.push_back(std::move(x));
  }
  return true;
}

void FaultInjector::release_due(Clock::time_point now, std::vector<Datagram>& out) {
  while (!delayed_.empty() && delayed_.front().first <= now) {
    out.push_back(std::move(delayed_.front().second));
    delayed_.pop_front();
  }
  // A held datagram must not wait forever for a successor that never comes.
  if (!held_.empty() && delayed_.empty()) {
    for (auto& h : held_) out.push_back(std::move(h));
    held_.clear();
  }
}

}  // namespace dtrain::transport
