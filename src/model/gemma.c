/* gemma.c — the Gemma 3 and Gemma 4 text models (transformers' modeling_gemma3.py and
 * modeling_gemma4.py). One forward over a ragged batch, top to bottom:
 *
 *   x = embed(tokens) · round(√H)                               [T, H]
 *   gemma4 PLE: ple = (rms_norm(x·W_plᵀ · H^-½) · pl_norm        [T, L, P]
 *                      + embed_pl(tokens) · round(√P)) · 2^-½
 *   per layer (sliding: window w and the local RoPE; full: global RoPE, gemma4 own head_dim/KV heads):
 *     r = x;  h = norm(x) · input_layernorm
 *     q = norm_per_head(h·W_qᵀ) · q_norm
 *     k = norm_per_head(h·W_kᵀ) · k_norm;  v = h·W_vᵀ (gemma4: v = rms_norm(v), no weight;
 *         attention_k_eq_v: v from the k projection before k_norm)
 *     KV-shared layers (gemma4, the last num_kv_shared_layers) compute no k/v: they read the KV
 *         of the last earlier layer of their type
 *     q, k = rope(pos);  a = attention(q, cache; scale, window, softcap)
 *     x = r + norm(a·W_oᵀ) · post_attention_layernorm
 *     r = x;  h = mlp(norm(x) · pre_feedforward_layernorm)      (gelu_tanh(h·W_gᵀ) · h·W_uᵀ)·W_dᵀ
 *     gemma4 MoE: h = norm1(h) + norm2(experts(norm(r) · pre_ff_norm_2))), routed on
 *         rms_norm(r) · router.scale · H^-½: softmax, top-k, renormalized, · per_expert_scale
 *     x = r + norm(h) · post_feedforward_layernorm
 *     gemma4 PLE: x += norm((gelu_tanh(x·W_gateᵀ) · ple[:, layer])·W_projᵀ) · post_per_layer_input_norm
 *     gemma4: x *= layer_scalar
 *   logits = softcap(norm(x[logit_index]) · lm_headᵀ)
 *
 * Norms: Gemma 3 scales by (1 + w), Gemma 4 by w, both in f32. Attention scale: Gemma 3
 * query_pre_attn_scalar^-½, Gemma 4 1 (q_norm carries it). Constants that transformers keeps
 * in model-dtype buffers (embedding scales, RoPE frequencies) are rounded to that dtype. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/log.h"
#include "model/hyb_util.h"
#include "model/rope.h"

typedef struct gemma_layer {
    int sliding, hd, nkv, inter;       /* shape of this layer                               */
    int kv_layer;                      /* KV pool layer it writes (or, shared, reads)       */
    int grp_layer;                     /* the same, within its group's pool (m->kv or
                                          m->kv_swa) when sliding layers are kept apart     */
    int shared;                        /* gemma4: reuses kv_layer of an earlier layer       */
    float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff;       /* [H]                      */
    weight_t wq, wk, wv, wo;           /* [nh·hd, H] [nkv·hd, H] ×2 [H, nh·hd]; wv absent with k_eq_v */
    int k_eq_v;
    float *q_norm, *k_norm;            /* [hd]                                              */
    float *qn_f, *kn_f;                /* norm_off + q_norm / k_norm (the fused attention op's norms
                                          have no offset); NULL: the separate ops              */
    weight_t wg, wu, wd;               /* [I, H] ×2 [H, I]                                  */
    /* gemma4 MoE block */
    float *ln_post_ff1, *ln_pre_ff2, *ln_post_ff2, *router_scale, *per_expert_scale;
    float *pes_dev;                    /* per_expert_scale in backend memory (moe_route)    */
    weight_t router;                   /* [E, H]                                            */
    weight_t *eg, *eu, *ed;            /* [E] of [Ie, H] ×2 [H, Ie]                         */
    /* gemma4 PLE */
    weight_t pl_gate, pl_proj;         /* [P, H] [H, P]                                     */
    float *ln_post_pl;                 /* [H]                                               */
    float layer_scalar;                /* 1 when absent                                     */
    float *inv_freq;                   /* [rot/2] (shared with the other layers of its type) */
    int rot_dim;
} gemma_layer_t;

