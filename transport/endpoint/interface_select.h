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

// Throws TransportError naming what was asked, what exists, and the fix.
InterfaceAddress choose_interface(const std::string& network_or_name, bool allow_excluded,
                                  const std::vector<InterfaceAddress>& candidates = local_addresses());

}  // namespace dtrain::transport
