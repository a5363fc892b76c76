/* llama.c — the llama family: Llama 2/3, Mistral, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm,
 * explicit head_dim). One forward over a ragged batch, top to bottom like the PyTorch it
 * mirrors (transformers' modeling_llama.py / modeling_qwen3.py):
 *
 *   x = embed(tokens)                                   [T, hidden]
 *   per layer:
 *     h = rms_norm(x) · input_layernorm
 *     q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ (+ bias)            [T, nh·hd], [T, nkv·hd] ×2
 *     qwen3: q, k = rms_norm per head (q_norm, k_norm)
 *     q, k = rope(q, k, pos)
 *     cache[layer][slot(pos)] = k, v
 *     a = attention(q, cache of the token's row)        [T, nh·hd]
 *     x += a·Woᵀ
 *     h = rms_norm(x) · post_attention_layernorm
 *     x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ                     [T, inter] → [T, hidden]
 *   logits = rms_norm(x[logit_index]) · norm · lm_headᵀ   [n_logits, vocab]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "model/rope.h"

typedef struct llama_layer {
    float *ln_attn, *ln_mlp;          /* [hidden]                         */
    weight_t wq, wk, wv, wo;          /* [nh·hd, hidden] [nkv·hd, hidden] ×2 [hidden, nh·hd] */
    float *bq, *bk, *bv, *bo;         /* optional biases                  */
    float *q_norm, *k_norm;           /* qwen3: [hd]                      */
    weight_t wg, wu, wd;              /* [inter, hidden] ×2, [hidden, inter] */
    float *bg, *bu, *bd;              /* mlp_bias                         */
} llama_layer_t;

typedef struct llama {
    weight_t embed, lm_head;          /* [vocab, hidden]                  */
    float *norm;                      /* [hidden]                         */
    llama_layer_t *layers;
    float *inv_freq, mscale;          /* [rot_dim/2]                      */
    int rot_dim;
    /* run state, grown to the largest step seen: one allocation site */
    int cap_T, cap_logits;
    float *x, *h, *q, *k, *v, *att, *g, *u, *xl, *logits; /* backend memory */
    int32_t *slots;
    const int32_t **tables;
} llama_t;

static int load_bias(model_t *m, const char *name, int n, float **out, err_t *e) {
    *out = NULL;
    if (!model_has_tensor(m, name)) return 0;
    return model_get_vector(m, name, n, out, e);
}

/* transformers keeps inv_freq as a module buffer. from_pretrained leaves it f32, but a
 * model cast in memory (.to(bfloat16)) rounds it — the shared fixtures were made that
 * way, and match only with the rounding (1e-3 drift by position 40 otherwise). The
 * choice is the load option buffer_dtype (--buffer-dtype), f32 by default. */
static void round_inv_freq(const model_config_t *c, float *inv, int n) {
    for (int i = 0; i < n; i++) {
        if (c->param_dtype == DT_BF16) inv[i] = bf16_to_f32(f32_to_bf16(inv[i]));
        else if (c->param_dtype == DT_F16) inv[i] = f16_to_f32(f32_to_f16(inv[i]));
    }
}

static int llama_load(model_t *m, err_t *e) {
    const model_config_t *c = &m->cfg;
    llama_t *L = calloc(1, sizeof *L);
    m->impl = L;
    m->dev_logits_ok = 1;
    int H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    char n[256];
    if (model_get_weight(m, "embed_tokens", c->vocab_size, H, &L->embed, e)) return -1;
    if (model_get_vector(m, "norm.weight", H, &L->norm, e)) return -1;
    if (!c->tie_embeddings || model_has_tensor(m, "lm_head.weight")) {
        if (model_get_weight(m, "lm_head", c->vocab_size, H, &L->lm_head, e)) return -1;
    } else L->lm_head = L->embed;
    L->layers = calloc((size_t)c->n_layers, sizeof(llama_layer_t));
    for (int i = 0; i < c->n_layers; i++) {
        llama_layer_t *l = &L->layers[i];
#define W(field, name, r, cc) do { snprintf(n, sizeof n, "layers.%d.%s", i, name); \
        if (model_get_weight(m, n, r, cc, &l->field, e)) return -1; } while (0)
#define V(field, name, len) do { snprintf(n, sizeof n, "layers.%d.%s", i, name); \
        if (model_get_vector(m, n, len, &l->field, e)) return -1; } while (0)
