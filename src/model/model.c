/* model.c — loading a checkpoint into a family, and the checked entry to its forward. */
#include "model/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include "kv/swa.h"
#include <string.h>
#include "base/log.h"
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const model_ops_t *family_for(arch_t a) {
    switch (a) {
    case ARCH_LLAMA: case ARCH_MISTRAL: case ARCH_QWEN2: case ARCH_QWEN3: return &llama_ops;
    case ARCH_QWEN3_5: return &qwen35_ops;
    case ARCH_GEMMA3: case ARCH_GEMMA4: return &gemma_ops;
    }
    return NULL;
}

/* Reads every page of the mapped checkpoint once, so the first request does not pay the
 * page faults, with a progress line when stderr is a terminal. Big checkpoints only:
 * below 256 MB the faults cost less than the pass. */
static void prefetch_weights(const st_archive_t *ar) {
    size_t total = 0, done = 0;
    for (int i = 0; i < ar->n_files; i++) total += ar->files[i].anon_size ? 0 : ar->files[i].size; /* copies are read */
    if (total < ((size_t)256 << 20)) return;
    int tty = isatty(2);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned char sink = 0;
    for (int i = 0; i < ar->n_files; i++) {
        const mapped_file_t *f = &ar->files[i];
        if (f->anon_size) continue;
        madvise(f->data, f->size, MADV_WILLNEED);
        for (size_t off = 0; off < f->size; off += 4096) {
            sink ^= ((const unsigned char *)f->data)[off];
            done += off + 4096 <= f->size ? 4096 : f->size - off;
            if (tty && (off & ((64u << 20) - 1)) == 0) {
                clock_gettime(CLOCK_MONOTONIC, &t);
                double s = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9;
                fprintf(stderr, "\rloading weights: %3.0f%% (%.0f / %.0f MB, %.0f MB/s)", 100.0 * done / total, done / 1e6, total / 1e6,
                        s > 0 ? done / 1e6 / s : 0);
            }
        }
    }
    (void)sink;
    if (tty) fprintf(stderr, "\rloading weights: 100%% (%.0f MB)%30s\n", total / 1e6, "");
}

/* On the CPU backend, checkpoint files of 64 MB or more are copied (pread) into anonymous
 * memory with transparent huge pages (st_copy_to_anon) before the family builds its
 * weights: a file map has 4 KB pages, and decode streams every weight once per token, one
 * page walk per 4 KB (nested under a hypervisor). Zen 5 VM, bench/run_cpu.sh: bf16/q8
 * decode +5-20%, q4 unchanged (bench/cpu/RESULTS.md, session 7). Costs: the load reads the
 * file once more (~0.3 s/GB) and the weights are private memory, not shared page cache.
 * KILN_HUGE_WEIGHTS=0 keeps the file map; skipped when THP is "never". */
static int huge_weights_wanted(const backend_t *be) {
    const char *v = getenv("KILN_HUGE_WEIGHTS");
    if ((v && *v == '0') || strcmp(be->ops->name, "cpu")) return 0;
    char buf[128] = {0};
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, "[never]") == NULL;
}

/* How much of the checkpoint may become private memory: MemAvailable less a reserve of
 * max(2 GB, MemTotal / 8) for the KV cache, activations and the rest of the machine. A copy
 * cannot be paged out the way a file map can, so a checkpoint near the machine's memory
 * stays (partly) mapped instead of risking the OOM killer. SIZE_MAX when /proc/meminfo is
 * unreadable (not Linux-like: no THP either). */
static size_t anon_budget(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    unsigned long long total_kb = 0, avail_kb = 0, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1) total_kb = v;
        else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) avail_kb = v;
    }
    fclose(f);
    if (!total_kb || !avail_kb) return SIZE_MAX;
    unsigned long long reserve = total_kb / 8 > (2ull << 20) ? total_kb / 8 : (2ull << 20);
    return avail_kb > reserve ? (size_t)((avail_kb - reserve) * 1024) : 0;
}

typedef struct { size_t total; int tty; struct timespec t0; } load_progress_t;
static void copy_progress(size_t done, void *ctx) {
    load_progress_t *p = ctx;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double s = (t.tv_sec - p->t0.tv_sec) + (t.tv_nsec - p->t0.tv_nsec) * 1e-9;
    fprintf(stderr, "\rloading weights into huge pages: %3.0f%% (%.0f / %.0f MB, %.0f MB/s)", 100.0 * done / p->total, done / 1e6,
            p->total / 1e6, s > 0 ? done / 1e6 / s : 0);
}

