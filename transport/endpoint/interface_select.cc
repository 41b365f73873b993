#include "transport/endpoint/interface_select.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <fstream>

#include "transport/transport_error.h"
#include "transport/wire/datagram.h"

namespace dtrain::transport {
namespace {

bool excluded(const std::string& name) {
  return name == "lo" || name.rfind("docker", 0) == 0 || name.rfind("veth", 0) == 0;
}

// "a.b.c.d/n" into address and prefix length; false if it is not one.
bool parse_cidr(const std::string& text, uint32_t& network, int& bits) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  in_addr a;
  if (inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return false;
  try {
    bits = std::stoi(text.substr(slash + 1));
  } catch (...) {
    return false;
  }
  if (bits < 0 || bits > 32) return false;
  network = ntohl(a.s_addr);
  return true;
}

bool in_network(const std::string& address, uint32_t network, int bits) {
  in_addr a;
  if (inet_pton(AF_INET, address.c_str(), &a) != 1) return false;
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t(0) << (32 - bits);
  return (ntohl(a.s_addr) & mask) == (network & mask);
}

std::string describe(const std::vector<InterfaceAddress>& all) {
  std::string out;
  for (const auto& c : all) out += (out.empty() ? "" : ", ") + c.name + " " + c.address;
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<InterfaceAddress> local_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    out.push_back({i->ifa_name, text});
  }
  freeifaddrs(list);
  return out;
}

int interface_mtu(const std::string& name) {
  // getifaddrs names an address's alias eth0:1; its MTU is the device's.
  const std::string device = name.substr(0, name.find(':'));
  // A device's name, never a path: nothing that could leave the directory.
  if (device.empty() || device.find('/') != std::string::npos || device == "." || device == "..")
    return 0;
  std::ifstream in("/sys/class/net/" + device + "/mtu");
  int mtu = 0;
  return in >> mtu && mtu > 0 ? mtu : 0;
}

void check_datagram_fits(const std::string& interface, int interface_mtu, int data_mtu,
                         size_t datagram) {
  const size_t on_wire = datagram + kIpv4UdpHeaders;
  if (interface_mtu <= 0 || on_wire <= size_t(interface_mtu)) return;
  // The least data.mtu's datagrams do not fit either: no setting helps on this interface.
  const size_t least = datagram_for_mtu(kSmallestMtu) + kIpv4UdpHeaders;
  if (size_t(interface_mtu) < least)
    throw TransportError("the data channel's interface " + interface + " has an MTU of " +
                             std::to_string(interface_mtu) + ", less than the " +
                             std::to_string(least) + " bytes its smallest datagrams need",
                         "give the data channel an interface of a larger MTU (data.interface "
                         "or data.network), or raise this one's (ip link set " + interface +
                             " mtu 1500)");
  const int suggest = std::max(interface_mtu, int(kSmallestMtu));
  throw TransportError("data.mtu is " + std::to_string(data_mtu) + " (datagrams of " +
                           std::to_string(on_wire) + " bytes with their IP and UDP headers) "
                           "but the data channel's interface " + interface + " has an MTU of " +
                           std::to_string(interface_mtu) + ": they would not fit",
                       "set data.mtu: " + std::to_string(suggest) +
                           " on every node, or raise the interface's MTU on every node (ip link "
                           "set " + interface + " mtu " + std::to_string(data_mtu) +
                           ") where every switch between them carries such frames");
}

InterfaceAddress choose_interface(const std::string& spec, bool allow_excluded,
                                  const std::vector<InterfaceAddress>& candidates) {
  uint32_t network = 0;
  int bits = 0;
  const bool cidr = parse_cidr(spec, network, bits);
  if (!spec.empty() && !cidr && spec.find('/') != std::string::npos)
    throw TransportError("network '" + spec + "' is not of the form a.b.c.d/n",
                         "write it like 10.0.0.0/16, or give an interface name such as eth0");
  for (const auto& c : candidates) {
    if (spec.empty()) {
      if (!excluded(c.name) || allow_excluded) return c;
    } else if (cidr) {
      if (in_network(c.address, network, bits) && (!excluded(c.name) || allow_excluded)) return c;
    } else if (c.name == spec) {
      return c;  // named explicitly: the user asked for it, even lo
    }
  }
  const std::string what = spec.empty() ? "no usable network interface (lo, docker* and veth* are "
                                          "skipped)"
                                        : "no interface matches '" + spec + "'";
  throw TransportError(what + "; this machine has: " + describe(candidates),
                       "set network to the CIDR of the cluster network (e.g. 10.0.0.0/16) or an "
                       "interface name from that list" +
                           std::string(spec.empty() || cidr ? "; allow_loopback: true for "
                                                              "single-machine tests"
                                                            : ""));
}

}  // namespace dtrain::transport
