/* cmd_info.c — `kiln info MODEL_DIR`: what a checkpoint is, without running it. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "load/config.h"
#include "load/safetensors.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kiln info [MODEL_DIR] [--json]\n"
               "  Prints the architecture, layer and head counts, parameters, weight dtypes and\n"
               "  quantization bits, and bytes on disk. MODEL_DIR defaults to the bundled model.\n");
}

int cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-') { fprintf(stderr, "kiln info: unknown flag '%s'\n", argv[i]); return 2; }
        else if (!dir) dir = argv[i];
        else { fprintf(stderr, "kiln info: unexpected argument '%s'\n", argv[i]); return 2; }
    }
    if (!dir) dir = cli_default_model();
    err_t e = {0};
    model_config_t c;
    st_archive_t ar;
    if (config_load(&c, dir, &e)) { fprintf(stderr, "kiln info: %s\n", e.msg); return 1; }
    if (st_open(&ar, dir, &e)) { fprintf(stderr, "kiln info: %s\n", e.msg); config_free(&c); return 1; }
    /* parameters and bytes per storage dtype; packed codes count as 32/bits parameters */
    long long params = 0, bytes = 0, by_dtype[DT_COUNT] = {0}, q_params = 0;
    int bits_seen[9] = {0};
    for (int i = 0; i < ar.n_tensors; i++) {
        const st_tensor_t *t = &ar.tensors[i];
        bytes += (long long)t->nbytes;
        by_dtype[t->dtype] += (long long)t->nbytes;
        size_t l = strlen(t->name);
        int is_sb = (l > 7 && !strcmp(t->name + l - 7, ".scales")) || (l > 7 && !strcmp(t->name + l - 7, ".biases"));
        if (t->dtype == DT_U32) {
            char mp[512];
            snprintf(mp, sizeof mp, "%.*s", l > 7 ? (int)(l - 7) : 0, t->name);
            int bits, group;
            config_quant_for(&c, mp, &bits, &group);
            if (bits) { q_params += st_numel(t) * 32 / bits; bits_seen[bits] = 1; }
            params += bits ? st_numel(t) * 32 / bits : st_numel(t);
        } else if (!is_sb || c.quant_bits == 0) params += st_numel(t);
    }
    if (json) {
        printf("{\"architecture\": \"%s\", \"model_type\": \"%s\", \"layers\": %d, \"hidden_size\": %d, "
               "\"intermediate_size\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, "
               "\"parameters\": %lld, \"bytes\": %lld, \"tensors\": %d, \"files\": %d, \"quant_bits\": %d, \"quant_group\": %d}\n",
               arch_name(c.arch), c.model_type, c.n_layers, c.hidden_size, c.intermediate_size, c.n_heads, c.n_kv_heads,
               c.head_dim, c.vocab_size, params, bytes, ar.n_tensors, ar.n_files, c.quant_bits, c.quant_group);
    } else {
        printf("model:        %s\n", dir);
        printf("architecture: %s (model_type %s)\n", arch_name(c.arch), c.model_type);
        printf("layers:       %d, hidden %d, intermediate %d\n", c.n_layers, c.hidden_size, c.intermediate_size);
        printf("attention:    %d heads, %d kv heads, head_dim %d, rope theta %g%s\n", c.n_heads, c.n_kv_heads, c.head_dim,
               c.rope.theta, c.qk_norm ? ", q/k norm" : "");
        printf("vocab:        %d%s\n", c.vocab_size, c.tie_embeddings ? " (tied embeddings)" : "");
        printf("parameters:   %lld (%.2fB)\n", params, params / 1e9);
        printf("bytes:        %lld (%.2f GB) in %d tensor(s), %d file(s)\n", bytes, bytes / 1e9, ar.n_tensors, ar.n_files);
        printf("dtypes:      ");
        for (int d = 0; d < DT_COUNT; d++)
            if (by_dtype[d]) printf(" %s %.1f MB", d == DT_U32 ? "u32 (quantized codes)" : dtype_name((dtype_t)d), by_dtype[d] / 1e6);
        printf("\n");
        if (c.quant_bits) {
            printf("quantization: MLX affine, default %d-bit, group %d; bits used:", c.quant_bits, c.quant_group);
            for (int b = 2; b <= 8; b++) if (bits_seen[b]) printf(" %d", b);
            printf(" (%lld quantized parameters)\n", q_params);
        }
    }
    st_close(&ar);
    config_free(&c);
    return 0;
}
