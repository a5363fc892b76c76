/* toolcall.h — streaming parsers for the tool-call formats models are trained to emit.
 *
 * A model announces a tool call in its own native markup, in the middle of ordinary text,
 * one token at a time. The parser sits between the detokenized text stream and the API
 * formatter: it passes ordinary text through (holding back only what might be the start
 * of a tool-call marker) and turns each call into begin(name) → args(fragment)* → end
 * events, where the concatenation of the fragments is the call's arguments as a JSON
 * object text. The formats:
 *
 *   TC_HERMES     Hermes / Qwen2.5 / Qwen3:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>
 *                 arguments are streamed character by character as the model writes them.
 *   TC_QWEN_XML   Qwen3.5 / Qwen3-Coder:  <tool_call><function=NAME><parameter=K>V</parameter>...
 *                 </function></tool_call>; string parameters stream, others (by the tool's
 *                 JSON schema) are converted when complete.
 *   TC_LLAMA_JSON Llama 3.x: the whole reply is {"name": ..., "parameters": {...}} (optionally
 *                 after <|python_tag|>, several separated by ';'); each call is emitted when
 *                 its object is complete, and a reply that is not such JSON is plain text.
 *   TC_GEMMA4     Gemma 4:  <|tool_call>call:NAME{key:<|"|>str<|"|>,n:1}<tool_call|>; emitted
 *                 when the closing token arrives (the syntax is not JSON, so it is converted
 *                 whole).
 *
 * Markup that turns out not to be a well-formed call is given back as text, never dropped.
 * Whitespace between calls (and around them) is not reported as content. */
#ifndef KILN_TOOLCALL_H
#define KILN_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

typedef enum tc_format { TC_NONE, TC_HERMES, TC_QWEN_XML, TC_LLAMA_JSON, TC_GEMMA4 } tc_format_t;

typedef struct tc_sink {
    void *u;
    void (*text)(void *u, const char *s, size_t n);
    void (*call_begin)(void *u, int index, const char *name);
    void (*call_args)(void *u, int index, const char *s, size_t n);
    void (*call_end)(void *u, int index);
} tc_sink_t;

typedef struct tc_parser tc_parser_t;

/* tools: the request's tools in OpenAI shape ([{type, function:{name, parameters}}]), used
 * for parameter types of TC_QWEN_XML; may be NULL. Takes a reference. */
tc_parser_t *tc_parser_new(tc_format_t fmt, json_t *tools);
void tc_parser_free(tc_parser_t *p);
/* Feeds n bytes of model output; events go to k. */
void tc_push(tc_parser_t *p, const char *s, size_t n, const tc_sink_t *k);
/* End of output: flushes what was held back; an unfinished call is closed (its arguments
 * may then be incomplete JSON) or, if its name never arrived, given back as text. */
void tc_finish(tc_parser_t *p, const tc_sink_t *k);
int tc_calls(const tc_parser_t *p);

const char *tc_format_name(tc_format_t f);
/* "hermes", "qwen-xml", "llama-json", "gemma4", "none" -> format; -1 if unknown. */
int tc_format_parse(const char *s);

/* The tool-call format a model uses, guessed from its chat template source and vocabulary
 * markers (token_exists(name) says whether the tokenizer has that added token). */
tc_format_t tc_detect(const char *template_src, int (*token_exists)(void *u, const char *tok), void *u);

#endif
