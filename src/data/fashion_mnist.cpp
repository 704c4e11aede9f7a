// Fashion-MNIST from its four IDX files.
#include "meshflow/data/fashion_mnist.h"

#include <filesystem>

#include "meshflow/data/idx.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::data {
namespace {

// root/name.gz, else root/name; an Error naming both when neither exists.
std::string find_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path compressed = fs::path(root) / (name + ".gz");
  const fs::path plain = fs::path(root) / name;
  if (fs::is_regular_file(compressed)) return compressed.string();
  if (fs::is_regular_file(plain)) return plain.string();
  throw Error(detail::concat("FashionMNIST: missing file ", compressed.string(), " (or ", plain.string(), ")",
                             fs::is_directory(root) ? "" : "; the folder itself does not exist",
                             ". Debian's package dataset-fashion-mnist provides it (apt install "
                             "dataset-fashion-mnist), or pass root= the folder holding the files"));
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, bool train) : train_(train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  MF_CHECK(images.dtype() == DType::UInt8 && images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28, Error,
           "FashionMNIST: ", images_path, " should hold uint8 images of shape (N, 28, 28), got ",
           dtype_name(images.dtype()), " ", shape_str(images.sizes()));
  MF_CHECK(labels.dtype() == DType::UInt8 && labels.dim() == 1 && labels.size(0) == images.size(0), Error,
           "FashionMNIST: ", labels_path, " should hold ", images.size(0), " uint8 labels, got ",
           dtype_name(labels.dtype()), " ", shape_str(labels.sizes()));
  images_ = reshape(div(to(images, DType::Float32), 255.0), {images.size(0), 1, 28, 28});
  labels_ = to(labels, DType::Int64);
}

TensorList FashionMNIST::get(int64_t index) const {
  check_index("FashionMNIST", index, size());
  return {select(images_, 0, index), select(labels_, 0, index)};
}

TensorList FashionMNIST::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_index("FashionMNIST", index, size());
  Tensor rows = from_data(indices, {int64_t(indices.size())});
  return {index_select(images_, 0, rows), index_select(labels_, 0, rows)};
}

}  // namespace mf::data
