/* SPDX-License-Identifier: Apache-2.0 */
/* The slurm backend: this node's place in a Slurm step.
 *
 * Inside an allocation, `srun hyperpodrun ...` runs one hyperpodrun per
 * node with the step in its environment. The node list there is fixed when
 * the step starts; after HyperPod replaces a node and auto-resumes the job
 * it can name a node that is gone. So when scontrol is at hand, it is asked
 * for the job's current NodeList first, before any worker starts, and the
 * environment serves only when scontrol is absent, fails or is slow. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hp-sys.h"
#include "hyperpod/common.h"
#include "rendezvous-private.h"

extern char **environ;

/* `scontrol show job` prints one line of a few hundred bytes; a job with a
 * long command or comment can be longer, and NodeList sits in the middle. */
#define SCONTROL_OUTPUT_MAX 65536

/* Lightning's rule for a port from the job id, so that two jobs sharing a
 * node do not fight over one port. */
#define JOB_PORT_BASE 15000
#define JOB_PORT_SPAN 10000

static const char *const count_vars[] = { "SLURM_STEP_NUM_NODES",
                                          "SLURM_NNODES",
                                          "SLURM_JOB_NUM_NODES" };
static const char *const list_vars[] = { "SLURM_STEP_NODELIST",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_NODELIST" };
static const char *const job_id_vars[] = { "SLURM_JOB_ID", "SLURM_JOBID" };

/* The first of names that is set in envp, and which one it was. */
static const char *env_first(char *const *envp, const char *const *names,
                             size_t n, const char **name)
{
        for (size_t i = 0; i < n; i++) {
                const char *v = hp_env_get(envp, names[i]);

                if (v != NULL) {
                        *name = names[i];
                        return v;
                }
        }
        *name = NULL;
        return NULL;
}

/* Position of this node in a list: its exact name first, then by
 * hp_rdzv__same_host (a hostname with a domain). */
static int find_node(const struct hp_hostlist *list, const char *me)
{
        for (size_t i = 0; i < list->count; i++)
                if (strcmp(list->names[i], me) == 0)
                        return (int)i;
        for (size_t i = 0; i < list->count; i++)
                if (hp_rdzv__same_host(list->names[i], me))
                        return (int)i;
        return -1;
}

int hp_rdzv_scontrol_nodelist(const char *output, char *list, size_t len)
{
        static const char key[] = "NodeList=";
        const char *p = output;

        /* ReqNodeList= and ExcNodeList= end in the same key; the job's own
         * starts a field, after a blank or at the start. */
        while ((p = strstr(p, key)) != NULL) {
                if (p == output || p[-1] == ' ' || p[-1] == '\t' ||
                    p[-1] == '\n') {
                        const char *v = p + sizeof(key) - 1;
                        size_t n = strcspn(v, " \t\r\n");

                        if (n == 0 || n >= len ||
                            (n == 6 && memcmp(v, "(null)", 6) == 0))
                                return HP_ECONFIG;
                        memcpy(list, v, n);
                        list[n] = '\0';
                        return 0;
                }
                p += sizeof(key) - 1;
        }
        return HP_ECONFIG;
}

/* The node rank from SLURM_NODEID, checked against the list. */
static int rank_from_node_id(char *const *envp, const char *node_id,
                             const struct hp_hostlist *list,
                             const char *list_var, const char *list_text,
                             const char *count_var, char *errbuf,
                             size_t errlen, int *rank)
{
        const char *node_name = hp_env_get(envp, "SLURMD_NODENAME");
        int n = (int)list->count;

        if (hp_parse_int(node_id, 0, INT_MAX, rank) < 0) {
                snprintf(errbuf, errlen,
                         "invalid value '%s' for SLURM_NODEID (environment): "
                         "expected a node index from 0",
                         node_id);
                return HP_ECONFIG;
        }
        if (*rank >= n) {
                snprintf(errbuf, errlen,
                         "SLURM_NODEID %d (environment) is out of range: "
                         "%s is %d, so node ids go from 0 to %d",
                         *rank, count_var, n, n - 1);
                return HP_ECONFIG;
        }
        /* A node id that points at another node means the list is not the
         * step's (the job's list for a step on part of it): refuse rather
         * than give two nodes one rank. */
        if (node_name != NULL && strcmp(list->names[*rank], node_name) != 0) {
                snprintf(errbuf, errlen,
                         "SLURM_NODEID %d points at '%s' in %s '%s', but "
                         "this node is '%s' (SLURMD_NODENAME)",
                         *rank, list->names[*rank], list_var, list_text,
                         node_name);
                return HP_ECONFIG;
        }
        return 0;
}

/* The step's node count and its expanded host list, from the first of
 * the variables srun or sbatch set; the names of those it read. */
static int read_step(char *const *envp, int *nnodes, const char **count_var,
                     const char **list_var, const char **list_text,
                     struct hp_hostlist *hosts, char *errbuf, size_t errlen)
{
        const char *count_text;
        char reason[256];
        int r;

        count_text = env_first(envp, count_vars, HP_ARRAY_SIZE(count_vars),
                               count_var);
        if (count_text == NULL) {
                snprintf(
                        errbuf, errlen,
                        "--rdzv-backend slurm: none of SLURM_STEP_NUM_NODES, "
                        "SLURM_NNODES, SLURM_JOB_NUM_NODES is set; run "
                        "hyperpodrun under srun, one task per node");
                return HP_ECONFIG;
        }
        if (hp_parse_int(count_text, 1, HP_HOSTLIST_MAX_HOSTS, nnodes) < 0) {
                snprintf(errbuf, errlen,
                         "invalid value '%s' for %s (environment): expected "
                         "a node count from 1 to %d",
                         count_text, *count_var, HP_HOSTLIST_MAX_HOSTS);
                return HP_ECONFIG;
        }
        *list_text = env_first(envp, list_vars, HP_ARRAY_SIZE(list_vars),
                               list_var);
        if (*list_text == NULL) {
                snprintf(errbuf, errlen,
                         "--rdzv-backend slurm: none of SLURM_STEP_NODELIST, "
                         "SLURM_JOB_NODELIST, SLURM_NODELIST is set");
                return HP_ECONFIG;
        }
        r = hp_hostlist_expand(*list_text, hosts, reason, sizeof(reason));
        if (r < 0) {
                snprintf(errbuf, errlen,
                         "invalid host list '%s' in %s (environment): %s",
                         *list_text, *list_var, reason);
                return r == -ENOMEM ? r : HP_ECONFIG;
        }
        return 0;
}

int hp_rdzv_slurm_place(char *const *envp, const char *hostname,
                        const char *fresh_list, const char *fresh_source,
                        struct hp_rdzv_info *out, char *what, size_t what_len,
                        char *errbuf, size_t errlen)
{
        struct hp_hostlist env_hosts = { 0 }, fresh_hosts = { 0 };
        const struct hp_hostlist *hosts = &env_hosts;
        const char *count_var, *list_var, *list_text, *me;
        const char *node_id = hp_env_get(envp, "SLURM_NODEID");
        const char *me_source = "SLURMD_NODENAME";
        char reason[256];
        int nnodes, rank, env_rank, r;

        r = read_step(envp, &nnodes, &count_var, &list_var, &list_text,
                      &env_hosts, errbuf, errlen);
        if (r < 0)
                return r;

        if (fresh_list != NULL) {
                r = hp_hostlist_expand(fresh_list, &fresh_hosts, reason,
                                       sizeof(reason));
                if (r < 0)
                        hp_log_warn("rendezvous: %s gave NodeList=%s, which "
                                    "is not a host list (%s); using %s",
                                    fresh_source, fresh_list, reason,
                                    list_var);
                else if ((int)fresh_hosts.count != nnodes)
                        /* The job has more nodes than the step: only the
                         * step's own list says which ones it runs on. */
                        hp_log_warn("rendezvous: %s lists %zu nodes but the "
                                    "step has %d (%s); using %s",
                                    fresh_source, fresh_hosts.count, nnodes,
                                    count_var, list_var);
                else
                        hosts = &fresh_hosts;
        }

        me = hp_env_get(envp, "SLURMD_NODENAME");
        if (me == NULL) {
                me = hostname;
                me_source = "the hostname";
        }
        if (hosts == &fresh_hosts) {
                rank = find_node(hosts, me);
                if (rank < 0) {
                        FAIL_OUT("this node '%s' (%s) is not in the job's "
                                 "current node list '%s' (from %s)",
                                 me, me_source, fresh_list, fresh_source);
                }
                if (node_id != NULL &&
                    (hp_parse_int(node_id, 0, INT_MAX, &env_rank) < 0 ||
                     env_rank != rank))
                        hp_log_info("rendezvous: SLURM_NODEID is %s, but %s "
                                    "puts this node '%s' at %d: using %d "
                                    "(the environment predates a node "
                                    "replacement)",
                                    node_id, fresh_source, me, rank, rank);
                snprintf(what, what_len, "%s (NodeList=%s)", fresh_source,
                         fresh_list);
        } else {
                if ((int)env_hosts.count != nnodes) {
                        FAIL_OUT("%s is %d but %s '%s' holds %zu host%s",
                                 count_var, nnodes, list_var, list_text,
                                 env_hosts.count,
                                 env_hosts.count == 1 ? "" : "s");
                }
                if (node_id != NULL) {
                        r = rank_from_node_id(envp, node_id, hosts, list_var,
                                              list_text, count_var, errbuf,
                                              errlen, &rank);
                        if (r < 0)
                                goto out;
                } else {
                        rank = find_node(hosts, me);
                        if (rank < 0) {
                                FAIL_OUT("SLURM_NODEID is not set and this "
                                         "node '%s' (%s) is not in %s '%s'",
                                         me, me_source, list_var, list_text);
                        }
                }
                snprintf(what, what_len, "%s=%s", list_var, list_text);
        }
        out->nnodes = (int)hosts->count;
        out->node_rank = rank;
        if (hp_snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                        hosts->names[0]) < 0) {
                FAIL_OUT("the first host '%s' is too long", hosts->names[0]);
        }
        r = 0;
out:
        hp_hostlist_free(&fresh_hosts);
        hp_hostlist_free(&env_hosts);
        return r;
}

