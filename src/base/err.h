/* err.h — the error convention of kiln.
 *
 * Functions that can fail return an int status (0 ok, -1 error) and fill an err_t with a
 * message naming the object that was wrong: the file, the tensor, the JSON path, the byte
 * offset. Nothing below cli/ calls exit(). Messages are one line; callers may prefix
 * context with err_prefix() as the error travels up ("loading model X: tensor Y: ...").
 */
#ifndef KILN_ERR_H
#define KILN_ERR_H

#include <stddef.h>

typedef struct err {
    char msg[1024];
} err_t;

/* Sets the message (printf-style) and returns -1, so `return err_set(e, ...)` reads well.
 * e may be NULL. */
int err_set(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts "prefix: " in front of the existing message; returns -1. */
int err_prefix(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void err_clear(err_t *e) { if (e) e->msg[0] = 0; }

#endif
