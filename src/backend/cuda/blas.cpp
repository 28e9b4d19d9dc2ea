#include "backend/cuda/blas.hpp"

#include <string>

#include "util/error.hpp"

namespace neuron::backend::cuda {

Blas::Blas(cudaStream_t stream) : stream_(stream), workspace_(std::size_t{32} << 20) {
  NEURON_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    NEURON_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    NEURON_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
    NEURON_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    NEURON_CUBLAS_CHECK(cublasLtCreate(&lt_));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() {
  if (lt_) cublasLtDestroy(lt_);
  if (handle_) cublasDestroy(handle_);
}

void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, float* y) {
  gemm(x, n, w, rows, cols, y, CUDA_R_32F, rows, 0.f);
}
void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, std::uint16_t* y) {
  gemm(x, n, w, rows, cols, y, CUDA_R_16BF, rows, 0.f);
}
void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, float* y, int ldy,
                  float beta) {
  gemm(x, n, w, rows, cols, y, CUDA_R_32F, ldy, beta);
}
void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, std::uint16_t* y,
                  int ldy) {
  gemm(x, n, w, rows, cols, y, CUDA_R_16BF, ldy, 0.f);
}

// Column-major view: w row-major [rows, cols] is a cols x rows matrix with
// ld = cols, so op(A) = A^T is rows x cols; x row-major [n, cols] is cols x n;
// y row-major [n, ldy] is ldy x n, of which the first rows are written.
void Blas::gemm(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, void* y,
                cudaDataType y_type, int ldy, float beta) {
  if (n <= 0 || rows <= 0) return;
  const float alpha = 1.f;
  NEURON_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w, CUDA_R_16BF, cols, x,
                                   CUDA_R_16BF, cols, &beta, y, y_type, ldy, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

namespace {

// RAII for cuBLASLt's descriptors.
struct LtDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~LtDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct LtLayout {
  cublasLtMatrixLayout_t l = nullptr;
  LtLayout(cudaDataType type, int rows, int cols, int ld) {
    NEURON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                                   static_cast<std::uint64_t>(cols), ld));
  }
  ~LtLayout() { if (l) cublasLtMatrixLayoutDestroy(l); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};
struct LtPreference {
  cublasLtMatmulPreference_t p = nullptr;
  ~LtPreference() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  NEURON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attribute, &value, sizeof(value)));
}

}  // namespace

bool Blas::fp8_linear_scaled(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq,
                             const float* w_scale, int rows, int cols, float* y, int ldy) {
  return fp8_gemm(xq, x_scale, n, wq, w_scale, rows, cols, y, CUDA_R_32F, ldy);
}
bool Blas::fp8_linear_scaled(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq,
                             const float* w_scale, int rows, int cols, std::uint16_t* y, int ldy) {
  return fp8_gemm(xq, x_scale, n, wq, w_scale, rows, cols, y, CUDA_R_16BF, ldy);
}
void Blas::fp8_linear_raw(const std::uint8_t* xq, int n, const std::uint8_t* wq, int rows, int cols, float* acc) {
  if (!fp8_gemm(xq, nullptr, n, wq, nullptr, rows, cols, acc, CUDA_R_32F, rows))
    throw Error(errc::unsupported_arch, "cuBLASLt has no FP8 product for " + std::to_string(n) + " x " +
                                            std::to_string(cols) + " by " + std::to_string(rows) + " x " +
                                            std::to_string(cols) + " on this device");
}

// The column-major view of gemm() above: A = wq (cols x rows, ld cols, transposed: FP8 needs "TN"),
// B = xq (cols x n), D = y (rows x n, ld ldy). Scales, when given, are per row of op(A) and per column of B.
bool Blas::fp8_gemm(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq, const float* w_scale,
                    int rows, int cols, void* y, cudaDataType y_type, int ldy) {
  if (n <= 0 || rows <= 0) return true;
  const bool scaled = w_scale != nullptr;
  LtDesc op;
  NEURON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(op.d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(op.d, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (scaled) {
    set(op.d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F));
    set(op.d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F));
    set(op.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale);
    set(op.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale);
  }
  const LtLayout a(CUDA_R_8F_E4M3, cols, rows, cols), b(CUDA_R_8F_E4M3, cols, n, cols), d(y_type, rows, n, ldy);
  const Fp8Key key{n, rows, cols, ldy, static_cast<int>(y_type), scaled};
  auto it = fp8_algos_.find(key);
  if (it == fp8_algos_.end()) {
    LtPreference pref;
    NEURON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const std::uint64_t ws = workspace_.bytes();
    NEURON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                             sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_, op.d, a.l, b.l, d.l, d.l, pref.p, 1, &result, &found);
    Fp8Algo entry;
    entry.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (entry.found) entry.algo = result.algo;
    if (fp8_algos_.size() >= 4096) fp8_algos_.clear();  // token counts vary: keep the cache bounded
    it = fp8_algos_.emplace(key, entry).first;
  }
  if (!it->second.found) return false;
  const float alpha = 1.f, beta = 0.f;
  NEURON_CUBLAS_CHECK(cublasLtMatmul(lt_, op.d, &alpha, wq, a.l, xq, b.l, &beta, y, d.l, y, d.l, &it->second.algo,
                                     workspace_.data(), workspace_.bytes(), stream_));
  return true;
}

}  // namespace neuron::backend::cuda
