// libFuzzer target: the IDX reader (strata/data/idx.hpp) on arbitrary bytes.
// Every input must either parse into an array whose bytes match its dims
// (and then convert) or be refused with a strata::Error naming the source;
// anything else (a crash, a sanitizer report, another exception, an array
// that disagrees with its dims) is a finding. Odd inputs also go through
// read_idx(path), the file form, to fuzz the same checks on a real file.
//   bash tests/fuzz/run.sh 20     (builds with clang++ -fsanitize=fuzzer,address,undefined)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include <strata/data/idx.hpp>

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "idx_fuzz: %s\n", what);
  std::abort();
}

void check(const strata::data::IdxArray& a) {
  std::size_t n = strata::data::detail::idx_element_size(a.type_code);
  if (n == 0 || a.dims.empty() || a.dims.size() > 4) finding("accepted an unknown type code or rank");
  for (auto d : a.dims) n *= d;
  if (n != a.data.size()) finding("accepted an array whose bytes disagree with its dims");
  const auto f = strata::data::idx_to_float(a, 1.0f / 255);
  if (f.size() * strata::data::detail::idx_element_size(a.type_code) != a.data.size()) finding("idx_to_float size");
  if (a.type_code != strata::data::IdxType::f32 && a.type_code != strata::data::IdxType::f64)
    (void)strata::data::idx_to_int32(a);
}

const std::filesystem::path& temp_path() {
  static const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("strata_idx_fuzz_" + std::to_string(::getpid()));
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const unsigned char> bytes(data, size);
  try {
    check(strata::data::read_idx_bytes(bytes, "fuzz input"));
  } catch (const strata::Error& e) {
    if (std::string(e.what()).find("fuzz input") == std::string::npos) finding("an error that does not name its source");
  }
  if (size % 2 == 1) {  // the file form: the same checks through stdio
    {
      std::ofstream out(temp_path(), std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
      check(strata::data::read_idx(temp_path()));
    } catch (const strata::Error& e) {
      if (std::string(e.what()).find(temp_path().string()) == std::string::npos)
        finding("an error that does not name the file");
    }
  }
  return 0;
}
