/* qwen35.c — the Qwen3.5 family: text models, dense and MoE (transformers' modeling_qwen3_5.py
 * and modeling_qwen3_5_moe.py). A hybrid: most layers are gated DeltaNet ("linear_attention"),
 * every few a gated full-attention layer. One forward over a ragged batch, top to bottom:
 *
 *   x = embed(tokens)                                          [T, H]
 *   per layer:
 *     h = rms_norm(x) · (1 + input_layernorm)
 *     linear_attention (gated DeltaNet):
 *       qkv = h·W_qkvᵀ                                         [T, 2·nk·dk + nv·dv]
 *       z, b, a = h·W_zᵀ, h·W_bᵀ, h·W_aᵀ                        [T, nv·dv], [T, nv] ×2
 *       qkv = silu(causal_conv1d(qkv, conv state))             (state: last K-1 inputs)
 *       o = gated_delta(l2norm(q)·dk^-½, l2norm(k), v,         [T, nv, dv]
 *                       g = -exp(A_log)·softplus(a + dt_bias), β = sigmoid(b), S)
 *       o = rms_norm(o) · norm · silu(z)                       (per value head)
 *       x += o·W_outᵀ
 *     full_attention:
 *       q | gate = h·W_qᵀ (per head: hd query, hd gate)        [T, nh, 2·hd]
 *       q, k = rms_norm per head · (1 + q_norm / k_norm);  v = h·W_vᵀ
 *       q, k = rope(first rot_dim dims, pos)                   (partial_rotary_factor)
 *       x += (attention(q, cache) · sigmoid(gate))·W_oᵀ
 *     h = rms_norm(x) · (1 + post_attention_layernorm)
 *     dense: x += (silu(h·W_gᵀ) · h·W_uᵀ)·W_dᵀ
 *     MoE:   p = softmax(h·W_routerᵀ); top-k, renormalized
 *            x += Σ_k p_k · expert_k(h) + sigmoid(h·w_sgᵀ) · shared_expert(h)
 *   logits = rms_norm(x[logit_index]) · (1 + norm) · lm_headᵀ
 *
 * Recurrent layers keep no KV: their state (conv window + f32 [dk][dv] per value head) lives
 * in the sequence's state slot (kv/rec_state.h); only full-attention layers have KV layers.
 *
 * gated_delta runs a row's tokens that fill whole chunks of DELTA_CHUNK aligned absolute
 * positions in the chunk-parallel form (prefill: mostly matrix products) and the rest token
 * by token (decode, a prompt's last partial chunk). The two forms agree within float
 * rounding; which one a token gets depends on its position and its row's extent only.
 *
 * Where a backend fuses ops (backend.h: bitwise the separate ops), the layer takes them as
 * llama.c does: the input norm inside the projections (rms_matmul_multi), the residual adds
 * inside o/out_proj and down (matmul_add), the dense MLP as one op (rms_mlp) or its norm inside
 * gate/up/GLU (rms_matmul_glu) — on the GPU one launch where there were up to seven. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "model/hyb_util.h"
#include "model/rope.h"

typedef struct q35_layer {
    int kind;                          /* LAYER_LINEAR or LAYER_FULL                        */
    float *ln_attn, *ln_mlp;           /* [H]                                              */
    /* gated DeltaNet */
    weight_t w_qkv, w_z, w_b, w_a, w_out; /* [conv, H] [nv·dv, H] [nv, H] ×2 [H, nv·dv]     */
    int fused;                         /* Qwen3-Next: w_qkvz [2·kd + 2·vd, H], w_ba [2·nv, H] */
    weight_t w_qkvz, w_ba;             /* rows grouped per key head (see qkvz_index)       */
    float *conv_w;                     /* [conv, K] f32                                    */
    float *A_log, *dt_bias, *gnorm;    /* [nv] [nv] [dv]                                   */
    size_t conv_off, ssm_off;          /* offsets of this layer's state in a slot (floats) */
    /* gated attention */
    weight_t wq, wk, wv, wo;           /* [nh·2hd, H] [nkv·hd, H] ×2 [H, nh·hd]            */
    float *q_norm, *k_norm;            /* [hd]                                             */
    int kv_layer;                      /* index into the KV pool                           */
    /* MLP: dense, or MoE with a shared expert */
    int moe;                           /* this layer's MLP is the sparse block             */
    weight_t wg, wu, wd;               /* [I, H] ×2 [H, I]                                 */
    weight_t router;                   /* [E, H]                                           */
    weight_t *eg, *eu, *ed;            /* [E] of [Ie, H] ×2, [H, Ie]                       */
    weight_t sg, su, sd, s_gate;       /* shared expert [Is, H] ×2 [H, Is]; gate [1, H]    */
} q35_layer_t;

