/* fuzz_model_load.c — libFuzzer target for loading a checkpoint and running it.
 *
 * Input: a 4-byte little-endian length L, L bytes of config.json, then the bytes of
 * model.safetensors. Seeds: `python3 tests/fuzz/make_model_seeds.py DIR` turns each tiny
 * fixture model (tests/fixtures/models, every family) into one. Both parts are written to a
 * private directory under /dev/shm and loaded by the engine (config.json, the safetensors
 * header, the family's tensor names, shapes and dtypes, MLX quantization, packing at load):
 * a load must either succeed or fail with a message. A model that loads then generates two
 * greedy tokens from a three-token prompt, so a header or config that the checks let through
 * cannot make the forward read outside a tensor without AddressSanitizer seeing it.
 *
 * Build: cmake -S . -B build-fuzz -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DCMAKE_C_COMPILER=clang
 *        -DCMAKE_BUILD_TYPE=Debug && cmake --build build-fuzz --target fuzz_model_load
 * Run:   python3 tests/fuzz/make_model_seeds.py build-fuzz/corpus/model_load
 *        build-fuzz/fuzz_model_load -max_total_time=600 -rss_limit_mb=4096 build-fuzz/corpus/model_load
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"

static int write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/kiln-fuzz-%d", (int)getpid());
        if (mkdir(dir, 0700) && access(dir, W_OK)) abort();
    }
    if (size < 4) return 0;
    uint32_t L = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (L > size - 4) return 0;
    char cfg[96], st[96];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    if (write_file(cfg, data + 4, L) || write_file(st, data + 4 + L, size - 4 - L)) abort();

    kiln_engine_opts_t o;
    kiln_engine_opts_default(&o);
    o.model_dir = dir;
    o.threads = 1;
    o.sample_threads = 1;
    o.kv_dtype = DT_F32;
    o.kv_tokens = 256;
    o.load_tokenizer = 0;
    err_t e = {0};
    kiln_engine_t *eng = kiln_engine_start(&o, &e);
    if (!eng) {
        if (!e.msg[0]) abort(); /* every failure must say why */
        return 0;
    }
    int vocab = kiln_engine_config(eng)->vocab_size;
    if (vocab <= 0) abort(); /* a loaded model has a vocabulary */
    int32_t prompt[3] = {0, 1 % vocab, 2 % vocab};
    kiln_request_params_t p = {0};
    sampling_defaults(&p.sampling);
    p.sampling.temperature = 0; /* greedy */
    p.prompt = prompt;
    p.n_prompt = 3;
    p.max_tokens = 2;
    p.ignore_eos = 1;
    int code = 0;
    kiln_request_t *r = kiln_submit(eng, &p, &code, &e);
    if (r) {
        kiln_event_t ev;
        for (;;) {
            if (!kiln_request_next(r, &ev, -1)) abort();
            int done = ev.finish != KILN_NOT_FINISHED;
            if (ev.token >= vocab) abort(); /* a sampled id outside the vocabulary */
            kiln_event_clear(&ev);
            if (done) break;
        }
        kiln_request_free(r);
    } else if (!e.msg[0]) {
        abort();
    }
    kiln_engine_stop(eng);
    return 0;
}