/* The copy of huge_weights_wanted: files of 64 MB or more, within anon_budget(), with a
 * progress line on a terminal; a log line says what stayed file-mapped and why. */
static void copy_weights(st_archive_t *ar) {
    const size_t min_bytes = (size_t)64 << 20, budget = anon_budget();
    load_progress_t p = {0, isatty(2), {0}};
    for (int i = 0; i < ar->n_files; i++)
        if (ar->files[i].size >= min_bytes) p.total += ar->files[i].size;
    if (!p.total) return;
    clock_gettime(CLOCK_MONOTONIC, &p.t0);
    size_t done = st_copy_to_anon(ar, min_bytes, budget, p.tty ? copy_progress : NULL, &p);
    if (p.tty) fprintf(stderr, "\n");
    if (done < p.total)
        log_info("weights: %.0f of %.0f MB in huge pages, the rest file-mapped (memory available for a copy: %.0f MB; "
                 "KILN_HUGE_WEIGHTS=0 maps all)", done / 1e6, p.total / 1e6, budget / 1e6);
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
    if (huge_weights_wanted(m->be)) copy_weights(&m->ar); /* reads every byte anyway */
    prefetch_weights(&m->ar); /* (what is left as a file map) */
    /* The precision policy of bf16-activation paths (backend.h): llama and qwen3 only — the
     * architectures whose fixtures show the margin. mistral / qwen2 run the same graph but have
     * no fixture here, so they keep the exact path until one shows it. */
    m->be->act_bf16_ok = m->cfg.arch == ARCH_LLAMA || m->cfg.arch == ARCH_QWEN3;
    m->ops = family_for(m->cfg.arch);
    if (m->ops->load(m, e)) goto err;
    if (m->be->ops->weight_cache) {
        m->weight_cache_bytes = m->be->ops->weight_cache(m->be, opts->weight_cache_gb);
        if (m->weight_cache_bytes)
            log_info("weight cache: up to %.1f GB of device memory for quantized weights kept dequantized after their first long "
                     "prefill (--weight-cache-gb; 0 turns it off)", m->weight_cache_bytes / 1e9);
    }
    /* what decode's stream will meet: the copy's coverage after the family packed it (a
     * split huge page would show here: session 9's per-weight mprotect cost decode 35 %) */
    m->weight_huge_bytes = model_weight_huge_bytes(m, &m->weight_copy_bytes);
    if (m->weight_copy_bytes) {
        int full = m->weight_huge_bytes >= m->weight_copy_bytes;
        log_msg(full ? LOG_DEBUG : LOG_INFO, "weights: %.0f of %.0f MB of the copy in 2 MB pages%s", m->weight_huge_bytes / 1e6,
                m->weight_copy_bytes / 1e6, full ? "" : " (the rest in 4 KB pages: decode streams them slower)");
    }
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

size_t model_weight_huge_bytes(const model_t *m, size_t *copy) {
    size_t huge = 0, c = 0;
    for (int i = 0; i < m->ar.n_files; i++)
        if (m->ar.files[i].anon_size) {
            huge += file_anon_huge_bytes(&m->ar.files[i]);
            c += m->ar.files[i].anon_size;
        }
    if (copy) *copy = c;
    return huge;
}

void model_free(model_t *m) {
    if (!m) return;
    if (m->ops && m->impl) m->ops->destroy(m);
    if (m->rec) {
        rec_pool_free(m->rec);
        free(m->rec);
    }
    kv_pool_free(&m->kv);
    kv_pool_free(&m->kv_swa);
    backend_destroy(m->be);
    st_close(&m->ar);
    config_free(&m->cfg);
    free(m->dir);
    free(m);
}

int model_init_kv(model_t *m, int n_blocks, int block_size, dtype_t dtype, err_t *e) {
    kv_pool_free(&m->kv);
    kv_pool_free(&m->kv_swa);
    m->swa_window = 0;
    int nl = m->cfg.n_layers, nkv = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    if (m->ops->kv_shape) m->ops->kv_shape(m, &nl, &nkv, &hd);
    return kv_pool_init(&m->kv, m->be, nl, n_blocks, block_size, nkv, hd, dtype, e);
}

int model_sliding_window(const model_t *m) {
    int fl, fw, fr, sl, sw, sr;
    return m->ops->kv_groups ? m->ops->kv_groups(m, &fl, &fw, &fr, &sl, &sw, &sr) : 0;
}

/* a KV group's per-token width as `heads` heads (kv_groups) */
static int group_hd(int width, int heads) { return (width + heads - 1) / heads; }

void model_kv_group_bytes(const model_t *m, int block_size, dtype_t dtype, size_t *full, size_t *swa) {
    int fl, fw, fr, sl, sw, sr;
    if (model_sliding_window(m) > 0) {
        m->ops->kv_groups(m, &fl, &fw, &fr, &sl, &sw, &sr);
        fr = fr > 0 ? fr : 1, sr = sr > 0 ? sr : 1;
        *full = kv_pool_block_bytes(fl, block_size, fr, group_hd(fw, fr), dtype);
        *swa = kv_pool_block_bytes(sl, block_size, sr, group_hd(sw, sr), dtype);
        return;
    }
    int nl = m->cfg.n_layers, nkv = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    if (m->ops->kv_shape) m->ops->kv_shape(m, &nl, &nkv, &hd);
    *full = kv_pool_block_bytes(nl, block_size, nkv, hd, dtype);
    *swa = 0;
}

int model_init_kv_groups(model_t *m, int n_blocks, int n_swa_blocks, int block_size, dtype_t dtype, err_t *e) {
    int fl, fw, fr, sl, sw, sr, w = model_sliding_window(m);
    if (w <= 0 || n_swa_blocks <= 0) return model_init_kv(m, n_blocks, block_size, dtype, e);
    kv_pool_free(&m->kv);
    kv_pool_free(&m->kv_swa);
    m->swa_window = 0;
    m->ops->kv_groups(m, &fl, &fw, &fr, &sl, &sw, &sr);
    fr = fr > 0 ? fr : 1, sr = sr > 0 ? sr : 1;
    /* a model of sliding layers only still gets a (one-layer) full pool: it carries the
     * sequence's length and the block tables the engine keeps in step */
    if (kv_pool_init(&m->kv, m->be, fl > 0 ? fl : 1, n_blocks, block_size, fr, fw > 0 ? group_hd(fw, fr) : 1, dtype, e)) return -1;
    if (kv_pool_init(&m->kv_swa, m->be, sl, n_swa_blocks, block_size, sr, group_hd(sw, sr), dtype, e)) {
        kv_pool_free(&m->kv);
        return -1;
    }
    m->swa_window = w;
    return 0;
}

/* --- recurrent state: a snapshot is a 16-byte header (magic, floats, position) + the slot --- */
#define STATE_MAGIC 0x4345524bu /* "KREC" */

size_t model_state_bytes(const model_t *m) {
    return m->rec ? 16 + sizeof(float) * m->rec->floats : 0;
}

int model_state_save(model_t *m, const kv_seq_t *s, void *dst, err_t *e) {
    if (!m->rec) return err_set(e, "state save: the model has no recurrent layers");
    rec_slot_t *sl = rec_find(m->rec, s);
    if (!sl) return err_set(e, "state save: the sequence holds no recurrent state (it has not run yet)");
    uint32_t hdr[2] = {STATE_MAGIC, (uint32_t)m->rec->floats};
    int64_t pos = sl->n_tokens;
    memcpy(dst, hdr, 8);
    memcpy((char *)dst + 8, &pos, 8);
    m->be->ops->download(m->be, (char *)dst + 16, sl->data, sizeof(float) * m->rec->floats);
    return 0;
}

int model_state_restore(model_t *m, const kv_seq_t *s, const void *src, err_t *e) {
    if (!m->rec) return err_set(e, "state restore: the model has no recurrent layers");
    uint32_t hdr[2];
    int64_t pos;
    memcpy(hdr, src, 8);
    memcpy(&pos, (const char *)src + 8, 8);
    if (hdr[0] != STATE_MAGIC || hdr[1] != (uint32_t)m->rec->floats || pos < 0 || pos > (1 << 30))
        return err_set(e, "state restore: not a snapshot of this model (magic %08x, %u floats, position %lld)", hdr[0], hdr[1],
                       (long long)pos);
    /* the payload may be unaligned inside a caller's buffer: copy out first */
    float *tmp = malloc(sizeof(float) * m->rec->floats);
    if (!tmp) return err_set(e, "state restore: out of memory");
    memcpy(tmp, (const char *)src + 16, sizeof(float) * m->rec->floats);
    int rc = rec_load(m->rec, s, tmp, (int)pos, e);
    free(tmp);
    return rc;
}

int model_state_tokens(const model_t *m, const kv_seq_t *s) {
    rec_slot_t *sl = m->rec ? rec_find(m->rec, s) : NULL;
    return sl ? sl->n_tokens : -1;
}

void model_seq_release(model_t *m, const kv_seq_t *s) {
    if (m->rec) rec_release(m->rec, s);
}

int model_rows_state(model_t *m, const batch_t *b, float **state, err_t *e) {
    for (int r = 0; r < b->n_rows; r++) {
        state[r] = NULL;
        if (!m->rec) continue;
        int p0 = b->pos[b->row_start[r]];
        rec_slot_t *sl = rec_find(m->rec, b->seq[r]);
        if (p0 == 0) sl = rec_acquire(m->rec, b->seq[r], e);
        else if (!sl) return err_set(e, "batch: row %d starts at position %d but its sequence has no recurrent state (restore a snapshot first)", r, p0);
        else if (sl->n_tokens != p0)
            return err_set(e, "batch: row %d starts at position %d but its recurrent state stands at %d (hybrid models cannot rewind without a snapshot)", r, p0, sl->n_tokens);
        if (!sl) return -1;
        state[r] = sl->data;
    }
    return 0;
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
        if (m->swa_window > 0 && b->seq_swa) {
            /* the sliding group: every block the row writes or its window reads is held */
            const kv_seq_t *w = b->seq_swa[r];
            int bs = m->kv_swa.block_size, first = kv_window_first_block(b->pos[t0], m->swa_window, bs), last = b->pos[t1 - 1] / bs;
            if (!w || w == s) return err_set(e, "batch: row %d has no sliding-group block table of its own", r);
            for (int r2 = 0; r2 < r; r2++)
                if (b->seq_swa[r2] == w) return err_set(e, "batch: rows %d and %d share a sliding-group table", r2, r);
            if (last >= w->n_blocks)
                return err_set(e, "batch: row %d reaches position %d but its sliding group reserves only %d", r, b->pos[t1 - 1], w->n_blocks * bs);
            for (int j = first; j <= last; j++)
                if (w->blocks[j] < 0)
                    return err_set(e, "batch: row %d reads positions %d.. through its window but sliding block %d was released", r,
                                   first * bs, j);
        }
    }
    if ((m->swa_window > 0) != (b->seq_swa != NULL))
        return err_set(e, m->swa_window > 0 ? "batch: the model keeps its sliding layers in a KV group of their own; rows need seq_swa"
                                            : "batch: seq_swa given but the model has no sliding KV group");
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_index[i] < 0 || b->logit_index[i] >= b->n_tokens)
            return err_set(e, "batch: logit_index[%d] = %d is outside the step", i, b->logit_index[i]);
    return 0;
}

int model_forward(model_t *m, const batch_t *b, float *logits, err_t *e) {
    if (batch_validate(m, b, e)) return -1;
    if (!logits && !m->dev_logits_ok) return err_set(e, "model_forward: this model cannot leave its logits on the device");
    const backend_ops_t *bo = m->be->ops;
    if (bo->step_begin) bo->step_begin(m->be, b->n_tokens, b->n_rows);
    int rc = m->ops->forward(m, b, logits, e);
    if (bo->step_end) bo->step_end(m->be);
    if (rc) return -1;
    if (m->rec)
        for (int r = 0; r < b->n_rows; r++) {
            rec_slot_t *sl = rec_find(m->rec, b->seq[r]);
            if (sl) sl->n_tokens = b->pos[b->row_start[r + 1] - 1] + 1;
        }
    for (int r = 0; r < b->n_rows; r++) {
        int end = b->pos[b->row_start[r + 1] - 1] + 1;
        if (end > b->seq[r]->n_tokens) b->seq[r]->n_tokens = end;
        if (b->seq_swa && end > b->seq_swa[r]->n_tokens) b->seq_swa[r]->n_tokens = end;
    }
    return 0;
}
