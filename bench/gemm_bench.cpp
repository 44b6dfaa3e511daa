// The matrix products the MNIST MLP's first Dense layer runs, timed through
// OpenBLAS single-threaded (as strata sets it: kernels/host/blas.hpp), next
// to square products: what "the bound" of a step is on this machine
// (docs/performance.md, "Where a step goes").
//   ./build/bench/gemm_bench [--reps N]
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  const char* what;
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
};

double seconds_per_call(const Shape& s, int reps) {
  std::vector<float> a(static_cast<std::size_t>(s.m) * s.k, 0.5f), b(static_cast<std::size_t>(s.k) * s.n, 0.25f),
      c(static_cast<std::size_t>(s.m) * s.n);
  const int lda = s.ta == CblasNoTrans ? s.k : s.m, ldb = s.tb == CblasNoTrans ? s.n : s.k;
  const auto call = [&] {
    cblas_sgemm(CblasRowMajor, s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
  };
  for (int w = 0; w < 10; ++w) call();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 500;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  if (reps < 1) {
    std::fprintf(stderr, "usage: gemm_bench [--reps N>=1]\n");
    return 2;
  }
  openblas_set_num_threads(1);
  const Shape shapes[] = {
      {"x.W, batch 128 (forward)", CblasNoTrans, CblasNoTrans, 128, 128, 784},
      {"x.W, 64 rows (a replica's half)", CblasNoTrans, CblasNoTrans, 64, 128, 784},
      {"xT.dy (weight gradient)", CblasTrans, CblasNoTrans, 784, 128, 128},
      {"xT.dy, 64 rows", CblasTrans, CblasNoTrans, 784, 128, 64},
      {"square 256", CblasNoTrans, CblasNoTrans, 256, 256, 256},
      {"square 1024", CblasNoTrans, CblasNoTrans, 1024, 1024, 1024},
  };
  std::printf("# cblas_sgemm, row-major, one thread, %d calls each\n", reps);
  std::printf("%-34s %6s %6s %6s %12s %10s\n", "product", "m", "n", "k", "time (us)", "GFLOP/s");
  for (const Shape& s : shapes) {
    const double t = seconds_per_call(s, s.m * s.n * s.k > 100000000 ? std::max(1, reps / 50) : reps);
    std::printf("%-34s %6d %6d %6d %12.1f %10.1f\n", s.what, s.m, s.n, s.k, t * 1e6,
                2.0 * s.m * s.n * s.k / t / 1e9);
  }
}
