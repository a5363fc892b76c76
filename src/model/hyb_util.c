/* hyb_util.c — see hyb_util.h. */
#include "model/hyb_util.h"
#include "base/log.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model.", "", "language_model."};

const st_tensor_t *hyb_find(model_t *m, const char *name) {
    char buf[512];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", prefixes[i], name);
        const st_tensor_t *t = st_find(&m->ar, buf);
        if (t) return t;
    }
    return NULL;
}

int hyb_get_f32(model_t *m, const char *name, size_t n, float **out, err_t *e) { return hyb_get_f32_plus(m, name, n, 0.0f, out, e); }

int hyb_get_f32_plus(model_t *m, const char *name, size_t n, float add, float **out, err_t *e) {
    *out = NULL;
    const st_tensor_t *t = hyb_find(m, name);
    if (!t) return err_set(e, "%s: missing tensor '%s'", m->dir, name);
    if ((size_t)st_numel(t) != n) return err_set(e, "%s: tensor '%s' has %lld elements, expected %zu", m->dir, t->name, (long long)st_numel(t), n);
    if (t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16)
        return err_set(e, "%s: tensor '%s' must be f32, f16 or bf16 (is %s)", m->dir, t->name, dtype_name(t->dtype));
    float *v = malloc(sizeof(float) * n);
    if (!v) return err_set(e, "out of memory loading '%s'", t->name);
    for (size_t i = 0; i < n; i++) v[i] = add != 0.0f ? load_as_f32(t->data, t->dtype, i) + add : load_as_f32(t->data, t->dtype, i);
    *out = m->be->ops->upload(m->be, v, sizeof(float) * n);
    free(v);
    return *out ? 0 : err_set(e, "%s: out of backend memory for '%s'", m->dir, t->name);
}

int hyb_get_opt(model_t *m, const char *name, int n, float **out, err_t *e) {
    *out = NULL;
    if (!hyb_find(m, name)) return 0;
    return hyb_get_f32(m, name, (size_t)n, out, e);
}

int hyb_get_experts(model_t *m, const char *name, int E, int rows, int cols, weight_t *w, err_t *e) {
    char wn[512], mp[512], sn[530], bn[530];
    const st_tensor_t *t = hyb_find(m, name);
    if (t) snprintf(mp, sizeof mp, "%s", t->name);
    else {
        snprintf(wn, sizeof wn, "%s.weight", name);
        t = hyb_find(m, wn);
        if (!t) return err_set(e, "%s: missing tensor '%s' (stacked experts)", m->dir, name);
        snprintf(mp, sizeof mp, "%.*s", (int)strlen(t->name) - 7, t->name);
    }
    snprintf(sn, sizeof sn, "%s.scales", mp);
    snprintf(bn, sizeof bn, "%s.biases", mp);
    const st_tensor_t *ts = st_find(&m->ar, sn), *tb = st_find(&m->ar, bn);
    if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != rows)
        return err_set(e, "%s: tensor '%s' must be [%d, %d, ...] (experts, rows)", m->dir, t->name, E, rows);
    if (!ts) {
        if (t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16)
            return err_set(e, "%s: tensor '%s' has dtype %s; dense experts must be f32, f16 or bf16", m->dir, t->name, dtype_name(t->dtype));
        if (t->shape[2] != cols) return err_set(e, "%s: tensor '%s' has %lld columns, expected %d", m->dir, t->name, (long long)t->shape[2], cols);
        for (int x = 0; x < E; x++) {
            memset(&w[x], 0, sizeof w[x]);
            w[x].rows = rows; w[x].cols = cols; w[x].dtype = t->dtype;
            w[x].data = (const char *)t->data + (size_t)x * rows * cols * dtype_size(t->dtype);
            if (m->be->ops->prepare_weight(m->be, &w[x], e)) return -1;
        }
        return 0;
    }
    int bits, group;
    config_quant_for(&m->cfg, mp, &bits, &group);
    if (!bits || !tb) return err_set(e, "%s: '%s' has scales but no biases or no quantization config", m->dir, mp);
    if (t->dtype != DT_U32 || cols % group || (int64_t)cols * bits % 32 || t->shape[2] != (int64_t)cols * bits / 32)
        return err_set(e, "%s: quantized experts '%s' must be U32 [%d, %d, %d] (%d bits)", m->dir, t->name, E, rows, cols * bits / 32, bits);
    for (int i = 0; i < 2; i++) {
        const st_tensor_t *s = i ? tb : ts;
        if (s->ndim != 3 || s->shape[0] != E || s->shape[1] != rows || s->shape[2] != cols / group ||
            (s->dtype != DT_F32 && s->dtype != DT_F16 && s->dtype != DT_BF16) || s->dtype != ts->dtype)
            return err_set(e, "%s: tensor '%s' must be [%d, %d, %d] f32/f16/bf16 (group %d)", m->dir, s->name, E, rows, cols / group, group);
    }
    size_t words = (size_t)cols * bits / 32, ng = (size_t)cols / group, sbs = dtype_size(ts->dtype);
    for (int x = 0; x < E; x++) {
        memset(&w[x], 0, sizeof w[x]);
        w[x].rows = rows; w[x].cols = cols; w[x].dtype = DT_U32; w[x].bits = bits; w[x].group = group;
        w[x].data = (const uint32_t *)t->data + (size_t)x * rows * words;
        w[x].scales = (const char *)ts->data + (size_t)x * rows * ng * sbs;
        w[x].biases = (const char *)tb->data + (size_t)x * rows * ng * sbs;
        w[x].sb_dtype = ts->dtype;
        if (m->be->ops->prepare_weight(m->be, &w[x], e)) return -1;
    }
    return 0;
}

