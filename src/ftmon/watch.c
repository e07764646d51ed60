/* SPDX-License-Identifier: Apache-2.0 */
/* The rank watch on the loop: the shared segment, the ft_* messages of
 * the worker socket, one timer for the earliest deadline of every rank
 * and one for the straggler windows.
 *
 * A heartbeat is a store into the rank's slot: the agent is not woken by
 * it. It reads a slot only when a deadline computed from what it last read
 * comes; a newer heartbeat there moves the deadline and the timer is armed
 * again. Watching every rank thus costs the agent one wakeup per timeout,
 * whatever the heartbeat rate. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/ftmon.h"

#define SLOTS_FILE "slots"
#define SEGMENT_PREFIX "hyperpodrun-ft-"

static uint64_t slot_word(const struct hp_ftmon *m, int lr, int word)
{
        const volatile uint64_t *w = m->shm + (size_t)lr * HP_FT_SLOT_WORDS +
                                     (size_t)word;

        return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static void slot_set(struct hp_ftmon *m, int lr, int word, uint64_t value)
{
        volatile uint64_t *w = m->shm + (size_t)lr * HP_FT_SLOT_WORDS +
                               (size_t)word;

        __atomic_store_n(w, value, __ATOMIC_RELAXED);
}

/* ns to ms rounded up: a deadline computed from it is never early. */
static uint64_t ns_to_ms(uint64_t ns)
{
        return ns == 0 ? 0 : (ns + 999999) / 1000000;
}

/* A slot time on the loop's ms clock, no earlier than the rank's floor
 * (a resume: what ran before it does not count against the rank). */
static uint64_t slot_ms(const struct hp_ftmon *m, int lr, int word)
{
        uint64_t ms = ns_to_ms(slot_word(m, lr, word));

        return ms != 0 && ms < m->ranks[lr].floor_ms ? m->ranks[lr].floor_ms
                                                     : ms;
}

static void read_view(const struct hp_ftmon *m, int lr, struct hp_ft_view *v)
{
        memset(v, 0, sizeof(*v));
        v->init_ms = slot_ms(m, lr, HP_FT_W_INIT_NS);
        v->hb_count = slot_word(m, lr, HP_FT_W_HB_COUNT);
        v->hb_ms = slot_ms(m, lr, HP_FT_W_HB_NS);
        v->oos_ms = slot_ms(m, lr, HP_FT_W_OOS_NS);
        for (int i = 0; i < m->cfg->ft_nsections; i++)
                v->section_ms[i] = slot_ms(m, lr, HP_FT_W_SECTION0 + i);
}

static void timer_cb(uv_timer_t *t);

static void report(struct hp_ftmon *m, struct hp_ft_verdict *v)
{
        m->judging = false;
        uv_timer_stop(&m->timer);
        m->armed_ms = UINT64_MAX;
        if (m->on_verdict != NULL)
                m->on_verdict(m->ctx, v);
}

/* Judges every active rank at now; reports the first passed deadline, or
 * arms the timer for the earliest one. */
static void judge_all(struct hp_ftmon *m)
{
        uint64_t now = uv_now(m->loop), next = UINT64_MAX;
        struct hp_ft_verdict v;

        if (!m->judging)
                return;
        for (int lr = 0; lr < m->nranks; lr++) {
                struct hp_ft_view view;
                struct hp_ft_judgement j;
                uint64_t at;

                if (!m->ranks[lr].active)
                        continue;
                read_view(m, lr, &view);
                at = hp_ft_judge(&m->ranks[lr].t, m->cfg->ft_nsections, &view,
                                 now, &j);
                if (j.miss != HP_FT_OK) {
                        uint64_t us = uv_hrtime() / 1000;

                        memset(&v, 0, sizeof(v));
                        v.kind = HP_FT_VERDICT_MISS;
                        v.j = j;
                        v.local_rank = lr;
                        v.rank = m->ranks[lr].rank;
                        v.seen_ms = now;
                        v.latency_us = us > j.deadline_ms * 1000
                                               ? us - j.deadline_ms * 1000
                                               : 0;
                        if (j.miss == HP_FT_MISS_SECTION)
                                snprintf(v.section, sizeof(v.section), "%s",
                                         m->cfg->ft_section_names[j.section]);
                        report(m, &v);
                        return;
                }
                if (at < next)
                        next = at;
        }
        m->armed_ms = next;
        if (next == UINT64_MAX)
                uv_timer_stop(&m->timer);
        else
                uv_timer_start(&m->timer, timer_cb,
                               next > now ? next - now : 0, 0);
}