#define B(field, name, len) do { snprintf(n, sizeof n, "layers.%d.%s", i, name); \
        if (load_bias(m, n, len, &l->field, e)) return -1; } while (0)
        V(ln_attn, "input_layernorm.weight", H);
        V(ln_mlp, "post_attention_layernorm.weight", H);
        W(wq, "self_attn.q_proj", nh * hd, H);
        W(wk, "self_attn.k_proj", nkv * hd, H);
        W(wv, "self_attn.v_proj", nkv * hd, H);
        W(wo, "self_attn.o_proj", H, nh * hd);
        B(bq, "self_attn.q_proj.bias", nh * hd);
        B(bk, "self_attn.k_proj.bias", nkv * hd);
        B(bv, "self_attn.v_proj.bias", nkv * hd);
        B(bo, "self_attn.o_proj.bias", H);
        if (c->qk_norm) {
            V(q_norm, "self_attn.q_norm.weight", hd);
            V(k_norm, "self_attn.k_norm.weight", hd);
        }
        W(wg, "mlp.gate_proj", I, H);
        W(wu, "mlp.up_proj", I, H);
        W(wd, "mlp.down_proj", H, I);
        B(bg, "mlp.gate_proj.bias", I);
        B(bu, "mlp.up_proj.bias", I);
        B(bd, "mlp.down_proj.bias", H);
#undef W
#undef V
#undef B
        const weight_t *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->wg, &l->wu, &l->wd};
        for (int j = 0; j < 7; j++) m->weight_bytes += weight_bytes(ws[j]);
    }
    m->weight_bytes += weight_bytes(&L->lm_head); /* the embedding row read is negligible */
    L->rot_dim = (int)(hd * c->rope.partial_rotary_factor) & ~1;
    L->inv_freq = malloc(sizeof(float) * (L->rot_dim / 2 + 1));
    rope_inv_freq(&c->rope, L->rot_dim, c->max_pos, 0, L->inv_freq, &L->mscale);
    round_inv_freq(c, L->inv_freq, L->rot_dim / 2);
    return 0;
}

static void llama_destroy(model_t *m) {
    llama_t *L = m->impl;
    if (!L) return;
    if (L->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            llama_layer_t *l = &L->layers[i];
            float *vs[] = {l->ln_attn, l->ln_mlp, l->bq, l->bk, l->bv, l->bo, l->q_norm, l->k_norm, l->bg, l->bu, l->bd};
            for (size_t j = 0; j < sizeof vs / sizeof vs[0]; j++) m->be->ops->free(m->be, vs[j]);
        }
    free(L->layers);
    m->be->ops->free(m->be, L->norm);
    free(L->inv_freq);
    backend_t *be = m->be;
    float *bufs[] = {L->x, L->h, L->q, L->k, L->v, L->att, L->g, L->u, L->xl, L->logits};
    for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++) be->ops->free(be, bufs[j]);
    free(L->slots);
    free(L->tables);
    free(L);
    m->impl = NULL;
}

static int ensure_buffers(model_t *m, int T, int n_logits, int n_rows, err_t *e) {
    llama_t *L = m->impl;
    backend_t *be = m->be;
    const model_config_t *c = &m->cfg;
    if (T > L->cap_T || n_logits > L->cap_logits) {
        int cap = T > L->cap_T ? T : L->cap_T;
        int capl = n_logits > L->cap_logits ? n_logits : L->cap_logits;
        float **bufs[] = {&L->x, &L->h, &L->q, &L->k, &L->v, &L->att, &L->g, &L->u, &L->xl};
        size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
        size_t sizes[] = {c->hidden_size, c->hidden_size, qd, kd, kd, qd, c->intermediate_size, c->intermediate_size, 0};
        for (size_t j = 0; j < 9; j++) {
            be->ops->free(be, *bufs[j]);
            size_t rows = j == 8 ? (size_t)capl : (size_t)cap;
            size_t width = j == 8 ? (size_t)c->hidden_size : sizes[j];
            *bufs[j] = be->ops->alloc(be, sizeof(float) * rows * width);
            if (!*bufs[j]) return err_set(e, "out of memory for a step of %d tokens", T);
        }
        be->ops->free(be, L->logits);
        L->logits = be->ops->alloc(be, sizeof(float) * capl * c->vocab_size);
        if (!L->logits) return err_set(e, "out of memory for %d rows of logits", capl);
        free(L->slots);
        L->slots = malloc(sizeof(int32_t) * cap);
        L->cap_T = cap;
        L->cap_logits = capl;
    }
    free(L->tables);
    L->tables = malloc(sizeof(int32_t *) * n_rows);
    return 0;
}

