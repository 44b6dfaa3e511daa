// What a checkpoint costs: the CRC-32C alone (both paths), then saving and
// loading the MNIST CNN's checkpoint (weights + Adam's two slots) under
// MirroredStrategy, into a directory of your choice (the disk matters:
// every save ends with fsync).
//   checkpoint_bench [--dir DIR] [--replicas N] [--repeats N]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/core/crc32c.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "bench_util.hpp"

namespace nn = strata::nn;

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  int replicas = 2, repeats = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--replicas" && i + 1 < argc) replicas = std::atoi(argv[++i]);
    else if (a == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--replicas N] [--repeats N]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  if (replicas < 1 || repeats < 1) {
    std::fprintf(stderr, "checkpoint_bench: --replicas and --repeats must be at least 1\n");
    return 2;
  }

  // CRC-32C throughput over 64 MiB (the paths agree: tests/nn/checkpoint_test).
  std::vector<std::byte> buf(std::size_t{64} << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 2654435761u >> 13);
  std::printf("# CRC-32C over 64 MiB\n%-22s %10s %10s\n", "path", "time(ms)", "GB/s");
  {
    const double t0 = bench::now_s();
    volatile std::uint32_t c = strata::crc32c(buf);
    const double t = bench::now_s() - t0;
    (void)c;
    std::printf("%-22s %10.2f %10.2f\n", strata::detail::crc32c_has_sse42() ? "sse4.2" : "tables", t * 1e3,
                static_cast<double>(buf.size()) / t / 1e9);
    const double t1 = bench::now_s();
    volatile std::uint32_t d = ~strata::detail::crc32c_tables_update(~0u, reinterpret_cast<const unsigned char*>(buf.data()), buf.size());
    const double u = bench::now_s() - t1;
    (void)d;
    std::printf("%-22s %10.2f %10.2f\n", "tables (slicing-by-8)", u * 1e3, static_cast<double>(buf.size()) / u / 1e9);
  }

  strata::MirroredStrategy s{strata::cpu_replicas(replicas)};
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{28, 28}}, nn::Reshape{{28, 28, 1}},
                          nn::Conv2D{32, 3}, nn::ReLU{}, nn::MaxPool2D{2},
                          nn::Conv2D{64, 3}, nn::ReLU{}, nn::MaxPool2D{2},
                          nn::Flatten{}, nn::Dense{128, {.activation = nn::Activation::ReLU}}, nn::Dense{10}};
  });
  model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}});
  model.build(strata::Shape{28, 28});
  const auto path = std::filesystem::path(dir) / "checkpoint_bench.strata";
  double save = 1e30, load = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = bench::now_s();
    model.save_checkpoint(path);
    const double t1 = bench::now_s();
    model.load_checkpoint(path);
    const double t2 = bench::now_s();
    save = std::min(save, t1 - t0);
    load = std::min(load, t2 - t1);
  }
  const double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::filesystem::remove(path);
  std::printf("\n# MNIST CNN checkpoint (%zu parameters, Adam: 3 tensors of each), MirroredStrategy x%d, into %s, best of %d\n",
              model.count_params(), replicas, dir.c_str(), repeats);
  std::printf("%-8s %10s %10s %10s\n", "op", "MB", "time(ms)", "MB/s");
  std::printf("%-8s %10.2f %10.2f %10.1f\n", "save", mb, save * 1e3, mb / save);
  std::printf("%-8s %10.2f %10.2f %10.1f\n", "load", mb, load * 1e3, mb / load);
  return 0;
}
