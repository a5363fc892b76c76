/* http.c — the HTTP side of kiln serve: libmicrohttpd daemon, per-connection state,
 * routing, authentication, body limits and the one log line per request.
 *
 * Threads: MHD runs a small pool of worker threads, each an epoll loop over many
 * connections. Nothing here blocks on generation. A streaming request gets a response
 * whose content reader formats whatever events are ready and, when there are none,
 * suspends the connection; the engine's notify callback (waker.c) resumes it. A
 * non-streaming request is suspended the same way until its final event, then answered.
 * So 256 concurrent streams cost 256 sockets and a few KiB each, not 256 threads.
 *
 * The cheap checks (route, method, API key, Content-Length) are made when the headers
 * arrive, before any body is read; a body that grows past --max-body without announcing
 * its length is discarded as it arrives and answered with 413 at the end. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "base/log.h"
#include "server/srv.h"

const char *const route_names[R_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{id}", "/v1/messages",
    "/v1/messages/count_tokens", "/health", "/metrics", "/tokenize", "/detokenize", "other"};

double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int api_fail(api_err_t *ae, int status, const char *param, const char *fmt, ...) {
    ae->status = status;
    snprintf(ae->param, sizeof ae->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ae->e.msg, sizeof ae->e.msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- responses ---- */

int reply_queue(conn_t *c, int status, struct MHD_Response *r) {
    c->status = status;
    MHD_add_response_header(r, "Server", "kiln");
    cors_headers(c, r);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok == MHD_YES ? 0 : -1;
}

int reply_text(conn_t *c, int status, const char *ctype, const char *text, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return -1;
    MHD_add_response_header(r, "Content-Type", ctype);
    return reply_queue(c, status, r);
}

int reply_json(conn_t *c, int status, json_t *body) {
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) return -1;
    int rc = reply_text(c, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

static const char *err_type(int status, api_t api) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return api == API_ANTHROPIC ? "permission_error" : "permission_denied";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return api == API_ANTHROPIC ? "overloaded_error" : "server_error";
    default: return api == API_ANTHROPIC ? "api_error" : "server_error";
    }
}

static int route_is_get(route_t r) { return r == R_MODELS || r == R_MODEL || r == R_HEALTH || r == R_METRICS; }
static const char *route_methods(route_t r) { return route_is_get(r) ? "GET, OPTIONS" : "POST, OPTIONS"; }

int reply_error(conn_t *c, const api_err_t *ae) {
    json_t *body;
    if (c->api == API_ANTHROPIC) {
        body = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", err_type(ae->status, API_ANTHROPIC),
                         "message", ae->e.msg);
    } else {
        body = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", ae->e.msg, "type", err_type(ae->status, API_OPENAI),
                         "param", ae->param[0] ? json_string(ae->param) : json_null(),
                         "code", ae->status == 429 ? json_string("rate_limit_exceeded") : json_null());
    }
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (ae->status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (ae->status == 405) MHD_add_response_header(r, "Allow", route_methods(c->route));
    if (ae->status == 401 && c->api == API_OPENAI) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    log_debug("%s %s -> %d: %s", c->method, c->path, ae->status, ae->e.msg);
    return reply_queue(c, ae->status, r);
}

/* ---- streaming ---- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    conn_t *c = cls;
    gen_t *g = c->g;
    /* the client hung up (waker.c cancelled the request): nobody to send the rest to; end
     * the stream, MHD's write of the end then fails and closes the connection */
    if (atomic_load(&c->gone)) return MHD_CONTENT_READER_END_OF_STREAM;
    for (;;) {
        if (g->out.len) {
            size_t n = g->out.len < max ? g->out.len : max;
            memcpy(buf, g->out.p, n);
            sbuf_consume(&g->out, n);
            return (ssize_t)n;
        }
        int fin = gen_drain(g);
        if (g->out.len) continue;
        if (fin) return MHD_CONTENT_READER_END_OF_STREAM;
        if (conn_suspend(c)) return 0;
    }
}

static void stream_free(void *cls) { conn_unref(cls); }

