/* tok_post.c — post-processors: what add_special does to an encoded sequence.
 *
 * TemplateProcessing's "single" template (e.g. [<bos>, $A]) is flattened at load into a list
 * of items: runs of special ids, and the sequence itself. Bert/Roberta processing are the
 * fixed template [CLS] $A [SEP]. ByteLevel only trims offsets in HF, which kiln does not
 * return, so it adds nothing. Pair templates are not used by kiln (one sequence per prompt)
 * and are ignored.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_item(postproc_t *p, int is_seq, const int32_t *ids, int n) {
    tk_post_item_t *v = realloc(p->single, sizeof *v * (p->n_single + 1));
    if (!v) return -1;
    p->single = v;
    tk_post_item_t *it = &v[p->n_single++];
    memset(it, 0, sizeof *it);
    it->is_seq = is_seq;
    if (n) {
        if (!(it->ids = malloc(sizeof *ids * n))) return -1;
        memcpy(it->ids, ids, sizeof *ids * n);
        it->n_ids = n;
    }
    return 0;
}

/* ["[CLS]", 101] */
static int token_pair(json_t *x, const char *path, const char *k, int32_t *id, err_t *e) {
    json_t *v = json_object_get(x, k);
    json_t *i = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(i) || json_integer_value(i) < 0 ||
        json_integer_value(i) >= (1 << 24))
        return err_set(e, "%s.%s: expected [token, id]", path, k);
    *id = (int32_t)json_integer_value(i);
    return 0;
}

int tk_post_load(postproc_t **out, json_t *j, const strmap_t *vocab, const tk_added_vocab_t *av,
              const char *path, err_t *e) {
    (void)vocab;
    (void)av;
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    const char *type = tk_js_str(j, "type");
    if (!json_is_object(j) || !type) return err_set(e, "%s: expected an object with a \"type\"", path);
    postproc_t *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "out of memory");
    *out = p;
    if (!strcmp(type, "ByteLevel")) { p->type = POST_BYTELEVEL; return 0; }
    if (!strcmp(type, "Sequence")) {
        p->type = POST_SEQUENCE;
        json_t *arr = json_object_get(j, "processors");
        if (!json_is_array(arr)) return err_set(e, "%s.processors: expected an array", path);
        p->n_kids = (int)json_array_size(arr);
        p->kids = calloc(p->n_kids ? p->n_kids : 1, sizeof *p->kids);
        if (!p->kids) return err_set(e, "out of memory");
        for (int i = 0; i < p->n_kids; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.processors[%d]", path, i);
            if (tk_post_load(&p->kids[i], json_array_get(arr, i), vocab, av, sub, e)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        p->type = !strcmp(type, "BertProcessing") ? POST_BERT : POST_ROBERTA;
        int32_t cls, sep;
        if (token_pair(j, path, "cls", &cls, e) || token_pair(j, path, "sep", &sep, e)) return -1;
        if (add_item(p, 0, &cls, 1) || add_item(p, 1, NULL, 0) || add_item(p, 0, &sep, 1))
            return err_set(e, "out of memory");
        return 0;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        p->type = POST_TEMPLATE;
        json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
        if (!json_is_array(single)) return err_set(e, "%s.single: expected an array", path);
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i), *x;
            if ((x = json_object_get(it, "Sequence"))) {
                const char *id = tk_js_str(x, "id");
                if (add_item(p, 1, NULL, 0)) return err_set(e, "out of memory");
                p->single[p->n_single - 1].seq = id && !strcmp(id, "B");
            } else if ((x = json_object_get(it, "SpecialToken"))) {
                const char *id = tk_js_str(x, "id");
                json_t *st = id ? json_object_get(sp, id) : NULL;
                json_t *ids = json_object_get(st, "ids");
                if (!id) return err_set(e, "%s.single[%zu].SpecialToken.id: expected a string", path, i);
                if (!json_is_array(ids))
                    return err_set(e, "%s.special_tokens: no entry for \"%s\" used in single[%zu]", path, id, i);
                int n = (int)json_array_size(ids);
                int32_t *v = malloc(sizeof *v * (n ? n : 1));
                if (!v) return err_set(e, "out of memory");
                for (int k = 0; k < n; k++) {
                    json_t *q = json_array_get(ids, k);
                    if (!json_is_integer(q) || json_integer_value(q) < 0 || json_integer_value(q) >= (1 << 24)) {
                        free(v);
                        return err_set(e, "%s.special_tokens[\"%s\"].ids[%d]: expected a token id", path, id, k);
                    }
                    v[k] = (int32_t)json_integer_value(q);
                }
                int rc = add_item(p, 0, v, n);
                free(v);
                if (rc) return err_set(e, "out of memory");
            } else {
                return err_set(e, "%s.single[%zu]: expected {\"Sequence\": ...} or {\"SpecialToken\": ...}", path, i);
            }
        }
        return 0;
    }
    return err_set(e, "%s: unsupported post-processor type \"%s\"", path, type);
}

void tk_post_free(postproc_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n_single; i++) free(p->single[i].ids);
    free(p->single);
    for (int i = 0; i < p->n_kids; i++) tk_post_free(p->kids[i]);
    free(p->kids);
    free(p);
}

int tk_post_apply(const postproc_t *p, ivec_t *ids, err_t *e) {
    if (p->type == POST_BYTELEVEL) return 0;
    if (p->type == POST_SEQUENCE) {
        for (int i = 0; i < p->n_kids; i++)
            if (tk_post_apply(p->kids[i], ids, e)) return -1;
        return 0;
    }
    ivec_t o = {0};
    for (int i = 0; i < p->n_single; i++) {
        const tk_post_item_t *it = &p->single[i];
        if (it->is_seq ? (it->seq == 0 && tk_iv_append(&o, ids->v, ids->n)) : tk_iv_append(&o, it->ids, it->n_ids)) {
            free(o.v);
            return err_set(e, "out of memory");
        }
    }
    free(ids->v);
    *ids = o;
    return 0;
}
