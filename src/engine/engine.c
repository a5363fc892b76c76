/* engine.c — the engine thread: continuous batching over one model (DESIGN §1, §3, §5).
 *
 * Every request is a token list (prompt, then what it generated) and a count of tokens
 * whose K/V are in the cache. A step gives each running request a row with its next
 * uncomputed tokens — one for a decoding request, a chunk for one still prefilling — so
 * prefill, decode and recompute after preemption are the same thing. A step:
 *
 *   1. take in new submissions; drop cancelled requests (blocks back at once)
 *   2. rows for running requests, oldest first: decode rows (1 token) and the chunks of
 *      prompts being prefilled, under the step's token budget and row cap
 *   3. admit waiting requests first-come-first-served while budget and blocks last:
 *      attach the longest cached prefix (whole blocks, never the last prompt token)
 *   4. no room for a running request's next block: preempt the newest running request
 *      (its blocks freed, it waits at the front and is recomputed, its cached prefix
 *      helping) — a request alone always fits (checked at submit), so nothing deadlocks
 *   5. one forward; sample the rows that reached their last token; stop checks; events
 *   6. blocks that became full get their chained hash and enter the prefix index
 *
 * Sampling is keyed by (seed, output index) and the kernels are batch-invariant, so a
 * request's tokens do not depend on what else ran, on preemption or on cache hits.
 *
 * Hybrid models (recurrent layers) also need the recurrent state at the end of a reused
 * prefix. Prefill chunks are cut at snapshot boundaries (every snapshot_interval tokens and
 * the prompt's last block boundary) and the state is saved there under the chained hash of
 * the block ending there; decoding keeps the state at the latest block boundary and
 * publishes it when the request ends, so the next turn of a chat finds its whole history.
 * A prefix hit then attaches blocks only up to the longest boundary that has a snapshot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/file.h"
#include "base/log.h"
#include "engine/engine_int.h"
#include "engine/kv_budget.h"
#include "kv/swa.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void kiln_engine_opts_default(kiln_engine_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->kv_dtype = DT_F16;
    o->block_size = 16;
    o->kv_cache_gb = 0; /* auto: kv_budget.c */
    o->step_tokens = 0; /* the backend's default: see kiln_engine_start */
    o->max_batch = 64;
    o->max_queue = 1024;
    o->prefix_cache = 1;
    o->load_tokenizer = 1;
}

/* --- lists --------------------------------------------------------------------------- */

static void list_push(kiln_request_t **head, kiln_request_t **tail, kiln_request_t *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r; else *head = r;
    *tail = r;
}

static void running_remove(kiln_engine_t *eng, int i) {
    memmove(&eng->running[i], &eng->running[i + 1], sizeof(kiln_request_t *) * (eng->n_running - i - 1));
    eng->n_running--;
}

/* --- finishing ----------------------------------------------------------------------- */

static void release_blocks(kiln_engine_t *eng, kiln_request_t *r) {
    if (eng->state_bytes) model_seq_release(eng->m, &r->seq);
    kv_seq_free(&r->seq, &eng->m->kv);
    kv_seq_free_sparse(&r->seq_swa, &eng->m->kv_swa); /* sliding group (empty without one) */
    r->n_computed = 0;
    r->n_hashed = 0;
    r->last_hash = 0;
}

static void finish(kiln_engine_t *eng, kiln_request_t *r, kiln_finish_t why, const char *error) {
    release_blocks(eng, r);
    kiln_event_t ev = {.token = -1, .finish = why, .stop_id = -1};
    ev.text = request_text_flush(r);
    if (error) ev.error = strdup(error);
    pthread_mutex_lock(&r->mu);
    r->info.n_generated = r->n_gen;
    r->info.t_done = now_s();
    pthread_mutex_unlock(&r->mu);
    r->state = REQ_DONE;
    pthread_mutex_lock(&eng->mu);
    if (why == KILN_FINISH_CANCELLED) eng->stats.requests_cancelled++;
    else eng->stats.requests_finished++;
    pthread_mutex_unlock(&eng->mu);
    request_emit(r, &ev);
    request_unref(r);
}

/* --- sliding-window group (DESIGN §5, kv/swa.h) ---------------------------------------
 * Sliding models keep their sliding layers' KV in a pool of their own (m->kv_swa), each
 * request a second block table (r->seq_swa) as long as r->seq, reserved in step with it;
 * after each step the blocks the next query's window no longer reaches leave the table. */

/* Blocks an allocation could get now in every group (tables grow in step). */
static int avail_blocks(const kiln_engine_t *eng) {
    int a = kv_pool_available(&eng->m->kv);
    if (eng->m->swa_window) {
        int b = kv_pool_available(&eng->m->kv_swa);
        if (b < a) a = b;
    }
    return a;
}

/* Prefix hit on a sliding model: the longest cached chain of at most max_blocks whose
 * window (the sliding blocks a query at its end reads) is cached too. Attaches that window
 * to r->seq_swa and returns the chain's length; the caller attaches the full group. */
static int swa_attach_prefix(kiln_engine_t *eng, kiln_request_t *r, int max_blocks) {
    kv_pool_t *p = &eng->m->kv, *ps = &eng->m->kv_swa;
    int bs = p->block_size, k = 0, w = eng->m->swa_window;
    if (max_blocks <= 0) return 0;
    uint64_t *h = malloc(sizeof(uint64_t) * max_blocks), prev = 0;
    if (!h) return 0;
    for (; k < max_blocks; k++) {
        h[k] = kv_block_hash(prev, r->tokens + (size_t)k * bs, bs, eng->ns);
        if (!kv_prefix_has(p, h[k])) break;
        prev = h[k];
    }
    while (k > 0 && !kv_swa_window_cached(ps, h, k, w)) k--;
    if (k > 0 && kv_swa_attach(&r->seq_swa, ps, h, k, w) != 0) k = 0;
    free(h);
    return k;
}

/* After a step: the sliding blocks r's next query cannot see leave its table. */
static void swa_trim(kiln_engine_t *eng, kiln_request_t *r) {
    int held = kv_seq_release_before(&r->seq_swa, &eng->m->kv_swa, r->n_computed - eng->m->swa_window + 1);
    if (held > eng->stats.kv_swa_seq_blocks_max) eng->stats.kv_swa_seq_blocks_max = held;
}

