/* reasoning.h — splitting a reply into reasoning and content.
 *
 * Reasoning models think inside a marked block before they answer: Qwen3, DeepSeek-R1 and
 * most others between <think> and </think>; Gemma 4 in its thought channel,
 * <|channel>thought\n … <channel|> (the two channel markers are special tokens, which the
 * server puts back into the text for the splitter, see gen.c). Some templates
 * write <think> into the prompt themselves (Qwen3 thinking models, DeepSeek-R1), so the
 * reply starts inside the block; others let the model open it. The splitter is a streaming
 * state machine: it holds back only a possible partial marker and the whitespace right
 * after </think> (which belongs to neither side), and reports each piece as reasoning or
 * content. A reply that never opens a block is all content; one that never closes it is
 * all reasoning (a model cut off by max_tokens while thinking). */
#ifndef KILN_REASONING_H
#define KILN_REASONING_H

#include <stddef.h>
#include "base/sbuf.h"

typedef struct rs_sink {
    void *u;
    void (*reasoning)(void *u, const char *s, size_t n);
    void (*content)(void *u, const char *s, size_t n);
} rs_sink_t;

/* A family's reasoning markup. */
typedef struct rs_markers {
    const char *name;
    const char *open, *close;   /* e.g. "<think>" / "</think>"                            */
    int eat_ws;                 /* whitespace right after `open` is part of the marker (Gemma
                                   writes "<|channel>thought" then a newline token)        */
} rs_markers_t;
extern const rs_markers_t RS_THINK, RS_GEMMA4;

typedef struct reasoning_split {
    const rs_markers_t *m;
    int state;                  /* see reasoning.c */
    sbuf_t hold;
} reasoning_split_t;

/* started_inside: the prompt already opened the block. */
void rs_init(reasoning_split_t *r, const rs_markers_t *m, int started_inside);
void rs_push(reasoning_split_t *r, const char *s, size_t n, const rs_sink_t *k);
void rs_finish(reasoning_split_t *r, const rs_sink_t *k);
void rs_free(reasoning_split_t *r);

/* Whether a rendered prompt leaves the model inside an open reasoning block: it ends
 * (trailing whitespace aside, on both) with the open marker. */
int rs_prompt_opens(const char *prompt, const rs_markers_t *m);

#endif
