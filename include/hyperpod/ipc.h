/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the worker socket (agent ↔ worker IPC) and checkpoint
 * discovery, wire-compatible with the reference's client library. */
#ifndef HYPERPOD_IPC_H
#define HYPERPOD_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include <cjson/cJSON.h>
#include <uv.h>

/* The variable that tells every worker and hook where the socket is. */
#define HP_IPC_ENV "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"

/* The largest frame body accepted: a longer length prefix closes that
 * connection. Four times the largest message the reference's framer is
 * tested with, far above any real message. */
#define HP_IPC_FRAME_MAX (4u << 20)
/* Replies queued for a client that does not read them: past this the
 * connection is closed rather than growing the agent's memory. */
#define HP_IPC_QUEUE_MAX (4u << 20)
/* Connections at once, at most: fewer when the open-files limit is low
 * (hp_ipc_conn_limit). Past the cap a new connection closes the one that
 * has been idle the longest without registering a client; when every
 * connection has a client, the new one is closed. */
#define HP_IPC_CONN_MAX 4096
/* Descriptors the worker socket leaves to the rest of the agent whatever
 * its clients do: the loop, consoles, the streams' hub, the kernel log,
 * the HTTP server's connections and the files the agent writes ... */
#define HP_IPC_FD_RESERVE 128
/* ... and, per local rank, its pipes (both ends while it is spawned), its
 * pidfd, its log files and the hang report's pipes and sockets. */
#define HP_IPC_FD_PER_RANK 16
/* Connections allowed however low the limit: two per rank and a few for
 * hooks and tools. */
#define HP_IPC_CONN_FLOOR(nranks) (2 * (size_t)(nranks) + 8)
/* Bytes held for unfinished frames over all connections: past this the
 * connection holding the most (one that registered no client first) is
 * closed, so stalled frames cannot grow the agent without bound. */
#define HP_IPC_PARTIAL_MAX (64u << 20)
/* Message types the server can route (the table's size). */
#define HP_IPC_HANDLERS_MAX 16
/* Warnings logged per connection before it is muted: a client sending
 * garbage in a loop must not flood the agent's stderr. */
#define HP_IPC_WARN_MAX 5

/* ---- The framer (pure) ----
 * A 4-byte unsigned big-endian length, then that many bytes. */

struct hp_ipc_framer {
        uint8_t head[4];
        size_t head_have;
        uint32_t need; /* body length of the frame being read */
        char *body;
        size_t have;
        size_t alloc;
        size_t max; /* largest body accepted */
};

void hp_ipc_framer_init(struct hp_ipc_framer *f, size_t max);
void hp_ipc_framer_free(struct hp_ipc_framer *f);
/*
 * Feeds bytes; calls on_frame for each complete frame (the body is
 * borrowed for the call). A non-zero return from on_frame stops feeding
 * and is returned. Returns 0, HP_ETOOBIG when a length prefix exceeds
 * max (*too_big gets it), or -ENOMEM.
 */
int hp_ipc_framer_feed(struct hp_ipc_framer *f, const char *data, size_t len,
                       int (*on_frame)(void *ctx, const char *body,
                                       size_t len),
                       void *ctx, uint32_t *too_big);
/* Writes the 4-byte prefix for a body of len bytes. */
void hp_ipc_frame_head(uint8_t head[4], uint32_t len);

/* ---- Checkpoint discovery (pure: takes now, no clock, no I/O) ---- */

#define HP_CKPT_TYPES_MAX 8
#define HP_CKPT_TYPE_NAME_MAX 64
/* Incomplete steps remembered at once; past this the lowest is dropped. */
#define HP_CKPT_STEPS_MAX 1024
#define HP_CKPT_PATH_MAX 4096
#define HP_CKPT_PREFIX_MAX 4096

struct hp_ckpt_step {
        int64_t step;
        char *path;      /* NULL: no path reported yet */
        uint64_t *ranks; /* HP_CKPT_TYPES_MAX bitmaps of words each */
        int count[HP_CKPT_TYPES_MAX];
};

