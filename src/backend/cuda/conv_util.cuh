/* conv_util.cuh — one output of the causal conv1d (backend.h conv1d_causal), shared by
 * hybrid.cu's conv1d_kernel and deltanet.cu's delta_decode_kernel, so that the fused decode op
 * gives the separate conv's floats bitwise: the same taps, the same sum order (k ascending from
 * 0, then the current token), the same activation. K ≤ CONV_KMAX (Qwen3.5 and Qwen3-Next: 4). */
#ifndef KILN_CONV_UTIL_CUH
#define KILN_CONV_UTIL_CUH

#define CONV_KMAX 8

__device__ __forceinline__ float act_dev(float v, int act) {
    if (act == ACT_SILU) return v / (1.0f + expf(-v));
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

/* act(Σ_{k<H} wc[k]·win[k] + wc[H]·xt): win[k] is the input H - k tokens before the current one xt */
__device__ __forceinline__ float conv_out(const float (&wc)[CONV_KMAX], const float (&win)[CONV_KMAX], int H, float xt, int act) {
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < CONV_KMAX - 1; k++)
        if (k < H) acc += wc[k] * win[k];
    float wl = wc[0];
#pragma unroll
    for (int k = 1; k < CONV_KMAX; k++)
        if (k == H) wl = wc[k];
    acc += wl * xt;
    return act_dev(acc, act);
}

#endif