static void timer_cb(uv_timer_t *t)
{
        struct hp_ftmon *m = hp_container_of(t, struct hp_ftmon, timer);

        m->checks++;
        judge_all(m);
}

/* The progress a straggler is measured by: heartbeats, else ended "step"
 * sections. */
static uint64_t progress(const struct hp_ftmon *m, int lr)
{
        uint64_t hb, steps;

        if (!m->ranks[lr].active)
                return HP_FT_NO_COUNT;
        hb = slot_word(m, lr, HP_FT_W_HB_COUNT);
        steps = slot_word(m, lr, HP_FT_W_STEPS);
        if (hb > 0)
                return hb;
        return steps > 0 ? steps : HP_FT_NO_COUNT;
}

static void window_cb(uv_timer_t *t)
{
        struct hp_ftmon *m = hp_container_of(t, struct hp_ftmon, window);
        const struct hp_config *cfg = m->cfg;
        int first;

        for (int lr = 0; lr < m->nranks; lr++)
                m->counts[lr] = progress(m, lr);
        first = hp_ft_stragglers_window(&m->strag, m->counts, uv_now(m->loop),
                                        m->newly);
        if (first < 0)
                return;
        for (int lr = 0; lr < m->nranks; lr++) {
                if (!m->newly[lr])
                        continue;
                hp_log_warn(
                        "straggler: local rank %d (rank %lld) ran at %.2f "
                        "of the median rate of the ranks for %d windows "
                        "of %.3g s (--straggler-ratio %g)",
                        lr, (long long)m->ranks[lr].rank, m->strag.speed[lr],
                        cfg->straggler_windows,
                        (double)cfg->straggler_window_ms / 1000.0,
                        cfg->straggler_ratio);
        }
        if (cfg->straggler_verdict && m->judging) {
                struct hp_ft_verdict v;

                memset(&v, 0, sizeof(v));
                v.kind = HP_FT_VERDICT_STRAGGLER;
                v.j.section = -1;
                v.local_rank = first;
                v.rank = m->ranks[first].rank;
                v.speed = m->strag.speed[first];
                v.seen_ms = uv_now(m->loop);
                report(m, &v);
        }
}

static void window_start(struct hp_ftmon *m)
{
        uint64_t ms = m->cfg->straggler_window_ms;

        if (ms > 0 && !uv_is_active((uv_handle_t *)&m->window))
                uv_timer_start(&m->window, window_cb, ms, ms);
}

/* ---- The segment ---- */

static const char *segment_base(void)
{
        struct stat st;
        const char *t;

        if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
            access("/dev/shm", W_OK | X_OK) == 0)
                return "/dev/shm";
        t = getenv("TMPDIR");
        return t != NULL && t[0] == '/' ? t : "/tmp";
}

/* A dead agent's segment directory, name in base: it goes when it is
 * ours (0700, our user) and its slots file can be locked (its agent, which
 * held the lock, is gone). */