/* /start's progress for one prefix. */
struct hp_ckpt_seed {
        char *prefix;
        char *path;
        int64_t step;
        bool fresh; /* not yet applied by a ckpt_init */
};

struct hp_ckpt_type_count {
        const char *name;
        int expected; /* -1: null (the step can never complete) */
};

struct hp_ckpt {
        int nranks;   /* local ranks 0..nranks-1 may report */
        size_t words; /* 64-bit words per rank bitmap */
        char *prefix; /* NULL until the first ckpt_init */
        int ntypes;
        char type_name[HP_CKPT_TYPES_MAX][HP_CKPT_TYPE_NAME_MAX];
        int expected[HP_CKPT_TYPES_MAX];
        struct hp_ckpt_step *steps;
        size_t nsteps;
        bool have_max; /* the latest complete step is known */
        int64_t max_step;
        char *max_path;     /* may be NULL: complete with no path */
        uint64_t max_at_ms; /* when it became known */
        struct hp_ckpt_seed *seeds;
        size_t nseeds;
};

int hp_ckpt_init(struct hp_ckpt *t, int nranks);
void hp_ckpt_free(struct hp_ckpt *t);
/*
 * Stores /start's progress ({prefix: {"progressCount": int,
 * "progressData": str}}; borrowed). The next ckpt_init for a prefix in it
 * starts from that step and path. Entries that are not of that shape are
 * skipped with a warning naming them. NULL or {} (a /start without
 * progress) starts no prefix anew: the tracker keeps what it knows.
 */
int hp_ckpt_set_progress(struct hp_ckpt *t, const cJSON *progress);
/*
 * ckpt_init: a new prefix replaces the types and forgets the steps (and
 * starts from its /start progress, if any); the same prefix merges the
 * non-null counts. Returns 0, HP_ECONFIG (errbuf says why) or -ENOMEM.
 */
int hp_ckpt_begin(struct hp_ckpt *t, const char *prefix,
                  const struct hp_ckpt_type_count *types, int ntypes,
                  uint64_t now_ms, char *errbuf, size_t errlen);
/*
 * ckpt_info_update from local rank `rank`. path may be NULL (keeps the
 * step's path). Returns 1 when this made `step` the latest complete one,
 * 0 when recorded (or older than the latest complete step, ignored),
 * HP_ECONFIG (errbuf says why) or -ENOMEM.
 */
int hp_ckpt_update(struct hp_ckpt *t, int rank, int64_t step,
                   const char *path, const char *type, uint64_t now_ms,
                   char *errbuf, size_t errlen);
/*
 * ckpt_info_get: the latest complete step's path (borrowed; NULL when
 * none, or when it has no path). Forgets incomplete steps above it, or all
 * steps when there is none, as the reference does on every query.
 */
const char *hp_ckpt_latest(struct hp_ckpt *t);
/* /status.progress: {prefix: {"progressData": path, "progressCount":
 * step}}, or NULL when no complete step is known (or on ENOMEM). */
cJSON *hp_ckpt_progress(const struct hp_ckpt *t);

/* ---- In-process restart: the per-rank worker table (pure) ----
 * What each local rank said over the socket
 * (docs/inprocess-restart-and-checkpoints.md): where it is with the
 * barrier, whether it reported a fault (reason, message, restart mode),
 * the data it left for the operator, and the node's labels. */

enum hp_restart_mode {
        HP_RESTART_IN_PROCESS = 0,      /* in_process_restart */
        HP_RESTART_PROCESS_LEVEL,       /* process_level_restart */
        HP_RESTART_JOB_LEVEL,           /* job_level_restart */
        HP_RESTART_LOCAL_PROCESS_LEVEL, /* local_process_level_restart */
        HP_RESTART_MODE_COUNT
};

/* The wire names above. */
const char *hp_restart_mode_name(enum hp_restart_mode mode);
/* A wire name to its mode; -EINVAL for anything else. */
int hp_restart_mode_parse(const char *name, enum hp_restart_mode *out);

