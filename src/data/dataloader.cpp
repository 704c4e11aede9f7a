// BatchIterator (one pass, optional worker threads) and DataLoader (epochs).
#include "meshflow/data/dataloader.h"

#include <algorithm>

#include "meshflow/error.h"
#include "meshflow/ops/creation.h"

namespace mf::data {

// --- BatchIterator ------------------------------------------------------------

BatchIterator::BatchIterator(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> batches,
                             int64_t num_workers, int64_t prefetch_factor)
    : dataset_(std::move(dataset)), batches_(std::move(batches)) {
  MF_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  MF_CHECK(num_workers >= 0, ValueError, "DataLoader: num_workers must be >= 0, got ", num_workers);
  MF_CHECK(prefetch_factor >= 1, ValueError, "DataLoader: prefetch_factor must be >= 1, got ", prefetch_factor);
  if (num_workers == 0) return;
  max_ahead_ = num_workers * prefetch_factor;
  const int64_t threads = std::min<int64_t>(num_workers, size());
  workers_.reserve(size_t(threads));
  for (int64_t i = 0; i < threads; ++i) workers_.emplace_back([this] { run_worker(); });
}

BatchIterator::~BatchIterator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  worker_wakeup_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void BatchIterator::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    worker_wakeup_.wait(lock, [&] {
      return stopping_ || next_claim_ >= size() || next_claim_ < position_ + max_ahead_;
    });
    if (stopping_ || next_claim_ >= size()) return;
    const int64_t index = next_claim_++;
    lock.unlock();
    Result result;
    try {
      result.batch = dataset_->get_batch(batches_[size_t(index)]);
    } catch (...) {
      result.error = std::current_exception();
    }
    lock.lock();
    results_.emplace(index, std::move(result));
    result_ready_.notify_all();
  }
}

std::optional<TensorList> BatchIterator::next() {
  std::lock_guard<std::mutex> consumer(consumer_mutex_);
  if (position_ >= size()) return std::nullopt;
  if (workers_.empty()) {
    const int64_t index = position_++;
    return dataset_->get_batch(batches_[size_t(index)]);
  }
  Result result;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    result_ready_.wait(lock, [&] { return results_.count(position_) > 0; });
    auto it = results_.find(position_);
    result = std::move(it->second);
    results_.erase(it);
    ++position_;
  }
  worker_wakeup_.notify_all();  // one more batch may now be built ahead
  if (result.error) std::rethrow_exception(result.error);
  return std::move(result.batch);
}

// --- DataLoader ---------------------------------------------------------------

namespace {

uint64_t seed_from_default_generator() {
  const auto words = philox(default_generator().seed(), default_generator().reserve(1));
  return (uint64_t(words[0]) << 32) | words[1];
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      options_(options),
      generator_(options.seed ? *options.seed : seed_from_default_generator()) {
  MF_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  MF_CHECK(options_.batch_size >= 1, ValueError, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  MF_CHECK(options_.num_workers >= 0, ValueError, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  MF_CHECK(options_.prefetch_factor >= 1, ValueError, "DataLoader: prefetch_factor must be >= 1, got ",
           options_.prefetch_factor);
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::unique_ptr<BatchIterator> DataLoader::epoch() {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (options_.shuffle) {
    Tensor permutation = randperm(n, Device(), &generator_);
    std::copy_n(permutation.data<int64_t>(), n, order.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  }
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(size()));
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t first = int64_t(i) * options_.batch_size;
    const int64_t last = std::min(n, first + options_.batch_size);
    batches[i].assign(order.begin() + first, order.begin() + last);
  }
  return std::make_unique<BatchIterator>(dataset_, std::move(batches), options_.num_workers,
                                         options_.prefetch_factor);
}

DataLoader::Iterator DataLoader::begin() { return Iterator(epoch()); }
DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(std::shared_ptr<BatchIterator> epoch) : epoch_(std::move(epoch)) {
  current_ = epoch_->next();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = epoch_->next();
  return *this;
}

}  // namespace mf::data
