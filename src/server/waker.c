/* waker.c — from "the engine has events for request R" to "MHD, resume connection C".
 *
 * The engine calls a request's notify function on its own thread after releasing the
 * request's lock, so a notify can arrive after the consumer has freed the request handle
 * (a client that disconnected at just that moment). The notify argument is therefore not
 * the connection but a ticket: a small object naming a slot of a server-owned table, which
 * lives as long as the server. A connection takes a slot when it submits and gives it
 * back when it completes. A late notify wakes whoever holds the slot now, or nobody; a
 * spurious wake-up only makes that connection look for events once more.
 *
 * Lost wake-ups: a notify that arrives while the connection is running (not suspended)
 * sets `wake`, and conn_suspend then declines to suspend, so the caller looks for events
 * once more. The handshake is two atomic flags, not a mutex: a lock shared with the
 * engine thread would be held by the HTTP thread across MHD_suspend_connection and an
 * epoll_ctl, and the engine thread blocking on it once per token (sleeping, then waiting
 * for a core) cost more than all the HTTP work when every core computes. The notifier
 * sets `wake` then takes `suspended`; the suspender suspends, sets `suspended`, then
 * takes `wake` once more. Sequentially consistent atomics make one of them see the
 * other's flag, and only whoever swaps `suspended` from 1 to 0 resumes, so a connection
 * is never left suspended with events waiting, nor resumed twice. Lock order: wk_mu, then
 * MHD's own.
 *
 * Hang-ups: MHD does not poll a suspended connection, so a client that goes away while
 * its request waits in the queue (or between two tokens, or during a non-streamed
 * generation) would be noticed only when the next event resumes it, which for a queued
 * request can be minutes. So each suspend arms the socket, EPOLLRDHUP and one-shot, in an
 * epoll set of our own; a thread waits on it and, when a client hangs up, marks the
 * connection gone and cancels its request at once (the engine drops it at the next step
 * boundary; the cancel's final event then resumes the connection, which closes). The
 * event carries slot and registration number, so a hang-up reported after the
 * connection finished, or on a reused slot, finds nobody. Registrations are never
 * removed: re-arming is one epoll_ctl per suspend, and closing the socket drops it from
 * the set. Trade-off: a client that half-closes (shutdown(SHUT_WR)) after sending its
 * request and still wants the answer is taken as gone; HTTP clients do not do that. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "base/log.h"
#include "server/srv.h"

#define WATCH_STOP UINT64_MAX

static void *watch_main(void *arg) {
    server_t *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(s->watch_ep, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            log_warn("serve: hang-up watcher: epoll_wait failed (%d); hang-ups are noticed at the next event only", errno);
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            uint64_t key = evs[i].data.u64;
            if (key == WATCH_STOP) return NULL;
            uint32_t idx = (uint32_t)key, seq = (uint32_t)(key >> 32);
            pthread_mutex_lock(&s->wk_mu);
            conn_t *c = idx < (uint32_t)s->n_slots ? s->slots[idx] : NULL;
            if (c && c->wseq == seq) {
                atomic_store(&c->gone, 1);
                if (c->g && c->g->r) kiln_cancel(c->g->r);
            }
            pthread_mutex_unlock(&s->wk_mu);
        }
    }
}

/* Arms c's socket for one hang-up report. Called on c's HTTP thread, c suspended. */
static void watch_arm(conn_t *c) {
    server_t *s = c->s;
    if (!s->watching || c->fd < 0 || c->slot < 0) return;
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = (uint64_t)c->wseq << 32 | (uint32_t)c->slot};
    if (epoll_ctl(s->watch_ep, EPOLL_CTL_MOD, c->fd, &ev) && errno == ENOENT) epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, c->fd, &ev);
}

struct wslot {
    server_t *s;
    int idx;
};