/* Pool sizes of a sliding model: the sliding pool gets what every row of a full batch needs
 * (its window, ceil(w/bs) + 2 blocks, plus one step's prefill) but at most half the budget,
 * and never more blocks than the full pool (a sequence never holds more sliding blocks than
 * full ones); the rest goes to the full pool. What running rows leave of the sliding pool
 * keeps released windows for prefix hits. */
static void swa_pool_sizes(const kiln_engine_t *eng, int w, size_t bb, size_t bb_swa, double budget, int *n_full, int *n_swa) {
    int bs = eng->o.block_size;
    double want = (double)eng->o.max_batch * ((w + bs - 1) / bs + 2) + (eng->o.step_tokens + bs - 1) / bs;
    if (eng->o.kv_tokens > 0) {
        *n_swa = want < *n_full ? (int)want : *n_full;
        return;
    }
    if (want * (double)bb_swa > budget / 2) want = floor(budget / 2 / (double)bb_swa);
    double rest = budget - want * (double)bb_swa;
    if (rest >= want * (double)bb) {
        *n_full = (int)(rest / (double)bb);
        *n_swa = (int)want;
    } else *n_full = *n_swa = (int)(budget / (double)(bb + bb_swa));
}

/* --- prefix cache -------------------------------------------------------------------- */

/* Attaches the longest cached chain of whole blocks covering tokens[0 .. n_tokens-1):
 * the last token is always computed so there are logits to sample from. */
static void attach_prefix(kiln_engine_t *eng, kiln_request_t *r) {
    kv_pool_t *p = &eng->m->kv;
    if (!eng->o.prefix_cache) return;
    int bs = p->block_size, max_blocks = (r->n_tokens - 1) / bs;
    uint64_t h = 0;
    if (eng->state_bytes) {
        /* hybrid: the longest cached chain that ends where a snapshot was taken */
        int best = 0;
        uint64_t best_h = 0;
        for (int i = 0; i < max_blocks; i++) {
            h = kv_block_hash(h, r->tokens + (size_t)i * bs, bs, eng->ns);
            if (!kv_prefix_has(p, h)) break;
            if (snap_get(&eng->snaps, h)) { best = i + 1; best_h = h; }
        }
        if (best == 0) return;
        max_blocks = best;
        h = 0;
        for (int i = 0; i < max_blocks; i++) {
            h = kv_block_hash(h, r->tokens + (size_t)i * bs, bs, eng->ns);
            kv_seq_append_block(&r->seq, kv_prefix_acquire(p, h));
        }
        err_t e;
        if (h != best_h || model_state_restore(eng->m, &r->seq, snap_get(&eng->snaps, best_h), &e) != 0) {
            release_blocks(eng, r);
            return;
        }
        eng->stats.snapshots_restored++;
        r->n_hashed = r->seq.n_blocks;
        r->last_hash = h;
        r->n_computed = r->seq.n_tokens = r->seq.n_blocks * bs;
        return;
    }
    if (eng->m->swa_window) max_blocks = swa_attach_prefix(eng, r, max_blocks); /* sliding window cached too */
    for (int i = 0; i < max_blocks; i++) {
        uint64_t hi = kv_block_hash(h, r->tokens + (size_t)i * bs, bs, eng->ns);
        int32_t b = kv_prefix_acquire(p, hi);
        if (b < 0) break;
        kv_seq_append_block(&r->seq, b);
        h = hi;
    }
    if (eng->m->swa_window) kv_seq_truncate_sparse(&r->seq_swa, &eng->m->kv_swa, r->seq.n_blocks * bs);
    r->n_hashed = r->seq.n_blocks;
    r->last_hash = h;
    r->n_computed = r->seq.n_tokens = r->seq.n_blocks * bs;
}

/* Gives every newly filled block of r its hash (step 6). */
static void hash_full_blocks(kiln_engine_t *eng, kiln_request_t *r) {
    kv_pool_t *p = &eng->m->kv;
    if (!eng->o.prefix_cache) return;
    int bs = p->block_size;
    while ((r->n_hashed + 1) * bs <= r->n_computed) {
        uint64_t h = kv_block_hash(r->last_hash, r->tokens + (size_t)r->n_hashed * bs, bs, eng->ns);
        kv_block_set_hash(p, r->seq.blocks[r->n_hashed], h);
        if (eng->m->swa_window && r->seq_swa.blocks[r->n_hashed] >= 0) /* same chain in the sliding pool */
            kv_block_set_hash(&eng->m->kv_swa, r->seq_swa.blocks[r->n_hashed], h);
        r->last_hash = h;
        r->n_hashed++;
    }
}

/* --- preemption ---------------------------------------------------------------------- */

/* Frees the newest running request's blocks and puts it at the front of the queue. */
static kiln_request_t *preempt_newest(kiln_engine_t *eng) {
    if (eng->n_running == 0) return NULL;
    int newest = 0;
    for (int i = 1; i < eng->n_running; i++)
        if (eng->running[i]->seq_no > eng->running[newest]->seq_no) newest = i;
    kiln_request_t *r = eng->running[newest];
    running_remove(eng, newest);
    release_blocks(eng, r);
    r->state = REQ_WAITING;
    r->next = eng->waiting;
    eng->waiting = r;
    if (!eng->waiting_tail) eng->waiting_tail = r;
    eng->n_waiting++;
    eng->stats.preemptions++;
    log_debug("engine: preempted a request with %d tokens (pool exhausted)", r->n_tokens);
    return r;
}

/* --- one step ------------------------------------------------------------------------ */

typedef struct step {
    int n_rows, n_tokens;
    kiln_request_t **req;      /* [max_batch] */
    int32_t *tokens, *pos, *row_start, *logit_index;
    kv_seq_t **seq, **seq_swa;
    int *sample_row;           /* row -> 1 when it reaches its last token */
    int *logit_row;            /* row -> its logits' index, -1 when it samples nothing */
    int *par_rows, n_par;      /* rows sampled side by side before the per-row pass */
    int32_t *par_tok;          /* row -> the token sampled for it there */
    int n_logits;
    int cap_tokens;
} step_t;

