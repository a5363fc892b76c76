/* xprep.cu — the host side of x prepared by its producer for the batch-1 q4/q8 GEMV (xprep.cuh has
 * the format and the device code; the producers are rms_norm4_kernel in rmsnorm.cu and the GLU in
 * elementwise.cu, the consumer matmul_gemv_tc.cu's TC_PREP mode).
 *
 * KILN_CUDA_XPREP (read when a backend is created), bits: 1 the norms (rms_norm, add_rms_norm at one
 * token) prepare their output — bitwise the GEMV's own preparation; 2 the GLU prepares its output
 * with an exponent per span (its blocks cannot see the whole of x: each x' keeps at least as many
 * bits, not bitwise); 4 (without 2) the GLU in one block with one exponent (bitwise). 0 (default):
 * off, every GEMV block prepares x itself as before. Opt-in: measured (bench/cuda/RESULTS.md, session
 * 11, helper-68) llama-3-8b q4 decode 367.8 tok/s off, 353.6 with 1 (the one-block norm's extra
 * latency ate the GEMVs' saving), 324.5 with 5 (one GLU block: +14 µs), 375.2 with 3 (one run).
 *
 * Which format (bits, unit) a producer writes: the one the last GEMV with that K used (a hint
 * table filled by matmul_gemv_tc.cu); a GEMV takes the prepared x only where the record names its
 * own x, K and format. The record must not outlive x's contents: the backend's op table is wrapped
 * so that every op other than the producers and the matmuls forgets it before it runs, and the
 * matmuls forget it after they run where their outputs overlap x. So a model that writes x between
 * its producer and its GEMV gets the GEMV's own preparation, never a stale one.
 *
 * The same wrappers keep the bf16 copy of a prefill activation honest (x16.cuh, KILN_CUDA_X16,
 * default on for "cuda"): its record {x, n} is forgotten exactly where the prepared x's is. The
 * wrappers are installed where either is on. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/xprep.cuh"
#include "backend/cuda/x16.cuh"
#include "backend/cuda/wgx.cuh"

#define XP_CAP (1u << 20) /* the prepared x: ~3.3 bytes a column, K up to ~300k */

/* the state of one backend (cuda_impl_t stays as it is: kept here, found by the backend's impl) */
typedef struct {
    cuda_impl_t *c;
    int mode;
    const backend_ops_t *base; /* the table the wrappers call */
    char *buf;
    struct { const float *x; int K, bits, nu; long seq; } rec; /* x NULL: none */
    struct { int K, bits, nu; } fmt[8];
    int nfmt, next;
    long seq, used;
    /* x16.cuh: on, the buffer, the record (conv: made by a matmul's conversion, usable only while
     * multi is set), the element counts conversions saw (the producers' hint) */
    int x16_on, x16_multi;
    __nv_bfloat16 *x16;           /* the buffer written last (the record's): one of x16b */
    __nv_bfloat16 *x16b[2];       /* taken in turn, so a kernel that reads one record and writes the */
    size_t x16b_bytes[2];         /* next (matmul_bfmma's GLU) never writes what it reads */
    int x16_cur;
    struct { const float *x; size_t n; long seq; int conv, half; } x16_rec; /* half: the copy is f16(y), unscaled */
    size_t x16_hint[16];
    int x16_nh, x16_next;
    size_t x16h_hint[8]; /* element counts whose f16 copy a matmul asked for (cuda_x16h_note) */
    int x16h_nh, x16h_next;
    long x16_used;
    /* wgx.cuh: the 64-token matmul's x prepared by its norm — the (K, NP) pairs the matmuls asked for, the
     * buffer, the record */
    struct { int K, NP; } wgx_fmt[8];
    int wgx_n, wgx_next;
    unsigned char *wgx_buf;
    size_t wgx_bytes;
    struct { const float *x; int T, K, NP; long seq; } wgx_rec;
    long wgx_used;
} xp_state_t;
static xp_state_t xps[16];
static xp_state_t *xs(const cuda_impl_t *c) {
    for (int i = 0; i < 16; i++)
        if (xps[i].c == c) return &xps[i];
    return NULL;
}

int cuda_xp_mode(cuda_impl_t *c) {
    const xp_state_t *s = xs(c);
    return s ? s->mode : 0;
}

