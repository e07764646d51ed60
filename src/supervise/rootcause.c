/* SPDX-License-Identifier: Apache-2.0 */
/* torchrun's failure summary: which worker failed first, and why. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

/* The largest error file passed up: a traceback, not a log. */
#define ERROR_FILE_MAX (4 * 1024 * 1024)
/* The largest error file summarised; a larger one is not taken for
 * JSON. */
#define ERROR_REPORT_MAX (256 * 1024)

/* What error.json says, in the two shapes torch writes. */
struct error_report {
        bool present;
        double timestamp;
        char message[8192];
};

static void read_error_file(const char *path, struct error_report *rep)
{
        const cJSON *msg, *extra, *stack, *ts;
        cJSON *root;
        char *buf;
        size_t n;
        int r;

        rep->present = false;
        rep->message[0] = '\0';
        if (path[0] == '\0')
                return;
        r = hp_read_file(path, ERROR_REPORT_MAX, &buf, &n);
        if ((r < 0 && r != -EFBIG) || (r == 0 && n == 0)) {
                free(buf);
                return;
        }
        root = r == 0 ? cJSON_Parse(buf) : NULL;
        free(buf);
        if (root == NULL) {
                snprintf(rep->message, sizeof(rep->message),
                         "(%s is not valid JSON)", path);
                rep->present = true;
                return;
        }
        msg = cJSON_GetObjectItemCaseSensitive(root, "message");
        if (cJSON_IsString(msg)) {
                ts = cJSON_GetObjectItemCaseSensitive(root, "timestamp");
                snprintf(rep->message, sizeof(rep->message), "%s",
                         msg->valuestring);
                if (cJSON_IsNumber(ts))
                        rep->timestamp = ts->valuedouble;
                rep->present = true;
        } else if (cJSON_IsObject(msg)) {
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(
                        msg, "message");
                extra = cJSON_GetObjectItemCaseSensitive(msg, "extraInfo");
                stack = cJSON_GetObjectItemCaseSensitive(extra,
                                                         "py_callstack");
                ts = cJSON_GetObjectItemCaseSensitive(extra, "timestamp");
                if (cJSON_IsString(stack))
                        snprintf(rep->message, sizeof(rep->message), "%s",
                                 stack->valuestring);
                else if (cJSON_IsString(text))
                        snprintf(rep->message, sizeof(rep->message), "%s",
                                 text->valuestring);
                if (cJSON_IsString(ts))
                        rep->timestamp = strtod(ts->valuestring, NULL);
                else if (cJSON_IsNumber(ts))
                        rep->timestamp = ts->valuedouble;
                rep->present = true;
        }
        cJSON_Delete(root);
}

void hp_worker__start_failure(const struct hp_worker *w, char *buf,
                              size_t len)
{
        const char *err = hp_strerror(w->start_error);
        const char *name = hp_err_name(w->start_error);

        switch (w->start_step) {
        case HP_START_LOG_DIR:
                snprintf(buf, len,
                         "cannot create its log directory '%s': "
                         "%s (%s)",
                         w->dir, err, name);
                break;
        case HP_START_STDOUT_FILE:
        case HP_START_STDERR_FILE:
                snprintf(buf, len, "cannot open '%s/%s': %s (%s)", w->dir,
                         w->start_step == HP_START_STDOUT_FILE ? "stdout.log"
                                                               : "stderr.log",
                         err, name);
                break;
        case HP_START_PIPE:
                snprintf(buf, len, "cannot create its output pipes: %s (%s)",
                         err, name);
                break;
        case HP_START_WATCH:
                snprintf(buf, len, "cannot watch its process: %s (%s)", err,
                         name);
                break;
        default:
                snprintf(buf, len, "cannot create its process: %s (%s)", err,
                         name);
                break;
        }
}

static bool worker_failed(const struct hp_worker *w)
{
        return w->state >= HP_WORKER_EXITED &&
               (w->exit_status != 0 || w->term_signal != 0);
}

static double failure_time(const struct hp_worker *w,
                           const struct error_report *rep)
{
        return rep->present && rep->timestamp > 0 ? rep->timestamp
                                                  : w->exit_time;
}