static void step_add_row(step_t *s, kiln_request_t *r, int n) {
    for (int i = 0; i < n; i++) {
        s->tokens[s->n_tokens + i] = r->tokens[r->n_computed + i];
        s->pos[s->n_tokens + i] = r->n_computed + i;
    }
    s->req[s->n_rows] = r;
    s->seq[s->n_rows] = &r->seq;
    s->seq_swa[s->n_rows] = &r->seq_swa;
    s->sample_row[s->n_rows] = r->n_computed + n == r->n_tokens;
    if (s->sample_row[s->n_rows]) s->logit_index[s->n_logits++] = s->n_tokens + n - 1;
    s->n_tokens += n;
    s->row_start[++s->n_rows] = s->n_tokens;
}

/* Hybrid models run whole aligned chunks of DELTA_CHUNK positions of the gated delta rule
 * chunk-parallel and every other token token by token (qwen35.c): where a step ends picks
 * the arithmetic. So that a request's logits never depend on how its tokens are cut into
 * steps, a step ends only where every schedule ends one: below lim (the last whole chunk
 * before the prompt's last block boundary) on a chunk boundary, unless a snapshot-grid
 * point inside that chunk already splits it in every schedule; from lim on (the prompt's
 * tail, generated tokens, and their recomputation after a preemption) a step never holds a
 * whole aligned chunk, so those tokens always go token by token as in decode. A cut that
 * would split a chunk the step starts at extends the step to the chunk's end when the step
 * arrays have room (room: tokens allowed; < 0: none), else the row waits; a step budget
 * too small for any chunk cuts anyway (docs/architecture.md). Returns the new `want`. */
static int delta_align(kiln_engine_t *eng, const kiln_request_t *r, int want, int room) {
    const int C = DELTA_CHUNK, bs = eng->m->kv.block_size, every = eng->snap_every * bs;
    int n0 = r->n_computed, end = n0 + want;
    int lim = (r->n_prompt - 1) / bs * bs / C * C;
    if (end < lim) {
        int c0 = end / C * C;
        int whole = (c0 / every + 1) * every >= c0 + C; /* no snapshot cut inside it */
        if (end % C == 0 || c0 < n0 || !whole) return want;
        if (c0 > n0) return c0 - n0;
        if (room >= C) return C;
        return room >= 0 && want >= eng->o.step_tokens ? want : 0;
    }
    int c = n0 > lim ? (n0 + C - 1) / C * C : lim; /* the first aligned chunk start ≥ n0, ≥ lim */
    return end >= c + C ? c + C - 1 - n0 : want;
}

/* How many of r's uncomputed tokens fit in `budget`, growing its block table; 0 when
 * not even one block could be had. */
static int reserve_chunk(kiln_engine_t *eng, kiln_request_t *r, int budget) {
    kv_pool_t *p = &eng->m->kv;
    int want = r->n_tokens - r->n_computed;
    if (want > budget) want = budget;
    if (eng->state_bytes && want > 1) want = delta_align(eng, r, want, budget + eng->o.max_batch);
    if (eng->state_bytes && want > 1) {
        /* hybrid: end the chunk at the next snapshot boundary so the state can be saved there */
        int bs = p->block_size, every = eng->snap_every * bs;
        int next = (r->n_computed / every + 1) * every;
        int last = (r->n_tokens - 1) / bs * bs; /* the last block boundary before the final token */
        if (last > r->n_computed && last < next) next = last;
        if (r->n_computed + want > next) want = next - r->n_computed;
    }
    int have = r->seq.n_blocks * p->block_size - r->n_computed; /* room in blocks we hold */
    int extra_blocks = want > have ? (want - have + p->block_size - 1) / p->block_size : 0;
    if (extra_blocks > avail_blocks(eng)) {
        extra_blocks = avail_blocks(eng);
        want = have + extra_blocks * p->block_size;
        if (want > r->n_tokens - r->n_computed) want = r->n_tokens - r->n_computed;
        if (eng->state_bytes && want > 1) want = delta_align(eng, r, want, -1);
    }
    if (want <= 0) return 0;
    err_t e;
    if (kv_seq_reserve(&r->seq, p, r->n_computed + want, &e) != 0) return 0;
    if (eng->m->swa_window && kv_seq_reserve(&r->seq_swa, &eng->m->kv_swa, r->n_computed + want, &e) != 0) return 0;
    return want;
}

static void build_step(kiln_engine_t *eng, step_t *s) {
    int budget = eng->o.step_tokens, max_rows = eng->o.max_batch;
    s->n_rows = s->n_tokens = s->n_logits = 0;
    s->row_start[0] = 0;
    /* running requests, oldest first; decode rows are never starved by prefill */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < eng->n_running && s->n_rows < max_rows && budget > 0; i++) {
            kiln_request_t *r = eng->running[i];
            int left = r->n_tokens - r->n_computed;
            if ((pass == 0) != (left == 1)) continue;
            int n = reserve_chunk(eng, r, budget);
            if (n == 0) {
                if (pass == 1) continue; /* a prefill can wait for blocks */
                /* a decode row with no block to write into: make room */
                kiln_request_t *v = preempt_newest(eng);
                if (v == r) { i--; continue; }
                /* the victim may already have a row this step: rebuild from scratch */
                build_step(eng, s);
                return;
            }
            step_add_row(s, r, n);
            budget -= n;
        }
    }
    /* admit waiting requests, first come first served */
    while (eng->waiting && s->n_rows < max_rows && budget > 0 && eng->n_running < eng->cap_running) {
        kiln_request_t *r = eng->waiting;
        attach_prefix(eng, r);
        int n = reserve_chunk(eng, r, budget);
        if (n == 0) { release_blocks(eng, r); break; } /* no blocks: keep it at the front */
        eng->waiting = r->next;
        if (!eng->waiting) eng->waiting_tail = NULL;
        eng->n_waiting--;
        r->state = REQ_RUNNING;
        r->seq_no = eng->next_seq_no++;
        eng->running[eng->n_running++] = r;
        int cached = r->n_computed;
        if (r->n_gen == 0) {
            pthread_mutex_lock(&r->mu);
            r->info.n_cached = cached;
            pthread_mutex_unlock(&r->mu);
            eng->stats.cached_tokens += (uint64_t)cached;
        }
        step_add_row(s, r, n);
        budget -= n;
    }
    /* nothing could run although requests are in flight: free the newest and retry */
    if (s->n_rows == 0 && eng->n_running > 1) {
        preempt_newest(eng);
        build_step(eng, s);
    }
}

