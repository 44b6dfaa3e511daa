#pragma once
//! MNIST from its four raw IDX files (scripts/fetch-mnist.sh downloads them).
//!   auto m = strata::data::load_mnist(strata::data::default_mnist_dir());
//!   auto ds = strata::data::from_tensor_slices(m.train_images, m.train_labels);

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/data/idx.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

//! The MNIST training (60000) and test (10000) sets: images [N, 28, 28] with
//! pixels scaled to [0, 1], labels [N] in 0..9.
//!   strata::data::Mnist m = strata::data::load_mnist(dir);
//!   float px = m.train_images(0, 14, 14);  int digit = m.train_labels(0);
struct Mnist {
  Tensor<float> train_images, test_images;
  Tensor<std::int32_t> train_labels, test_labels;
};

//! Where MNIST is cached: $STRATA_MNIST_DIR if set, else
//! $XDG_CACHE_HOME/strata/mnist, else $HOME/.cache/strata/mnist (the rule
//! scripts/fetch-mnist.sh follows too).
//!   auto dir = strata::data::default_mnist_dir();
//!   bool have = std::filesystem::exists(dir / "train-images-idx3-ubyte");
inline std::filesystem::path default_mnist_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (auto d = env("STRATA_MNIST_DIR"); !d.empty()) return d;
  if (auto d = env("XDG_CACHE_HOME"); !d.empty()) return std::filesystem::path(d) / "strata" / "mnist";
  if (auto d = env("HOME"); !d.empty()) return std::filesystem::path(d) / ".cache" / "strata" / "mnist";
  throw Error("default_mnist_dir: none of STRATA_MNIST_DIR, XDG_CACHE_HOME or HOME is set; set STRATA_MNIST_DIR "
              "to the directory that holds (or should hold) the MNIST files");
}

namespace detail {

inline IdxArray read_mnist_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // the files as published (yann.lecun.com, most mirrors) are gzipped: say how to get the raw ones
    if (auto gz = path; std::filesystem::exists(gz += ".gz", ec))
      throw Error("load_mnist: " + path.string() + " does not exist, but " + gz.string() +
                  " does: decompress it (gunzip -k " + (path.parent_path() / "*.gz").string() +
                  "; load_mnist reads raw IDX), or run scripts/fetch-mnist.sh " + path.parent_path().string() +
                  " (it decompresses and checks them)");
    throw Error("load_mnist: " + path.string() + " does not exist; run scripts/fetch-mnist.sh " +
                path.parent_path().string() + " to download MNIST there (or point STRATA_MNIST_DIR at a copy)");
  }
  return read_idx(path);
}

//! One split: images and labels, checked against each other.
inline std::pair<Tensor<float>, Tensor<std::int32_t>> load_mnist_split(const std::filesystem::path& dir,
                                                                      const char* images_name,
                                                                      const char* labels_name) {
  const auto ipath = dir / images_name, lpath = dir / labels_name;
  const IdxArray images = read_mnist_file(ipath);
  if (images.type_code != IdxType::u8 || images.dims.size() != 3 || images.dims[1] != 28 || images.dims[2] != 28)
    throw Error("load_mnist: " + ipath.string() + " holds " + idx_type_name(images.type_code) + " of shape " +
                dims_str(images.dims) + "; expected MNIST images: u8 (0x08) of shape [N, 28, 28]");
  const IdxArray labels = read_mnist_file(lpath);
  if (labels.type_code != IdxType::u8 || labels.dims.size() != 1)
    throw Error("load_mnist: " + lpath.string() + " holds " + idx_type_name(labels.type_code) + " of shape " +
                dims_str(labels.dims) + "; expected MNIST labels: u8 (0x08) of shape [N]");
  if (labels.dims[0] != images.dims[0])
    throw Error("load_mnist: " + ipath.string() + " holds " + std::to_string(images.dims[0]) + " images but " +
                lpath.string() + " holds " + std::to_string(labels.dims[0]) +
                " labels; the two files must come from the same split");
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] > 9)
      throw Error("load_mnist: " + lpath.string() + ": label " + std::to_string(labels.data[i]) + " at index " +
                  std::to_string(i) + " is outside 0..9 (a corrupt file? fetch it again)");
  return {idx_to_float(images, 1.0f / 255.0f), idx_to_int32(labels)};
}

}  // namespace detail

//! Loads the four standard MNIST files from `dir` (train-images-idx3-ubyte,
//! train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte;
//! raw IDX, not gzipped). Throws strata::Error naming the file at fault.
//!   auto m = strata::data::load_mnist(strata::data::default_mnist_dir());
//!   std::size_t n = m.train_images.shape()[0];   // 60000
inline Mnist load_mnist(const std::filesystem::path& dir) {
  Mnist m;
  std::tie(m.train_images, m.train_labels) =
      detail::load_mnist_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
  std::tie(m.test_images, m.test_labels) =
      detail::load_mnist_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
  return m;
}

}  // namespace strata::data
