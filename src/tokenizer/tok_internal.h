/* tok_internal.h — the pieces of the tokenizer, shared between its files (not a public API).
 *
 * Layout of the pipeline, one struct per stage, each loaded from its tokenizer.json block:
 *   added tokens (tok_added.c) → normalizer (tok_normalizer.c) → pre-tokenizer
 *   (tok_pretokenizer.c) → model (tok_bpe.c, tok_models.c) → post-processor (tok_post.c);
 *   decoding: decoder chain (tok_decoder.c); streaming (detok.c).
 * Text between stages lives in a `plist_t`: one byte buffer plus (offset, length) pieces.
 * Support code (byte buffers, UTF-8, hash maps, Unicode classes) is in tok_util.c and the
 * Oniguruma→PCRE2 regex glue in tok_regex.c.
 */
#ifndef KILN_TOK_INTERNAL_H
#define KILN_TOK_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#include "base/sbuf.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- growable buffers ---------------------------------------------------------------- */
/* base/sbuf.h's buffer, under the short names the tokenizer code uses */
static inline int tk_sb_reserve(sbuf_t *b, size_t extra) { return sbuf_reserve(b, extra); }
static inline int tk_sb_put(sbuf_t *b, const void *s, size_t n) { return sbuf_add(b, s, n); }
static inline int tk_sb_putc(sbuf_t *b, char c) { return sbuf_add(b, &c, 1); }
int tk_sb_put_cp(sbuf_t *b, uint32_t cp);      /* UTF-8 encode one code point */
static inline char *tk_sb_finish(sbuf_t *b) { return sbuf_take(b); } /* "" if empty; resets b */

typedef struct ivec {
    int32_t *v;
    int n, cap;
} ivec_t;
int tk_iv_push(ivec_t *a, int32_t x);
int tk_iv_append(ivec_t *a, const int32_t *x, int n);

