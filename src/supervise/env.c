/* SPDX-License-Identifier: Apache-2.0 */
/* The worker environment and argv, as torchrun and the reference build
 * them. Pure functions: tested without spawning anything. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#define ENV_VARS 27

int hp_env_build(const struct hp_env_params *p, char *const *inherited,
                 struct hp_envbuf *out)
{
        const char *nccl = hp_env_get(inherited,
                                      "TORCH_NCCL_ASYNC_ERROR_HANDLING");
        const char *coord = hp_env_get(inherited,
                                       "HYPERPOD_SIGNAL_COORDINATION");
        char numbers[12][24];
        const char *set[ENV_VARS][2] = {
                { "LOCAL_RANK", numbers[0] },
                { "RANK", numbers[1] },
                { "GROUP_RANK", numbers[2] },
                { "ROLE_RANK", numbers[1] },
                { "ROLE_NAME", p->role },
                { "LOCAL_WORLD_SIZE", numbers[3] },
                { "WORLD_SIZE", numbers[4] },
                { "GROUP_WORLD_SIZE", numbers[5] },
                { "ROLE_WORLD_SIZE", numbers[4] },
                { "MASTER_ADDR", p->master_addr },
                { "MASTER_PORT", numbers[6] },
                { "TORCHELASTIC_RESTART_COUNT", numbers[7] },
                { "JOB_RESTART_COUNT", numbers[7] },
                { "TORCHELASTIC_MAX_RESTARTS", numbers[8] },
                { "TORCHELASTIC_RUN_ID", p->run_id },
                { "TORCHELASTIC_USE_AGENT_STORE",
                  p->agent_store ? "True" : "False" },
                { "TORCH_NCCL_ASYNC_ERROR_HANDLING", nccl ? nccl : "1" },
                { "TORCHELASTIC_ERROR_FILE", p->error_file },
                { "HYPERPOD_SIGNAL_COORDINATION",
                  coord ? coord : "disabled" },
                { HP_IPC_ENV, p->ipc_path ? p->ipc_path : "" },
                /* Optional (NULL: not set, an inherited one is kept). */
                { "PYTHONPATH", p->python_path },
                { "HYPERPODRUN_STACKS_SIGNAL", p->stacks_signal },
                /* Both names of each: torch 2.8 and later read the
                 * TORCH_FR_ one first (and log that the other is
                 * deprecated); torch 2.3 to 2.7 know only the old one. */
                { "TORCH_FR_BUFFER_SIZE", p->fr_buffer_size },
                { "TORCH_NCCL_TRACE_BUFFER_SIZE", p->fr_buffer_size },
                { "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", p->fr_pipe_file },
                { "TORCH_FR_DUMP_TEMP_FILE", p->fr_dump_file },
                { "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", p->fr_dump_file },
        };
        size_t n_inherited = 0, bytes = 0, n = 0;
        char *w;

        snprintf(numbers[0], sizeof(numbers[0]), "%d", p->local_rank);
        snprintf(numbers[1], sizeof(numbers[1]), "%d", p->rank);
        snprintf(numbers[2], sizeof(numbers[2]), "%d", p->group_rank);
        snprintf(numbers[3], sizeof(numbers[3]), "%d", p->local_world_size);
        snprintf(numbers[4], sizeof(numbers[4]), "%d", p->world_size);
        snprintf(numbers[5], sizeof(numbers[5]), "%d", p->group_world_size);
        snprintf(numbers[6], sizeof(numbers[6]), "%d", p->master_port);
        snprintf(numbers[7], sizeof(numbers[7]), "%d", p->restart_count);
        snprintf(numbers[8], sizeof(numbers[8]), "%d", p->max_restarts);

        for (char *const *e = inherited; *e; e++)
                n_inherited++;
        for (size_t i = 0; i < ENV_VARS; i++)
                if (set[i][1] != NULL)
                        bytes += strlen(set[i][0]) + strlen(set[i][1]) + 2;

        out->envp = calloc(n_inherited + ENV_VARS + 1, sizeof(char *));
        out->strings = malloc(bytes);
        if (out->envp == NULL || out->strings == NULL) {
                hp_env_free(out);
                return -ENOMEM;
        }
        /* Inherited variables are borrowed; ours replace any of the same
         * name, so a stale RANK from an outer launcher cannot leak in. */
        for (char *const *e = inherited; *e; e++) {
                bool replaced = false;
                for (size_t i = 0; i < ENV_VARS && !replaced; i++) {
                        size_t len = strlen(set[i][0]);
                        if (set[i][1] == NULL)
                                continue;
                        replaced = strncmp(*e, set[i][0], len) == 0 &&
                                   (*e)[len] == '=';
                }
                if (!replaced)
                        out->envp[n++] = *e;
        }
        w = out->strings;
        for (size_t i = 0; i < ENV_VARS; i++) {
                if (set[i][1] == NULL)
                        continue;
                out->envp[n++] = w;
                w += sprintf(w, "%s=%s", set[i][0], set[i][1]) + 1;
        }
        out->envp[n] = NULL;
        return 0;
}

