/* SPDX-License-Identifier: Apache-2.0 */
/* The option table: one row per flag, used for getopt, PET_* and errors. */
#ifndef HP_CONFIG_OPTIONS_H
#define HP_CONFIG_OPTIONS_H

/*
 * XX(id, long name, short letter or 0, takes an argument, PET_* variable or
 * NULL). torchrun's flags have a PET_<DEST> fallback; the reference agent's
 * own flags have none, and neither do ours. --shutdown-timeout is both the
 * reference's and torch 2.x torchrun's, and has torchrun's variable.
 */
#define HP_OPTION_TABLE(XX)                                                   \
        XX(NNODES, "nnodes", 0, 1, "PET_NNODES")                              \
        XX(NPROC_PER_NODE, "nproc-per-node", 0, 1, "PET_NPROC_PER_NODE")      \
        XX(NODE_RANK, "node-rank", 0, 1, "PET_NODE_RANK")                     \
        XX(MASTER_ADDR, "master-addr", 0, 1, "PET_MASTER_ADDR")               \
        XX(MASTER_PORT, "master-port", 0, 1, "PET_MASTER_PORT")               \
        XX(RDZV_BACKEND, "rdzv-backend", 0, 1, "PET_RDZV_BACKEND")            \
        XX(RDZV_ENDPOINT, "rdzv-endpoint", 0, 1, "PET_RDZV_ENDPOINT")         \
        XX(RDZV_ID, "rdzv-id", 0, 1, "PET_RDZV_ID")                           \
        XX(RDZV_CONF, "rdzv-conf", 0, 1, "PET_RDZV_CONF")                     \
        XX(STANDALONE, "standalone", 0, 0, "PET_STANDALONE")                  \
        XX(MAX_RESTARTS, "max-restarts", 0, 1, "PET_MAX_RESTARTS")            \
        XX(MONITOR_INTERVAL, "monitor-interval", 0, 1, "PET_MONITOR_INTERVAL") \
        XX(START_METHOD, "start-method", 0, 1, "PET_START_METHOD")            \
        XX(ROLE, "role", 0, 1, "PET_ROLE")                                    \
        XX(MODULE, "module", 'm', 0, "PET_MODULE")                            \
        XX(NO_PYTHON, "no-python", 0, 0, "PET_NO_PYTHON")                     \
        XX(LOG_DIR, "log-dir", 0, 1, "PET_LOG_DIR")                           \
        XX(REDIRECTS, "redirects", 'r', 1, "PET_REDIRECTS")                   \
        XX(TEE, "tee", 't', 1, "PET_TEE")                                     \
        XX(LOCAL_RANKS_FILTER, "local-ranks-filter", 0, 1,                    \
           "PET_LOCAL_RANKS_FILTER")                                          \
        XX(DUPLICATE_STDOUT_FILTERS, "duplicate-stdout-filters", 0, 1,        \
           "PET_DUPLICATE_STDOUT_FILTERS")                                    \
        XX(DUPLICATE_STDERR_FILTERS, "duplicate-stderr-filters", 0, 1,        \
           "PET_DUPLICATE_STDERR_FILTERS")                                    \
        XX(LOG_LINE_PREFIX_TEMPLATE, "log-line-prefix-template", 0, 1,        \
           "PET_LOG_LINE_PREFIX_TEMPLATE")                                    \
        XX(LOCAL_ADDR, "local-addr", 0, 1, "PET_LOCAL_ADDR")                  \
        XX(RUN_PATH, "run-path", 0, 0, "PET_RUN_PATH")                        \
        XX(SIGNALS_TO_HANDLE, "signals-to-handle", 0, 1,                      \
           "PET_SIGNALS_TO_HANDLE")                                           \
        XX(LOGS_SPECS, "logs-specs", 0, 1, "PET_LOGS_SPECS")                  \
        XX(EVENT_LOG_HANDLER, "event-log-handler", 0, 1,                      \
           "PET_EVENT_LOG_HANDLER")                                           \
        XX(NUMA_BINDING, "numa-binding", 0, 1, "PET_NUMA_BINDING")            \
        XX(VIRTUAL_LOCAL_RANK, "virtual-local-rank", 0, 0,                    \
           "PET_VIRTUAL_LOCAL_RANK")                                          \
        XX(SHUTDOWN_SIGNAL, "shutdown-signal", 0, 1, NULL)                    \
        XX(SHUTDOWN_TIMEOUT, "shutdown-timeout", 0, 1,                        \
           "PET_SHUTDOWN_TIMEOUT")                                            \
        XX(HANG_DUMP, "hang-dump", 0, 1, NULL)                                \
        XX(HANG_DUMP_TIMEOUT, "hang-dump-timeout", 0, 1, NULL)                \
        XX(CGROUP, "cgroup", 0, 1, NULL)                                      \
        XX(INPROCESS_RESTART, "inprocess-restart", 0, 0, NULL)                \
        XX(INPROCESS_TIMEOUT, "inprocess-timeout", 0, 1, NULL)                \
        XX(PRE_TRAIN_SCRIPT, "pre-train-script", 0, 1, NULL)                  \
        XX(PRE_TRAIN_ARGS, "pre-train-args", 0, 1, NULL)                      \
        XX(POST_TRAIN_SCRIPT, "post-train-script", 0, 1, NULL)                \
        XX(POST_TRAIN_ARGS, "post-train-args", 0, 1, NULL)                    \
        XX(SERVER_HOST, "server-host", 0, 1, NULL)                            \
        XX(SERVER_PORT, "server-port", 0, 1, NULL)                            \
        XX(SERVER_LOG_LEVEL, "server-log-level", 0, 1, NULL)                  \
        XX(SERVER_SHUTDOWN_TIMEOUT, "server-shutdown-timeout", 0, 1, NULL)    \
        XX(SERVER_TOKEN_FILE, "server-token-file", 0, 1, NULL)                \
        XX(METRICS_PORT, "metrics-port", 0, 1, NULL)                          \
        XX(LOG_MONITORING_CONFIG, "log-monitoring-config", 0, 1, NULL)       \
        XX(LOG_MONITOR_RANKS, "log-monitor-ranks", 0, 1, NULL)               \
        XX(FT_INITIAL_RANK_HEARTBEAT_TIMEOUT,                                 \
           "ft-initial-rank-heartbeat-timeout", 0, 1, NULL)                   \
        XX(FT_RANK_HEARTBEAT_TIMEOUT, "ft-rank-heartbeat-timeout", 0, 1,      \
           NULL)                                                              \
        XX(FT_RANK_SECTION_TIMEOUTS, "ft-rank-section-timeouts", 0, 1, NULL)  \
        XX(FT_RANK_OUT_OF_SECTION_TIMEOUT, "ft-rank-out-of-section-timeout",  \
           0, 1, NULL)                                                        \
        XX(FT_SAFETY_FACTOR, "ft-safety-factor", 0, 1, NULL)                  \
        XX(STRAGGLER_RATIO, "straggler-ratio", 0, 1, NULL)                    \
        XX(STRAGGLER_WINDOWS, "straggler-windows", 0, 1, NULL)                \
        XX(STRAGGLER_WINDOW, "straggler-window", 0, 1, NULL)                  \
        XX(STRAGGLER_ACTION, "straggler-action", 0, 1, NULL)                  \
        XX(NODE_PROBLEM_CONFIG, "node-problem-config", 0, 1, NULL)           \
        XX(KMSG, "kmsg", 0, 1, NULL)                                          \
        XX(NODE_FAULT_ACTION, "node-fault-action", 0, 1, NULL)               \
        XX(PREFLIGHT, "preflight", 0, 1, NULL)                                \
        XX(PREFLIGHT_MIN_BUSBW, "preflight-min-busbw", 0, 1, NULL)           \
        XX(PREFLIGHT_MAX_BYTES, "preflight-max-bytes", 0, 1, NULL)           \
        XX(PREFLIGHT_TIMEOUT, "preflight-timeout", 0, 1, NULL)               \
        XX(PREFLIGHT_LIBRARY, "preflight-library", 0, 1, NULL)               \
        XX(REPLAY, "replay", 0, 1, NULL)                                      \
        XX(REPLAY_RATE, "replay-rate", 0, 1, NULL)                            \
        XX(EXPECT, "expect", 0, 1, NULL)                                      \
        XX(REPLAY_UNTIL, "replay-until", 0, 1, NULL)                          \
        XX(REPLAY_INPUT, "replay-input", 0, 1, NULL)                          \
        XX(REPLAY_FORMAT, "replay-format", 0, 1, NULL)                        \
        XX(CHECK_RULES, "check-rules", 0, 1, NULL)                            \
        XX(STRICT, "strict", 0, 0, NULL)                                      \
        XX(EMIT_EXPECT, "emit-expect", 0, 1, NULL)                            \
        XX(HELP, "help", 'h', 0, NULL)                                        \
        XX(VERSION, "version", 'V', 0, NULL)

enum hp_option_id {
#define XX(id, name, letter, arg, env) HP_OPT_##id,
        HP_OPTION_TABLE(XX)
#undef XX
        HP_OPT_COUNT
};

#endif