typedef struct gemma {
    int v4;                            /* gemma4                                            */
    float norm_off;                    /* 1: (1 + w) norms (gemma3); 0: w (gemma4)          */
    weight_t embed, lm_head, embed_pl, pl_model_proj; /* [V, H] ×2, [Vp, L·P], [L·P, H]     */
    float *norm, *pl_norm;             /* [H], [P]                                          */
    float embed_scale, embed_pl_scale;
    gemma_layer_t *layers;
    float *inv_local, *inv_global;     /* RoPE tables of the two layer types                */
    float ms_local, ms_global;
    int rot_local, rot_global, n_kv_layers, max_kv_width, max_hd, max_nkv;
    int n_full_layers, n_swa_layers, full_width, swa_width; /* the two KV groups             */
    int full_rows, swa_rows;  /* the most KV heads of a layer in each group (q8 caches' scale rows) */
    /* run state */
    hyb_arena_t arena;
    hyb_arena_t larena; /* the logit rows: xl [n, hidden], logits [n, vocab], grown to the most rows a step asked for */
    float *x, *r, *h, *h2, *q, *k, *v, *att, *g, *u, *rl, *xe, *ge, *ue, *ye, *ple, *plt, *pll, *pg;
    float *mids, *mwts;                /* [T, k] expert ids (int32) and weights of moe_route */
    float *xl, *logits;
    int cap_rows, cap_idx;
    int32_t *slots, *idx, *tok_e, *slots_swa;
    float *wt_e, *rl_host;
    const int32_t **tables, **tables_swa;
} gemma_t;

/* layer li's vector `name` plus `add` (hyb_get_f32_plus) */
static int g_vec_plus(model_t *m, int li, const char *name, int n, float add, float **out, err_t *e) {
    char buf[256];
    snprintf(buf, sizeof buf, "layers.%d.%s", li, name);
    return hyb_get_f32_plus(m, buf, (size_t)n, add, out, e);
}
static int g_vec(model_t *m, int li, const char *name, int n, float **out, err_t *e) { return g_vec_plus(m, li, name, n, 0.0f, out, e); }
static int g_w(model_t *m, int li, const char *name, int rows, int cols, weight_t *w, err_t *e) {
    char buf[256];
    snprintf(buf, sizeof buf, "layers.%d.%s", li, name);
    if (model_get_weight(m, buf, rows, cols, w, e)) return -1;
    m->weight_bytes += weight_bytes(w);
    return 0;
}

/* RoPE table of one layer type: inv_freq rounded like transformers' model-dtype buffer. */
static float *rope_table(const model_config_t *c, const rope_config_t *rc, int hd, int *rot, float *ms) {
    *rot = rc->type == ROPE_PROPORTIONAL ? hd : ((int)(hd * rc->partial_rotary_factor) & ~1);
    float *inv = malloc(sizeof(float) * (*rot / 2 + 1));
    rope_inv_freq(rc, *rot, c->max_pos, 0, inv, ms);
    for (int i = 0; i < *rot / 2; i++) inv[i] = hyb_round(c, inv[i]);
    return inv;
}