int cuda_xp_want(cuda_impl_t *c, int T, int K, int glu, xp_dst *d) {
    xp_state_t *s = T == 1 ? xs(c) : NULL;
    if (!s || K <= 0 || !(s->mode & (glu ? 6 : 1))) return 0;
    for (int i = 0; i < s->nfmt; i++) {
        if (s->fmt[i].K != K) continue;
        const int bits = s->fmt[i].bits, nu = s->fmt[i].nu, U = xp_span(bits) / nu;
        if (K % U || (K / U) % 4 || xp_bytes(bits, nu, K) > XP_CAP) return 0;
        d->p = s->buf; d->bits = bits; d->nu = nu; d->K = K;
        return 1;
    }
    return 0;
}

void cuda_xp_set(cuda_impl_t *c, const float *y, const xp_dst *d) {
    xp_state_t *s = xs(c);
    if (!s) return;
    s->rec.x = y; s->rec.K = d->K; s->rec.bits = d->bits; s->rec.nu = d->nu; s->rec.seq = ++s->seq;
}

void cuda_xp_note(cuda_impl_t *c, int K, int bits, int nu) {
    xp_state_t *s = xs(c);
    if (!s) return;
    int i = 0;
    while (i < s->nfmt && s->fmt[i].K != K) i++;
    if (i == 8) { i = s->next; s->next = (s->next + 1) % 8; } /* full: replace the oldest entry */
    else if (i == s->nfmt) s->nfmt++;
    s->fmt[i].K = K; s->fmt[i].bits = bits; s->fmt[i].nu = nu;
}

const char *cuda_xp_get(cuda_impl_t *c, const float *x, int K, int bits, int nu) {
    xp_state_t *s = xs(c);
    if (!s || !x || s->rec.x != x || s->rec.K != K || s->rec.bits != bits || s->rec.nu != nu) return NULL;
    s->used++;
    return s->buf;
}

/* --- wgx.cuh --- */
/* KILN_CUDA_WGX=0 (read once): no hints, so every 64-token matmul prepares its own x (A/B) */
static int wgx_on(void) {
    static int v = -1;
    if (v < 0) { const char *e = getenv("KILN_CUDA_WGX"); v = !(e && !strcmp(e, "0")); }
    return v;
}
void cuda_wgx_note(cuda_impl_t *c, int K, int NP) {
    xp_state_t *s = xs(c);
    if (!s || !wgx_on()) return;
    for (int i = 0; i < s->wgx_n; i++)
        if (s->wgx_fmt[i].K == K && s->wgx_fmt[i].NP == NP) return;
    int i = s->wgx_n;
    if (i == 8) { i = s->wgx_next; s->wgx_next = (s->wgx_next + 1) % 8; } /* full: replace the oldest entry */
    else s->wgx_n++;
    s->wgx_fmt[i].K = K; s->wgx_fmt[i].NP = NP;
}
unsigned char *cuda_wgx_want(cuda_impl_t *c, int T, int K, int *NP) {
    xp_state_t *s = xs(c);
    /* the buckets that take prepared x: 9..64 tokens, and the 16-token bucket's 2..8 (cuda_qwg_s16) past the
     * steps the tensor-core GEMV takes (its matmuls prepare x themselves) */
    const int lo = cuda_qwg_s16() ? (cuda_gemv_tc_max_t() >= 2 ? cuda_gemv_tc_max_t() + 1 : 2) : 9;
    if (!s || T < lo || T > 64 || K % 64) return NULL;
    const int np = T <= 16 ? 16 : T <= 32 ? 32 : 64;
    for (int i = 0; i < s->wgx_n; i++)
        if (s->wgx_fmt[i].K == K && s->wgx_fmt[i].NP == np) {
            s->wgx_rec.x = NULL; /* the buffer is about to change */
            void *p = s->wgx_buf;
            cuda_scratch(c, &p, &s->wgx_bytes, wgx_xbytes(K, np) + 256); /* growth: synchronizes first */
            s->wgx_buf = (unsigned char *)p;
            *NP = np;
            return s->wgx_buf;
        }
    return NULL;
}
void cuda_wgx_set(cuda_impl_t *c, const float *y, int T, int K, int NP) {
    xp_state_t *s = xs(c);
    if (!s) return;
    s->wgx_rec.x = y; s->wgx_rec.T = T; s->wgx_rec.K = K; s->wgx_rec.NP = NP; s->wgx_rec.seq = ++s->seq;
}
const unsigned char *cuda_wgx_get(cuda_impl_t *c, const float *x, int T, int K, int NP) {
    xp_state_t *s = xs(c);
    if (!s || !x || s->wgx_rec.x != x || s->wgx_rec.T != T || s->wgx_rec.K != K || s->wgx_rec.NP != NP) return NULL;
    s->wgx_used++;
    return s->wgx_buf;
}

