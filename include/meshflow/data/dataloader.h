// Batches of a Dataset, in order or shuffled, built on the calling thread or
// ahead of time by worker threads (torch.utils.data.DataLoader).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "meshflow/data/dataset.h"
#include "meshflow/generator.h"

namespace mf::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  // Drop the last batch when it has fewer than batch_size examples.
  bool drop_last = false;
  // 0: batches are built by the thread that asks for them; n > 0: by n
  // std::threads, at most num_workers * prefetch_factor batches ahead.
  int64_t num_workers = 0;
  int64_t prefetch_factor = 2;
  // Seed of the loader's shuffling generator; unset: drawn from the default
  // generator when the loader is made.
  std::optional<uint64_t> seed;
};

// One pass over given batches of indices: next() returns
// dataset->get_batch(batches[i]) for i = 0, 1, ... and then nothing.
// Note [Batch workers]: with workers, batch i is built by whichever worker
// claims it first; results wait in a map until the consumer reaches them, so
// they come out in order whatever the timing. An exception thrown while
// building batch i is rethrown by the next() call that would have returned
// batch i (later calls go on with batch i + 1). The destructor stops the
// workers: each finishes at most the batch in hand, then all are joined.
class BatchIterator {
 public:
  BatchIterator(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> batches,
                int64_t num_workers = 0, int64_t prefetch_factor = 2);
  ~BatchIterator();
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  // Calls from several threads are served one at a time.
  std::optional<TensorList> next();
  // Number of batches of the pass, and of those returned (or thrown) so far.
  int64_t size() const { return int64_t(batches_.size()); }
  int64_t position() const { return position_; }

 private:
  struct Result {
    TensorList batch;
    std::exception_ptr error;
  };
  void run_worker();

  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::vector<int64_t>> batches_;
  int64_t max_ahead_ = 0;
  std::mutex consumer_mutex_;  // held by next()
  int64_t position_ = 0;       // the next batch the consumer takes
  std::mutex mutex_;
  std::condition_variable worker_wakeup_;
  std::condition_variable result_ready_;
  int64_t next_claim_ = 0;  // the next batch a worker builds
  std::map<int64_t, Result> results_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  // Batches per epoch.
  int64_t size() const;
  // Starts an epoch: with shuffle, draws a new permutation from generator().
  // Epochs are independent; each owns its workers.
  std::unique_ptr<BatchIterator> epoch();
  // Range-for over a new epoch.
  Iterator begin();
  Iterator end();

  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  // The shuffling generator: save seed()/offset() in a checkpoint and
  // set_state() them back to resume the same sequence of epochs.
  Generator& generator() { return generator_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  Generator generator_;
};

class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = TensorList;
  using difference_type = std::ptrdiff_t;
  using pointer = const TensorList*;
  using reference = const TensorList&;

  Iterator() = default;
  explicit Iterator(std::shared_ptr<BatchIterator> epoch);
  reference operator*() const { return *current_; }
  pointer operator->() const { return &*current_; }
  Iterator& operator++();
  // Iterators compare equal when both are past the end.
  bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

 private:
  std::shared_ptr<BatchIterator> epoch_;
  std::optional<TensorList> current_;
};

}  // namespace mf::data