static int gemma_load(model_t *m, err_t *e) {
    model_config_t *c = &m->cfg;
    gemma_t *G = calloc(1, sizeof *G);
    m->impl = G;
    m->dev_logits_ok = !(c->final_softcap > 0); /* the soft-capping below runs on the host */
    G->v4 = c->arch == ARCH_GEMMA4;
    G->norm_off = G->v4 ? 0.0f : 1.0f;
    int H = c->hidden_size, nh = c->n_heads, L = c->n_layers, P = c->hidden_per_layer_input;
    int E = c->n_experts, Ie = c->moe_intermediate_size;
    int moe = G->v4 && c->enable_moe_block;
    const backend_ops_t *bo = m->be->ops;
    if ((G->v4 && !bo->scale) || (moe && !bo->add_rows_scaled))
        return err_set(e, "%s: backend '%s' lacks the ops gemma needs (scale, add_rows_scaled)", m->dir, bo->name);
    if (moe && (E <= 0 || E > 1024 || c->n_experts_per_tok <= 0)) return err_set(e, "%s: enable_moe_block needs num_experts (1..1024) and top_k_experts", m->dir);
    if (model_get_weight(m, "embed_tokens", c->vocab_size, H, &G->embed, e)) return -1;
    if (!c->tie_embeddings || model_has_tensor(m, "lm_head.weight")) {
        if (model_get_weight(m, "lm_head", c->vocab_size, H, &G->lm_head, e)) return -1;
    } else G->lm_head = G->embed;
    if (hyb_get_f32(m, "norm.weight", H, &G->norm, e)) return -1;
    /* The embedding scales are buffers made with torch.tensor(python float), which takes the
     * default dtype: the checkpoint's dtype under from_pretrained, and the cast dtype after
     * .to(); rounded either way (unlike inv_freq, built as f32 and cast only by .to()). */
    model_config_t cs = *c;
    if (cs.param_dtype == DT_F32) cs.param_dtype = c->torch_dtype;
    G->embed_scale = hyb_round(&cs, sqrtf((float)H));
    if (P) {
        if (model_get_weight(m, "embed_tokens_per_layer", c->vocab_per_layer_input, L * P, &G->embed_pl, e) ||
            model_get_weight(m, "per_layer_model_projection", L * P, H, &G->pl_model_proj, e) ||
            hyb_get_f32(m, "per_layer_projection_norm.weight", P, &G->pl_norm, e))
            return -1;
        G->embed_pl_scale = hyb_round(&cs, sqrtf((float)P));
        m->weight_bytes += weight_bytes(&G->pl_model_proj);
    }
    int first_shared = L - c->n_kv_shared_layers;
    G->layers = calloc((size_t)L, sizeof(gemma_layer_t));
    int hd_local = c->head_dim, hd_global = c->head_dim;
    for (int i = 0; i < L; i++) {
        gemma_layer_t *l = &G->layers[i];
        if (c->layer_type[i] == LAYER_LINEAR) return err_set(e, "%s: layer %d: gemma has no linear_attention layers", m->dir, i);
        l->sliding = c->layer_type[i] == LAYER_SLIDING;
        l->hd = c->layer_head_dim[i];
        l->nkv = c->layer_kv_heads[i];
        if (l->sliding) hd_local = l->hd; else hd_global = l->hd;
        if (l->nkv * l->hd > G->max_kv_width) G->max_kv_width = l->nkv * l->hd;
        if (l->hd > G->max_hd) G->max_hd = l->hd;
        l->shared = G->v4 && c->n_kv_shared_layers > 0 && i >= first_shared;
        l->k_eq_v = G->v4 && c->attention_k_eq_v && !l->sliding;
        l->inter = c->intermediate_size * (G->v4 && c->double_wide_mlp && l->shared ? 2 : 1);
        l->layer_scalar = 1.0f;
        if (l->shared) { /* the last earlier non-shared layer of the same type */
            int src = -1;
            for (int j = first_shared - 1; j >= 0; j--)
                if (c->layer_type[j] == c->layer_type[i]) { src = j; break; }
            if (src < 0) return err_set(e, "%s: KV-shared layer %d has no earlier %s layer to share", m->dir, i, l->sliding ? "sliding" : "full");
            if (G->layers[src].hd != l->hd || G->layers[src].nkv != l->nkv)
                return err_set(e, "%s: KV-shared layer %d differs in shape from layer %d", m->dir, i, src);
            l->kv_layer = G->layers[src].kv_layer;
            l->grp_layer = G->layers[src].grp_layer;
        } else {
            l->kv_layer = G->n_kv_layers++;
            l->grp_layer = l->sliding ? G->n_swa_layers++ : G->n_full_layers++;
            int *wd = l->sliding ? &G->swa_width : &G->full_width, *rw = l->sliding ? &G->swa_rows : &G->full_rows;
            if (l->nkv * l->hd > *wd) *wd = l->nkv * l->hd;
            if (l->nkv > *rw) *rw = l->nkv;
        }
        int hd = l->hd, nkv = l->nkv, I = l->inter;
        if (g_vec(m, i, "input_layernorm.weight", H, &l->ln_in, e) || g_vec(m, i, "post_attention_layernorm.weight", H, &l->ln_post_attn, e) ||
            g_vec(m, i, "pre_feedforward_layernorm.weight", H, &l->ln_pre_ff, e) ||
            g_vec(m, i, "post_feedforward_layernorm.weight", H, &l->ln_post_ff, e))
            return -1;
        if (g_w(m, i, "self_attn.q_proj", nh * hd, H, &l->wq, e) || g_w(m, i, "self_attn.o_proj", H, nh * hd, &l->wo, e) ||
            g_vec(m, i, "self_attn.q_norm.weight", hd, &l->q_norm, e))
            return -1;
        if (!l->shared) {
            if (g_w(m, i, "self_attn.k_proj", nkv * hd, H, &l->wk, e) || g_vec(m, i, "self_attn.k_norm.weight", hd, &l->k_norm, e)) return -1;
            if (!l->k_eq_v && g_w(m, i, "self_attn.v_proj", nkv * hd, H, &l->wv, e)) return -1;
            if (bo->norm_rope_kv_attention) { /* q/k norms, rope, the cache write and attention in one op */
                if (G->norm_off == 0.0f) { l->qn_f = l->q_norm; l->kn_f = l->k_norm; }
                else if (g_vec_plus(m, i, "self_attn.q_norm.weight", hd, G->norm_off, &l->qn_f, e) ||
                         g_vec_plus(m, i, "self_attn.k_norm.weight", hd, G->norm_off, &l->kn_f, e))
                    return -1;
            }
        }
        if (g_w(m, i, "mlp.gate_proj", I, H, &l->wg, e) || g_w(m, i, "mlp.up_proj", I, H, &l->wu, e) ||
            g_w(m, i, "mlp.down_proj", H, I, &l->wd, e))
            return -1;
        if (moe) {
            char n[256];
            if (g_vec(m, i, "post_feedforward_layernorm_1.weight", H, &l->ln_post_ff1, e) ||
                g_vec(m, i, "pre_feedforward_layernorm_2.weight", H, &l->ln_pre_ff2, e) ||
                g_vec(m, i, "post_feedforward_layernorm_2.weight", H, &l->ln_post_ff2, e) ||
                g_vec(m, i, "router.scale", H, &l->router_scale, e) || g_vec(m, i, "router.per_expert_scale", E, &l->per_expert_scale, e) ||
                g_w(m, i, "router.proj", E, H, &l->router, e))
                return -1;
            l->eg = calloc((size_t)E, sizeof(weight_t));
            l->eu = calloc((size_t)E, sizeof(weight_t));
            l->ed = calloc((size_t)E, sizeof(weight_t));
            snprintf(n, sizeof n, "layers.%d.experts.switch_glu.gate_proj", i);
            if (hyb_find(m, n) || (strcat(n, ".weight"), hyb_find(m, n))) {
                /* mlx-lm's SwitchGLU names: experts.switch_glu.{gate,up,down}_proj [E, ·, ·] */
                const char *part[3] = {"gate_proj", "up_proj", "down_proj"};
                weight_t *dst[3] = {l->eg, l->eu, l->ed};
                for (int p = 0; p < 3; p++) {
                    snprintf(n, sizeof n, "layers.%d.experts.switch_glu.%s", i, part[p]);
                    if (hyb_get_experts(m, n, E, p < 2 ? Ie : H, p < 2 ? H : Ie, dst[p], e)) return -1;
                }
                goto experts_done;
            }
            weight_t *gu = calloc((size_t)E, sizeof(weight_t));
            snprintf(n, sizeof n, "layers.%d.experts.gate_up_proj", i);
            int rc = hyb_get_experts(m, n, E, 2 * Ie, H, gu, e);
            for (int x = 0; !rc && x < E; x++) { /* gate and up rows; a device backend makes views of gu[x]'s copy */
                l->eg[x] = hyb_rows(&gu[x], 0, Ie);
                l->eu[x] = hyb_rows(&gu[x], Ie, Ie);
                rc = m->be->ops->prepare_weight(m->be, &l->eg[x], e) || m->be->ops->prepare_weight(m->be, &l->eu[x], e);
            }
            free(gu);
            if (rc) return -1;
            snprintf(n, sizeof n, "layers.%d.experts.down_proj", i);
            if (hyb_get_experts(m, n, E, H, Ie, l->ed, e)) return -1;
        experts_done:
            m->weight_bytes += (size_t)E * (2 * weight_bytes(&l->eg[0]) + weight_bytes(&l->ed[0]));
            /* per_expert_scale is applied on the host: keep a host copy (and the backend's for
             * moe_route, where the backend routes on the device) */
            float *pes = malloc(sizeof(float) * E);
            m->be->ops->download(m->be, pes, l->per_expert_scale, sizeof(float) * E);
            if (bo->moe_route) l->pes_dev = l->per_expert_scale;
            else m->be->ops->free(m->be, l->per_expert_scale);
            l->per_expert_scale = pes;
        }
        if (P) {
            if (g_w(m, i, "per_layer_input_gate", P, H, &l->pl_gate, e) || g_w(m, i, "per_layer_projection", H, P, &l->pl_proj, e) ||
                g_vec(m, i, "post_per_layer_input_norm.weight", H, &l->ln_post_pl, e))
                return -1;
        }
        char sn[64];
        snprintf(sn, sizeof sn, "layers.%d.layer_scalar", i);
        if (hyb_find(m, sn)) {
            float *ls;
            if (hyb_get_f32(m, sn, 1, &ls, e)) return -1;
            m->be->ops->download(m->be, &l->layer_scalar, ls, sizeof(float));
            m->be->ops->free(m->be, ls);
        }
    }
    m->weight_bytes += weight_bytes(&G->lm_head);
    G->inv_local = rope_table(c, &c->rope_local, hd_local, &G->rot_local, &G->ms_local);
    G->inv_global = rope_table(c, &c->rope, hd_global, &G->rot_global, &G->ms_global);
    for (int i = 0; i < L; i++) {
        gemma_layer_t *l = &G->layers[i];
        l->inv_freq = l->sliding ? G->inv_local : G->inv_global;
        l->rot_dim = l->sliding ? G->rot_local : G->rot_global;
        if (l->nkv > G->max_nkv) G->max_nkv = l->nkv;
    }
    hyb_note_towers(m);
    /* step buffers */
    hyb_arena_t *A = &G->arena;
    hyb_arena_add(&G->larena, &G->xl, c->hidden_size);
    hyb_arena_add(&G->larena, &G->logits, c->vocab_size);
    size_t qd = (size_t)nh * G->max_hd, kd = (size_t)G->max_kv_width, Im = (size_t)c->intermediate_size * 2;
    if (moe && (size_t)Ie > Im) Im = Ie;
    hyb_arena_add(A, &G->x, H); hyb_arena_add(A, &G->r, H); hyb_arena_add(A, &G->h, H); hyb_arena_add(A, &G->h2, H);
    hyb_arena_add(A, &G->q, qd); hyb_arena_add(A, &G->k, kd); hyb_arena_add(A, &G->v, kd); hyb_arena_add(A, &G->att, qd);
    hyb_arena_add(A, &G->g, Im); hyb_arena_add(A, &G->u, Im);
    if (moe) {
        hyb_arena_add(A, &G->rl, E); hyb_arena_add(A, &G->xe, H); hyb_arena_add(A, &G->ge, Im);
        hyb_arena_add(A, &G->ue, Im); hyb_arena_add(A, &G->ye, H);
        if (bo->moe_route && bo->moe_experts) { hyb_arena_add(A, &G->mids, c->n_experts_per_tok); hyb_arena_add(A, &G->mwts, c->n_experts_per_tok); }
    }
    if (P) {
        hyb_arena_add(A, &G->ple, (size_t)L * P); hyb_arena_add(A, &G->plt, (size_t)L * P);
        hyb_arena_add(A, &G->pll, P); hyb_arena_add(A, &G->pg, P);
    }
    return 0;
}