typedef struct q35 {
    weight_t embed, lm_head;           /* [vocab, H]                                       */
    float *norm;                       /* [H]                                              */
    q35_layer_t *layers;
    float norm_off;                    /* 1: (1 + w) norms as stored by HF; 0: MLX-shifted */
    float *inv_freq, mscale;           /* [rot/2]                                          */
    int rot_dim, n_kv_layers, moe;     /* moe: any layer is sparse                         */
    int conv_dim, key_dim, value_dim;
    int fused, unit;                   /* some layer has fused projections; gather width   */
    /* run state: one arena, host index arrays sized on demand */
    hyb_arena_t arena;
    hyb_arena_t larena; /* the logit rows: xl [n, hidden], logits [n, vocab], grown to the most rows a step asked for */
    float *x, *h, *h2, *qkv, *conv, *z, *a, *b, *core, *qkvz, *ba;
    float *qg, *q, *gate, *k, *v, *att, *g, *u, *rl, *xe, *ge, *ue, *ye, *sgate, *xl, *logits;
    float *mids, *mwts;                /* [T, k] expert ids (int32) and weights of moe_route */
    int cap_rows, cap_idx;
    int32_t *slots, *idx, *tok_e, *fidx;  /* fidx: fused-projection gathers (qkv, z, b, a) */
    float *wt_e, *rl_host;
    const int32_t **tables;
    float **st, **cs, **ss;
} q35_t;

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static int q35_load(model_t *m, err_t *e) {
    model_config_t *c = &m->cfg;
    q35_t *Q = calloc(1, sizeof *Q);
    m->impl = Q;
    m->dev_logits_ok = 1;
    int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    int nk = c->linear_k_heads, nv = c->linear_v_heads, dk = c->linear_k_dim, dv = c->linear_v_dim, K = c->linear_conv_kernel;
    Q->key_dim = nk * dk;
    Q->value_dim = nv * dv;
    Q->conv_dim = 2 * Q->key_dim + Q->value_dim;
    for (int i = 0; i < c->n_layers; i++) Q->moe |= c->layer_moe[i];
    int E = c->n_experts, Ie = c->moe_intermediate_size, Is = c->shared_expert_intermediate_size, I = c->intermediate_size;
    if (Q->moe && E > 1024) return err_set(e, "%s: %d experts exceeds 1024", m->dir, E);
    const backend_ops_t *bo = m->be->ops;
    if (!bo->conv1d_causal || !bo->gated_delta || !bo->sigmoid_mul || (Q->moe && (!bo->scale || !bo->add_rows_scaled)))
        return err_set(e, "%s: backend '%s' lacks the gated DeltaNet / MoE ops qwen3_5 needs (conv1d_causal, gated_delta, sigmoid_mul, scale, add_rows_scaled)", m->dir, bo->name);
    char n[256];
    if (model_get_weight(m, "embed_tokens", c->vocab_size, H, &Q->embed, e)) return -1;
    if (!c->tie_embeddings || model_has_tensor(m, "lm_head.weight")) {
        if (model_get_weight(m, "lm_head", c->vocab_size, H, &Q->lm_head, e)) return -1;
    } else Q->lm_head = Q->embed;
    if (model_get_vector(m, "norm.weight", H, &Q->norm, e)) return -1;
    /* Layout of the (1 + w) norms: HF stores w; mlx-lm's conversion stores 1 + w and moves
     * the conv kernel to [C, K, 1]. Detected from the first conv weight's shape. */
    Q->norm_off = 1.0f;
    Q->layers = calloc((size_t)c->n_layers, sizeof(q35_layer_t));
    size_t slot_floats = 0;
    for (int i = 0; i < c->n_layers; i++) {
        q35_layer_t *l = &Q->layers[i];
        l->kind = c->layer_type[i];
        if (l->kind == LAYER_SLIDING) return err_set(e, "%s: layer %d: qwen3_5 has no sliding_attention layers", m->dir, i);
#define W(field, name, r, cc) do { snprintf(n, sizeof n, "layers.%d.%s", i, name); \
        if (model_get_weight(m, n, r, cc, &l->field, e)) return -1; \
        m->weight_bytes += weight_bytes(&l->field); } while (0)
#define F(field, name, len) do { snprintf(n, sizeof n, "layers.%d.%s", i, name); \
        if (hyb_get_f32(m, n, (size_t)(len), &l->field, e)) return -1; } while (0)
        F(ln_attn, "input_layernorm.weight", H);
        F(ln_mlp, "post_attention_layernorm.weight", H);
        if (l->kind == LAYER_LINEAR) {
            snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_qkvz.weight", i);
            l->fused = model_has_tensor(m, n);
            if (l->fused) { /* Qwen3-Next: one projection for q, k, v, z and one for b, a */
                W(w_qkvz, "linear_attn.in_proj_qkvz", 2 * Q->key_dim + 2 * Q->value_dim, H);
                W(w_ba, "linear_attn.in_proj_ba", 2 * nv, H);
                Q->fused = 1;
            } else {
                W(w_qkv, "linear_attn.in_proj_qkv", Q->conv_dim, H);
                W(w_z, "linear_attn.in_proj_z", Q->value_dim, H);
                W(w_b, "linear_attn.in_proj_b", nv, H);
                W(w_a, "linear_attn.in_proj_a", nv, H);
            }
            W(w_out, "linear_attn.out_proj", H, Q->value_dim);
            snprintf(n, sizeof n, "layers.%d.linear_attn.conv1d.weight", i);
            const st_tensor_t *cw = hyb_find(m, n);
            if (cw && cw->ndim == 3 && cw->shape[1] == K && cw->shape[2] == 1 && K > 1) Q->norm_off = 0.0f;
            F(conv_w, "linear_attn.conv1d.weight", (size_t)Q->conv_dim * K);
            F(A_log, "linear_attn.A_log", nv);
            F(dt_bias, "linear_attn.dt_bias", nv);
            F(gnorm, "linear_attn.norm.weight", dv);
            l->conv_off = slot_floats;
            slot_floats += (size_t)(K - 1) * Q->conv_dim;
            l->ssm_off = slot_floats;
            slot_floats += (size_t)nv * dk * dv;
        } else {
            W(wq, "self_attn.q_proj", nh * hd * 2, H);
            W(wk, "self_attn.k_proj", nkv * hd, H);
            W(wv, "self_attn.v_proj", nkv * hd, H);
            W(wo, "self_attn.o_proj", H, nh * hd);
            F(q_norm, "self_attn.q_norm.weight", hd);
            F(k_norm, "self_attn.k_norm.weight", hd);
            l->kv_layer = Q->n_kv_layers++;
        }
        l->moe = c->layer_moe[i];
        if (!l->moe) {
            if (I <= 0) return err_set(e, "%s: layer %d has a dense MLP but config.json has no intermediate_size", m->dir, i);
            W(wg, "mlp.gate_proj", I, H);
            W(wu, "mlp.up_proj", I, H);
            W(wd, "mlp.down_proj", H, I);
        } else {
            W(router, "mlp.gate", E, H);
            l->eg = calloc((size_t)E, sizeof(weight_t));
            l->eu = calloc((size_t)E, sizeof(weight_t));
            l->ed = calloc((size_t)E, sizeof(weight_t));
            snprintf(n, sizeof n, "layers.%d.mlp.experts.0.gate_proj.weight", i);
            if (model_has_tensor(m, n)) { /* one module per expert (HF) */
                for (int x = 0; x < E; x++) {
                    char en[128];
                    snprintf(en, sizeof en, "mlp.experts.%d.gate_proj", x); W(eg[x], en, Ie, H);
                    snprintf(en, sizeof en, "mlp.experts.%d.up_proj", x); W(eu[x], en, Ie, H);
                    snprintf(en, sizeof en, "mlp.experts.%d.down_proj", x); W(ed[x], en, H, Ie);
                }
            } else { /* stacked: transformers' fused gate_up_proj, or mlx-lm's switch_mlp */
                snprintf(n, sizeof n, "layers.%d.mlp.experts.gate_up_proj", i);
                if (hyb_find(m, n)) {
                    weight_t *gu = calloc((size_t)E, sizeof(weight_t));
                    int rc = hyb_get_experts(m, n, E, 2 * Ie, H, gu, e);
                    for (int x = 0; !rc && x < E; x++) { /* gate and up rows; a device backend makes views of gu[x]'s copy */
                        l->eg[x] = hyb_rows(&gu[x], 0, Ie);
                        l->eu[x] = hyb_rows(&gu[x], Ie, Ie);
                        rc = m->be->ops->prepare_weight(m->be, &l->eg[x], e) || m->be->ops->prepare_weight(m->be, &l->eu[x], e);
                    }
                    free(gu);
                    if (rc) return -1;
                    snprintf(n, sizeof n, "layers.%d.mlp.experts.down_proj", i);
                    if (hyb_get_experts(m, n, E, H, Ie, l->ed, e)) return -1;
                } else {
                    snprintf(n, sizeof n, "layers.%d.mlp.switch_mlp.gate_proj", i);
                    if (hyb_get_experts(m, n, E, Ie, H, l->eg, e)) return -1;
                    snprintf(n, sizeof n, "layers.%d.mlp.switch_mlp.up_proj", i);
                    if (hyb_get_experts(m, n, E, Ie, H, l->eu, e)) return -1;
                    snprintf(n, sizeof n, "layers.%d.mlp.switch_mlp.down_proj", i);
                    if (hyb_get_experts(m, n, E, H, Ie, l->ed, e)) return -1;
                }
                m->weight_bytes += (size_t)E * (weight_bytes(&l->eg[0]) * 2 + weight_bytes(&l->ed[0]));
            }
            W(sg, "mlp.shared_expert.gate_proj", Is, H);
            W(su, "mlp.shared_expert.up_proj", Is, H);
            W(sd, "mlp.shared_expert.down_proj", H, Is);
            W(s_gate, "mlp.shared_expert_gate", 1, H);
        }
