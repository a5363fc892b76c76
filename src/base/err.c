/* err.c — see err.h. Messages are truncated to the buffer, never overflow it. */
#include "base/err.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(err_t *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(err_t *e, const char *fmt, ...) {
    if (!e) return -1;
    char pre[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%.500s: %.500s", pre, old);
    return -1;
}
