/* mma_util.cuh — the small PTX wrappers the tensor-core matmuls share (matmul_qmma.cu,
 * matmul_qgemm.cu, moe_gemm.cu; the attention kernels for mma16_t): a bf16 m16n8k16 MMA with f32 accumulation, cp.async copies into shared
 * memory with their group commit/wait, the bits of a bf16x2, and a scale/bias value read
 * from the aligned 32-bit word that holds it. Inline only: each kernel file keeps its own
 * tiling; these are the instructions they all spell the same way. */
#ifndef KILN_CUDA_MMA_UTIL_CUH
#define KILN_CUDA_MMA_UTIL_CUH

#include "backend/cuda/cuda_common.cuh"

/* d += A·B on tensor cores: A 16×16 bf16 (four .b32 registers per lane), B 16×8 bf16 (two),
 * d 16×8 f32 (four) in the m16n8k16 fragment layouts */
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* d = A·B (C = 0): the first MMA of a partial sum */
__device__ __forceinline__ void mma_bf16_z(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}

__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t *>(&v); }

/* 16 bytes (through L2 only) / 4 bytes global → shared, asynchronously */
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* wait until at most N committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* MLX codes → bf16x2 for an MMA A fragment (matmul_qgemm.cu, moe_gemm.cu): nibbles at bits
 * [sh, sh+4) and [sh+16, sh+20) of v → bf16x2 (exact) */
__device__ __forceinline__ uint32_t dq4(uint32_t v, int sh) {
    uint32_t t = ((v >> sh) & 0x000F000Fu) | 0x43004300u;
    const __nv_bfloat162 d = __hsub2(*reinterpret_cast<__nv_bfloat162 *>(&t), __floats2bfloat162_rn(128.f, 128.f));
    return bf2_bits(d);
}
/* byte i of w0 (low half) and of w1 (high half) → bf16x2 (exact, through f32 2^23 + c) */
__device__ __forceinline__ uint32_t dq8(uint32_t w0, uint32_t w1, int i) {
    const float f0 = __fsub_rn(__uint_as_float(__byte_perm(w0, 0x4B000000u, 0x7440u | i)), 8388608.f);
    const float f1 = __fsub_rn(__uint_as_float(__byte_perm(w1, 0x4B000000u, 0x7440u | i)), 8388608.f);
    return bf2_bits(__floats2bfloat162_rn(f0, f1));
}

/* The MMA A fragments of two k-steps (32 columns, chunk c of a 64-column stage) for rows ra
 * (g) and rb (g + 8) of staged MLX codes, lane q's columns 8q..8q+7 in qgemm's order: k-step s
 * holds columns 2s + {0, 4} in registers 0/1 and 2s + 1 + {0, 4} in 2/3 (matmul_qgemm.cu,
 * moe_gemm.cu). */
template <int BITS>
__device__ __forceinline__ void qg_afrag(uint32_t (&a)[2][4], const unsigned char *ra, const unsigned char *rb, int c, int q) {
    if constexpr (BITS == 4) {
        const uint32_t va = ((const uint32_t *)ra)[4 * c + q], vb = ((const uint32_t *)rb)[4 * c + q];
#pragma unroll
        for (int s = 0; s < 2; s++) {
            a[s][0] = dq4(va, 8 * s); a[s][1] = dq4(vb, 8 * s);
            a[s][2] = dq4(va, 8 * s + 4); a[s][3] = dq4(vb, 8 * s + 4);
        }
    } else {
        const uint2 va = ((const uint2 *)ra)[4 * c + q], vb = ((const uint2 *)rb)[4 * c + q];
#pragma unroll
        for (int s = 0; s < 2; s++) {
            a[s][0] = dq8(va.x, va.y, 2 * s); a[s][1] = dq8(vb.x, vb.y, 2 * s);
            a[s][2] = dq8(va.x, va.y, 2 * s + 1); a[s][3] = dq8(vb.x, vb.y, 2 * s + 1);
        }
    }
}

/* A scale/bias as staged: the aligned 32-bit word v holding an f32, or two 16-bit values of
 * which the half `odd` is this one (dt: DT_F32, DT_F16 or DT_BF16). */
__device__ __forceinline__ float sb_word_val(uint32_t v, int dt, int odd) {
    if (dt == DT_F32) return __uint_as_float(v);
    const unsigned short h = (unsigned short)(odd ? v >> 16 : v & 0xffffu);
    return dt == DT_F16 ? __half2float(__ushort_as_half(h)) : __uint_as_float((uint32_t)h << 16);
}

/* The 16-bit K/V types' m16n8k16 pieces for kernels templated on f16 or bf16 (attention_mma.cu,
 * attention.cu's decode kernel): a float pair packed to / unpacked from one .b32 register, and
 * d += A·B with f32 accumulation in that type. */
template <typename T16> struct mma16_t;
template <> struct mma16_t<__half> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        return *(uint32_t *)&h;
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) { return __half22float2(*(__half2 *)&u); }
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct mma16_t<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(uint32_t *)&h;
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) { return __bfloat1622float2(*(__nv_bfloat162 *)&u); }
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
/* (a, b) as two 16-bit terms: hi = r(x), lo = r(x - hi) */
template <typename T16>
__device__ __forceinline__ void mma16_split2(float a, float b, uint32_t &hi, uint32_t &lo) {
    hi = mma16_t<T16>::pack(a, b);
    const float2 h = mma16_t<T16>::unpack(hi);
    lo = mma16_t<T16>::pack(a - h.x, b - h.y);
}

#endif
