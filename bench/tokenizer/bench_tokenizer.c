/* bench_tokenizer.c — single-thread encode throughput of kiln's tokenizer.
 *
 *   bench_tokenizer TOKENIZER_DIR TEXT_FILE [--repeat N] [--ids-out FILE]
 * Reports: load time; encode of the whole file as one string (first call = cold word
 * cache, then the best of N warm calls); encode of the file as paragraphs (split at blank
 * lines, one call each, like a batch of documents). MB/s counts input bytes. --ids-out
 * writes the whole-file ids as little-endian int32 so another implementation (HF, see
 * hf_bench.py) can check it produced the very same ids.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file.h"
#include "tokenizer/tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER_DIR TEXT_FILE [--repeat N] [--ids-out FILE]\n");
        return 2;
    }
    int repeat = 3;
    const char *ids_out = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ids-out") && i + 1 < argc) ids_out = argv[++i];
        else { fprintf(stderr, "bench_tokenizer: unknown argument '%s'\n", argv[i]); return 2; }
    }
    err_t e = {0};
    size_t len;
    char *text = file_read(argv[2], (size_t)1 << 30, &len, &e);
    if (!text) { fprintf(stderr, "bench_tokenizer: %s\n", e.msg); return 1; }
    double t0 = now();
    tokenizer_t *t = tokenizer_load(argv[1], &e);
    double t_load = now() - t0;
    if (!t) { fprintf(stderr, "bench_tokenizer: %s\n", e.msg); return 1; }
    double mb = (double)len / 1e6;

    int32_t *ids = NULL;
    int n = 0;
    t0 = now();
    if (tokenizer_encode(t, text, len, 0, &ids, &n, &e)) { fprintf(stderr, "bench_tokenizer: %s\n", e.msg); return 1; }
    double cold = now() - t0, best = 1e30;
    int n_whole = n;
    if (ids_out) {
        FILE *f = fopen(ids_out, "wb");
        if (!f || fwrite(ids, sizeof *ids, (size_t)n, f) != (size_t)n || fclose(f)) {
            fprintf(stderr, "bench_tokenizer: cannot write %s\n", ids_out);
            return 1;
        }
    }
    free(ids);
    for (int r = 0; r < repeat; r++) {
        t0 = now();
        if (tokenizer_encode(t, text, len, 0, &ids, &n, &e)) { fprintf(stderr, "bench_tokenizer: %s\n", e.msg); return 1; }
        double dt = now() - t0;
        if (dt < best) best = dt;
        free(ids);
    }
    /* paragraphs: split at "\n\n" */
    double best_p = 1e30;
    long n_par = 0, n_tok_p = 0;
    for (int r = 0; r < repeat; r++) {
        n_par = n_tok_p = 0;
        t0 = now();
        size_t s = 0;
        while (s < len) {
            const char *p = memmem(text + s, len - s, "\n\n", 2);
            size_t end = p ? (size_t)(p - text) + 2 : len;
            if (tokenizer_encode(t, text + s, end - s, 0, &ids, &n, &e)) { fprintf(stderr, "bench_tokenizer: %s\n", e.msg); return 1; }
            n_tok_p += n;
            n_par++;
            free(ids);
            s = end;
        }
        double dt = now() - t0;
        if (dt < best_p) best_p = dt;
    }
    printf("tokenizer %s: load %.3f s, vocab %d\n", argv[1], t_load, tokenizer_vocab_size(t));
    printf("text %s: %.2f MB, %d tokens (whole), %ld tokens in %ld paragraphs\n", argv[2], mb, n_whole, n_tok_p, n_par);
    printf("whole text, cold cache: %.3f s = %.1f MB/s\n", cold, mb / cold);
    printf("whole text, warm (best of %d): %.3f s = %.1f MB/s\n", repeat, best, mb / best);
    printf("paragraphs, warm (best of %d): %.3f s = %.1f MB/s\n", repeat, best_p, mb / best_p);
    tokenizer_free(t);
    free(text);
    return 0;
}
