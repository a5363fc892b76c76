/* fa_args.cuh — the kernel arguments the two tensor-core prefill attentions share
 * (attention_mma.cu: mma.sync; attention_wgmma.cu: wgmma, whose fa_wg_t adds its diagnosis
 * switches), and their host-side fill from the step's attention arguments and tile list. */
#ifndef KILN_CUDA_FA_ARGS_CUH
#define KILN_CUDA_FA_ARGS_CUH

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/x16.cuh"

/* the fields, in this order in both structs (a macro rather than a base struct: a derived
 * struct would put fa_wg_t's own fields after the base's padding, another parameter layout) */
#define FA_ARGS_FIELDS                                                                                \
    const float *q;                                                                                   \
    float *out;                                                                                       \
    __nv_bfloat16 *out16; /* NULL, or out rounded to bf16 as well (x16.cuh: for the o projection) */ \
    const int32_t *pos, *tables;                                                                      \
    const attn_tile_t *tiles;                                                                         \
    const void *k, *v;                                                                                \
    int block_size, max_blocks, n_tiles;                                                              \
    int n_heads, n_kv_heads, group, hc, n_chunks, window;                                             \
    float scale, softcap;                                                                             \
    int out16_half; /* out16 holds f16(out) (x16.cuh's f16 form), not bf16 */

typedef struct fa_dev {
    FA_ARGS_FIELDS
} fa_dev_t;

/* KILN_CUDA_FA and the precision policy: -1 no tensor-core prefill attention (=0); 1 Q and P as hi + lo (matmul.cu's
 * policy, backend_t.act_bf16_ok: llama/qwen3 round once, the rest split; =split forces it), 0 rounded once (=single),
 * the form attention_wgmma.cu takes */
static inline int fa_form(const backend_t *be) {
    const char *env = getenv("KILN_CUDA_FA");
    if (env && !strcmp(env, "0")) return -1;
    return env && !strcmp(env, "single") ? 0 : env && !strcmp(env, "split") ? 1 : !be->act_bf16_ok;
}

/* The step's tiles for fq query vectors a block: hc query heads of a KV head's group per block
 * (n_chunks blocks cover the group), tq = fq / hc tokens a tile. Uploads the tile list and returns
 * true; false (nothing uploaded) for steps of single-token rows (decode: attention.cu) and steps
 * with fewer blocks than KILN_CUDA_FA_MIN (default one per two SMs; the tests set 1), which
 * attention.cu's split kernels fill better. */
static inline bool fa_tiles_plan(cuda_impl_t *c, const attn_args_t *aa, int T, int fq, attn_tiles_t &tl, int &hc, int &n_chunks, int &tq) {
    const int G = aa->n_heads / aa->n_kv_heads;
    hc = G < fq ? G : fq;
    n_chunks = (G + hc - 1) / hc;
    tq = fq / hc;
    attn_tiles_count(aa, tq, &tl);
    const char *menv = getenv("KILN_CUDA_FA_MIN");
    const int min_blocks = menv && atoi(menv) > 0 ? atoi(menv) : c->sm_count / 2;
    if (!tl.multi || tl.n_tiles * aa->n_kv_heads * n_chunks < min_blocks) return false;
    attn_tiles_upload(c, aa, T, tq, &tl);
    return true;
}

/* a's FA_ARGS_FIELDS for one step: tl uploaded (attn_tiles_upload), hc query heads a block of
 * n_chunks per KV head; out16 as x16 asks (the step's output is the o projection's x) */
template <typename A>
static inline void fa_args_fill(A &a, cuda_impl_t *c, const float *q, float *out, int T, const attn_args_t *aa, const attn_tiles_t &tl,
                                int hc, int n_chunks) {
    a.q = q; a.out = out;
    a.out16 = cuda_x16_want(c, (size_t)T * aa->n_heads * aa->head_dim);
    a.out16_half = 0;
    if (!a.out16 && aa->kv.dtype == DT_F16) { /* the f16 form only over an f16 cache: out then lies in f16's range */
        a.out16 = (__nv_bfloat16 *)cuda_x16h_want(c, (size_t)T * aa->n_heads * aa->head_dim);
        a.out16_half = a.out16 != NULL;
    }
    a.pos = tl.pos; a.tables = tl.tables; a.tiles = tl.tiles;
    a.k = aa->kv.k; a.v = aa->kv.v; a.block_size = aa->kv.block_size; a.max_blocks = tl.max_blocks; a.n_tiles = tl.n_tiles;
    a.n_heads = aa->n_heads; a.n_kv_heads = aa->n_kv_heads; a.group = aa->n_heads / aa->n_kv_heads; a.hc = hc; a.n_chunks = n_chunks;
    a.window = aa->window; a.scale = aa->scale; a.softcap = aa->softcap;
}

#endif
