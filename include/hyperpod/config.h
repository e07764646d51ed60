/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the command line and environment, parsed and validated. */
#ifndef HYPERPOD_CONFIG_H
#define HYPERPOD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bound on --nproc-per-node. The largest nodes today have 64
 * accelerator cores; this leaves room without letting a typo fork 10^6
 * processes. */
#define HP_MAX_NPROC 1024
/* --rdzv-backend c10d's endpoint port when --rdzv-endpoint has none
 * (torchrun's). */
#define HP_RDZV_C10D_PORT 29400
/* --rdzv-backend etcd-v2's endpoint port when none is given (etcd's). */
#define HP_RDZV_ETCD_PORT 2379
/* --ft-rank-section-timeouts: sections named, and a name's length. */
#define HP_FT_SECTIONS_MAX 16
#define HP_FT_SECTION_NAME_MAX 63
/* Operator mode's default --log-dir, the HyperPod layout. */
#define HP_OPERATOR_LOG_DIR "/tmp/hyperpod"

enum hp_rdzv_backend {
        HP_RDZV_HYPERPOD =
                0,      /* operator-driven (default, as the reference) */
        HP_RDZV_STATIC, /* torchrun static: flags give everything */
        HP_RDZV_SLURM,  /* self-driven from the Slurm step */
        HP_RDZV_RESOURCE_CONFIG, /* self-driven from resource_config.json */
        HP_RDZV_C10D,            /* self-driven: the agents meet at a
                                 * TCPStore one of them hosts */
        HP_RDZV_ETCD_V2          /* self-driven: c10d's rounds at an etcd
                                 * server (its v2 keys API) */
};

/* Bits of -r/--redirects and -t/--tee. */
/* What a node fault asks Slurm for besides stopping (--node-fault-action). */
enum hp_node_fault_action {
        HP_NODE_FAULT_NONE = 0,
        HP_NODE_FAULT_REBOOT,  /* scontrol ... reason="Action:Reboot" */
        HP_NODE_FAULT_REPLACE, /* scontrol ... reason="Action:Replace" */
};

/* What a hang report collects (--hang-dump). */
enum hp_hang_dump {
        HP_HANG_DUMP_OFF = 0,
        HP_HANG_DUMP_STACKS, /* Python stacks and /proc thread states */
        HP_HANG_DUMP_FULL,   /* and each thread's kernel stack */
};

/* --duplicate-stdout-filters, --duplicate-stderr-filters: a tee'd line
 * that contains one of these texts is copied, with its prefix, into the
 * attempt's filtered_stdout.log (filtered_stderr.log). Offsets into text,
 * so that the struct can be copied. */
#define HP_DUP_FILTERS_MAX 64
#define HP_DUP_FILTERS_TEXT 2048
struct hp_dup_filters {
        int count; /* 0: not given, nothing copied */
        uint16_t at[HP_DUP_FILTERS_MAX];
        uint16_t len[HP_DUP_FILTERS_MAX];
        char text[HP_DUP_FILTERS_TEXT]; /* the filters, unescaped */
};

enum hp_std_stream {
        HP_STD_NONE = 0,
        HP_STD_OUT = 1,
        HP_STD_ERR = 2,
        HP_STD_BOTH = 3,
};

/*
 * Everything hyperpodrun was asked to do. Strings are borrowed from argv or
 * the environment (both outlive the agent) or point at static defaults;
 * nothing in here is heap-allocated, so the struct is freed by dropping it.
 */
struct hp_config {
        /* torchrun flags */
        int nnodes;     /* MAX of --nnodes MIN:MAX */
        int nnodes_min; /* MIN; 0 when --nnodes is one count */
        int nproc;      /* resolved from a number, gpu, cpu, auto */
        int node_rank;
        const char *master_addr;
        int master_port;
        /* Set when the flag or its PET_* variable was given: the slurm and
         * resource-config backends derive these and cross-check them. */
        bool nnodes_given;
        bool node_rank_given;
        bool master_addr_given;
        bool master_port_given;
        enum hp_rdzv_backend rdzv_backend;
        const char *rdzv_backend_name;
        /* Why the backend was chosen when no --rdzv-backend (or
         * PET_RDZV_BACKEND) named it, for the log; NULL when one did, or
         * when it is the default. */
        const char *rdzv_backend_reason;
        const char *rdzv_endpoint;
        const char *rdzv_id;
        const char *rdzv_conf;
        bool standalone;
        int max_restarts;
        uint64_t monitor_interval_ms;
        const char *start_method;
        const char *role;
        bool module;
        bool no_python;
        bool run_path;       /* --run-path: python -u SCRIPT */
        const char *log_dir; /* NULL: a torchelastic_* temp dir */
        bool log_to_devnull; /* --log-dir /dev/null: no files at all */
        uint8_t redirects
                [HP_MAX_NPROC]; /* per local rank, enum hp_std_stream */
        uint8_t tee[HP_MAX_NPROC];
        bool console_filter_set;
        bool console_shown[HP_MAX_NPROC]; /* --local-ranks-filter */
        const char
                *prefix_template; /* NULL: "[${role_name}${local_rank}]:" */
        struct hp_dup_filters dup_filters[2]; /* [0] stdout, [1] stderr */
        const char *local_addr;

