/* rope.cu — rotate-half RoPE in place on x[T, n_heads, head_dim].
 *
 * Reference: ref_rope in backend/cpu/ref.c. One thread per (token, frequency i) computes
 * cos/sin once (full-precision cosf/sinf, as the CPU does) and rotates the pair
 * (i, i + rot/2) in every head. The frequencies come from the host (the model recomputes
 * them per row for dynamic NTK scaling), so they travel like the positions do. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/rope_pair.cuh"

/* A thread per (token, head, rotated pair): at batch-1 decode the old thread-per-pair loop
 * over heads was a chain of dependent loads (~10 us per call for 32 heads). */
/* rope_pair (rope_pair.cuh) rotates pair (i, i + half) of a head vector: the one formula
 * these kernels and attention.cu's fused decode kernel use. */

__global__ void rope_kernel(float *x, const int32_t *pos, int T, int nh, int hd, int half, const float *inv, float ms) {
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * nh * half) return;
    const int i = (int)(idx % half);
    const size_t th = idx / half; /* t * nh + h */
    const int t = (int)(th / nh);
    float ra, rb;
    rope_pair(x + th * hd, i, half, pos[t], inv, ms, ra, rb);
}

__device__ __forceinline__ void kv_store(void *cache, int dt, size_t i, float v) {
    if (dt == DT_F32) ((float *)cache)[i] = v;
    else if (dt == DT_F16) ((__half *)cache)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)cache)[i] = __float2bfloat16_rn(v);
}

/* rope(q), rope(k), kv_write(k, v) in one launch (backend.h rope_kv_write): threads
 * [0, A) rotate q pairs, [A, A + B) rotate k pairs and store them in the cache too,
 * [A + B, A + B + C) store v and k's unrotated dims. Same formulas and roundings as the
 * three ops (rope_pair, kv_write's __float2*_rn): bitwise the same cache and q/k. */
__global__ void rope_kv_kernel(float *q, float *k, const float *v, const int32_t *pos, const int32_t *slots, int T, int nh, int nkv,
                               int hd, int half, const float *inv, float ms, void *kc, void *vc, int dt) {
    pdl_trigger(); /* PDL (cuda_common.cuh): launched early, reads q/k/v after the wait */
    pdl_wait();
    const size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t A = (size_t)T * nh * half, B = (size_t)T * nkv * half, C = (size_t)T * nkv * hd;
    const size_t per = (size_t)nkv * hd;
    float ra, rb;
    if (idx < A) {
        const int i = (int)(idx % half);
        const size_t th = idx / half;
        rope_pair(q + th * hd, i, half, pos[th / nh], inv, ms, ra, rb);
    } else if (idx < A + B) {
        const size_t j = idx - A, th = j / half; /* t * nkv + h */
        const int i = (int)(j % half), t = (int)(th / nkv), h = (int)(th % nkv);
        rope_pair(k + th * hd, i, half, pos[t], inv, ms, ra, rb);
        const size_t dst = (size_t)slots[t] * per + (size_t)h * hd;
        kv_store(kc, dt, dst + i, ra);
        kv_store(kc, dt, dst + i + half, rb);
    } else if (idx < A + B + C) {
        const size_t j = idx - A - B;
        const int t = (int)(j / per), e = (int)(j % per), dim = e % hd;
        const size_t dst = (size_t)slots[t] * per + e;
        kv_store(vc, dt, dst, v[j]);
        if (dim >= 2 * half) kv_store(kc, dt, dst, k[j]); /* not rotated: no thread above writes it */
    }
}

void cuda_rope_kv_write(backend_t *be, float *q, float *k, const float *v, const int32_t *pos, int T, int nh, int nkv, int hd, int rot,
                        const float *inv, float ms, const kv_view_t *kv, const int32_t *slots) {
    const int half = rot / 2;
    if (T <= 0) return;
    if (half <= 0 || kv->n_kv_heads != nkv || kv->head_dim != hd) {
        cuda_rope(be, q, pos, T, nh, hd, rot, inv, ms);
        cuda_rope(be, k, pos, T, nkv, hd, rot, inv, ms);
        cuda_kv_write(be, kv, k, v, slots, T);
        return;
    }
    cuda_impl_t *c = cuda_impl(be);
    size_t pb = sizeof(int32_t) * T, ib = sizeof(float) * half;
    char *hb = (char *)cuda_host_buf(c, 1, 2 * pb + ib);
    memcpy(hb, pos, pb);
    memcpy(hb + pb, slots, pb);
    memcpy(hb + 2 * pb, inv, ib);
    const char *d = (const char *)cuda_host_to_dev(c, hb, 2 * pb + ib);
    const size_t n = (size_t)T * (nh + nkv) * half + (size_t)T * nkv * hd;
    cuda_launch_pdl(c->stream, rope_kv_kernel, cdiv((long)n, 128), 128, 0, q, k, v, (const int32_t *)d, (const int32_t *)(d + pb), T, nh, nkv,
                    hd, half, (const float *)(d + 2 * pb), ms, kv->k, kv->v, (int)kv->dtype);
}

