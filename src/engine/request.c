/* request.c — a request's life outside the scheduler: its parameters (deep-copied at
 * submit so the caller's buffers can go), its event channel to the consumer, and the
 * text side of each token: incremental detokenization and stop strings.
 *
 * Stop strings are matched on the detokenized output. Text that could still be the
 * start of a stop string is held back (never sent) until the next token decides; when a
 * stop string completes, everything before it goes out and the request ends. Hold-back
 * is the longest suffix of the pending text that is a prefix of some stop string: O(k·s)
 * per token for k stop strings of length s, trivial next to a forward pass. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/engine_int.h"

kiln_request_t *request_new(kiln_engine_t *eng, const kiln_request_params_t *p, err_t *e) {
    kiln_request_t *r = calloc(1, sizeof *r);
    if (!r) { err_set(e, "out of memory"); return NULL; }
    r->eng = eng;
    atomic_init(&r->refs, 2);
    r->p = *p;
    r->cap_tokens = p->n_prompt + p->max_tokens + 1;
    r->tokens = malloc(sizeof(int32_t) * r->cap_tokens);
    memcpy(r->tokens, p->prompt, sizeof(int32_t) * p->n_prompt);
    r->n_tokens = r->n_prompt = p->n_prompt;
    r->p.prompt = NULL;
    /* the copy owns every pointer it holds: start from none */
    r->p.stop_ids = NULL;
    r->p.sampling.bias_ids = NULL;
    r->p.sampling.bias_vals = NULL;
    memset(r->p.stop, 0, sizeof r->p.stop);
    if (p->n_stop_ids) {
        int32_t *s = malloc(sizeof(int32_t) * p->n_stop_ids);
        memcpy(s, p->stop_ids, sizeof(int32_t) * p->n_stop_ids);
        r->p.stop_ids = s;
    }
    for (int i = 0; i < p->n_stop; i++) r->p.stop[i] = strdup(p->stop[i]);
    if (p->sampling.n_bias) {
        int32_t *ids = malloc(sizeof(int32_t) * p->sampling.n_bias);
        float *vals = malloc(sizeof(float) * p->sampling.n_bias);
        memcpy(ids, p->sampling.bias_ids, sizeof(int32_t) * p->sampling.n_bias);
        memcpy(vals, p->sampling.bias_vals, sizeof(float) * p->sampling.n_bias);
        r->p.sampling.bias_ids = ids;
        r->p.sampling.bias_vals = vals;
    }
    kv_seq_init(&r->seq);
    if (eng->tok) r->detok = detok_new(eng->tok, !p->keep_special);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return r;
}

void kiln_event_clear(kiln_event_t *ev) {
    free(ev->text);
    free(ev->error);
    memset(ev, 0, sizeof *ev);
    ev->token = -1;
}

