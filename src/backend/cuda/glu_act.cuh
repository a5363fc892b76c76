/* glu_act.cuh — act(g) · u of the GLU op (backend.h glu), one element, for every kernel that
 * computes it: elementwise.cu's glu_kernel and the GEMV that writes the GLU of its gate/up rows
 * directly (matmul_gemv.cu, backend.h matmul_glu). Every step is an explicit _rn intrinsic, so
 * no FMA contraction can differ between the two call sites: the fused op gives bitwise the
 * separate ops' result. The formulas are ref_glu's (backend/cpu/ref.c), in its order:
 * silu g / (1 + exp(-g)); gelu-tanh (0.5·g)·(1 + tanh(0.79788456·(g + ((0.044715·g)·g)·g))). */
#ifndef KILN_GLU_ACT_CUH
#define KILN_GLU_ACT_CUH

__device__ __forceinline__ float glu_act(float g, float u, int gelu) {
    float a;
    if (!gelu) a = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    else {
        const float c3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
        a = __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(__fmul_rn(0.7978845608028654f, __fadd_rn(g, c3)))));
    }
    return __fmul_rn(a, u);
}

#endif
