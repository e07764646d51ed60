/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: rank liveness beyond log lines — heartbeats, timed sections
 * and stragglers, as nvidia-resiliency-ext's RankMonitorClient reports
 * them, watched on the agent's loop.
 *
 * A worker's client writes its heartbeats and section changes into a slot
 * of a shared-memory segment the agent made (no system call, no wait); the
 * worker socket carries only the rare messages (ft_init, ft_timeouts,
 * ft_shutdown). The agent reads a slot only when one of its deadlines
 * comes: one timer, armed for the earliest deadline of all ranks. */
#ifndef HYPERPOD_FTMON_H
#define HYPERPOD_FTMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "hyperpod/config.h"
#include "hyperpod/ipc.h"

/* ---- The shared slot (the wire format between client and agent) ----
 * One slot of HP_FT_SLOT_WORDS native 64-bit words per local rank, at
 * local_rank * HP_FT_SLOT_BYTES. Only the rank's client writes its slot,
 * each word whole; the agent only reads. Times are CLOCK_MONOTONIC
 * nanoseconds (Python's time.monotonic_ns()), 0 meaning "none". */
enum hp_ft_word {
        HP_FT_W_INIT_NS = 0,  /* init_workload_monitoring() ran */
        HP_FT_W_HB_COUNT = 1, /* heartbeats sent */
        HP_FT_W_HB_NS = 2,    /* the latest heartbeat */
        HP_FT_W_OOS_NS = 3,   /* no section open since; 0: one is open */
        HP_FT_W_STEPS = 4,    /* "step" sections ended */
        HP_FT_W_SECTION0 = 8, /* + i: section i open since; 0: closed */
};
#define HP_FT_SLOT_WORDS 64
#define HP_FT_SLOT_BYTES (HP_FT_SLOT_WORDS * 8)
_Static_assert(HP_FT_W_SECTION0 + HP_FT_SECTIONS_MAX <= HP_FT_SLOT_WORDS,
               "every section has a word in the slot");

/* ---- The deadlines of one rank (pure: takes now, reads no clock) ---- */

/* A rank's timeouts in ms; 0: not used (ft's None). */
struct hp_ft_timeouts {
        uint64_t initial_ms;    /* init → first heartbeat */
        uint64_t subsequent_ms; /* heartbeat → heartbeat */
        uint64_t oos_ms;        /* no section open */
        uint64_t section_ms[HP_FT_SECTIONS_MAX];
};

/* What a rank's slot said, on the caller's ms clock; 0: none. */
struct hp_ft_view {
        uint64_t init_ms;
        uint64_t hb_count;
        uint64_t hb_ms;
        uint64_t oos_ms;
        uint64_t section_ms[HP_FT_SECTIONS_MAX];
};

enum hp_ft_miss {
        HP_FT_OK = 0,
        HP_FT_MISS_INITIAL,        /* no first heartbeat in time */
        HP_FT_MISS_HEARTBEAT,      /* no heartbeat in time */
        HP_FT_MISS_SECTION,        /* a section open too long */
        HP_FT_MISS_OUT_OF_SECTION, /* no section open too long */
        HP_FT_MISS_COUNT
};

const char *hp_ft_miss_name(enum hp_ft_miss miss);

struct hp_ft_judgement {
        enum hp_ft_miss miss;
        int section;       /* HP_FT_MISS_SECTION: which */
        uint64_t since_ms; /* what the timeout counts from */
        uint64_t timeout_ms;
        uint64_t deadline_ms; /* since + timeout */
};

/*
 * Judges one rank at now: a passed deadline (the earliest, when several
 * passed) goes to *out and UINT64_MAX is returned; otherwise out->miss is
 * HP_FT_OK and the result is when to look again: the earliest deadline,
 * or sooner, the shortest timeout of what is not running yet (a section
 * not open, out-of-section while one is open), so a section that opens
 * after now is seen before it can overrun. UINT64_MAX: never (no init,
 * or no timeout set).
 */
uint64_t hp_ft_judge(const struct hp_ft_timeouts *t, int nsections,
                     const struct hp_ft_view *v, uint64_t now_ms,
                     struct hp_ft_judgement *out);

/* ---- Stragglers (pure) ----
 * Each window the caller passes every rank's progress count (heartbeats,
 * else ended "step" sections); a rank's rate is its count's growth over
 * the window, its relative speed that rate over the median rate of the
 * ranks that report. A rank below ratio for `windows` windows running is
 * a straggler, flagged once until it recovers. */

#define HP_FT_NO_COUNT UINT64_MAX /* the rank does not report */

struct hp_ft_stragglers {
        int nranks;
        double ratio; /* 0: off */
        int windows;
        uint64_t last_ms; /* the previous window's end, 0: none */
        uint64_t *last;   /* per rank: the count then */
        int *below;       /* windows below ratio running */
        bool *flagged;
        double *speed; /* relative speed, < 0: not known */
        double *scratch;
};