enum hp_ipc_rank_state {
        HP_IPC_RANK_HEALTHY = 0,  /* running, or not heard from */
        HP_IPC_RANK_AT_BARRIER,   /* counted at the barrier */
        HP_IPC_RANK_PAST_BARRIER, /* sent past_rcb_barrier */
        HP_IPC_RANK_FAILED,       /* sent job_fault */
};

const char *hp_ipc_rank_state_name(enum hp_ipc_rank_state state);

struct hp_ipc_rank {
        enum hp_ipc_rank_state state;
        /* at_rcb_barrier arrived while the agent was not waiting for the
         * barrier: it counts once the agent waits, as the reference's
         * queue does, and a job_start forgets it. */
        bool queued;
        /* Sent at_rcb_barrier and got no job_start since: the rank waits
         * at the barrier, whatever it said after (a job_fault), so a
         * pause counts it there at once. */
        bool held;
        /* Got job_start and sent no at_rcb_barrier since: only such a
         * rank may be past the barrier. */
        bool released;
        bool failed;        /* shown in worker_data */
        int64_t rank;       /* global rank, -1: unknown */
        int64_t group_rank; /* rank // nproc, -1: unknown */
        enum hp_restart_mode mode;
        char *reason;  /* NULL: none */
        char *message; /* NULL: none */
        cJSON *data;   /* NULL: none */
};

struct hp_ipc_ranks {
        int nranks;
        struct hp_ipc_rank *ranks;
        cJSON *labels; /* the last rank_labels, {} at first */
        bool waiting;  /* the agent waits for the barrier */
};

int hp_ipc_ranks_init(struct hp_ipc_ranks *t, int nranks);
void hp_ipc_ranks_free(struct hp_ipc_ranks *t);
/* at_rcb_barrier from a local rank (0 <= lr < nranks, checked by the
 * caller): counted at once while waiting, else queued; the rank is held
 * at the barrier until a job_start releases it. */
void hp_ipc_ranks_at_barrier(struct hp_ipc_ranks *t, int lr);
/* The agent starts waiting for the barrier: queued and held ranks count
 * now. Returns how many count at once. */
int hp_ipc_ranks_wait_begin(struct hp_ipc_ranks *t);
void hp_ipc_ranks_wait_end(struct hp_ipc_ranks *t);
/* job_start went to local rank lr: no longer held, released. */
void hp_ipc_ranks_release(struct hp_ipc_ranks *t, int lr);
/* past_rcb_barrier: PAST_BARRIER, data forgotten, mode back to
 * in_process_restart, failed cleared. Only from a released rank: from
 * any other (a second client, a call twice, a call before job_start) it
 * changes nothing and returns -EPROTO. */
int hp_ipc_ranks_past_barrier(struct hp_ipc_ranks *t, int lr);
/* "0, 2, 3" into buf: the local ranks whose state is (not, when !is)
 * state. Returns how many. */
int hp_ipc_ranks_list(const struct hp_ipc_ranks *t,
                      enum hp_ipc_rank_state state, bool is, char *buf,
                      size_t len);
/* job_fault: FAILED with a copy of reason and message (NULL: none). rank
 * is the global rank (-1 unknown); group_rank = rank // nproc. Returns 0
 * or -ENOMEM (the rank is FAILED all the same). */
int hp_ipc_ranks_fail(struct hp_ipc_ranks *t, int lr, int64_t rank,
                      enum hp_restart_mode mode, const char *reason,
                      const char *message);
/* job_data: data is copied (NULL or null: none). Returns 0 or -ENOMEM. */
int hp_ipc_ranks_set_data(struct hp_ipc_ranks *t, int lr, int64_t rank,
                          const cJSON *data);
/* What job_start or job_rank_info told the rank. */
void hp_ipc_ranks_set_rank_info(struct hp_ipc_ranks *t, int lr, int64_t rank,
                                int64_t group_rank);