static void remove_stale_segment(DIR *base, const char *dir, const char *name)
{
        struct stat st;
        int dfd, fd;

        dfd = openat(dirfd(base), name,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return;
        if (fstat(dfd, &st) < 0 || st.st_uid != geteuid() ||
            (st.st_mode & 07777) != 0700) {
                close(dfd);
                return;
        }
        fd = openat(dfd, SLOTS_FILE, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            unlinkat(dfd, SLOTS_FILE, 0) == 0 &&
            unlinkat(dirfd(base), name, AT_REMOVEDIR) == 0)
                hp_log_info("rank monitor: removed %s/%s, left by an agent "
                            "that is gone",
                            dir, name);
        if (fd >= 0)
                close(fd);
        close(dfd);
}

static void remove_stale_segments(const char *dir)
{
        char own[64];
        struct dirent *de;
        DIR *d = opendir(dir);

        if (d == NULL)
                return;
        snprintf(own, sizeof(own), SEGMENT_PREFIX "%ld.", (long)getpid());
        while ((de = readdir(d)) != NULL)
                if (strncmp(de->d_name, SEGMENT_PREFIX,
                            strlen(SEGMENT_PREFIX)) == 0 &&
                    strncmp(de->d_name, own, strlen(own)) != 0)
                        remove_stale_segment(d, dir, de->d_name);
        closedir(d);
}

static int segment_open(struct hp_ftmon *m, char *errbuf, size_t errlen)
{
        int fd, r;
        void *p;

        const char *base = segment_base();

        m->shm_len = (size_t)m->nranks * HP_FT_SLOT_BYTES;
        remove_stale_segments(base);
        if ((size_t)snprintf(m->dir, sizeof(m->dir),
                             "%s/" SEGMENT_PREFIX "%ld.XXXXXX", base,
                             (long)getpid()) >= sizeof(m->dir)) {
                snprintf(errbuf, errlen, "rank monitor: TMPDIR is too long");
                return -ENAMETOOLONG;
        }
        /* A directory of our own (0700): nobody else can put a file or a
         * link where the workers open the segment. */
        if (mkdtemp(m->dir) == NULL) {
                r = -errno;
                snprintf(errbuf, errlen, "rank monitor: cannot make %s: %s",
                         m->dir, strerror(errno));
                m->dir[0] = '\0';
                return r;
        }
        snprintf(m->path, sizeof(m->path), "%s/" SLOTS_FILE, m->dir);
        fd = open(m->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
        if (fd < 0)
                goto fail;
        if (ftruncate(fd, (off_t)m->shm_len) < 0) {
                r = -errno;
                close(fd);
                errno = -r;
                goto fail;
        }
        p = mmap(NULL, m->shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
                r = -errno;
                close(fd);
                errno = -r;
                goto fail;
        }
        /* Held for as long as we live: how a later agent tells a dead
         * agent's segment from a live one's, whatever its pid namespace. */
        (void)flock(fd, LOCK_EX | LOCK_NB);
        m->shm = p;
        m->fd = fd;
        return 0;

fail:
        r = -errno;
        snprintf(errbuf, errlen, "rank monitor: cannot make %s: %s", m->path,
                 strerror(errno));
        (void)unlink(m->path);
        (void)rmdir(m->dir);
        m->dir[0] = '\0';
        return r;
}

static void segment_close(struct hp_ftmon *m)
{
        if (m->shm != NULL)
                munmap((void *)m->shm, m->shm_len);
        m->shm = NULL;
        if (m->fd >= 0)
                close(m->fd);
        m->fd = -1;
        if (m->dir[0] == '\0')
                return;
        if (unlink(m->path) < 0 && errno != ENOENT)
                hp_log_warn("cannot remove %s: %s", m->path, strerror(errno));
        if (rmdir(m->dir) < 0 && errno != ENOENT)
                hp_log_warn("cannot remove %s: %s", m->dir, strerror(errno));
        m->dir[0] = '\0';
}

/* ---- Set-up ---- */

static void defaults_from(struct hp_ft_timeouts *t,
                          const struct hp_config *cfg)
{
        memset(t, 0, sizeof(*t));
        t->initial_ms = cfg->ft_initial_hb_ms;
        t->subsequent_ms = cfg->ft_hb_ms;
        t->oos_ms = cfg->ft_oos_ms;
        for (int i = 0; i < cfg->ft_nsections; i++)
                t->section_ms[i] = cfg->ft_section_ms[i];
}

int hp_ftmon_init(struct hp_ftmon *m, uv_loop_t *loop,
                  const struct hp_config *cfg, int nranks,
                  void (*on_verdict)(void *ctx,
                                     const struct hp_ft_verdict *v),
                  void *ctx, char *errbuf, size_t errlen)
{
        int r;

        memset(m, 0, sizeof(*m));
        m->loop = loop;
        m->cfg = cfg;
        m->nranks = nranks > 0 ? nranks : 1;
        m->on_verdict = on_verdict;
        m->ctx = ctx;
        m->armed_ms = UINT64_MAX;
        m->fd = -1;
        defaults_from(&m->defaults, cfg);
        m->ranks = calloc((size_t)m->nranks, sizeof(*m->ranks));
        m->counts = calloc((size_t)m->nranks, sizeof(*m->counts));
        m->newly = calloc((size_t)m->nranks, sizeof(*m->newly));
        if (m->ranks == NULL || m->counts == NULL || m->newly == NULL) {
                r = -ENOMEM;
                snprintf(errbuf, errlen, "rank monitor: out of memory");
                goto fail;
        }
        r = hp_ft_stragglers_init(&m->strag, m->nranks, cfg->straggler_ratio,
                                  cfg->straggler_windows);
        if (r < 0) {
                snprintf(errbuf, errlen, "rank monitor: out of memory");
                goto fail;
        }
        r = segment_open(m, errbuf, errlen);
        if (r < 0)
                goto fail_strag;
        uv_timer_init(loop, &m->timer);
        uv_timer_init(loop, &m->window);
        m->started = true;
        hp_ftmon_reset(m);
        return 0;

fail_strag:
        hp_ft_stragglers_free(&m->strag);
fail:
        free(m->newly);
        free(m->counts);
        free(m->ranks);
        m->ranks = NULL;
        return r;
}

void hp_ftmon_reset(struct hp_ftmon *m)
{
        if (!m->started)
                return;
        uv_timer_stop(&m->timer);
        uv_timer_stop(&m->window);
        m->armed_ms = UINT64_MAX;
        m->judging = true;
        for (int lr = 0; lr < m->nranks; lr++) {
                m->ranks[lr].active = false;
                m->ranks[lr].client = NULL;
                m->ranks[lr].rank = -1;
                m->ranks[lr].floor_ms = 0;
                m->ranks[lr].t = m->defaults;
        }
        memset((void *)m->shm, 0, m->shm_len);
        hp_ft_stragglers_reset(&m->strag);
}

void hp_ftmon_resume(struct hp_ftmon *m)
{
        uint64_t now = uv_now(m->loop);

        if (!m->started)
                return;
        m->judging = true;
        for (int lr = 0; lr < m->nranks; lr++)
                m->ranks[lr].floor_ms = now;
        hp_ft_stragglers_reset(&m->strag);
        judge_all(m);
}

void hp_ftmon_pause(struct hp_ftmon *m)
{
        if (!m->started)
                return;
        m->judging = false;
        uv_timer_stop(&m->timer);
        m->armed_ms = UINT64_MAX;
}

void hp_ftmon_close(struct hp_ftmon *m)
{
        if (!m->started)
                return;
        m->started = false;
        uv_close((uv_handle_t *)&m->timer, NULL);
        uv_close((uv_handle_t *)&m->window, NULL);
        segment_close(m);
        hp_ft_stragglers_free(&m->strag);
        free(m->newly);
        free(m->counts);
        free(m->ranks);
        m->ranks = NULL;
}

bool hp_ftmon_speed(const struct hp_ftmon *m, int local_rank, double *speed)
{
        if (!m->started || local_rank < 0 || local_rank >= m->nranks ||
            m->strag.speed[local_rank] < 0.0)
                return false;
        *speed = m->strag.speed[local_rank];
        return true;
}

bool hp_ftmon_any_active(const struct hp_ftmon *m)
{
        for (int lr = 0; m->started && lr < m->nranks; lr++)
                if (m->ranks[lr].active)
                        return true;
        return false;
}

void hp_ftmon_speed_line(const struct hp_ftmon *m, char *buf, size_t len)
{
        size_t used = 0;
        bool done[HP_MAX_NPROC] = { false };

        if (len > 0)
                buf[0] = '\0';
        /* Slowest first: a selection sort over at most HP_MAX_NPROC. */
        for (int k = 0; m->started && k < m->nranks && used < len; k++) {
                int best = -1;
                int n;

                for (int lr = 0; lr < m->nranks; lr++)
                        if (!done[lr] && m->strag.speed[lr] >= 0.0 &&
                            (best < 0 ||
                             m->strag.speed[lr] < m->strag.speed[best]))
                                best = lr;
                if (best < 0)
                        break;
                done[best] = true;
                n = snprintf(buf + used, len - used,
                             "%slocal rank %d at %.2f%s",
                             used ? ", " : "relative speed (of the median): ",
                             best, m->strag.speed[best],
                             m->strag.flagged[best] ? " (straggler)" : "");
                if (n < 0)
                        break;
                used += (size_t)n;
        }
}

/* ---- The worker socket's messages ---- */

static cJSON *seconds_or_null(uint64_t ms)
{
        return ms == 0 ? cJSON_CreateNull()
                       : cJSON_CreateNumber((double)ms / 1000.0);
}

/* A timeout in seconds from a message: null (not used) or a positive
 * number. Returns 0 with *ms set, or -EINVAL. */
static int seconds_field(const cJSON *v, uint64_t *ms)
{
        if (v == NULL || cJSON_IsNull(v)) {
                *ms = 0;
                return 0;
        }
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0) ||
            v->valuedouble > 1e9)
                return -EINVAL;
        *ms = (uint64_t)ceil(v->valuedouble * 1000.0);
        return 0;
}

