/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/stream, and with its unit tests, which look into the
 * console's ring and embed a console and a hub of their own. */
#ifndef HP_STREAM_PRIVATE_H
#define HP_STREAM_PRIVATE_H

#include "hyperpod/stream.h"

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
         * ring then is a plain buffer of cap / HP_CONSOLE_BUFFERS bytes
         * and there is no thread until a flood. */
        bool direct;
        char *ring;
        size_t cap;    /* of the ring, or of one direct buffer */
        uint64_t head; /* bytes ever queued */
        uint64_t tail; /* bytes ever written */
        uint64_t lines_queued;
        uint64_t lines_dropped;
        uint64_t bytes_dropped;
        uint64_t lines_failed;       /* lost to a failed write (under lock) */
        uint64_t messages_dropped;   /* of them, the agent's own */
        uv_thread_t owner;           /* the thread that queues lines */
        uint64_t dropped_unreported; /* lines lost since the last marker */
        int write_error;       /* -errno of a failed write, then we drop */
        bool stalled;          /* a flush timed out with tail here: */
        uint64_t stalled_tail; /* later waits skip if still no progress */
        bool stopping;
        bool abandoned; /* close gave up on a writer stuck in write() */
        bool pending;   /* queued since the last commit; commit wakes */
        size_t wake_at; /* or this many bytes queued wake the writer */
        uv_mutex_t lock;
        uv_cond_t wake;    /* the writer waits for data */
        uv_cond_t drained; /* close waits for the writer */
        uv_thread_t thread;
        /* Direct mode in a flood: the first time the buffer fills, a
         * thread starts that writes the buffers the loop hands it, in
         * order, while the loop fills a free one; nothing is dropped, the
         * loop waits only when every buffer is full. Under lock: queued
         * buffers from queue[queue_head] on (the first one is being
         * written), and the free ones. */
        bool direct_thread;
        struct hp_console_buffer {
                char *data;
                size_t len;
        } queue[HP_CONSOLE_BUFFERS];
        unsigned queue_head, queued;
        char *free_buffers[HP_CONSOLE_BUFFERS];
        unsigned free_count;
};

/* Caller-allocated forms of hp_console_new and hp_stream_hub_new. A hub
 * made by hp_stream_hub_init is not freed by its close. */
int hp_console_init(struct hp_console *con, int fd, size_t cap);

/*
 * What the streams of one loop share. Their pipes are watched by an epoll
 * set of the hub's own, which the loop watches as one fd: one wakeup then
 * reads every ready pipe, and pacing stops and starts one watcher, not one
 * per pipe. One timer (each subsystem owns one, armed at the earliest
 * deadline) runs the paced reads, writes the consoles HP_CONSOLE_DELAY_MS
 * after their first unwritten line and the log files HP_FILE_DELAY_MS
 * after their first unwritten byte. The owner embeds it.
 */
struct hp_stream_hub {
        uv_loop_t *loop;
        int epfd;       /* the pipes being read */
        uv_poll_t poll; /* epfd in the loop, while not paced */
        uv_timer_t timer;
        int watched; /* pipes in epfd */
        bool paced;
        struct hp_console *consoles[2]; /* borrowed */
        size_t console_count;
        uint64_t read_due;    /* loop ms, or UINT64_MAX: not paced */
        uint64_t last_data;   /* when a pass last read something */
        uint64_t pace_after;  /* no pacing before: a fast writer was seen */
        uint64_t console_due; /* or UINT64_MAX: nothing waits */
        uint64_t files_due;
        uint64_t armed_for;
        struct hp_stream *dirty; /* streams with unwritten file bytes */
        /* Epoch ms minus loop ms, taken once: ${time} in a console prefix
         * and the log rules' verdict times both map loop ms to the wall
         * clock with it, so a replay of the console can match them to the
         * millisecond. */
        int64_t wall_offset_ms;
        bool owned;  /* freed by the last close callback */
        int closing; /* handles whose close callback is to come */
};

int hp_stream_hub_init(struct hp_stream_hub *hub, uv_loop_t *loop,
                       struct hp_console *const *consoles, size_t count);

#endif