void cuda_rope(backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms) {
    int half = rot / 2;
    if (T <= 0 || half <= 0) return;
    cuda_impl_t *c = cuda_impl(be);
    size_t pb = sizeof(int32_t) * T, ib = sizeof(float) * half;
    char *hb = (char *)cuda_host_buf(c, 1, pb + ib);
    memcpy(hb, pos, pb);
    memcpy(hb + pb, inv, ib);
    const char *d = (const char *)cuda_host_to_dev(c, hb, pb + ib);
    const int32_t *dpos = (const int32_t *)d;
    const float *dinv = (const float *)(d + pb);
    const size_t n = (size_t)T * nh * half;
    rope_kernel<<<cdiv((long)n, 128), 128, 0, c->stream>>>(x, dpos, T, nh, hd, half, dinv, ms);
    cudaLaunchCheck();
}

/* qwen3's per-head q/k RMSNorm folded into rope_kv_write (backend.h norm_rope_kv_attention, then
 * attention): one 64-thread block per (token, head), q heads first, then k heads (each also stores
 * its head's v). The norm is rms_norm_kernel<64>'s (rmsnorm.cu) for n = hd <= 256: the same
 * strided fmaf sums, xor tree and warp-sum order, the same inv and (x·inv)·(off + w) steps; the
 * normalized head goes to shared memory, rope_pair rotates it there (the same function as
 * rope_kv_kernel), then q/k and the cache get the values those kernels store: bitwise the three
 * launches (rms_norm q, rms_norm k, rope_kv_write), which qwen3's batch-1 decode paid ~8 us for. */
__global__ void __launch_bounds__(64) norm_rope_kv_kernel(float *q, float *k, const float *v, const float *qn, const float *kn, float off,
                                                          float eps, const int32_t *pos, const int32_t *slots, int T, int nh, int nkv, int hd,
                                                          int half, const float *inv, float ms, void *kc, void *vc, int dt) {
    extern __shared__ float nrk_head[]; /* [hd] */
    __shared__ float warp_sums[2];
    pdl_trigger(); /* PDL: the attention kernel may launch; q/k/v are read after the wait */
    pdl_wait();
    const int isq = blockIdx.x < (unsigned)(T * nh);
    const size_t th = isq ? blockIdx.x : blockIdx.x - (size_t)T * nh; /* t * nh + h, or t * nkv + h */
    float *x = (isq ? q : k) + th * hd;
    const float *w = isq ? qn : kn;
    const int t = (int)(th / (isq ? nh : nkv));
    float ss = 0.f;
    for (int i = threadIdx.x; i < hd; i += 64) ss = fmaf(x[i], x[i], ss);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < 2; i++) tot += warp_sums[i];
    const float r = 1.0f / sqrtf(tot / (float)hd + eps);
    for (int i = threadIdx.x; i < hd; i += 64) nrk_head[i] = (x[i] * r) * (w ? (off + w[i]) : 1.0f);
    __syncthreads();
    float ra, rb;
    for (int i = threadIdx.x; i < half; i += 64) rope_pair(nrk_head, i, half, pos[t], inv, ms, ra, rb);
    __syncthreads();
    if (isq) {
        for (int i = threadIdx.x; i < hd; i += 64) x[i] = nrk_head[i];
        return;
    }
    const int h = (int)(th % nkv);
    const size_t dst = (size_t)slots[t] * nkv * hd + (size_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += 64) {
        const float val = nrk_head[i];
        x[i] = val;
        kv_store(kc, dt, dst + i, val);
        kv_store(vc, dt, dst + i, v[th * hd + i]);
    }
}

