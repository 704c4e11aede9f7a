// Datasets, random_split and the DataLoader (src/data).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include <unistd.h>

#include "meshflow/data.h"
#include "test_util.h"

namespace mf::data {
namespace {

using mf::testing::expect_values;
using mf::testing::values;

// n examples: x[i] = (i, -i) as float32, y[i] = i as int64.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<double> x, y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(double(i));
    x.push_back(-double(i));
    y.push_back(double(i));
  }
  return std::make_shared<TensorDataset>(
      TensorList{from_vector(x, {n, 2}), from_vector(y, {n}, {.dtype = DType::Int64})});
}

std::vector<int64_t> labels_of(const TensorList& batch) {
  std::vector<int64_t> out;
  for (double v : values(batch[1])) out.push_back(int64_t(v));
  return out;
}

// All labels of one epoch, batch by batch.
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (const TensorList& batch : loader) batches.push_back(labels_of(batch));
  return batches;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// --- TensorDataset / Subset ---------------------------------------------------

TEST(TensorDataset, GetAndBatch) {
  auto ds = numbered(5);
  EXPECT_EQ(ds->size(), 5);
  TensorList ex = ds->get(3);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].sizes(), Shape({2}));
  expect_values(ex[0], {3, -3});
  EXPECT_EQ(ex[1].dim(), 0);
  EXPECT_EQ(ex[1].item<int64_t>(), 3);
  TensorList batch = ds->get_batch({4, 0, 2});
  EXPECT_EQ(batch[0].sizes(), Shape({3, 2}));
  EXPECT_EQ(batch[1].dtype(), DType::Int64);
  expect_values(batch[0], {4, -4, 0, 0, 2, -2});
  expect_values(batch[1], {4, 0, 2});
}

TEST(TensorDataset, NonContiguousTensors) {
  // Columns of a (2, 4) tensor: example i is the column i.
  Tensor t = from_vector({0, 1, 2, 3, 10, 11, 12, 13}, {2, 4});
  TensorDataset ds({transpose(t, 0, 1)});
  EXPECT_EQ(ds.size(), 4);
  expect_values(ds.get(2)[0], {2, 12});
  expect_values(ds.get_batch({3, 1})[0], {3, 13, 1, 11});
}

TEST(TensorDataset, BadInput) {
  EXPECT_THROW(TensorDataset({zeros({3, 2}), zeros({4})}), ShapeError);
  EXPECT_THROW(TensorDataset({zeros({})}), ShapeError);
  EXPECT_THROW(TensorDataset(TensorList{}), ValueError);
  auto ds = numbered(3);
  EXPECT_THROW(ds->get(3), IndexError);
  EXPECT_THROW(ds->get(-1), IndexError);
  EXPECT_THROW(ds->get_batch({0, 5}), IndexError);
}

// The base class's get_batch stacks get() results.
class SquaresDataset : public Dataset {
 public:
  explicit SquaresDataset(int64_t n, int64_t throw_at = -1) : n_(n), throw_at_(throw_at) {}
  int64_t size() const override { return n_; }
  TensorList get(int64_t index) const override {
    check_index("SquaresDataset", index, n_);
    if (index == throw_at_) throw ValueError("SquaresDataset: example " + std::to_string(index) + " is broken");
    return {full({2}, double(index * index)), scalar_tensor(index, DType::Int64)};
  }

 private:
  int64_t n_;
  int64_t throw_at_;
};

TEST(Dataset, DefaultGetBatchStacks) {
  SquaresDataset ds(6);
  TensorList batch = ds.get_batch({1, 5, 2});
  EXPECT_EQ(batch[0].sizes(), Shape({3, 2}));
  expect_values(batch[0], {1, 1, 25, 25, 4, 4});
  expect_values(batch[1], {1, 5, 2});
}