#undef W
#undef F
    }
    m->weight_bytes += weight_bytes(&Q->lm_head);
    if (!Q->n_kv_layers) Q->n_kv_layers = 1; /* a pool needs a layer; an all-linear model leaves it unused */
    /* the attention layers' partial RoPE; inv_freq is a model-dtype buffer in transformers */
    Q->rot_dim = (int)(hd * c->rope.partial_rotary_factor) & ~1;
    Q->inv_freq = malloc(sizeof(float) * (Q->rot_dim / 2 + 1));
    rope_inv_freq(&c->rope, Q->rot_dim, c->max_pos, 0, Q->inv_freq, &Q->mscale);
    for (int i = 0; i < Q->rot_dim / 2; i++) Q->inv_freq[i] = hyb_round(c, Q->inv_freq[i]);
    if (Q->norm_off == 0.0f) log_info("qwen3_5: MLX layout (conv1d [C, K, 1]): norm weights already hold 1 + w");
    hyb_note_towers(m);
    m->rec = calloc(1, sizeof(rec_pool_t));
    rec_pool_init(m->rec, m->be, slot_floats ? slot_floats : 1);
    /* step buffers */
    hyb_arena_t *A = &Q->arena;
    hyb_arena_add(&Q->larena, &Q->xl, c->hidden_size);
    hyb_arena_add(&Q->larena, &Q->logits, c->vocab_size);
    size_t qd = (size_t)nh * hd, kd = (size_t)nkv * hd;
    size_t Im = I, Hm = H;
    if (Q->moe) { /* g, u serve the dense MLPs (I) and the shared expert (Is) */
        if (Ie > (int)Im) Im = Ie;
        if (Is > (int)Im) Im = Is;
    }
    hyb_arena_add(A, &Q->x, Hm); hyb_arena_add(A, &Q->h, Hm); hyb_arena_add(A, &Q->h2, Hm);
    hyb_arena_add(A, &Q->qkv, Q->conv_dim); hyb_arena_add(A, &Q->conv, Q->conv_dim);
    hyb_arena_add(A, &Q->z, Q->value_dim); hyb_arena_add(A, &Q->a, nv); hyb_arena_add(A, &Q->b, nv);
    hyb_arena_add(A, &Q->core, Q->value_dim);
    if (Q->fused) {
        hyb_arena_add(A, &Q->qkvz, 2 * (size_t)Q->key_dim + 2 * (size_t)Q->value_dim);
        hyb_arena_add(A, &Q->ba, 2 * (size_t)nv);
        Q->unit = gcd(dk, dv);
    }
    hyb_arena_add(A, &Q->qg, 2 * qd); hyb_arena_add(A, &Q->q, qd); hyb_arena_add(A, &Q->gate, qd);
    hyb_arena_add(A, &Q->k, kd); hyb_arena_add(A, &Q->v, kd); hyb_arena_add(A, &Q->att, qd);
    hyb_arena_add(A, &Q->g, Im); hyb_arena_add(A, &Q->u, Im);
    if (Q->moe) {
        hyb_arena_add(A, &Q->rl, E); hyb_arena_add(A, &Q->xe, Hm); hyb_arena_add(A, &Q->ge, Im);
        hyb_arena_add(A, &Q->ue, Im); hyb_arena_add(A, &Q->ye, Hm); hyb_arena_add(A, &Q->sgate, 1);
        if (bo->moe_route && bo->moe_experts) { hyb_arena_add(A, &Q->mids, c->n_experts_per_tok); hyb_arena_add(A, &Q->mwts, c->n_experts_per_tok); }
    }
    return 0;
}