/* One KV layer per non-shared layer, at the widest per-token width any layer needs: a
 * layer with fewer heads or a smaller head_dim packs its slots densely into the front of
 * the same buffer (its view carries its own shape). As max_nkv heads of ceil(width / max_nkv)
 * (an int8 cache keeps a scale per position and head: room for the most heads of any layer). */
static void gemma_kv_shape(const model_t *m, int *n_layers, int *n_kv_heads, int *head_dim) {
    const gemma_t *G = m->impl;
    *n_layers = G->n_kv_layers;
    *n_kv_heads = G->max_nkv > 0 ? G->max_nkv : 1;
    *head_dim = (G->max_kv_width + *n_kv_heads - 1) / *n_kv_heads;
}

/* Sliding layers as a KV group of their own (DESIGN §5): full and sliding layers each packed
 * at their group's widest per-token width. */
static int gemma_kv_groups(const model_t *m, int *full_layers, int *full_width, int *full_rows, int *swa_layers, int *swa_width,
                           int *swa_rows) {
    const gemma_t *G = m->impl;
    *full_layers = G->n_full_layers;
    *full_width = G->full_width;
    *full_rows = G->full_rows;
    *swa_layers = G->n_swa_layers;
    *swa_width = G->swa_width;
    *swa_rows = G->swa_rows;
    return G->n_swa_layers > 0 && m->cfg.sliding_window > 0 ? m->cfg.sliding_window : 0;
}