static void print_failure(const struct hp_agent *a, const struct hp_worker *w,
                          int index)
{
        struct error_report rep;
        char when[64], text[10240], exitcode[32], rank[16];
        time_t t;
        struct tm tm;
        int n;

        read_error_file(w->error_file, &rep);
        if (w->start_error != 0) {
                char why[sizeof(rep.message) - 32];

                hp_worker__start_failure(w, why, sizeof(why));
                snprintf(rep.message, sizeof(rep.message), "never ran: %s",
                         why);
                rep.present = false;
        }
        t = (time_t)failure_time(w, &rep);
        localtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y-%m-%d_%H:%M:%S", &tm);
        /* In-process restart's processes before the operator's /start
         * have no global rank yet. */
        if (w->rank < 0)
                snprintf(rank, sizeof(rank), "unknown");
        else
                snprintf(rank, sizeof(rank), "%d", w->rank);
        if (w->term_signal)
                snprintf(exitcode, sizeof(exitcode), "%d", -w->term_signal);
        else
                snprintf(exitcode, sizeof(exitcode), "%lld",
                         (long long)w->exit_status);
        if (!rep.present && w->term_signal) {
                const char *name = hp_signal_name(w->term_signal);
                snprintf(rep.message, sizeof(rep.message),
                         "Signal %d (%s) received by PID %d", w->term_signal,
                         name ? name : "unknown", (int)w->pid);
        } else if (!rep.present && w->start_error == 0) {
                snprintf(
                        rep.message, sizeof(rep.message),
                        "To enable traceback see: "
                        "https://pytorch.org/docs/stable/elastic/errors.html");
        }
        /* Continuation lines of a traceback are indented under the field. */
        n = snprintf(text, sizeof(text),
                     "[%d]:\n"
                     "  time      : %s\n"
                     "  host      : %s\n"
                     "  rank      : %s (local_rank: %d)\n"
                     "  exitcode  : %s (pid: %d)\n"
                     "  error_file: %s\n"
                     "  traceback : ",
                     index, when, a->hostname, rank, w->local_rank, exitcode,
                     (int)w->pid, rep.present ? w->error_file : "<N/A>");
        for (const char *p = rep.message; *p && n < (int)sizeof(text) - 4;
             p++) {
                text[n++] = *p;
                if (*p == '\n' && p[1] != '\0') {
                        text[n++] = ' ';
                        text[n++] = ' ';
                }
        }
        if (n > 0 && text[n - 1] != '\n')
                text[n++] = '\n';
        hp_log_write(text, (size_t)n);
}

const struct hp_worker *hp_agent__root_cause(const struct hp_group *g)
{
        const struct hp_worker *root = NULL;
        double root_time = 0;

        /* The root cause is the first failure by time: the error file's
         * timestamp when the worker wrote one, else when we saw it exit.
         * Workers we killed while stopping the group are not failures. */
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];
                struct error_report rep;
                double t;

                if (!worker_failed(w) ||
                    (w->signalled && w != g->first_failure))
                        continue;
                read_error_file(w->error_file, &rep);
                t = failure_time(w, &rep);
                if (root == NULL || t < root_time) {
                        root = w;
                        root_time = t;
                }
        }
        return root;
}

static void note_root_cause(struct hp_agent *a, const struct hp_worker *w)
{
        struct error_report rep;

        read_error_file(w->error_file, &rep);
        snprintf(a->root_error_file, sizeof(a->root_error_file), "%s",
                 rep.present ? w->error_file : "");
        a->root_exitcode = w->term_signal ? -w->term_signal
                                          : (int)w->exit_status;
        a->root_exit_status = w->term_signal ? 128 + w->term_signal
                              : w->exit_status < 0 || w->exit_status > 255
                                      ? 1
                                      : (int)w->exit_status;
}

void hp_agent_pass_error_file(const struct hp_agent *a, int exit_code)
{
        const char *dest = getenv("TORCHELASTIC_ERROR_FILE");
        const char *unread = "not JSON, or unreadable";
        char *buf = NULL, *text = NULL;
        cJSON *root = NULL, *msg;
        size_t n;
        int r;

        if (dest == NULL || *dest == '\0' || exit_code == 0 ||
            a->received_signal || a->root_error_file[0] == '\0' ||
            exit_code != a->root_exit_status)
                return;
        r = hp_read_file(a->root_error_file, ERROR_FILE_MAX, &buf, &n);
        if (r == -ENOMEM)
                unread = strerror(ENOMEM);
        if (r < 0 || n == 0)
                goto fail;
        root = cJSON_Parse(buf);
        if (root == NULL)
                goto fail;
        /* torch's ErrorHandler: the child cannot know an exit code set by
         * a signal, so the parent writes it in. */
        msg = cJSON_GetObjectItemCaseSensitive(root, "message");
        if (cJSON_IsObject(msg) && a->root_exitcode != 0) {
                cJSON_DeleteItemFromObjectCaseSensitive(msg, "errorCode");
                cJSON_AddNumberToObject(msg, "errorCode", a->root_exitcode);
        }
        text = cJSON_PrintUnformatted(root);
        if (text == NULL)
                goto fail;
        /* A new file renamed over dest: a link planted at dest is
         * replaced, never written through. */
        r = hp_write_file_atomic(dest, text, strlen(text), 0644, 0);
        if (r < 0) {
                errno = -r;
                goto fail;
        }
        hp_log_info("copied the root cause's error file %s to %s "
                    "(TORCHELASTIC_ERROR_FILE)",
                    a->root_error_file, dest);
        goto done;
fail:
        hp_log_warn("cannot copy the root cause's error file %s to %s "
                    "(TORCHELASTIC_ERROR_FILE): %s",
                    a->root_error_file, dest,
                    root == NULL ? unread : strerror(errno));
done:
        free(text);
        cJSON_Delete(root);
        free(buf);
}