static void q35_kv_shape(const model_t *m, int *n_layers, int *n_kv_heads, int *head_dim) {
    const q35_t *Q = m->impl;
    *n_layers = Q->n_kv_layers;
    *n_kv_heads = m->cfg.n_kv_heads;
    *head_dim = m->cfg.head_dim;
}

static void q35_destroy(model_t *m) {
    q35_t *Q = m->impl;
    if (!Q) return;
    backend_t *be = m->be;
    if (Q->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            q35_layer_t *l = &Q->layers[i];
            float *vs[] = {l->ln_attn, l->ln_mlp, l->conv_w, l->A_log, l->dt_bias, l->gnorm, l->q_norm, l->k_norm};
            for (size_t j = 0; j < sizeof vs / sizeof vs[0]; j++) be->ops->free(be, vs[j]);
            free(l->eg); free(l->eu); free(l->ed);
        }
    free(Q->layers);
    be->ops->free(be, Q->norm);
    hyb_arena_free(&Q->larena, be);
    hyb_arena_free(&Q->arena, be);
    free(Q->inv_freq);
    free(Q->slots); free(Q->idx); free(Q->tok_e); free(Q->wt_e); free(Q->rl_host); free(Q->fidx);
    free(Q->tables); free(Q->st); free(Q->cs); free(Q->ss);
    free(Q);
    m->impl = NULL;
}

