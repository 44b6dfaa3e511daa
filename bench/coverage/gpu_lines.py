"""The GPU-only lines a real GPU runs for bench/coverage/gpu_step.cpp's steps
(the MLP and the CNN: eager steps, Adam, sparse cross-entropy from logits,
accuracy), listed by reading CudaCompute and the launchers and kernels it
calls. No CI run executes these lines (g++ never compiles .cuh files, and the
device branches of kernels/bodies/hd.hpp are nvcc's).

Each entry: (file under include/strata, function, side, [line texts]). The
first text is the function's first line; the others follow it in order, each
found by measure.py at or after the previous one (a missing text fails the
measurement, so an edit to the CUDA code shows). One text = one counted line.

Counted, as gcov counts a function: its first line and each statement's first
line (a statement over several lines counts once); not counted: lines of
braces only, declarations without code (struct members, `using`, __shared__
arrays), the error branches a successful step does not take.
Excluded as the issue says: launch geometry (blocks_for, blocks_exact,
blocks_for_rows, global_index, grid_stride, column_sums' grid and
bodies::column_chunk_rows, bodies/grid.hpp's constants), streams,
events and graphs (Stream, Event, host_wait, drain, refuse_in_capture,
capturing, begin/end_capture), and library code (Thrust, CUB, cuBLAS).

side: 'host' = GPU-only code on the CPU (CudaCompute's overrides, the device
ops, launchers, staging, checks); 'device' = numeric code run on the GPU
(__global__ kernels, __device__ functors and helpers).

The several-replica step (gpu_step mirrored: the MLP under
MirroredStrategy{virtual_gpus(0, 2)}, one sum and by buckets) reaches
GPU_ONLY less NOT_IN_MLP, plus MIRRORED_ONLY: what a GPU runs of CUDA's
device runtime (cuda/comm/runtime.hpp), of the backend's collectives
(cuda/comm/collectives.hpp), of a started sum's completion
(cuda/comm/event_work.hpp and the polling in cuda/stream.hpp) and of the
replicas' reduce (cuda/kernels/collectives.cuh), with the same rules.
Runtime's members counted are those whose HostRuntime counterparts the
stand-in run executes (the shared team code calls the same members). A
GPU's completions are Works over an event; the stand-in's are complete
Works, so comm/work.hpp's lines for a polled Work are a GPU's only here.
"""

