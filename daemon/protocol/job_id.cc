#include "daemon/protocol/job_id.h"

#include <cstdio>

namespace dtrain::daemon {

std::string job_id_text(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

bool parse_job_id(const std::string& text, uint64_t& id) {
  if (text.empty() || text.size() > 16) return false;
  id = 0;
  for (char ch : text) {
    int v;
    if (ch >= '0' && ch <= '9') v = ch - '0';
    else if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') v = ch - 'A' + 10;
    else return false;
    id = id * 16 + static_cast<uint64_t>(v);
  }
  return true;
}

}  // namespace dtrain::daemon