TEST(Subset, MapsIndices) {
  auto base = numbered(10);
  Subset sub(base, {7, 2, 9});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(0)[1].item<int64_t>(), 7);
  expect_values(sub.get_batch({2, 0})[1], {9, 7});
  EXPECT_THROW(sub.get(3), IndexError);
  EXPECT_THROW(Subset(base, {0, 10}), IndexError);
  EXPECT_THROW(Subset(base, {-1}), IndexError);
  // A subset of a subset.
  auto inner = std::make_shared<Subset>(base, std::vector<int64_t>{5, 6, 7, 8});
  Subset outer(inner, {3, 1});
  expect_values(outer.get_batch({0, 1})[1], {8, 6});
}

// --- random_split -------------------------------------------------------------

TEST(RandomSplit, LengthsCoverDisjointly) {
  auto ds = numbered(10);
  Generator gen(42);
  auto splits = random_split(ds, {3, 7}, gen);
  ASSERT_EQ(splits.size(), 2u);
  EXPECT_EQ(splits[0]->size(), 3);
  EXPECT_EQ(splits[1]->size(), 7);
  std::vector<int64_t> all = splits[0]->indices();
  all.insert(all.end(), splits[1]->indices().begin(), splits[1]->indices().end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(10));
  EXPECT_THROW(random_split(ds, {3, 8}, gen), ValueError);
  EXPECT_THROW(random_split(ds, {-1, 11}, gen), ValueError);
}

TEST(RandomSplit, FractionsFollowPyTorchRemainderRule) {
  // torch.utils.data.random_split(range(10), [0.25, 0.25, 0.5]) has lengths
  // floor(2.5) = 2, 2, 5 plus the remainder 1 given to split 0: 3, 2, 5.
  auto ds = numbered(10);
  Generator gen(1);
  auto splits = random_split_fractions(ds, {0.25, 0.25, 0.5}, gen);
  ASSERT_EQ(splits.size(), 3u);
  EXPECT_EQ(splits[0]->size(), 3);
  EXPECT_EQ(splits[1]->size(), 2);
  EXPECT_EQ(splits[2]->size(), 5);
  // 11 examples in thirds: 3, 3, 3 and a remainder of 2 for splits 0 and 1.
  auto thirds = random_split_fractions(numbered(11), {1.0 / 3, 1.0 / 3, 1.0 / 3}, gen);
  EXPECT_EQ(thirds[0]->size(), 4);
  EXPECT_EQ(thirds[1]->size(), 4);
  EXPECT_EQ(thirds[2]->size(), 3);
  EXPECT_THROW(random_split_fractions(ds, {0.5, 0.6}, gen), ValueError);
  EXPECT_THROW(random_split_fractions(ds, {1.5, -0.5}, gen), ValueError);
}

TEST(RandomSplit, DeterministicPerSeed) {
  auto ds = numbered(50);
  Generator a(7), b(7), c(8);
  auto sa = random_split(ds, {20, 30}, a);
  auto sb = random_split(ds, {20, 30}, b);
  auto sc = random_split(ds, {20, 30}, c);
  EXPECT_EQ(sa[0]->indices(), sb[0]->indices());
  EXPECT_EQ(sa[1]->indices(), sb[1]->indices());
  EXPECT_NE(sa[0]->indices(), sc[0]->indices());
  // The split is a permutation, not the identity.
  EXPECT_NE(sa[0]->indices(), iota(20));
}

TEST(RandomSplit, RandpermUsesTheGivenGenerator) {
  Generator a(3), b(3);
  const uint64_t default_offset = default_generator().offset();
  Tensor pa = randperm(100, Device(), &a);
  EXPECT_EQ(default_generator().offset(), default_offset);
  EXPECT_GT(a.offset(), 0u);
  EXPECT_EQ(values(pa), values(randperm(100, Device(), &b)));
}

// --- DataLoader ---------------------------------------------------------------