static int llama_forward(model_t *m, const batch_t *b, float *logits, err_t *e) {
    llama_t *L = m->impl;
    backend_t *be = m->be;
    const backend_ops_t *op = be->ops;
    const model_config_t *c = &m->cfg;
    int T = b->n_tokens, H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int nh = c->n_heads, nkv = c->n_kv_heads;
    if (ensure_buffers(m, T, b->n_logits, b->n_rows, e)) return -1;

    for (int r = 0; r < b->n_rows; r++) {
        L->tables[r] = b->seq[r]->blocks;
        for (int t = b->row_start[r]; t < b->row_start[r + 1]; t++) L->slots[t] = kv_seq_slot(b->seq[r], m->kv.block_size, b->pos[t]);
    }
    attn_args_t aa = {
        .n_rows = b->n_rows, .row_start = b->row_start, .pos = b->pos, .block_tables = L->tables,
        .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
    };

    op->embed(be, L->x, b->tokens, T, &L->embed, 1.0f);
    int h_ready = 0; /* h already holds this layer's input norm (fused into the previous add) */
    for (int li = 0; li < c->n_layers; li++) {
        const llama_layer_t *l = &L->layers[li];
        const float eps = (float)c->rms_eps;
        /* attention block: q/k/v of h = rms_norm(x); one op with the norm inside where the backend
         * has it (rms_matmul_multi), else the norm (unless the previous layer's add carried it) */
        float *const yqkv[3] = {L->q, L->k, L->v};
        const weight_t *const wqkv[3] = {&l->wq, &l->wk, &l->wv};
        if (h_ready || !op->rms_matmul_multi || op->rms_matmul_multi(be, 3, yqkv, L->x, l->ln_attn, 0.f, eps, T, wqkv)) {
            if (!h_ready) op->rms_norm(be, L->h, L->x, l->ln_attn, 0.f, T, H, eps);
            if (op->matmul_multi) op->matmul_multi(be, 3, yqkv, L->h, T, wqkv);
            else {
                op->matmul(be, L->q, L->h, T, &l->wq);
                op->matmul(be, L->k, L->h, T, &l->wk);
                op->matmul(be, L->v, L->h, T, &l->wv);
            }
        }
        if (l->bq) op->add_bias(be, L->q, l->bq, T, nh * hd);
        if (l->bk) op->add_bias(be, L->k, l->bk, T, nkv * hd);
        if (l->bv) op->add_bias(be, L->v, l->bv, T, nkv * hd);
        /* q/k norms, rope, the cache write and attention in one op where the backend has it */
        const int fused_attn = c->rope.type != ROPE_DYNAMIC && op->norm_rope_kv_attention;
        if (l->q_norm && !fused_attn) {
            op->rms_norm(be, L->q, L->q, l->q_norm, 0.f, T * nh, hd, (float)c->rms_eps);
            op->rms_norm(be, L->k, L->k, l->k_norm, 0.f, T * nkv, hd, (float)c->rms_eps);
        }
        if (c->rope.type == ROPE_DYNAMIC) {
            /* NTK scaling depends on the row's length: one table per row */
            for (int r = 0; r < b->n_rows; r++) {
                int t0 = b->row_start[r], n = b->row_start[r + 1] - t0;
                if (!n) continue;
                float ms;
                int len = b->pos[t0 + n - 1] + 1;
                rope_inv_freq(&c->rope, L->rot_dim, c->max_pos, len, L->inv_freq, &ms);
                if (len <= c->rope.original_max_pos) round_inv_freq(c, L->inv_freq, L->rot_dim / 2);
                op->rope(be, L->q + (size_t)t0 * nh * hd, b->pos + t0, n, nh, hd, L->rot_dim, L->inv_freq, ms);
                op->rope(be, L->k + (size_t)t0 * nkv * hd, b->pos + t0, n, nkv, hd, L->rot_dim, L->inv_freq, ms);
            }
        }
        aa.kv = kv_pool_view(&m->kv, li);
        if (fused_attn)
            op->norm_rope_kv_attention(be, L->att, L->q, L->k, L->v, l->q_norm, l->k_norm, (float)c->rms_eps, L->rot_dim,
                                       L->inv_freq, L->mscale, L->slots, T, &aa);
        else if (c->rope.type != ROPE_DYNAMIC && op->rope_kv_write) /* rope q, k and the cache write in one op */
            op->rope_kv_write(be, L->q, L->k, L->v, b->pos, T, nh, nkv, hd, L->rot_dim, L->inv_freq, L->mscale, &aa.kv, L->slots);
        else {
            if (c->rope.type != ROPE_DYNAMIC) {
                op->rope(be, L->q, b->pos, T, nh, hd, L->rot_dim, L->inv_freq, L->mscale);
                op->rope(be, L->k, b->pos, T, nkv, hd, L->rot_dim, L->inv_freq, L->mscale);
            }
            op->kv_write(be, &aa.kv, L->k, L->v, L->slots, T);
        }
        if (!fused_attn) op->attention(be, L->att, L->q, T, &aa);
        /* o: x += att · woᵀ straight from the GEMV where the backend has that (matmul_add), else h = att · woᵀ */
        const int x_done = !l->bo && op->matmul_add && !op->matmul_add(be, L->x, L->att, T, &l->wo);
        if (!x_done) {
            op->matmul(be, L->h, L->att, T, &l->wo);
            if (l->bo) op->add_bias(be, L->h, l->bo, T, H);
        }
        /* MLP block: x += h, h = rms_norm(x) (one op where the backend fuses them; with x done, the
         * norm inside the gate/up/GLU op where the backend has it) */
        /* the whole MLP block in one op where the backend has it (rms_mlp) */
        if (x_done && !l->bg && !l->bu && !l->bd && op->rms_mlp &&
            !op->rms_mlp(be, L->x, l->ln_mlp, 0.f, eps, T, &l->wg, &l->wu, &l->wd, ACT_SILU)) {
            h_ready = 0;
            continue;
        }
        int mlp_done = 0;
        if (x_done) {
            mlp_done = !l->bg && !l->bu && op->rms_matmul_glu && !op->rms_matmul_glu(be, L->g, L->x, l->ln_mlp, 0.f, eps, T, &l->wg, &l->wu, ACT_SILU);
            if (!mlp_done) op->rms_norm(be, L->h, L->x, l->ln_mlp, 0.f, T, H, eps);
        } else if (op->add_rms_norm) op->add_rms_norm(be, L->x, L->h, L->h, l->ln_mlp, 0.f, T, H, eps);
        else {
            op->add(be, L->x, L->h, (size_t)T * H);
            op->rms_norm(be, L->h, L->x, l->ln_mlp, 0.f, T, H, eps);
        }
        if (mlp_done) {
        } else if (op->matmul_glu && !l->bg && !l->bu) /* gate, up and the GLU in one op */
            op->matmul_glu(be, L->g, L->g, L->u, L->h, T, &l->wg, &l->wu, ACT_SILU);
        else {
            if (op->matmul_multi) {
                float *const y[2] = {L->g, L->u};
                const weight_t *const w[2] = {&l->wg, &l->wu};
                op->matmul_multi(be, 2, y, L->h, T, w);
            } else {
                op->matmul(be, L->g, L->h, T, &l->wg);
                op->matmul(be, L->u, L->h, T, &l->wu);
            }
            if (l->bg) op->add_bias(be, L->g, l->bg, T, I);
            if (l->bu) op->add_bias(be, L->u, l->bu, T, I);
            op->glu(be, L->g, L->g, L->u, (size_t)T * I, ACT_SILU);
        }
        /* down: x += g · wdᵀ (matmul_add: the next layer's q/k/v op then takes the norm), else
         * h = g · wdᵀ and x += h with the next layer's input norm riding along */
        if (!l->bd && op->matmul_add && !op->matmul_add(be, L->x, L->g, T, &l->wd)) {
            h_ready = 0;
            continue;
        }
        op->matmul(be, L->h, L->g, T, &l->wd);
        if (l->bd) op->add_bias(be, L->h, l->bd, T, H);
        h_ready = op->add_rms_norm && li + 1 < c->n_layers; /* the next layer's input norm rides along */
        if (h_ready) op->add_rms_norm(be, L->x, L->h, L->h, L->layers[li + 1].ln_attn, 0.f, T, H, eps);
        else op->add(be, L->x, L->h, (size_t)T * H);
    }
    /* final norm and lm_head, only for the tokens whose logits are wanted */
    op->gather_rows(be, L->xl, L->x, b->logit_index, b->n_logits, H);
    op->rms_norm(be, L->xl, L->xl, L->norm, 0.f, b->n_logits, H, (float)c->rms_eps);
    op->matmul(be, L->logits, L->xl, b->n_logits, &L->lm_head);
    m->dev_logits = L->logits;
    if (logits) op->download(be, logits, L->logits, sizeof(float) * b->n_logits * c->vocab_size);
    return 0;
}

const model_ops_t llama_ops = {"llama", llama_load, llama_forward, llama_destroy};
