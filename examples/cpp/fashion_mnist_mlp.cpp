// Trains a 784-256-128-10 MLP on Fashion-MNIST with the meshflow C++ API:
// SGD with momentum, cross entropy, per-epoch loss, accuracy and time.
//
//   fashion_mnist_mlp [--epochs 5] [--batch-size 128] [--lr 0.05] [--momentum 0.9]
//                     [--train-limit N] [--test-limit N] [--threads 2] [--seed 0]
//                     [--data-dir /usr/share/datasets/fashion-mnist]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "meshflow/data/idx.h"
#include "meshflow/meshflow.h"
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

// Images as float32 (N, 784) in [0, 1], labels as int64 (N).
struct Split {
  mf::Tensor images, labels;
};

Split load(const std::string& dir, const std::string& prefix, int64_t limit) {
  mf::Tensor images = mf::data::read_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  mf::Tensor labels = mf::data::read_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  int64_t n = images.size(0);
  if (limit > 0 && limit < n) n = limit;
  images = mf::div(mf::to(mf::reshape(mf::narrow(images, 0, 0, n), {n, 784}), mf::kFloat32), 255.0);
  labels = mf::to(mf::narrow(labels, 0, 0, n), mf::kInt64);
  return {mf::contiguous(images), mf::contiguous(labels)};
}

// PyTorch's default Linear initialisation: U(-1/sqrt(in), 1/sqrt(in)).
struct Linear {
  mf::Tensor weight, bias;
  Linear(int64_t in, int64_t out) {
    double bound = 1.0 / std::sqrt(double(in));
    weight = mf::empty({out, in});
    bias = mf::empty({out});
    mf::uniform_(weight, -bound, bound);
    mf::uniform_(bias, -bound, bound);
    weight.requires_grad_();
    bias.requires_grad_();
  }
  mf::Tensor operator()(const mf::Tensor& x) const { return mf::linear(x, weight, bias); }
};

struct Mlp {
  Linear fc1{784, 256}, fc2{256, 128}, fc3{128, 10};
  mf::Tensor operator()(const mf::Tensor& x) const {  // x (B, 784) -> logits (B, 10)
    mf::Tensor h = mf::relu(fc1(x));
    h = mf::relu(fc2(h));
    return fc3(h);
  }
  mf::TensorList parameters() const {
    return {fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias};
  }
};

double accuracy(const Mlp& model, const Split& data, int64_t batch) {
  mf::NoGradGuard no_grad;
  int64_t correct = 0, n = data.images.size(0);
  for (int64_t i = 0; i < n; i += batch) {
    int64_t b = std::min(batch, n - i);
    mf::Tensor logits = model(mf::narrow(data.images, 0, i, b));
    mf::Tensor pred = mf::argmax(logits, 1);
    correct += mf::sum(mf::eq(pred, mf::narrow(data.labels, 0, i, b))).item<int64_t>();
  }
  return double(correct) / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  try {
    mf::set_num_threads(opt.threads);
    mf::manual_seed(opt.seed);
    Split train = load(opt.data_dir, "train", opt.train_limit);
    Split test = load(opt.data_dir, "t10k", opt.test_limit);
    const int64_t n = train.images.size(0);
    std::printf("Fashion-MNIST MLP: %lld train / %lld test images, batch %lld, %d threads\n",
                (long long)n, (long long)test.images.size(0), (long long)opt.batch_size, opt.threads);
    Mlp model;
    mf::optim::SGD optimizer(model.parameters(), {.lr = opt.lr, .momentum = opt.momentum});
    for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
      auto t0 = std::chrono::steady_clock::now();
      mf::Tensor order = mf::randperm(n);
      double loss_sum = 0;
      int64_t batches = 0;
      for (int64_t i = 0; i + opt.batch_size <= n; i += opt.batch_size) {
        mf::Tensor idx = mf::narrow(order, 0, i, opt.batch_size);
        mf::Tensor x = mf::index_select(train.images, 0, idx);  // (B, 784)
        mf::Tensor y = mf::index_select(train.labels, 0, idx);  // (B)
        mf::Tensor loss = mf::cross_entropy(model(x), y);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        loss_sum += loss.item<double>();
        batches++;
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double acc = accuracy(model, test, 1000);
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
