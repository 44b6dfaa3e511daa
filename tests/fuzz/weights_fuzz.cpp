// libFuzzer target: the weights-file reader (strata::nn::read_weights, the
// reader of load_weights) on arbitrary file contents, both formats (the
// checksummed strata file and the first "STRATAW1" format). Every input
// must either load into finite tensors or be refused with a strata::Error;
// a crash, a sanitizer report, another exception (std::bad_alloc from a
// size taken on trust, std::filesystem::filesystem_error) is a finding.
//   bash tests/fuzz/run.sh 20     (builds with clang++ -fsanitize=fuzzer,address,undefined)
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <strata/nn/checkpoints/weights_file.hpp>

namespace {

const std::filesystem::path& temp_path() {
  static const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("strata_weights_fuzz_" + std::to_string(::getpid()));
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(temp_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto tensors = strata::nn::read_weights(temp_path());
    for (const auto& t : tensors)
      for (float v : t.value)
        if (!std::isfinite(v)) {
          std::fprintf(stderr, "weights_fuzz: loaded a non-finite value in %s\n", t.name.c_str());
          std::abort();
        }
  } catch (const strata::Error&) {
    // refused with a typed error: what the reader promises
  }
  return 0;
}