/* Qwen3-Next's fused projections group their output rows per key head g (transformers'
 * fix_query_key_value_ordering), with r = nv / nk value heads per key head:
 *   in_proj_qkvz row blocks, per g:  q_g [dk] | k_g [dk] | v_g [r·dv] | z_g [r·dv]
 *   in_proj_ba,              per g:  b_g [r]  | a_g [r]
 * while the rest of the layer wants qkv = [q all heads | k all heads | v all heads] (the conv
 * channels), z [nv·dv], b [nv], a [nv]. One matmul per projection, then gather_rows moves
 * `unit`-wide pieces (unit = gcd(dk, dv)) into place. The index, built once for up to T
 * tokens, has four sections (fused_sections finds them): qkv [T · conv/unit],
 * z [T · vd/unit], b [T · nv], a [T · nv] — source rows in units; a step of fewer tokens
 * uses the head of each section. */
static int32_t *qkvz_index(const model_config_t *c, int unit, int T) {
    int nk = c->linear_k_heads, nv = c->linear_v_heads, dk = c->linear_k_dim, dv = c->linear_v_dim, r = nv / nk;
    int ku = dk / unit, vu = r * dv / unit, per_g = 2 * ku + 2 * vu; /* units per key-head group */
    size_t n_qkv = (size_t)nk * (2 * ku + vu), n_z = (size_t)nk * vu;
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)T * (n_qkv + n_z + 2 * (size_t)nv));
    if (!ix) return NULL;
    int32_t *q = ix, *z = ix + (size_t)T * n_qkv, *b = z + (size_t)T * n_z, *a = b + (size_t)T * nv;
    for (int t = 0; t < T; t++) {
        int32_t src = t * nk * per_g, *d = q + (size_t)t * n_qkv;
        for (int part = 0; part < 3; part++) /* q, k, v: each over all groups */
            for (int g = 0; g < nk; g++) {
                int off = part == 0 ? 0 : part == 1 ? ku : 2 * ku, len = part == 2 ? vu : ku;
                for (int j = 0; j < len; j++) *d++ = src + g * per_g + off + j;
            }
        for (int g = 0; g < nk; g++)
            for (int j = 0; j < vu; j++) z[(size_t)t * n_z + g * vu + j] = src + g * per_g + 2 * ku + vu + j;
        for (int g = 0; g < nk; g++)
            for (int j = 0; j < r; j++) {
                b[t * nv + g * r + j] = t * 2 * nv + g * 2 * r + j;
                a[t * nv + g * r + j] = t * 2 * nv + g * 2 * r + r + j;
            }
    }
    return ix;
}

static void fused_sections(const q35_t *Q, const model_config_t *c, int32_t *sec[4]) {
    size_t cap = (size_t)Q->cap_idx, nq = cap * Q->conv_dim / Q->unit, nz = cap * Q->value_dim / Q->unit;
    sec[0] = Q->fidx;
    sec[1] = sec[0] + nq;
    sec[2] = sec[1] + nz;
    sec[3] = sec[2] + cap * c->linear_v_heads;
}