/* A value for a log line: its JSON text, cut short. */
static const char *show(const cJSON *v, char *buf, size_t len)
{
        char *text = v != NULL ? cJSON_PrintUnformatted(v) : NULL;

        snprintf(buf, len, "%s", text != NULL ? text : "missing");
        free(text);
        return buf;
}

static int add_config(struct hp_ftmon *m, cJSON *o, int lr)
{
        const struct hp_ft_timeouts *t = &m->ranks[lr].t;
        cJSON *sections = cJSON_AddObjectToObject(o, "rank_section_timeouts");

        if (cJSON_AddStringToObject(o, "segment", m->path) == NULL ||
            cJSON_AddNumberToObject(o, "slot_bytes", HP_FT_SLOT_BYTES) ==
                    NULL ||
            cJSON_AddNumberToObject(o, "slot", lr) == NULL ||
            !cJSON_AddItemToObject(o, "initial_rank_heartbeat_timeout",
                                   seconds_or_null(t->initial_ms)) ||
            !cJSON_AddItemToObject(o, "rank_heartbeat_timeout",
                                   seconds_or_null(t->subsequent_ms)) ||
            !cJSON_AddItemToObject(o, "rank_out_of_section_timeout",
                                   seconds_or_null(t->oos_ms)) ||
            cJSON_AddNumberToObject(o, "safety_factor",
                                    m->cfg->ft_safety_factor) == NULL ||
            sections == NULL)
                return -ENOMEM;
        for (int i = 0; i < m->cfg->ft_nsections; i++)
                if (!cJSON_AddItemToObject(sections,
                                           m->cfg->ft_section_names[i],
                                           seconds_or_null(t->section_ms[i])))
                        return -ENOMEM;
        return 0;
}