int reply_stream(conn_t *c) {
    atomic_fetch_add(&c->refs, 1);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, stream_free);
    if (!r) { conn_unref(c); return -1; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return reply_queue(c, 200, r);
}

/* ---- connection state ---- */

void conn_unref(conn_t *c) {
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    waker_unregister(c->s, c);
    gen_free(c->g);
    sbuf_free(&c->body);
    free(c);
}

static route_t match_route(const char *url, api_t *api) {
    *api = API_OPENAI;
    if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/v1/models")) return R_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    if (!strcmp(url, "/v1/messages")) { *api = API_ANTHROPIC; return R_MESSAGES; }
    if (!strcmp(url, "/v1/messages/count_tokens")) { *api = API_ANTHROPIC; return R_COUNT_TOKENS; }
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    return R_UNKNOWN;
}


/* Constant-time comparison: the time taken depends on the lengths only. */
static int key_equal(const char *given, const char *want) {
    size_t gl = strlen(given), wl = strlen(want);
    unsigned char d = gl != wl;
    for (size_t i = 0; i < wl; i++) d |= (unsigned char)(want[i] ^ (i < gl ? given[i] : 0));
    return d == 0;
}

static int authorized(conn_t *c) {
    const char *key = c->s->api_key;
    if (!key || !*key || c->route == R_HEALTH) return 1;
    const char *h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ') h++;
        if (key_equal(h, key)) return 1;
    }
    h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "x-api-key");
    return h && key_equal(h, key);
}

/* Checks made as soon as the headers are in. Returns 1 if a response was queued (an error,
 * or the answer to OPTIONS). */
static int early_checks(conn_t *c, const char *method) {
    api_err_t ae = {0};
    if (c->route == R_UNKNOWN) {
        api_fail(&ae, 404, NULL, "no route %s %s (see docs/api.md for the routes)", method, c->path);
    } else if (!strcmp(method, "OPTIONS")) {
        cors_options(c, route_methods(c->route)); /* a CORS preflight never carries the key */
        return 1;
    } else if (strcmp(method, route_is_get(c->route) ? "GET" : "POST")) {
        api_fail(&ae, 405, NULL, "%s does not take %s; use %s", c->path, method, route_is_get(c->route) ? "GET" : "POST");
    } else if (!authorized(c)) {
        api_fail(&ae, 401, NULL, "missing or wrong API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')");
    } else if (atomic_load(&c->s->stopping)) {
        api_fail(&ae, 503, NULL, "the server is shutting down");
    } else {
        const char *cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            unsigned long long n = strtoull(cl, NULL, 10);
            if (n > c->s->o.max_body)
                api_fail(&ae, 413, NULL, "request body of %llu bytes is over the limit of %zu bytes (--max-body)", n, c->s->o.max_body);
        }
    }
    if (!ae.status) return 0;
    reply_error(c, &ae);
    return 1;
}

