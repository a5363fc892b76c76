/* model.c — loading a checkpoint into a family, and the checked entry to its forward. */
#include "model/model.h"
#include <stdlib.h>
#include <string.h>
#include "base/log.h"

static const model_ops_t *family_for(arch_t a) {
    switch (a) {
    case ARCH_LLAMA: case ARCH_MISTRAL: case ARCH_QWEN2: case ARCH_QWEN3: return &llama_ops;
    }
    return NULL;
}

model_t *model_load(const char *dir, const model_opts_t *opts, err_t *e) {
    model_opts_t def = {0};
    if (!opts) opts = &def;
    model_t *m = calloc(1, sizeof *m);
    m->dir = strdup(dir);
    if (config_load(&m->cfg, dir, e)) goto err;
    m->cfg.param_dtype = opts->buffer_dtype;
    if (st_open(&m->ar, dir, e)) goto err;
    m->be = backend_create(opts->backend ? opts->backend : "cpu", opts->n_threads, e);
    if (!m->be) goto err;
    m->ops = family_for(m->cfg.arch);
    if (m->ops->load(m, e)) goto err;
    for (int i = 0; i < m->ar.n_tensors; i++) {
        const st_tensor_t *t = &m->ar.tensors[i];
        if (t->dtype == DT_U32) {
            /* packed codes: count logical parameters from the scales' group count */
            int bits = 0, group = 0;
            char mp[512];
            size_t l = strlen(t->name);
            snprintf(mp, sizeof mp, "%.*s", l > 7 ? (int)(l - 7) : 0, t->name);
            config_quant_for(&m->cfg, mp, &bits, &group);
            m->n_params += bits ? st_numel(t) * 32 / bits : st_numel(t);
        } else if (!strstr(t->name, ".scales") && !strstr(t->name, ".biases")) m->n_params += st_numel(t);
    }
    return m;
err:
    model_free(m);
    return NULL;
}

void model_free(model_t *m) {
    if (!m) return;
    if (m->ops && m->impl) m->ops->destroy(m);
    kv_pool_free(&m->kv);
    backend_destroy(m->be);
    st_close(&m->ar);
    config_free(&m->cfg);
    free(m->dir);
    free(m);
}

int model_init_kv(model_t *m, int n_blocks, int block_size, dtype_t dtype, err_t *e) {
    kv_pool_free(&m->kv);
    return kv_pool_init(&m->kv, m->be, m->cfg.n_layers, n_blocks, block_size, m->cfg.n_kv_heads, m->cfg.head_dim, dtype, e);
}

int batch_validate(const model_t *m, const batch_t *b, err_t *e) {
    if (b->n_rows <= 0 || b->n_tokens <= 0) return err_set(e, "batch: empty (%d rows, %d tokens)", b->n_rows, b->n_tokens);
    if (!m->kv.n_blocks) return err_set(e, "batch: the model has no KV pool (model_init_kv first)");
    if (b->row_start[0] != 0 || b->row_start[b->n_rows] != b->n_tokens)
        return err_set(e, "batch: row_start must run from 0 to n_tokens (%d)", b->n_tokens);
    for (int r = 0; r < b->n_rows; r++) {
        int t0 = b->row_start[r], t1 = b->row_start[r + 1];
        if (t1 <= t0) return err_set(e, "batch: row %d has no tokens", r);
        const kv_seq_t *s = b->seq[r];
        for (int r2 = 0; r2 < r; r2++)
            if (b->seq[r2] == s) return err_set(e, "batch: rows %d and %d share a sequence", r2, r);
        if (b->pos[t0] < 0 || b->pos[t0] > s->n_tokens)
            return err_set(e, "batch: row %d starts at position %d but its sequence holds %d tokens", r, b->pos[t0], s->n_tokens);
        for (int t = t0; t < t1; t++) {
            if (b->tokens[t] < 0 || b->tokens[t] >= m->cfg.vocab_size)
                return err_set(e, "batch: token %d at index %d is outside the vocabulary (0..%d)", b->tokens[t], t, m->cfg.vocab_size - 1);
            if (t > t0 && b->pos[t] != b->pos[t - 1] + 1)
                return err_set(e, "batch: row %d positions are not consecutive at index %d", r, t);
        }
        if (b->pos[t1 - 1] >= s->n_blocks * m->kv.block_size)
            return err_set(e, "batch: row %d reaches position %d but only %d are reserved", r, b->pos[t1 - 1], s->n_blocks * m->kv.block_size);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_index[i] < 0 || b->logit_index[i] >= b->n_tokens)
            return err_set(e, "batch: logit_index[%d] = %d is outside the step", i, b->logit_index[i]);
    return 0;
}

int model_forward(model_t *m, const batch_t *b, float *logits, err_t *e) {
    if (batch_validate(m, b, e)) return -1;
    if (m->ops->forward(m, b, logits, e)) return -1;
    for (int r = 0; r < b->n_rows; r++) {
        int end = b->pos[b->row_start[r + 1] - 1] + 1;
        if (end > b->seq[r]->n_tokens) b->seq[r]->n_tokens = end;
    }
    return 0;
}
