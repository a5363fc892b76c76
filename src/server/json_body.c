/* json_body.c — turning a request body into a JSON object, or into a 400 that says where
 * it went wrong. UTF-8 is checked first (jansson would also refuse it, but only with a
 * generic message), then jansson parses with its line/column/byte position. */
#include <stdio.h>
#include "server/srv.h"

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF. */
int utf8_valid(const char *str, size_t n, size_t *bad) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int len;
        unsigned min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; c &= 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; c &= 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; c &= 0x07; }
        else goto fail;
        if (i + (size_t)len > n) goto fail;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) goto fail;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) goto fail;
        i += (size_t)len;
    }
    return 1;
fail:
    if (bad) *bad = i;
    return 0;
}

json_t *body_parse(const char *s, size_t n, api_err_t *ae) {
    size_t bad;
    if (n == 0) { api_fail(ae, 400, NULL, "the request body is empty; expected a JSON object"); return NULL; }
    if (!utf8_valid(s, n, &bad)) {
        api_fail(ae, 400, NULL, "the request body is not valid UTF-8 (bad byte 0x%02x at offset %zu)", (unsigned char)s[bad], bad);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        api_fail(ae, 400, NULL, "malformed JSON at line %d, column %d (byte %d): %s", je.line, je.column, je.position, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        api_fail(ae, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}