void request_unref(kiln_request_t *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (int i = 0; i < r->ev_count; i++) kiln_event_clear(&r->events[(r->ev_head + i) % r->ev_cap]);
    free(r->events);
    free(r->tokens);
    free((void *)r->p.stop_ids);
    for (int i = 0; i < r->p.n_stop; i++) free((void *)r->p.stop[i]);
    free((void *)r->p.sampling.bias_ids);
    free((void *)r->p.sampling.bias_vals);
    if (r->detok) detok_free(r->detok);
    free(r->held);
    free(r->tail_snap);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void request_emit(kiln_request_t *r, kiln_event_t *ev) {
    pthread_mutex_lock(&r->mu);
    if (r->ev_count == r->ev_cap) {
        int cap = r->ev_cap ? r->ev_cap * 2 : 16;
        kiln_event_t *ne = malloc(sizeof(kiln_event_t) * cap);
        for (int i = 0; i < r->ev_count; i++) ne[i] = r->events[(r->ev_head + i) % r->ev_cap];
        free(r->events);
        r->events = ne;
        r->ev_cap = cap;
        r->ev_head = 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ev->t = ts.tv_sec + ts.tv_nsec * 1e-9;
    r->events[(r->ev_head + r->ev_count++) % r->ev_cap] = *ev;
    if (ev->finish) r->finished = 1;
    void (*fn)(void *) = r->notify;
    void *arg = r->notify_arg;
    if (fn) r->notifying++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (!fn) return;
    /* outside the lock (the callback may take the consumer's locks), but counted, so that
     * clearing the callback can wait for a run in progress */
    fn(arg);
    pthread_mutex_lock(&r->mu);
    r->notifying--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int kiln_request_next(kiln_request_t *r, kiln_event_t *ev, int timeout_ms) {
    pthread_mutex_lock(&r->mu);
    if (r->ev_count == 0 && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (r->ev_count == 0) pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            while (r->ev_count == 0)
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
        }
    }
    int got = 0;
    if (r->ev_count > 0) {
        *ev = r->events[r->ev_head];
        r->ev_head = (r->ev_head + 1) % r->ev_cap;
        r->ev_count--;
        got = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

void kiln_request_set_notify(kiln_request_t *r, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&r->mu);
    r->notify = fn;
    r->notify_arg = arg;
    /* a callback already running on the engine thread finishes before we return (unless
     * we are that callback, clearing itself: then waiting would deadlock) */
    while (!fn && r->notifying > 0 && !pthread_equal(pthread_self(), r->eng->thread)) pthread_cond_wait(&r->cv, &r->mu);
    int pending = r->ev_count > 0;
    pthread_mutex_unlock(&r->mu);
    if (pending && fn) fn(arg);
}

void kiln_cancel(kiln_request_t *r) {
    atomic_store(&r->cancel, 1);
    kiln_engine_t *eng = r->eng;
    pthread_mutex_lock(&eng->mu);
    pthread_cond_signal(&eng->cv); /* wake an idle engine so the cancel lands now */
    pthread_mutex_unlock(&eng->mu);
}

void kiln_request_free(kiln_request_t *r) {
    if (!r) return;
    kiln_request_set_notify(r, NULL, NULL);
    kiln_cancel(r);
    request_unref(r);
}

void kiln_request_info(kiln_request_t *r, kiln_request_info_t *info) {
    pthread_mutex_lock(&r->mu);
    *info = r->info;
    pthread_mutex_unlock(&r->mu);
}

static void held_append(kiln_request_t *r, const char *s, size_t n) {
    r->held = realloc(r->held, r->held_len + n + 1);
    memcpy(r->held + r->held_len, s, n);
    r->held_len += n;
    r->held[r->held_len] = 0;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a stop string. */
static size_t holdback(const kiln_request_t *r, const char *s, size_t n) {
    size_t best = 0;
    for (int k = 0; k < r->p.n_stop; k++) {
        size_t sl = strlen(r->p.stop[k]);
        for (size_t l = sl - 1 < n ? sl - 1 : n; l > best; l--)
            if (memcmp(s + n - l, r->p.stop[k], l) == 0) { best = l; break; }
    }
    return best;
}

int request_text(kiln_request_t *r, int32_t token, kiln_event_t *ev) {
    char *piece = NULL;
    if (r->detok) {
        err_t e = {0};
        if (detok_push(r->detok, token, &piece, &e) != 0) piece = NULL;
    }
    if (!piece) piece = strdup("");
    if (r->p.n_stop == 0) { ev->text = piece; return 0; }
    held_append(r, piece, strlen(piece));
    free(piece);
    /* earliest complete stop string in the pending text */
    size_t cut = (size_t)-1;
    int which = -1;
    for (int k = 0; k < r->p.n_stop; k++) {
        char *hit = strstr(r->held, r->p.stop[k]);
        if (hit && (size_t)(hit - r->held) < cut) { cut = (size_t)(hit - r->held); which = k; }
    }
    if (which >= 0) {
        size_t keep = cut + (r->p.include_stop_str ? strlen(r->p.stop[which]) : 0);
        ev->text = strndup(r->held, keep);
        ev->stop_str = r->p.stop[which];
        r->held_len = 0;
        r->held[0] = 0;
        return 1;
    }
    size_t hb = holdback(r, r->held, r->held_len);
    ev->text = strndup(r->held, r->held_len - hb);
    memmove(r->held, r->held + r->held_len - hb, hb + 1);
    r->held_len = hb;
    return 0;
}

char *request_text_flush(kiln_request_t *r) {
    char *tail = r->detok ? detok_flush(r->detok) : NULL;
    size_t tl = tail ? strlen(tail) : 0;
    char *out = malloc(r->held_len + tl + 1);
    memcpy(out, r->held ? r->held : "", r->held_len);
    if (tl) memcpy(out + r->held_len, tail, tl);
    out[r->held_len + tl] = 0;
    free(tail);
    r->held_len = 0;
    if (r->held) r->held[0] = 0;
    return out;
}