static uint64_t monotonic_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int spawn_scontrol(const char *path, const char *job_id, int out_fd,
                          pid_t *pid)
{
        char *const argv[] = { (char *)path,   (char *)"--oneliner",
                               (char *)"show", (char *)"job",
                               (char *)job_id, NULL };
        posix_spawn_file_actions_t actions;
        posix_spawnattr_t attr;
        sigset_t all, none;
        int r;

        /* The agent ignores SIGPIPE and may have handlers; scontrol gets
         * the defaults and an empty mask, as from a shell. */
        sigfillset(&all);
        sigemptyset(&none);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF |
                                                POSIX_SPAWN_SETSIGMASK);
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY,
                                         0);
        posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
        posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
        r = posix_spawn(pid, path, &actions, &attr, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        return -r;
}

/* The first line of what scontrol said, for a warning. */
static void first_line(char *text)
{
        text[strcspn(text, "\r\n")] = '\0';
}

/*
 * Runs `scontrol --oneliner show job ID` and waits for its output and its
 * exit, at most timeout_ms; a pidfd makes the exit an event next to the
 * pipe. On timeout scontrol is killed and reaped. Returns 0 with the
 * output in buf, or an error with the reason in errbuf.
 */
static int run_scontrol(const char *path, const char *job_id,
                        uint64_t timeout_ms, char *buf, size_t len,
                        char *errbuf, size_t errlen)
{
        uint64_t deadline = monotonic_ms() + timeout_ms;
        size_t used = 0;
        int fds[2], pidfd, status = 0, r;
        bool eof = false, exited = false;
        pid_t pid;

        if (pipe2(fds, O_CLOEXEC) < 0) {
                r = -errno;
                snprintf(errbuf, errlen, "pipe: %s", hp_strerror(r));
                return r;
        }
        r = spawn_scontrol(path, job_id, fds[1], &pid);
        close(fds[1]);
        if (r < 0) {
                close(fds[0]);
                snprintf(errbuf, errlen, "cannot start it: %s",
                         hp_strerror(r));
                return r;
        }
        pidfd = hp_pidfd_open(pid, 0);
        while (!eof || (!exited && pidfd >= 0)) {
                struct pollfd pfd[2] = {
                        { .fd = eof ? -1 : fds[0], .events = POLLIN },
                        { .fd = exited ? -1 : pidfd, .events = POLLIN },
                };
                uint64_t now = monotonic_ms();
                int n;

                if (now >= deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        snprintf(errbuf, errlen,
                                 "no answer within %.3g s (--rdzv-conf "
                                 "scontrol_timeout)",
                                 (double)timeout_ms / 1000.0);
                        r = HP_ERDZV;
                        goto out;
                }
                n = poll(pfd, 2, (int)(deadline - now));
                if (n < 0 && errno != EINTR) {
                        r = -errno;
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        snprintf(errbuf, errlen, "poll: %s", hp_strerror(r));
                        goto out;
                }
                if (n <= 0)
                        continue;
                if (pfd[0].revents != 0) {
                        char chunk[4096];
                        ssize_t got = read(fds[0], chunk, sizeof(chunk));

                        if (got > 0) {
                                /* Keep what fits; drain the rest so that
                                 * scontrol never blocks on a full pipe. */
                                size_t keep = (size_t)got;

                                if (keep > len - 1 - used)
                                        keep = len - 1 - used;
                                memcpy(buf + used, chunk, keep);
                                used += keep;
                        } else if (got == 0 || errno != EINTR) {
                                eof = true;
                        }
                }
                if (pfd[1].revents != 0)
                        exited = true;
        }
        /* Without a pidfd (an old kernel) the exit follows EOF closely. */
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        buf[used] = '\0';
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                first_line(buf);
                snprintf(errbuf, errlen, "%s: %s%.200s%s",
                         WIFEXITED(status) ? "failed" : "killed by a signal",
                         buf[0] ? "'" : "", buf[0] ? buf : "no output",
                         buf[0] ? "'" : "");
                r = HP_ERDZV;
                goto out;
        }
        r = 0;
