#include "core/train/gpu_sharing.h"

#include <algorithm>

namespace dtrain::core {

// Returned landing buffers; shared with the buffers' deleters, which may run after the
// GpuSharing is gone (a receiver still holding a message): then they free instead.
struct GpuSharing::Pool {
  std::mutex mutex;
  kernels::DeviceGroup* group = nullptr;  // null once the owner is gone
  std::vector<PerRank*> free;
  void give_back(PerRank* p) {
    std::lock_guard<std::mutex> lock(mutex);
    if (group && free.size() < 8) {
      free.push_back(p);
      return;
    }
    if (group)
      for (size_t r = 0; r < p->at.size(); ++r) group->release(int(r), p->at[r]);
    delete p;
  }
};

GpuSharing::GpuSharing(std::unique_ptr<kernels::DeviceGroup> group)
    : group_(std::move(group)), pool_(std::make_shared<Pool>()) {
  pool_->group = group_.get();
}

GpuSharing::~GpuSharing() {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  for (PerRank* p : pool_->free) {
    for (size_t r = 0; r < p->at.size(); ++r) group_->release(int(r), p->at[r]);
    delete p;
  }
  pool_->free.clear();
  // A buffer still held by a receiver after this point could not be released (the group dies
  // with this object): the trainer empties the bus before (MessageBus::drop_pending).
  pool_->group = nullptr;
  for (PerRank* p : {&idle_, &upload_})
    for (size_t r = 0; r < p->at.size(); ++r) group_->release(int(r), p->at[r]);
}

void GpuSharing::reserve(PerRank& buffers, int64_t words) {
  if (buffers.capacity >= words && !buffers.at.empty()) return;
  for (size_t r = 0; r < buffers.at.size(); ++r) group_->release(int(r), buffers.at[r]);
  buffers.at.assign(size_t(ranks()), nullptr);
  for (int r = 0; r < ranks(); ++r) buffers.at[size_t(r)] = group_->allocate(r, words);
  buffers.capacity = words;
}

std::shared_ptr<GpuSharing::PerRank> GpuSharing::take_landing(int64_t words) {
  PerRank* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    for (size_t i = 0; i < pool_->free.size(); ++i)
      if (pool_->free[i]->capacity >= words) {
        p = pool_->free[i];
        pool_->free.erase(pool_->free.begin() + long(i));
        break;
      }
  }
  if (!p) {
    p = new PerRank;
    reserve(*p, words);
  }
  std::shared_ptr<Pool> pool = pool_;
  return std::shared_ptr<PerRank>(p, [pool](PerRank* q) { pool->give_back(q); });
}

GpuSharing::Landed GpuSharing::share(int from, const EncodedMessage& m,
                                     const uint32_t* device_words) {
  const int64_t words = std::max<int64_t>(1, int64_t(m.words.size()));
  std::lock_guard<std::mutex> lock(mutex_);
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
