#pragma once
// Tensor-core and async-copy primitives of sm_80+ (inline PTX), shared by the
// kernels that tile through shared memory: asynchronous 16-byte copies global ->
// shared, ldmatrix, and mma.sync in bf16 (m16n8k16) and tf32 (m16n8k8).
//
// Fragment layouts (g = lane / 4, t = lane % 4), row.col:
//   m16n8k16 bf16: A regs {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)} (bf16x2 each),
//                  B regs {(k 2t.., n g), (k 2t+8.., n g)}, C {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}
//   m16n8k8 tf32:  A regs {(g, t), (g+8, t), (g, t+4), (g+8, t+4)}, B regs {(k t, n g), (k t+4, n g)},
//                  C as above.
#include <cuda_bf16.h>

namespace neuron::backend::cuda::kernels {

// 16 bytes global -> shared, asynchronously; !valid: the 16 bytes become zeros and nothing is read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are in flight (a block barrier makes them visible to
// the other threads).
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// c += a b, bf16 operands, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// ---- tf32 ----
// x rounded to tf32 (10 mantissa bits), as the register mma reads.
__device__ __forceinline__ unsigned tf32_of(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// x = hi + lo to about 21 mantissa bits: the operands of a 3xTF32 product.
struct Tf32Split {
  unsigned hi, lo;
};
__device__ __forceinline__ Tf32Split tf32_split(float x) {
  const unsigned hi = tf32_of(x);
  return {hi, tf32_of(x - __uint_as_float(hi))};
}
// An A fragment's four values, split.
__device__ __forceinline__ void tf32_split(const float (&x)[4], unsigned (&hi)[4], unsigned (&lo)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const Tf32Split p = tf32_split(x[q]);
    hi[q] = p.hi;
    lo[q] = p.lo;
  }
}

// c += a b, tf32 operands, f32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c += a b to about f32's precision (3xTF32: the small cross terms first, then hi hi).
__device__ __forceinline__ void mma_tf32x3(float (&c)[4], const unsigned (&a_hi)[4], const unsigned (&a_lo)[4],
                                           Tf32Split b0, Tf32Split b1) {
  mma_tf32(c, a_lo, b0.hi, b1.hi);
  mma_tf32(c, a_hi, b0.lo, b1.lo);
  mma_tf32(c, a_hi, b0.hi, b1.hi);
}

}  // namespace neuron::backend::cuda::kernels
