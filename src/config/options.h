/* SPDX-License-Identifier: Apache-2.0 */
/* The option table: one row per flag, for getopt, PET_*, conversion,
 * errors and --help. A new flag is one row here plus its man page entry
 * (and docs/torchrun-flags.md for a torchrun flag). */
#ifndef HP_CONFIG_OPTIONS_H
#define HP_CONFIG_OPTIONS_H

/*
 * XX(id, long name, short letter or 0, METAVAR or NULL for a flag that
 *    takes no value, PET_* variable or NULL, conversion kind,
 *    (conversion fields), --help text or NULL)
 *
 * Rows are in --help's order: the rows with a PET_ variable are torchrun's
 * and come first. torchrun's flags have a PET_<DEST> fallback; the
 * reference agent's own flags have none, and neither do ours.
 * --shutdown-timeout is both the reference's and torch 2.x torchrun's,
 * and has torchrun's variable.
 *
 * Help text: lines separated by \n, printed from column 29 under
 * "  --name METAVAR"; a row with NULL help is listed with the next row
 * ("--a, --b METAVAR").
 *
 * Conversion (convert.c): kind is one of enum conversion_kind without
 * its CONV_ prefix, and the fields are designated initializers of struct
 * conversion: FIELD(member of struct hp_config), GIVEN(member), .min,
 * .max, CHOICES(list), .text, .fn. Options are converted in table order,
 * so that with two bad options the first is the one reported, except
 * that a row with AFTER(ID) is converted right after row ID (its value
 * may depend on ID's, as the filters' on --log-dir), and rows with
 * .first = N go first, in N's order: the refused torchrun
 * flags, and the backend before --nnodes, because Kubeflow's elastic job
 * also sets PET_NNODES=MIN:MAX and an unsupported backend is the cause
 * to name.
 */
