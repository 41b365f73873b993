#pragma once
// Opening a job's input file where a node's data_roots confine its inputs (core/util/data_roots.h):
// the path is looked up once, to a descriptor that reads nothing (O_PATH); the file it found is
// checked by the path the kernel resolved for it, must be a regular file, and is then opened for
// reading through that descriptor. A link swapped in along the path after an earlier check of
// the name cannot lead out of the roots, and a FIFO or device planted there is never opened
// (docs/operations.md, "Who may do what").
#include <istream>
#include <memory>
#include <string>

#include "core/util/data_roots.h"

namespace dtrain::core {

// A descriptor open for reading `path` (O_RDONLY | O_CLOEXEC | O_NOCTTY | extra_flags; of the
// extra flags only O_NOFOLLOW where roots confine), or -1 with errno set when it cannot be
// opened (ELOOP: a link with O_NOFOLLOW; EINVAL: not a regular file, where roots confine).
// Where `roots` (null: none) confine, a file outside them, or a missing one whose name leads
// out, throws their refusal for `path` (UserError) before anything is read.
int open_input(const std::string& path, const DataRoots* roots, int extra_flags = 0);

// A folder of inputs (an image folder), looked up once: where `roots` (null: none) confine, it
// must lie inside them (else their refusal is thrown) and is then listed through the descriptor
// held here, so a folder swapped for a link after the lookup lists nothing outside. Without
// roots it is the path itself. Files under it are still opened with open_input.
class InputFolder {
 public:
  InputFolder(const std::string& path, const DataRoots* roots);
  ~InputFolder();
  InputFolder(const InputFolder&) = delete;
  InputFolder& operator=(const InputFolder&) = delete;
  // What to list: "/proc/self/fd/N" for a confined folder, else the path; empty when a confined
  // folder cannot be looked up, so that listing it fails as listing a missing folder does (never
  // by its name, where a link could have appeared since).
  const std::string& listing_path() const { return listing_; }

 private:
  int fd_ = -1;
  std::string listing_;
};

// A text stream over an input file opened as open_input does.
class InputStream {
 public:
  InputStream(const std::string& path, const DataRoots* roots);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;
  bool is_open() const;
  std::istream& stream();

 private:
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<std::istream> stream_;
};

}  // namespace dtrain::core