void hp_agent__print_failure_summary(struct hp_agent *a,
                                     const struct hp_group *g)
{
        /* torchrun's rules: 60 characters wide. */
        static const char eq[] = "===================================="
                                 "========================\n";
        static const char dash[] = "------------------------------------"
                                   "------------------------\n";
        const struct hp_worker *root = hp_agent__root_cause(g);
        const char *entry;
        char title[512];
        int others = 0;

        if (root == NULL)
                return;
        note_root_cause(a, root);
        if (g->stage == HP_STAGE_TRAIN)
                entry = a->cfg->script;
        else if (g->stage == HP_STAGE_PRE_TRAIN)
                entry = a->cfg->pre_train_script;
        else
                entry = a->cfg->post_train_script;
        /* torchrun titles the summary with the entry point as given. */
        snprintf(title, sizeof(title), "%s FAILED\n", entry);

        hp_log_write(eq, sizeof(eq) - 1);
        hp_log_write(title, strlen(title));
        hp_log_write(dash, sizeof(dash) - 1);
        hp_log_write("Failures:\n", 10);
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];
                if (w == root || !worker_failed(w) || w->signalled)
                        continue;
                print_failure(a, w, ++others);
        }
        if (others == 0)
                hp_log_write("  <NO_OTHER_FAILURES>\n", 22);
        hp_log_write(dash, sizeof(dash) - 1);
        hp_log_write("Root Cause (first observed failure):\n", 37);
        print_failure(a, root, 0);
        hp_log_write(eq, sizeof(eq) - 1);
}

int hp_agent__root_cause_exit_code(const struct hp_group *g)
{
        const struct hp_worker *w = hp_agent__root_cause(g);

        if (w == NULL)
                return 1;
        if (w->term_signal)
                return 128 + w->term_signal;
        if (w->exit_status < 0 || w->exit_status > 255)
                return 1;
        return (int)w->exit_status;
}

int hp_agent_failure_message(const struct hp_agent *a,
                             const struct hp_group *g, char *buf, size_t len)
{
        const struct hp_worker *root = hp_agent__root_cause(g);
        size_t n = 0;
        int r;

        if (len == 0)
                return -EINVAL;
        buf[0] = '\0';
        /* A node rank and global ranks the agent does not know yet (an
         * in-process restart before /start) are left out. */
        if (a->round.node_rank < 0)
                r = snprintf(buf, len,
                             "%s failed on %s (node rank not "
                             "known yet):",
                             hp_stage_name(g->stage), a->hostname);
        else
                r = snprintf(buf, len, "%s failed on node rank %d (%s):",
                             hp_stage_name(g->stage), a->round.node_rank,
                             a->hostname);
        n = r > 0 ? ((size_t)r < len ? (size_t)r : len - 1) : 0;
        /* The root cause first, then the others in local-rank order. */
        for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < g->count; i++) {
                        const struct hp_worker *w = &g->workers[i];
                        struct error_report rep;
                        char first[512], rank[24] = "";
                        const char *nl;
                        size_t msg_len;

                        if (pass == 0 ? w != root
                                      : (w == root || !worker_failed(w) ||
                                         w->signalled))
                                continue;
                        if (!worker_failed(w))
                                continue;
                        if (w->rank >= 0)
                                snprintf(rank, sizeof(rank), " (rank %d)",
                                         w->rank);
                        if (w->start_error != 0) {
                                char why[sizeof(first) - 64];

                                hp_worker__start_failure(w, why, sizeof(why));
                                r = snprintf(buf + n, len - n,
                                             "\nLocal Rank %d%s never ran: "
                                             "%s",
                                             w->local_rank, rank, why);
                                if (r < 0 || (size_t)r >= len - n)
                                        return 0;
                                n += (size_t)r;
                                continue;
                        }
                        read_error_file(w->error_file, &rep);
                        if (!rep.present && w->term_signal) {
                                const char *name = hp_signal_name(
                                        w->term_signal);
                                snprintf(rep.message, sizeof(rep.message),
                                         "Signal %d (%s) received by PID %d",
                                         w->term_signal,
                                         name ? name : "unknown",
                                         (int)w->pid);
                        }
                        /* One line per process: the message's last line
                         * (a traceback's last line is the exception). */
                        msg_len = strlen(rep.message);
                        while (msg_len > 0 &&
                               rep.message[msg_len - 1] == '\n')
                                rep.message[--msg_len] = '\0';
                        nl = strrchr(rep.message, '\n');
                        snprintf(first, sizeof(first), "%.*s",
                                 (int)sizeof(first) - 1,
                                 nl ? nl + 1 : rep.message);
                        first[strcspn(first, "\n")] = '\0';
                        r = snprintf(buf + n, len - n,
                                     "\nLocal Rank %d%s exited with code "
                                     "%lld%s%s",
                                     w->local_rank, rank,
                                     w->term_signal
                                             ? -(long long)w->term_signal
                                             : (long long)w->exit_status,
                                     first[0] ? ": " : "", first);
                        if (r < 0 || (size_t)r >= len - n)
                                return 0; /* cut: the message is long enough */
                        n += (size_t)r;
                }
        }
        return 0;
}
