/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the output path of every worker stream.
 *
 *   pipe ──read──▶ file (every byte, as written)
 *                 ╰▶ line splitter ──▶ console (prefixed, line-atomic, bounded)
 *                                   ╰▶ line listeners (the rule engine)
 *
 * Nothing on this path allocates per line or per read: the read buffer and
 * the partial-line buffer belong to the stream, the console queue is a ring
 * of fixed size.
 *
 * Lines reach the rule engine the moment they are read. The writes are
 * batched by the streams' hub: a steady job's ranks each print a little
 * every few milliseconds, and one write() per read, twice (file and
 * console), cost more than everything else the agent does with the bytes.
 */
#ifndef HYPERPOD_STREAM_H
#define HYPERPOD_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "hyperpod/linesplit.h"

/* One read from a worker pipe: half the largest pipe the agent makes
 * (group.c). Each read that makes room in a full pipe wakes its writer,
 * which Linux puts on the reader's CPU; in a flood the writer refills what
 * was read and sleeps again. Reads of the default pipe size, 64 KiB,
 * would cost two context switches per 64 KiB, twice as many; larger
 * reads gain nothing more and double every stream's buffer. */
#define HP_READ_CHUNK (128 * 1024)
/* A read at least this large says the writer is fast (see
 * HP_READ_PACE_MS): half a pipe of the default size, which never holds
 * 64 KiB of lines written one by one (each write leaves the end of a page
 * unused when the next does not fit). */
#define HP_READ_FAST (32 * 1024)
/* A stream's read buffer is also its log file's write buffer: reads land
 * after the bytes not yet written, and the file gets them in one write
 * once less than a read's worth of room is left. */
#define HP_STREAM_BUFFER (2 * HP_READ_CHUNK)

/* The longest that output waits in the agent before it is written: lines
 * for the console (a person or a log collector reads them; 10 ms lets one
 * write carry the reads of every rank of a steady job), and bytes for a
 * log file (read after the fact; 100 ms makes its writes ten times fewer
 * and larger). Everything is written at once when a stream ends, and the
 * consoles whenever the agent reports on the workers. */
#define HP_CONSOLE_DELAY_MS 10
#define HP_FILE_DELAY_MS 100
/* While the workers write small pieces more often than this, the pipes
 * are read every HP_READ_PACE_MS instead of once per write, so that one
 * wakeup reads many ranks. The first bytes after a quiet spell are read at
 * once, and a read of HP_READ_FAST or more (a fast writer) ends the
 * pacing for HP_READ_UNPACED_MS: a line waits at most HP_READ_PACE_MS to
 * be read and seen by the rules, and a worker blocks on a full pipe at
 * most that long, once per burst. 10 ms rather than 5 halves the wakeups
 * of a steady job, which are most of its CPU time; rule deadlines
 * read the pipes first (hp_stream_hub_read_now), so only verdicts that a
 * line brings can come that much later. */
#define HP_READ_PACE_MS 10
#define HP_READ_UNPACED_MS 1000

/* A direct console's memory, cap bytes, is this many buffers of
 * cap / HP_CONSOLE_BUFFERS: in a flood the loop fills one while the
 * console's thread writes the others. With only two (one filling, one
 * being written) the loop waits for the write whenever the writer is not
 * running at once, and the loop is the head of the pipeline; with four it
 * does not wait (BENCHMARKS.md). */
#define HP_CONSOLE_BUFFERS 4

/*
 * The console: a bounded byte ring drained into one fd by a writer thread,
 * so that a slow or blocked terminal or pipe never stalls the event loop,
 * and so never the workers. A line is queued whole or not at all; when the
 * ring is full the line is dropped and counted, and a marker line saying how
 * many were lost is queued as soon as there is room again.
 */
struct hp_console;

/* Default memory per console: a threaded console's ring, or a direct
 * console's buffers together. */
#define HP_CONSOLE_RING (4 * 1024 * 1024)
/* A threaded console's writer is woken before the commit once this much
 * waits, so that a fast job keeps the ring from filling between commits. */
#define HP_CONSOLE_BATCH (256 * 1024)
/* The most one write() to a console takes; a full ring or buffer goes out
 * in pieces of this size. A larger write into a regular file makes the
 * kernel (Linux 6.x, ext4) allocate large page-cache folios, and where
 * those are scarce (a VM whose freed memory its host takes back) each
 * costs far more than the bytes. A pipe or a terminal takes no more than
 * 64 KiB a write anyway. */
#define HP_CONSOLE_WRITE_MAX (128 * 1024)

/* Starts the writer thread for fd (borrowed, not closed); a direct
 * console starts one only in a flood. cap: the bytes it may hold (see
 * HP_CONSOLE_BUFFERS for a direct console). */