/* The same (token, head) items a warp each, 8 to a 256-thread block, for prefill-sized steps (many
 * thousands of items: the 64-thread blocks above paid three block barriers per 512-byte head and
 * loaded x, then the norm weight, then the angles, then v, one latency after another — 63 us a
 * qwen3-0.6b layer at 2048 tokens, 1.0 TB/s; ncu, bench/cuda/RESULTS.md session 15). Every load of
 * the item (x, the norm weight, v, the position, slot and frequencies) is issued first, into
 * registers (hd <= 256: 8 values a lane; rot/2 <= 128: 4 angles a lane). Bitwise the kernel
 * above: lane l keeps the partial sums of that kernel's threads l and l + 32 (elements l + 64j
 * and l + 32 + 64j, the same fmaf chains), reduces each with the same xor tree (every lane ends
 * with its warp's sum) and adds them as its warp_sums loop does, (0 + warp 0) + warp 1; the same
 * inv and scaling follow, and rope_pair's two halves (rope_cs, rope_rot) on the warp's own head in
 * shared memory. */
/* TOK (session 17, helper-h100; the default where nh and nkv are multiples of NRW_WARPS, so a
 * block's 8 items are heads of one token): the block's first `half` threads take the token's
 * angles once (rope_cs, the same function and arguments: the same bits) into shared memory, one
 * block barrier, and the rotation reads them there, instead of every warp taking all of them —
 * 4 cosf/sinf a lane a head, 24 heads a qwen3 token; the token and head come from 32-bit
 * arithmetic (the 64-bit divisions cost ~100 instructions of the item); NJ = 4 values a lane where
 * hd <= 128 (the generic 8 for hd <= 256 held 58 registers: 4 blocks an SM). ncu had the old form
 * issue-bound (0.87 issues a cycle a scheduler, ~400 instructions an item); a bound of 6 blocks
 * an SM gives 40 registers without spills (8 blocks: 32 registers and 72 bytes spilled). The
 * sums, roundings and stores are the same (elements past hd were skipped anyway): bitwise.
 * qwen3-0.6b, 2048 tokens, ncu: 34-35 → 22-23 µs a layer. KILN_CUDA_NORM_ROPE=warp: the kernel
 * as before (TOK off, NJ 8), for the A/B. */
#define NRW_WARPS 8
template <bool TOK, int NJ>
__global__ void __launch_bounds__(32 * NRW_WARPS, TOK && NJ == 4 ? 6 : 1) norm_rope_kv_warp_kernel(float *q, float *k, const float *v, const float *qn,
                                                                          const float *kn, float off, float eps, const int32_t *pos,
                                                                          const int32_t *slots, int T, int nh, int nkv, int hd, int half,
                                                                          const float *inv, float ms, void *kc, void *vc, int dt) {
    extern __shared__ float nrw_heads[]; /* [NRW_WARPS][hd], TOK: then cos[half], sin[half] */
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    int isq, t, hh; /* q or k, token, head */
    size_t th;      /* t * nh + h, or t * nkv + h */
    if (TOK) {      /* the block's token and first head in 32-bit arithmetic (the host checks T·(nh + nkv) < 2^31): the
                     * other branch's 64-bit divisions cost ~100 instructions of a ~400-instruction item */
        const unsigned b8 = blockIdx.x * NRW_WARPS, nq32 = (unsigned)T * nh;
        isq = b8 < nq32;
        const unsigned base = isq ? b8 : b8 - nq32, nhh = isq ? nh : nkv;
        t = (int)(base / nhh);
        hh = (int)(base - (unsigned)t * nhh) + wi;
        th = (size_t)t * nhh + hh;
    } else {
        const size_t item = (size_t)blockIdx.x * NRW_WARPS + wi, nq = (size_t)T * nh;
        if (item >= nq + (size_t)T * nkv) return; /* whole warps: no block barrier below */
        isq = item < nq;
        th = isq ? item : item - nq;
        t = (int)(th / (isq ? nh : nkv));
        hh = isq ? 0 : (int)(th % nkv);
    }
    float *x = (isq ? q : k) + th * hd, *head = nrw_heads + wi * hd;
    const float *w = isq ? qn : kn;
    float xv[NJ], wv[NJ], vv[NJ], cs[TOK ? 1 : 4], sn[TOK ? 1 : 4];
    const float *scs = nrw_heads + NRW_WARPS * hd, *ssn = scs + half;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int i = lane + 32 * j;
        xv[j] = i < hd ? x[i] : 0.f;
        wv[j] = w && i < hd ? w[i] : 0.f;
        vv[j] = !isq && i < hd ? v[th * hd + i] : 0.f;
    }
    const int p = pos[t];
    const size_t dst = isq ? 0 : (size_t)slots[t] * nkv * hd + (size_t)hh * hd;
    if (TOK) {
        for (int i = threadIdx.x; i < half; i += 32 * NRW_WARPS) rope_cs(i, p, inv, ms, nrw_heads[NRW_WARPS * hd + i], nrw_heads[NRW_WARPS * hd + half + i]);
        __syncthreads();
    } else
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (lane + 32 * j < half) rope_cs(lane + 32 * j, p, inv, ms, cs[j], sn[j]);
    float sa = 0.f, sb = 0.f; /* threads lane and lane + 32 of the 64-thread kernel */