static int is_stop_token(const kiln_engine_t *eng, const kiln_request_t *r, int32_t t) {
    if (!r->p.ignore_eos)
        for (int i = 0; i < eng->m->cfg.n_eos; i++) if (eng->m->cfg.eos_ids[i] == t) return 1;
    for (int i = 0; i < r->p.n_stop_ids; i++) if (r->p.stop_ids[i] == t) return 1;
    return 0;
}

/* Logprob of the chosen token and the top-n alternatives, from the raw logits: the n
 * largest by logprob, ties to the lower id, kept sorted as one pass goes over the vocab
 * (one compare per token for most of them). */
static void fill_logprobs(kiln_engine_t *eng, const float *raw, int32_t tok, int n_top, kiln_event_t *ev) {
    int V = eng->m->cfg.vocab_size, m = 0;
    const float *lp = eng->lp;
    log_softmax(raw, V, eng->lp);
    ev->logprob = lp[tok];
    ev->n_top = n_top;
    for (int32_t v = 0; v < V && n_top > 0; v++) {
        if (m == n_top && !(lp[v] > lp[ev->top_ids[n_top - 1]])) continue; /* ids ascend: a tie loses */
        int j = m < n_top ? m++ : n_top - 1;
        for (; j > 0 && lp[v] > lp[ev->top_ids[j - 1]]; j--) ev->top_ids[j] = ev->top_ids[j - 1];
        ev->top_ids[j] = v;
    }
    for (int k = 0; k < n_top; k++) ev->top_logprobs[k] = lp[ev->top_ids[k]];
}

/* Hybrid models: after a row ran, save its recurrent state if it stands on a snapshot
 * boundary; while decoding, keep the state at each block boundary for the end. */
static void save_snapshot(kiln_engine_t *eng, kiln_request_t *r) {
    int bs = eng->m->kv.block_size;
    if (!eng->o.prefix_cache || r->n_computed == 0 || r->n_computed % bs || r->n_hashed * bs != r->n_computed) return;
    int last = (r->n_tokens - 1) / bs * bs;
    int on_grid = r->n_computed % (eng->snap_every * bs) == 0 || r->n_computed == last;
    int decoding = r->n_computed >= r->n_prompt;
    if (!on_grid && !decoding) return;
    err_t e;
    if (on_grid) {
        void *buf = malloc(eng->state_bytes);
        if (buf && model_state_save(eng->m, &r->seq, buf, &e) == 0) {
            snap_put(&eng->snaps, r->last_hash, buf);
            eng->stats.snapshots_saved++;
        }
        free(buf);
    } else {
        if (!r->tail_snap) r->tail_snap = malloc(eng->state_bytes);
        if (r->tail_snap && model_state_save(eng->m, &r->seq, r->tail_snap, &e) == 0) r->tail_snap_hash = r->last_hash;
        else r->tail_snap_hash = 0;
    }
}

/* At the end of a request: the decode-time snapshot becomes findable. */
static void publish_tail_snapshot(kiln_engine_t *eng, kiln_request_t *r) {
    if (r->tail_snap && r->tail_snap_hash) {
        snap_put(&eng->snaps, r->tail_snap_hash, r->tail_snap);
        eng->stats.snapshots_saved++;
        r->tail_snap_hash = 0;
    }
}

typedef struct { kiln_engine_t *eng; step_t *s; } step_ctx_t;

/* One row of the parallel sampling pass: the same call the per-row pass would make. */
static void sample_task(void *ctx, int t, sampler_scratch_t *ss) {
    kiln_engine_t *eng = ((step_ctx_t *)ctx)->eng;
    step_t *s = ((step_ctx_t *)ctx)->s;
    int i = s->par_rows[t], V = eng->m->cfg.vocab_size;
    kiln_request_t *r = s->req[i];
    float *lg = eng->logits + (size_t)s->logit_row[i] * V;
    s->par_tok[i] = sample_token(&r->p.sampling, lg, V, r->tokens, r->n_tokens, r->n_prompt, (uint64_t)r->n_gen, ss);
}

