#pragma once
// Which local address the data channel binds (docs/architecture/daemon.md, "Roles, ports and
// config"): by network (`10.0.0.0/16`), by interface name (`eth0`), or the first suitable one when
// nothing is given. Loopback, docker* and veth* interfaces are skipped unless allowed (or named
// explicitly): they are almost never what connects the machines. The caller logs the choice.
#include <string>
#include <vector>

namespace dtrain::transport {

struct InterfaceAddress {
  std::string name;     // eth0
  std::string address;  // 10.0.0.5
};

// The IPv4 addresses of this machine's interfaces that are up.
std::vector<InterfaceAddress> local_addresses();

// The MTU the kernel gives the interface (/sys/class/net/NAME/mtu; an alias, eth0:1, is its
// device's); 0 where it cannot be read.
int interface_mtu(const std::string& name);

// The data channel's datagrams (`datagram` bytes for `data_mtu`, kIpv4UdpHeaders more on the
// wire) against the chosen interface's MTU (0: unknown, nothing checked): throws TransportError
// naming both and the fix when they would not fit.
void check_datagram_fits(const std::string& interface, int interface_mtu, int data_mtu,
                         size_t datagram);

// Throws TransportError naming what was asked, what exists, and the fix.
InterfaceAddress choose_interface(const std::string& network_or_name, bool allow_excluded,
                                  const std::vector<InterfaceAddress>& candidates = local_addresses());

}  // namespace dtrain::transport