/* rank_labels: replaces the labels (copied), kept across resets. */
int hp_ipc_ranks_set_labels(struct hp_ipc_ranks *t, const cJSON *labels);
/* Before a job_start (clear_data false) or at a full stop (true): every
 * rank HEALTHY with no fault, no queued barrier message, neither held
 * nor released, ranks unknown; data is kept unless clear_data. */
void hp_ipc_ranks_reset(struct hp_ipc_ranks *t, bool clear_data);
bool hp_ipc_ranks_all_at_barrier(const struct hp_ipc_ranks *t);
bool hp_ipc_ranks_any_failed(const struct hp_ipc_ranks *t);
/* A failed rank asked for local_process_level_restart. */
bool hp_ipc_ranks_local_plr(const struct hp_ipc_ranks *t);
/* The restart mode /status shows instead of in_process_restart:
 * job_level_restart over process_level_restart, or -1 for none. */
int hp_ipc_ranks_operator_mode(const struct hp_ipc_ranks *t);
/* /status worker_data: [{"rank","group_rank","local_rank","failed",
 * "data"}] for each rank with data, in local-rank order; NULL when none
 * has any (or on ENOMEM, errno set). */
cJSON *hp_ipc_ranks_worker_data(const struct hp_ipc_ranks *t);
/* docs/inprocess-restart-and-checkpoints.md ("One cycle", step 3): the
 * fault's reason and message from the first failed rank (local-rank order)
 * with a non-empty reason, else WorkerReportedFault and the failed global
 * ranks. 0, or -ENOENT when no rank failed. */
int hp_ipc_ranks_fault(const struct hp_ipc_ranks *t, char *reason,
                       size_t reason_len, char *message, size_t message_len);

/* ---- The server (on the loop) ---- */

struct hp_ipc_server;
struct hp_ipc_conn;

/* One client object of a worker (several may share a connection). */
struct hp_ipc_client {
        struct hp_ipc_client *next; /* in its connection */
        struct hp_ipc_conn *conn;
        int local_rank;
        char id[];
};

/* A message handler: msg is the whole message (type, client_id and
 * local_rank included), borrowed for the call. */
typedef void (*hp_ipc_handler_fn)(struct hp_ipc_server *s,
                                  struct hp_ipc_client *c, const cJSON *msg,
                                  void *ctx);

struct hp_ipc_handler {
        const char *type;
        hp_ipc_handler_fn fn;
        void *ctx;
};

struct hp_ipc_stats {
        uint64_t messages;        /* well-formed messages handled */
        uint64_t ignored;         /* messages refused (logged) */
        uint64_t rejected_frames; /* frames over the cap */
        uint64_t connections;     /* accepted, all time */
        uint64_t closed_slow;     /* closed: replies not read */
        uint64_t evicted;         /* closed for a newer connection */
        uint64_t refused;         /* closed at once: all had clients */
        uint64_t closed_partial;  /* closed: unfinished frames too big */
};

struct hp_ipc_server {
        uv_loop_t *loop;
        uv_pipe_t listener;
        bool started;
        int nranks;
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
        /* The private directory the socket is in when the reference's
         * path was taken; "" when none. */
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        struct hp_ckpt ckpt;
        struct hp_ipc_handler handlers[HP_IPC_HANDLERS_MAX];
        size_t nhandlers;
        struct hp_ipc_conn *conns;
        size_t nconns;
        size_t conn_max;      /* hp_ipc_conn_limit at start */
        size_t partial_bytes; /* held for unfinished frames, in all */
        bool evicting;        /* the cap was hit: logged once */
        bool shedding;        /* partial_bytes hit the cap: logged */
        size_t nclients;
        struct hp_ipc_stats stats;
        /* In-process restart (hp_ipc_inprocess_enable): the worker table,
         * and who is told when a message changed it or a connection
         * with clients closed. */
        struct hp_ipc_ranks ranks;
        void (*on_change)(void *ctx);
        void *change_ctx;
        /* Told of each client of a closing connection, before it is
         * freed (hp_ipc_server_on_gone); NULL: nobody. */
        void (*on_gone)(void *ctx, const struct hp_ipc_client *c);
        void *gone_ctx;
        char read_buf[65536]; /* one read at a time on the loop */
};