/* ---- UTF-8 ---------------------------------------------------------------------------- */
/* Offset of the first byte that is not well-formed UTF-8, or (size_t)-1 when all is valid. */
size_t tk_utf8_invalid_at(const char *s, size_t n);
/* Decodes one code point of a valid string; returns its length in bytes (1..4). */
int tk_utf8_next(const char *s, size_t n, uint32_t *cp);
static inline int tk_utf8_len_lead(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD. */
int tk_utf8_lossy(sbuf_t *out, const char *s, size_t n);

/* ---- Unicode classes (Rust char methods, via utf8proc) ------------------------------- */
int tk_uc_is_whitespace(uint32_t cp);   /* char::is_whitespace (White_Space) */
int tk_uc_is_numeric(uint32_t cp);      /* char::is_numeric (Nd, Nl, No) */
int tk_uc_is_punct(uint32_t cp);        /* is_ascii_punctuation || Unicode P* */
int tk_uc_is_alnum(uint32_t cp);        /* char::is_alphanumeric (approx: L*, N*) */
int tk_uc_is_word(uint32_t cp);         /* regex \w (L*, M*, Nd, Pc, ZWJ/ZWNJ) */
int tk_uc_is_control(uint32_t cp);      /* Cc, Cf (BERT's notion) */
int tk_uc_is_mark(uint32_t cp);         /* Mn, Mc, Me */
int tk_uc_is_cjk(uint32_t cp);          /* BERT's CJK ideograph ranges */

/* ---- hash maps ------------------------------------------------------------------------- */
uint64_t tk_tok_hash(const void *s, size_t n);

/* String → int32. Keys are not copied: they must outlive the map (they point into the
 * tokenizer's string arena). */
typedef struct strmap {
    const char **keys;
    uint32_t *klen;
    int32_t *vals;
    uint32_t *hash32;
    size_t cap, n; /* cap is a power of two, load ≤ 1/2 */
} strmap_t;
int tk_sm_init(strmap_t *m, size_t expect);
void tk_sm_free(strmap_t *m);
/* Inserts or overwrites. */
int tk_sm_put(strmap_t *m, const char *k, size_t n, int32_t v);
/* Returns the value or -1. */
int32_t tk_sm_get(const strmap_t *m, const char *k, size_t n);

/* uint64 → uint64 (key UINT64_MAX is reserved). Used for BPE merges (pair → rank,new id)
 * and for the added-token trie edges. */
typedef struct u64map {
    uint64_t *keys, *vals;
    size_t cap, n;
} u64map_t;
int tk_um_init(u64map_t *m, size_t expect);
void tk_um_free(u64map_t *m);
int tk_um_put(u64map_t *m, uint64_t k, uint64_t v);
int tk_um_get(const u64map_t *m, uint64_t k, uint64_t *v); /* 1 found, 0 not */

/* Arena of NUL-terminated strings that live as long as the tokenizer. */
typedef struct arena {
    struct arena_blk *head;
} arena_t;
char *tk_arena_strndup(arena_t *a, const char *s, size_t n);
void tk_arena_free(arena_t *a);

/* ---- regex (Oniguruma semantics on PCRE2) --------------------------------------------- */
typedef struct tok_regex {
    pcre2_code *code;
    char *source; /* the pattern as written in tokenizer.json */
} tok_regex_t;
/* Compiles an Oniguruma-syntax pattern (as HF uses) with PCRE2 in UTF+UCP mode, rewriting the
 * classes whose meaning differs (\s, \S, \w, \h...). */
int tk_rx_compile(tok_regex_t *r, const char *pattern, err_t *e);
/* Compiles a literal string as a pattern. */
int tk_rx_compile_literal(tok_regex_t *r, const char *lit, size_t n, err_t *e);
void tk_rx_free(tok_regex_t *r);

/* A match span within a piece of text. */
typedef struct span {
    size_t s, e;
    int m; /* 1 = match, 0 = text between matches */
} span_t;
typedef struct spans {
    span_t *v;
    int n, cap;
} spans_t;
int tk_spans_push(spans_t *a, size_t s, size_t e, int m);
/* HF Pattern::find_matches with a regex: all spans covering [0, n), matches marked. Empty
 * matches follow Rust/onig iteration (one not allowed right after the previous match). */
int tk_rx_find_spans(const tok_regex_t *r, const char *s, size_t n, spans_t *out, pcre2_match_data *md,
                  err_t *e);

/* ---- pieces --------------------------------------------------------------------------- */
typedef struct piece {
    size_t off, len;
    int first; /* starts at offset 0 of the original text (Metaspace prepend_scheme "first") */
} piece_t;
typedef struct plist {
    sbuf_t text;
    piece_t *p;
    int n, cap;
} plist_t;
int tk_pl_add(plist_t *l, const char *s, size_t n, int first);
void tk_pl_clear(plist_t *l);
void tk_pl_free(plist_t *l);

/* Scratch per encode call (so that a const tokenizer can be shared across threads). */
typedef struct enc_ctx {
    pcre2_match_data *md;
    spans_t spans;
    sbuf_t tmp, tmp2;
} enc_ctx_t;

/* ---- normalizers ---------------------------------------------------------------------- */
enum {
    NORM_SEQUENCE, NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWERCASE, NORM_REPLACE,
    NORM_PREPEND, NORM_STRIP, NORM_STRIP_ACCENTS, NORM_BERT, NORM_BYTELEVEL,
};
typedef struct normalizer {
    int type;
    struct normalizer **kids;
    int n_kids;
    tok_regex_t re;     /* Replace with a Regex pattern */
    char *lit;          /* Replace with a String pattern */
    size_t lit_len;
    char *content;      /* Replace content, Prepend prepend */
    int left, right;    /* Strip */
    int clean_text, chinese, strip_accents, lowercase; /* Bert */
} normalizer_t;
int tk_norm_load(normalizer_t **out, json_t *j, const char *path, err_t *e);
void tk_norm_free(normalizer_t *n);
/* Normalizes in → out (out is reset first). */
int tk_norm_apply(const normalizer_t *n, const char *in, size_t len, sbuf_t *out, enc_ctx_t *cx, err_t *e);

/* ---- pre-tokenizers ------------------------------------------------------------------- */
enum {
    PRE_SEQUENCE, PRE_BYTELEVEL, PRE_SPLIT, PRE_METASPACE, PRE_DIGITS, PRE_PUNCT, PRE_WHITESPACE,
    PRE_WS_SPLIT, PRE_BERT, PRE_CHAR_DELIM,
};
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
typedef struct pretok {
    int type;
    struct pretok **kids;
    int n_kids;
    tok_regex_t re;      /* Split (regex or escaped literal), ByteLevel regex, Whitespace */
    int has_re;
    char *lit;           /* Split with a String pattern (memmem is faster than a regex) */
    size_t lit_len;
    int behavior, invert;
    int add_prefix_space, use_regex;     /* ByteLevel */
    uint32_t repl;                       /* Metaspace replacement, CharDelimiterSplit char */
    char repl_utf8[5];
    int prepend;                         /* Metaspace: 0 never, 1 always, 2 first */
    int split;                           /* Metaspace split */
    int individual_digits;               /* Digits */
} tk_pretok_t;
int tk_pretok_load(tk_pretok_t **out, json_t *j, const char *path, err_t *e);
void tk_pretok_free(tk_pretok_t *p);
/* Runs the pre-tokenizer over *l; the result replaces *l (uses *scratch). */
int tk_pretok_apply(const tk_pretok_t *p, plist_t *l, plist_t *scratch, enc_ctx_t *cx, err_t *e);
/* The byte↔unicode tables of HF's ByteLevel. */
extern const uint16_t tk_bytelevel_b2u[256];
int tk_bytelevel_u2b(uint32_t cp); /* -1 if cp is not in the table */

/* ---- models --------------------------------------------------------------------------- */
enum { MODEL_BPE, MODEL_UNIGRAM, MODEL_WORDPIECE, MODEL_WORDLEVEL };

struct word_cache;

typedef struct model {
    int type;
    strmap_t vocab;          /* token → id */
    const char **id_tok;     /* id → token, size n_id (NULL for holes) */
    int32_t n_id;
    /* BPE */
    u64map_t merges;         /* (left id << 32 | right id) → (rank << 32 | new id) */
    char *unk;               /* unk_token or NULL */
    int32_t unk_id;          /* -1 none */
    char *prefix, *suffix;   /* continuing_subword_prefix, end_of_word_suffix (NULL = none) */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_id[256];    /* "<0xAB>" tokens, -1 if absent */
    int32_t *cp_id;          /* id of each single code point < 0x10000 as a token, or -1;
                                NULL when prefix/suffix make that lookup impossible */
    struct word_cache *cache;
    /* Unigram */
    double *score;           /* by id */
    double min_score;
    int max_piece;           /* longest piece in bytes */
    /* WordPiece */
    int max_chars;
} model_t;
int tk_model_load(model_t *m, json_t *j, arena_t *a, const char *path, err_t *e);
void tk_model_free(model_t *m);
/* Tokenizes one pre-token, appending ids. */
int tk_model_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e);
int tk_bpe_load(model_t *m, json_t *j, arena_t *a, const char *path, err_t *e);
int tk_bpe_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e);
int tk_unigram_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e);
int tk_wordpiece_tokenize(const model_t *m, const char *s, size_t n, ivec_t *out, err_t *e);

