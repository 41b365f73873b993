#include "daemon/http/http_access.h"

#include <arpa/inet.h>
#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/util/error.h"
#include "transport/security/secret_file.h"

namespace dtrain::daemon {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// "name:port", "[v6]:port" or "name": the name, lower case, without brackets.
std::string host_name(const std::string& header) {
  if (!header.empty() && header[0] == '[') {
    const size_t close = header.find(']');
    return lower(header.substr(1, close == std::string::npos ? std::string::npos : close - 1));
  }
  const size_t colon = header.find(':');
  return lower(header.substr(0, colon));
}

bool same_secret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The value of cookie `name` in a Cookie header ("a=1; dtrain_token=..."), or "".
std::string cookie_value(const std::string& header, const std::string& name) {
  size_t at = 0;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ';')) ++at;
    const size_t end = std::min(header.find(';', at), header.size());
    const std::string pair = header.substr(at, end - at);
    if (pair.compare(0, name.size() + 1, name + "=") == 0) return pair.substr(name.size() + 1);
    at = end;
  }
  return "";
}

}  // namespace

bool http_token_matches(const HttpAccess& access, const std::string& presented) {
  return !access.token.empty() && same_secret(presented, access.token);
}

namespace {

std::string presented_token(const HttpCredentials& r) {
  const std::string bearer = "Bearer ";
  if (r.authorization.compare(0, bearer.size(), bearer) == 0)
    return r.authorization.substr(bearer.size());
  if (!r.token_param.empty()) return r.token_param;
  return cookie_value(r.cookie, kHttpTokenCookie);
}

}  // namespace

// Literals only: a name such as 127.x.rebind.example is anyone's to point anywhere.
bool loopback_address(const std::string& address) {
  const std::string a = lower(address);
  if (a == "localhost") return true;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, a.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::optional<HttpRefusal> http_refusal(const HttpAccess& access, const HttpCredentials& r) {
  const std::string host = host_name(r.host);
  const bool known = loopback_address(host) ||
                     std::any_of(access.hosts.begin(), access.hosts.end(),
                                 [&](const std::string& h) { return lower(h) == host; });
  if (!known)
    return HttpRefusal{403, "this status port does not serve the host name in the request's Host "
                            "header",
                       "open it by an address or name in http.hosts of the daemon's dtraind.yaml "
                       "(loopback names are always served)"};
  if (!access.token.empty() && !same_secret(presented_token(r), access.token))
    return HttpRefusal{401, "this status port is bound beyond loopback and needs its token",
                       "send `Authorization: Bearer TOKEN`, or open /?token=TOKEN once in a "
                       "browser; TOKEN is in the file http.token_file names (by default "
                       "data_dir/http.token on the daemon's machine)"};
  return std::nullopt;
}

std::string load_or_make_http_token(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    transport::ClusterKey k = transport::random_key();
    transport::write_secret_file(path, transport::key_hex(k) + "\n");
    sodium_memzero(k.data(), k.size());
  }
  std::string text = transport::read_secret_file(path, "the HTTP token",
                                                 "remove http.token_file to have one made");
  text.erase(std::remove_if(text.begin(), text.end(),
                            [](unsigned char c) { return std::isspace(c); }),
             text.end());
  if (text.size() < 32)
    throw core::UserError("the HTTP token in " + path + " is shorter than 32 characters",
                          "delete the file to have a new one made, or write a longer one");
  return text;
}

}  // namespace dtrain::daemon