int hp_console_new(struct hp_console **out, int fd, size_t cap);
/* After hp_console_close: its counts stay readable until then. */
void hp_console_free(struct hp_console *con);
/* Queues prefix + line + "\n" (+ marker before the newline when the line
 * was cut), atomically. Returns true if queued, false if dropped. Queued
 * lines are written at the next commit, or earlier once HP_CONSOLE_BATCH
 * bytes wait. */
bool hp_console_put_line(struct hp_console *con, const char *prefix,
                         size_t prefix_len, const char *line, size_t len,
                         enum hp_line_end end);
/* Queues one of the agent's own messages (msg ends with its newline),
 * from any thread: whole, after the lines queued before it, and woken at
 * once; never blocking, so dropped and counted (as a console line, and
 * in messages_dropped) when the ring is full. A direct console writes it
 * at once. hp_log's sink while the console runs. */
void hp_console_put_message(struct hp_console *con, const char *msg,
                            size_t len);
/* Writes what was queued: a direct console writes its buffer (or hands
 * it to its flood thread), a threaded one wakes its writer. Cheap when
 * nothing was queued. */
void hp_console_commit(struct hp_console *con);
/* As hp_console_commit, but a direct console's lines are in its file
 * when it returns, so that what the agent writes next to another fd (a
 * worker's exit, after its last lines) comes after them where both go to
 * one file. */
void hp_console_commit_ordered(struct hp_console *con);
/* Lines the console lost: dropped because it could not keep up, or
 * lost to a failed write (a full disk, a closed pipe); *error is that
 * write's -errno, or 0. Any thread; also after hp_console_close. */
uint64_t hp_console_lost_lines(struct hp_console *con, int *error);
/* Waits at most timeout_ms until everything queued is written. */
void hp_console_flush(struct hp_console *con, uint64_t timeout_ms);
/* Drains for at most timeout_ms, stops the thread, frees the ring. Lines
 * still queued after the timeout are counted as dropped. */
void hp_console_close(struct hp_console *con, uint64_t timeout_ms);

struct hp_stream_stats {
        uint64_t bytes;
        uint64_t lines;
        uint64_t lines_capped;
        uint64_t console_dropped;
        uint64_t file_lost; /* bytes read that the log file does not hold */
};

/*
 * torchrun's --duplicate-stdout-filters: the lines of the tee'd streams
 * that contain one of a few texts, each with its console prefix, copied
 * into one file for all the ranks (filtered_stdout.log). Streams share
 * one, borrowed; lines are gathered in its buffer and written once per
 * read of a pipe, and at the end of each stream. Written from the loop
 * thread only. The owner embeds it.
 */
#define HP_DUP_NEEDLES 64
#define HP_DUP_BUFFER (HP_LINE_MAX + 1024)
struct hp_dup {
        int fd; /* -1: closed */
        int count;
        const char *needle[HP_DUP_NEEDLES]; /* borrowed */
        size_t needle_len[HP_DUP_NEEDLES];
        int error;           /* first failed write, -errno; then none */
        uint64_t lines;      /* copied */
        uint64_t lines_lost; /* to a failed write */
        size_t used;
        char path[4096]; /* for messages */
        char buf[HP_DUP_BUFFER];
};

/* Creates name in dir_fd (dir: its path, for messages), 0600, refusing a
 * link; the needles (count of them, at most HP_DUP_NEEDLES, each with its
 * length) are borrowed and outlive d. 0 or -errno. */
int hp_dup_open(struct hp_dup *d, int dir_fd, const char *dir,
                const char *name, const char *const *needles,
                const size_t *lens, int count);
/* Copies prefix + line + "\n" when the line contains a needle. */
void hp_dup_line(struct hp_dup *d, const char *prefix, size_t prefix_len,
                 const char *line, size_t len);
/* Writes what was gathered. */
void hp_dup_flush(struct hp_dup *d);
/* Flushes and closes; says how many lines a failed write lost. */
void hp_dup_close(struct hp_dup *d);

struct hp_stream;
typedef void (*hp_stream_closed_cb)(struct hp_stream *s);

/*
 * What the streams of one loop share. Their pipes are watched by an epoll
 * set of the hub's own, which the loop watches as one fd: one wakeup then
 * reads every ready pipe, and pacing stops and starts one watcher, not one
 * per pipe. One timer (each subsystem owns one, armed at the earliest
 * deadline) runs the paced reads, writes the consoles HP_CONSOLE_DELAY_MS
 * after their first unwritten line and the log files HP_FILE_DELAY_MS
 * after their first unwritten byte.
 */
struct hp_stream_hub;

/* consoles (borrowed, at most 2) outlive the hub. */
int hp_stream_hub_new(struct hp_stream_hub **out, uv_loop_t *loop,
                      struct hp_console *const *consoles, size_t count);
/* Epoch ms minus loop ms, taken once: ${time} in a console prefix and the
 * log rules' verdict times both map loop ms to the wall clock with it, so
 * a replay of the console can match them to the millisecond. */