static void run_step(kiln_engine_t *eng, step_t *s) {
    int V = eng->m->cfg.vocab_size;
    batch_t b = {s->n_rows, s->n_tokens, s->tokens, s->pos, s->row_start, s->seq, s->logit_index, s->n_logits,
                 eng->m->swa_window ? s->seq_swa : NULL};
    err_t e = {0};
    /* on the device when no sampled row needs logprobs (they need the raw logits here):
     * the logits stay there and only token ids come back (sample_dev.c) */
    int dev = eng->dev && s->n_logits > 0;
    for (int i = 0; dev && i < s->n_rows; i++) dev = !s->sample_row[i] || (!s->req[i]->p.logprobs && !s->req[i]->p.top_logprobs);
    double tf = now_s();
    int frc = model_forward(eng->m, &b, dev ? NULL : eng->logits, &e);
    if (frc == 0 && dev && sample_dev_run(eng->dev, eng->m->be, eng->m->dev_logits, s->req, s->sample_row, s->n_rows, s->par_tok)) {
        err_set(&e, "out of memory for device sampling");
        frc = -1;
    }
    eng->stats.time_forward_s += now_s() - tf; /* with dev: the wait for the GPU is in sampling's download */
    if (frc != 0) {
        log_error("engine: forward failed: %s", e.msg);
        for (int i = 0; i < s->n_rows; i++) {
            kiln_request_t *r = s->req[i];
            for (int j = 0; j < eng->n_running; j++) if (eng->running[j] == r) { running_remove(eng, j); break; }
            finish(eng, r, KILN_FINISH_ERROR, e.msg);
        }
        return;
    }
    eng->stats.steps++;
    /* rows without logprobs sample in parallel (their logits are theirs alone; tokens
     * depend only on the row); rows with logprobs copy their raw logits first, below */
    s->n_par = 0;
    for (int i = 0, li = 0; i < s->n_rows; i++) {
        s->logit_row[i] = s->sample_row[i] ? li++ : -1;
        if (s->sample_row[i] && !s->req[i]->p.logprobs && !s->req[i]->p.top_logprobs) s->par_rows[s->n_par++] = i;
    }
    if (dev) s->n_par = s->n_logits; /* par_tok holds every sampled row's token */
    else if (s->n_par >= 4 && eng->pool) sample_pool_run(eng->pool, s->n_par, sample_task, (void *)(step_ctx_t[]){{eng, s}});
    else s->n_par = 0;
    double t = now_s();
    for (int i = 0; i < s->n_rows; i++) {
        kiln_request_t *r = s->req[i];
        int n = s->row_start[i + 1] - s->row_start[i];
        if (r->n_gen == 0 && r->n_computed < r->n_prompt) {
            int np = r->n_prompt - r->n_computed < n ? r->n_prompt - r->n_computed : n;
            eng->stats.computed_prompt_tokens += (uint64_t)np;
        }
        r->n_computed += n;
        hash_full_blocks(eng, r);
        if (eng->m->swa_window) swa_trim(eng, r);
        if (eng->state_bytes) save_snapshot(eng, r);
        if (!s->sample_row[i]) continue;
        float *lg = eng->logits + (size_t)s->logit_row[i] * V;
        kiln_event_t ev = {.stop_id = -1};
        int32_t tok;
        if (r->p.logprobs || r->p.top_logprobs) {
            memcpy(eng->raw, lg, sizeof(float) * V);
            tok = sample_token(&r->p.sampling, lg, V, r->tokens, r->n_tokens, r->n_prompt, (uint64_t)r->n_gen, &eng->ss);
            fill_logprobs(eng, eng->raw, tok, r->p.top_logprobs, &ev);
        } else if (s->n_par) tok = s->par_tok[i];
        else tok = sample_token(&r->p.sampling, lg, V, r->tokens, r->n_tokens, r->n_prompt, (uint64_t)r->n_gen, &eng->ss);
        r->tokens[r->n_tokens++] = tok;
        r->n_gen++;
        eng->stats.generated_tokens++;
        ev.token = tok;
        int stop_tok = is_stop_token(eng, r, tok);
        int stop_str = 0;
        if (!stop_tok) stop_str = request_text(r, tok, &ev);
        else ev.text = strdup("");
        pthread_mutex_lock(&r->mu);
        if (r->n_gen == 1) r->info.t_first_token = t;
        r->info.n_generated = r->n_gen;
        pthread_mutex_unlock(&r->mu);
        kiln_finish_t why = KILN_NOT_FINISHED;
        if (stop_tok) { why = KILN_FINISH_STOP; ev.stop_id = tok; }
        else if (stop_str) why = KILN_FINISH_STOP;
        else if (r->n_gen >= r->p.max_tokens) why = KILN_FINISH_LENGTH;
        if (why == KILN_NOT_FINISHED) { request_emit(r, &ev); continue; }
        /* the final event carries the token and the rest of the text */
        char *tail = request_text_flush(r);
        if (!stop_str && *tail) {
            size_t a = strlen(ev.text), bl = strlen(tail);
            ev.text = realloc(ev.text, a + bl + 1);
            memcpy(ev.text + a, tail, bl + 1);
        }
        free(tail);
        for (int j = 0; j < eng->n_running; j++) if (eng->running[j] == r) { running_remove(eng, j); break; }
        publish_tail_snapshot(eng, r);
        release_blocks(eng, r);
        ev.finish = why;
        pthread_mutex_lock(&r->mu);
        r->info.t_done = now_s();
        pthread_mutex_unlock(&r->mu);
        r->state = REQ_DONE;
        pthread_mutex_lock(&eng->mu);
        eng->stats.requests_finished++;
        pthread_mutex_unlock(&eng->mu);
        request_emit(r, &ev);
        request_unref(r);
    }
}

/* --- the thread ---------------------------------------------------------------------- */

static void take_incoming(kiln_engine_t *eng) {
    pthread_mutex_lock(&eng->mu);
    kiln_request_t *r = eng->incoming;
    eng->incoming = eng->incoming_tail = NULL;
    eng->n_incoming = 0;
    pthread_mutex_unlock(&eng->mu);
    while (r) {
        kiln_request_t *next = r->next;
        r->state = REQ_WAITING;
        list_push(&eng->waiting, &eng->waiting_tail, r);
        eng->n_waiting++;
        r = next;
    }
}

static void drop_cancelled(kiln_engine_t *eng) {
    for (int i = 0; i < eng->n_running; i++) {
        kiln_request_t *r = eng->running[i];
        if (!atomic_load(&r->cancel)) continue;
        running_remove(eng, i--);
        finish(eng, r, KILN_FINISH_CANCELLED, NULL);
    }
    kiln_request_t **pp = &eng->waiting, *prev = NULL;
    while (*pp) {
        kiln_request_t *r = *pp;
        if (atomic_load(&r->cancel)) {
            *pp = r->next;
            if (eng->waiting_tail == r) eng->waiting_tail = prev;
            eng->n_waiting--;
            finish(eng, r, KILN_FINISH_CANCELLED, NULL);
        } else {
            prev = r;
            pp = &r->next;
        }
    }
}

static void publish_stats(kiln_engine_t *eng) {
    kv_pool_t *p = &eng->m->kv;
    pthread_mutex_lock(&eng->mu);
    eng->stats.waiting = eng->n_waiting + eng->n_incoming;
    eng->stats.running = eng->n_running;
    eng->stats.kv_blocks_total = p->n_blocks;
    eng->stats.kv_blocks_cached = p->n_cached;
    eng->stats.kv_blocks_used = p->n_blocks - p->n_free - p->n_cached;
    const kv_pool_t *ps = &eng->m->kv_swa;
    eng->stats.kv_swa_blocks_total = ps->n_blocks;
    eng->stats.kv_swa_blocks_cached = ps->n_cached;
    eng->stats.kv_swa_blocks_used = ps->n_blocks - ps->n_free - ps->n_cached;
    pthread_mutex_unlock(&eng->mu);
}