#pragma unroll
    for (int j = 0; j < NJ; j += 2)
        if (lane + 32 * j < hd) sa = fmaf(xv[j], xv[j], sa);
#pragma unroll
    for (int j = 1; j < NJ; j += 2)
        if (lane + 32 * j < hd) sb = fmaf(xv[j], xv[j], sb);
    for (int o = 16; o > 0; o >>= 1) sa += __shfl_xor_sync(0xffffffffu, sa, o);
    for (int o = 16; o > 0; o >>= 1) sb += __shfl_xor_sync(0xffffffffu, sb, o);
    float tot = 0.f;
    tot += sa;
    tot += sb;
    const float r = 1.0f / sqrtf(tot / (float)hd + eps);
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (lane + 32 * j < hd) head[lane + 32 * j] = (xv[j] * r) * (w ? (off + wv[j]) : 1.0f);
    __syncwarp();
    float ra, rb;
    if (TOK) {
#pragma unroll
        for (int j = 0; j < NJ / 2; j++)
            if (lane + 32 * j < half) rope_rot(head, lane + 32 * j, half, scs[lane + 32 * j], ssn[lane + 32 * j], ra, rb);
    } else
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (lane + 32 * j < half) rope_rot(head, lane + 32 * j, half, cs[j], sn[j], ra, rb);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int i = lane + 32 * j;
        if (i >= hd) break;
        const float val = head[i];
        x[i] = val;
        if (!isq) {
            kv_store(kc, dt, dst + i, val);
            kv_store(vc, dt, dst + i, vv[j]);
        }
    }
}

/* KILN_CUDA_NORM_ROPE=0: the separate ops (A/B); =block: the 64-thread blocks at every size (the
 * warp kernel takes steps of 64 tokens or more by default); =warp: the warp kernel without the
 * block's shared angles (TOK) */
static int norm_rope_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_CUDA_NORM_ROPE");
        on = !(e && !strcmp(e, "0"));
        if (on && e && !strcmp(e, "block")) on = 2;
        if (on && e && !strcmp(e, "warp")) on = 3;
    }
    return on;
}

/* the norm + rope kernels' host arrays in one upload: positions [T], slots [T], frequencies [half] */
static const char *nrk_upload(cuda_impl_t *c, const attn_args_t *a, const int32_t *slots, const float *inv, int T, int half) {
    const size_t pb = sizeof(int32_t) * T, ib = sizeof(float) * half;
    char *hb = (char *)cuda_host_buf(c, 1, 2 * pb + ib);
    memcpy(hb, a->pos, pb);
    memcpy(hb + pb, slots, pb);
    memcpy(hb + 2 * pb, inv, ib);
    return (const char *)cuda_host_to_dev(c, hb, 2 * pb + ib);
}

/* norm_rope_kv_warp_kernel<true, 4|8> (the TOK form: nh and nkv multiples of NRW_WARPS, either may be 0) over q's nh
 * heads and k's nkv heads of T tokens: the fold's passes over one side only */
static void nrk_warp_launch(backend_t *be, float *q, float *k, const float *v, const float *qn, const float *kn, float eps, int T, int nh,
                            int nkv, int hd, int half, const float *inv, float ms, const int32_t *slots, const attn_args_t *a) {
    cuda_impl_t *c = cuda_impl(be);
    const size_t pb = sizeof(int32_t) * T;
    const char *d = nrk_upload(c, a, slots, inv, T, half);
    cuda_launch_pdl(c->stream, hd <= 128 ? norm_rope_kv_warp_kernel<true, 4> : norm_rope_kv_warp_kernel<true, 8>,
                    cdiv((long)T * (nh + nkv), NRW_WARPS), 32 * NRW_WARPS, sizeof(float) * (hd * NRW_WARPS + 2 * half), q, k, v, qn, kn, 0.f,
                    eps, (const int32_t *)d, (const int32_t *)(d + pb), T, nh, nkv, hd, half, (const float *)(d + 2 * pb), ms, a->kv.k,
                    a->kv.v, (int)a->kv.dtype);
}

int cuda_attention_wg_qfold(backend_t *be, float *out, const float *q, int T, const attn_args_t *aa, const float *qn, float eps, int rot,
                            const float *inv, float ms); /* attention_wgmma.cu */
int cuda_qfold_on(void);                                 /* attention_wgmma.cu: KILN_CUDA_QFOLD=1 */