static int dispatch(conn_t *c) {
    api_err_t ae = {0};
    if (c->too_big) {
        api_fail(&ae, 413, NULL, "request body is over the limit of %zu bytes (--max-body)", c->s->o.max_body);
        return reply_error(c, &ae);
    }
    switch (c->route) {
    case R_MODELS: return route_models(c, NULL);
    case R_MODEL: return route_models(c, c->path + 11);
    case R_HEALTH: return route_health(c);
    case R_METRICS: return route_metrics(c);
    default: break;
    }
    json_t *req = body_parse(c->body.p ? c->body.p : "", c->body.len, &ae);
    sbuf_free(&c->body);
    if (!req) return reply_error(c, &ae);
    int rc;
    switch (c->route) {
    case R_CHAT: rc = route_chat(c, req); break;
    case R_COMPLETIONS: rc = route_completions(c, req); break;
    case R_MESSAGES: rc = route_messages(c, req); break;
    case R_COUNT_TOKENS: rc = route_count_tokens(c, req); break;
    case R_TOKENIZE: rc = route_tokenize(c, req); break;
    case R_DETOKENIZE: rc = route_detokenize(c, req); break;
    default: rc = -1;
    }
    json_decref(req);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server_t *s = cls;
    conn_t *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->s = s;
        c->mc = mc;
        c->slot = -1;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        atomic_init(&c->refs, 1);
        c->t0 = now_mono();
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        c->route = match_route(url, &c->api);
        cors_for_request(c, MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin"));
        *con_cls = c;
        if (early_checks(c, method)) c->handled = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_big && !c->handled) {
            if (c->body.len + *upload_size > s->o.max_body) {
                c->too_big = 1;
                sbuf_free(&c->body);
            } else if (sbuf_add(&c->body, upload, *upload_size)) {
                c->too_big = 1;
                sbuf_free(&c->body);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->handled) {
        /* resumed: a non-streaming generation that may have finished (if its client hung
         * up, the answer to the cancel goes nowhere and MHD closes the connection) */
        if (c->g && !c->status) return continue_generation(c) ? MHD_NO : MHD_YES;
        return MHD_YES;
    }
    c->handled = 1;
    return dispatch(c) ? MHD_NO : MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode why) {
    server_t *s = cls;
    conn_t *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    gen_t *g = c->g;
    int status = c->status ? c->status : 500;
    int gone = atomic_load(&c->gone);
    if (g && g->r && (!g->done || (gone && g->finish == KILN_FINISH_CANCELLED))) {
        /* the client went away before the end: stop generating for it now (the hang-up
         * watcher may have cancelled it already, while it was suspended) */
        kiln_cancel(g->r);
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.cancelled_disconnect++;
        pthread_mutex_unlock(&s->metrics.mu);
        status = 499;
    }
    metrics_request(&s->metrics, c->route, status);
    double t = now_mono() - c->t0;
    if (g && g->r) {
        kiln_request_info_t info;
        kiln_request_info(g->r, &info);
        double ttft = info.t_first_token > 0 ? (info.t_first_token - info.t_submit) * 1e3 : 0;
        double dec = g->t_last > g->t_first && g->n_gen > 1 ? (g->n_gen - 1) / (g->t_last - g->t_first) : 0;
        log_info("%s %s %d prompt=%d cached=%d completion=%d ttft=%.1fms tok/s=%.1f %.3fs%s", c->method, c->path, status,
                 g->n_prompt, info.n_cached, g->n_gen, ttft, dec, t, gone || why != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (client gone)" : "");
    } else {
        log_info("%s %s %d %.3fs", c->method, c->path, status, t);
    }
    waker_unregister(s, c);
    conn_unref(c);
}

void server_opts_default(server_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_body = (size_t)32 << 20;
    o->http_threads = 2;
}

int server_port(const server_t *s) {
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : s->o.port;
}

int server_http_start(server_t *s, err_t *e);
int server_http_start(server_t *s, err_t *e) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int rc = getaddrinfo(s->o.host, port, &hints, &ai);
    if (rc) return err_set(e, "--host %s: %s", s->o.host, gai_strerror(rc));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(s->o.http_threads > 1 ? s->o.http_threads : 1),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)2000,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) return err_set(e, "cannot listen on %s:%d (in use, or not an address of this machine?)", s->o.host, s->o.port);
    return 0;
}

void server_http_stop(server_t *s);
void server_http_stop(server_t *s) {
    if (!s->d) return;
    MHD_quiesce_daemon(s->d);
    /* Cancel everything in flight; the final events resume their connections. */
    for (int tries = 0; tries < 200; tries++) {
        int live = 0;
        pthread_mutex_lock(&s->wk_mu);
        for (int i = 0; i < s->n_slots; i++) {
            conn_t *c = s->slots[i];
            if (!c) continue;
            live++;
            if (c->g && c->g->r) kiln_cancel(c->g->r);
        }
        pthread_mutex_unlock(&s->wk_mu);
        if (!live) break;
        waker_wake_all(s);
        usleep(10000);
    }
    waker_wake_all(s);
    MHD_stop_daemon(s->d);
    s->d = NULL;
}
