/* log.c — see log.h. A single fprintf per line keeps lines whole across threads. */
#include "base/log.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_level = -1;

void log_set_level(int level) { g_level = level; }

int log_level(void) {
    if (g_level < 0) {
        const char *s = getenv("KILN_LOG");
        g_level = LOG_INFO;
        if (s && !strcmp(s, "debug")) g_level = LOG_DEBUG;
        else if (s && !strcmp(s, "warn")) g_level = LOG_WARN;
        else if (s && !strcmp(s, "error")) g_level = LOG_ERROR;
    }
    return g_level;
}

void log_msg(int level, const char *fmt, ...) {
    if (level < log_level()) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[2048];
    int n = 0;
    if (!isatty(2)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += snprintf(line + n, sizeof line - n, ".%03ldZ ", ts.tv_nsec / 1000000);
    }
    n += snprintf(line + n, sizeof line - n, "%s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line) vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