static void reply(struct hp_ipc_server *s, struct hp_ipc_client *c,
                  const char *type, cJSON *payload)
{
        int r = hp_ipc_send(s, c, type, payload);

        if (r < 0)
                hp_log_warn("rank monitor: cannot answer local rank %d: %s",
                            c->local_rank, hp_strerror(r));
}

static void ft_init_cb(struct hp_ipc_server *s, struct hp_ipc_client *c,
                       const cJSON *msg, void *ctx)
{
        struct hp_ftmon *m = ctx;
        struct hp_ftmon_rank *rk = &m->ranks[c->local_rank];
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(msg, "rank");
        uint64_t now_ns = uv_hrtime();
        cJSON *o = cJSON_CreateObject();
        int lr = c->local_rank;

        /* A second init (a new client in the same rank) starts over, as a
         * new connection to ft's rank monitor does. */
        rk->active = true;
        rk->client = c;
        rk->floor_ms = 0;
        rk->rank = cJSON_IsNumber(rank) && rank->valuedouble >= 0 &&
                                   rank->valuedouble < 1e9
                           ? (int64_t)rank->valuedouble
                           : -1;
        rk->t = m->defaults;
        memset((void *)(m->shm + (size_t)lr * HP_FT_SLOT_WORDS), 0,
               HP_FT_SLOT_BYTES);
        /* The agent starts the clocks that count from the init; the
         * client writes the rest of the slot. */
        slot_set(m, lr, HP_FT_W_OOS_NS, now_ns);
        slot_set(m, lr, HP_FT_W_INIT_NS, now_ns);
        if (o == NULL || add_config(m, o, lr) < 0) {
                hp_log_warn("rank monitor: out of memory answering local "
                            "rank %d",
                            lr);
                cJSON_Delete(o);
                return;
        }
        hp_log_debug("rank monitor: local rank %d (rank %lld) registered", lr,
                     (long long)rk->rank);
        reply(s, c, "ft_config", o);
        cJSON_Delete(o);
        window_start(m);
        judge_all(m);
}