out:
        if (pidfd >= 0)
                close(pidfd);
        close(fds[0]);
        return r;
}

/*
 * Asks scontrol for the job's current node list. Returns 1 with the list,
 * 0 when scontrol is not to be asked or failed (the environment serves;
 * a failure is a warning), or an error for a --rdzv-conf scontrol path
 * that cannot be run.
 */
static int fresh_node_list(struct hp_rdzv *rdzv, const char *job_id,
                           char *list, size_t len, char *source,
                           size_t source_len, char *errbuf, size_t errlen)
{
        const struct hp_rdzv_options *opt = &rdzv->opt;
        char path[PATH_MAX], reason[512];
        char *output;
        int r;

        if (strcmp(opt->scontrol, "off") == 0 || job_id == NULL)
                return 0;
        if (opt->scontrol[0] == '\0') {
                if (hp_config_find_executable("scontrol", path,
                                              sizeof(path)) < 0) {
                        hp_log_debug("rendezvous: no scontrol in PATH; the "
                                     "node list comes from the environment");
                        return 0;
                }
        } else {
                r = hp_config_find_executable(opt->scontrol, path,
                                              sizeof(path));
                if (r < 0) {
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf scontrol '%s' cannot be run: "
                                 "%s",
                                 opt->scontrol, hp_strerror(r));
                        return HP_ECONFIG;
                }
        }
        snprintf(source, source_len, "scontrol show job %s", job_id);
        output = malloc(SCONTROL_OUTPUT_MAX);
        if (output == NULL)
                return -ENOMEM;
        r = run_scontrol(path, job_id, opt->scontrol_timeout_ms, output,
                         SCONTROL_OUTPUT_MAX, reason, sizeof(reason));
        if (r == 0 && hp_rdzv_scontrol_nodelist(output, list, len) < 0) {
                first_line(output);
                snprintf(reason, sizeof(reason),
                         "no NodeList= in its answer '%.200s'", output);
                r = HP_ERDZV;
        }
        free(output);
        if (r < 0) {
                hp_log_warn("rendezvous: %s: %s; using the node list of the "
                            "environment, which is stale if a node was "
                            "replaced since the step started",
                            source, reason);
                return 0;
        }
        return 1;
}

