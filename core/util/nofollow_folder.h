#pragma once
// A folder opened one path component at a time, none of them a symbolic link, and the files a
// daemon creates, reads, renames and removes in it, relative to it (openat and friends). What a
// daemon writes where a client said (cluster inference output, ROC curves) then cannot be
// redirected by a link planted in the path, before or after the path was checked.
#include <cstdio>
#include <string>

namespace dtrain::core {

class NoFollowFolder {
 public:
  // `path` absolute. Throws UserError naming the path when a component is missing, not a
  // folder, or a symbolic link.
  explicit NoFollowFolder(const std::string& path);
  ~NoFollowFolder();
  NoFollowFolder(const NoFollowFolder&) = delete;
  NoFollowFolder& operator=(const NoFollowFolder&) = delete;

  // A new file of its own (O_EXCL, a random name starting with `prefix`), open for writing;
  // `name` receives its name. Throws UserError.
  std::FILE* create_temporary(const std::string& prefix, std::string& name);
  // Renames `from` to `to` in this folder (a link at `to` is replaced, not followed). Throws.
  void rename(const std::string& from, const std::string& to);
  // A new folder `name` in this one, with this one's permissions; throws UserError when it
  // exists already (a link included) or cannot be made.
  void make_folder(const std::string& name);
  // Removes `name` if it is there; false when it could not.
  bool remove(const std::string& name);
  // `name` open for reading, or nullptr when it is missing, a link or unreadable.
  std::FILE* open_read(const std::string& name);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace dtrain::core