int64_t hp_stream_hub_wall_offset_ms(const struct hp_stream_hub *hub);
/* Each console's lines so far go out before what is written next. */
void hp_stream_hub_commit_ordered(struct hp_stream_hub *hub);
/* Writes every stream's unwritten bytes and commits the consoles now. */
void hp_stream_hub_flush(struct hp_stream_hub *hub);
/* Reads what every pipe holds now, paced or not: before anything judges
 * the workers by the lines seen so far (a log rule's deadline), so that a
 * line written in time is not judged missing for sitting in a pipe. */
void hp_stream_hub_read_now(struct hp_stream_hub *hub);
/* Flushes, then closes the handles (the loop must run once for them);
 * the last close callback frees the hub. Every stream is closed already. */
void hp_stream_hub_close(struct hp_stream_hub *hub);

/* The longest console prefix, with its NUL. */
#define HP_STREAM_PREFIX_MAX 256

/*
 * One worker stream: the read end of a pipe, the file it is written to (or
 * -1), the console it is echoed to (or NULL) with its prefix, and one line
 * listener (or NULL). The owner embeds it and is told by closed_cb when the
 * pipe handle is closed, after EOF and the final partial line.
 */
struct hp_stream {
        uv_pipe_t pipe;
        struct hp_stream_hub *hub;
        struct hp_stream *dirty_prev, *dirty_next; /* in hub->dirty */
        int file_fd;
        struct hp_console *console;
        char prefix[HP_STREAM_PREFIX_MAX];
        size_t prefix_len;
        bool prefixed; /* tee'd: console lines carry the prefix */
        /* Where ${time} sits in prefix (HP_ISO8601_MS_LEN bytes, written
         * when a line goes out at a new loop ms), or -1. */
        int time_at;
        uint64_t time_stamped;
        hp_line_cb listener;
        void *listener_ctx;
        struct hp_dup *dup; /* borrowed: filtered copies, or NULL */
        hp_stream_closed_cb closed_cb;
        void *data; /* the owner's */
        bool open;
        bool reading; /* in the hub's epoll set */
        int error;    /* first file write or read error, -errno */
        /* The log file's write failed (a full disk): it is not written
         * again, and keeps its first file_kept bytes, whole lines only
         * (see file_write_out). */
        bool file_failed;
        uint64_t file_kept;     /* bytes in the file */
        uint64_t file_line_end; /* after the file's last newline */
        char file_path[4096];   /* for messages; "" if none was named */
        int rank;               /* for messages: the local rank */
        struct hp_stream_stats stats;
        /* Loop ms of the last read that brought bytes, or of init: when
         * the worker last wrote, for a hang report. */
        uint64_t last_read;
        struct hp_linesplit split;
        size_t unwritten; /* bytes at the start of buf not in the file yet */
        char line[HP_LINE_MAX];
        char buf[HP_STREAM_BUFFER];
};

/* What a stream is made with. */
struct hp_stream_opts {
        hp_stream_closed_cb closed_cb;
        void *data; /* the owner's, for closed_cb */
        int rank;   /* for messages: the local rank */
};

/* Where a stream's bytes and lines go; what is not named is off. */
struct hp_stream_output {
        int file_fd;           /* the log file, owned by the caller; -1 */
        const char *file_path; /* for messages; NULL: none named */
        struct hp_console *console; /* NULL: not echoed */
        bool prefixed;              /* console lines carry the prefix */
        hp_line_cb listener;        /* NULL: none */
        void *listener_ctx;
        struct hp_dup *dup; /* borrowed: filtered copies, or NULL */
};

/* Initialises the pipe handle on the hub's loop with everything off
 * (no file, console, listener or prefix); pass its uv_stdio_container
 * to uv_spawn, then call hp_stream_start. */
int hp_stream_init(struct hp_stream *s, struct hp_stream_hub *hub,
                   const struct hp_stream_opts *opts);
/* Where its bytes and lines go; before hp_stream_start. */
void hp_stream_set_output(struct hp_stream *s,
                          const struct hp_stream_output *out);
/* The console prefix (len bytes, cut to HP_STREAM_PREFIX_MAX - 1);
 * time_at: where a placeholder of HP_ISO8601_MS_LEN bytes is stamped
 * with each line's time, or -1. Before hp_stream_start. */
void hp_stream_set_prefix(struct hp_stream *s, const char *prefix, size_t len,
                          int time_at);
int hp_stream_start(struct hp_stream *s);
/* Reads whatever the pipe holds without blocking, writes everything out,
 * then closes it: for a worker whose process group is gone, so that a pipe
 * an escaped (setsid) grandchild keeps open cannot hold the worker up.
 * Returns true if the read reached EOF, false if a writer was still
 * there. */
bool hp_stream_drain_and_close(struct hp_stream *s);
/* True once the stream has seen EOF or was closed (or is closing). */
bool hp_stream_closed(const struct hp_stream *s);

#endif
