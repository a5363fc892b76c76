/* weights.c — finding a family's tensors in a checkpoint and checking their shapes.
 *
 * A family names its tensors the way transformers does ("layers.3.mlp.up_proj"); real
 * checkpoints put them under "model.", or "model.language_model." / "language_model.model."
 * for VL wrappers and mlx-community conversions, and lm_head under "lm_head." or
 * "language_model.lm_head.". A quantized module has .weight (U32 codes), .scales and
 * .biases; its bits and group size come from config.json's quantization block, keyed by
 * the module path as stored, and are checked against the tensors' shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"

static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model.", "", "language_model."};

/* Finds `name` (without prefix) and returns the full stored name in buf. */
static const st_tensor_t *find(model_t *m, const char *name, char *buf, size_t n) {
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        snprintf(buf, n, "%s%s", prefixes[i], name);
        const st_tensor_t *t = st_find(&m->ar, buf);
        if (t) return t;
    }
    return NULL;
}

int model_has_tensor(model_t *m, const char *name) {
    char buf[512];
    return find(m, name, buf, sizeof buf) != NULL;
}

int model_get_weight(model_t *m, const char *module, int rows, int cols, weight_t *w, err_t *e) {
    char wname[512], full[512], sname[512];
    memset(w, 0, sizeof *w);
    snprintf(wname, sizeof wname, "%s.weight", module);
    const st_tensor_t *t = find(m, wname, full, sizeof full);
    if (!t) return err_set(e, "%s: missing tensor '%s'", m->dir, wname);
    w->rows = rows;
    w->cols = cols;
    /* the module path as stored: the full name without ".weight" */
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%.*s", (int)(strlen(full) - 7), full);
    if (snprintf(sname, sizeof sname, "%s.scales", mpath) >= (int)sizeof sname)
        return err_set(e, "%s: tensor name '%s.scales' is longer than %zu bytes", m->dir, mpath, sizeof sname - 1);
    const st_tensor_t *ts = st_find(&m->ar, sname);
    if (!ts) {
        if (t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16)
            return err_set(e, "%s: tensor '%s' has dtype %s; dense weights must be f32, f16 or bf16", m->dir, full, dtype_name(t->dtype));
        if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
            return err_set(e, "%s: tensor '%s' has shape [%lld, %lld], expected [%d, %d]", m->dir, full,
                           (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), rows, cols);
        w->dtype = t->dtype;
        w->data = t->data;
        return m->be->ops->prepare_weight(m->be, w, e);
    }
    int bits, group;
    config_quant_for(&m->cfg, mpath, &bits, &group);
    if (bits == 0) return err_set(e, "%s: '%s' has scales but config.json's quantization says it is not quantized", m->dir, mpath);
    char bname[512];
    if (snprintf(bname, sizeof bname, "%s.biases", mpath) >= (int)sizeof bname)
        return err_set(e, "%s: tensor name '%s.biases' is longer than %zu bytes", m->dir, mpath, sizeof bname - 1);
    const st_tensor_t *tb = st_find(&m->ar, bname);
    if (!tb) return err_set(e, "%s: missing tensor '%s' (quantized module needs scales and biases)", m->dir, bname);
    if (t->dtype != DT_U32) return err_set(e, "%s: quantized tensor '%s' must be U32, is %s", m->dir, full, dtype_name(t->dtype));
    if (cols % group) return err_set(e, "%s: '%s': %d columns are not a multiple of group size %d", m->dir, mpath, cols, group);
    if ((int64_t)cols * bits % 32) return err_set(e, "%s: '%s': %d columns of %d bits do not fill whole words", m->dir, mpath, cols, bits);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != (int64_t)cols * bits / 32)
        return err_set(e, "%s: tensor '%s' has shape [%lld, %lld], expected [%d, %d] for %d-bit codes", m->dir, full,
                       (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), rows, cols * bits / 32, bits);
    for (int i = 0; i < 2; i++) {
        const st_tensor_t *x = i ? tb : ts;
        if (x->ndim != 2 || x->shape[0] != rows || x->shape[1] != cols / group)
            return err_set(e, "%s: tensor '%s' has shape [%lld, %lld], expected [%d, %d] (group size %d)", m->dir, x->name,
                           (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0), rows, cols / group, group);
        if (x->dtype != DT_F32 && x->dtype != DT_F16 && x->dtype != DT_BF16)
            return err_set(e, "%s: tensor '%s' must be f32, f16 or bf16", m->dir, x->name);
    }
    if (ts->dtype != tb->dtype) return err_set(e, "%s: '%s': scales and biases differ in dtype", m->dir, mpath);
    w->dtype = DT_U32;
    w->data = t->data;
    w->bits = bits;
    w->group = group;
    w->scales = ts->data;
    w->biases = tb->data;
    w->sb_dtype = ts->dtype;
    return m->be->ops->prepare_weight(m->be, w, e);
}

int model_get_vector(model_t *m, const char *name, int n, float **out, err_t *e) {
    char full[512];
    *out = NULL;
    const st_tensor_t *t = find(m, name, full, sizeof full);
    if (!t) return err_set(e, "%s: missing tensor '%s'", m->dir, name);
    if (t->ndim != 1 || t->shape[0] != n)
        return err_set(e, "%s: tensor '%s' has %d dims (first %lld), expected [%d]", m->dir, full, t->ndim,
                       (long long)(t->ndim ? t->shape[0] : 0), n);
    if (t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16)
        return err_set(e, "%s: tensor '%s' must be f32, f16 or bf16", m->dir, full);
    float *v = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) v[i] = load_as_f32(t->data, t->dtype, i);
    *out = m->be->ops->upload(m->be, v, sizeof(float) * n);
    free(v);
    return *out ? 0 : err_set(e, "%s: out of backend memory for '%s'", m->dir, full);
}