/* --- x16.cuh --- */
static xp_state_t *x16s(cuda_impl_t *c) {
    xp_state_t *s = xs(c);
    return s && s->x16_on ? s : NULL;
}
static __nv_bfloat16 *x16_buf(cuda_impl_t *c, xp_state_t *s, size_t n) {
    const int k = s->x16_cur ^ 1; /* not the buffer the current record (if any) is in */
    void *p = s->x16b[k];
    cuda_scratch(c, &p, &s->x16b_bytes[k], n * sizeof(__nv_bfloat16)); /* growth: synchronizes first */
    s->x16b[k] = (__nv_bfloat16 *)p;
    s->x16_cur = k;
    s->x16 = s->x16b[k];
    return s->x16;
}
__nv_bfloat16 *cuda_x16_want(cuda_impl_t *c, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !n) return NULL;
    for (int i = 0; i < s->x16_nh; i++)
        if (s->x16_hint[i] == n) {
            s->x16_rec.x = NULL; /* the buffer is about to change */
            return x16_buf(c, s, n);
        }
    return NULL;
}
void cuda_x16_set(cuda_impl_t *c, const float *y, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s) return;
    s->x16_rec.x = y; s->x16_rec.n = n; s->x16_rec.seq = ++s->seq; s->x16_rec.conv = 0; s->x16_rec.half = 0;
}
/* the f16 form (x16.cuh, cuda_x16h_*): the same buffers and record, the record marked half; a producer
 * writes it only where no bf16 copy of that length is wanted */
__half *cuda_x16h_want(cuda_impl_t *c, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !n) return NULL;
    for (int i = 0; i < s->x16_nh; i++)
        if (s->x16_hint[i] == n) return NULL;
    for (int i = 0; i < s->x16h_nh; i++)
        if (s->x16h_hint[i] == n) {
            s->x16_rec.x = NULL;
            return (__half *)x16_buf(c, s, n);
        }
    return NULL;
}
void cuda_x16h_set(cuda_impl_t *c, const float *y, size_t n) {
    cuda_x16_set(c, y, n);
    xp_state_t *s = x16s(c);
    if (s) s->x16_rec.half = 1;
}
const __half *cuda_x16h_get(cuda_impl_t *c, const float *x, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !x || s->x16_rec.x != x || s->x16_rec.n != n || !s->x16_rec.half) return NULL;
    s->x16_used++;
    return (const __half *)s->x16;
}
void cuda_x16h_note(cuda_impl_t *c, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !n) return;
    int i = 0;
    while (i < s->x16h_nh && s->x16h_hint[i] != n) i++;
    if (i < s->x16h_nh) return;
    if (i == 8) { i = s->x16h_next; s->x16h_next = (s->x16h_next + 1) % 8; }
    else s->x16h_nh++;
    s->x16h_hint[i] = n;
}
const __nv_bfloat16 *cuda_x16_get(cuda_impl_t *c, const float *x, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !x || s->x16_rec.x != x || s->x16_rec.n != n || s->x16_rec.half || (s->x16_rec.conv && !s->x16_multi)) return NULL;
    s->x16_used++;
    return s->x16;
}
static void x16_hint(xp_state_t *s, size_t n) {
    int i = 0;
    while (i < s->x16_nh && s->x16_hint[i] != n) i++;
    if (i == s->x16_nh) {
        if (i == 16) { i = s->x16_next; s->x16_next = (s->x16_next + 1) % 16; } /* full: replace the oldest */
        else s->x16_nh++;
        s->x16_hint[i] = n;
    }
}
void cuda_x16_note(cuda_impl_t *c, size_t n) {
    xp_state_t *s = x16s(c);
    if (s && n) x16_hint(s, n);
}
__nv_bfloat16 *cuda_x16_conv(cuda_impl_t *c, const float *x, size_t n) {
    xp_state_t *s = x16s(c);
    if (!s || !n) return NULL;
    x16_hint(s, n);
    s->x16_rec.x = NULL;
    __nv_bfloat16 *b = x16_buf(c, s, n);
    s->x16_rec.x = x; s->x16_rec.n = n; s->x16_rec.seq = ++s->seq; s->x16_rec.conv = 1; s->x16_rec.half = 0;
    return b;
}
void cuda_x16_multi(cuda_impl_t *c, int on) {
    xp_state_t *s = x16s(c);
    if (!s) return;
    s->x16_multi = on;
    if (s->x16_rec.conv) s->x16_rec.x = NULL; /* a conversion's record lives inside one call */
}

