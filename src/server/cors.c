/* cors.c — Cross-Origin Resource Sharing, so that a web page (a chat UI, a notebook, an
 * IDE running in a browser) can call kiln serve directly.
 *
 * A browser sends `Origin` with every cross-origin request and, before any request that
 * is not "simple" (JSON bodies, Authorization or x-api-key headers: every API call here),
 * a preflight: OPTIONS with Access-Control-Request-Method/-Headers. The page may read a
 * response only if it carries Access-Control-Allow-Origin naming its origin (or *).
 *
 * Which origins: by default, pages served from this machine's loopback names
 * (http(s)://localhost, 127.0.0.1, [::1], any port). Not "*": kiln serve listens on
 * 127.0.0.1 without a key by default, and with "*" any web site a user visits could drive
 * their model and read the answers. `--cors-origin '*'` allows every origin (sensible with
 * --api-key, or on a trusted network), `--cors-origin none` sends no CORS headers, and a
 * comma-separated list allows exactly those origins.
 *
 * What is sent:
 *   every response (errors, SSE streams and /health included) to an allowed origin:
 *     Access-Control-Allow-Origin (the origin itself, or * when all are allowed),
 *     Access-Control-Expose-Headers: Retry-After (so a page can honour a 429);
 *     Vary: Origin whenever the answer depends on the origin (caches must key on it);
 *   a preflight from an allowed origin: 204 with Allow-Methods (the route's method and
 *     OPTIONS), Allow-Headers (the headers asked for, if they are plain header names —
 *     the SDKs send their own x-stainless-* and anthropic-* headers, so a fixed list
 *     would break them), Max-Age 86400 (browsers cap it: Chrome at 2 h), and
 *     Allow-Private-Network when asked (Chrome's check before a public page may call a
 *     loopback address);
 *   a preflight from any other origin: 403 naming the flag. A plain request from such an
 *     origin is served without CORS headers (the browser then hides the answer); non-
 *     browser clients send no Origin and never see any of this.
 * No credentials mode: the API key travels in a header the page sets itself, not in a
 * cookie, so Access-Control-Allow-Credentials is never needed. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/srv.h"

static char *trimdup(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && (isspace((unsigned char)s[n - 1]) || s[n - 1] == '/')) n--;
    return strndup(s, n);
}

/* scheme://host[:port] with nothing after it, or "null" (what sandboxed and file:// pages
 * send; allowing it must be asked for by name). */
static int origin_valid(const char *o) {
    if (!strcmp(o, "null")) return 1;
    const char *h = strstr(o, "://");
    if (!h || h == o || !h[3]) return 0;
    for (const char *p = o; p < h; p++)
        if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.') return 0;
    for (const char *p = h + 3; *p; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == ',' || isspace((unsigned char)*p)) return 0;
    return 1;
}

int cors_init(server_t *s, const char *spec, err_t *e) {
    if (!spec) { s->cors_mode = CORS_LOOPBACK; return 0; }
    if (!strcmp(spec, "none") || !*spec) { s->cors_mode = CORS_OFF; return 0; }
    if (!strcmp(spec, "*")) { s->cors_mode = CORS_ANY; return 0; }
    s->cors_mode = CORS_LIST;
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char *o = trimdup(p, n);
        char **nl = o ? realloc(s->cors_list, sizeof(char *) * (s->n_cors + 1)) : NULL;
        if (!nl) { free(o); return err_set(e, "out of memory"); }
        s->cors_list = nl;
        s->cors_list[s->n_cors++] = o;
        if (!origin_valid(o))
            return err_set(e, "--cors-origin: '%s' is not an origin (scheme://host[:port], e.g. https://app.example.com), '*' or 'none'", o);
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

void cors_free(server_t *s) {
    for (int i = 0; i < s->n_cors; i++) free(s->cors_list[i]);
    free(s->cors_list);
    s->cors_list = NULL;
    s->n_cors = 0;
}

/* http(s)://localhost, 127.0.0.1 or [::1], with or without a port. */
static int origin_loopback(const char *o) {
    const char *h = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; h && i < sizeof hosts / sizeof hosts[0]; i++) {
        size_t l = strlen(hosts[i]);
        if (strncmp(h, hosts[i], l)) continue;
        const char *p = h + l;
        if (!*p) return 1;
        if (*p++ != ':' || !*p) return 0;
        while (isdigit((unsigned char)*p)) p++;
        return !*p;
    }
    return 0;
}

void cors_for_request(conn_t *c, const char *origin) {
    server_t *s = c->s;
    c->cors[0] = 0;
    if (!origin || s->cors_mode == CORS_OFF || strlen(origin) >= sizeof c->cors) return;
    int ok = s->cors_mode == CORS_ANY || (s->cors_mode == CORS_LOOPBACK && origin_loopback(origin));
    for (int i = 0; !ok && i < s->n_cors; i++) ok = !strcmp(origin, s->cors_list[i]);
    if (ok) snprintf(c->cors, sizeof c->cors, "%s", s->cors_mode == CORS_ANY ? "*" : origin);
}

void cors_headers(conn_t *c, struct MHD_Response *r) {
    if (c->s->cors_mode == CORS_LOOPBACK || c->s->cors_mode == CORS_LIST) MHD_add_response_header(r, "Vary", "Origin");
    if (!c->cors[0]) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
}

/* A header list a browser sent ("content-type, authorization, x-stainless-os"), safe to
 * echo back: header-name characters, commas and spaces only. */
static int header_list_ok(const char *h) {
    if (!h || !*h || strlen(h) > 1024) return 0;
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_,. ", *p)) return 0;
    return 1;
}

int cors_options(conn_t *c, const char *methods) {
    const char *origin = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Origin");
    const char *want = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Access-Control-Request-Method");
    if (origin && want && !c->cors[0]) {
        api_err_t ae = {0};
        api_fail(&ae, 403, NULL, "cross-origin requests from %s are not allowed; start kiln serve with --cors-origin '%s' (or '*')",
                 origin, origin);
        return reply_error(c, &ae);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return -1;
    MHD_add_response_header(r, "Allow", methods);
    if (origin && want) {
        const char *hdrs = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                header_list_ok(hdrs) ? hdrs : "authorization, content-type, x-api-key, anthropic-version");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
        const char *pna = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Access-Control-Request-Private-Network");
        if (pna && !strcasecmp(pna, "true")) MHD_add_response_header(r, "Access-Control-Allow-Private-Network", "true");
    }
    return reply_queue(c, 204, r);
}

const char *cors_describe(const server_t *s) {
    switch (s->cors_mode) {
    case CORS_OFF: return "off";
    case CORS_ANY: return "any origin";
    case CORS_LOOPBACK: return "localhost origins";
    default: return "listed origins";
    }
}
