/* fuzz_jinja_parse.c — libFuzzer target for the Jinja lexer and parser.
 *
 * Any byte string must either parse or fail with a message; never crash, leak or overflow.
 * A successful parse must have produced a tree (the template is freed right away).
 *   build-jinja-fuzz/fuzz_jinja_parse -max_total_time=300 tests/fuzz/corpus/jinja_parse
 */
#include <stdint.h>
#include <stdlib.h>
#include "chat/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    err_t e = {{0}};
    jinja_template_t *t = jinja_parse((const char *)data, size, &e);
    if (!t && !e.msg[0]) abort();  /* a failure must say why */
    jinja_free(t);
    return 0;
}
