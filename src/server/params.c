/* params.c — typed request parameters. Every getter names the parameter and what it
 * expected, so a client's mistake comes back as "'temperature' must be a number in
 * [0, 2], got \"hot\"" with param = "temperature". Absent and null are the same: the
 * default stays. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "server/srv.h"

static const char *jtype(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int p_number(json_t *o, const char *key, double lo, double hi, double *out, api_err_t *ae) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return api_fail(ae, 400, key, "'%s' must be a number in [%g, %g], got %s", key, lo, hi, jtype(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return api_fail(ae, 400, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

int p_int(json_t *o, const char *key, long lo, long hi, long *out, api_err_t *ae) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    double x;
    if (json_is_integer(v)) x = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))) x = json_real_value(v);
    else return api_fail(ae, 400, key, "'%s' must be an integer in [%ld, %ld], got %s", key, lo, hi, jtype(v));
    if (x < lo || x > hi) return api_fail(ae, 400, key, "'%s' must be in [%ld, %ld], got %.0f", key, lo, hi, x);
    *out = (long)x;
    return 0;
}

int p_bool(json_t *o, const char *key, int *out, api_err_t *ae) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return api_fail(ae, 400, key, "'%s' must be a boolean, got %s", key, jtype(v));
    *out = json_is_true(v);
    return 0;
}

int p_string(json_t *o, const char *key, const char **out, api_err_t *ae) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return api_fail(ae, 400, key, "'%s' must be a string, got %s", key, jtype(v));
    *out = json_string_value(v);
    return 0;
}

int p_reject(json_t *o, const char *key, const char *why, api_err_t *ae) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    return api_fail(ae, 400, key, "'%s' %s", key, why);
}