static int port_from_job_id(char *const *envp, int *port, char *errbuf,
                            size_t errlen)
{
        const char *name, *text;
        uint64_t id;

        text = env_first(envp, job_id_vars, HP_ARRAY_SIZE(job_id_vars),
                         &name);
        if (text == NULL) {
                snprintf(errbuf, errlen,
                         "--rdzv-conf master_port=jobid: SLURM_JOB_ID is not "
                         "set");
                return HP_ECONFIG;
        }
        if (hp_parse_u64(text, UINT64_MAX, &id) < 0) {
                snprintf(errbuf, errlen,
                         "invalid value '%s' for %s (environment): expected "
                         "a job id",
                         text, name);
                return HP_ECONFIG;
        }
        *port = JOB_PORT_BASE + (int)(id % JOB_PORT_SPAN);
        return 0;
}

int hp_rdzv__slurm_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out,
                        char *errbuf, size_t errlen)
{
        char source[128] = "", what[2048];
        const char *job_id, *name;
        char *list;
        int r, fresh;

        /* A fragmented list of many nodes can be long: room for all that
         * scontrol may say. */
        list = malloc(SCONTROL_OUTPUT_MAX);
        if (list == NULL)
                return -ENOMEM;
        job_id = env_first(environ, job_id_vars, HP_ARRAY_SIZE(job_id_vars),
                           &name);
        fresh = fresh_node_list(rdzv, job_id, list, SCONTROL_OUTPUT_MAX,
                                source, sizeof(source), errbuf, errlen);
        r = fresh;
        if (r < 0)
                goto out;
        r = hp_rdzv_slurm_place(environ, rdzv->hostname, fresh ? list : NULL,
                                source, out, what, sizeof(what), errbuf,
                                errlen);
        if (r < 0)
                goto out;
        r = hp_rdzv__check_flags(rdzv->cfg, what, out, errbuf, errlen);
        if (r < 0)
                goto out;
        out->master_port = rdzv->cfg->master_port;
        if (rdzv->opt.port_from_job_id) {
                r = port_from_job_id(environ, &out->master_port, errbuf,
                                     errlen);
                if (r < 0)
                        goto out;
        }
        hp_log_info("rendezvous: slurm: node %d of %d, master %s:%d, from %s",
                    out->node_rank, out->nnodes, out->master_addr,
                    out->master_port, what);
        r = 0;
out:
        free(list);
        return r;
}
