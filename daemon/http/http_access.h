#pragma once
// Who the status port answers (docs/operations.md, "The HTTP port"): only requests whose Host
// header names this daemon (loopback names, its bound address, the names in http.hosts), so a
// web page elsewhere cannot reach it through DNS rebinding; and, when it is bound beyond
// loopback, only requests that carry its read-only token (Authorization: Bearer TOKEN, or
// ?token=TOKEN once in a browser, which sets a cookie for the dashboard's own requests).
#include <optional>
#include <string>
#include <vector>

namespace dtrain::daemon {

struct HttpAccess {
  std::vector<std::string> hosts;  // accepted Host names, besides the loopback ones
  std::string token;               // required when not empty
};

// What a request presents.
struct HttpCredentials {
  std::string host;           // the Host header
  std::string authorization;  // the Authorization header
  std::string token_param;    // ?token=
  std::string cookie;         // the Cookie header
};

struct HttpRefusal {
  int status = 403;
  std::string error, fix;
};

constexpr const char* kHttpTokenCookie = "dtrain_token";

std::optional<HttpRefusal> http_refusal(const HttpAccess& access, const HttpCredentials& request);
// `presented` is the token (compared in constant time); false when none is set.
bool http_token_matches(const HttpAccess& access, const std::string& presented);
// 127.0.0.0/8, ::1 and "localhost".
bool loopback_address(const std::string& address);
// The token in `path` (one line, mode 0600); made there first when there is no such file.
std::string load_or_make_http_token(const std::string& path);

}  // namespace dtrain::daemon