/* {"heartbeat": {"initial", "subsequent"}, "section": {"section": {name:
 * secs}, "out_of_section"}}, either part optional, as ft's
 * UpdateConfigMsg. A bad value leaves every timeout as it was. */
static void ft_timeouts_cb(struct hp_ipc_server *s, struct hp_ipc_client *c,
                           const cJSON *msg, void *ctx)
{
        struct hp_ftmon *m = ctx;
        struct hp_ftmon_rank *rk = &m->ranks[c->local_rank];
        const cJSON *hb = cJSON_GetObjectItemCaseSensitive(msg, "heartbeat");
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(msg, "section");
        struct hp_ft_timeouts t = rk->t;
        const cJSON *item;
        char shown[80];
        const char *bad = NULL;
        const cJSON *bad_v = NULL;

        if (cJSON_IsObject(hb)) {
                item = cJSON_GetObjectItemCaseSensitive(hb, "initial");
                if (seconds_field(item, &t.initial_ms) < 0)
                        bad = "heartbeat.initial", bad_v = item;
                item = cJSON_GetObjectItemCaseSensitive(hb, "subsequent");
                if (seconds_field(item, &t.subsequent_ms) < 0)
                        bad = "heartbeat.subsequent", bad_v = item;
        }
        if (cJSON_IsObject(sec)) {
                const cJSON *names = cJSON_GetObjectItemCaseSensitive(
                        sec, "section");

                item = cJSON_GetObjectItemCaseSensitive(sec,
                                                        "out_of_section");
                if (seconds_field(item, &t.oos_ms) < 0)
                        bad = "section.out_of_section", bad_v = item;
                if (!cJSON_IsObject(names))
                        names = NULL;
                cJSON_ArrayForEach (item, names) {
                        int i;

                        for (i = 0; i < m->cfg->ft_nsections; i++)
                                if (strcmp(item->string,
                                           m->cfg->ft_section_names[i]) == 0)
                                        break;
                        /* ft's client knows only the configured names. */
                        if (i == m->cfg->ft_nsections)
                                continue;
                        if (seconds_field(item, &t.section_ms[i]) < 0)
                                bad = "a section timeout", bad_v = item;
                }
        }
        if (bad != NULL) {
                hp_log_warn("rank monitor: ft_timeouts from local rank %d: "
                            "%s is %s, expected null or seconds > 0; "
                            "timeouts unchanged",
                            c->local_rank, bad,
                            show(bad_v, shown, sizeof(shown)));
                reply(s, c, "ft_error", NULL);
                return;
        }
        rk->t = t;
        hp_log_debug("rank monitor: local rank %d timeouts: initial %llu ms, "
                     "heartbeat %llu ms, out of section %llu ms",
                     c->local_rank, (unsigned long long)t.initial_ms,
                     (unsigned long long)t.subsequent_ms,
                     (unsigned long long)t.oos_ms);
        reply(s, c, "ft_ok", NULL);
        judge_all(m);
}

static void ft_shutdown_cb(struct hp_ipc_server *s, struct hp_ipc_client *c,
                           const cJSON *msg, void *ctx)
{
        struct hp_ftmon *m = ctx;
        struct hp_ftmon_rank *rk = &m->ranks[c->local_rank];

        (void)s;
        (void)msg;
        if (rk->client == c) {
                rk->active = false;
                rk->client = NULL;
        }
}

static void gone_cb(void *ctx, const struct hp_ipc_client *c)
{
        struct hp_ftmon *m = ctx;
        struct hp_ftmon_rank *rk;

        if (!m->started || c->local_rank < 0 || c->local_rank >= m->nranks)
                return;
        rk = &m->ranks[c->local_rank];
        /* Only the client that registered: another connection of the
         * same rank (checkpoints, say) closing changes nothing. */
        if (rk->client == c) {
                rk->active = false;
                rk->client = NULL;
        }
}

int hp_ftmon_attach(struct hp_ftmon *m, struct hp_ipc_server *s)
{
        int r;

        r = hp_ipc_server_on(s, "ft_init", ft_init_cb, m);
        if (r == 0)
                r = hp_ipc_server_on(s, "ft_timeouts", ft_timeouts_cb, m);
        if (r == 0)
                r = hp_ipc_server_on(s, "ft_shutdown", ft_shutdown_cb, m);
        if (r == 0)
                hp_ipc_server_on_gone(s, gone_cb, m);
        return r;
}