static int ensure(model_t *m, const batch_t *b, err_t *e) {
    q35_t *Q = m->impl;
    const model_config_t *c = &m->cfg;
    int T = b->n_tokens;
    if (hyb_arena_ensure(&Q->arena, m->be, T, e)) return -1;
    if (hyb_arena_ensure(&Q->larena, m->be, b->n_logits, e)) return -1;
    if (T > Q->cap_idx) {
        free(Q->slots); free(Q->idx); free(Q->tok_e); free(Q->wt_e); free(Q->rl_host); free(Q->fidx);
        int k = c->n_experts_per_tok > 0 ? c->n_experts_per_tok : 1, E = c->n_experts > 0 ? c->n_experts : 1;
        Q->slots = malloc(sizeof(int32_t) * T);
        Q->idx = malloc(sizeof(int32_t) * 2 * (size_t)T * c->n_heads);
        Q->tok_e = malloc(sizeof(int32_t) * (size_t)T * (k + 1) * 2);
        Q->wt_e = malloc(sizeof(float) * (size_t)T * (k + 1) * 2);
        Q->rl_host = malloc(sizeof(float) * (size_t)T * E);
        Q->fidx = NULL;
        if (Q->fused && !(Q->fidx = qkvz_index(c, Q->unit, T))) return err_set(e, "out of memory for a step of %d tokens", T);
        if (!Q->slots || !Q->idx || !Q->tok_e || !Q->wt_e || !Q->rl_host) return err_set(e, "out of memory for a step of %d tokens", T);
        Q->cap_idx = T;
    }
    if (b->n_rows > Q->cap_rows) {
        free(Q->tables); free(Q->st); free(Q->cs); free(Q->ss);
        Q->tables = malloc(sizeof(int32_t *) * b->n_rows);
        Q->st = malloc(sizeof(float *) * b->n_rows);
        Q->cs = malloc(sizeof(float *) * b->n_rows);
        Q->ss = malloc(sizeof(float *) * b->n_rows);
        if (!Q->tables || !Q->st || !Q->cs || !Q->ss) return err_set(e, "out of memory for %d rows", b->n_rows);
        Q->cap_rows = b->n_rows;
    }
    return 0;
}

/* Sparse MoE block: out[T, H] = Σ_k p_k · expert_k(h) + sigmoid(h·w_sg) · shared(h). */
static void q35_moe(model_t *m, const q35_layer_t *l, float *out, const float *h, int T) {
    q35_t *Q = m->impl;
    backend_t *be = m->be;
    const backend_ops_t *op = be->ops;
    const model_config_t *c = &m->cfg;
    int H = c->hidden_size, E = c->n_experts, k = c->n_experts_per_tok, Ie = c->moe_intermediate_size, Is = c->shared_expert_intermediate_size;
    op->matmul(be, Q->rl, h, T, &l->router);
    int32_t *sel = Q->tok_e + (size_t)T * k; /* [T, k] chosen experts */
    float *sw = Q->wt_e + (size_t)T * k;     /* [T, k] their weights   */
    /* routing and experts on the device where the backend takes this step (no host round trip) */
    if (Q->mids && !op->moe_route(be, (int32_t *)Q->mids, Q->mwts, Q->rl, T, E, k, c->norm_topk_prob, NULL)) {
        if (!op->moe_experts(be, out, h, T, k, (const int32_t *)Q->mids, Q->mwts, l->eg, l->eu, l->ed, E, ACT_SILU)) goto shared;
        /* routed there, experts left to the loop below: the device's picks are the host's */
        op->download(be, sel, Q->mids, sizeof(int32_t) * T * k);
        op->download(be, sw, Q->mwts, sizeof(float) * T * k);
    } else {
        /* router on the host: softmax, top-k, renormalize (a few floats per token) */
        op->download(be, Q->rl_host, Q->rl, sizeof(float) * T * E);
        for (int t = 0; t < T; t++) moe_topk(Q->rl_host + (size_t)t * E, E, k, c->norm_topk_prob, sel + (size_t)t * k, sw + (size_t)t * k);
    }
    op->scale(be, out, 0.0f, (size_t)T * H);
    for (int x = 0; x < E; x++) { /* expert order: each token sums its experts by ascending id */
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (sel[(size_t)t * k + j] == x) { Q->tok_e[n] = t; Q->wt_e[n] = sw[(size_t)t * k + j]; n++; }
        if (!n) continue;
        op->gather_rows(be, Q->xe, h, Q->tok_e, n, H);
        op->matmul(be, Q->ge, Q->xe, n, &l->eg[x]);
        op->matmul(be, Q->ue, Q->xe, n, &l->eu[x]);
        op->glu(be, Q->ge, Q->ge, Q->ue, (size_t)n * Ie, ACT_SILU);
        op->matmul(be, Q->ye, Q->ge, n, &l->ed[x]);
        op->add_rows_scaled(be, out, Q->ye, Q->tok_e, Q->wt_e, n, H);
    }
shared: /* shared expert, gated per token: gate, up and the gate's logit of h in one dispatch */
    {
        float *const y[3] = {Q->g, Q->u, Q->sgate};
        const weight_t *const w[3] = {&l->sg, &l->su, &l->s_gate};
        hyb_multi(be, 3, y, h, T, w);
    }
    op->glu(be, Q->g, Q->g, Q->u, (size_t)T * Is, ACT_SILU);
    op->matmul(be, Q->ye, Q->g, T, &l->sd);
    op->sigmoid_mul(be, Q->ye, Q->sgate, T, H, 1);
    op->add(be, out, Q->ye, (size_t)T * H);
}

