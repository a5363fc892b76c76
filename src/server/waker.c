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
 * once more. Lock order: wk_mu, then conn->mu, then MHD's own. */
#include <stdint.h>
#include <stdlib.h>
#include "server/srv.h"

struct wslot {
    server_t *s;
    int idx;
};

int waker_init(server_t *s) {
    pthread_mutex_init(&s->wk_mu, NULL);
    return 0;
}

void waker_free(server_t *s) {
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
    pthread_mutex_lock(&c->mu);
    if (c->suspended) {
        c->suspended = 0;
        MHD_resume_connection(c->mc);
    } else {
        c->wake = 1;
    }
    pthread_mutex_unlock(&c->mu);
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
    pthread_mutex_lock(&c->mu);
    if (c->wake) {
        c->wake = 0;
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    c->suspended = 1;
    MHD_suspend_connection(c->mc);
    pthread_mutex_unlock(&c->mu);
    return 1;
}
