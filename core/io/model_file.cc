#include "core/io/model_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/util/durable_file.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "model files are little-endian");

constexpr char kMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'M', '\0'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8;
enum Tag : uint32_t { kSpec = 1, kParams = 2, kState = 3, kUpdater = 4, kNormalizer = 5,
                      kProgress = 6, kSharing = 7, kOtherWorkers = 8, kClassNames = 9,
                      kLocalSteps = 10 };

class Writer {
 public:
  template <typename T>
  void put(const T& v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void put_bytes(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  void put_floats(const std::vector<float>& v) {
    put<uint64_t>(v.size());
    put_bytes(v.data(), v.size() * sizeof(float));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  Reader(const char* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::vector<float> get_floats() {
    uint64_t count = get<uint64_t>();
    if (count > (n_ - pos_) / sizeof(float)) corrupt("a float array runs past its section");
    std::vector<float> v(count);
    if (count) std::memcpy(v.data(), p_ + pos_, count * sizeof(float));  // data() may be null
    pos_ += count * sizeof(float);
    return v;
  }
  std::string get_string() {
    uint64_t count = get<uint64_t>();
    need(count);
    std::string s(p_ + pos_, count);
    pos_ += count;
    return s;
  }
  [[noreturn]] void corrupt(const std::string& why) const {
    throw UserError("model file '" + path_ + "' is corrupt: " + why,
                    "use an intact copy or retrain; files are written atomically, so a partial "
                    "copy or disk damage is the likely cause");
  }

 private:
  void need(size_t k) const {
    if (k > n_ - pos_) corrupt("a section is shorter than its contents");
  }
  const char* p_;
  size_t n_, pos_ = 0;
  const std::string& path_;
};

void add_section(Writer& out, uint32_t tag, Writer& body) {
  out.put<uint32_t>(tag);
  out.put<uint32_t>(0);
  out.put<uint64_t>(body.bytes().size());
  out.put_bytes(body.bytes().data(), body.bytes().size());
}


}  // namespace

// What a checkpoint adds to the model: updater state, gradient sharing's, the other workers'
// and local steps' (each section only when the file has it).
static void add_training_state(Writer& out, const ModelFile& m) {
  if (m.has_updater) {
    Writer updater;
    updater.put_string(m.updater_type);
    updater.put_floats(m.updater_state);
    add_section(out, kUpdater, updater);
  }
  if (m.has_sharing) {
    Writer sharing;
    sharing.put<float>(m.tau);
    sharing.put<int64_t>(m.encoder_steps);
    sharing.put_floats(m.residual);
    add_section(out, kSharing, sharing);
  }
  if (!m.other_workers.empty()) {
    Writer workers;
    workers.put<uint32_t>(uint32_t(m.other_workers.size()));
    for (const ModelFile::WorkerState& w : m.other_workers) {
      workers.put<int64_t>(w.encoder_steps);
      workers.put_floats(w.residual);
      workers.put_floats(w.updater_state);
    }
    add_section(out, kOtherWorkers, workers);
  }
  if (m.has_local_steps) {
    Writer local;
    local.put_floats(m.global_params);
    local.put_floats(m.outer_momentum);
    add_section(out, kLocalSteps, local);
  }
}

void write_model_file(const std::string& path, const ModelFile& m) {
  Writer out;
  out.put_bytes(kMagic, sizeof kMagic);
  out.put<uint32_t>(kModelFileVersion);
  out.put<uint32_t>(5 + (m.has_updater ? 1 : 0) + (m.has_sharing ? 1 : 0) +
                    (m.other_workers.empty() ? 0 : 1) + (m.class_names.empty() ? 0 : 1) +
                    (m.has_local_steps ? 1 : 0));
  out.put<uint64_t>(0);  // total size, patched below
  Writer spec, params, state, normalizer, progress;
  spec.put_string(m.spec_yaml);
  params.put_floats(m.params);
  state.put_floats(m.state);
  normalizer.put<uint32_t>(static_cast<uint32_t>(m.normalizer.kind()));
  normalizer.put_floats(m.normalizer.values());
  progress.put<int64_t>(m.iteration);
  progress.put<int64_t>(m.epoch);
  add_section(out, kSpec, spec);
  add_section(out, kParams, params);
  add_section(out, kState, state);
  add_section(out, kNormalizer, normalizer);
  add_section(out, kProgress, progress);
  add_training_state(out, m);
  if (!m.class_names.empty()) {
    Writer names;
    names.put<uint32_t>(uint32_t(m.class_names.size()));
    for (const std::string& n : m.class_names) names.put_string(n);
    add_section(out, kClassNames, names);
  }
  std::string& bytes = out.bytes();
  const uint64_t total = bytes.size() + sizeof(uint32_t);
  std::memcpy(&bytes[16], &total, sizeof total);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
  out.put<uint32_t>(crc);

  // Atomic: readers see the old file or the complete new one, never a partial write.
  std::string error;
  if (!write_file_durably(path, bytes, &error))
    throw UserError(error, "check that the directory exists, is writable and has free space");
}

namespace {

std::string read_whole_file(const std::string& path, const DataRoots* roots) {
  InputStream in(path, roots);
  if (!in.is_open())
    throw UserError("cannot open model file '" + path + "'",
                    "check the path; dtrain-submit writes it to output.model of the job spec");
  std::stringstream buffer;
  buffer << in.stream().rdbuf();
  return buffer.str();
}

// The header and the checksum: a file of this format, of a version this release reads, whole.
// Returns the number of sections.
uint32_t check_frame(const std::string& bytes, const std::string& path) {
  Reader header(bytes.data(), bytes.size(), path);
  if (bytes.size() < kHeaderBytes + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw UserError("'" + path + "' is not a dtrain model file (.dtm)",
                    "pass a file written by dtrain-submit");
  for (size_t i = 0; i < sizeof kMagic; ++i) header.get<char>();
  const uint32_t version = header.get<uint32_t>();
  const uint32_t sections = header.get<uint32_t>();
  const uint64_t total = header.get<uint64_t>();
  if (version > kModelFileVersion)
    throw UserError("model file '" + path + "' has format version " + std::to_string(version) +
                        "; this dtrain reads up to " + std::to_string(kModelFileVersion),
                    "upgrade dtrain");
  if (total != bytes.size())
    header.corrupt("it is " + std::to_string(bytes.size()) + " bytes but should be " +
                   std::to_string(total) + " (truncated or padded)");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4)));
  if (crc != stored_crc) header.corrupt("checksum mismatch");
  return sections;
}

void read_other_workers(Reader& body, ModelFile& m) {
  const uint32_t count = body.get<uint32_t>();
  if (count > 4096) body.corrupt("more than 4096 workers");
  m.other_workers.resize(count);
  for (ModelFile::WorkerState& w : m.other_workers) {
    w.encoder_steps = body.get<int64_t>();
    w.residual = body.get_floats();
    w.updater_state = body.get_floats();
  }
}

// One section's body into `m`; a newer writer's section is skipped.
void read_section(uint32_t tag, uint64_t length, Reader& body, ModelFile& m) {
  switch (tag) {
    case kSpec: m.spec_yaml = body.get_string(); break;
    case kParams: m.params = body.get_floats(); break;
    case kState: m.state = body.get_floats(); break;
    case kNormalizer: {
      const uint32_t kind = body.get<uint32_t>();
      if (kind > 3) body.corrupt("unknown normalizer kind");
      m.normalizer = Normalizer::restore(static_cast<Normalizer::Kind>(kind), body.get_floats());
      break;
    }
    case kProgress: m.iteration = body.get<int64_t>(); m.epoch = body.get<int64_t>(); break;
    case kUpdater:
      m.has_updater = true;
      m.updater_type = body.get_string();
      m.updater_state = body.get_floats();
      break;
    case kSharing:
      m.has_sharing = true;
      m.tau = body.get<float>();
      m.encoder_steps = body.get<int64_t>();
      m.residual = body.get_floats();
      break;
    case kOtherWorkers: read_other_workers(body, m); break;
    case kLocalSteps:
      m.has_local_steps = true;
      m.global_params = body.get_floats();
      m.outer_momentum = body.get_floats();
      break;
    case kClassNames: {
      const uint32_t count = body.get<uint32_t>();
      if (count > length / 8) body.corrupt("more class names than its section holds");
      for (uint32_t i = 0; i < count; ++i) m.class_names.push_back(body.get_string());
      break;
    }
    default: break;
  }
}

}  // namespace

ModelFile read_model_file(const std::string& path, const DataRoots* roots) {
  const std::string bytes = read_whole_file(path, roots);
  const uint32_t sections = check_frame(bytes, path);
  ModelFile m;
  bool have_spec = false, have_params = false;
  size_t pos = kHeaderBytes;
  for (uint32_t s = 0; s < sections; ++s) {
    Reader sec(bytes.data() + pos, bytes.size() - 4 - pos, path);
    const uint32_t tag = sec.get<uint32_t>();
    sec.get<uint32_t>();
    const uint64_t length = sec.get<uint64_t>();
    pos += 16;
    if (length > bytes.size() - 4 - pos) sec.corrupt("a section runs past the end");
    Reader body(bytes.data() + pos, length, path);
    read_section(tag, length, body, m);
    have_spec = have_spec || tag == kSpec;
    have_params = have_params || tag == kParams;
    pos += length;
  }
  if (!have_spec || !have_params)
    Reader(bytes.data(), bytes.size(), path).corrupt("the spec or parameter section is missing");
  return m;
}

}  // namespace dtrain::core
