/* model.h — the model interface (DESIGN §4): load a checkpoint, run one ragged batch.
 *
 * A batch is a list of rows; each row brings its own new tokens at its own positions
 * (1 for decode, a chunk for prefill, k+1 for speculative verify). The caller reserves
 * KV room for each row's positions first (kv_seq_reserve); forward writes the new K/V
 * and returns logits for the tokens listed in logit_index. Prefill, decode and mixed
 * steps are the same call. */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include <stdint.h>
#include "backend/backend.h"
#include "kv/kv_pool.h"
#include "kv/rec_state.h"
#include "load/config.h"
#include "load/safetensors.h"

typedef struct batch {
    int n_rows, n_tokens;
    const int32_t *tokens, *pos;     /* [n_tokens]                                   */
    const int32_t *row_start;        /* [n_rows+1] offsets into tokens               */
    kv_seq_t **seq;                  /* [n_rows] block tables                        */
    const int32_t *logit_index;      /* [n_logits] token indices whose logits are wanted */
    int n_logits;
    kv_seq_t **seq_swa;              /* [n_rows] sliding-group block tables (kv/swa.h) when
                                        the model keeps sliding layers apart (m->swa_window
                                        > 0), else NULL                                  */
} batch_t;

/* What each layer caches (DESIGN §5); engine and KV code size pools from it. */
typedef enum layer_cache { CACHE_FULL, CACHE_SLIDING, CACHE_RECURRENT } layer_cache_t;

typedef struct model model_t;

typedef struct model_ops {
    const char *family;
    int (*load)(model_t *m, err_t *e);
    /* logits: [n_logits, vocab] f32 on the host. */
    int (*forward)(model_t *m, const batch_t *b, float *logits, err_t *e);
    void (*destroy)(model_t *m);
    /* Optional: the paged KV the family needs, when it is not one full layer per decoder
     * layer at (n_kv_heads, head_dim): hybrids cache only their attention layers, gemma4's
     * KV-shared layers none, and per-layer shapes get the widest (n_kv_heads·head_dim). */
    void (*kv_shape)(const model_t *m, int *n_kv_layers, int *n_kv_heads, int *head_dim);
    /* Optional: the per-layer cache kinds as two KV groups (DESIGN §5): the CACHE_FULL layers
     * and the CACHE_SLIDING ones, each as a layer count, a per-token width and the most KV heads
     * of a layer in the group (stored as that many heads of ceil(width / heads): an int8 cache
     * keeps a scale per position and head). Returns the sliding window w, or 0 when there are no
     * sliding layers (then the model has one group: kv_shape). */
    int (*kv_groups)(const model_t *m, int *full_layers, int *full_width, int *full_rows, int *swa_layers, int *swa_width,
                     int *swa_rows);
} model_ops_t;

struct model {
    const model_ops_t *ops;
    model_config_t cfg;
    st_archive_t ar;
    backend_t *be;
    kv_pool_t kv;            /* owned; created by model_init_kv */
    kv_pool_t kv_swa;        /* sliding layers' KV when kept apart (model_init_kv_groups) */
    int swa_window;          /* > 0: sliding layers use kv_swa and batches carry seq_swa  */
    char *dir;
    void *impl;
    size_t weight_bytes;     /* bytes read by one full pass over the weights */
    /* the checkpoint bytes copied into anonymous memory at load (KILN_HUGE_WEIGHTS) and how
     * many of them sat in 2 MB pages once the family had built (packed) its weights
     * (model_weight_huge_bytes measures it again later) */
    size_t weight_copy_bytes, weight_huge_bytes;
    size_t weight_cache_bytes; /* device bytes the backend's weight cache may still take (model_opts_t.weight_cache_gb) */
    int64_t n_params;
    rec_pool_t *rec;         /* recurrent state slots (hybrid families), else NULL */
    /* Device sampling: a family that can leave its logits in backend memory sets
     * dev_logits_ok at load; model_forward with logits NULL then skips the download and
     * dev_logits is the step's [n_logits, vocab] there (the engine samples with the
     * backend's op sample). gemma's final soft-capping runs on the host: not with it. */
    int dev_logits_ok;
    float *dev_logits;
};