extern "C" long cuda_x16_uses(const backend_t *be) {
    const xp_state_t *s = xs((const cuda_impl_t *)be->impl);
    return s ? s->x16_used : 0;
}

extern "C" long cuda_wgx_uses(const backend_t *be) {
    const xp_state_t *s = xs((const cuda_impl_t *)be->impl);
    return s ? s->wgx_used : 0;
}

extern "C" long cuda_xprep_uses(const backend_t *be) {
    const xp_state_t *s = xs((const cuda_impl_t *)be->impl);
    return s ? s->used : 0;
}

/* --- the op wrappers --- */
/* the wrappers are installed only for backends with a state (which they keep until destroy) */
static inline xp_state_t *XS(backend_t *be) { return xs((const cuda_impl_t *)be->impl); }
static inline const backend_ops_t *XB(backend_t *be) { return XS(be)->base; }
static inline void xp_forget(backend_t *be) { XS(be)->rec.x = NULL; XS(be)->x16_rec.x = NULL; XS(be)->wgx_rec.x = NULL; }
/* a matmul's deferred split sums (matmul_wgmma.cu) launched, before anything may read its y */
static inline void xp_flush(backend_t *be) { cuda_defer_flush((cuda_impl_t *)be->impl); }
static inline void xp_drop(backend_t *be) { xp_forget(be); xp_flush(be); }
/* the records' sequence numbers before a matmul (both come from s->seq, so one number: a record
 * made during the call has a larger one) */
static inline long xp_seq(backend_t *be) { return XS(be)->seq; }
/* after a matmul: forget a record if it is older than the call and [y, y + n) overlaps its x */
static inline void xp_after(backend_t *be, long seq, const float *y, size_t n) {
    xp_state_t *s = XS(be);
    if (s->rec.x && s->rec.seq <= seq && y < s->rec.x + s->rec.K && s->rec.x < y + n) s->rec.x = NULL;
    if (s->x16_rec.x && s->x16_rec.seq <= seq && y < s->x16_rec.x + s->x16_rec.n && s->x16_rec.x < y + n) s->x16_rec.x = NULL;
    if (s->wgx_rec.x && s->wgx_rec.seq <= seq && y < s->wgx_rec.x + (size_t)s->wgx_rec.T * s->wgx_rec.K && s->wgx_rec.x < y + n)
        s->wgx_rec.x = NULL;
}

/* every other op: forget, then run */
#define XW(name, params, args)                     \
    static void xw_##name params {                 \
        xp_drop(be);                               \
        XB(be)->name args;                         \
    }
#define XWR(rt, name, params, args)                \
    static rt xw_##name params {                   \
        xp_drop(be);                               \
        return XB(be)->name args;                  \
    }
XWR(void *, alloc, (backend_t *be, size_t n), (be, n))
XW(free, (backend_t *be, void *p), (be, p))
XWR(void *, upload, (backend_t *be, const void *h, size_t n), (be, h, n))
XW(rms_norm, (backend_t *be, float *y, const float *x, const float *w, float o, int T, int n, float eps), (be, y, x, w, o, T, n, eps))
XW(rope, (backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms), (be, x, pos, T, nh, hd, rot, inv, ms))
XW(glu, (backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act), (be, y, g, u, n, act))
XW(add, (backend_t *be, float *y, const float *x, size_t n), (be, y, x, n))
XW(add_bias, (backend_t *be, float *y, const float *b, int T, int n), (be, y, b, T, n))
XW(gather_rows, (backend_t *be, float *y, const float *x, const int32_t *idx, int n, int w), (be, y, x, idx, n, w))
XW(embed, (backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float s), (be, y, ids, T, w, s))
XW(kv_write, (backend_t *be, const kv_view_t *kv, const float *k, const float *v, const int32_t *sl, int T), (be, kv, k, v, sl, T))
XW(attention, (backend_t *be, float *out, const float *q, int T, const attn_args_t *a), (be, out, q, T, a))
XW(conv1d_causal, (backend_t *be, float *y, const float *x, int nr, const int32_t *rs, float *const *st, const float *w, int C, int K, act_t act),
   (be, y, x, nr, rs, st, w, C, K, act))
XW(gated_delta, (backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *d),
   (be, out, qkv, a, b, T, d))
