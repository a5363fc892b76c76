/* tokenizer.h — Hugging Face tokenizer.json tokenizers, byte-exact with HF `tokenizers`.
 *
 * A tokenizer is loaded once and is then read-only: encode/decode may be called from many
 * threads at once (the word cache inside takes a short per-shard lock). The pipeline is HF's:
 * added tokens are split off the raw text first, the rest is normalized, pre-tokenized, run
 * through the model (BPE, Unigram, WordPiece, WordLevel), and optionally post-processed
 * (BOS/EOS templates). Decoding runs the tokenizer's decoder chain. See docs/tokenizer.md.
 */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

typedef struct tokenizer tokenizer_t;

/* path: a model directory containing tokenizer.json, or the tokenizer.json file itself. */
tokenizer_t *tokenizer_load(const char *path, err_t *e);
/* Same, from a JSON document in memory (len bytes; need not be NUL-terminated). name is
 * used in error messages. */
tokenizer_t *tokenizer_load_json(const char *json, size_t len, const char *name, err_t *e);
void tokenizer_free(tokenizer_t *t);
int tokenizer_vocab_size(const tokenizer_t *t); /* highest id + 1, added tokens included */

/* Encodes len bytes of text (need not be NUL-terminated). Added/special tokens that appear in
 * the text are always matched (as HF does). add_special: apply the post-processor (e.g. BOS).
 * Invalid UTF-8 in text: returns -1 with an error naming the byte offset. *ids is malloc'd
 * (possibly NULL when *n_ids is 0). */
int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, int add_special,
                     int32_t **ids, int *n_ids, err_t *e);
/* Decodes ids to a malloc'd NUL-terminated string; skip_special drops special added tokens.
 * Out-of-range ids: NULL with e set. */
char *tokenizer_decode(const tokenizer_t *t, const int32_t *ids, int n, int skip_special, err_t *e);
/* The stages before the model, for tests and debugging: the normalized text (NULL on error),
 * and the pre-tokens the model would see (added tokens appear as their content). Free the
 * pieces with tokenizer_free_pieces. */
char *tokenizer_normalize(const tokenizer_t *t, const char *text, size_t len, err_t *e);
int tokenizer_pretokenize(const tokenizer_t *t, const char *text, size_t len, char ***pieces, int *n, err_t *e);
void tokenizer_free_pieces(char **pieces, int n);
/* Same, also giving the length (decoded text may contain NUL bytes). */
char *tokenizer_decode_len(const tokenizer_t *t, const int32_t *ids, int n, int skip_special, size_t *len, err_t *e);
const char *tokenizer_id_to_token(const tokenizer_t *t, int32_t id);   /* NULL if out of range */
int32_t tokenizer_token_to_id(const tokenizer_t *t, const char *token); /* -1 if none */
int tokenizer_is_special(const tokenizer_t *t, int32_t id);

/* Streaming detokenizer: the concatenation of everything detok_push and detok_flush return
 * equals tokenizer_decode(all ids pushed). Text is held back while it ends in an incomplete
 * UTF-8 sequence (decodes to a trailing U+FFFD). Not thread-safe per object. */
typedef struct detok detok_t;
detok_t *detok_new(const tokenizer_t *t, int skip_special);
/* Feeds one id; *out gets the bytes that are now final (malloc'd, NUL-terminated, caller frees;
 * may be ""). Returns 0, or -1 with e set (bad id; *out is then NULL). */
int detok_push(detok_t *d, int32_t id, char **out, err_t *e);
/* Whatever is held back (an incomplete tail decodes to U+FFFD as HF does); malloc'd, may be "".
 * The detokenizer is empty afterwards and can be reused. */
char *detok_flush(detok_t *d);
void detok_free(detok_t *d);

#endif