void cuda_norm_rope_kv_attention(backend_t *be, float *out, float *q, float *k, const float *v, const float *qn, const float *kn, float eps,
                                 int rot, const float *inv, float ms, const int32_t *slots, int T, const attn_args_t *a) {
    const int nh = a->n_heads, nkv = a->n_kv_heads, hd = a->head_dim, half = rot / 2;
    if (T <= 0) return;
    /* a decode step the tensor-core decode kernel takes: qwen3's head norms (where this op would fold
     * them: KILN_CUDA_NORM_ROPE not 0), rope, the cache write and the attention in that one kernel
     * (attention.cu; KILN_CUDA_ATTN_ROPE=0: not; KILN_CUDA_ATTN_NORM=0: not with head norms) */
    if ((!qn || norm_rope_on()) && cuda_rope_attention_decode(be, out, q, k, v, qn, kn, eps, rot, inv, ms, slots, T, a)) return;
    /* prefill on attention_wgmma.cu: q's head norm and rope in its Q load (cuda_attention_wg_qfold), so this op's
     * pass does the k heads and the cache only and q is neither rewritten nor read twice; where that kernel then
     * declines the step, q gets the pass it would have had (its own launch: the same kernels, nkv = 0, and the
     * same bits) and the attention runs as below */
    const int fold = T >= 64 && cuda_qfold_on() && rot == hd && (hd == 64 || hd == 128) && a->kv.n_kv_heads == nkv && a->kv.head_dim == hd &&
                     (long)T * (nh + nkv) < (1l << 31) &&
                     ((!qn && !kn) || (qn && kn && norm_rope_on() == 1 && nh % NRW_WARPS == 0 && nkv % NRW_WARPS == 0));
    if (fold) {
        if (!qn) cuda_rope_kv_write(be, q, k, v, a->pos, T, 0, nkv, hd, rot, inv, ms, &a->kv, slots);
        else nrk_warp_launch(be, q, k, v, qn, kn, eps, T, 0, nkv, hd, half, inv, ms, slots, a);
        if (cuda_attention_wg_qfold(be, out, q, T, a, qn, eps, rot, inv, ms)) return;
        if (!qn) cuda_rope(be, q, a->pos, T, nh, hd, rot, inv, ms);
        else nrk_warp_launch(be, q, k, v, qn, kn, eps, T, nh, 0, hd, half, inv, ms, slots, a);
        cuda_attention(be, out, q, T, a);
        return;
    }
    if (!qn || !kn || half <= 0 || hd > 256 || a->kv.n_kv_heads != nkv || a->kv.head_dim != hd || !norm_rope_on()) {
        if (qn) cuda_rms_norm(be, q, q, qn, 0.f, T * nh, hd, eps);
        if (kn) cuda_rms_norm(be, k, k, kn, 0.f, T * nkv, hd, eps);
        cuda_rope_kv_write(be, q, k, v, a->pos, T, nh, nkv, hd, rot, inv, ms, &a->kv, slots);
    } else {
        cuda_impl_t *c = cuda_impl(be);
        const size_t pb = sizeof(int32_t) * T;
        const char *d = nrk_upload(c, a, slots, inv, T, half);
        const int tok = nh % NRW_WARPS == 0 && nkv % NRW_WARPS == 0 && norm_rope_on() == 1 && (long)T * (nh + nkv) < (1l << 31);
        if (T >= 64 && (norm_rope_on() == 1 || norm_rope_on() == 3))
            cuda_launch_pdl(c->stream,
                            !tok ? norm_rope_kv_warp_kernel<false, 8> : hd <= 128 ? norm_rope_kv_warp_kernel<true, 4> : norm_rope_kv_warp_kernel<true, 8>,
                            cdiv((long)T * (nh + nkv), NRW_WARPS),
                            32 * NRW_WARPS, sizeof(float) * (hd * NRW_WARPS + (tok ? 2 * half : 0)), q, k, v, qn, kn, 0.f, eps, (const int32_t *)d,
                            (const int32_t *)(d + pb), T, nh, nkv, hd, half, (const float *)(d + 2 * pb), ms, a->kv.k, a->kv.v, (int)a->kv.dtype);
        else
            cuda_launch_pdl(c->stream, norm_rope_kv_kernel, T * (nh + nkv), 64, sizeof(float) * hd, q, k, v, qn, kn, 0.f, eps,
                            (const int32_t *)d, (const int32_t *)(d + pb), T, nh, nkv, hd, half, (const float *)(d + 2 * pb), ms, a->kv.k,
                            a->kv.v, (int)a->kv.dtype);
    }
    cuda_attention(be, out, q, T, a);
}
