#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/data/idx.hpp>
#include <strata/data/mnist.hpp>

namespace idx_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace fs = std::filesystem;
using strata::Shape;
using strata::Tensor;
using namespace strata::data;
using Bytes = std::vector<unsigned char>;

namespace {

//! A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("strata_idx_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(f.good());
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

//! Appends v big-endian in `n` bytes.
void put_be(Bytes& b, std::uint64_t v, int n) {
  for (int s = 8 * (n - 1); s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

//! A header: magic then big-endian u32 extents.
Bytes header(unsigned char type, std::vector<std::uint32_t> dims, std::optional<unsigned char> rank = {}) {
  Bytes b{0, 0, type, rank.value_or(static_cast<unsigned char>(dims.size()))};
  for (auto d : dims) put_be(b, d, 4);
  return b;
}

std::string error_of(const fs::path& p) {
  try {
    (void)read_idx(p);
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "(no error)";
}

//! Writes a small MNIST-shaped split: n images of 28x28 and n labels.
void write_mnist_split(const fs::path& dir, const std::string& prefix, std::size_t n_images, const Bytes& labels,
                       std::vector<std::size_t> image_dims = {}) {
  if (image_dims.empty()) image_dims = {n_images, 28, 28};
  std::size_t px = 1;
  for (auto d : image_dims) px *= d;
  Bytes images(px);
  for (std::size_t i = 0; i < px; ++i) images[i] = static_cast<unsigned char>(i % 256);
  write_idx(dir / (prefix + "-images-idx3-ubyte"), IdxType::u8, image_dims, images);
  write_idx(dir / (prefix + "-labels-idx1-ubyte"), IdxType::u8, {labels.size()}, labels);
}

std::string load_error(const fs::path& dir) {
  try {
    (void)load_mnist(dir);
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("idx: u8 round trip and conversions") {
  TempDir tmp;
  const auto p = tmp / "a-idx3-ubyte";
  Bytes data(2 * 3 * 4);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 10);
  write_idx(p, IdxType::u8, {2, 3, 4}, data);

  Bytes want = header(0x08, {2, 3, 4});
  want.insert(want.end(), data.begin(), data.end());
  CHECK(read_bytes(p) == want);  // the exact layout: magic 00 00 08 03, big-endian extents

  IdxArray a = read_idx(p);
  CHECK(a.type_code == IdxType::u8);
  CHECK(a.dims == std::vector<std::size_t>{2, 3, 4});
  CHECK(a.data == data);

  Tensor<float> f = idx_to_float(a, 0.5f);
  CHECK(f.shape() == Shape{2, 3, 4});
  CHECK(f(1, 2, 3) == 0.5f * 230);
  Tensor<std::int32_t> i = idx_to_int32(a);
  CHECK(i(0, 1, 0) == 40);
  CHECK(i[23] == 230);

  CHECK(idx_to_float(a, 1.0f / 255)[0] == 0.f);
  IdxArray white{IdxType::u8, {1}, {255}};
  CHECK(idx_to_float(white, 1.0f / 255)[0] == 1.f);
}

TEST_CASE("idx: i32 and f32 round trips are big-endian") {
  TempDir tmp;
  Bytes i32;
  const std::int32_t ints[] = {1, -2, 70000, -2147483647 - 1, 2147483647, 0};
  for (auto v : ints) put_be(i32, static_cast<std::uint32_t>(v), 4);
  write_idx(tmp / "i", IdxType::i32, {3, 2}, i32);
  const Bytes raw = read_bytes(tmp / "i");
  CHECK(raw.size() == 12 + 24);
  CHECK(Bytes(raw.begin() + 12, raw.begin() + 20) == Bytes{0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE});
  IdxArray a = read_idx(tmp / "i");
  CHECK(a.type_code == IdxType::i32);
  CHECK(a.dims == std::vector<std::size_t>{3, 2});
  auto t = idx_to_int32(a);
  CHECK(t == Tensor<std::int32_t>{{3, 2}, {1, -2, 70000, -2147483647 - 1, 2147483647, 0}});
  CHECK(idx_to_float(a, 2.f)(0, 1) == -4.f);

  Bytes f32;
  const float floats[] = {-1.5f, 3.25f, 1e-3f, 0.f};
  for (auto v : floats) put_be(f32, std::bit_cast<std::uint32_t>(v), 4);
  write_idx(tmp / "f", IdxType::f32, {4}, f32);
  IdxArray b = read_idx(tmp / "f");
  CHECK(b.type_code == IdxType::f32);
  CHECK(idx_to_float(b, 1.f) == Tensor<float>{{4}, {-1.5f, 3.25f, 1e-3f, 0.f}});
  CHECK(idx_to_float(b, 2.f)[0] == -3.f);
  CHECK_THROWS_WITH_AS(idx_to_int32(b), doctest::Contains("floating-point values, not integers; use idx_to_float"),
                       strata::Error);
}

TEST_CASE("idx: i8, i16 and f64 convert with their sign and precision") {
  TempDir tmp;
  write_idx(tmp / "b", IdxType::i8, {3}, Bytes{0x80, 0xFF, 0x7F});
  CHECK(idx_to_int32(read_idx(tmp / "b")) == Tensor<std::int32_t>{{3}, {-128, -1, 127}});

  Bytes s;
  put_be(s, 0x8000, 2);
  put_be(s, 0x0102, 2);
  write_idx(tmp / "s", IdxType::i16, {1, 1, 1, 2}, s);
  auto a = read_idx(tmp / "s");
  CHECK(a.dims.size() == 4);
  CHECK(idx_to_int32(a) == Tensor<std::int32_t>{{1, 1, 1, 2}, {-32768, 258}});

  Bytes d;
  put_be(d, std::bit_cast<std::uint64_t>(-0.1), 8);
  write_idx(tmp / "d", IdxType::f64, {1}, d);
  CHECK(idx_to_float(read_idx(tmp / "d"), 10.f)[0] == -1.f);

  // A hand-built array must agree with its dims.
  IdxArray bad{IdxType::i16, {2}, {0, 1, 2}};
  CHECK_THROWS_WITH_AS(idx_to_int32(bad), doctest::Contains("need 4 bytes but the array holds 3"), strata::ShapeError);
}

TEST_CASE("idx: read_idx reports each corruption") {
  TempDir tmp;
  const auto p = tmp / "x-idx1-ubyte";

  SUBCASE("missing file") {
    const std::string e = error_of(tmp / "nope");
    CHECK(e.find((tmp / "nope").string()) != std::string::npos);
    CHECK(e.find("cannot open: No such file or directory") != std::string::npos);
    CHECK_THROWS_AS(read_idx(tmp / "nope"), strata::Error);
  }
  SUBCASE("a directory") {
    const std::string dir = tmp.path().string();
    CHECK_THROWS_WITH_AS(read_idx(tmp.path()), doctest::Contains(dir.c_str()), strata::Error);
    CHECK(error_of(tmp.path()).find(": is a directory, not an IDX file") != std::string::npos);
    fs::create_symlink(tmp.path(), tmp / "link");  // followed: still a directory
    CHECK(error_of(tmp / "link").find("is a directory") != std::string::npos);
  }
  SUBCASE("a pipe is refused without blocking on it") {
    REQUIRE(::mkfifo((tmp / "fifo").c_str(), 0600) == 0);
    const std::string e = error_of(tmp / "fifo");  // fopen of a FIFO with no writer would never return
    CHECK(e.find((tmp / "fifo").string()) != std::string::npos);
    CHECK(e.find("is not a regular file (a device, pipe or socket)") != std::string::npos);
  }
  SUBCASE("a device") { CHECK(error_of("/dev/zero").find("read_idx: /dev/zero: is not a regular file") == 0); }
  SUBCASE("a dangling link and a path through a file") {
    fs::create_symlink(tmp / "gone", tmp / "dangling");
    CHECK(error_of(tmp / "dangling").find("cannot open: No such file or directory") != std::string::npos);
    write_bytes(p, header(0x08, {0}));
    CHECK(error_of(p / "child").find("cannot open: Not a directory") != std::string::npos);  // no filesystem_error
  }
  SUBCASE("an unreadable file") {
    write_bytes(p, header(0x08, {0}));
    fs::permissions(p, fs::perms::none);
    if (::geteuid() == 0) {  // root reads it anyway: then it must read as the valid file it is
      CHECK(read_idx(p).dims == std::vector<std::size_t>{0});
    } else {
      CHECK(error_of(p).find("cannot open: Permission denied") != std::string::npos);
    }
  }
  SUBCASE("empty file") {
    write_bytes(p, {});
    CHECK(error_of(p).find("is 0 bytes, too short for an IDX file") != std::string::npos);
  }
  SUBCASE("bad magic") {
    write_bytes(p, Bytes{0x01, 0x00, 0x08, 0x01, 0, 0, 0, 1, 5});
    const std::string e = error_of(p);
    CHECK(e.find(p.string()) != std::string::npos);
    CHECK(e.find("not an IDX file: it starts with bytes 0x01 0x00, expected 0x00 0x00") != std::string::npos);
  }
  SUBCASE("gzip is recognised") {
    write_bytes(p, Bytes{0x1F, 0x8B, 0x08, 0x00, 1, 2, 3});
    CHECK(error_of(p).find("gunzip it first") != std::string::npos);
  }
  SUBCASE("unknown type code") {
    Bytes b = header(0x07, {1});
    b.push_back(0);
    write_bytes(p, b);
    CHECK(error_of(p).find("unknown IDX type code 0x07; expected 0x08 (u8)") != std::string::npos);
  }
  SUBCASE("rank 0") {
    write_bytes(p, header(0x08, {}, 0));
    CHECK(error_of(p).find("IDX rank 0 is not supported; expected 1 to 4 dimensions") != std::string::npos);
  }
  SUBCASE("rank 5") {
    Bytes b = header(0x08, {1, 1, 1, 1, 1});
    b.push_back(0);
    write_bytes(p, b);
    CHECK(error_of(p).find("IDX rank 5 is not supported") != std::string::npos);
  }
  SUBCASE("header cut short") {
    Bytes b = header(0x08, {3, 2}, 3);  // promises 3 extents, has 2
    write_bytes(p, b);
    CHECK(error_of(p).find("is 12 bytes, shorter than its own header (16 bytes for rank 3)") != std::string::npos);
  }
  SUBCASE("truncated data") {
    Bytes b = header(0x0C, {3, 2});
    b.resize(b.size() + 20);  // 24 needed
    write_bytes(p, b);
    const std::string e = error_of(p);
    CHECK(e.find(p.string()) != std::string::npos);
    CHECK(e.find("promises dims [3, 2] of i32 (0x0C) = 24 data bytes, but 20 bytes follow the 12-byte header "
                 "(truncated: 4 bytes missing)") != std::string::npos);
  }
  SUBCASE("trailing bytes") {
    Bytes b = header(0x08, {4});
    b.resize(b.size() + 7);
    write_bytes(p, b);
    CHECK(error_of(p).find("= 4 data bytes, but 7 bytes follow the 8-byte header (3 trailing bytes)") !=
          std::string::npos);
  }
  SUBCASE("dims that overflow") {
    write_bytes(p, header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}));
    CHECK(error_of(p).find("more bytes than fit in memory") != std::string::npos);
  }
  SUBCASE("dims whose product wraps to zero") {  // 2^64 bytes of u8: unchecked, it would wrap to an empty array
    write_bytes(p, header(0x08, {0x10000, 0x10000, 0x10000, 0x10000}));
    CHECK(error_of(p).find("declares dims [65536, 65536, 65536, 65536] of u8 (0x08), more bytes than fit") !=
          std::string::npos);
  }
  SUBCASE("dims larger than the file") {
    Bytes b = header(0x08, {60000, 28, 28});
    b.resize(b.size() + 100);
    write_bytes(p, b);
    CHECK(error_of(p).find("= 47040000 data bytes, but 100 bytes follow the 16-byte header (truncated: 47039900 "
                           "bytes missing)") != std::string::npos);
  }
}

TEST_CASE("idx: read_idx_bytes parses memory with the checks of read_idx") {
  TempDir tmp;
  Bytes file = header(0x0B, {2, 1});
  put_be(file, 0xFFFE, 2);
  put_be(file, 0x0007, 2);
  write_bytes(tmp / "s", file);
  const IdxArray from_file = read_idx(tmp / "s");
  const IdxArray from_bytes = read_idx_bytes(file);
  CHECK(from_bytes.type_code == from_file.type_code);
  CHECK(from_bytes.dims == from_file.dims);
  CHECK(from_bytes.data == from_file.data);
  CHECK(idx_to_int32(from_bytes) == Tensor<std::int32_t>{{2, 1}, {-2, 7}});

  const auto error = [](const Bytes& b) {
    try {
      (void)read_idx_bytes(b, "the upload");
    } catch (const strata::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error({}) == "read_idx: the upload: is 0 bytes, too short for an IDX file (its magic number alone is 4 bytes)");
  CHECK(error({0, 0, 0x08}).find("is 3 bytes, too short") != std::string::npos);
  CHECK(error({0, 1, 0x08, 1, 0, 0, 0, 0}).find("not an IDX file: it starts with bytes 0x00 0x01") != std::string::npos);
  CHECK(error({0, 0, 0x0A, 1, 0, 0, 0, 0}).find("unknown IDX type code 0x0A") != std::string::npos);
  CHECK(error({0, 0, 0x08, 9, 0, 0, 0, 0}).find("IDX rank 9 is not supported") != std::string::npos);
  CHECK(error({0, 0, 0x08, 2, 0, 0, 0, 1}).find("is 8 bytes, shorter than its own header (12 bytes for rank 2)") !=
        std::string::npos);
  Bytes cut = file;
  cut.pop_back();
  CHECK(error(cut).find("(truncated: 1 bytes missing)") != std::string::npos);
  CHECK(error(header(0x08, {0x10000, 0x10000, 0x10000, 0x10000})).find("more bytes than fit in memory") !=
        std::string::npos);
  CHECK(read_idx_bytes(header(0x0D, {0, 3})).dims == std::vector<std::size_t>{0, 3});
}

TEST_CASE("idx: write_idx checks its arguments") {
  TempDir tmp;
  CHECK_THROWS_WITH_AS(write_idx(tmp / "a", IdxType::u8, {2, 2}, Bytes(3)),
                       doctest::Contains("dims [2, 2] of u8 (0x08) need 4 bytes but 3 were given"), strata::Error);
  CHECK_THROWS_WITH(write_idx(tmp / "a", 0x42, {1}, Bytes(1)), doctest::Contains("unknown IDX type code 0x42"));
  CHECK_THROWS_WITH(write_idx(tmp / "a", IdxType::u8, {}, Bytes(1)), doctest::Contains("IDX rank 0"));
  CHECK_THROWS_WITH(write_idx(tmp / "a", IdxType::u8, {std::size_t{1} << 33}, Bytes(1)),
                    doctest::Contains("does not fit the format's 32-bit extents"));
  CHECK_THROWS_WITH(write_idx(tmp / "no" / "such" / "dir", IdxType::u8, {1}, Bytes(1)),
                    doctest::Contains("cannot create: No such file or directory"));
  CHECK_FALSE(fs::exists(tmp / "a"));
  write_idx(tmp / "empty", IdxType::f32, {0, 5}, {});
  auto e = read_idx(tmp / "empty");
  CHECK(e.dims == std::vector<std::size_t>{0, 5});
  CHECK(idx_to_float(e, 1.f).shape() == Shape{0, 5});
}

TEST_CASE("mnist: load_mnist reads and checks the four files") {
  TempDir tmp;
  SUBCASE("a small valid set") {
    write_mnist_split(tmp.path(), "train", 3, {5, 0, 9});
    write_mnist_split(tmp.path(), "t10k", 2, {7, 2});
    Mnist m = load_mnist(tmp.path());
    CHECK(m.train_images.shape() == Shape{3, 28, 28});
    CHECK(m.test_images.shape() == Shape{2, 28, 28});
    CHECK(m.train_labels == Tensor<std::int32_t>{{3}, {5, 0, 9}});
    CHECK(m.test_labels == Tensor<std::int32_t>{{2}, {7, 2}});
    CHECK(m.train_images(0, 0, 1) == 1.0f / 255.0f);
    CHECK(m.train_images(0, 9, 3) == static_cast<float>((9 * 28 + 3) % 256) * (1.0f / 255.0f));
    float hi = 0.f;
    for (float v : m.train_images) hi = std::max(hi, v);
    CHECK(hi == 1.f);
    // and it feeds a pipeline
    auto ds = from_tensor_slices(m.train_images, m.train_labels).batch(2);
    auto [x, y] = *ds.iterator().next();
    CHECK(x.shape() == Shape{2, 28, 28});
    CHECK(y == Tensor<std::int32_t>{{2}, {5, 0}});
  }
  SUBCASE("a label out of range") {
    write_mnist_split(tmp.path(), "train", 3, {5, 10, 9});
    write_mnist_split(tmp.path(), "t10k", 2, {7, 2});
    const std::string e = load_error(tmp.path());
    CHECK(e.find((tmp / "train-labels-idx1-ubyte").string()) != std::string::npos);
    CHECK(e.find("label 10 at index 1 is outside 0..9") != std::string::npos);
  }
  SUBCASE("images and labels disagree on the count") {
    write_mnist_split(tmp.path(), "train", 3, {5, 0, 9});
    write_mnist_split(tmp.path(), "t10k", 2, {7, 2, 1});
    const std::string e = load_error(tmp.path());
    CHECK(e.find("t10k-images-idx3-ubyte holds 2 images but") != std::string::npos);
    CHECK(e.find("t10k-labels-idx1-ubyte holds 3 labels") != std::string::npos);
  }
  SUBCASE("images that are not 28x28") {
    write_mnist_split(tmp.path(), "train", 3, {5, 0, 9}, {3, 28, 27});
    CHECK(load_error(tmp.path()).find("of shape [3, 28, 27]; expected MNIST images: u8 (0x08) of shape [N, 28, 28]") !=
          std::string::npos);
  }
  SUBCASE("labels of the wrong type") {
    write_mnist_split(tmp.path(), "train", 1, {5});
    write_idx(tmp / "train-labels-idx1-ubyte", IdxType::i32, {1}, Bytes{0, 0, 0, 5});
    CHECK(load_error(tmp.path()).find("holds i32 (0x0C) of shape [1]; expected MNIST labels") != std::string::npos);
  }
  SUBCASE("a missing file says how to get it") {
    write_mnist_split(tmp.path(), "train", 3, {5, 0, 9});
    const std::string e = load_error(tmp.path());
    CHECK(e.find((tmp / "t10k-images-idx3-ubyte").string() + " does not exist") != std::string::npos);
    CHECK(e.find("scripts/fetch-mnist.sh") != std::string::npos);
  }
}

namespace {
//! Sets (or, with nullptr, unsets) an environment variable for a scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~EnvVar() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST_CASE("mnist: default_mnist_dir follows STRATA_MNIST_DIR, XDG_CACHE_HOME, HOME") {
  EnvVar home("HOME", "/home/u");
  {
    EnvVar a("STRATA_MNIST_DIR", "/data/mnist");
    EnvVar b("XDG_CACHE_HOME", "/xdg");
    CHECK(default_mnist_dir() == fs::path("/data/mnist"));
  }
  {
    EnvVar a("STRATA_MNIST_DIR", nullptr);
    EnvVar b("XDG_CACHE_HOME", "/xdg");
    CHECK(default_mnist_dir() == fs::path("/xdg/strata/mnist"));
  }
  {
    EnvVar a("STRATA_MNIST_DIR", "");
    EnvVar b("XDG_CACHE_HOME", nullptr);
    CHECK(default_mnist_dir() == fs::path("/home/u/.cache/strata/mnist"));
    EnvVar c("HOME", nullptr);
    CHECK_THROWS_WITH_AS(default_mnist_dir(), doctest::Contains("set STRATA_MNIST_DIR"), strata::Error);
  }
}

TEST_CASE("mnist: the real data set, when downloaded") {
  fs::path dir;
  try {
    dir = default_mnist_dir();
  } catch (const strata::Error& e) {
    MESSAGE("no MNIST directory to look in (" << e.what() << "); this check passes without it");
    return;
  }
  if (!fs::exists(dir / "train-images-idx3-ubyte")) {
    MESSAGE("MNIST not found in " << dir.string()
                                  << "; this check passes without it (run scripts/fetch-mnist.sh to enable it)");
    return;
  }
  Mnist m = load_mnist(dir);
  CHECK(m.train_images.shape() == Shape{60000, 28, 28});
  CHECK(m.train_labels.shape() == Shape{60000});
  CHECK(m.test_images.shape() == Shape{10000, 28, 28});
  CHECK(m.test_labels.shape() == Shape{10000});
  CHECK(m.train_labels[0] == 5);
  CHECK(m.test_labels[0] == 7);
  std::array<std::size_t, 10> hist{};
  for (auto y : m.train_labels) ++hist[static_cast<std::size_t>(y)];
  for (std::size_t d = 0; d < 10; ++d) {
    CAPTURE(d);
    CHECK(hist[d] > 5000);  // each digit is 9% to 11% of the training set
    CHECK(hist[d] < 7000);
  }
  CHECK(hist[1] == 6742);  // the well-known counts of the two extremes
  CHECK(hist[5] == 5421);
  double mean = 0;
  for (float v : m.train_images) mean += v;
  mean /= static_cast<double>(m.train_images.size());
  CHECK(mean == doctest::Approx(0.1307).epsilon(0.001));  // the usual normalisation constant
}

}  // namespace idx_test