static int q35_forward(model_t *m, const batch_t *b, float *logits, err_t *e) {
    q35_t *Q = m->impl;
    backend_t *be = m->be;
    const backend_ops_t *op = be->ops;
    const model_config_t *c = &m->cfg;
    int T = b->n_tokens, H = c->hidden_size, hd = c->head_dim;
    int nh = c->n_heads, nkv = c->n_kv_heads, nv = c->linear_v_heads, dv = c->linear_v_dim, K = c->linear_conv_kernel;
    float eps = (float)c->rms_eps, no = Q->norm_off;
    if (ensure(m, b, e)) return -1;
    if (model_rows_state(m, b, Q->st, e)) return -1;

    for (int r = 0; r < b->n_rows; r++) {
        Q->tables[r] = b->seq[r]->blocks;
        for (int t = b->row_start[r]; t < b->row_start[r + 1]; t++) Q->slots[t] = kv_seq_slot(b->seq[r], m->kv.block_size, b->pos[t]);
    }
    /* q_proj rows of hd: even ones are the query, odd ones the gate ([T·nh·2, hd]) */
    for (int i = 0; i < T * nh; i++) { Q->idx[i] = 2 * i; Q->idx[T * nh + i] = 2 * i + 1; }
    attn_args_t aa = {
        .n_rows = b->n_rows, .row_start = b->row_start, .pos = b->pos, .block_tables = Q->tables,
        .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
    };
    delta_args_t da = {
        .n_rows = b->n_rows, .row_start = b->row_start, .n_k_heads = c->linear_k_heads, .n_v_heads = nv,
        .dk = c->linear_k_dim, .dv = dv, .stride = Q->conv_dim, .q_off = 0, .k_off = Q->key_dim, .v_off = 2 * Q->key_dim,
        .q_scale = 1.0f / sqrtf((float)c->linear_k_dim), .state = Q->ss,
        .pos = b->pos, .chunk = DELTA_CHUNK, /* whole aligned chunks of 64 run chunk-parallel */
    };

    op->embed(be, Q->x, b->tokens, T, &Q->embed, 1.0f);
    for (int li = 0; li < c->n_layers; li++) {
        const q35_layer_t *l = &Q->layers[li];
        int x_done = 0; /* x += the block's output already (matmul_add) */
        if (l->kind == LAYER_LINEAR) {
            /* gated DeltaNet: the input projections of h = rms_norm(x) in one op where the backend
             * fuses the norm (rms_matmul_multi), else the norm and one matmul_multi */
            float *const y2[2] = {Q->qkvz, Q->ba}, *const y4[4] = {Q->qkv, Q->z, Q->b, Q->a};
            const weight_t *const w2[2] = {&l->w_qkvz, &l->w_ba}, *const w4[4] = {&l->w_qkv, &l->w_z, &l->w_b, &l->w_a};
            hyb_proj(be, l->fused ? 2 : 4, l->fused ? y2 : y4, Q->h, Q->x, l->ln_attn, no, eps, T, H, l->fused ? w2 : w4);
            if (l->fused) {
                int u = Q->unit;
                int32_t *sec[4];
                fused_sections(Q, c, sec);
                op->gather_rows(be, Q->qkv, Q->qkvz, sec[0], T * Q->conv_dim / u, u);
                op->gather_rows(be, Q->z, Q->qkvz, sec[1], T * Q->value_dim / u, u);
                op->gather_rows(be, Q->b, Q->ba, sec[2], T * nv, 1);
                op->gather_rows(be, Q->a, Q->ba, sec[3], T * nv, 1);
            }
            for (int r = 0; r < b->n_rows; r++) {
                Q->cs[r] = Q->st[r] + l->conv_off;
                Q->ss[r] = Q->st[r] + l->ssm_off;
            }
            da.A_log = l->A_log;
            da.dt_bias = l->dt_bias;
            /* conv → delta rule → gated norm, in one op where the backend fuses a decode step's */
            if (!op->delta_decode || op->delta_decode(be, Q->core, Q->qkv, Q->cs, l->conv_w, K, Q->a, Q->b, Q->z, l->gnorm, eps, T, &da)) {
                op->conv1d_causal(be, Q->conv, Q->qkv, b->n_rows, b->row_start, Q->cs, l->conv_w, Q->conv_dim, K, ACT_SILU);
                op->gated_delta(be, Q->core, Q->conv, Q->a, Q->b, T, &da);
                op->rms_norm(be, Q->core, Q->core, l->gnorm, 0.f, T * nv, dv, eps);
                op->glu(be, Q->core, Q->z, Q->core, (size_t)T * nv * dv, ACT_SILU);
            }
            x_done = op->matmul_add && !op->matmul_add(be, Q->x, Q->core, T, &l->w_out);
            if (!x_done) op->matmul(be, Q->h, Q->core, T, &l->w_out);
        } else {
            /* gated full attention */
            float *const y3[3] = {Q->qg, Q->k, Q->v};
            const weight_t *const w3[3] = {&l->wq, &l->wk, &l->wv};
            hyb_proj(be, 3, y3, Q->h, Q->x, l->ln_attn, no, eps, T, H, w3);
            op->gather_rows(be, Q->q, Q->qg, Q->idx, T * nh, hd);
            op->gather_rows(be, Q->gate, Q->qg, Q->idx + T * nh, T * nh, hd);
            op->rms_norm(be, Q->q, Q->q, l->q_norm, no, T * nh, hd, eps);
            op->rms_norm(be, Q->k, Q->k, l->k_norm, no, T * nkv, hd, eps);
            op->rope(be, Q->q, b->pos, T, nh, hd, Q->rot_dim, Q->inv_freq, Q->mscale);
            op->rope(be, Q->k, b->pos, T, nkv, hd, Q->rot_dim, Q->inv_freq, Q->mscale);
            aa.kv = kv_pool_view(&m->kv, l->kv_layer);
            op->kv_write(be, &aa.kv, Q->k, Q->v, Q->slots, T);
            op->attention(be, Q->att, Q->q, T, &aa);
            op->sigmoid_mul(be, Q->att, Q->gate, T, nh * hd, nh * hd);
            x_done = op->matmul_add && !op->matmul_add(be, Q->x, Q->att, T, &l->wo);
            if (!x_done) op->matmul(be, Q->h, Q->att, T, &l->wo);
        }
        if (!x_done) op->add(be, Q->x, Q->h, (size_t)T * H);
        /* MLP: the whole block in one op where the backend has it (rms_mlp), else the norm inside
         * gate/up/GLU (rms_matmul_glu), else the separate ops; down as x += g · wdᵀ (matmul_add) */
        if (l->moe) {
            op->rms_norm(be, Q->h, Q->x, l->ln_mlp, no, T, H, eps);
            q35_moe(m, l, Q->h2, Q->h, T);
            op->add(be, Q->x, Q->h2, (size_t)T * H);
            continue;
        }
        if (op->rms_mlp && !op->rms_mlp(be, Q->x, l->ln_mlp, no, eps, T, &l->wg, &l->wu, &l->wd, ACT_SILU)) continue;
        hyb_glu(be, Q->g, Q->u, Q->h, Q->x, 0, l->ln_mlp, no, eps, T, H, &l->wg, &l->wu, ACT_SILU);
        if (op->matmul_add && !op->matmul_add(be, Q->x, Q->g, T, &l->wd)) continue;
        op->matmul(be, Q->h, Q->g, T, &l->wd);
        op->add(be, Q->x, Q->h, (size_t)T * H);
    }
    op->gather_rows(be, Q->xl, Q->x, b->logit_index, b->n_logits, H);
    op->rms_norm(be, Q->xl, Q->xl, Q->norm, no, b->n_logits, H, eps);
    op->matmul(be, Q->logits, Q->xl, b->n_logits, &Q->lm_head);
    m->dev_logits = Q->logits;
    if (logits) op->download(be, logits, Q->logits, sizeof(float) * b->n_logits * c->vocab_size);
    return 0;
}

const model_ops_t qwen35_ops = {
    .family = "qwen3_5", .load = q35_load, .forward = q35_forward, .destroy = q35_destroy, .kv_shape = q35_kv_shape,
};
