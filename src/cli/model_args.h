/* model_args.h — flags shared by every command that runs a model: --backend, --threads,
 * --kv-dtype, --block-size; and one place that loads the model with them. */
#ifndef KILN_MODEL_ARGS_H
#define KILN_MODEL_ARGS_H

#include "model/model.h"

typedef struct model_args {
    const char *backend;
    int threads;
    dtype_t kv_dtype;
    int block_size;
    dtype_t buffer_dtype;
    double weight_cache_gb;  /* --weight-cache-gb: 0 off (default), < 0 auto, > 0 GB */
} model_args_t;

void model_args_defaults(model_args_t *a);
/* If argv[*i] is one of the shared flags, consumes it (and its value) and returns 1;
 * returns 0 when it is not one; -1 (message printed) on a bad value. */
int model_args_parse(model_args_t *a, const char *cmd, int argc, char **argv, int *i);
const char *model_args_help(void);
/* Loads the model and a KV pool big enough for n_tokens_max positions in n_seqs sequences. */
model_t *model_args_load(const model_args_t *a, const char *cmd, const char *dir, int n_tokens_max, int n_seqs);

#endif