int hp_ft_stragglers_init(struct hp_ft_stragglers *s, int nranks,
                          double ratio, int windows);
void hp_ft_stragglers_free(struct hp_ft_stragglers *s);
/* Forgets the windows (a new attempt). */
void hp_ft_stragglers_reset(struct hp_ft_stragglers *s);
/*
 * Ends a window at now with counts[nranks] (HP_FT_NO_COUNT: not
 * reporting). Updates each rank's speed; returns the first rank that
 * became a straggler in this window (newly[] gets every such rank, true),
 * or -1.
 */
int hp_ft_stragglers_window(struct hp_ft_stragglers *s,
                            const uint64_t *counts, uint64_t now_ms,
                            bool *newly);

/* ---- The watch (on the loop) ---- */

enum hp_ft_verdict_kind {
        HP_FT_VERDICT_MISS = 0,  /* a deadline passed */
        HP_FT_VERDICT_STRAGGLER, /* --straggler-action verdict */
};

struct hp_ft_verdict {
        enum hp_ft_verdict_kind kind;
        struct hp_ft_judgement j;
        char section[HP_FT_SECTION_NAME_MAX + 1]; /* "" unless a section */
        int local_rank;
        int64_t rank;        /* global, -1: not known */
        double speed;        /* a straggler's relative speed */
        uint64_t seen_ms;    /* loop ms when judged */
        uint64_t latency_us; /* judged this long past the deadline */
};

struct hp_ftmon_rank {
        bool active;  /* ft_init seen, no shutdown since */
        int64_t rank; /* global, -1: not known */
        /* The client that registered, compared only (never followed):
         * its connection closing ends the rank's watch. */
        const struct hp_ipc_client *client;
        uint64_t floor_ms; /* slot times before it count from it */
        struct hp_ft_timeouts t;
};

struct hp_ftmon {
        uv_loop_t *loop;
        const struct hp_config *cfg;
        int nranks;
        uv_timer_t timer;  /* the earliest deadline */
        uv_timer_t window; /* straggler windows */
        bool started;
        bool judging;      /* off after a verdict, until a reset */
        uint64_t armed_ms; /* when timer fires, UINT64_MAX: idle */
        struct hp_ft_timeouts defaults; /* the flags' */
        struct hp_ftmon_rank *ranks;
        struct hp_ft_stragglers strag;
        uint64_t *counts; /* scratch: one window's counts */
        bool *newly;
        /* The segment: a file in a private directory of its own. */
        volatile uint64_t *shm;
        size_t shm_len;
        int fd; /* the slots file, flock()ed while we live */
        char dir[256];
        char path[300];
        uint64_t checks; /* timer wakeups, for the benchmark */
        void (*on_verdict)(void *ctx, const struct hp_ft_verdict *v);
        void *ctx;
};

/*
 * Makes the segment for nranks local ranks (mode 0600 in a new 0700
 * directory under /dev/shm, else TMPDIR; a dead agent's left there is
 * removed first) and the timers. cfg (borrowed,
 * outlives m) gives the --ft-* and --straggler-* values; on_verdict gets
 * the first passed deadline (or straggler, when asked) after each
 * hp_ftmon_reset. errbuf says why on failure; nothing is left open.
 */
int hp_ftmon_init(struct hp_ftmon *m, uv_loop_t *loop,
                  const struct hp_config *cfg, int nranks,
                  void (*on_verdict)(void *ctx,
                                     const struct hp_ft_verdict *v),
                  void *ctx, char *errbuf, size_t errlen);
/* Routes ft_init, ft_timeouts and ft_shutdown of s to m, and a closed
 * connection's ranks stop being judged. Returns 0 or an error. */
int hp_ftmon_attach(struct hp_ftmon *m, struct hp_ipc_server *s);
/* A new attempt: no rank active, every slot zero, judging again. */
void hp_ftmon_reset(struct hp_ftmon *m);
/* Stops judging until the next reset or resume (the workers are going,
 * or wait at in-process restart's barrier). */
void hp_ftmon_pause(struct hp_ftmon *m);
/* Judges again, the registered ranks kept: every clock restarts at now
 * (a heartbeat or section older than now counts from now). In-process
 * restart's next round. */
void hp_ftmon_resume(struct hp_ftmon *m);
/* Closes the timers and removes the segment; the loop must then run. */
void hp_ftmon_close(struct hp_ftmon *m);
/* A local rank's relative speed as of the latest window; false when not
 * known (no straggler detection, or the rank does not report). */
bool hp_ftmon_speed(const struct hp_ftmon *m, int local_rank, double *speed);
/* Whether any rank's client registered in this attempt. */
bool hp_ftmon_any_active(const struct hp_ftmon *m);
/* "rank 3 at 0.25 of the median, ranks 0-2 at 1.0" style, slowest first:
 * the relative speeds, for the hang report. "" when none is known. */
void hp_ftmon_speed_line(const struct hp_ftmon *m, char *buf, size_t len);

#endif