weight_t hyb_rows(const weight_t *w, int r0, int n) {
    weight_t s = *w;
    s.rows = n;
    s.device = NULL;
    s.layout = WL_ROWS; /* a view is prepared again: the backend decides whether it is packed */
    if (weight_is_quantized(w)) {
        size_t words = (size_t)w->cols * w->bits / 32, ng = (size_t)w->cols / w->group, sbs = dtype_size(w->sb_dtype);
        s.data = (const uint32_t *)w->data + (size_t)r0 * words;
        s.scales = (const char *)w->scales + (size_t)r0 * ng * sbs;
        s.biases = (const char *)w->biases + (size_t)r0 * ng * sbs;
    } else {
        s.data = (const char *)w->data + (size_t)r0 * w->cols * dtype_size(w->dtype);
    }
    return s;
}

static const char *towers[] = {"vision_tower.", "visual.", "audio_tower.", "multi_modal_projector.", "embed_vision.", "embed_audio."};

static int tower_name(const char *n) {
    for (size_t i = 0; i < sizeof towers / sizeof towers[0]; i++) {
        for (const char *p = strstr(n, towers[i]); p; p = strstr(p + 1, towers[i]))
            if (p == n || p[-1] == '.') return 1; /* a whole component of the dotted name */
    }
    return 0;
}

int hyb_tower_tensors(const st_archive_t *ar) {
    int n = 0;
    for (int i = 0; i < ar->n_tensors; i++) n += tower_name(ar->tensors[i].name);
    return n;
}

void hyb_note_towers(model_t *m) {
    int n = hyb_tower_tensors(&m->ar);
    if (n) log_info("%s: %d vision/audio tower tensors (vision_tower, visual, audio_tower, multi_modal_projector, embed_vision, embed_audio) are not loaded: text model only, images and audio are not supported yet", m->dir, n);
}

float hyb_round(const model_config_t *c, float v) {
    if (c->param_dtype == DT_BF16) return bf16_to_f32(f32_to_bf16(v));
    if (c->param_dtype == DT_F16) return f16_to_f32(f32_to_f16(v));
    return v;
}

void hyb_arena_add(hyb_arena_t *a, float **p, size_t width) {
    a->ptr[a->n] = p;
    a->width[a->n++] = width;
}

int hyb_arena_ensure(hyb_arena_t *a, backend_t *be, int T, err_t *e) {
    if (T <= a->cap_T) return 0;
    for (int i = 0; i < a->n; i++) {
        be->ops->free(be, *a->ptr[i]);
        *a->ptr[i] = be->ops->alloc(be, sizeof(float) * (size_t)T * (a->width[i] ? a->width[i] : 1));
        if (!*a->ptr[i]) return err_set(e, "out of memory for a step of %d tokens", T);
    }
    a->cap_T = T;
    return 0;
}

void hyb_arena_free(hyb_arena_t *a, backend_t *be) {
    for (int i = 0; i < a->n; i++) {
        be->ops->free(be, *a->ptr[i]);
        *a->ptr[i] = NULL;
    }
    a->cap_T = 0;
}

void hyb_multi(backend_t *be, int n, float *const *y, const float *x, int T, const weight_t *const *w) {
    if (be->ops->matmul_multi) be->ops->matmul_multi(be, n, y, x, T, w);
    else
        for (int i = 0; i < n; i++) be->ops->matmul(be, y[i], x, T, w[i]);
}

void hyb_glu(backend_t *be, float *g, float *u, float *h, const float *x, int h_ready, const float *nw, float no, float eps, int T, int H,
             const weight_t *wg, const weight_t *wu, act_t act) {
    const backend_ops_t *op = be->ops;
    if (!h_ready && op->rms_matmul_glu && !op->rms_matmul_glu(be, g, x, nw, no, eps, T, wg, wu, act)) return;
    if (!h_ready) op->rms_norm(be, h, x, nw, no, T, H, eps);
    if (op->matmul_glu) {
        op->matmul_glu(be, g, g, u, h, T, wg, wu, act);
        return;
    }
    float *const y[2] = {g, u};
    const weight_t *const w[2] = {wg, wu};
    hyb_multi(be, 2, y, h, T, w);
    op->glu(be, g, g, u, (size_t)T * wg->rows, act);
}

void hyb_proj(backend_t *be, int n, float *const *y, float *h, const float *x, const float *nw, float no, float eps, int T, int H,
              const weight_t *const *w) {
    const backend_ops_t *op = be->ops;
    if (op->rms_matmul_multi && !op->rms_matmul_multi(be, n, y, x, nw, no, eps, T, w)) return;
    op->rms_norm(be, h, x, nw, no, T, H, eps);
    hyb_multi(be, n, y, h, T, w);
}
