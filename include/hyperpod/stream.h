/* hyperpodrun: the output path of every worker stream.
 *
 *   pipe ──read──▶ file (every byte, as written)
 *                 ╰▶ line splitter ──▶ console (prefixed, line-atomic, bounded)
 *                                   ╰▶ line listeners (the rule engine)
 *
 * Nothing on this path allocates per line or per read: the read buffer and
 * the partial-line buffer belong to the stream, the console queue is a ring
 * of fixed size.
 */
#ifndef HYPERPOD_STREAM_H
#define HYPERPOD_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/* Longest line held for the console and the rules. A longer line is cut
 * here, emitted with HP_LINE_CAPPED, and continued as a new line. */
#define HP_LINE_MAX (64 * 1024)
/* One read from a worker pipe: the default pipe capacity. */
#define HP_READ_CHUNK (64 * 1024)

enum hp_line_end {
        HP_LINE_EOL = 0, /* ended by \n, \r or \r\n */
        HP_LINE_CAPPED,  /* HP_LINE_MAX bytes without an end; more follows */
        HP_LINE_EOF,     /* the stream ended without a final newline */
};

/* Receives each line, without its terminator. The bytes are borrowed for
 * the duration of the call. */
typedef void (*hp_line_cb)(void *ctx, const char *line, size_t len,
                           enum hp_line_end end);

/*
 * The line splitter: a pure state machine over byte chunks. \n, \r and
 * \r\n each end a line (tqdm redraws with \r), also across chunk borders.
 * buf is borrowed storage of cap bytes for a line split across chunks.
 */
struct hp_linesplit {
        char *buf;
        size_t cap;
        size_t len;
        bool after_cr; /* the last byte was \r: a leading \n is its pair */
};

void hp_linesplit_init(struct hp_linesplit *ls, char *buf, size_t cap);
void hp_linesplit_feed(struct hp_linesplit *ls, const char *data, size_t n,
                       hp_line_cb cb, void *ctx);
/* End of stream: a held partial line is emitted with HP_LINE_EOF. */
void hp_linesplit_finish(struct hp_linesplit *ls, hp_line_cb cb, void *ctx);

/*
 * The console: a bounded byte ring drained into one fd by a writer thread,
 * so that a slow or blocked terminal or pipe never stalls the event loop,
 * and so never the workers. A line is queued whole or not at all; when the
 * ring is full the line is dropped and counted, and a marker line saying how
 * many were lost is queued as soon as there is room again.
 */
struct hp_console {
        int fd;
        /* A regular file or /dev/null cannot block for long, so it is
         * written from the loop thread, one write per batch of lines; the
         * ring then is a plain buffer and there is no thread. */
        bool direct;
        char *ring;
        size_t cap;
        uint64_t head; /* bytes ever queued */
        uint64_t tail; /* bytes ever written */
        uint64_t lines_queued;
        uint64_t lines_dropped;
        uint64_t bytes_dropped;
        uint64_t dropped_unreported; /* lines lost since the last marker */
        int write_error;             /* -errno of a failed write, then we drop */
        bool stalled;                /* a flush timed out with tail here: */
        uint64_t stalled_tail;       /* later waits skip if still no progress */
        bool stopping;
        uv_mutex_t lock;
        uv_cond_t wake;    /* the writer waits for data */
        uv_cond_t drained; /* close waits for the writer */
        uv_thread_t thread;
};

/* Default ring size per console. */
#define HP_CONSOLE_RING (4 * 1024 * 1024)

/* Starts the writer thread for fd (borrowed, not closed). */
int hp_console_init(struct hp_console *con, int fd, size_t cap);
/* Queues prefix + line + "\n" (+ marker before the newline when the line
 * was cut), atomically. Returns true if queued, false if dropped. */
bool hp_console_put_line(struct hp_console *con, const char *prefix,
                         size_t prefix_len, const char *line, size_t len,
                         enum hp_line_end end);
/* Ends a batch of lines (one pipe read): a direct console writes what it
 * buffered. Cheap no-op for a threaded one, whose writer is already awake. */
void hp_console_commit(struct hp_console *con);
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
};

struct hp_stream;
typedef void (*hp_stream_closed_cb)(struct hp_stream *s);

/*
 * One worker stream: the read end of a pipe, the file it is written to (or
 * -1), the console it is echoed to (or NULL) with its prefix, and one line
 * listener (or NULL). The owner embeds it and is told by closed_cb when the
 * pipe handle is closed, after EOF and the final partial line.
 */
struct hp_stream {
        uv_pipe_t pipe;
        int file_fd;
        struct hp_console *console;
        char prefix[256];
        size_t prefix_len;
        bool prefixed; /* tee'd: console lines carry the prefix */
        hp_line_cb listener;
        void *listener_ctx;
        hp_stream_closed_cb closed_cb;
        void *data; /* the owner's */
        bool open;
        bool reading;
        int error; /* first file write or read error, -errno */
        struct hp_stream_stats stats;
        struct hp_linesplit split;
        char line[HP_LINE_MAX];
        char chunk[HP_READ_CHUNK];
};

/* Initialises the pipe handle on loop; pass its uv_stdio_container to
 * uv_spawn, then call hp_stream_start. */
int hp_stream_init(struct hp_stream *s, uv_loop_t *loop);
int hp_stream_start(struct hp_stream *s);
/* Reads whatever the pipe holds without blocking, then closes it: for a
 * worker whose process group is gone, so that a pipe an escaped (setsid)
 * grandchild keeps open cannot hold the worker up. Returns true if the
 * read reached EOF, false if a writer was still there. */
bool hp_stream_drain_and_close(struct hp_stream *s);

#endif
