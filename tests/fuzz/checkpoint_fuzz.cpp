// libFuzzer target: the checkpoint reader (strata::io::read_tensor_file,
// then the checkpoint's metadata: strata::nn::detail::position_of, what
// Sequential::load_checkpoint and BackupAndRestore read first; and the
// metadata-only read with the run identity BackupAndRestore takes from a
// checkpoint or a run record, nn/checkpoints/run_record.hpp) on arbitrary
// file contents. Every input must load into finite tensors and a position,
// or be refused with a strata::Error; a crash, a sanitizer report or
// another exception is a finding.
//   bash tests/fuzz/run.sh 20 checkpoint
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <strata/io/tensor_file.hpp>
#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/checkpoints/run_record.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("strata_checkpoint_fuzz_" + std::to_string(::getpid()));
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {  // whose file it is: the header and metadata alone
    const auto m = strata::io::read_tensor_file(p, "checkpoint_fuzz", strata::io::ReadPart::MetadataOnly);
    if (auto r = strata::nn::detail::run_of(m)) (void)strata::nn::detail::differences(*r, {{"seed", "1"}});
  } catch (const strata::Error&) {
  }
  try {
    const auto f = strata::io::read_tensor_file(p, "checkpoint_fuzz");
    for (const auto& t : f.tensors)
      for (float v : t.value)
        if (!std::isfinite(v)) {
          std::fprintf(stderr, "checkpoint_fuzz: loaded a non-finite value in %s\n", t.name.c_str());
          std::abort();
        }
    (void)strata::nn::detail::position_of(f, p.string());
  } catch (const strata::Error&) {
    // refused with a typed error: what the reader promises
  }
  return 0;
}
