#pragma once
// Writing a file so that a crash leaves the old contents or the new, never a mix: a temporary
// file beside it, fsync, rename over the target, fsync of the directory. Model files and the
// controller's job records are written this way.
#include <string>

namespace dtrain::core {

// False (with `error` naming the step, the path and the system's reason) when it failed; the
// target is then untouched and no temporary file is left behind.
bool write_file_durably(const std::string& path, const std::string& bytes, std::string* error);

}  // namespace dtrain::core
