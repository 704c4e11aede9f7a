// Trains a 784-256-128-10 MLP on Fashion-MNIST with the meshflow C++ API:
// mf::nn layers, mf::data's FashionMNIST and DataLoader (shuffled, batches
// prepared on a worker thread), SGD with momentum, cross entropy, per-epoch
// loss, accuracy and time.
//
//   fashion_mnist [--epochs 5] [--batch-size 128] [--lr 0.05] [--momentum 0.9]
//                     [--train-limit N] [--test-limit N] [--threads 2] [--seed 0]
//                     [--data-dir /usr/share/datasets/fashion-mnist]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "meshflow/data.h"
#include "meshflow/meshflow.h"
#include "meshflow/nn.h"
#include "meshflow/optim.h"

namespace {

struct Options {
  int epochs = 5;
  int64_t batch_size = 128;
  double lr = 0.05;
  double momentum = 0.9;
  int64_t train_limit = 0;  // 0: all 60000
  int64_t test_limit = 0;   // 0: all 10000
  int threads = 2;
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};

Options parse(int argc, char** argv) {
  Options o;
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--epochs N] [--batch-size N] [--lr X] [--momentum X] [--train-limit N] "
                   "[--test-limit N] [--threads N] [--seed N] [--data-dir DIR]\n", argv[0]);
      std::exit(2);
    }
    args[key.substr(2)] = argv[++i];
  }
  for (const auto& [k, v] : args) {
    if (k == "epochs") o.epochs = std::stoi(v);
    else if (k == "batch-size") o.batch_size = std::stoll(v);
    else if (k == "lr") o.lr = std::stod(v);
    else if (k == "momentum") o.momentum = std::stod(v);
    else if (k == "train-limit") o.train_limit = std::stoll(v);
    else if (k == "test-limit") o.test_limit = std::stoll(v);
    else if (k == "threads") o.threads = std::stoi(v);
    else if (k == "seed") o.seed = std::stoull(v);
    else if (k == "data-dir") o.data_dir = v;
    else {
      std::fprintf(stderr, "unknown option --%s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The first `limit` examples (all when 0).
std::shared_ptr<const mf::data::Dataset> limited(std::shared_ptr<const mf::data::Dataset> d, int64_t limit) {
  if (limit <= 0 || limit >= d->size()) return d;
  std::vector<int64_t> indices(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) indices[size_t(i)] = i;
  return std::make_shared<mf::data::Subset>(d, std::move(indices));
}

// 784-256-128-10 with ReLU, from the layers of mf::nn.
std::shared_ptr<mf::nn::Sequential> make_mlp() {
  using namespace mf::nn;
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(),
      std::make_shared<Linear>(256, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
}

double accuracy(mf::nn::Module& model, mf::data::DataLoader& loader) {
  mf::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, n = 0;
  for (const mf::TensorList& batch : loader) {
    mf::Tensor pred = mf::argmax(model(batch[0]), 1);
    correct += mf::sum(mf::eq(pred, batch[1])).item<int64_t>();
    n += batch[1].size(0);
  }
  model.train();
  return double(correct) / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  try {
    mf::set_num_threads(opt.threads);
    mf::manual_seed(opt.seed);
    auto train_set = limited(std::make_shared<mf::data::FashionMNIST>(opt.data_dir, true), opt.train_limit);
    auto test_set = limited(std::make_shared<mf::data::FashionMNIST>(opt.data_dir, false), opt.test_limit);
    mf::data::DataLoader train_loader(
        train_set, {.batch_size = opt.batch_size, .shuffle = true, .drop_last = true, .num_workers = 1, .seed = opt.seed});
    mf::data::DataLoader test_loader(test_set, {.batch_size = 1000});
    std::printf("Fashion-MNIST MLP: %lld train / %lld test images, batch %lld, %d threads\n",
                (long long)train_set->size(), (long long)test_set->size(), (long long)opt.batch_size, opt.threads);
    auto model = make_mlp();
    mf::optim::SGD optimizer(model->parameters(), {.lr = opt.lr, .momentum = opt.momentum});
    for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t batches = 0;
      for (const mf::TensorList& batch : train_loader) {
        mf::Tensor loss = mf::cross_entropy((*model)(batch[0]), batch[1]);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        loss_sum += loss.item<double>();
        batches++;
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double acc = accuracy(*model, test_loader);
      std::printf("epoch %d  loss %.4f  test accuracy %.2f%%  time %.1f s\n", epoch,
                  loss_sum / double(std::max<int64_t>(batches, 1)), 100.0 * acc, secs);
      std::fflush(stdout);
    }
  } catch (const mf::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