typedef struct model_opts {
    const char *backend;     /* "cpu" (default) | "cpu-ref" */
    int n_threads;           /* 0: all cores */
    dtype_t buffer_dtype;    /* DT_F32 (0, default): as from_pretrained; DT_BF16: as after
                                model.to(bfloat16) in memory (see config.h param_dtype) */
    double weight_cache_gb;  /* the backend's weight cache (backend_ops_t.weight_cache): 0 (default)
                                off, < 0 auto, > 0 GB; CUDA only (--weight-cache-gb) */
} model_opts_t;

model_t *model_load(const char *dir, const model_opts_t *opts, err_t *e);
/* The bytes of the weights' anonymous copy that are in 2 MB pages now (/proc/self/smaps);
 * *copy (may be NULL) gets the copy's size. */
size_t model_weight_huge_bytes(const model_t *m, size_t *copy);
void model_free(model_t *m);
/* Creates the KV pool: n_blocks of block_size tokens in dtype. */
int model_init_kv(model_t *m, int n_blocks, int block_size, dtype_t dtype, err_t *e);
/* The window of the model's sliding layers when it can keep them in a group of their own
 * (kv_groups), else 0. */
int model_sliding_window(const model_t *m);
/* Bytes of one block of each group (swa: 0 without a sliding group). */
void model_kv_group_bytes(const model_t *m, int block_size, dtype_t dtype, size_t *full, size_t *swa);
/* Two pools: n_blocks for the full-attention layers, n_swa_blocks for the sliding ones
 * (m->swa_window set; every batch then needs seq_swa). Without a sliding group, or with
 * n_swa_blocks <= 0, the same as model_init_kv. */
int model_init_kv_groups(model_t *m, int n_blocks, int n_swa_blocks, int block_size, dtype_t dtype, err_t *e);
/* logits: [n_logits, vocab] on the host; NULL (dev_logits_ok models): left on the device
 * in m->dev_logits. */
int model_forward(model_t *m, const batch_t *b, float *logits, err_t *e);
/* Checks a batch against the model and its KV pool (token ids, positions, rows). */
int batch_validate(const model_t *m, const batch_t *b, err_t *e);

/* Weight lookup helpers shared by the families (weights.c). Names are tried under the
 * prefixes real checkpoints use ("model.", "model.language_model.", "language_model.model."). */
int model_get_weight(model_t *m, const char *name, int rows, int cols, weight_t *w, err_t *e);
/* A 1-D tensor [n] converted to f32 (norm weights, biases): small, so copied into
 * backend memory (free with m->be->ops->free). */
int model_get_vector(model_t *m, const char *name, int n, float **out, err_t *e);
int model_has_tensor(model_t *m, const char *name);

extern const model_ops_t llama_ops;
extern const model_ops_t qwen35_ops;   /* qwen35.c: Qwen3.5 dense and MoE (gated DeltaNet hybrid) */
extern const model_ops_t gemma_ops;    /* gemma.c: Gemma 3 and Gemma 4 */

/* --- Recurrent state of hybrid models (DESIGN §5) ---
 * A sequence running on a model with recurrent layers holds a state slot (kv/rec_state.h):
 * forward takes one when a row starts at position 0 and refuses a row that does not start
 * where its state stands. The engine gives the slot back with model_seq_release before
 * kv_seq_free, and snapshots it for prefix reuse and speculative rollback:
 *
 *   model_state_bytes(m)           bytes of one snapshot (0: the model has no recurrent layers)
 *   model_state_save(m, s, dst)    copies the sequence's state (conv windows + f32 DeltaNet
 *                                  matrices of every recurrent layer, and the position it
 *                                  stands at) into dst[model_state_bytes(m)]
 *   model_state_restore(m, s, src) makes s continue from that snapshot; the caller also makes
 *                                  its attention KV agree (kv_seq_truncate to
 *                                  model_state_tokens(m, s), or attach cached blocks)
 *
 * A snapshot is taken between steps; restoring then feeding the same tokens gives bitwise the
 * logits of never having left. */
size_t model_state_bytes(const model_t *m);
int model_state_save(model_t *m, const kv_seq_t *s, void *dst, err_t *e);
int model_state_restore(model_t *m, const kv_seq_t *s, const void *src, err_t *e);
/* Positions the sequence's recurrent state has absorbed (-1: it holds no slot). */
int model_state_tokens(const model_t *m, const kv_seq_t *s);
void model_seq_release(model_t *m, const kv_seq_t *s);
/* For families: the state of each row of b (NULL where the model has no recurrent layers),
 * taking fresh slots for rows at position 0; checks each row continues its state. */
int model_rows_state(model_t *m, const batch_t *b, float **state, err_t *e);

#endif
