#include "core/train/gpu_sharing.h"

#include <algorithm>

namespace dtrain::core {

// Buffers receivers have let go of. A deleter only hands its buffer back here (it may run on
// any thread, during another thread's round, or after the GpuSharing is gone); device memory is
// allocated and released only by the thread holding GpuSharing::mutex_, between rounds.
struct GpuSharing::Pool {
  std::mutex mutex;
  std::vector<PerRank*> returned;
  int held = 0;       // landing buffers receivers still hold
  bool owner = true;  // false once the GpuSharing is gone: returned buffers are dropped
  void give_back(PerRank* p) {
    std::lock_guard<std::mutex> lock(mutex);
    --held;
    if (owner) {
      returned.push_back(p);
      return;
    }
    delete p;  // its memory went with the group (see ~GpuSharing)
  }
};

namespace {
// Capacities in powers of two, so that varying message sizes reuse the same few buffers.
int64_t rounded_capacity(int64_t words) {
  int64_t c = 1024;
  while (c < words) c *= 2;
  return c;
}
}  // namespace

GpuSharing::GpuSharing(std::unique_ptr<kernels::DeviceGroup> group)
    : group_(std::move(group)), pool_(std::make_shared<Pool>()) {}

GpuSharing::~GpuSharing() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PerRank*> returned;
  {
    std::lock_guard<std::mutex> pool_lock(pool_->mutex);
    returned.swap(pool_->returned);
    // Buffers still held past this point are not released (the group dies with this object):
    // the trainer empties the bus first (MessageBus::drop_pending).
    pool_->owner = false;
  }
  for (PerRank* p : returned) {
    release(*p);
    delete p;
  }
  release(idle_);
  release(upload_);
}

void GpuSharing::release(PerRank& buffers) {
  for (size_t r = 0; r < buffers.at.size(); ++r) group_->release(int(r), buffers.at[r]);
  buffers.at.clear();
  buffers.capacity = 0;
}

void GpuSharing::reserve(PerRank& buffers, int64_t words) {
  if (buffers.capacity >= words && !buffers.at.empty()) return;
  release(buffers);
  const int64_t capacity = rounded_capacity(words);
  buffers.at.assign(size_t(ranks()), nullptr);
  buffers.capacity = capacity;
  for (int r = 0; r < ranks(); ++r) buffers.at[size_t(r)] = group_->allocate(r, capacity);
}

// Under mutex_. A returned buffer that fits is reused; the others (past a few) are released.
std::shared_ptr<GpuSharing::PerRank> GpuSharing::take_landing(int64_t words) {
  std::vector<PerRank*> returned;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    returned.swap(pool_->returned);
  }
  PerRank* p = nullptr;
  std::vector<PerRank*> keep;
  for (PerRank* q : returned) {
    if (!p && q->capacity >= words) p = q;
    else if (keep.size() < 4) keep.push_back(q);
    else {
      release(*q);
      delete q;
    }
  }
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    pool_->returned.insert(pool_->returned.end(), keep.begin(), keep.end());
    ++pool_->held;
  }
  if (!p) {
    p = new PerRank;
    try {
      reserve(*p, words);
    } catch (...) {
      release(*p);
      delete p;
      std::lock_guard<std::mutex> lock(pool_->mutex);
      --pool_->held;
      throw;
    }
  }
  std::shared_ptr<Pool> pool = pool_;
  return std::shared_ptr<PerRank>(p, [pool](PerRank* q) { pool->give_back(q); });
}

GpuSharing::Landed GpuSharing::share(int from, const EncodedMessage& m,
                                     const uint32_t* device_words) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) return {};
  {
    std::lock_guard<std::mutex> pool_lock(pool_->mutex);
    if (pool_->held >= kMaxInFlight) return {};
  }
  try {
    return round(from, m, device_words);
  } catch (const std::exception& e) {
    failure_ = e.what();  // host memory from now on; the trainer reports it
    return {};
  }
}

// Under mutex_.
GpuSharing::Landed GpuSharing::round(int from, const EncodedMessage& m,
                                     const uint32_t* device_words) {
  const int64_t words = std::max<int64_t>(1, int64_t(m.words.size()));
  reserve(idle_, words);
  std::vector<const uint32_t*> send(idle_.at.begin(), idle_.at.end());
  if (device_words) {
    send[size_t(from)] = device_words;
  } else {
    reserve(upload_, words);
    group_->upload(from, upload_.at[size_t(from)], m.words.data(), int64_t(m.words.size()));
    send[size_t(from)] = upload_.at[size_t(from)];
  }
  // Every rank gets every rank's slot; the message is the sender's slot on each.
  std::shared_ptr<PerRank> landing = take_landing(words * ranks());
  group_->all_gather(send, landing->at, words);
  ++rounds_;
  Landed out;
  for (int q = 0; q < ranks(); ++q)
    out.words.push_back(landing->at[size_t(q)] + size_t(from) * size_t(words));
  out.keep = landing;
  return out;
}

std::string GpuSharing::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

std::unique_ptr<GpuSharing> make_gpu_sharing(const std::vector<kernels::Backend*>& backends,
                                             std::string* description) {
  std::string why;
  std::unique_ptr<kernels::DeviceGroup> group = kernels::make_device_group(backends, &why);
  if (!group) {
    *description = "host memory (" + why + ")";
    return nullptr;
  }
  std::string gpus;
  for (kernels::Backend* b : backends) gpus += (gpus.empty() ? "" : ", ") + std::to_string(b->device());
  *description = group->name() + " between GPU" + (backends.size() > 1 ? "s " : " ") + gpus;
  return std::make_unique<GpuSharing>(std::move(group));
}

int64_t GpuSharing::rounds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rounds_;
}

}  // namespace dtrain::core
