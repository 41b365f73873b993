#pragma once
// The dashboard's files, embedded in dtraind at build time (daemon/http/embed_assets.py):
// index.html, dashboard.js and .css from daemon/http/dashboard/, and Dygraphs from Debian's
// libjs-dygraphs. Served by StatusServer at / and /assets/NAME.
#include <cstddef>
#include <string>

namespace dtrain::daemon {

struct DashboardAsset {
  const char* name;
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

// The file called `name` ("index.html", "dashboard.js", "dygraph.js", ...), or nullptr.
const DashboardAsset* find_dashboard_asset(const std::string& name);

}  // namespace dtrain::daemon
