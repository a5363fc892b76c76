/* model_args.c — see model_args.h. */
#include "cli/model_args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

void model_args_defaults(model_args_t *a) {
    a->backend = "cpu";
    a->threads = 0;
    a->kv_dtype = DT_F32;
    a->block_size = 16;
    a->buffer_dtype = DT_F32;
    a->weight_cache_gb = 0; /* off: issue 2 keeps no dequantized copy of a weight unless asked */
}

const char *model_args_help(void) {
#ifdef KILN_HAVE_CUDA
    return "  --backend cpu|cpu-ref|cuda  compute backend (cpu-ref: scalar reference kernels;\n"
           "                          cuda: the NVIDIA GPU, docs/cuda.md)\n"
#else
    return "  --backend cpu|cpu-ref   compute backend (cpu-ref: scalar reference kernels; cuda\n"
           "                          in builds made with `make cuda`, docs/cuda.md)\n"
#endif
           "  --threads N             CPU threads (default: all cores)\n"
           "  --kv-dtype f32|f16|bf16|q8  KV cache element type (q8: int8 with a scale per row,\n"
           "                          half of f16's bytes; CPU backend only)\n"
           "  --block-size N          KV cache block size in tokens (default 16)\n"
           "  --buffer-dtype f32|bf16 RoPE/normalizer buffers: f32 as transformers' from_pretrained\n"
           "                          (default); bf16 as after model.to(bfloat16) (the fixtures)\n"
           "  --weight-cache-gb X|auto|off  CUDA: device memory for 4/8-bit weights kept dequantized\n"
           "                          to f16 after their first long prefill, so later prompts skip the\n"
           "                          conversion (llama-3-8b q4: +12 % at 2048 tokens, +40-55 % at\n"
           "                          300-512; weights under 2^24 parameters only at 2048+ tokens).\n"
           "                          Default off (weights stay in their stored format); auto: up to\n"
           "                          1/8 of the device's memory, taken from the KV cache's share\n";
}

int model_args_parse(model_args_t *a, const char *cmd, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    if (strcmp(f, "--backend") && strcmp(f, "--threads") && strcmp(f, "--kv-dtype") && strcmp(f, "--block-size") &&
        strcmp(f, "--buffer-dtype") && strcmp(f, "--weight-cache-gb"))
        return 0;
    if (*i + 1 >= argc) { fprintf(stderr, "kiln %s: %s needs a value\n", cmd, f); return -1; }
    const char *v = argv[++*i];
    long n;
    if (!strcmp(f, "--backend")) {
        if (strcmp(v, "cpu") && strcmp(v, "cpu-ref") && strcmp(v, "cuda")) {
            fprintf(stderr, "kiln %s: --backend must be cpu, cpu-ref or cuda, got '%s'\n", cmd, v);
            return -1;
        }
        a->backend = v;
    } else if (!strcmp(f, "--threads")) {
        if (cli_parse_int(cmd, f, v, 1, 1024, &n)) return -1;
        a->threads = (int)n;
    } else if (!strcmp(f, "--buffer-dtype")) {
        if (dtype_from_name(v, &a->buffer_dtype) || a->buffer_dtype == DT_F16) {
            fprintf(stderr, "kiln %s: --buffer-dtype must be f32 or bf16, got '%s'\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(f, "--weight-cache-gb")) {
        char *end = NULL;
        double x = strtod(v, &end);
        if (!strcmp(v, "auto")) a->weight_cache_gb = -1;
        else if (!strcmp(v, "off") || !strcmp(v, "0")) a->weight_cache_gb = 0;
        else if (end != v && !*end && x > 0 && x <= 65536) a->weight_cache_gb = x;
        else {
            fprintf(stderr, "kiln %s: --weight-cache-gb must be a size in GB (0 < X <= 65536), auto, or off/0, got '%s'\n", cmd, v);
            return -1;
        }
    } else if (!strcmp(f, "--kv-dtype")) {
        if (kv_dtype_from_name(v, &a->kv_dtype)) { fprintf(stderr, "kiln %s: --kv-dtype must be f32, f16, bf16 or q8, got '%s'\n", cmd, v); return -1; }
    } else {
        if (cli_parse_int(cmd, f, v, 1, 4096, &n)) return -1;
        a->block_size = (int)n;
    }
    return 1;
}

model_t *model_args_load(const model_args_t *a, const char *cmd, const char *dir, int n_tokens_max, int n_seqs) {
    err_t e = {0};
    model_opts_t o = {a->backend, a->threads, a->buffer_dtype, a->weight_cache_gb};
    model_t *m = model_load(dir, &o, &e);
    if (!m) { fprintf(stderr, "kiln %s: %s\n", cmd, e.msg); return NULL; }
    int per_seq = (n_tokens_max + a->block_size - 1) / a->block_size;
    if (model_init_kv(m, per_seq * n_seqs, a->block_size, a->kv_dtype, &e)) {
        fprintf(stderr, "kiln %s: %s\n", cmd, e.msg);
        model_free(m);
        return NULL;
    }
    return m;
}