/* Word cache: pre-token → ids, sharded, each shard behind its own mutex. */
struct word_cache *tk_wc_new(void);
void tk_wc_free(struct word_cache *c);
/* Appends the cached ids to out and returns 1 on a hit, 0 on a miss. */
int tk_wc_get(struct word_cache *c, const char *s, size_t n, ivec_t *out);
void tk_wc_put(struct word_cache *c, const char *s, size_t n, const int32_t *ids, int n_ids);

/* ---- added tokens --------------------------------------------------------------------- */
typedef struct tk_added_tok {
    int32_t id;
    const char *content;
    size_t len;
    int special, normalized, lstrip, rstrip, single_word;
} tk_added_tok_t;
typedef struct tk_added_set {   /* one leftmost-longest matcher (a byte trie) */
    u64map_t edges;          /* (node << 8 | byte) → child node */
    int32_t *term;           /* node → index into added[] or -1 */
    int n_nodes, cap_nodes;
    uint8_t first[256];      /* bytes that start some token */
    int empty;
} tk_added_set_t;
typedef struct tk_added_vocab {
    tk_added_tok_t *tok;
    int n;
    strmap_t by_content;     /* content → index into tok[] */
    tk_added_set_t raw, norm;   /* tokens matched before / after normalization */
} tk_added_vocab_t;
int tk_added_load(tk_added_vocab_t *av, json_t *j, arena_t *a, const char *path, err_t *e);
int tk_added_build_sets(tk_added_vocab_t *av, const normalizer_t *norm, enc_ctx_t *cx, arena_t *a, err_t *e);
void tk_added_free(tk_added_vocab_t *av);
/* A segment of text: either an added token (idx >= 0) or plain text (idx == -1). */
typedef struct seg {
    size_t s, e;
    int idx;
} seg_t;
typedef struct segs {
    seg_t *v;
    int n, cap;
} segs_t;
/* HF AddedVocabulary::find_matches over s[0..n) with one matcher. */
int tk_added_split(const tk_added_vocab_t *av, const tk_added_set_t *set, const char *s, size_t n, segs_t *out);