        /* hyperpodrun flags */
        int shutdown_signal; /* SIGTERM or SIGKILL */
        uint64_t shutdown_timeout_ms;
        /* --inprocess-restart (operator mode only): the workers stay alive
         * across faults and wait at a barrier over the worker socket. */
        bool inprocess_restart;
        uint64_t inprocess_timeout_ms; /* 0: wait for the barrier forever */
        enum hp_hang_dump hang_dump;   /* what a hang report collects */
        uint64_t hang_dump_timeout_ms; /* the most it waits for stacks */
        bool cgroup;                   /* --cgroup auto: a cgroup per group */
        const char *pre_train_script;
        const char *pre_train_args; /* NULL: the script gets no argument */
        const char *post_train_script;
        const char *post_train_args;
        const char *server_host;
        int server_port;
        /* --server-port given: self-driven modes serve the read-only
         * routes only then. */
        bool server_port_given;
        /* --metrics-port: GET /metrics alone on a listener of its own
         * (0: a free one), in every mode. */
        int metrics_port;
        bool metrics_port_given;
        /* Server options given on the command line or not at all, for
         * the warning that one has no effect ("" when none). */
        const char *server_flag_given;
        const char *server_log_level;
        uint64_t server_shutdown_timeout_ms;
        /* --server-token-file: every request but /healthz must carry
         * "Authorization: Bearer <its content>"; NULL: no token. */
        const char *server_token_file;

        /* log monitoring */
        const char *log_monitoring_config; /* rules file, or NULL */
        bool monitored[HP_MAX_NPROC];      /* --log-monitor-ranks */

        /* rank monitoring (ft_launcher's --ft-* flags; 0 ms: not used) */
        uint64_t ft_initial_hb_ms;
        uint64_t ft_hb_ms;
        uint64_t ft_oos_ms;
        double ft_safety_factor; /* for the client's computed ones */
        int ft_nsections;
        char ft_section_names[HP_FT_SECTIONS_MAX][HP_FT_SECTION_NAME_MAX + 1];
        uint64_t ft_section_ms[HP_FT_SECTIONS_MAX];
        /* stragglers: ratio 0 reports none (speeds are still measured) */
        double straggler_ratio;
        int straggler_windows;
        uint64_t straggler_window_ms;
        bool straggler_verdict; /* --straggler-action verdict */

        /* node health: kernel log rules (NPD kernel-monitor configs) */
        const char *node_problem_config; /* FILE[,FILE...], or NULL */
        const char *kmsg;                /* --kmsg, or "/dev/kmsg" */
        bool kmsg_given;
        enum hp_node_fault_action node_fault_action;
        /* --preflight nccl: an all-reduce over the node's GPUs first */
        bool preflight_nccl;
        double preflight_min_busbw; /* GB/s, 0: no floor */
        uint64_t preflight_max_bytes;
        uint64_t preflight_timeout_ms;
        const char *preflight_library; /* test hook, or NULL */

        /* --replay: run nothing, replay a recorded log through the rules */
        const char *replay_log;    /* a file or "-", or NULL */
        double replay_rate;        /* lines per second, 0: timestamps */
        const char *replay_expect; /* --expect FILE, or NULL */
        const char *replay_until;  /* --replay-until TIME|+SECS|verdict */
        int replay_input;          /* --replay-input: 0 auto, 1 plain,
                                     * 2 console, 3 srun */
        bool replay_all_ranks;     /* --log-monitor-ranks all */
        int replay_format;         /* --replay-format: -1 not given (text
                                     * on a terminal), 0 text, 1 json */
        const char *check_rules;   /* --check-rules FILE, or NULL */
        const char *emit_expect;   /* --emit-expect FILE, or NULL */
        bool strict;               /* --strict: unknown rule keys refused */

        /* the training command */
        const char *python_exec;  /* $PYTHON_EXEC, else "python3" */
        const char *script;       /* or the module with -m */
        char *const *script_args; /* borrowed from argv */
        int script_argc;

        /* what main should do instead of running a job */
        bool show_help;
        bool show_version;
};

/*
 * Parses argv and the environment (envp may be NULL for the process
 * environment) into cfg. On a bad value returns HP_EUSAGE and writes one
 * line into errbuf that names the value and where it came from (the flag
 * or the PET_* variable). argv is borrowed and must outlive cfg.
 */
int hp_config_parse(struct hp_config *cfg, int argc, char **argv,
                    char *errbuf, size_t errlen);

/* Checks what only the file system can tell: scripts and hooks exist and
 * are executable, the interpreter is found. Same error contract. */
int hp_config_check_files(const struct hp_config *cfg, char *errbuf,
                          size_t errlen);

/* Whether the HyperPod operator drives the job over HTTP: the hyperpod
 * backend, unless --standalone (which is self-driven whatever the
 * backend, as in torchrun). */
bool hp_config_operator_mode(const struct hp_config *cfg);

/* The --help text. */
const char *hp_config_help(void);

/* Parses a torchrun stream spec ("3", "0:3,1:1") into per-rank values for
 * nproc ranks. Exposed for tests. */
int hp_config_parse_std_spec(const char *text, int nproc, uint8_t *out,
                             char *errbuf, size_t errlen);

/* Parses torchrun's comma-separated filter list ("a,b"; ",," is a comma
 * in a filter; "" is one empty filter, which every line contains) into
 * out. Exposed for tests. */
int hp_config_parse_dup_filters(const char *text, struct hp_dup_filters *out,
                                char *errbuf, size_t errlen);

/* Checks a console prefix template: only known ${variables}. */
int hp_config_check_template(const char *tmpl, char *errbuf, size_t errlen);

/* Finds an executable the way execvp would. Returns 0 and the path, or
 * -ENOENT / -EACCES. */
int hp_config_find_executable(const char *name, char *path, size_t len);

#endif
