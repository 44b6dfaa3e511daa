// Writes the seed corpus of the fuzz targets: small valid files of every
// IDX type and rank, and weights files of both formats (the checksummed
// strata file through strata::nn::write_weights, the first "STRATAW1" format
// by hand), so that the fuzzer starts from inputs that get past the magic.
//   make_corpus OUT_DIR      (writes OUT_DIR/idx/* and OUT_DIR/weights/*)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <strata/data/idx.hpp>
#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/checkpoints/weights_file.hpp>

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

namespace {

void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}

//! A file of the first weights format: "STRATAW1" | u32 count | {u32 name_len | name | u32 rank | u64 dims | f32 data}.
void write_v1(const fs::path& p, const std::vector<strata::io::NamedTensor>& ts) {
  std::string s = "STRATAW1";
  put_le(s, ts.size(), 4);
  for (const auto& t : ts) {
    put_le(s, t.name.size(), 4);
    s += t.name;
    put_le(s, t.value.shape().rank(), 4);
    for (std::size_t d = 0; d < t.value.shape().rank(); ++d) put_le(s, t.value.shape()[d], 8);
    for (float v : t.value) {
      std::uint32_t u = 0;
      std::memcpy(&u, &v, 4);
      put_le(s, u, 4);
    }
  }
  std::ofstream(p, std::ios::binary) << s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out / "idx");
  fs::create_directories(out / "weights");
  namespace d = strata::data;
  d::write_idx(out / "idx" / "u8_3", d::IdxType::u8, {3}, Bytes{0, 7, 255});
  d::write_idx(out / "idx" / "u8_2x2x2", d::IdxType::u8, {2, 2, 2}, Bytes{1, 2, 3, 4, 5, 6, 7, 8});
  d::write_idx(out / "idx" / "u8_rank4", d::IdxType::u8, {1, 2, 1, 2}, Bytes{9, 8, 7, 6});
  d::write_idx(out / "idx" / "i8_2", d::IdxType::i8, {2}, Bytes{0x80, 0x7F});
  d::write_idx(out / "idx" / "i16_2x1", d::IdxType::i16, {2, 1}, Bytes{0xFF, 0xFE, 0x00, 0x07});
  d::write_idx(out / "idx" / "i32_2", d::IdxType::i32, {2}, Bytes{0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE});
  d::write_idx(out / "idx" / "f32_2", d::IdxType::f32, {2}, Bytes{0x3F, 0x80, 0, 0, 0xC0, 0x20, 0, 0});
  d::write_idx(out / "idx" / "f64_1", d::IdxType::f64, {1}, Bytes{0x3F, 0xF0, 0, 0, 0, 0, 0, 0});
  d::write_idx(out / "idx" / "empty_0x5", d::IdxType::u8, {0, 5}, Bytes{});
  d::write_idx(out / "idx" / "mnist_image", d::IdxType::u8, {1, 28, 28}, Bytes(28 * 28, 128));

  const std::vector<strata::io::NamedTensor> ts{
      {"dense/kernel", strata::Tensor<float>{{2, 3}, {0.5f, -1.f, 2.f, 0.f, 1e-3f, -7.25f}}},
      {"dense/bias", strata::Tensor<float>{{3}, {0.f, 1.f, -1.f}}}};
  strata::nn::write_weights(out / "weights" / "two_tensors", ts);
  strata::nn::write_weights(out / "weights" / "one_scalar", {{"w", strata::Tensor<float>{{1}, {3.f}}}});
  strata::nn::write_weights(out / "weights" / "none", {});
  write_v1(out / "weights" / "v1_two_tensors", ts);
  write_v1(out / "weights" / "v1_none", {});

  // checkpoints: as Sequential::save_checkpoint writes them (weights/..., optimizer/k, the position)
  fs::create_directories(out / "checkpoint");
  strata::io::TensorFile ck{.kind = "checkpoint", .meta = {}, .tensors = {}};
  ck.meta = {{"format", std::string(strata::nn::checkpoint_format)}, {"step", "12"}, {"epoch", "1"}, {"batch", "3"},
             {"data_counters", "2,5"}, {"seed", "7"}, {"optimizer", "Adam"}, {"optimizer_slots", "2"},
             {"num_params", "9"}, {"strategy", "mirrored"}, {"replicas", "2"}};
  for (const auto& t : ts) ck.tensors.push_back({"weights/" + t.name, t.value});
  ck.tensors.push_back({"optimizer/0", strata::Tensor<float>{{9}}});
  ck.tensors.push_back({"optimizer/1", strata::Tensor<float>{{9}}});
  strata::io::write_tensor_file(out / "checkpoint" / "adam_9", ck);
  ck.meta[4].second = "";
  strata::io::write_tensor_file(out / "checkpoint" / "no_counters", ck);
  return 0;
}
