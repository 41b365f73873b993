#pragma once
// Job ids: random 64-bit values, shown (and typed by users) as 16 hex digits.
#include <cstdint>
#include <string>

namespace dtrain::daemon {

std::string job_id_text(uint64_t id);
// Parses 16 (or fewer) hex digits; false if it is not one.
bool parse_job_id(const std::string& text, uint64_t& id);

}  // namespace dtrain::daemon