static void gemma_destroy(model_t *m) {
    gemma_t *G = m->impl;
    if (!G) return;
    backend_t *be = m->be;
    if (G->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) {
            gemma_layer_t *l = &G->layers[i];
            float *vs[] = {l->ln_in, l->ln_post_attn, l->ln_pre_ff, l->ln_post_ff, l->q_norm, l->k_norm, l->ln_post_ff1,
                           l->ln_pre_ff2, l->ln_post_ff2, l->router_scale, l->ln_post_pl};
            for (size_t j = 0; j < sizeof vs / sizeof vs[0]; j++) be->ops->free(be, vs[j]);
            if (l->qn_f != l->q_norm) be->ops->free(be, l->qn_f);
            if (l->kn_f != l->k_norm) be->ops->free(be, l->kn_f);
            free(l->per_expert_scale);
            be->ops->free(be, l->pes_dev);
            free(l->eg); free(l->eu); free(l->ed);
        }
    free(G->layers);
    be->ops->free(be, G->norm);
    be->ops->free(be, G->pl_norm);
    hyb_arena_free(&G->larena, be);
    hyb_arena_free(&G->arena, be);
    free(G->inv_local); free(G->inv_global);
    free(G->slots); free(G->idx); free(G->tok_e); free(G->wt_e); free(G->rl_host); free(G->tables);
    free(G->slots_swa); free(G->tables_swa);
    free(G);
    m->impl = NULL;
}