GPU_ONLY = [
    # -- cuda/make_compute + strata_cuda.cu: the compute a gpu(0) replica gets
    ("cuda/strata_cuda.cu", "make_compute", "host", [
        "std::unique_ptr<kernels::Compute> make_compute(int device, MathMode math) {",
        "return std::make_unique<CudaCompute>(device, math);"]),
    ("cuda/device.hpp", "device_count", "host", [
        "inline int device_count() noexcept {", "int n = 0;",
        "if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {", "return n;"]),
    ("cuda/device.hpp", "device_name", "host", [
        "inline std::string device_name(int device) {", "cudaDeviceProp p{};",
        "check(cudaGetDeviceProperties(&p, device)", "return p.name;"]),
    ("cuda/device.hpp", "require_device", "host", [
        "inline void require_device(int device, const char* who) {", "const int n = device_count();",
        "if (device < 0 || device >= n)"]),
    ("cuda/error.hpp", "consume_error", "host", [
        "inline void consume_error(cudaError_t e) noexcept {", "if (e != cudaSuccess && cudaPeekAtLastError() == e)"]),
    ("cuda/error.hpp", "ignore", "host", ["inline void ignore(cudaError_t e) noexcept { consume_error(e); }"]),
    ("cuda/error.hpp", "check(cudaError_t)", "host", [
        "inline void check(cudaError_t e, const char* call) {", "if (e == cudaSuccess) return;"]),
    ("cuda/error.hpp", "check(cublasStatus_t)", "host", [
        "inline void check(cublasStatus_t s, const char* call) {", "if (s == CUBLAS_STATUS_SUCCESS) return;"]),
    ("cuda/error.hpp", "check_allocation", "host", [
        "inline void check_allocation(cudaError_t e, const char* call, std::size_t bytes, int device) {",
        "if (e == cudaSuccess) return;"]),
    ("cuda/stream.hpp", "DeviceGuard::DeviceGuard", "host", [
        "explicit DeviceGuard(int device) {", "check(cudaGetDevice(&previous_), \"cudaGetDevice\");",
        "if (device != previous_) {"]),
    ("cuda/stream.hpp", "DeviceGuard::~DeviceGuard", "host", [
        "~DeviceGuard() {", "int now = previous_;", "if (cudaGetDevice(&now) == cudaSuccess && now != previous_)"]),
    # -- cuda/device_ops.hpp: CudaDeviceOps (memory, copies, fill, binding)
    ("cuda/device_ops.hpp", "CudaDeviceOps::CudaDeviceOps", "host", [
        "explicit CudaDeviceOps(int device)", ": device_((require_device(device, \"CudaCompute\"), device)), stream_(device),",
        "name_(\"cuda:\" + std::to_string(device)"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::~CudaDeviceOps", "host", [
        "~CudaDeviceOps() override {", "(void)drain();", "int previous = device_;",
        "if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {",
        "if (previous != device_) detail::ignore(cudaSetDevice(device_));",
        "if (previous != device_) detail::ignore(cudaSetDevice(previous));"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::where", "host", [
        "[[nodiscard]] kernels::Where where() const noexcept override { return kernels::Where::Cuda; }"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::allocate", "host", [
        "[[nodiscard]] void* allocate(std::size_t bytes) override {", "if (bytes == 0) return nullptr;",
        "DeviceGuard g{device_};", "void* p = nullptr;", "check_allocation(cudaMallocAsync(&p, bytes, stream_.get())",
        "return p;"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::deallocate", "host", [
        "void deallocate(void* p, std::size_t /*bytes*/) noexcept override {", "if (!p) return;",
        "int previous = device_;", "cuda::detail::ignore(cudaGetDevice(&previous));",
        "if (previous != device_) cuda::detail::ignore(cudaSetDevice(device_));",
        "cuda::detail::ignore(cudaFreeAsync(p, stream_.get()));",
        "if (previous != device_) cuda::detail::ignore(cudaSetDevice(previous));"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::upload", "host", [
        "void upload(void* dst, const void* src, std::size_t bytes) override {", "if (bytes == 0) return;",
        "DeviceGuard g{device_};", "stager_.upload(stream_.get(), dst, src, bytes);"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::download", "host", [
        "void download(void* dst, const void* src, std::size_t bytes) override {", "if (bytes == 0) return;",
        "DeviceGuard g{device_};", "stager_.download(stream_.get(), dst, src, bytes);"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::copy", "host", [
        "void copy(void* dst, const void* src, std::size_t bytes) override {",
        "if (bytes == 0 || dst == src) return;", "DeviceGuard g{device_};",
        "check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get())"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::fill", "host", [
        "void fill(float* x, float value, std::size_t n) override {", "DeviceGuard g{device_};",
        "detail::launch_fill(stream_.get(), x, value, n);"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::bind_thread", "host", [
        "int bind_thread() override {", "int previous = -1;",
        "if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {",
        "check(cudaSetDevice(device_), \"cudaSetDevice\");", "return previous;"]),
    ("cuda/device_ops.hpp", "CudaDeviceOps::unbind_thread", "host", [
        "void unbind_thread(int previous) noexcept override {", "if (previous >= 0 && previous != device_)"]),
    # -- cuda/staging.hpp: pinned staging of upload and download (event record and waits excluded)
    ("cuda/staging.hpp", "Stager::~Stager", "host", [
        "~Stager() {", "for (Slot& s : slots_) {", "if (s.host) ignore(cudaFreeHost(s.host));"]),
    ("cuda/staging.hpp", "Stager::upload", "host", [
        "void upload(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {",
        "auto* d = static_cast<char*>(dst);", "const auto* s = static_cast<const char*>(src);",
        "for (std::size_t off = 0; off < bytes; off += chunk_bytes) {",
        "const std::size_t n = std::min(chunk_bytes, bytes - off);", "Slot& slot = slots_[next_];", "next_ ^= 1;",
        "reserve(slot, n);", "std::memcpy(slot.host, s + off, n);",
        "check(cudaMemcpyAsync(d + off, slot.host, n, cudaMemcpyHostToDevice, stream)", "slot.pending = true;",
        "slot.stream = stream;"]),
    ("cuda/staging.hpp", "Stager::download", "host", [
        "void download(cudaStream_t stream, void* dst, const void* src, std::size_t bytes) {",
        "auto* d = static_cast<char*>(dst);", "const auto* s = static_cast<const char*>(src);",
        "const std::size_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;", "auto issue = [&](std::size_t i) {",
        "const std::size_t off = i * chunk_bytes, n = std::min(chunk_bytes, bytes - off);",
        "Slot& slot = slots_[i % 2];", "reserve(slot, n);",
        "check(cudaMemcpyAsync(slot.host, s + off, n, cudaMemcpyDeviceToHost, stream)", "slot.pending = true;",
        "slot.stream = stream;", "if (chunks) issue(0);", "for (std::size_t i = 0; i < chunks; ++i) {",
        "if (i + 1 < chunks) issue(i + 1);", "Slot& slot = slots_[i % 2];", "slot.pending = false;",
        "const std::size_t off = i * chunk_bytes;", "std::memcpy(d + off, slot.host, std::min(chunk_bytes, bytes - off));"]),
    ("cuda/staging.hpp", "Stager::reserve", "host", [
        "static void reserve(Slot& slot, std::size_t n) {", "if (slot.capacity >= n) return;",
        "std::size_t cap = std::size_t{64} << 10;", "while (cap < n) cap *= 2;", "cap = std::min(cap, chunk_bytes);",
        "if (slot.host) check(cudaFreeHost(slot.host), \"cudaFreeHost\");", "slot.host = nullptr;", "slot.capacity = 0;",
        "check_allocation(cudaMallocHost(&slot.host, cap)", "slot.capacity = cap;"]),
    # -- cuda/compute.hpp: CudaCompute (cuBLAS, the overrides a step calls)
    ("cuda/compute.hpp", "detail::keep_pool_memory", "host", [
        "inline void keep_pool_memory(int device) {", "cudaMemPool_t pool = nullptr;",
        "check(cudaDeviceGetDefaultMemPool(&pool, device)", "std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();",
        "check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold)"]),
    ("cuda/compute.hpp", "detail::as_int", "host", [
        "inline int as_int(std::size_t v, const char* what) {",
        "if (v > static_cast<std::size_t>(std::numeric_limits<int>::max()))", "return static_cast<int>(v);"]),
    ("cuda/compute.hpp", "detail::CublasDestroy / CudaFree", "host", [
        "void operator()(cublasHandle_t h) const noexcept { (void)cublasDestroy(h); }",
        "void operator()(void* p) const noexcept { cuda::detail::ignore(cudaFree(p)); }"]),
    ("cuda/compute.hpp", "CudaCompute::CudaCompute", "host", [
        "explicit CudaCompute(int device = 0, MathMode math = MathMode::FP32) : CudaDeviceOps(device) {",
        "DeviceGuard g{device_};", "detail::keep_pool_memory(device_);", "cublasHandle_t h = nullptr;",
        "check(cublasCreate(&h), \"cublasCreate\");", "blas_.reset(h);", "check(cublasSetStream(h, stream_.get())",
        "void* ws = nullptr;", "check_allocation(cudaMalloc(&ws, cublas_workspace_bytes)", "workspace_.reset(ws);",
        "check(cublasSetWorkspace(h, ws, cublas_workspace_bytes)", "set_math_mode(math);"]),
    ("cuda/compute.hpp", "CudaCompute::~CudaCompute", "host", [
        "~CudaCompute() override {", "if (!drain()) {", "int previous = device_;",
        "if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {",
        "if (previous != device_) detail::ignore(cudaSetDevice(device_));", "blas_.reset();", "workspace_.reset();",
        "if (previous != device_) cuda::detail::ignore(cudaSetDevice(previous));"]),
    ("cuda/compute.hpp", "CudaCompute::set_math_mode", "host", [
        "void set_math_mode(MathMode m) {", "DeviceGuard g{device_};", "check(cublasSetMathMode(blas_.get()",
        "math_ = m;"]),
    ("cuda/compute.hpp", "CudaCompute::gemm", "host", [
        "void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,",
        "if (m == 0 || n == 0) return;", "DeviceGuard g{device_};", "if (k == 0) {",
        "const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N",
        "const int im = detail::as_int(m, \"m\")", "const int ia = detail::as_int(lda, \"lda\")",
        "if (math_ == MathMode::BF16)", "check(cublasSgemm(blas_.get(), tb, ta, in, im, ik, &alpha, b, ib, a, ia, &beta, c, ic)"]),
] + [
    ("cuda/compute.hpp", "CudaCompute::" + name, "host", [first, "DeviceGuard g{device_};", launch])
    for name, first, launch in [
        ("bias_activate", "void bias_activate(kernels::Activation a, const float* x, const float* bias, float* y",
         "detail::launch_bias_activate(stream_.get()"),
        ("activation_backward", "void activation_backward(kernels::Activation a, const float* z, const float* y",
         "detail::launch_activation_backward(stream_.get()"),
        ("column_sums", "void column_sums(const float* x, float* out, std::size_t rows, std::size_t cols) override {",
         "detail::launch_column_sums(stream_.get()"),
        ("count_nonfinite", "void count_nonfinite(const float* x, std::size_t n, double* acc) override {",
         "detail::launch_count_nonfinite(stream_.get()"),
        ("sparse_crossentropy", "void sparse_crossentropy(const float* pred, const float* labels, float* d, float scale",
         "detail::launch_sparse_crossentropy(stream_.get()"),
        ("sparse_hits", "void sparse_hits(const float* pred, const float* labels, std::size_t rows, std::size_t classes",
         "detail::launch_sparse_hits(stream_.get()"),
        ("im2col", "void im2col(const kernels::Window2D& w, const float* x, float* col) override {",
         "detail::launch_im2col(stream_.get()"),
        ("max_pool", "void max_pool(const kernels::Window2D& w, const float* x, float* y, std::uint32_t* argmax)",
         "detail::launch_max_pool(stream_.get()"),
        ("max_pool_backward", "void max_pool_backward(const kernels::Window2D& w, const float* dy",
         "detail::launch_max_pool_backward(stream_.get()"),
        ("adam", "void adam(float* w, const float* grad, float* m, float* v, std::size_t n, const kernels::AdamStep& s)",
         "detail::launch_adam(stream_.get()"),
    ]
] + [
    # -- cuda/kernels/common.cuh
    ("cuda/kernels/common.cuh", "check_launch", "host", [
        "inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }"]),
    ("cuda/kernels/common.cuh", "for_each_index", "host", [
        "void for_each_index(cudaStream_t s, std::size_t n, const F& f, const char* what) {", "if (n == 0) return;",
        "thrust::for_each_n(thrust::cuda::par_nosync.on(s)", "check_launch(what);"]),
    ("cuda/kernels/common.cuh", "warp_max", "device", [
        "__device__ inline float warp_max(float v) {", "for (int o = 16; o > 0; o >>= 1) v = fmaxf(", "return v;"]),
    ("cuda/kernels/common.cuh", "warp_sum", "device", [
        "__device__ inline T warp_sum(T v) {", "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync", "return v;"]),
    ("cuda/kernels/common.cuh", "block_accumulate", "device", [
        "__device__ inline void block_accumulate(double* shared, double* acc) {", "__syncthreads();",
        "if (threadIdx.x == 0 && acc) atomicAdd(acc, bodies::in_order_sum("]),
    ("cuda/kernels/common.cuh", "WarpLanes::sum/max/first/step", "device", [
        "__device__ float sum(Partial&& partial) const {", "return warp_sum(partial(lane));",
        "__device__ float max(Partial&& partial) const {", "return warp_max(partial(lane));",
        "[[nodiscard]] __device__ std::size_t first() const { return lane; }",
        "[[nodiscard]] __device__ std::size_t step() const { return bodies::row_lanes; }"]),
    # -- cuda/kernels/maps.cuh
    ("cuda/kernels/maps.cuh", "fill_kernel", "device", [
        "__global__ void fill_kernel(float* x, float v, std::size_t n) {",
        "for (std::size_t i = global_index(); i < n; i += grid_stride()) x[i] = v;"]),
    ("cuda/kernels/maps.cuh", "launch_fill", "host", [
        "void launch_fill(cudaStream_t s, float* x, float value, std::size_t n) {", "if (n == 0) return;",
        "fill_kernel<<<", "check_launch(\"fill_kernel\");"]),
    ("cuda/kernels/maps.cuh", "ActivateAt::operator()", "device", [
        "__device__ void operator()(std::size_t i) const { y[i] = act(bias ? bodies::add(x[i], bias[i % cols]) : x[i]); }"]),
    ("cuda/kernels/maps.cuh", "ActivationGradAt::operator()", "device", [
        "__device__ void operator()(std::size_t i) const { dz[i] = act.grad(z ? z[i] : 0.f, y[i], dy[i]); }"]),
    ("cuda/kernels/maps.cuh", "launch_bias_activate", "host", [
        "void launch_bias_activate(cudaStream_t s, Activation a, const float* x, const float* bias, float* y",
        "const std::size_t n = rows * cols;", "if (n == 0) return;", "if (a == Activation::Linear && !bias) {",
        "if (a == Activation::Softmax) {", "bodies::visit_elementwise(a, [&](auto act) {",
        "for_each_index(s, n, ActivateAt<decltype(act)>"]),
    ("cuda/kernels/maps.cuh", "launch_activation_backward", "host", [
        "void launch_activation_backward(cudaStream_t s, Activation a, const float* z, const float* y",
        "const std::size_t n = rows * cols;", "if (n == 0) return;", "if (a == Activation::Linear) {",
        "if (a == Activation::Softmax) {", "if (kernels::activation_needs_input(a) && !z)",
        "bodies::visit_elementwise(a, [&](auto act) {", "for_each_index(s, n, ActivationGradAt<decltype(act)>"]),
    # -- cuda/kernels/reductions.cuh
    ("cuda/kernels/reductions.cuh", "column_partial_kernel", "device", [
        "__global__ void column_partial_kernel(const float* x, float* out", "const std::size_t col =",
        "const std::size_t r0 =", "const std::size_t r1 =",
        "part[threadIdx.y][threadIdx.x] = col < cols ? bodies::column_lane_sum(", "__syncthreads();",
        "if (threadIdx.y == 0 && col < cols)", "out[std::size_t{blockIdx.y} * cols + col] = bodies::column_lanes_total("]),
    ("cuda/kernels/reductions.cuh", "launch_column_sums", "host", [
        "void launch_column_sums(cudaStream_t s, const float* x, float* out, std::size_t rows, std::size_t cols) {",
        "if (cols == 0) return;", "if (rows == 0) return launch_fill(s, out, 0.f, cols);", "if (chunks == 1) {",
        "column_partial_kernel<<<grid, block, 0, s>>>(x, out, rows, cols, per_chunk);",
        "check_launch(\"column_partial_kernel\");", "return;"]),
    ("cuda/kernels/reductions.cuh", "count_nonfinite_kernel", "device", [
        "__global__ void count_nonfinite_kernel(const float* x, std::size_t n, double* acc) {",
        "const int bad = bodies::nonfinite_strided(x, n, global_index(), grid_stride());", "const int total = Reduce(temp).Sum(bad);",
        "if (threadIdx.x == 0 && total) atomicAdd("]),
    ("cuda/kernels/reductions.cuh", "launch_count_nonfinite", "host", [
        "void launch_count_nonfinite(cudaStream_t s, const float* x, std::size_t n, double* acc) {",
        "if (n == 0) return;", "count_nonfinite_kernel<<<", "check_launch(\"count_nonfinite_kernel\");"]),
    # -- cuda/kernels/losses.cuh
    ("cuda/kernels/losses.cuh", "rows_accumulate", "device", [
        "__device__ inline void rows_accumulate(double loss, double bad, double* acc, double* invalid) {",
        "if (threadIdx.x % 32 == 0) {", "loss_s[threadIdx.x / 32] = loss;", "bad_s[threadIdx.x / 32] = bad;",
        "block_accumulate(loss_s, acc);", "block_accumulate(bad_s, invalid);"]),
    ("cuda/kernels/losses.cuh", "sparse_xent_kernel<true>", "device", [
        "__global__ void sparse_xent_kernel(const float* pred", "const std::size_t row =", "double loss = 0;",
        "bool bad = false;", "if (row < rows)", "loss = bodies::sparse_xent_row<Logits>(WarpLanes{",
        "rows_accumulate(loss, bad ? 1 : 0, acc, invalid);"]),
    ("cuda/kernels/losses.cuh", "launch_sparse_crossentropy", "host", [
        "void launch_sparse_crossentropy(cudaStream_t s, const float* pred", "if (rows == 0) return;",
        "if (from_logits)", "sparse_xent_kernel<true><<<", "check_launch(\"sparse_xent_kernel\");"]),
    ("cuda/kernels/losses.cuh", "count_accumulate", "device", [
        "__device__ inline void count_accumulate(bool hit, bool bad, double* acc, double* invalid, bool nan = false) {",
        "const int hits = __syncthreads_count(hit);", "const int bads = __syncthreads_count(bad);",
        "const int nans = __syncthreads_count(nan);", "if (threadIdx.x == 0)",
        "bodies::add_counts([](double* to, double v) { atomicAdd(to, v); }"]),
    ("cuda/kernels/losses.cuh", "sparse_hits_kernel", "device", [
        "__global__ void sparse_hits_kernel(const float* pred", "const std::size_t i = global_index();",
        "const bodies::RowHit r = i < rows ? bodies::sparse_hit_row(",
        "count_accumulate(r.hit, r.bad, acc, invalid, r.nan);"]),
    ("cuda/kernels/losses.cuh", "launch_sparse_hits", "host", [
        "void launch_sparse_hits(cudaStream_t s, const float* pred", "if (rows == 0 || classes == 0) return;",
        "sparse_hits_kernel<<<", "check_launch(\"sparse_hits_kernel\");"]),
    # -- cuda/kernels/conv.cuh
    ("cuda/kernels/conv.cuh", "Im2colAt::operator()", "device", [
        "__device__ void operator()(std::size_t e) const { col[e] = bodies::im2col_element(g, x, e); }"]),
    ("cuda/kernels/conv.cuh", "launch_im2col", "host", [
        "void launch_im2col(cudaStream_t s, const Window2D& g, const float* x, float* col) {",
        "for_each_index(s, g.batch * g.oh * g.ow * g.kh * g.kw * g.c, Im2colAt"]),
    ("cuda/kernels/conv.cuh", "MaxPoolAt::operator()", "device", [
        "__device__ void operator()(std::size_t e) const { y[e] = bodies::max_pool_element(g, x, e, argmax + e); }"]),
    ("cuda/kernels/conv.cuh", "launch_max_pool", "host", [
        "void launch_max_pool(cudaStream_t s, const Window2D& g, const float* x, float* y, std::uint32_t* argmax) {",
        "for_each_index(s, g.batch * g.oh * g.ow * g.c, MaxPoolAt"]),
    ("cuda/kernels/conv.cuh", "MaxPoolBackwardAt::operator()", "device", [
        "__device__ void operator()(std::size_t e) const { dx[e] = bodies::max_pool_backward_element(g, dy, argmax, e); }"]),
    ("cuda/kernels/conv.cuh", "launch_max_pool_backward", "host", [
        "void launch_max_pool_backward(cudaStream_t s, const Window2D& g, const float* dy",
        "const std::size_t total = g.batch * g.h * g.w * g.c;", "if (total == 0) return;",
        "if (g.oh == 0 || g.ow == 0) return launch_fill(s, dx, 0.f, total);",
        "for_each_index(s, total, MaxPoolBackwardAt"]),
    # -- cuda/kernels/optim.cuh
    ("cuda/kernels/optim.cuh", "AdamAt::operator()", "device", [
        "__device__ void operator()(std::size_t i) const { body(w[i], g[i], m[i], v[i]); }"]),
    ("cuda/kernels/optim.cuh", "launch_adam", "host", [
        "void launch_adam(cudaStream_t s, float* w, const float* g, float* m, float* v, std::size_t n, const AdamStep& st) {",
        "for_each_index(s, n, AdamAt{bodies::AdamElement{st}, w, g, m, v}"]),
    # -- kernels/bodies/hd.hpp: the device branches (__CUDA_ARCH__) of the IEEE operations the bodies above use
    ("kernels/bodies/hd.hpp", "mul/add/sub/div/sqrt/exp/log/fmax (device branch)", "device", [
        "return __fmul_rn(a, b);", "return __fadd_rn(a, b);", "return __fsub_rn(a, b);", "return __fdiv_rn(a, b);",
        "return __fsqrt_rn(a);", "return expf(a);", "return logf(a);", "return fmaxf(a, b);"]),
]