void hp_env_free(struct hp_envbuf *env)
{
        free(env->envp);
        free(env->strings);
        env->envp = NULL;
        env->strings = NULL;
}

/* Copies n strings into one block and points argv at them. */
static int argv_pack(struct hp_argv *out, const char *const *items, int n,
                     int subst_from, int local_rank)
{
        static const char macro[] = "${local_rank}";
        char rank_text[16];
        size_t bytes = 0;
        char *w;

        snprintf(rank_text, sizeof(rank_text), "%d", local_rank);
        for (int i = 0; i < n; i++) {
                size_t count = 0;
                for (const char *p = i >= subst_from ? strstr(items[i], macro)
                                                     : NULL;
                     p; p = strstr(p + sizeof(macro) - 1, macro))
                        count++;
                bytes += strlen(items[i]) + 1 + count * strlen(rank_text);
        }
        out->argv = calloc((size_t)n + 1, sizeof(char *));
        out->strings = malloc(bytes ? bytes : 1);
        if (out->argv == NULL || out->strings == NULL) {
                hp_argv_free(out);
                return -ENOMEM;
        }
        w = out->strings;
        for (int i = 0; i < n; i++) {
                const char *src = items[i];
                const char *hit;

                out->argv[i] = w;
                while (i >= subst_from &&
                       (hit = strstr(src, macro)) != NULL) {
                        memcpy(w, src, (size_t)(hit - src));
                        w += hit - src;
                        w += sprintf(w, "%s", rank_text);
                        src = hit + sizeof(macro) - 1;
                }
                w += sprintf(w, "%s", src) + 1;
        }
        out->argv[n] = NULL;
        out->argc = n;
        return 0;
}

int hp_argv_build_worker(const struct hp_config *cfg, int local_rank,
                         struct hp_argv *out)
{
        const char **items;
        int n = 0, r;

        items = calloc((size_t)cfg->script_argc + 5, sizeof(char *));
        if (items == NULL)
                return -ENOMEM;
        if (!cfg->no_python) {
                items[n++] = cfg->python_exec;
                items[n++] = "-u";
                if (cfg->module)
                        items[n++] = "-m";
        }
        items[n++] = cfg->script;
        for (int i = 0; i < cfg->script_argc; i++)
                items[n++] = cfg->script_args[i];
        /* Only the script's arguments get ${local_rank}, as in torchrun;
         * the interpreter and the script path are taken literally. */
        r = argv_pack(out, items, n, n - cfg->script_argc, local_rank);
        free(items);
        return r;
}

int hp_argv_build_hook(const char *script, const char *args,
                       struct hp_argv *out)
{
        const char *items[2] = { script, args };

        /* The args string is one opaque argument, passed untouched (no
         * ${local_rank} either); no flag, no argument (the reference
         * passes a literal "None" there; we do not). */
        return argv_pack(out, items, args ? 2 : 1, 2, 0);
}

void hp_argv_free(struct hp_argv *a)
{
        free(a->argv);
        free(a->strings);
        a->argv = NULL;
        a->strings = NULL;
}