TEST(DataLoader, InOrderWithoutShuffle) {
  DataLoader loader(numbered(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  auto batches = run_epoch(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
  // Batches hold whole examples: x rows match the labels.
  for (const TensorList& batch : loader) {
    auto labels = labels_of(batch);
    std::vector<double> want;
    for (int64_t l : labels) {
      want.push_back(double(l));
      want.push_back(-double(l));
    }
    expect_values(batch[0], want);
  }
}

TEST(DataLoader, DropLast) {
  DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  auto batches = run_epoch(loader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(flatten(batches), iota(8));
  DataLoader exact(numbered(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(exact.size(), 2);
  DataLoader tiny(numbered(3), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(tiny.size(), 0);
  EXPECT_TRUE(run_epoch(tiny).empty());
}

TEST(DataLoader, ShuffleSeesEveryExampleOncePerEpoch) {
  DataLoader loader(numbered(23), {.batch_size = 5, .shuffle = true, .seed = 11});
  auto first = flatten(run_epoch(loader));
  auto second = flatten(run_epoch(loader));
  EXPECT_NE(first, iota(23));
  EXPECT_NE(first, second);  // a new permutation each epoch
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, iota(23));
  EXPECT_EQ(second, iota(23));
}

TEST(DataLoader, SameSeedSameOrder) {
  DataLoader a(numbered(30), {.batch_size = 4, .shuffle = true, .seed = 5});
  DataLoader b(numbered(30), {.batch_size = 4, .shuffle = true, .seed = 5});
  DataLoader c(numbered(30), {.batch_size = 4, .shuffle = true, .seed = 6});
  auto a1 = run_epoch(a), a2 = run_epoch(a);
  EXPECT_EQ(a1, run_epoch(b));
  EXPECT_EQ(a2, run_epoch(b));
  EXPECT_NE(a1, run_epoch(c));
}

TEST(DataLoader, GeneratorStateResumesEpochs) {
  DataLoader a(numbered(30), {.batch_size = 8, .shuffle = true, .seed = 9});
  run_epoch(a);
  const uint64_t seed = a.generator().seed(), offset = a.generator().offset();
  auto next = run_epoch(a);
  DataLoader b(numbered(30), {.batch_size = 8, .shuffle = true});
  b.generator().set_state(seed, offset);
  EXPECT_EQ(run_epoch(b), next);
}

TEST(DataLoader, UnseededLoadersDrawFromTheDefaultGenerator) {
  manual_seed(123);
  DataLoader a(numbered(40), {.batch_size = 40, .shuffle = true});
  DataLoader b(numbered(40), {.batch_size = 40, .shuffle = true});
  manual_seed(123);
  DataLoader c(numbered(40), {.batch_size = 40, .shuffle = true});
  auto ea = run_epoch(a);
  EXPECT_NE(ea, run_epoch(b));
  EXPECT_EQ(ea, run_epoch(c));
}

TEST(DataLoader, WorkersGiveTheSameBatchesAsTheCallingThread) {
  auto ds = numbered(101);
  for (int64_t workers : {1, 2, 4}) {
    DataLoader serial(ds, {.batch_size = 7, .shuffle = true, .seed = 3});
    DataLoader parallel(ds, {.batch_size = 7, .shuffle = true, .num_workers = workers, .prefetch_factor = 2,
                             .seed = 3});
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto s = serial.epoch();
      auto p = parallel.epoch();
      int64_t count = 0;
      while (auto sb = s->next()) {
        auto pb = p->next();
        ASSERT_TRUE(pb.has_value());
        ASSERT_EQ(sb->size(), pb->size());
        for (size_t k = 0; k < sb->size(); ++k) {
          EXPECT_EQ((*sb)[k].sizes(), (*pb)[k].sizes());
          EXPECT_EQ((*sb)[k].dtype(), (*pb)[k].dtype());
          EXPECT_EQ(values((*sb)[k]), values((*pb)[k])) << "workers " << workers << " batch " << count;
        }
        ++count;
      }
      EXPECT_FALSE(p->next().has_value());
      EXPECT_EQ(count, 15);
    }
  }
}

// A dataset whose examples take a while and which counts concurrent get()s,
// to see that workers really run ahead and in parallel.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  TensorList get(int64_t index) const override {
    const int running = ++running_;
    int seen = max_running_.load();
    while (running > seen && !max_running_.compare_exchange_weak(seen, running)) {
    }
    ++calls_;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --running_;
    return {scalar_tensor(index, DType::Int64), scalar_tensor(index, DType::Int64)};
  }
  int max_running() const { return max_running_; }
  int calls() const { return calls_; }

 private:
  int64_t n_;
  mutable std::atomic<int> running_{0}, max_running_{0}, calls_{0};
};

TEST(DataLoader, WorkersRunConcurrentlyAndBoundedAhead) {
  auto ds = std::make_shared<SlowDataset>(200);
  DataLoader loader(ds, {.batch_size = 1, .num_workers = 3, .prefetch_factor = 2});
  auto epoch = loader.epoch();
  ASSERT_TRUE(epoch->next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One batch taken, at most 3 * 2 more built ahead.
  EXPECT_LE(ds->calls(), 1 + 6);
  EXPECT_GE(ds->calls(), 2);
  int64_t n = 1;
  while (epoch->next()) ++n;
  EXPECT_EQ(n, 200);
  EXPECT_GE(ds->max_running(), 2);
}

TEST(DataLoader, WorkerExceptionReachesTheConsumerOnItsBatch) {
  auto ds = std::make_shared<SquaresDataset>(20, 9);
  for (int64_t workers : {0, 1, 3}) {
    DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    auto epoch = loader.epoch();
    EXPECT_TRUE(epoch->next().has_value());  // 0..3
    EXPECT_TRUE(epoch->next().has_value());  // 4..7
    try {
      epoch->next();  // 8..11 holds the broken example 9
      ADD_FAILURE() << "expected a ValueError with " << workers << " workers";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("example 9 is broken"), std::string::npos);
    }
    auto after = epoch->next();  // the pass goes on after the failed batch
    ASSERT_TRUE(after.has_value());
    expect_values((*after)[1], {12, 13, 14, 15});
  }
}

TEST(DataLoader, RangeForRethrows) {
  DataLoader loader(std::make_shared<SquaresDataset>(10, 3), {.batch_size = 2, .num_workers = 2});
  auto consume = [&] {
    for (const TensorList& batch : loader) (void)batch;
  };
  EXPECT_THROW(consume(), ValueError);
}

TEST(DataLoader, EarlyBreakStopsWorkers) {
  auto ds = std::make_shared<SlowDataset>(10000);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 4, .prefetch_factor = 4});
  const auto start = std::chrono::steady_clock::now();
  for (int repeat = 0; repeat < 3; ++repeat) {
    int taken = 0;
    for (const TensorList& batch : loader) {
      (void)batch;
      if (++taken == 3) break;  // the iterator (and its workers) die here
    }
  }
  {
    auto epoch = loader.epoch();  // destroyed before its first batch is taken
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_LT(ds->calls(), 500);  // nowhere near the 10000 examples of a full pass
}

TEST(DataLoader, EpochsAreIndependent) {
  DataLoader loader(numbered(12), {.batch_size = 3, .num_workers = 2});
  auto first = loader.epoch();
  auto second = loader.epoch();
  EXPECT_EQ(labels_of(*first->next()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(labels_of(*second->next()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(labels_of(*first->next()), (std::vector<int64_t>{3, 4, 5}));
  first.reset();
  EXPECT_EQ(labels_of(*second->next()), (std::vector<int64_t>{3, 4, 5}));
}

TEST(DataLoader, SubsetAndOutliveLoader) {
  auto base = numbered(10);
  Generator gen(0);
  auto splits = random_split(base, {6, 4}, gen);
  std::unique_ptr<BatchIterator> epoch;
  {
    DataLoader loader(splits[1], {.batch_size = 3, .num_workers = 1});
    EXPECT_EQ(loader.size(), 2);
    epoch = loader.epoch();
  }
  std::vector<int64_t> seen = labels_of(*epoch->next());
  auto rest = labels_of(*epoch->next());
  seen.insert(seen.end(), rest.begin(), rest.end());
  EXPECT_EQ(seen, splits[1]->indices());
  EXPECT_FALSE(epoch->next().has_value());
}

TEST(DataLoader, BadOptions) {
  auto ds = numbered(4);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.num_workers = -1}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.num_workers = 1, .prefetch_factor = 0}), ValueError);
  EXPECT_THROW(DataLoader(nullptr), ValueError);
}

// --- FashionMNIST ---------------------------------------------------------------

TEST(FashionMNIST, TrainAndTestSets) {
  if (!std::filesystem::is_directory(FashionMNIST::kDefaultRoot))
    GTEST_SKIP() << FashionMNIST::kDefaultRoot << " is absent (Debian package dataset-fashion-mnist)";
  FashionMNIST train;
  FashionMNIST test(FashionMNIST::kDefaultRoot, false);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().sizes(), Shape({60000, 1, 28, 28}));
  EXPECT_EQ(train.images().dtype(), DType::Float32);
  EXPECT_EQ(train.labels().dtype(), DType::Int64);
  for (const FashionMNIST* ds : {&train, &test}) {
    EXPECT_EQ(amin(ds->labels()).item<int64_t>(), 0);
    EXPECT_EQ(amax(ds->labels()).item<int64_t>(), 9);
    EXPECT_GE(amin(ds->images()).item<double>(), 0.0);
    EXPECT_LE(amax(ds->images()).item<double>(), 1.0);
    EXPECT_GT(amax(ds->images()).item<double>(), 0.99);
  }
  // Classes are balanced: 6000 training examples each.
  std::vector<int64_t> counts(10, 0);
  for (double v : values(train.labels())) counts[size_t(v)]++;
  EXPECT_EQ(counts, std::vector<int64_t>(10, 6000));
  // Pixels are multiples of 1/255.
  for (double v : values(train.get(0)[0])) EXPECT_NEAR(v * 255.0, std::round(v * 255.0), 1e-4);
  TensorList batch = train.get_batch({5, 0});
  EXPECT_EQ(batch[0].sizes(), Shape({2, 1, 28, 28}));
  EXPECT_EQ(values(select(batch[0], 0, 0)), values(train.get(5)[0]));
  EXPECT_EQ(values(batch[1])[1], double(train.get(0)[1].item<int64_t>()));
}

TEST(FashionMNIST, MissingFolderNamesTheFileAndPackage) {
  try {
    FashionMNIST ds("/nonexistent/fashion-mnist");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train-images-idx3-ubyte"), std::string::npos) << what;
    EXPECT_NE(what.find("dataset-fashion-mnist"), std::string::npos) << what;
  }
}

// --- TextDataset ------------------------------------------------------------------

class TextFile {
 public:
  explicit TextFile(const std::string& contents, const std::string& name = "text.txt") {
    dir_ = std::filesystem::temp_directory_path() /
           ("mf_text_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    write(name, contents);
  }
  ~TextFile() { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& contents) const {
    std::ofstream(dir_ / name, std::ios::binary) << contents;
  }
  std::string path(const std::string& name = "text.txt") const { return (dir_ / name).string(); }
  std::string dir() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

TEST(TextDataset, ByteModeShiftsByOne) {
  TextFile file("hello world");
  TextDataset ds(file.path(), 4, "byte");
  EXPECT_EQ(ds.vocab_size(), 256);
  EXPECT_EQ(ds.size(), 11 - 4);
  TensorList ex = ds.get(2);
  EXPECT_EQ(ds.decode(ex[0]), "llo ");
  EXPECT_EQ(ds.decode(ex[1]), "lo w");
  expect_values(ex[0], {'l', 'l', 'o', ' '});
  TensorList batch = ds.get_batch({6, 0});
  EXPECT_EQ(batch[0].sizes(), Shape({2, 4}));
  EXPECT_EQ(batch[0].dtype(), DType::Int64);
  EXPECT_EQ(ds.decode(batch[0]), "worlhell");
  EXPECT_EQ(ds.decode(batch[1]), "orldello");
  EXPECT_EQ(ds.decode(ds.encode("any bytes \xff")), "any bytes \xff");
  EXPECT_THROW(ds.get(7), IndexError);
}

TEST(TextDataset, CharModeVocabulary) {
  const std::string text = "naïve café — ☃ 𝄞 abc";
  TextFile file(text);
  TextDataset ds(file.path(), 3);
  // Distinct code points sorted: ' ', 'a', 'b', 'c', 'e', 'f', 'n', 'v', 'é', 'ï', '—', '☃', '𝄞'.
  EXPECT_EQ(ds.vocab_size(), 13);
  expect_values(ds.encode(" abc"), {0, 1, 2, 3});
  expect_values(ds.encode("é𝄞☃"), {8, 12, 11});
  EXPECT_EQ(ds.decode(ds.encode(text)), text);
  EXPECT_EQ(ds.tokens().numel(), 20);
  EXPECT_EQ(ds.size(), 17);
  TensorList ex = ds.get(0);
  EXPECT_EQ(ds.decode(ex[0]), "naï");
  EXPECT_EQ(ds.decode(ex[1]), "aïv");
  TensorList batch = ds.get_batch({0, 16});
  EXPECT_EQ(ds.decode(select(batch[0], 0, 1)), " ab");
  EXPECT_EQ(ds.decode(select(batch[1], 0, 1)), "abc");
  EXPECT_EQ(values(select(batch[0], 0, 0)), values(ex[0]));
  EXPECT_THROW(ds.encode("z"), ValueError);
  EXPECT_THROW(ds.encode("\xc3"), ValueError);  // truncated UTF-8
  EXPECT_THROW(ds.decode(from_data(std::vector<int64_t>{13}, {1})), IndexError);
  EXPECT_THROW(ds.decode(zeros({2})), TypeError);
}

TEST(TextDataset, DirectoryConcatenatesTextFilesInNameOrder) {
  TextFile files("second ", "b");
  files.write("a", "first ");
  files.write("c", "third");
  files.write("a.dat", "index");
  files.write("b.u8", "link");
  files.write("bin", std::string("bi\0nary", 7));
  TextDataset ds(files.dir(), 2, "byte");
  EXPECT_EQ(ds.decode(ds.tokens()), "first second third");
}

TEST(TextDataset, BadInput) {
  TextFile file("abc");
  EXPECT_THROW(TextDataset(file.path(), 3), ValueError);  // 3 tokens cannot fill x and y
  EXPECT_NO_THROW(TextDataset(file.path(), 2));
  EXPECT_THROW(TextDataset(file.path(), 0), ValueError);
  EXPECT_THROW(TextDataset(file.path(), 1, "word"), ValueError);
  EXPECT_THROW(TextDataset(file.path("missing.txt"), 1), Error);
  TextFile latin1("caf\xe9 au lait");
  EXPECT_THROW(TextDataset(latin1.path(), 2, "char"), ValueError);
  EXPECT_NO_THROW(TextDataset(latin1.path(), 2, "byte"));
}

TEST(TextDataset, LoaderBatchesMatchGet) {
  TextFile file("the quick brown fox jumps over the lazy dog");
  auto ds = std::make_shared<TextDataset>(file.path(), 5);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .num_workers = 2, .seed = 1});
  int64_t examples = 0;
  for (const TensorList& batch : loader) {
    EXPECT_EQ(batch[0].size(1), 5);
    for (int64_t b = 0; b < batch[0].size(0); ++b) {
      // y is x shifted by one: x[1:] == y[:-1].
      EXPECT_EQ(values(slice(select(batch[0], 0, b), 0, 1)), values(slice(select(batch[1], 0, b), 0, 0, 4)));
      ++examples;
    }
  }
  EXPECT_EQ(examples, ds->size());
}

}  // namespace
}  // namespace mf::data
