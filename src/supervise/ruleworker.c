/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rule evaluation off the loop thread, for floods of log lines.
 *
 * The loop thread reads the workers' pipes, splits lines and writes the
 * log files and the console; running the rules there as well would make
 * a flood of monitored lines cost the I/O path several times what it
 * costs without rules. When a loop iteration brings more monitored lines
 * than HP_RULE_INLINE_MAX, the rule watch (rulewatch.c) hands the rest to
 * rule threads (one per core, up to HP_RULE_THREADS_MAX; local rank r to
 * thread r % count):
 * each line is copied, with its rank and its loop time, into the
 * thread's ring, and the thread feeds them to the streams in order. With
 * the loop thread that makes more busy threads than cores, which lets the
 * scheduler balance reads and rules over all of them. A normal job
 * (hundreds of lines a second) never fills an iteration and never starts
 * a thread.
 *
 * Ownership is simple and checked by one rule: the loop thread touches
 * a rank's rule stream only when its thread is idle (every queued line
 * fed, no verdict waiting), which rulewatch.c ensures by calling
 * hp_rulewatch__thread_settle() first. The thread touches them only while
 * it holds queued lines. So no stream is ever shared, and the engine stays
 * single-threaded code.
 *
 * Two things a line can do need the loop: a verdict (a stream turned
 * SLOW, HANGING or FAULTED) and a deadline earlier than the armed timer.
 * For a verdict the thread stops right after that line, before a later
 * line can turn the stream back to HEALTHY, and wakes the loop, which
 * records the verdict and lets it go on. For a deadline it only wakes
 * the loop, which re-arms the timer.
 *
 * The ring holds 4 MiB: at ~120 ns a line (of ~128 bytes with its
 * header) that is about 4 ms of evaluation. When it is full the loop
 * waits for room, and a settle (a timer tick, a stage end, /metrics)
 * waits for the thread, but only out of a budget (WAIT_SHARE of the
 * loop's time, at most WAIT_BURST_NS at once): rules are advisory, and a
 * rule that cannot keep up (a backtracking pattern) must not slow the
 * reads, and so the workers, the files and the console. Past the budget
 * a line that finds the ring full is skipped, and a settle makes the
 * thread drop what it has not fed yet after its current line; both are
 * counted (hp_rulewatch__thread_skipped). Rules that keep up never
 * exhaust the budget and skip nothing. Each rank goes to one thread, so
 * the loop can wait on a full ring while the other thread has emptied its
 * own and a core sits idle; a larger ring lets such a spell pass without
 * a wait, and past 4 MiB a larger one does not help (BENCHMARKS.md). The
 * ring is allocated when a flood starts the thread; a steady job never
 * has one.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"

#include "supervise-private.h"

#define RING_SIZE (4 * 1024 * 1024)
/* The thread reports progress, and the loop hands over lines, at least
 * this often, so that neither waits for the other's whole batch: with
 * 1 MiB batches the two took turns instead of running side by side. */
#define HANDOVER_BYTES (64 * 1024)
/* A record's header; the line follows, the whole padded to 8 bytes. */
struct record {
        uint32_t len;
        int32_t rank; /* RECORD_WRAP: the rest of the ring is unused */
        uint64_t now;
};
#define RECORD_WRAP (-1)
/* How much lower than the loop's the rule threads' priority is (a nice
 * value added to the agent's). In a flood the loop thread is the head of
 * the pipeline: every line is read, written and queued there, and when
 * the cores are busy it must not wait behind a rule thread that has lines
 * in hand; the rule threads catch up whenever the loop waits for the
 * pipes; at the same priority the rule threads sit idle while the loop
 * waits in the run queue (BENCHMARKS.md). On a training node it also
 * means a flood's rule work yields to the training processes first.
 * Never below the lowest priority, 19. */
#define THREAD_NICE 3
/* The loop's waits for a rule thread (room in the ring, a settle) come
 * out of a budget that grows by 1/WAIT_SHARE of the time that passes, up
 * to WAIT_BURST_NS: a flood whose rules keep up never waits longer than
 * that at once, and a rule that cannot keep up costs the loop at most
 * that share of its time. */
#define WAIT_SHARE 16
#define WAIT_BURST_NS (100 * 1000 * 1000ull)
/* With debug logging, the state changes a thread's lines bring are
 * carried back to the loop, which logs them (the agent's log is the
 * loop's): up to CHANGES_MAX at once, each with this much of its line.
 * A thread that could not hold one more line's worth stops, as for a
 * verdict, until the loop has logged them. */
#define CHANGES_MAX (4 * LOGMON_RULES_MAX)
#define CHANGE_LINE_MAX 400
struct change {
        struct logmon_event e;
        int rank;
        uint64_t now;
        uint32_t len;
        char line[CHANGE_LINE_MAX];
};

struct hp_rule_thread {
        struct hp_rulewatch *watch;
        hp_rulewatch__change_cb log_change; /* on the loop thread */
        uv_thread_t thread;
        uv_mutex_t mu;
        uv_cond_t work;     /* the thread waits for lines, or to go on */
        uv_cond_t progress; /* the loop waits for room or for idle */
        uv_async_t *wake;   /* the loop's: a verdict or a deadline */
        char *ring;

        /* Under mu. Positions count bytes since the start, modulo
         * RING_SIZE in the ring. */
        size_t published; /* the thread may feed up to here */
        size_t consumed;  /* fed */
        bool paused;      /* stopped after a verdict line */
        int paused_rank;
        bool verdict_taken; /* the watch judged: no need to stop */
        uint64_t armed;     /* the loop's timer deadline */
        bool deadline_earlier;
        bool stop;
        bool discard;        /* drop what is not fed yet (a settle) */
        uint64_t discarded;  /* lines dropped so */
        bool thread_waiting; /* on work: a hand-over must signal */
        bool loop_waiting;   /* on progress: the thread must signal */

        /* Loop thread only. */
        size_t staged;        /* written, maybe not yet published */
        size_t handed;        /* published as of the last publish */
        size_t consumed_seen; /* a recent consumed, for the room check */
        bool settling;
        uint64_t skipped;   /* lines the rules never saw */
        int64_t budget_ns;  /* the loop may still wait this long */
        uint64_t budget_at; /* uv_hrtime() of its last refill */

        /* Written by the thread after it fed lines: equal to staged
         * (read on the loop thread) when every line is fed. Release and
         * acquire make the thread's stream writes visible to the loop. */
        atomic_size_t done;
        atomic_bool paused_flag;
        atomic_bool discard_flag; /* discard, read per line without mu */

        /* The thread's: what each line fed did. */
        struct logmon_events events;
        /* State changes not logged yet (NULL without debug logging):
         * written by the thread while it feeds, read by the loop while the
         * thread is stopped or idle, as the streams are. */
        struct change *changes;
        size_t nchanges;
};

static size_t padded(size_t len)
{
        return (sizeof(struct record) + len + 7) & ~(size_t)7;
}

/* The records (lines) in [from, to) of the ring. */
/* The record that starts at *from, or after the padding at the ring's
 * end, with *from moved to its start; NULL when none starts before to. */
static const struct record *next_record(const struct hp_rule_thread *w,
                                        size_t *from, size_t to)
{
        while (*from < to) {
                size_t pos = *from % RING_SIZE;
                const struct record *r;

                if (RING_SIZE - pos < sizeof(*r)) {
                        *from += RING_SIZE - pos;
                        continue;
                }
                r = (const struct record *)(w->ring + pos);
                if (r->rank == RECORD_WRAP) {
                        *from += RING_SIZE - pos;
                        continue;
                }
                return r;
        }
        return NULL;
}

static uint64_t count_records(const struct hp_rule_thread *w, size_t from,
                              size_t to)
{
        const struct record *r;
        uint64_t n = 0;

        while ((r = next_record(w, &from, to)) != NULL) {
                from += padded(r->len);
                n++;
        }
        return n;
}

static void keep_changes(struct hp_rule_thread *w,
                         const struct logmon_events *ev,
                         const struct record *r)
{
        for (size_t i = 0; i < ev->n; i++) {
                struct change *c;

                if (ev->ev[i].kind != LOGMON_EVENT_STATE)
                        continue;
                c = &w->changes[w->nchanges++];
                c->e = ev->ev[i];
                c->rank = r->rank;
                c->now = r->now;
                c->len = r->len < CHANGE_LINE_MAX ? r->len : CHANGE_LINE_MAX;
                memcpy(c->line, r + 1, c->len);
        }
}

/* Logs the state changes the thread kept, on the loop thread while the
 * thread is stopped or idle. */
static void log_changes(struct hp_rule_thread *w)
{
        for (size_t i = 0; i < w->nchanges; i++) {
                const struct change *c = &w->changes[i];

                w->log_change(w->watch, c->rank, &c->e, c->now, c->line,
                              c->len);
        }
        w->nchanges = 0;
}

/* Feeds [from, to) of the ring; stops after a line that needs a verdict
 * and returns where it stopped. */
static size_t feed(struct hp_rule_thread *w, size_t from, size_t to,
                   bool verdict_taken, uint64_t armed, bool *verdict,
                   int *verdict_rank, bool *earlier)
{
        const struct hp_rulewatch *watch = w->watch;
        size_t limit = from + HANDOVER_BYTES;
        struct logmon_events *ev = &w->events;

        while (from < to && from < limit &&
               !atomic_load_explicit(&w->discard_flag,
                                     memory_order_relaxed)) {
                const struct record *r = next_record(w, &from, to);
                struct logmon_stream *s;

                if (r == NULL)
                        break;
                s = watch->ranks[r->rank].stream;
                /* No room for what this line could change: the loop logs
                 * what is there first. */
                if (s != NULL && w->changes != NULL &&
                    w->nchanges > CHANGES_MAX - LOGMON_RULES_MAX) {
                        *verdict = true;
                        *verdict_rank = -1;
                        break;
                }
                from += padded(r->len);
                if (s == NULL)
                        continue;
                logmon_stream_feed(s, (const char *)(r + 1), r->len, r->now,
                                   ev);
                if (w->changes != NULL)
                        keep_changes(w, ev, r);
                /* The loop's timer is armed no later than every stream's
                 * deadline (rulewatch.c), and a line moves a deadline
                 * earlier only when a rule changes state (its first match
                 * trades the start cut-off for the recurring frequency; a
                 * match out of HANGING gives it a deadline again). Other
                 * lines only move last matches later, so the deadline is
                 * looked at only after a line that brought events. */
                if ((ev->n > 0 || ev->stream_changed) &&
                    logmon_stream_next_deadline(s) < armed)
                        *earlier = true;
                if (!verdict_taken && logmon_stream_state(s) >= LOGMON_SLOW) {
                        *verdict = true;
                        *verdict_rank = r->rank;
                        break;
                }
        }
        return from;
}

/* Lowers the calling thread's priority by THREAD_NICE. Linux keeps a nice
 * value per thread, and uv_os_setpriority() is setpriority(PRIO_PROCESS)
 * on the id given, here the thread's. Lowering can only fail if the
 * thread is gone; it then runs at the loop's priority.
 *
 * It also moves the thread to SCHED_BATCH, which any thread may do: the
 * same share of the CPU at the same nice value, but a rule thread that
 * wakes does not preempt the thread running where it wakes, most often
 * the loop thread right after it handed over lines (BENCHMARKS.md, where
 * the time goes). On a training node it also means a flood's rule work
 * never preempts a training process. */
static void lower_priority(void)
{
        struct sched_param none = { 0 };
        uv_pid_t tid = (uv_pid_t)gettid();
        int nice;

        (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
        if (uv_os_getpriority(tid, &nice) < 0)
                return;
        nice = nice + THREAD_NICE > 19 ? 19 : nice + THREAD_NICE;
        (void)uv_os_setpriority(tid, nice);
}

static void thread_main(void *arg)
{
        struct hp_rule_thread *w = arg;

        lower_priority();
        uv_mutex_lock(&w->mu);
        for (;;) {
                size_t from, to, end;
                bool verdict = false, earlier = false, taken;
                int rank = -1;
                uint64_t armed;

                while (!w->stop &&
                       (w->paused || w->consumed == w->published)) {
                        w->thread_waiting = true;
                        uv_cond_wait(&w->work, &w->mu);
                        w->thread_waiting = false;
                }
                if (w->stop)
                        break;
                from = w->consumed;
                to = w->published;
                taken = w->verdict_taken;
                armed = w->armed;
                uv_mutex_unlock(&w->mu);

                end = feed(w, from, to, taken, armed, &verdict, &rank,
                           &earlier);

                uv_mutex_lock(&w->mu);
                if (w->discard) {
                        w->discarded += count_records(w, end, w->published);
                        end = w->published;
                        w->discard = false;
                        atomic_store_explicit(&w->discard_flag, false,
                                              memory_order_relaxed);
                }
                w->consumed = end;
                if (verdict) {
                        w->paused = true;
                        w->paused_rank = rank;
                        atomic_store_explicit(&w->paused_flag, true,
                                              memory_order_relaxed);
                }
                if (earlier)
                        w->deadline_earlier = true;
                atomic_store_explicit(&w->done, end, memory_order_release);
                if (w->loop_waiting)
                        uv_cond_signal(&w->progress);
                if (verdict || earlier || w->nchanges > 0)
                        uv_async_send(w->wake);
        }
        uv_mutex_unlock(&w->mu);
}

int hp_rulewatch__thread_new(struct hp_rulewatch *watch, uv_async_t *wake,
                             hp_rulewatch__change_cb log_change,
                             struct hp_rule_thread **out)
{
        struct hp_rule_thread *w;
        int r;

        w = calloc(1, sizeof(*w));
        if (w == NULL)
                return -ENOMEM;
        w->ring = malloc(RING_SIZE);
        if (w->ring == NULL) {
                free(w);
                return -ENOMEM;
        }
        if (hp_log_get_level() >= HP_LOG_DEBUG) {
                w->changes = calloc(CHANGES_MAX, sizeof(*w->changes));
                if (w->changes == NULL) {
                        free(w->ring);
                        free(w);
                        return -ENOMEM;
                }
        }
        w->watch = watch;
        w->log_change = log_change;
        w->wake = wake;
        w->armed = UINT64_MAX;
        atomic_init(&w->done, 0);
        atomic_init(&w->paused_flag, false);
        atomic_init(&w->discard_flag, false);
        w->budget_ns = (int64_t)WAIT_BURST_NS;
        w->budget_at = uv_hrtime();
        r = uv_mutex_init(&w->mu);
        if (r < 0)
                goto fail_mutex;
        r = uv_cond_init(&w->work);
        if (r < 0)
                goto fail_work;
        r = uv_cond_init(&w->progress);
        if (r < 0)
                goto fail_progress;
        r = uv_thread_create(&w->thread, thread_main, w);
        if (r < 0)
                goto fail_thread;
        *out = w;
        return 0;

fail_thread:
        uv_cond_destroy(&w->progress);
fail_progress:
        uv_cond_destroy(&w->work);
fail_work:
        uv_mutex_destroy(&w->mu);
fail_mutex:
        free(w->changes);
        free(w->ring);
        free(w);
        return r;
}

bool hp_rulewatch__thread_idle(const struct hp_rule_thread *w)
{
        /* paused_flag is set before done moves past the verdict line, so
         * a done that shows every line fed also shows the pause. */
        return atomic_load_explicit(&w->done, memory_order_acquire) ==
                       w->staged &&
               !atomic_load_explicit(&w->paused_flag, memory_order_relaxed);
}

void hp_rulewatch__thread_log_changes(struct hp_rule_thread *w)
{
        if (w->nchanges > 0)
                log_changes(w);
}

void hp_rulewatch__thread_publish(struct hp_rule_thread *w)
{
        /* Called every loop iteration: nothing to hand over costs no
         * lock. */
        if (w->handed == w->staged)
                return;
        uv_mutex_lock(&w->mu);
        w->published = w->handed = w->staged;
        w->consumed_seen = w->consumed;
        if (w->thread_waiting)
                uv_cond_signal(&w->work);
        uv_mutex_unlock(&w->mu);
}

/* Runs the loop's side of a verdict while the thread is stopped after it:
 * the streams are the loop's until it goes on. */
static void take_verdict(struct hp_rule_thread *w,
                         void (*on_verdict)(struct hp_rulewatch *watch,
                                            int rank))
{
        int rank = w->paused_rank;

        uv_mutex_unlock(&w->mu);
        log_changes(w);
        if (rank >= 0)
                on_verdict(w->watch, rank);
        uv_mutex_lock(&w->mu);
        w->verdict_taken = w->watch->judged;
        w->paused = false;
        atomic_store_explicit(&w->paused_flag, false, memory_order_relaxed);
        if (w->thread_waiting)
                uv_cond_signal(&w->work);
}

/* What the loop may still wait now (see WAIT_SHARE). */
static int64_t budget_left(struct hp_rule_thread *w, uint64_t now)
{
        w->budget_ns += (int64_t)((now - w->budget_at) / WAIT_SHARE);
        if (w->budget_ns > (int64_t)WAIT_BURST_NS)
                w->budget_ns = (int64_t)WAIT_BURST_NS;
        w->budget_at = now;
        return w->budget_ns;
}

/* Waits, out of the budget, until n more bytes fit in the ring, taking
 * a verdict the thread stopped for meanwhile; false when they still do
 * not fit. */
static bool make_room(struct hp_rule_thread *w, size_t n,
                      void (*on_verdict)(struct hp_rulewatch *watch,
                                         int rank))
{
        uint64_t start = uv_hrtime(), now = start, deadline;
        bool room;

        deadline = start +
                   (uint64_t)(budget_left(w, start) > 0 ? w->budget_ns : 0);
        if (deadline == start &&
            !atomic_load_explicit(&w->paused_flag, memory_order_relaxed))
                return false;
        uv_mutex_lock(&w->mu);
        for (;;) {
                room = w->staged + n - w->consumed <= RING_SIZE;
                if (room)
                        break;
                if (w->paused) {
                        take_verdict(w, on_verdict);
                        continue;
                }
                now = uv_hrtime();
                if (now >= deadline)
                        break;
                w->loop_waiting = true;
                (void)uv_cond_timedwait(&w->progress, &w->mu, deadline - now);
                w->loop_waiting = false;
        }
        w->consumed_seen = w->consumed;
        uv_mutex_unlock(&w->mu);
        w->budget_ns -= (int64_t)(uv_hrtime() - start);
        return room;
}

void hp_rulewatch__thread_push(struct hp_rule_thread *w, int rank,
                               const char *line, size_t len, uint64_t now,
                               void (*on_verdict)(struct hp_rulewatch *watch,
                                                  int rank))
{
        size_t need = padded(len), pos = w->staged % RING_SIZE;
        size_t skip = RING_SIZE - pos < need ? RING_SIZE - pos : 0;
        struct record *r;

        /* Room for the record, and for the unused end of the ring when it
         * does not fit there. Publishing first: the thread may be waiting
         * for exactly what is staged. */
        if (w->staged + skip + need - w->consumed_seen > RING_SIZE) {
                hp_rulewatch__thread_publish(w);
                w->consumed_seen = atomic_load_explicit(&w->done,
                                                        memory_order_acquire);
                if (w->staged + skip + need - w->consumed_seen > RING_SIZE &&
                    !make_room(w, skip + need, on_verdict)) {
                        w->skipped++;
                        return;
                }
        }
        if (skip > 0) {
                if (skip >= sizeof(*r)) {
                        r = (struct record *)(w->ring + pos);
                        r->rank = RECORD_WRAP;
                }
                w->staged += skip;
                pos = 0;
        }
        r = (struct record *)(w->ring + pos);
        r->len = (uint32_t)len;
        r->rank = rank;
        r->now = now;
        memcpy(r + 1, line, len);
        w->staged += need;
        if (w->staged - w->handed >= HANDOVER_BYTES)
                hp_rulewatch__thread_publish(w);
}

void hp_rulewatch__thread_settle(
        struct hp_rule_thread *w,
        void (*on_verdict)(struct hp_rulewatch *watch, int rank),
        bool *deadline_earlier)
{
        uint64_t start, deadline;
        int64_t left;

        *deadline_earlier = false;
        /* A verdict's handler that settles again finds the thread stopped
         * for the outer one: the streams are the loop's already. */
        if (w->settling)
                return;
        w->settling = true;
        hp_rulewatch__thread_publish(w);
        start = uv_hrtime();
        left = budget_left(w, start);
        deadline = start + (uint64_t)(left > 0 ? left : 0);
        uv_mutex_lock(&w->mu);
        for (;;) {
                if (w->paused) {
                        take_verdict(w, on_verdict);
                } else if (w->consumed != w->published) {
                        uint64_t now = uv_hrtime();

                        /* Out of budget: the thread drops the rest after
                         * the line in hand, which the PCRE2 limits bound,
                         * and is waited for without a deadline. */
                        if (now >= deadline && !w->discard) {
                                w->discard = true;
                                atomic_store_explicit(&w->discard_flag, true,
                                                      memory_order_relaxed);
                        }
                        w->loop_waiting = true;
                        if (w->discard)
                                uv_cond_wait(&w->progress, &w->mu);
                        else
                                (void)uv_cond_timedwait(&w->progress, &w->mu,
                                                        deadline - now);
                        w->loop_waiting = false;
                } else {
                        break;
                }
        }
        *deadline_earlier = w->deadline_earlier;
        w->deadline_earlier = false;
        w->consumed_seen = w->consumed;
        w->skipped += w->discarded;
        w->discarded = 0;
        uv_mutex_unlock(&w->mu);
        log_changes(w);
        w->budget_ns -= (int64_t)(uv_hrtime() - start);
        w->settling = false;
}

void hp_rulewatch__thread_set(struct hp_rule_thread *w, uint64_t armed,
                              bool verdict_taken)
{
        uv_mutex_lock(&w->mu);
        w->armed = armed;
        w->verdict_taken = verdict_taken;
        uv_mutex_unlock(&w->mu);
}

uint64_t hp_rulewatch__thread_skipped(const struct hp_rule_thread *w)
{
        return w->skipped;
}

void hp_rulewatch__thread_free(struct hp_rule_thread *w)
{
        if (w == NULL)
                return;
        uv_mutex_lock(&w->mu);
        w->stop = true;
        /* A slow rule must not hold up the end: the line in hand is
         * finished, the rest dropped. */
        atomic_store_explicit(&w->discard_flag, true, memory_order_relaxed);
        uv_cond_signal(&w->work);
        uv_mutex_unlock(&w->mu);
        uv_thread_join(&w->thread);
        log_changes(w);
        uv_cond_destroy(&w->progress);
        uv_cond_destroy(&w->work);
        uv_mutex_destroy(&w->mu);
        free(w->changes);
        free(w->ring);
        free(w);
}