# GPU_ONLY's entries only the CNN reaches (im2col, pooling): not in the MLP's steps.
NOT_IN_MLP = {
    "CudaCompute::im2col", "CudaCompute::max_pool", "CudaCompute::max_pool_backward", "Im2colAt::operator()",
    "launch_im2col", "MaxPoolAt::operator()", "launch_max_pool", "MaxPoolBackwardAt::operator()",
    "launch_max_pool_backward",
}

# The several-replica step's GPU-only lines beyond GPU_ONLY's: the replicas'
# gradient sums on a GPU (DeviceTeamCollectives<cuda::detail::CollectivesRuntime>),
# without NCCL (cuda::make_collectives). Excluded as above: cuda::Event and
# cuda::Stream (the team's ready/done events, the side streams and their
# handoff event, EventWork's event and its record), launch geometry
# (blocks_for, global_index, grid_stride). Runtime::device_of: the
# CUDA 12.8+ branch (cudaStreamGetDevice).
MIRRORED_ONLY = [
    # -- cuda/device_ops.hpp: the stream a replica's collectives are queued on
    ("cuda/device_ops.hpp", "CudaDeviceOps::stream", "host", [
        "[[nodiscard]] cudaStream_t stream() const noexcept { return stream_.get(); }"]),
    # -- cuda/comm/collectives.hpp: the backend's collectives and the runtime's stream_of
    ("cuda/comm/collectives.hpp", "detail::gpu_of", "host", [
        "inline CudaCompute& gpu_of(int rank, kernels::Compute& c, const char* who) {",
        "auto* gpu = dynamic_cast<CudaCompute*>(&c);", "if (!gpu)", "return *gpu;"]),
    ("cuda/comm/collectives.hpp", "CollectivesRuntime::stream_of", "host", [
        "static cudaStream_t stream_of(int rank, int, kernels::Compute& c, const char* who) {",
        "return gpu_of(rank, c, who).stream();"]),
    ("cuda/comm/collectives.hpp", "choose_for", "host", [
        "inline GpuReduceChoice choose_for(const std::vector<Device>& devices, bool nccl_available) {",
        "std::vector<int> index;", "for (const Device& d : devices) index.push_back(d.index);",
        "const char* force = std::getenv(\"STRATA_GPU_ALLREDUCE\");",
        "return choose_gpu_reduce(index, nccl_available, peer_access, force ? force : \"\");"]),
    ("cuda/comm/collectives.hpp", "collectives_for", "host", [
        "collectives_for(const GpuReduceChoice& c,", "if (c.kind == GpuReduce::host_staged)",
        "if (c.kind != GpuReduce::device_direct)", "return std::make_unique<DeviceTeamCollectives>(devices, opts, c.why);"]),
    ("cuda/comm/collectives.hpp", "make_collectives", "host", [
        "make_collectives(const std::vector<Device>& devices,",
        "return collectives_for(choose_for(devices, /*nccl_available=*/false), devices, opts);"]),
    # -- cuda/comm/runtime.hpp: CUDA as the device team's runtime
    ("cuda/comm/runtime.hpp", "Runtime::require_device", "host", [
        "static void require_device(int device, const char* who) { cuda::require_device(device, who); }"]),
    ("cuda/comm/runtime.hpp", "Runtime::device_of", "host", [
        "static int device_of([[maybe_unused]] Stream s) {", "int d = -1;",
        "check(cudaStreamGetDevice(s, &d), \"cudaStreamGetDevice\");", "return d;"]),
    ("cuda/comm/runtime.hpp", "Runtime::reduce", "host", [
        "static void reduce(Stream s, strata::detail::OpKind op,",
        "detail::launch_reduce_replicas<T>(s, op, b, n, contributors);"]),
    ("cuda/comm/runtime.hpp", "Runtime::check_memory", "host", [
        "static void check_memory(const void* p, int device, const std::string& who) {", "cudaPointerAttributes a{};",
        "const cudaError_t e = cudaPointerGetAttributes(&a, p);", "detail::ignore(e);",
        "if (e != cudaSuccess || (a.type != cudaMemoryTypeDevice", "if (a.type == cudaMemoryTypeDevice && a.device != device)"]),
    ("cuda/comm/runtime.hpp", "Runtime::completion", "host", [
        "static Work completion(int device, Stream s, std::string what, std::string who,",
        "auto watch = std::make_shared<detail::DeadlineWatch>(", "return Work(std::make_unique<detail::EventWork>("]),
    # -- cuda/comm/event_work.hpp: a started sum's Work (the event's creation and record excluded)
    ("cuda/comm/event_work.hpp", "DeadlineWatch::DeadlineWatch", "host", [
        "DeadlineWatch(std::string who, std::chrono::milliseconds timeout,", ": who_(std::move(who)), timeout_(timeout)"]),
    ("cuda/comm/event_work.hpp", "DeadlineWatch::timeout", "host", [
        "[[nodiscard]] std::chrono::milliseconds timeout() const noexcept override { return timeout_; }"]),
    ("cuda/comm/event_work.hpp", "EventWork::EventWork", "host", [
        "EventWork(int device, cudaStream_t stream, std::string what, std::shared_ptr<HostWaitWatch> watch)",
        ": what_(std::move(what)), watch_(std::move(watch)) {", "DeviceGuard g{device};"]),
    # wait(): the first call polls; the Work's destructor calls it again (settle), done_ by then
    ("cuda/comm/event_work.hpp", "EventWork::wait", "host", [
        "void wait() override {", "if (done_) {", "finished();", "return;",
        "poll_until_done([&] { return cudaEventQuery(event_->get()); }", "done_ = true;", "finished();"]),
    ("cuda/comm/event_work.hpp", "EventWork::finished", "host", [
        "bool finished() const {", "if (error_) std::rethrow_exception(error_);", "return true;"]),
    # -- cuda/stream.hpp: the bounded poll, as far as a first query that finds the event complete
    # (later polls, when the sum is still running, add the not-ready lines and poll_pause: not counted)
    ("cuda/stream.hpp", "detail::poll_until_done", "host", [
        "void poll_until_done(Query query, const std::vector<HostWaitWatch*>& watches,",
        "auto timeout = std::chrono::milliseconds::max();",
        "for (const HostWaitWatch* w : watches) timeout = std::min(timeout, w->timeout());",
        "const auto start = std::chrono::steady_clock::now();", "for (int i = 0;; ++i) {",
        "const cudaError_t q = query();", "if (q == cudaSuccess) return;"]),
    # -- comm/work.hpp: a Work over a PolledWork (the stand-in's completions are complete Works)
    ("comm/work.hpp", "Work::Work(unique_ptr<PolledWork>)", "host", [
        "explicit Work(std::unique_ptr<detail::PolledWork> p) noexcept : p_(std::move(p)) {}"]),
    ("comm/work.hpp", "PolledWork::settle", "host", ["virtual void settle() { wait(); }"]),
    # settle's first lines run for the stand-in's complete Works too (shared); these only for a polled one
    ("comm/work.hpp", "Work::settle", "host", ["if (p_) p_->settle();", "s_.reset();", "p_.reset();"]),
    # -- cuda/kernels/collectives.cuh: the replicas' reduce (float, Sum; 16-byte packs, then the tail)
    ("cuda/kernels/collectives.cuh", "launch_reduce_replicas<float>", "host", [
        "void launch_reduce_replicas(cudaStream_t s, strata::detail::OpKind op,", "if (n == 0) return;",
        "switch (op) {", "case OpKind::sum: return launch_reduce_op<T, OpKind::sum>(s, b, n, contributors);"]),
    ("cuda/kernels/collectives.cuh", "launch_reduce_op<float, sum>", "host", [
        "void launch_reduce_op(cudaStream_t s, const ReplicaBuffers<T>& b, std::size_t n, std::size_t contributors) {",
        "bool aligned = true;", "for (int i = 0; i < b.p; ++i) aligned =", "for (int i = 0; i < b.nout; ++i) aligned =",
        "T divisor{};", "if constexpr (!Half16<T>) divisor = static_cast<T>(contributors);", "std::size_t done = 0;",
        "if (aligned && n >= static_cast<std::size_t>(W)) {", "const std::size_t packs = n / W;",
        "launch_packs<T, K, W>(s, b, packs, divisor,", "done = packs * W;", "if (done < n) {",
        "ReplicaBuffers<T> t = b;", "for (int i = 0; i < b.p; ++i) t.in[i] += done;",
        "for (int i = 0; i < b.nout; ++i) t.out[i] += done;", "launch_packs<T, K, 1>(s, t, n - done, divisor,"]),
    ("cuda/kernels/collectives.cuh", "launch_packs<float, sum, 4 and 1>", "host", [
        "void launch_packs(cudaStream_t s, const ReplicaBuffers<T>& b, std::size_t packs, T divisor, const char* what) {",
        "reduce_replicas_kernel<T, K, W><<<", "check_launch(what);"]),
    ("cuda/kernels/collectives.cuh", "reduce_replicas_kernel<float, sum>", "device", [
        "__global__ void reduce_replicas_kernel(ReplicaBuffers<T> b, std::size_t packs, T divisor) {",
        "for (std::size_t i = global_index(); i < packs; i += grid_stride()) {",
        "P acc = reinterpret_cast<const P*>(b.in[0])[i];", "for (int s = 1; s < b.p; ++s) {",
        "const P x = reinterpret_cast<const P*>(b.in[s])[i];",
        "for (int k = 0; k < W; ++k) acc.v[k] = strata::detail::op_of<K>::combine(acc.v[k], x.v[k]);",
        "for (int o = 0; o < b.nout; ++o) reinterpret_cast<P*>(b.out[o])[i] = acc;"]),
]