/* ---- post-processors ------------------------------------------------------------------ */
enum { POST_NONE, POST_TEMPLATE, POST_BYTELEVEL, POST_BERT, POST_ROBERTA, POST_SEQUENCE };
typedef struct tk_post_item {
    int is_seq;       /* 1: the sequence (A or B) */
    int seq;          /* 0 = A, 1 = B */
    int32_t *ids;     /* special token ids */
    int n_ids;
} tk_post_item_t;
typedef struct postproc {
    int type;
    tk_post_item_t *single;
    int n_single;
    struct postproc **kids;
    int n_kids;
} postproc_t;
int tk_post_load(postproc_t **out, json_t *j, const strmap_t *vocab, const tk_added_vocab_t *av,
              const char *path, err_t *e);
void tk_post_free(postproc_t *p);
int tk_post_apply(const postproc_t *p, ivec_t *ids, err_t *e);

/* ---- decoders ------------------------------------------------------------------------- */
enum {
    DEC_SEQUENCE, DEC_BYTELEVEL, DEC_METASPACE, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP,
    DEC_WORDPIECE, DEC_BPE, DEC_CTC,
};
typedef struct decoder {
    int type;
    struct decoder **kids;
    int n_kids;
    uint32_t repl;        /* Metaspace replacement, Strip content */
    int prepend;          /* Metaspace: 0 never, 1 always, 2 first */
    char *lit;            /* Replace String pattern */
    size_t lit_len;
    tok_regex_t re;       /* Replace Regex pattern */
    int has_re;
    char *content;        /* Replace content */
    int start, stop;      /* Strip */
    char *prefix;         /* WordPiece prefix, BPE suffix */
    int cleanup;          /* WordPiece/CTC cleanup */
    char *pad;            /* CTC pad token */
    char *delim;          /* CTC word delimiter */
} decoder_t;
/* A list of token strings flowing through decode_chain. */
typedef struct strlist {
    char **s;
    size_t *len;
    int n, cap;
} strlist_t;
int tk_sl_push(strlist_t *l, const char *s, size_t n);
void tk_sl_free(strlist_t *l);
int tk_dec_load(decoder_t **out, json_t *j, const char *path, err_t *e);
void tk_dec_free(decoder_t *d);
/* Runs decode_chain; the result replaces *l. */
int tk_dec_chain(const decoder_t *d, strlist_t *l, err_t *e);

/* ---- JSON helpers (loaders) ---------------------------------------------------------- */
static inline const char *tk_js_str(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}
static inline int tk_js_bool(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}
/* A {"String": s} or {"Regex": s} pattern object: *is_regex, *s, *n. */
int tk_js_pattern(json_t *o, const char *path, int *is_regex, const char **s, size_t *n, err_t *e);
/* A single-character string field (Metaspace replacement, Strip content). */
int tk_js_char(json_t *o, const char *k, const char *path, uint32_t dflt, uint32_t *cp, err_t *e);

/* ---- the tokenizer -------------------------------------------------------------------- */
struct tokenizer {
    char *name;
    arena_t arena;
    model_t model;
    tk_added_vocab_t added;
    int32_t *tk_added_of_id;    /* id → index into added.tok, or -1; size vocab_size */
    normalizer_t *norm;
    tk_pretok_t *pre;
    postproc_t *post;
    decoder_t *dec;
    int vocab_size;
};

#endif