XW(sigmoid_mul, (backend_t *be, float *y, const float *g, int T, int n, int gw), (be, y, g, T, n, gw))
XW(scale, (backend_t *be, float *y, float s, size_t n), (be, y, s, n))
XW(add_rows_scaled, (backend_t *be, float *y, const float *x, const int32_t *idx, const float *wt, int n, int width), (be, y, x, idx, wt, n, width))
XW(step_begin, (backend_t *be, int nt, int nr), (be, nt, nr))
XW(step_end, (backend_t *be), (be))
XW(sample, (backend_t *be, int32_t *tokens, float *logits, const sample_args_t *a), (be, tokens, logits, a))
/* add_rms_norm: the records dropped but a matmul's deferred split sums kept — cuda_add_rms_norm reads them where d is
 * that matmul's y (and flushes them otherwise) */
static void xw_add_rms_norm(backend_t *be, float *x, float *y, const float *d, const float *w, float o, int T, int n, float eps) {
    xp_forget(be);
    XB(be)->add_rms_norm(be, x, y, d, w, o, T, n, eps);
}
XW(rope_kv_write,
   (backend_t *be, float *q, float *k, const float *v, const int32_t *pos, int T, int nh, int nkv, int hd, int rot, const float *inv, float ms,
    const kv_view_t *kv, const int32_t *slots),
   (be, q, k, v, pos, T, nh, nkv, hd, rot, inv, ms, kv, slots))
XW(norm_rope_kv_attention,
   (backend_t *be, float *out, float *q, float *k, const float *v, const float *qn, const float *kn, float eps, int rot, const float *inv, float ms,
    const int32_t *slots, int T, const attn_args_t *a),
   (be, out, q, k, v, qn, kn, eps, rot, inv, ms, slots, T, a))
XWR(int, delta_decode,
    (backend_t *be, float *y, const float *qkv, float *const *cs, const float *cw, int K, const float *a, const float *b, const float *z,
     const float *nw, float eps, int T, const struct delta_args *d),
    (be, y, qkv, cs, cw, K, a, b, z, nw, eps, T, d))
XWR(int, post_norm_add, (backend_t *be, float *x, float *y, float *d, const float *w1, const float *w2, float o, int T, int n, float eps),
    (be, x, y, d, w1, w2, o, T, n, eps))
XWR(int, moe_route, (backend_t *be, int32_t *ids, float *wts, const float *logits, int T, int E, int k, int renorm, const float *escale),
    (be, ids, wts, logits, T, E, k, renorm, escale))
XWR(int, moe_experts,
   (backend_t *be, float *out, const float *x, int T, int k, const int32_t *ids, const float *wts, const weight_t *gate, const weight_t *up,
    const weight_t *down, int E, act_t act),
   (be, out, x, T, k, ids, wts, gate, up, down, E, act))

/* the matmuls: run (taking the prepared x if it is theirs), then forget it where they wrote over x */
static void xw_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    xp_flush(be);
    const long s = xp_seq(be);
    XB(be)->matmul(be, y, x, T, w);
    xp_after(be, s, y, (size_t)(T > 0 ? T : 0) * w->rows);
}
static void xw_matmul_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *w) {
    xp_flush(be);
    const long s = xp_seq(be);
    XB(be)->matmul_multi(be, n, y, x, T, w);
    for (int i = 0; i < n; i++) xp_after(be, s, y[i], (size_t)(T > 0 ? T : 0) * w[i]->rows);
}
static void xw_matmul_glu(backend_t *be, float *y, float *g, float *u, const float *x, int T, const weight_t *wg, const weight_t *wu, act_t act) {
    xp_flush(be);
    const long s = xp_seq(be); /* a GLU inside records its own output (a newer record): kept */
    XB(be)->matmul_glu(be, y, g, u, x, T, wg, wu, act);
    const size_t n = (size_t)(T > 0 ? T : 0) * wg->rows;
    xp_after(be, s, y, n); xp_after(be, s, g, n); xp_after(be, s, u, n);
}
static int xw_matmul_add(backend_t *be, float *y, const float *x, int T, const weight_t *w) {
    xp_flush(be);
    const long s = xp_seq(be);
    const int r = XB(be)->matmul_add(be, y, x, T, w);
    xp_after(be, s, y, (size_t)(T > 0 ? T : 0) * w->rows);
    return r;
}
static int xw_rms_matmul_multi(backend_t *be, int n, float *const *y, const float *x, const float *nw, float o, float eps, int T,
                               const weight_t *const *w) {
    cuda_defer_flush_sums((cuda_impl_t *)be->impl); /* a deferred rowscale add on x is the op's to take (or flush) */
    const long s = xp_seq(be);
    const int r = XB(be)->rms_matmul_multi(be, n, y, x, nw, o, eps, T, w);
    for (int i = 0; i < n; i++) xp_after(be, s, y[i], (size_t)(T > 0 ? T : 0) * w[i]->rows);
    return r;
}
static int xw_rms_matmul_glu(backend_t *be, float *y, const float *x, const float *nw, float o, float eps, int T, const weight_t *wg,
                             const weight_t *wu, act_t act) {
    xp_flush(be);
    const long s = xp_seq(be);
    const int r = XB(be)->rms_matmul_glu(be, y, x, nw, o, eps, T, wg, wu, act);
    xp_after(be, s, y, (size_t)(T > 0 ? T : 0) * wg->rows);
    return r;
}

