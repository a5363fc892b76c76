/* safetensors.c — see safetensors.h. Parsing is defensive: the header is attacker-
 * controlled data, so every number is range-checked before it is used as an offset. */
#include "load/safetensors.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor_t *)a)->name, ((const st_tensor_t *)b)->name);
}

int64_t st_numel(const st_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Parses one file's header and appends its tensors. */
static int parse_file(st_archive_t *ar, int fi, err_t *e) {
    const mapped_file_t *mf = &ar->files[fi];
    const char *path = mf->path;
    json_t *root = NULL;
    if (mf->size < 8) return err_set(e, "%s: truncated safetensors file (%zu bytes, need at least 8)", path, mf->size);
    const uint8_t *p = mf->data;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER) return err_set(e, "%s: header length %llu is absurd (limit %u)", path, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > mf->size - 8) return err_set(e, "%s: header length %llu runs past the end of the file (%zu bytes): truncated?", path, (unsigned long long)hlen, mf->size);
    json_error_t je;
    root = json_loadb((const char *)p + 8, (size_t)hlen, 0, &je);
    if (!root) return err_set(e, "%s: header is not valid JSON (%s at byte %d)", path, je.text, je.position + 8);
    if (!json_is_object(root)) { err_set(e, "%s: header is not a JSON object", path); goto err; }
    const uint8_t *data = p + 8 + hlen;
    size_t data_len = mf->size - 8 - (size_t)hlen;
    size_t n_new = json_object_size(root);
    st_tensor_t *nt = realloc(ar->tensors, sizeof(st_tensor_t) * (ar->n_tensors + n_new));
    if (!nt) { err_set(e, "%s: out of memory", path); goto err; }
    ar->tensors = nt;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        st_tensor_t t = {0};
        t.file = fi;
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_object(val) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2) {
            err_set(e, "%s: tensor '%s': entry needs dtype, shape and data_offsets [begin, end]", path, key);
            goto err;
        }
        if (dtype_from_safetensors(json_string_value(jd), &t.dtype) != 0) {
            err_set(e, "%s: tensor '%s': unknown dtype '%s'", path, key, json_string_value(jd));
            goto err;
        }
        size_t nd = json_array_size(js);
        if (nd > ST_MAX_DIMS) { err_set(e, "%s: tensor '%s': %zu dimensions (max %d)", path, key, nd, ST_MAX_DIMS); goto err; }
        t.ndim = (int)nd;
        uint64_t numel = 1;
        for (size_t i = 0; i < nd; i++) {
            json_t *d = json_array_get(js, i);
            if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > ((int64_t)1 << 40)) {
                err_set(e, "%s: tensor '%s': bad shape dimension %zu", path, key, i);
                goto err;
            }
            t.shape[i] = json_integer_value(d);
            numel *= (uint64_t)t.shape[i];
            if (numel > ((uint64_t)1 << 44)) { err_set(e, "%s: tensor '%s': shape too large", path, key); goto err; }
        }
        json_t *b = json_array_get(jo, 0), *en = json_array_get(jo, 1);
        if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b)) {
            err_set(e, "%s: tensor '%s': bad data_offsets", path, key);
            goto err;
        }
        uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(en);
        if (end > data_len) {
            err_set(e, "%s: tensor '%s': data_offsets [%llu, %llu] run past the data region (%zu bytes): truncated or corrupt file",
                    path, key, (unsigned long long)begin, (unsigned long long)end, data_len);
            goto err;
        }
        if (end - begin != numel * dtype_size(t.dtype)) {
            err_set(e, "%s: tensor '%s': data_offsets span %llu bytes but shape and dtype need %llu", path, key,
                    (unsigned long long)(end - begin), (unsigned long long)(numel * dtype_size(t.dtype)));
            goto err;
        }
        t.data = data + begin;
        t.nbytes = (size_t)(end - begin);
        t.name = strdup(key);
        ar->tensors[ar->n_tensors++] = t;
    }
    json_decref(root);
    return 0;
err:
    json_decref(root);
    return -1;
}

static int add_file(st_archive_t *ar, const char *path, err_t *e) {
    mapped_file_t *nf = realloc(ar->files, sizeof(mapped_file_t) * (ar->n_files + 1));
    if (!nf) return err_set(e, "out of memory");
    ar->files = nf;
    if (file_map(&ar->files[ar->n_files], path, e) != 0) return -1;
    ar->n_files++;
    return parse_file(ar, ar->n_files - 1, e);
}

/* model.safetensors.index.json: {"weight_map": {"tensor": "shard file", ...}}. Each shard
 * is opened once; every tensor the index names must be found in the shard it names. */