int waker_init(server_t *s) {
    pthread_mutex_init(&s->wk_mu, NULL);
    s->watch_ep = epoll_create1(EPOLL_CLOEXEC);
    s->watch_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WATCH_STOP};
    if (s->watch_ep >= 0 && s->watch_stop >= 0 && !epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, s->watch_stop, &ev) &&
        !pthread_create(&s->watch_thr, NULL, watch_main, s))
        s->watching = 1;
    else
        log_warn("serve: no hang-up watcher (%d); a client that leaves while queued is noticed at its first token", errno);
    return 0;
}

void waker_free(server_t *s) {
    if (s->watching) {
        uint64_t one = 1;
        if (write(s->watch_stop, &one, sizeof one) != sizeof one) log_warn("serve: cannot stop the hang-up watcher");
        pthread_join(s->watch_thr, NULL);
        s->watching = 0;
    }
    if (s->watch_ep >= 0) close(s->watch_ep);
    if (s->watch_stop >= 0) close(s->watch_stop);
    for (int i = 0; i < s->n_slots; i++) free(s->tickets[i]);
    free(s->tickets);
    free(s->slots);
    free(s->free_slots);
    pthread_mutex_destroy(&s->wk_mu);
}

void *waker_register(server_t *s, conn_t *c) {
    pthread_mutex_lock(&s->wk_mu);
    int slot;
    if (s->n_free) slot = s->free_slots[--s->n_free];
    else {
        if (s->n_slots == s->cap_slots) {
            int cap = s->cap_slots ? s->cap_slots * 2 : 256;
            conn_t **ns = realloc(s->slots, sizeof(conn_t *) * cap);
            if (ns) s->slots = ns;
            struct wslot **nt = realloc(s->tickets, sizeof(struct wslot *) * cap);
            if (nt) s->tickets = nt;
            int *nf = realloc(s->free_slots, sizeof(int) * cap);
            if (nf) s->free_slots = nf;
            if (!ns || !nt || !nf) goto oom;
            s->cap_slots = cap;
        }
        struct wslot *t = malloc(sizeof *t);
        if (!t) goto oom;
        t->s = s;
        t->idx = s->n_slots;
        s->tickets[s->n_slots] = t;
        slot = s->n_slots++;
    }
    s->slots[slot] = c;
    c->slot = slot;
    c->wseq = ++s->wk_seq;
    void *ticket = s->tickets[slot];
    pthread_mutex_unlock(&s->wk_mu);
    return ticket;
oom:
    pthread_mutex_unlock(&s->wk_mu);
    return NULL;
}

void waker_unregister(server_t *s, conn_t *c) {
    pthread_mutex_lock(&s->wk_mu);
    if (c->slot >= 0 && s->slots[c->slot] == c) {
        s->slots[c->slot] = NULL;
        s->free_slots[s->n_free++] = c->slot;
    }
    c->slot = -1;
    pthread_mutex_unlock(&s->wk_mu);
}

static void wake(conn_t *c) {
    atomic_store(&c->wake, 1);
    if (atomic_exchange(&c->suspended, 0)) MHD_resume_connection(c->mc);
}

void waker_notify(void *arg) {
    struct wslot *t = arg;
    server_t *s = t->s;
    pthread_mutex_lock(&s->wk_mu);
    if (s->slots[t->idx]) wake(s->slots[t->idx]);
    pthread_mutex_unlock(&s->wk_mu);
}

void waker_wake_all(server_t *s) {
    pthread_mutex_lock(&s->wk_mu);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i]) wake(s->slots[i]);
    pthread_mutex_unlock(&s->wk_mu);
}

int conn_suspend(conn_t *c) {
    if (atomic_exchange(&c->wake, 0)) return 0;
    MHD_suspend_connection(c->mc);
    watch_arm(c);
    atomic_store(&c->suspended, 1);
    /* a notify between the first look at `wake` and the store above saw suspended == 0 */
    if (atomic_exchange(&c->wake, 0) && atomic_exchange(&c->suspended, 0)) MHD_resume_connection(c->mc);
    return 1;
}