static int xw_rms_mlp(backend_t *be, float *x, const float *nw, float o, float eps, int T, const weight_t *wg, const weight_t *wu,
                      const weight_t *wd, act_t act) {
    xp_flush(be);
    const long s = xp_seq(be);
    const int r = XB(be)->rms_mlp(be, x, nw, o, eps, T, wg, wu, wd, act);
    xp_after(be, s, x, (size_t)(T > 0 ? T : 0) * wd->rows);
    return r;
}

void cuda_xp_init(backend_t *be) {
    cuda_impl_t *c = (cuda_impl_t *)be->impl;
    const char *e = getenv("KILN_CUDA_XPREP");
    int mode = e ? atoi(e) : 0;
    if (mode < 0 || mode > 7) mode = 0;
    const char *e16 = getenv("KILN_CUDA_X16"); /* =0: every matmul converts its own x (A/B) */
    const int x16 = !(e16 && !strcmp(e16, "0"));
    if (!mode && !x16) return;
    xp_state_t *s = xs(NULL); /* a free slot */
    if (!s) return;
    char *buf = NULL;
    if (mode && cudaMalloc((void **)&buf, XP_CAP) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    /* one wrapped table per base table (the base is static: cuda_ops, or the profile / no-fusion copy) */
    static struct { const backend_ops_t *base; backend_ops_t w; } tabs[4];
    static int ntabs;
    const backend_ops_t *b = be->ops;
    backend_ops_t *w = NULL;
    for (int i = 0; i < ntabs; i++)
        if (tabs[i].base == b) w = &tabs[i].w;
    if (!w && ntabs == 4) { cudaFree(buf); return; }
    if (!w) {
        w = &tabs[ntabs].w;
        tabs[ntabs++].base = b;
        *w = *b;
#define XSET(f) if (b->f) w->f = xw_##f
        XSET(alloc); XSET(free); XSET(upload); XSET(matmul); XSET(rms_norm); XSET(rope); XSET(glu); XSET(add); XSET(add_bias);
        XSET(gather_rows); XSET(embed); XSET(kv_write); XSET(attention); XSET(conv1d_causal); XSET(gated_delta); XSET(sigmoid_mul);
        XSET(scale); XSET(add_rows_scaled); XSET(step_begin); XSET(step_end); XSET(sample); XSET(add_rms_norm); XSET(rope_kv_write);
        XSET(norm_rope_kv_attention); XSET(matmul_multi); XSET(moe_route); XSET(moe_experts); XSET(matmul_glu); XSET(matmul_add);
        XSET(rms_matmul_multi); XSET(rms_matmul_glu); XSET(rms_mlp); XSET(delta_decode); XSET(post_norm_add);
#undef XSET
    }
    memset(s, 0, sizeof *s);
    s->c = c; s->mode = mode; s->base = b; s->buf = buf; s->x16_on = x16;
    be->ops = w;
}

int cuda_xp_wrapped(const cuda_impl_t *c) { return xs(c) != NULL; }

const void *cuda_xp_base(const backend_t *be) {
    const xp_state_t *s = xs((const cuda_impl_t *)be->impl);
    return s ? (const void *)s->base : (const void *)be->ops;
}

void cuda_xp_free(cuda_impl_t *c) {
    xp_state_t *s = xs(c);
    if (!s) return;
    cudaFree(s->buf);
    cudaFree(s->x16b[0]);
    cudaFree(s->x16b[1]);
    cudaFree(s->wgx_buf);
    memset(s, 0, sizeof *s);
}