static void *engine_main(void *arg) {
    kiln_engine_t *eng = arg;
    step_t s = {0};
    int cap = eng->o.step_tokens + eng->o.max_batch;
    s.req = malloc(sizeof(void *) * eng->o.max_batch);
    s.seq = malloc(sizeof(void *) * eng->o.max_batch);
    s.seq_swa = malloc(sizeof(void *) * eng->o.max_batch);
    s.sample_row = malloc(sizeof(int) * eng->o.max_batch);
    s.logit_row = malloc(sizeof(int) * eng->o.max_batch);
    s.par_rows = malloc(sizeof(int) * eng->o.max_batch);
    s.par_tok = malloc(sizeof(int32_t) * eng->o.max_batch);
    s.row_start = malloc(sizeof(int32_t) * (eng->o.max_batch + 1));
    s.tokens = malloc(sizeof(int32_t) * cap);
    s.pos = malloc(sizeof(int32_t) * cap);
    s.logit_index = malloc(sizeof(int32_t) * eng->o.max_batch);
    for (;;) {
        pthread_mutex_lock(&eng->mu);
        while (!eng->stopping && !eng->incoming && eng->n_running == 0 && eng->n_waiting == 0)
            pthread_cond_wait(&eng->cv, &eng->mu);
        int stopping = eng->stopping;
        pthread_mutex_unlock(&eng->mu);
        double t0 = now_s();
        take_incoming(eng);
        if (stopping) {
            while (eng->n_running) { kiln_request_t *r = eng->running[0]; running_remove(eng, 0); finish(eng, r, KILN_FINISH_CANCELLED, "server shutting down"); }
            while (eng->waiting) { kiln_request_t *r = eng->waiting; eng->waiting = r->next; eng->n_waiting--; finish(eng, r, KILN_FINISH_CANCELLED, "server shutting down"); }
            break;
        }
        drop_cancelled(eng);
        build_step(eng, &s);
        double t1 = now_s(), f0 = eng->stats.time_forward_s;
        if (s.n_rows) run_step(eng, &s);
        double t2 = now_s();
        if (s.n_rows) {
            /* host time per step (kiln_stats_t): one clock read per phase, no env switch */
            eng->stats.time_schedule_s += t1 - t0;
            eng->stats.time_post_s += (t2 - t1) - (eng->stats.time_forward_s - f0);
            eng->stats.step_rows += (uint64_t)s.n_rows;
        }
        publish_stats(eng);
        /* cancelled while idle-waiting for blocks: nothing ran but cancels still land */
        if (!s.n_rows && eng->n_running == 0 && eng->n_waiting > 0) {
            /* a lone waiting request that cannot get blocks would spin: cannot happen
             * since submit refuses requests larger than the pool */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    free(s.req); free(s.seq); free(s.seq_swa); free(s.sample_row); free(s.row_start); free(s.tokens); free(s.pos); free(s.logit_index);
    free(s.logit_row); free(s.par_rows); free(s.par_tok);
    return NULL;
}

/* --- public API ---------------------------------------------------------------------- */

/* The namespace of cached blocks: config.json bytes, the tensors' names and sizes, the
 * KV dtype and block size. Two models (or two KV dtypes) never share a block. */
static uint64_t model_fingerprint(const kiln_engine_t *eng) {
    const model_t *m = eng->m;
    char *cfg = json_dumps(m->cfg.root, JSON_SORT_KEYS | JSON_COMPACT);
    uint64_t h = kv_block_hash(0x6b696c6eull, NULL, 0, (uint64_t)eng->o.kv_dtype * 1000003u + (uint64_t)m->kv.block_size);
    for (const char *c = cfg; c && *c; c++) h = kv_block_hash(h, (const int32_t[]){(unsigned char)*c}, 1, 0);
    free(cfg);
    for (int i = 0; i < m->ar.n_tensors; i++) {
        const st_tensor_t *t = &m->ar.tensors[i];
        int32_t v[2] = {(int32_t)t->nbytes, (int32_t)(t->nbytes >> 32)};
        h = kv_block_hash(h, v, 2, strlen(t->name));
    }
    return h;
}

/* What start allocates and stop (or a failed start) frees; every field may be unset. */
static void free_parts(kiln_engine_t *eng) {
    snap_free(&eng->snaps);
    if (eng->tok) tokenizer_free(eng->tok);
    model_free(eng->m);
    free(eng->running);
    free(eng->logits);
    free(eng->lp);
    free(eng->raw);
    sampler_scratch_free(&eng->ss);
    sample_pool_free(eng->pool);
    sample_dev_free(eng->dev);
}

/* The numbers kv_auto_budget needs: the backend's memory (device) or the host's, the model's
 * widths for a step's activations and what each batch row holds beyond its K/V. */
static kv_budget_in_t budget_inputs(const kiln_engine_t *eng, size_t block_bytes) {
    const model_config_t *c = &eng->m->cfg;
    backend_t *be = eng->m->be;
    kv_budget_in_t in = {0};
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    in.host_total = pages > 0 && psize > 0 ? (double)pages * (double)psize : 4e9;
    size_t fr = 0, tot = 0;
    in.device = be->ops->mem_info && be->ops->mem_info(be, &fr, &tot) == 0;
    in.dev_free = (double)fr;
    in.cache_bytes = (double)eng->m->weight_cache_bytes;
    in.dev_total = (double)tot;
    in.token_bytes = (double)block_bytes / eng->o.block_size;
    in.ctx_len = eng->o.ctx_len;
    /* a step's f32 buffers: x, h, q, attention out, k, v, the MLP's two halves and its output
     * (MoE: every routed expert's and the shared expert's), DeltaNet's projections */
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    double mlp = c->intermediate_size, moe = (double)c->n_experts_per_tok * c->moe_intermediate_size + c->shared_expert_intermediate_size;
    if (moe > mlp) mlp = moe;
    double lin = (double)c->linear_k_heads * c->linear_k_dim * 2 + (double)c->linear_v_heads * c->linear_v_dim * 3;
    in.step_bytes = 4.0 * eng->o.step_tokens * (4.0 * c->hidden_size + 2 * q + 2 * kv + 3 * mlp + lin);
    in.row_bytes = 3 * 4.0 * c->vocab_size + 2.0 * (double)eng->state_bytes;
    in.max_batch = eng->o.max_batch;
    return in;
}

static kv_budget_t auto_budget(const kiln_engine_t *eng, size_t block_bytes, int *on_device) {
    kv_budget_in_t in = budget_inputs(eng, block_bytes);
    *on_device = in.device;
    return kv_auto_budget(&in);
}

/* The weight cache's automatic budget was planned against an automatic KV pool; a pool of a given
 * size (--kv-cache-gb X, --kv-tokens) may leave less. Once the pool exists, an automatic cache
 * shrinks to what is free less the reserve the automatic pool would have kept for the steps
 * (kv_weight_cache_room), so its later fills never take what the scratch still needs. An explicit
 * --weight-cache-gb is the user's word and stays. */
static void weight_cache_fit(kiln_engine_t *eng, size_t block_bytes) {
    backend_t *be = eng->m->be;
    if (!eng->m->weight_cache_bytes || eng->o.weight_cache_gb >= 0 || !be->ops->weight_cache) return;
    kv_budget_in_t in = budget_inputs(eng, block_bytes);
    if (!in.device) return;
    const double room = kv_weight_cache_room(&in);
    if (room >= in.cache_bytes - 256e6) return; /* an automatic pool leaves the whole budget, less its buffers' rounding */
    eng->m->weight_cache_bytes = be->ops->weight_cache(be, room >= 1e6 ? room / 1e9 : 0.0); /* 0: off */
    log_info("engine: weight cache %.1f GB, what the KV cache as sized leaves (%.1f GB free, %.1f GB kept for the steps; "
             "--weight-cache-gb sets it)", eng->m->weight_cache_bytes / 1e9, in.dev_free / 1e9, (in.dev_free - room) / 1e9);
}

kiln_engine_t *kiln_engine_start(const kiln_engine_opts_t *o, err_t *e) {
    kiln_engine_t *eng = calloc(1, sizeof *eng);
    eng->o = *o;
    if (eng->o.block_size <= 0) eng->o.block_size = 16;
    /* The step's token budget: 512 on the CPU (a step's prefill chunk then costs about as long as a
     * few decode steps of the rows it delays); 2048 on CUDA, where a 512-token step is host-bound
     * (~5.8 ms of issuing for ~0.3 ms of GPU work on qwen3-0.6b) and a burst of 64 prompts took 16
     * of them: 4 steps instead raise c=64 throughput ~20 % (bench/cuda/RESULTS.md, session 15) at
     * the cost of decode rows waiting longer while prompts are admitted. */
    if (eng->o.step_tokens <= 0) eng->o.step_tokens = o->backend && !strncmp(o->backend, "cuda", 4) ? 2048 : 512;
    if (eng->o.max_batch <= 0) eng->o.max_batch = 64;
    if (eng->o.max_queue <= 0) eng->o.max_queue = 1024;
    model_opts_t mo = {o->backend, o->threads, o->buffer_dtype, o->weight_cache_gb};
    eng->m = model_load(o->model_dir, &mo, e);
    if (!eng->m) goto err;
    const model_config_t *c = &eng->m->cfg;
    if (eng->o.ctx_len <= 0 || eng->o.ctx_len > c->max_pos) eng->o.ctx_len = c->max_pos;
    int n_blocks;
    /* a probe pool tells the block size in bytes for this model's layer layout */
    if (model_init_kv(eng->m, 1, eng->o.block_size, eng->o.kv_dtype, e)) goto err;
    size_t bb = kv_pool_block_bytes(eng->m->kv.n_layers, eng->o.block_size, eng->m->kv.n_kv_heads, eng->m->kv.head_dim,
                                    eng->o.kv_dtype);
    eng->state_bytes = model_state_bytes(eng->m);
    kv_budget_t ab = {0};
    int on_device = 0;
    if (eng->o.kv_cache_gb <= 0) { /* auto (with kv_tokens, only the snapshots' share comes from it) */
        ab = auto_budget(eng, bb, &on_device);
        if (eng->o.kv_tokens <= 0 && ab.kv_bytes < bb) { err_set(e, "no room for a KV cache (%s): pass --kv-cache-gb, or a smaller model or --step-tokens", ab.why); goto err; }
    }
    double budget = eng->o.kv_cache_gb > 0 ? eng->o.kv_cache_gb * 1e9 : ab.kv_bytes, snap_budget = 0;
    if (eng->state_bytes) {
        /* hybrid: snapshots (host memory) count against the cache budget — except where the
         * automatic budget is the device's memory: then they have a cap of their own */
        double share = eng->o.snapshot_share > 0 && eng->o.snapshot_share < 1 ? eng->o.snapshot_share : 0.25;
        snap_budget = budget * share;
        if (on_device) { if (snap_budget > ab.snap_cap) snap_budget = ab.snap_cap; }
        else budget -= snap_budget;
        int every = eng->o.snapshot_interval > 0 ? eng->o.snapshot_interval : 256;
        eng->snap_every = (every + eng->o.block_size - 1) / eng->o.block_size;
        snap_init(&eng->snaps, eng->state_bytes, (size_t)snap_budget);
    }
    /* sliding models (not hybrids, whose prefix hits follow snapshots): a second pool */
    int n_swa = 0, swa_w = eng->state_bytes ? 0 : model_sliding_window(eng->m);
    size_t bb_swa = 0;
    if (swa_w) model_kv_group_bytes(eng->m, eng->o.block_size, eng->o.kv_dtype, &bb, &bb_swa);
    if (eng->o.kv_tokens > 0) n_blocks = (eng->o.kv_tokens + eng->o.block_size - 1) / eng->o.block_size;
    else n_blocks = budget / (double)bb < 1 << 30 ? (int)(budget / (double)bb) : 1 << 30;
    if (swa_w) swa_pool_sizes(eng, swa_w, bb, bb_swa, budget, &n_blocks, &n_swa);
    if (n_blocks < 1) { err_set(e, "--kv-cache-gb %.3g holds no block of %d tokens (%zu bytes each)", budget / 1e9, eng->o.block_size, bb); goto err; }
    if (model_init_kv_groups(eng->m, n_blocks, n_swa, eng->o.block_size, eng->o.kv_dtype, e)) goto err;
    weight_cache_fit(eng, bb);
    if (o->load_tokenizer) {
        char *tp = str_printf("%s/tokenizer.json", o->model_dir);
        if (file_exists(tp)) {
            eng->tok = tokenizer_load(o->model_dir, e);
            if (!eng->tok) { free(tp); goto err; }
        }
        free(tp);
    }
    eng->ns = model_fingerprint(eng);
    eng->cap_running = eng->o.max_batch; /* a running request always gets a row: none holds blocks idle */
    eng->running = calloc((size_t)eng->cap_running, sizeof(void *));
    eng->logits = malloc(sizeof(float) * (size_t)eng->o.max_batch * c->vocab_size);
    eng->lp = malloc(sizeof(float) * c->vocab_size);
    eng->raw = malloc(sizeof(float) * c->vocab_size);
    sampler_scratch_init(&eng->ss, c->vocab_size);
    {
        /* sampling threads: --threads caps them too (0: min(cores, 8)) */
        int nt = eng->o.sample_threads > 0 ? eng->o.sample_threads : eng->o.threads > 0 && eng->o.threads < 8 ? eng->o.threads : 0;
        eng->pool = sample_pool_new(nt, c->vocab_size); /* NULL: rows sample one by one */
    }
    {
        const char *ds = getenv("KILN_DEVICE_SAMPLING");
        if (eng->m->be->ops->sample && eng->m->dev_logits_ok && !(ds && !strcmp(ds, "0")))
            eng->dev = sample_dev_new(c->vocab_size); /* NULL: sampled on the host */
    }
    pthread_mutex_init(&eng->mu, NULL);
    pthread_cond_init(&eng->cv, NULL);
    publish_stats(eng); /* the pool's size is known before the first step (/metrics, kiln_stats) */
    if (pthread_create(&eng->thread, NULL, engine_main, eng) != 0) { err_set(e, "cannot start the engine thread"); goto err; }
    if (ab.why[0] && eng->o.kv_tokens <= 0) log_info("engine: KV cache %s", ab.why);
    log_info("engine: %s, %d KV blocks of %d tokens (%s, %.1f MB), step budget %d tokens, up to %d rows",
             o->model_dir, n_blocks, eng->o.block_size, kv_dtype_name(eng->o.kv_dtype), n_blocks * (double)bb / 1e6,
             eng->o.step_tokens, eng->o.max_batch);
    if (eng->m->swa_window)
        log_info("engine: sliding-window layers (window %d) in a pool of their own: %d blocks (%.1f MB)", eng->m->swa_window,
                 n_swa, n_swa * (double)bb_swa / 1e6);
    if (eng->state_bytes)
        log_info("engine: recurrent-state snapshots of %.2f MB every %d tokens, up to %.1f MB", eng->state_bytes / 1e6,
                 eng->snap_every * eng->o.block_size, snap_budget / 1e6);
    return eng;
err:
    free_parts(eng);
    free(eng);
    return NULL;
}

void kiln_engine_stop(kiln_engine_t *eng) {
    if (!eng) return;
    pthread_mutex_lock(&eng->mu);
    eng->stopping = 1;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    pthread_join(eng->thread, NULL);
    free_parts(eng);
    pthread_mutex_destroy(&eng->mu);
    pthread_cond_destroy(&eng->cv);
    free(eng);
}

const model_config_t *kiln_engine_config(const kiln_engine_t *eng) { return &eng->m->cfg; }
const struct tokenizer *kiln_engine_tokenizer(const kiln_engine_t *eng) { return eng->tok; }
const char *kiln_engine_model_dir(const kiln_engine_t *eng) { return eng->o.model_dir; }
int kiln_engine_ctx_len(const kiln_engine_t *eng) { return eng->o.ctx_len; }

kiln_request_t *kiln_submit(kiln_engine_t *eng, const kiln_request_params_t *p, int *code, err_t *e) {
    const model_config_t *c = &eng->m->cfg;
    int dummy;
    if (!code) code = &dummy;
    *code = KILN_ERR_INVALID;
    if (p->n_prompt <= 0) { err_set(e, "the prompt is empty"); return NULL; }
    if (p->max_tokens <= 0) { err_set(e, "max_tokens must be at least 1 (got %d)", p->max_tokens); return NULL; }
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= c->vocab_size) {
            err_set(e, "prompt token %d at index %d is outside the vocabulary (0..%d)", p->prompt[i], i, c->vocab_size - 1);
            return NULL;
        }
    if (sampling_validate(&p->sampling, c->vocab_size, e)) return NULL;
    if (p->n_stop < 0 || p->n_stop > KILN_MAX_STOP) { err_set(e, "at most %d stop strings", KILN_MAX_STOP); return NULL; }
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !*p->stop[i]) { err_set(e, "stop string %d is empty", i); return NULL; }
    if (p->n_stop && !eng->tok) { err_set(e, "stop strings need a tokenizer; this model has no tokenizer.json"); return NULL; }
    if (p->top_logprobs < 0 || p->top_logprobs > KILN_MAX_TOP_LOGPROBS) { err_set(e, "top_logprobs must be in [0, %d]", KILN_MAX_TOP_LOGPROBS); return NULL; }
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= c->vocab_size) { err_set(e, "stop token id %d is outside the vocabulary", p->stop_ids[i]); return NULL; }
    long total = (long)p->n_prompt + p->max_tokens;
    if (total > eng->o.ctx_len) {
        *code = KILN_ERR_TOO_LONG;
        err_set(e, "prompt (%d tokens) plus max_tokens (%d) is %ld tokens, over the context length of %d", p->n_prompt,
                p->max_tokens, total, eng->o.ctx_len);
        return NULL;
    }
    long pool_tokens = (long)eng->m->kv.n_blocks * eng->m->kv.block_size;
    if (total > pool_tokens) {
        *code = KILN_ERR_TOO_LONG;
        err_set(e, "prompt (%d tokens) plus max_tokens (%d) needs %ld tokens of KV cache, the pool holds %ld (raise --kv-cache-gb)",
                p->n_prompt, p->max_tokens, total, pool_tokens);
        return NULL;
    }
    kiln_request_t *r = request_new(eng, p, e);
    if (!r) return NULL;
    r->info.n_prompt = p->n_prompt;
    r->info.t_submit = now_s();
    pthread_mutex_lock(&eng->mu);
    if (eng->stopping) {
        pthread_mutex_unlock(&eng->mu);
        *code = KILN_ERR_STOPPED;
        err_set(e, "the engine is shutting down");
        atomic_store(&r->refs, 1);
        request_unref(r);
        return NULL;
    }
    if (eng->n_incoming + eng->stats.waiting >= eng->o.max_queue) {
        pthread_mutex_unlock(&eng->mu);
        *code = KILN_ERR_QUEUE_FULL;
        err_set(e, "the queue is full (%d requests waiting); retry later", eng->o.max_queue);
        atomic_store(&r->refs, 1);
        request_unref(r);
        return NULL;
    }
    list_push(&eng->incoming, &eng->incoming_tail, r);
    eng->n_incoming++;
    eng->stats.prompt_tokens += (uint64_t)p->n_prompt;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    *code = 0;
    return r;
}

void kiln_stats(kiln_engine_t *eng, kiln_stats_t *s) {
    pthread_mutex_lock(&eng->mu);
    *s = eng->stats;
    s->waiting = eng->stats.waiting > eng->n_incoming ? eng->stats.waiting : eng->n_incoming;
    pthread_mutex_unlock(&eng->mu);
}
