/* log.h — leveled logging to stderr. One line per call, with a timestamp when stderr is
 * not a terminal (so server logs stay greppable). KILN_LOG=debug|info|warn|error. */
#ifndef KILN_LOG_H
#define KILN_LOG_H

enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
void log_set_level(int level);
int log_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
