#include "daemon/controller/membership.h"

#include <arpa/inet.h>

#include <algorithm>

#include "transport/wire/datagram.h"

namespace dtrain::daemon {

NodeOffer Member::offer() const {
  NodeOffer o;
  o.name = name;
  o.cores = cores;
  for (const auto& g : gpus) o.gpus.push_back(g.index);
  return o;
}

namespace {

// 1 to 64 printable ASCII characters: a name goes into logs, replies and the dashboard.
bool printable_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

bool ip_literal(const std::string& address) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, address.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, address.c_str(), buf) == 1;
}

// What every member's job threads rely on: a name to show and a data address to send to.
std::optional<Refusal> malformed(const NodeRegistration& node) {
  const char* const fix = "run the same dtrain release everywhere (a node's name is its "
                          "dtraind.yaml `name`: 1 to 64 printable characters)";
  if (!printable_name(node.name))
    return Refusal{"a node registered with a name that is not 1 to 64 printable characters",
                   fix};
  if (!ip_literal(node.address) || node.address.size() > 64)
    return Refusal{"node " + node.name + " registered with a data address that is not an IP "
                   "address",
                   fix};
  if (node.data_port == 0)
    return Refusal{"node " + node.name + " registered with data port 0", fix};
  return std::nullopt;
}

}  // namespace

template <typename Value>
std::optional<Refusal> Membership::differs_from_live(const std::string& name,
                                                     const std::string& key, Value value,
                                                     Value Member::*of,
                                                     const std::string& why) const {
  for (const auto& [other_name, other] : members_)
    if (other.alive && other_name != name && other.*of != value)
      return Refusal{"node " + name + " has data." + key + " " + std::to_string(value) +
                         ", and node " + other_name + " (alive) has " +
                         std::to_string(other.*of) + ": " + why,
                     "set data." + key + ": " + std::to_string(other.*of) + " in " + name +
                         "'s dtraind.yaml, or stop every node and give them all the new value"};
  return std::nullopt;
}

std::optional<Refusal> Membership::refusal(const NodeRegistration& node) const {
  const std::string& name = node.name;
  if (auto bad = malformed(node)) return bad;
  for (const auto& [other_name, other] : members_)
    if (other.id == node.node_id && other_name != name && other.alive)
      return Refusal{"node " + name + " has the same node id (" + std::to_string(node.node_id) +
                         ") as node " + other_name,
                     "stop dtraind on " + name + ", delete its data_dir/node_id and start it "
                     "again (a new id is drawn)"};
  // Nodes of different wire versions drop each other's every datagram (as `wrong_version`): the
  // control protocol may be the same, so the difference is refused here, where it is clear.
  if (node.data_wire != transport::kWireVersion)
    return Refusal{"node " + name + "'s data channel speaks wire version " +
                       (node.data_wire == 0 ? std::string("4 or older")
                                            : std::to_string(node.data_wire)) +
                       ", and this controller's speaks " +
                       std::to_string(transport::kWireVersion) +
                       ": the nodes would drop each other's every datagram",
                   "run the same dtrain release on every node (upgrade " + name +
                       ", or stop every node and upgrade them together)"};
  if (node.data_lanes < 1 || node.data_lanes > transport::kMaxLanes)
    return Refusal{"node " + name + " registered with " + std::to_string(node.data_lanes) +
                       " data lanes, outside 1 .. " + std::to_string(transport::kMaxLanes),
                   "run the same dtrain release everywhere"};
  // Lanes are steered by the receiving node's count: nodes that differ refuse each other's
  // datagrams, so one that differs from the live nodes is refused here, where it is clear.
  if (auto differs = differs_from_live(name, "lanes", node.data_lanes, &Member::data_lanes,
                                       "nodes of different lane counts cannot exchange updates"))
    return differs;
  // A relay cuts what it passes on to its own datagram size, and a message's chunks must all be
  // one size (a catch-up from another relay completes a part begun): one data.mtu a cluster.
  return differs_from_live(name, "mtu", node.data_mtu, &Member::data_mtu,
                           "every node of a cluster must send datagrams of one size");
}

Member& Membership::entry(const std::string& name) {
  Member& m = members_[name];
  m.name = name;
  return m;
}

Member& Membership::admit(const NodeRegistration& node) {
  Member& m = members_[node.name];
  m.boot_id = node.boot_id;
  m.id = node.node_id;
  m.name = node.name;
  m.address = node.address;
  m.data_port = node.data_port;
  m.data_lanes = node.data_lanes;
  m.data_mtu = node.data_mtu;
  m.cores = node.cores;
  m.gpus = node.gpus;
  m.alive = true;
  m.session = next_session_++;
  m.last_heard = now_();
  m.outbox.clear();
  return m;
}

void Membership::heard_all() {
  for (auto& [name, m] : members_)
    if (m.alive) m.last_heard = now_();
}

Member* Membership::find(const std::string& name) {
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : &it->second;
}

const Member* Membership::find(const std::string& name) const {
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : &it->second;
}

bool Membership::alive(const std::string& name) const {
  const Member* m = find(name);
  return m && m->alive;
}

void Membership::send(const std::string& name, const std::vector<uint8_t>& frame) {
  if (Member* m = find(name)) m->send(frame);
}

void Membership::send_if_alive(const std::string& name, const std::vector<uint8_t>& frame) {
  if (Member* m = find(name); m && m->alive) m->send(frame);
}

size_t Membership::alive_count() const {
  size_t n = 0;
  for (const auto& [name, m] : members_) n += m.alive;
  return n;
}

std::vector<NodeOffer> Membership::alive_offers() const {
  std::vector<NodeOffer> out;
  for (const auto& [name, m] : members_)
    if (m.alive) out.push_back(m.offer());
  return out;
}

std::vector<Member*> Membership::alive_by_id(const std::function<bool(const Member&)>& eligible) {
  std::vector<Member*> out;
  for (auto& [name, m] : members_)
    if (m.alive && eligible(m)) out.push_back(&m);
  std::sort(out.begin(), out.end(), [](Member* a, Member* b) { return a->id < b->id; });
  return out;
}

Json Membership::node_names() const {
  Json ids = Json::object();
  for (const auto& [name, m] : members_) ids[std::to_string(m.id)] = name;
  return ids;
}

}  // namespace dtrain::daemon