static int ensure(model_t *m, const batch_t *b, err_t *e) {
    gemma_t *G = m->impl;
    const model_config_t *c = &m->cfg;
    int T = b->n_tokens;
    if (hyb_arena_ensure(&G->arena, m->be, T, e)) return -1;
    if (hyb_arena_ensure(&G->larena, m->be, b->n_logits, e)) return -1;
    if (T > G->cap_idx) {
        free(G->slots); free(G->idx); free(G->tok_e); free(G->wt_e); free(G->rl_host); free(G->slots_swa);
        int k = c->n_experts_per_tok > 0 ? c->n_experts_per_tok : 1, E = c->n_experts > 0 ? c->n_experts : 1;
        G->slots = malloc(sizeof(int32_t) * T);
        G->idx = malloc(sizeof(int32_t) * T);
        G->tok_e = malloc(sizeof(int32_t) * (size_t)T * k * 2);
        G->wt_e = malloc(sizeof(float) * (size_t)T * k * 2);
        G->rl_host = malloc(sizeof(float) * (size_t)T * E);
        G->slots_swa = malloc(sizeof(int32_t) * T);
        if (!G->slots || !G->idx || !G->tok_e || !G->wt_e || !G->rl_host || !G->slots_swa) return err_set(e, "out of memory for a step of %d tokens", T);
        G->cap_idx = T;
    }
    if (b->n_rows > G->cap_rows) {
        free(G->tables);
        free(G->tables_swa);
        G->tables = malloc(sizeof(int32_t *) * b->n_rows);
        G->tables_swa = malloc(sizeof(int32_t *) * b->n_rows);
        if (!G->tables || !G->tables_swa) return err_set(e, "out of memory for %d rows", b->n_rows);
        G->cap_rows = b->n_rows;
    }
    return 0;
}

/* Gemma 4 MoE branch: out[T, H] = Σ_k w_k · expert_k(xin), routed on x. */
static void gemma_moe(model_t *m, const gemma_layer_t *l, float *out, const float *x, const float *xin, int T) {
    gemma_t *G = m->impl;
    backend_t *be = m->be;
    const backend_ops_t *op = be->ops;
    const model_config_t *c = &m->cfg;
    int H = c->hidden_size, E = c->n_experts, k = c->n_experts_per_tok, Ie = c->moe_intermediate_size;
    /* router: rms_norm(x) · scale · H^-½ → proj → softmax → top-k → renormalize · per_expert_scale */
    op->rms_norm(be, G->xe, x, l->router_scale, 0.f, T, H, (float)c->rms_eps);
    op->scale(be, G->xe, 1.0f / sqrtf((float)H), (size_t)T * H);
    op->matmul(be, G->rl, G->xe, T, &l->router);
    int32_t *sel = G->tok_e + (size_t)T * k;
    float *sw = G->wt_e + (size_t)T * k;
    /* routing and experts on the device where the backend takes this step (no host round trip) */
    if (G->mids && !op->moe_route(be, (int32_t *)G->mids, G->mwts, G->rl, T, E, k, 1, l->pes_dev)) {
        if (!op->moe_experts(be, out, xin, T, k, (const int32_t *)G->mids, G->mwts, l->eg, l->eu, l->ed, E, ACT_GELU_TANH)) return;
        /* routed there (per-expert scale included), experts left to the loop below */
        op->download(be, sel, G->mids, sizeof(int32_t) * T * k);
        op->download(be, sw, G->mwts, sizeof(float) * T * k);
    } else {
        op->download(be, G->rl_host, G->rl, sizeof(float) * T * E);
        for (int t = 0; t < T; t++) {
            moe_topk(G->rl_host + (size_t)t * E, E, k, 1, sel + (size_t)t * k, sw + (size_t)t * k);
            for (int j = 0; j < k; j++) sw[(size_t)t * k + j] *= l->per_expert_scale[sel[(size_t)t * k + j]];
        }
    }
    op->scale(be, out, 0.0f, (size_t)T * H);
    for (int xe = 0; xe < E; xe++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (sel[(size_t)t * k + j] == xe) { G->tok_e[n] = t; G->wt_e[n] = sw[(size_t)t * k + j]; n++; }
        if (!n) continue;
        op->gather_rows(be, G->xe, xin, G->tok_e, n, H);
        op->matmul(be, G->ge, G->xe, n, &l->eg[xe]);
        op->matmul(be, G->ue, G->xe, n, &l->eu[xe]);
        op->glu(be, G->ge, G->ge, G->ue, (size_t)n * Ie, ACT_GELU_TANH);
        op->matmul(be, G->ye, G->ge, n, &l->ed[xe]);
        op->add_rows_scaled(be, out, G->ye, G->tok_e, G->wt_e, n, H);
    }
}

