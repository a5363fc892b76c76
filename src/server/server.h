/* server.h — `kiln serve`: the OpenAI and Anthropic HTTP APIs over a running engine.
 *
 * The server is a user of kiln.h like any other: it owns an HTTP daemon (libmicrohttpd,
 * a small thread pool on epoll) and turns each API request into a prompt, a submit and a
 * stream of events. cmd_serve.c starts the engine, then the server, and stops both on
 * SIGINT/SIGTERM. See docs/api.md for the routes and their parameters. */
#ifndef KILN_SERVER_H
#define KILN_SERVER_H

#include <stddef.h>
#include "base/err.h"
#include "kiln.h"

typedef struct server_opts {
    const char *host;           /* "127.0.0.1"                                          */
    int port;                   /* 8080; 0 picks a free port (see server_port)          */
    const char *api_key;        /* NULL or "": no authentication                        */
    size_t max_body;            /* bytes (32 MiB)                                       */
    int default_max_tokens;     /* when a request gives none; 0: the rest of the context */
    int http_threads;           /* MHD worker threads (2)                               */
    const char *model_id;       /* name in /v1/models; default: the model dir's basename */
    const char *tool_format;    /* force a tool-call format ("hermes", ...); NULL: detect */
    const char *cors_origin;    /* browser origins allowed (CORS): NULL = pages served from
                                   localhost/127.0.0.1/[::1] on any port; "*" = any;
                                   "none" = no CORS headers; else a comma-separated list of
                                   origins ("https://app.example.com,http://10.0.0.5:3000") */
} server_opts_t;

typedef struct server server_t;

void server_opts_default(server_opts_t *o);
/* Loads the chat template, binds and starts serving. The engine must outlive the server. */
server_t *server_start(kiln_engine_t *eng, const server_opts_t *o, err_t *e);
int server_port(const server_t *s);
/* Stops accepting, cancels what is in flight, ends every stream and joins the threads. */
void server_stop(server_t *s);

#endif