# Shared element bodies (kernels/bodies/) a GPU step reaches: each function's
# lines are gcov's executable lines of its range that the step executes (the
# same body on the same data as the stand-in). side as above: 'host' bodies run
# on the CPU inside a launcher, 'device' bodies inside a kernel.
# (file, function, side, anchors: texts found in order, the last the function's first line, single: only that line)
BODIES = [
    ("kernels/bodies/activations.hpp", "Linear::operator()", "device", ["struct Linear", "STRATA_HD float operator()(float z) const { return z; }"], True),
    ("kernels/bodies/activations.hpp", "ReLU::operator()", "device", ["struct ReLU", "STRATA_HD float operator()(float z) const"], True),
    ("kernels/bodies/activations.hpp", "ReLU::grad", "device", ["struct ReLU", "STRATA_HD float grad("], True),
    ("kernels/bodies/activations.hpp", "visit_elementwise", "host", ["constexpr bool visit_elementwise(Activation a, F&& f) {"], False),
    ("kernels/bodies/activations.hpp", "activation_needs_input", "host", ["constexpr bool activation_needs_input(Activation a) {"], False),
    # hd.hpp: the first line only (the host's `return a * b;` is g++'s branch; the device's is in GPU_ONLY)
    ("kernels/bodies/hd.hpp", "mul", "device", ["STRATA_HD inline float mul(float a, float b) {"], True),
    ("kernels/bodies/hd.hpp", "add", "device", ["STRATA_HD inline float add(float a, float b) {"], True),
    ("kernels/bodies/hd.hpp", "sub", "device", ["STRATA_HD inline float sub(float a, float b) {"], True),
    ("kernels/bodies/hd.hpp", "div", "device", ["STRATA_HD inline float div(float a, float b) {"], True),
    ("kernels/bodies/hd.hpp", "sqrt", "device", ["STRATA_HD inline float sqrt(float a) {"], True),
    ("kernels/bodies/hd.hpp", "exp", "device", ["STRATA_HD inline float exp(float a) {"], True),
    ("kernels/bodies/hd.hpp", "log", "device", ["STRATA_HD inline float log(float a) {"], True),
    ("kernels/bodies/hd.hpp", "fmax", "device", ["STRATA_HD inline float fmax(float a, float b) {"], True),
    ("kernels/bodies/hd.hpp", "is_nan", "device", ["STRATA_HD inline bool is_nan(float v) { return v != v; }"], True),
    ("kernels/bodies/losses.hpp", "class_of", "device", ["STRATA_HD inline long long class_of(float label, std::size_t classes) {"], False),
    ("kernels/bodies/losses.hpp", "argmax_first", "device", ["STRATA_HD inline std::size_t argmax_first(const float* p, std::size_t n) {"], False),
    ("kernels/bodies/losses.hpp", "has_nan", "device", ["STRATA_HD inline bool has_nan(const float* p, std::size_t n) {"], False),
    ("kernels/bodies/losses.hpp", "sparse_xent_row", "device", ["STRATA_HD double sparse_xent_row("], False),
    ("kernels/bodies/losses.hpp", "sparse_hit_row", "device", ["STRATA_HD inline RowHit sparse_hit_row("], False),
    ("kernels/bodies/losses.hpp", "add_counts", "device", ["STRATA_HD void add_counts("], False),
    ("kernels/bodies/rows.hpp", "lane_sum", "device", ["STRATA_HD float lane_sum("], False),
    ("kernels/bodies/rows.hpp", "lane_max", "device", ["STRATA_HD float lane_max("], False),
    ("kernels/bodies/grid.hpp", "in_order_sum", "device", ["STRATA_HD inline double in_order_sum("], False),
    ("kernels/bodies/reductions.hpp", "column_lane_sum", "device", ["STRATA_HD inline float column_lane_sum("], False),
    ("kernels/bodies/reductions.hpp", "column_lanes_total", "device", ["STRATA_HD inline float column_lanes_total("], False),
    ("kernels/bodies/reductions.hpp", "is_finite", "device", ["STRATA_HD inline bool is_finite(float v)"], True),
    ("kernels/bodies/reductions.hpp", "nonfinite_strided", "device", ["STRATA_HD inline int nonfinite_strided("], False),
    ("kernels/bodies/windows.hpp", "clip_window", "device", ["STRATA_HD inline Span clip_window("], False),
    ("kernels/bodies/windows.hpp", "windows_reaching", "device", ["STRATA_HD inline Span windows_reaching("], False),
    ("kernels/bodies/windows.hpp", "pool_takes", "device", ["STRATA_HD inline bool pool_takes("], True),
    ("kernels/bodies/windows.hpp", "im2col_element", "device", ["STRATA_HD inline float im2col_element("], False),
    ("kernels/bodies/windows.hpp", "max_pool_element", "device", ["STRATA_HD inline float max_pool_element("], False),
    ("kernels/bodies/windows.hpp", "max_pool_backward_element", "device", ["STRATA_HD inline float max_pool_backward_element("], False),
    ("kernels/bodies/optim.hpp", "AdamElement::AdamElement", "host", ["explicit AdamElement(const AdamStep& s)"], False),
    ("kernels/bodies/optim.hpp", "AdamElement::operator()", "device", ["struct AdamElement", "STRATA_HD void operator()(float& w, float g, float& m, float& v) const {"], False),
]

# The several-replica step's body beyond BODIES': the replicas' reduce kernel
# combines with Sum's combine, which the stand-in runs in the host's
# reduce_range (comm/reduce_op.hpp).
MIRRORED_BODIES = [
    ("comm/reduce_op.hpp", "SumOp::combine", "device", ["struct SumOp", "STRATA_HD static constexpr T combine("], True),
]

# Files whose executed lines are shared by a GPU step as the stand-in runs
# them: everything under include/strata but these (the host's compute, the
# bodies, counted above, the CUDA backend, and the stand-in's device runtime
# and collectives, which a GPU replaces with CUDA's).
NOT_SHARED_PREFIXES = ("kernels/host/", "kernels/bodies/", "cuda/", "kernels/recording_compute.hpp",
                       "comm/device/host_runtime.hpp", "device/stand_in_collectives.hpp")
# Shared lines a GPU does not run: Memory's defaults that CudaDeviceOps overrides.
NOT_ON_GPU = [
    ("kernels/memory.hpp", "virtual int bind_thread() { return -1; }"),
    ("kernels/memory.hpp", "virtual void unbind_thread(int /*previous*/) noexcept {}"),
]