static int gemma_forward(model_t *m, const batch_t *b, float *logits, err_t *e) {
    gemma_t *G = m->impl;
    backend_t *be = m->be;
    const backend_ops_t *op = be->ops;
    const model_config_t *c = &m->cfg;
    int T = b->n_tokens, H = c->hidden_size, nh = c->n_heads, L = c->n_layers, P = c->hidden_per_layer_input;
    float eps = (float)c->rms_eps, no = G->norm_off;
    int moe = G->v4 && c->enable_moe_block;
    if (ensure(m, b, e)) return -1;
    int split = b->seq_swa != NULL; /* sliding layers in m->kv_swa, through the rows' seq_swa */
    for (int r = 0; r < b->n_rows; r++) {
        G->tables[r] = b->seq[r]->blocks;
        for (int t = b->row_start[r]; t < b->row_start[r + 1]; t++) G->slots[t] = kv_seq_slot(b->seq[r], m->kv.block_size, b->pos[t]);
        if (!split) continue;
        G->tables_swa[r] = b->seq_swa[r]->blocks;
        for (int t = b->row_start[r]; t < b->row_start[r + 1]; t++)
            G->slots_swa[t] = kv_seq_slot(b->seq_swa[r], m->kv_swa.block_size, b->pos[t]);
    }
    attn_args_t aa = {
        .n_rows = b->n_rows, .row_start = b->row_start, .pos = b->pos, .block_tables = G->tables, .n_heads = nh,
        .softcap = (float)c->attn_softcap,
    };

    op->embed(be, G->x, b->tokens, T, &G->embed, G->embed_scale);
    if (P) { /* per-layer inputs [T, L, P] */
        op->matmul(be, G->ple, G->x, T, &G->pl_model_proj);
        op->scale(be, G->ple, 1.0f / sqrtf((float)H), (size_t)T * L * P);
        op->rms_norm(be, G->ple, G->ple, G->pl_norm, no, T * L, P, eps);
        op->embed(be, G->plt, b->tokens, T, &G->embed_pl, G->embed_pl_scale);
        op->add(be, G->ple, G->plt, (size_t)T * L * P);
        op->scale(be, G->ple, 1.0f / sqrtf(2.0f), (size_t)T * L * P);
    }
    int h_ready = 0; /* h holds this layer's input norm already (the previous layer's post_norm_add) */
    for (int li = 0; li < L; li++) {
        const gemma_layer_t *l = &G->layers[li];
        int hd = l->hd, nkv = l->nkv;
        /* attention block: the q/k/v projections of h = rms_norm(x) in one op where the backend
         * fuses the norm (hyb_proj; a KV-shared layer projects q only, k = v projects k only) */
        {
            float *const y[3] = {G->q, G->k, G->v};
            const weight_t *const w[3] = {&l->wq, &l->wk, &l->wv};
            const int n = l->shared ? 1 : l->k_eq_v ? 2 : 3;
            if (h_ready) hyb_multi(be, n, y, G->h, T, w);
            else hyb_proj(be, n, y, G->h, G->x, l->ln_in, no, eps, T, H, w);
        }
        const float ms = l->sliding ? G->ms_local : G->ms_global;
        int swa = split && l->sliding;
        aa.kv = split ? kv_pool_view(swa ? &m->kv_swa : &m->kv, l->grp_layer) : kv_pool_view(&m->kv, l->kv_layer);
        aa.block_tables = swa ? G->tables_swa : G->tables;
        aa.kv.n_kv_heads = nkv;
        aa.kv.head_dim = hd;
        aa.n_kv_heads = nkv;
        aa.head_dim = hd;
        aa.scale = G->v4 ? 1.0f : (float)(1.0 / sqrt(c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : hd));
        aa.window = l->sliding ? c->sliding_window : 0;
        if (!l->shared && l->k_eq_v) { /* v is the k projection, before k_norm and RoPE */
            for (int t = 0; t < T; t++) G->idx[t] = t;
            op->gather_rows(be, G->v, G->k, G->idx, T, nkv * hd);
        }
        if (!l->shared && G->v4) op->rms_norm(be, G->v, G->v, NULL, 0.f, T * nkv, hd, eps);
        if (l->qn_f) /* the q/k norms (their offset folded into qn_f, kn_f), rope, the cache write and attention in one op */
            op->norm_rope_kv_attention(be, G->att, G->q, G->k, G->v, l->qn_f, l->kn_f, eps, l->rot_dim, l->inv_freq, ms,
                                       swa ? G->slots_swa : G->slots, T, &aa);
        else {
            op->rms_norm(be, G->q, G->q, l->q_norm, no, T * nh, hd, eps);
            op->rope(be, G->q, b->pos, T, nh, hd, l->rot_dim, l->inv_freq, ms);
            if (!l->shared) {
                op->rms_norm(be, G->k, G->k, l->k_norm, no, T * nkv, hd, eps);
                op->rope(be, G->k, b->pos, T, nkv, hd, l->rot_dim, l->inv_freq, ms);
                op->kv_write(be, &aa.kv, G->k, G->v, swa ? G->slots_swa : G->slots, T);
            }
            op->attention(be, G->att, G->q, T, &aa);
        }
        op->matmul(be, G->h, G->att, T, &l->wo);
        /* x += post_norm(h) and h = pre_ff_norm(x) in one op where the backend fuses them */
        const int hf = op->post_norm_add && !op->post_norm_add(be, G->x, G->h, G->h, l->ln_post_attn, l->ln_pre_ff, no, T, H, eps);
        if (!hf) {
            op->rms_norm(be, G->h, G->h, l->ln_post_attn, no, T, H, eps);
            op->add(be, G->x, G->h, (size_t)T * H);
        }
        /* feed-forward block (+ gemma4 MoE branch): the norm inside gate/up/GLU where the backend
         * fuses it (rms_matmul_glu), else the norm and gate/up/GLU in one op (matmul_glu) or three */
        hyb_glu(be, G->g, G->u, G->h, G->x, hf, l->ln_pre_ff, no, eps, T, H, &l->wg, &l->wu, ACT_GELU_TANH);
        op->matmul(be, G->h, G->g, T, &l->wd);
        if (moe) {
            op->rms_norm(be, G->h, G->h, l->ln_post_ff1, no, T, H, eps);
            op->rms_norm(be, G->r, G->x, l->ln_pre_ff2, no, T, H, eps);
            gemma_moe(m, l, G->h2, G->x, G->r, T);
            op->rms_norm(be, G->h2, G->h2, l->ln_post_ff2, no, T, H, eps);
            op->add(be, G->h, G->h2, (size_t)T * H);
        }
        /* x += post_ff_norm(h), with the next layer's input norm into h where nothing else comes between */
        h_ready = !moe && !P && l->layer_scalar == 1.0f && li + 1 < L && op->post_norm_add &&
                  !op->post_norm_add(be, G->x, G->h, G->h, l->ln_post_ff, G->layers[li + 1].ln_in, no, T, H, eps);
        if (!h_ready) {
            op->rms_norm(be, G->h, G->h, l->ln_post_ff, no, T, H, eps);
            op->add(be, G->x, G->h, (size_t)T * H);
        }
        if (P) { /* per-layer input */
            for (int t = 0; t < T; t++) G->idx[t] = t * L + li;
            op->gather_rows(be, G->pll, G->ple, G->idx, T, P);
            op->matmul(be, G->pg, G->x, T, &l->pl_gate);
            op->glu(be, G->pg, G->pg, G->pll, (size_t)T * P, ACT_GELU_TANH);
            op->matmul(be, G->h, G->pg, T, &l->pl_proj);
            op->rms_norm(be, G->h, G->h, l->ln_post_pl, no, T, H, eps);
            op->add(be, G->x, G->h, (size_t)T * H);
        }
        if (l->layer_scalar != 1.0f) op->scale(be, G->x, l->layer_scalar, (size_t)T * H);
    }
    op->gather_rows(be, G->xl, G->x, b->logit_index, b->n_logits, H);
    op->rms_norm(be, G->xl, G->xl, G->norm, no, b->n_logits, H, eps);
    op->matmul(be, G->logits, G->xl, b->n_logits, &G->lm_head);
    m->dev_logits = G->logits;
    if (!logits) return 0; /* dev_logits_ok: no soft-capping */
    op->download(be, logits, G->logits, sizeof(float) * b->n_logits * c->vocab_size);
    if (c->final_softcap > 0) {
        float cap = (float)c->final_softcap;
        for (size_t i = 0; i < (size_t)b->n_logits * c->vocab_size; i++) logits[i] = tanhf(logits[i] / cap) * cap;
    }
    return 0;
}

const model_ops_t gemma_ops = {
    .family = "gemma", .load = gemma_load, .forward = gemma_forward, .destroy = gemma_destroy, .kv_shape = gemma_kv_shape,
    .kv_groups = gemma_kv_groups,
};