/* One row per flag, laid out by hand. */
/* clang-format off */
#define HP_OPTION_TABLE(XX)                                                   \
        XX(NNODES, "nnodes", 0, "N", "PET_NNODES", FUNC,                      \
           (.fn = convert_nnodes),                                            \
           "number of nodes, or MIN:MAX with c10d\n"                          \
           "(default 1)")                                                     \
        XX(NPROC_PER_NODE, "nproc-per-node", 0, "N|gpu|neuron|cpu|auto",      \
           "PET_NPROC_PER_NODE", FUNC,                                        \
           (.fn = convert_nproc),                                             \
           "workers on this node (default 1); gpu counts\n"                   \
           "NVIDIA GPUs, neuron counts NeuronCores\n"                         \
           "(NEURON_RT_VISIBLE_CORES, else the Neuron\n"                      \
           "driver's sysfs core_count files), cpu counts\n"                   \
           "usable CPUs, auto is gpu when there are GPUs,\n"                  \
           "else neuron, else cpu; xpu is refused")                           \
        XX(NODE_RANK, "node-rank", 0, "N", "PET_NODE_RANK", INT,              \
           (FIELD(node_rank), GIVEN(node_rank_given),                         \
            .min = 0, .max = (1 << 20) - 1),                                  \
           "rank of this node, static backend (default 0)")                   \
        XX(MASTER_ADDR, "master-addr", 0, "ADDR", "PET_MASTER_ADDR", FUNC,    \
           (.fn = convert_master_addr),                                       \
           "address of rank 0, static (default 127.0.0.1)")                   \
        XX(MASTER_PORT, "master-port", 0, "PORT", "PET_MASTER_PORT", INT,     \
           (FIELD(master_port),                                               \
            GIVEN(master_port_given), .min = 1, .max = 65535),                \
           "port of rank 0's store, static (default 29500)")                  \
        XX(RDZV_BACKEND, "rdzv-backend", 0, "NAME",                           \
           "PET_RDZV_BACKEND", FUNC,                                          \
           (.fn = convert_rdzv_backend,                                       \
            .first = 8),                                                      \
           "hyperpod (default: wait for the HyperPod\n"                       \
           "operator), static, slurm, resource-config or\n"                   \
           "c10d (the agents meet at a store one hosts);\n"                   \
           "with none named and PET_MASTER_ADDR or\n"                         \
           "PET_RDZV_ENDPOINT set (a Kubeflow PyTorchJob):\n"                 \
           "static; etcd, etcd-v2 are refused")                               \
        XX(RDZV_ENDPOINT, "rdzv-endpoint", 0, "HOST[:PORT]",                  \
           "PET_RDZV_ENDPOINT", STRING,                                       \
           (FIELD(rdzv_endpoint)),                                            \
           "static: master address and port; c10d: where\n"                   \
           "the agents' store is (port 29400)")                               \
        XX(RDZV_ID, "rdzv-id", 0, "ID", "PET_RDZV_ID", FUNC,                  \
           (.fn = convert_rdzv_id),                                           \
           "run id: TORCHELASTIC_RUN_ID and the log\n"                        \
           "directory prefix (default none)")                                 \
        XX(RDZV_CONF, "rdzv-conf", 0, "K=V[,K=V...]", "PET_RDZV_CONF", FUNC,  \
           (.fn = convert_rdzv_conf),                                         \
           "backend options; slurm: scontrol=PATH|off,\n"                     \
           "scontrol_timeout=SECS, master_port=jobid;\n"                      \
           "resource-config: resource_config=PATH,\n"                         \
           "instance_group=NAME; c10d: is_host=BOOL,\n"                       \
           "join_timeout=SECS (600), last_call_timeout=SECS\n"                \
           "(30); rounds at a store (c10d, coordinate=on):\n"                 \
           "keep_alive_interval=SECS (5),\n"                                  \
           "keep_alive_max_attempt=N (3), close_timeout=SECS")                \
        XX(STANDALONE, "standalone", 0, NULL, "PET_STANDALONE", FLAG,         \
           (FIELD(standalone)),                                               \
           "single node: a free master port on 127.0.0.1\n"                   \
           "and a random run id; start at once")                              \
        XX(MAX_RESTARTS, "max-restarts", 0, "N", "PET_MAX_RESTARTS", INT,     \
           (FIELD(max_restarts), .min = 0,                                    \
            .max = 1000000),                                                  \
           "whole-group restarts after a failure (default 0);\n"              \
           "operator mode: the operator restarts, and\n"                      \
           "workers see TORCHELASTIC_MAX_RESTARTS=3")                         \
        XX(MONITOR_INTERVAL, "monitor-interval", 0, "SECS",                   \
           "PET_MONITOR_INTERVAL", SECONDS,                                   \
           (FIELD(monitor_interval_ms)),                                      \
           "accepted for torchrun compatibility; hyperpodrun\n"               \
           "reacts to events, not to a poll (default 0.1)")                   \
        XX(START_METHOD, "start-method", 0, "NAME",                           \
           "PET_START_METHOD", CHOICE,                                        \
           (FIELD(start_method),                                              \
            CHOICES(start_methods)),                                          \
           "accepted for torchrun compatibility (spawn, fork,\n"              \
           "forkserver); scripts are always exec'd")                          \
        XX(ROLE, "role", 0, "NAME", "PET_ROLE", TEXT,                         \
           (FIELD(role)),                                                     \
           "ROLE_NAME and the console prefix (default default)")              \
        XX(MODULE, "module", 'm', NULL, "PET_MODULE", GROUP,                  \
           (.fn = convert_launch_mode),                                       \
           "run TRAINING_SCRIPT as python -m MODULE")                         \
        XX(NO_PYTHON, "no-python", 0, NULL, "PET_NO_PYTHON", NONE,            \
           (),                                                                \
           "exec TRAINING_SCRIPT directly, not via python")                   \
        XX(RUN_PATH, "run-path", 0, NULL, "PET_RUN_PATH", NONE,               \
           (),                                                                \
           "run TRAINING_SCRIPT with python -u, as torchrun's\n"              \
           "runpy.run_path; wins over --no-python and -m")                    \
        XX(LOG_DIR, "log-dir", 0, "DIR", "PET_LOG_DIR", FUNC,                 \
           (.fn = convert_log_dir),                                           \
           "per-rank log files under DIR (default: operator\n"                \
           "mode /tmp/hyperpod, else a new\n"                                 \
           "torchelastic_XXXXXXXX in $TMPDIR); /dev/null: none;\n"            \
           "refused if a user other than root and ours can\n"                 \
           "change it; files 0600 in 0700 directories")                       \
        XX(REDIRECTS, "redirects", 'r', "SPEC", "PET_REDIRECTS", FUNC,        \
           (.fn = convert_std_spec),                                          \
           "streams written to files only: 0 none, 1 stdout,\n"               \
           "2 stderr, 3 both, or per local rank: 0:3,1:1")                    \
        XX(TEE, "tee", 't', "SPEC", "PET_TEE", FUNC,                          \
           (.fn = convert_std_spec),                                          \
           "streams written to files and the console\n"                       \
           "(default: operator mode 3 unless --redirects is\n"                \
           "given, else 0); a local rank at most once")                       \
        XX(LOCAL_RANKS_FILTER, "local-ranks-filter", 0, "LIST",               \
           "PET_LOCAL_RANKS_FILTER", FUNC,                                    \
           (.fn = convert_local_ranks_filter),                                \
           "local ranks shown on the console, e.g. 0,3\n"                     \
           "(files are always complete; ranks past\n"                         \
           "--nproc-per-node show nothing, as in torchrun)")                  \
        XX(LOG_LINE_PREFIX_TEMPLATE, "log-line-prefix-template", 0,           \
           "TEMPLATE",                                                        \
           "PET_LOG_LINE_PREFIX_TEMPLATE", FUNC,                              \
           (.fn = convert_prefix_template),                                   \
           "console prefix with ${role_name} ${rank}\n"                       \
           "${local_rank} ${group_rank} ${restart_count}\n"                   \
           "${hostname} ${pid} ${time} (UTC, ms: makes the\n"                 \
           "console replayable to the ms)\n"                                  \
           "(default \"[${role_name}${local_rank}]:\";\n"                     \
           "also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)")                     \
        XX(LOCAL_ADDR, "local-addr", 0, "ADDR", "PET_LOCAL_ADDR", STRING,     \
           (FIELD(local_addr)),                                               \
           "this node's address; resource-config: its\n"                      \
           "CustomerIpAddress in resource_config.json")                       \
        XX(SIGNALS_TO_HANDLE, "signals-to-handle", 0, "LIST",                 \
           "PET_SIGNALS_TO_HANDLE", FUNC,                                     \
           (.fn = convert_signals_to_handle,                                  \
            .first = 7),                                                      \
           "SIGTERM,SIGINT,SIGHUP,SIGQUIT (torchrun's\n"                      \
           "default, always handled), with SIGUSR1 and\n"                     \
           "SIGUSR2 (always forwarded) if you like")                          \
        XX(SHUTDOWN_TIMEOUT, "shutdown-timeout", 0, "SECS",                   \
           "PET_SHUTDOWN_TIMEOUT", SECONDS,                                   \
           (FIELD(shutdown_timeout_ms), AFTER(SHUTDOWN_SIGNAL)),              \
           "after a failure or a stop, SIGKILL the workers\n"                 \
           "SECS after the first signal (default\n"                           \
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30;\n"                       \
           "operator mode 15)")                                               \
        XX(EVENT_LOG_HANDLER, "event-log-handler", 0, "null",                 \
           "PET_EVENT_LOG_HANDLER", FUNC,                                     \
           (.fn = convert_event_log_handler,                                  \
            .first = 4),                                                      \
           "torchrun's default (no events); others refused")                  \
        XX(DUPLICATE_STDOUT_FILTERS, "duplicate-stdout-filters", 0, "VALUE",  \
           "PET_DUPLICATE_STDOUT_FILTERS", FUNC,                              \
           (.fn = convert_duplicate_filters, AFTER(LOG_DIR)),                 \
           NULL)                                                              \
        XX(DUPLICATE_STDERR_FILTERS, "duplicate-stderr-filters", 0, "LIST",   \
           "PET_DUPLICATE_STDERR_FILTERS", FUNC,                              \
           (.fn = convert_duplicate_filters,                                  \
            AFTER(DUPLICATE_STDOUT_FILTERS)),                                 \
           "copy the tee'd stdout (stderr) lines holding\n"                   \
           "one of the comma-separated texts, prefixed,\n"                    \
           "to attempt_N/filtered_stdout.log (stderr)")                       \
        XX(NUMA_BINDING, "numa-binding", 0, "VALUE",                          \
           "PET_NUMA_BINDING", REFUSED,                                       \
           (.text = "hyperpodrun does not bind workers to NUMA nodes: "       \
            "torch 2.x pins LOCAL_RANK's processes near CUDA device "         \
            "LOCAL_RANK, and which PCI device (so which NUMA node) "          \
            "that is only the CUDA runtime can say (its order is "            \
            "fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID), "            \
            "which the agent does not load; wrap the script: "                \
            "--no-python numactl --cpunodebind=N --membind=N "                \
            "python3 -u train.py, N the GPU's "                               \
            "/sys/bus/pci/devices/<its PCI address>/numa_node, "              \
            "chosen per ${local_rank} in a small script",                     \
            .first = 5),                                                      \
           NULL)                                                              \
        XX(LOGS_SPECS, "logs-specs", 0, "VALUE", "PET_LOGS_SPECS", REFUSED,   \
           (.text = "it names a Python LogsSpecs class (an entry point), "    \
            "which a C launcher cannot load; use --log-dir, "                 \
            "--redirects, --tee and --local-ranks-filter",                    \
            .first = 3),                                                      \
           NULL)                                                              \
        XX(VIRTUAL_LOCAL_RANK, "virtual-local-rank", 0, NULL,                 \
           "PET_VIRTUAL_LOCAL_RANK", REFUSED,                                 \
           (.text = "every worker sees its real LOCAL_RANK and every GPU; "   \
            "for device 0 to be the worker's own GPU, run "                   \
            "--no-python env 'CUDA_VISIBLE_DEVICES=${local_rank}' "           \
            "python3 -u train.py (hyperpodrun puts each worker's "            \
            "local rank in place of ${local_rank})",                          \
            .first = 6),                                                      \
           "not supported: refused with the reason")                          \
        XX(SHUTDOWN_SIGNAL, "shutdown-signal", 0, "SIGTERM|SIGKILL",          \
           NULL, FUNC,                                                        \
           (.fn = convert_shutdown_signal),                                   \
           "first signal to the other workers after a\n"                      \
           "failure (default SIGTERM as torchrun; operator\n"                 \
           "mode SIGKILL as the HyperPod agent); SIGKILL\n"                   \
           "follows after --shutdown-timeout")                                \
        XX(INPROCESS_RESTART, "inprocess-restart", 0, NULL, NULL, FLAG,       \
           (FIELD(inprocess_restart),                                         \
            .first = 1),                                                      \
           "operator mode only: in-process restart; the\n"                    \
           "workers wait at a barrier on the worker socket\n"                 \
           "and survive faults (see IN-PROCESS RESTART in\n"                  \
           "the man page)")                                                   \
        XX(INPROCESS_TIMEOUT, "inprocess-timeout", 0, "SECS", NULL, SECONDS,  \
           (FIELD(inprocess_timeout_ms),                                      \
            .first = 2),                                                      \
           "with --inprocess-restart: the most to wait for\n"                 \
           "every local rank at the barrier, then restart\n"                  \
           "the node's processes (default: no limit)")                        \
        XX(HANG_DUMP, "hang-dump", 0, "off|stacks|full", NULL, FUNC,          \
           (.fn = convert_hang_dump),                                         \
           "on a rule verdict or SIGUSR2, write\n"                            \
           "attempt_N/hang-report.json: ranks by silence,\n"                  \
           "Python stacks, /proc thread states; full adds\n"                  \
           "kernel stacks, torch's NCCL flight recorder\n"                    \
           "and NCCL's RAS report (default stacks); a\n"                      \
           "report interrupts no call of the workers, and\n"                  \
           "SIGUSR2 is forwarded only to the worker\n"                        \
           "processes that handle it")                                        \
        XX(HANG_DUMP_TIMEOUT, "hang-dump-timeout", 0, "SECS", NULL, SECONDS,  \
           (FIELD(hang_dump_timeout_ms)),                                     \
           "the most a verdict's stop waits for the stacks\n"                 \
           "(default 3)")                                                     \
        XX(CGROUP, "cgroup", 0, "auto|off", NULL, FUNC,                       \
           (.fn = convert_cgroup),                                            \
           "auto: each stage's processes run in a cgroup\n"                   \
           "of their own under hyperpodrun's when cgroup v2\n"                \
           "is writable, so a stop kills all they started;\n"                 \
           "off: found as its descendants (default auto)")                    \
        XX(PRE_TRAIN_SCRIPT, "pre-train-script", 0, "PATH", NULL, GROUP,      \
           (.fn = convert_train_scripts),                                     \
           "executable run once before the workers")                          \
        XX(PRE_TRAIN_ARGS, "pre-train-args", 0, "STRING", NULL, NONE,         \
           (),                                                                \
           "its one argument (default: no argument)")                         \
        XX(POST_TRAIN_SCRIPT, "post-train-script", 0, "PATH", NULL, NONE,     \
           (),                                                                \
           "executable run once after the workers succeed")                   \
        XX(POST_TRAIN_ARGS, "post-train-args", 0, "STRING", NULL, NONE,       \
           (),                                                                \
           "its one argument (default: no argument)")                         \
        XX(SERVER_HOST, "server-host", 0, "HOST", NULL, TEXT,                 \
           (FIELD(server_host)),                                              \
           "operator API address (default 0.0.0.0 in\n"                       \
           "operator mode, 127.0.0.1 in self-driven modes)")                  \
        XX(SERVER_PORT, "server-port", 0, "PORT", NULL, INT,                  \
           (FIELD(server_port),                                               \
            GIVEN(server_port_given), .min = 0, .max = 65535),                \
           "operator API port, 0 for a free one (default 8080);\n"            \
           "self-driven modes serve /status, /metrics,\n"                     \
           "/healthz and /debug/stacks on it only when it\n"                  \
           "is given")                                                        \
        XX(METRICS_PORT, "metrics-port", 0, "PORT", NULL, INT,                \
           (FIELD(metrics_port),                                              \
            GIVEN(metrics_port_given), .min = 0, .max = 65535,                \
            AFTER(SERVER_TOKEN_FILE)),                                        \
           "also serve GET /metrics alone on this port of\n"                  \
           "--server-host, 0 for a free one, in every mode\n"                 \
           "(default: none, /metrics on the server port)")                    \
        XX(SERVER_TOKEN_FILE, "server-token-file", 0, "FILE", NULL, TEXT,     \
           (FIELD(server_token_file), AFTER(SERVER_SHUTDOWN_TIMEOUT)),        \
           "every request but GET /healthz must carry\n"                      \
           "'Authorization: Bearer <token>', the token\n"                     \
           "being FILE's content (owned by hyperpodrun's\n"                   \
           "user or root, not readable by others); 401\n"                     \
           "otherwise (default: no token)")                                   \
        XX(SERVER_LOG_LEVEL, "server-log-level", 0, "LEVEL", NULL, CHOICE,    \
           (FIELD(server_log_level),                                          \
            CHOICES(log_levels)),                                             \
           "critical, error, warning, info, debug or trace\n"                 \
           "(default info); debug and trace log every request")               \
        XX(SERVER_SHUTDOWN_TIMEOUT, "server-shutdown-timeout", 0, "SECS",     \
           NULL, SECONDS,                                                     \
           (FIELD(server_shutdown_timeout_ms)),                               \
           "accepted, unused (default 300)")                                  \
        XX(LOG_MONITORING_CONFIG, "log-monitoring-config", 0, "FILE",         \
           NULL, TEXT,                                                        \
           (FIELD(log_monitoring_config)),                                    \
           "log rules (logMonitoringConfiguration): a JSON\n"                 \
           "list, a JSON object holding that list, or a\n"                    \
           "HyperPodPyTorchJob job.yaml; a verdict (SLOW,\n"                  \
           "HANGING, FAULTED) stops and restarts the group;\n"                \
           "at most 1 MiB, 64 levels deep and 16 MiB with\n"                  \
           "YAML aliases expanded")                                           \
        XX(LOG_MONITOR_RANKS, "log-monitor-ranks", 0, "all|LIST",             \
           NULL, GROUP,                                                       \
           (.fn = convert_monitor_ranks),                                     \
           "local ranks whose stdout the rules watch\n"                       \
           "(default 0)")                                                     \
        XX(FT_INITIAL_RANK_HEARTBEAT_TIMEOUT,                                 \
           "ft-initial-rank-heartbeat-timeout", 0, "SECS",                    \
           NULL, SECONDS,                                                     \
           (FIELD(ft_initial_hb_ms)),                                         \
           "rank monitor (ft_launcher's flags; the workers'\n"                \
           "hyperpodrun_client.fault_tolerance): the most\n"                  \
           "from init_workload_monitoring() to a rank's first\n"              \
           "heartbeat (default none)")                                        \
        XX(FT_RANK_HEARTBEAT_TIMEOUT, "ft-rank-heartbeat-timeout", 0, "SECS", \
           NULL, SECONDS,                                                     \
           (FIELD(ft_hb_ms)),                                                 \
           "the most between two heartbeats (default none)")                  \
        XX(FT_RANK_SECTION_TIMEOUTS, "ft-rank-section-timeouts", 0,           \
           "NAME:SECS[,NAME:SECS...]",                                        \
           NULL, FUNC,                                                        \
           (.fn = convert_section_timeouts),                                  \
           "the most a named section stays open (NAME:null:\n"                \
           "monitored, no timeout until one is computed)")                    \
        XX(FT_RANK_OUT_OF_SECTION_TIMEOUT,                                    \
           "ft-rank-out-of-section-timeout", 0, "SECS",                       \
           NULL, SECONDS,                                                     \
           (FIELD(ft_oos_ms)),                                                \
           "the most with no section open (default none);\n"                  \
           "a passed deadline is a verdict naming the rank\n"                 \
           "and the heartbeat or section, as a rule's")                       \
        XX(FT_SAFETY_FACTOR, "ft-safety-factor", 0, "X", NULL, FUNC,          \
           (.fn = convert_safety_factor),                                     \
           "computed timeouts are the longest interval seen\n"                \
           "times X (default 5)")                                             \
        XX(STRAGGLER_RATIO, "straggler-ratio", 0, "R", NULL, FUNC,            \
           (.fn = convert_straggler_ratio),                                   \
           "warn of a rank whose heartbeat (or step section)\n"               \
           "rate stays below R times the ranks' median\n"                     \
           "(default 0: speeds measured, none reported)")                     \
        XX(STRAGGLER_WINDOWS, "straggler-windows", 0, "N", NULL, INT,         \
           (FIELD(straggler_windows), .min = 1,                               \
            .max = 1000000),                                                  \
           "for N windows running (default 3)")                               \
        XX(STRAGGLER_WINDOW, "straggler-window", 0, "SECS", NULL, SECONDS,    \
           (FIELD(straggler_window_ms)),                                      \
           "a window's length (default 5)")                                   \
        XX(STRAGGLER_ACTION, "straggler-action", 0, "warn|verdict",           \
           NULL, FUNC,                                                        \
           (.fn = convert_straggler_action),                                  \
           "verdict: a straggler is a verdict, RankStraggler\n"               \
           "(default warn)")                                                  \
        XX(NODE_PROBLEM_CONFIG, "node-problem-config", 0, "FILE[,FILE...]",   \
           NULL, GROUP,                                                       \
           (.fn = convert_node_health),                                       \
           "node-problem-detector kernel monitor configs\n"                   \
           "(examples/node-problem/): a permanent rule's\n"                   \
           "match is a node fault (self-driven: workers\n"                    \
           "stopped, exit 123, no restart; operator mode:\n"                  \
           "FAULTED NodeFault_<reason>); temporary ones are\n"                \
           "logged and counted")                                              \
        XX(KMSG, "kmsg", 0, "PATH", NULL, NONE,                               \
           (),                                                                \
           "the kernel log to read (default /dev/kmsg): a\n"                  \
           "character device, a FIFO or a file")                              \
        XX(NODE_FAULT_ACTION, "node-fault-action", 0, "none|reboot|replace",  \
           NULL, NONE,                                                        \
           (),                                                                \
           "under Slurm a node fault also runs scontrol\n"                    \
           "update nodename=NODE state=fail\n"                                \
           "reason=Action:Replace (or Action:Reboot)\n"                       \
           "(default none)")                                                  \
        XX(PREFLIGHT, "preflight", 0, "none|nccl", NULL, NONE,                \
           (),                                                                \
           "nccl: before the first stage, an all-reduce over\n"               \
           "all local GPUs (hyperpodrun-nccl-check, installed\n"              \
           "beside hyperpodrun); a failure, a timeout or a\n"                 \
           "low bus bandwidth is node fault NCCLPreflight\n"                  \
           "(default none)")                                                  \
        XX(PREFLIGHT_MIN_BUSBW, "preflight-min-busbw", 0, "GBPS",             \
           NULL, NONE,                                                        \
           (),                                                                \
           "the lowest bus bandwidth that passes (default 0)")                \
        XX(PREFLIGHT_MAX_BYTES, "preflight-max-bytes", 0, "N", NULL, NONE,    \
           (),                                                                \
           "the largest all-reduce, in bytes (default\n"                      \
           "67108864); sizes double from 1 MiB up to it")                     \
        XX(PREFLIGHT_TIMEOUT, "preflight-timeout", 0, "SECS", NULL, NONE,     \
           (),                                                                \
           "the most the check may take (default 120)")                       \
        XX(PREFLIGHT_LIBRARY, "preflight-library", 0, "PATH", NULL, NONE,     \
           (),                                                                \
           "a library with both NCCL's and the CUDA\n"                        \
           "runtime's entry points, instead of libnccl.so.2\n"                \
           "and libcudart.so (a test hook)")                                  \
        XX(REPLAY, "replay", 0, "LOG", NULL, GROUP,                           \
           (.fn = convert_replay),                                            \
           "start nothing: feed a recorded log (a file, or -\n"               \
           "for standard input) through the rules and print\n"                \
           "each rule state change as a JSON line, then a\n"                  \
           "summary; time comes from each line's timestamp\n"                 \
           "and a [default0]: prefix names the stream; a\n"                   \
           "directory: its <local_rank>/stdout.log files")                    \
        XX(REPLAY_RATE, "replay-rate", 0, "LINES_PER_SEC", NULL, NONE,        \
           (),                                                                \
           "with --replay: time from line numbers instead")                   \
        XX(EXPECT, "expect", 0, "FILE", NULL, NONE,                           \
           (),                                                                \
           "with --replay: compare the outcome with FILE's\n"                 \
           "expected states; exit 1 with a diff if unmet\n"                   \
           "(exit 2 if rules need a clock the log lacks)")                    \
        XX(EMIT_EXPECT, "emit-expect", 0, "FILE", NULL, NONE,                 \
           (),                                                                \
           "with --replay: write the outcome as an\n"                         \
           "expectation to review and commit for --expect\n"                  \
           "(states reached and verdict, no times)")                          \
        XX(REPLAY_UNTIL, "replay-until", 0, "TIME|+SECS|verdict",             \
           NULL, NONE,                                                        \
           (),                                                                \
           "with --replay: judge up to an ISO 8601 time,\n"                   \
           "SECS past the last line, or the agent's own\n"                    \
           "recorded verdict line (default: the last line)")                  \
        XX(REPLAY_INPUT, "replay-input", 0, "auto|plain|console|srun",        \
           NULL, NONE,                                                        \
           (),                                                                \
           "with --replay: the log's format (default auto,\n"                 \
           "detected and logged)")                                            \
        XX(REPLAY_FORMAT, "replay-format", 0, "text|json", NULL, NONE,        \
           (),                                                                \
           "with --replay: output (default text on a\n"                       \
           "terminal, else json)")                                            \
        XX(CHECK_RULES, "check-rules", 0, "RULES", NULL, TEXT,                \
           (FIELD(check_rules),                                               \
            .text = "a rules file"),                                          \
           "start nothing: validate RULES, print each rule\n"                 \
           "as understood; exit 0, or 2 naming the rule,\n"                   \
           "field and a likely fix")                                          \
        XX(STRICT, "strict", 0, NULL, NULL, FLAG,                             \
           (FIELD(strict)),                                                   \
           "unknown keys in a rule are errors, not\n"                         \
           "warnings (live, --replay and --check-rules)")                     \
        XX(HELP, "help", 'h', NULL, NULL, NONE,                               \
           (),                                                                \
           "show this help and exit")                                         \
        XX(VERSION, "version", 'V', NULL, NULL, NONE,                         \
           (),                                                                \
           "show the version, the commit, static or\n"                        \
           "dynamic, and the libraries' versions; exit")

enum hp_option_id {
#define XX(id, name, letter, metavar, env, kind, conv, help) HP_OPT_##id,
        HP_OPTION_TABLE(XX)
#undef XX
        HP_OPT_COUNT
};
/* clang-format on */

#endif