static int open_index(st_archive_t *ar, const char *dir, const char *index_path, err_t *e) {
    json_error_t je;
    json_t *root = json_load_file(index_path, 0, &je);
    if (!root) return err_set(e, "%s: not valid JSON (%s, line %d)", index_path, je.text, je.line);
    json_t *wm = json_object_get(root, "weight_map");
    int rc = -1;
    if (!json_is_object(wm)) { err_set(e, "%s: missing \"weight_map\" object", index_path); goto out; }
    const char *key;
    json_t *val;
    char **seen = NULL;
    int n_seen = 0;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) { err_set(e, "%s: weight_map[\"%s\"] is not a file name", index_path, key); goto out_seen; }
        const char *shard = json_string_value(val);
        if (strchr(shard, '/') || !strcmp(shard, "..")) { err_set(e, "%s: weight_map[\"%s\"]: shard name '%s' must be a plain file name", index_path, key, shard); goto out_seen; }
        int found = 0;
        for (int i = 0; i < n_seen; i++) if (!strcmp(seen[i], shard)) { found = 1; break; }
        if (found) continue;
        seen = realloc(seen, sizeof(char *) * (n_seen + 1));
        seen[n_seen++] = strdup(shard);
        char *p = str_printf("%s/%s", dir, shard);
        int r = add_file(ar, p, e);
        free(p);
        if (r) goto out_seen;
    }
    qsort(ar->tensors, ar->n_tensors, sizeof(st_tensor_t), cmp_tensor);
    json_object_foreach(wm, key, val) {
        const st_tensor_t *t = st_find(ar, key);
        if (!t) { err_set(e, "%s: tensor '%s' is listed but not found in shard '%s'", index_path, key, json_string_value(val)); goto out_seen; }
        if (strcmp(strrchr(ar->files[t->file].path, '/') + 1, json_string_value(val)) != 0) {
            err_set(e, "%s: tensor '%s' is in '%s', not in '%s' as the index says", index_path, key, ar->files[t->file].path, json_string_value(val));
            goto out_seen;
        }
    }
    rc = 0;
out_seen:
    for (int i = 0; i < n_seen; i++) free(seen[i]);
    free(seen);
out:
    json_decref(root);
    return rc;
}

int st_open(st_archive_t *ar, const char *path, err_t *e) {
    memset(ar, 0, sizeof *ar);
    int rc;
    if (dir_exists(path)) {
        char *single = str_printf("%s/model.safetensors", path);
        char *index = str_printf("%s/model.safetensors.index.json", path);
        if (file_exists(index)) rc = open_index(ar, path, index, e);
        else if (file_exists(single)) rc = add_file(ar, single, e);
        else rc = err_set(e, "%s: no model.safetensors or model.safetensors.index.json in this directory", path);
        free(single);
        free(index);
    } else {
        rc = add_file(ar, path, e);
    }
    if (rc == 0) {
        qsort(ar->tensors, ar->n_tensors, sizeof(st_tensor_t), cmp_tensor);
        for (int i = 1; i < ar->n_tensors; i++)
            if (!strcmp(ar->tensors[i].name, ar->tensors[i - 1].name)) {
                rc = err_set(e, "%s: tensor '%s' appears twice", path, ar->tensors[i].name);
                break;
            }
    }
    if (rc) st_close(ar);
    return rc;
}

typedef struct { file_progress_fn fn; void *ctx; size_t base; } copy_progress_t;
static void copy_progress(size_t done, void *ctx) {
    copy_progress_t *c = ctx;
    c->fn(c->base + done, c->ctx);
}

size_t st_copy_to_anon(st_archive_t *ar, size_t min_bytes, size_t max_bytes, file_progress_fn progress, void *ctx) {
    size_t copied = 0;
    /* the data region (after the 8-byte length and the header, which the format pads only to
     * 8 bytes) starts on a cache line in the copy: the tensors' offsets in it are multiples of
     * 64 in practice, so the kernels' 64-byte loads do not straddle two lines.
     * KILN_ALIGN_WEIGHTS=0: the copy starts where the file does (the A/B switch) */
    const char *al = getenv("KILN_ALIGN_WEIGHTS");
    int align = !(al && *al == '0');
    for (int f = 0; f < ar->n_files; f++) {
        const void *old;
        copy_progress_t cp = {progress, ctx, copied};
        const uint8_t *h = ar->files[f].data;
        uint64_t hlen = 0;
        for (int i = 7; align && h && ar->files[f].size >= 8 && i >= 0; i--) hlen = (hlen << 8) | h[i]; /* checked by parse_file */
        if (ar->files[f].size < min_bytes || ar->files[f].size > max_bytes - copied ||
            file_copy_anon(&ar->files[f], align ? (size_t)(8 + hlen) : 0, &old, progress ? copy_progress : NULL, &cp))
            continue;
        copied += ar->files[f].size;
        for (int i = 0; i < ar->n_tensors; i++)
            if (ar->tensors[i].file == f)
                ar->tensors[i].data = (const unsigned char *)ar->files[f].data + ((uintptr_t)ar->tensors[i].data - (uintptr_t)old);
    }
    return copied;
}

void st_close(st_archive_t *ar) {
    for (int i = 0; i < ar->n_tensors; i++) free(ar->tensors[i].name);
    free(ar->tensors);
    for (int i = 0; i < ar->n_files; i++) file_unmap(&ar->files[i]);
    free(ar->files);
    memset(ar, 0, sizeof *ar);
}

const st_tensor_t *st_find(const st_archive_t *ar, const char *name) {
    int lo = 0, hi = ar->n_tensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(ar->tensors[mid].name, name);
        if (c == 0) return &ar->tensors[mid];
        if (c < 0) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}
