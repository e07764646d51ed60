/* Agent diagnostics on stderr, with a level from LOGLEVEL. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hyperpod/common.h"

/* The level is the one piece of process-wide state besides what the OS
 * imposes: every module logs, and threading a context into each call for a
 * single integer would buy nothing. It is set once, before the loop runs. */
static enum hp_log_level log_level = HP_LOG_INFO;

void hp_log_set_level(enum hp_log_level level)
{
        log_level = level;
}

enum hp_log_level hp_log_get_level(void)
{
        return log_level;
}

int hp_log_level_parse(const char *text, enum hp_log_level *out)
{
        static const struct {
                const char *name;
                enum hp_log_level level;
        } names[] = {
                { "error", HP_LOG_ERROR },     { "critical", HP_LOG_ERROR },
                { "warning", HP_LOG_WARNING }, { "warn", HP_LOG_WARNING },
                { "info", HP_LOG_INFO },       { "debug", HP_LOG_DEBUG },
                { "trace", HP_LOG_DEBUG },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(names); i++) {
                if (strcasecmp(text, names[i].name) == 0) {
                        *out = names[i].level;
                        return 0;
                }
        }
        return HP_ECONFIG;
}

void hp_log(enum hp_log_level level, const char *fmt, ...)
{
        static const char *const tags[] = { "error", "warning", "info",
                                            "debug" };
        char line[4096];
        int saved_errno = errno;
        va_list ap;
        int n;

        if (level > log_level)
                return;
        n = snprintf(line, sizeof(line), "hyperpodrun[%d]: %s: ", (int)getpid(),
                     tags[level]);
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        /* One write per message, so that a message is never split by
         * another writer of stderr. */
        (void)hp_write_all(STDERR_FILENO, line, (size_t)n);
        errno = saved_errno;
}