/* The connection cap for a soft RLIMIT_NOFILE of soft and nranks local
 * ranks (pure): HP_IPC_CONN_MAX, less when the limit leaves fewer
 * descriptors than HP_IPC_FD_RESERVE and HP_IPC_FD_PER_RANK per rank
 * need, never below HP_IPC_CONN_FLOOR. */
size_t hp_ipc_conn_limit(uint64_t soft, int nranks);

/*
 * Listens on <tempdir>/hyperpod_elastic_agent_<pid>.sock (TMPDIR, TEMP or
 * TMP, else /tmp, as Python's tempfile picks), mode 0600. A stale socket,
 * file or link of this uid there is unlinked first; anything else there
 * (another uid's, a directory, a socket something listens on) is left
 * alone, and the socket goes in a directory of its own made beside it
 * instead, <tempdir>/hyperpodrun-ipc-<pid>.XXXXXX (0700), with a warning;
 * s->path says where. Local ranks 0..nranks-1 may register. Registers the
 * checkpoint handlers. On failure errbuf names the path and the reason
 * and nothing is left open.
 */
int hp_ipc_server_start(struct hp_ipc_server *s, uv_loop_t *loop, int nranks,
                        char *errbuf, size_t errlen);
/* Closes every connection and the listener and unlinks the path; the
 * loop must then run for the close callbacks. Safe when not started. */
void hp_ipc_server_close(struct hp_ipc_server *s);
/* Routes messages of `type` to fn. Returns 0, -EEXIST or -ENOSPC. */
int hp_ipc_server_on(struct hp_ipc_server *s, const char *type,
                     hp_ipc_handler_fn fn, void *ctx);
/* gone(ctx, c) runs for each client of a connection as it closes, before
 * c is freed: c may be compared, not kept. gone must not close
 * connections. One listener; NULL removes it. */
void hp_ipc_server_on_gone(struct hp_ipc_server *s,
                           void (*gone)(void *ctx,
                                        const struct hp_ipc_client *c),
                           void *ctx);
/* Sends {payload..., "type", "client_id"} to one client; payload is
 * borrowed and may be NULL. Never blocks. Returns 0 or an error (the
 * connection is closed when its unread replies pass HP_IPC_QUEUE_MAX). */
int hp_ipc_send(struct hp_ipc_server *s, struct hp_ipc_client *c,
                const char *type, const cJSON *payload);
/* Sends to every client of a local rank. Returns the number sent to,
 * -ENOENT when the rank has none, or the first error. */
int hp_ipc_send_to_rank(struct hp_ipc_server *s, int local_rank,
                        const char *type, const cJSON *payload);
/* Sends to every client. Returns the number sent to, or the first error
 * (the others are still sent to). */
int hp_ipc_broadcast(struct hp_ipc_server *s, const char *type,
                     const cJSON *payload);
/* Registered clients of a local rank. */
int hp_ipc_rank_clients(const struct hp_ipc_server *s, int local_rank);
/* Closes every connection (a full stop: the workers are going). */
void hp_ipc_drop_clients(struct hp_ipc_server *s);

/* ---- In-process restart's messages ----
 * (docs/inprocess-restart-and-checkpoints.md, "One cycle")
 * Registers at_rcb_barrier, past_rcb_barrier, job_data, job_fault and
 * rank_labels, which update s->ranks; on_change(ctx) runs after each of
 * them and after a connection with clients closed (NULL: nobody told).
 * A message with a bad field is ignored with a warning naming it, except
 * a job_fault, which counts for its local rank whatever else is wrong
 * with it: a fault is never lost. Returns 0 or an error. */
int hp_ipc_inprocess_enable(struct hp_ipc_server *s,
                            void (*on_change)(void *ctx), void *ctx);
/* Nobody is told any more (the operator is closing). */
void hp_ipc_inprocess_disable(struct hp_ipc_server *s);

#endif
