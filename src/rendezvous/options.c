/* SPDX-License-Identifier: Apache-2.0 */
/* The --rdzv-conf keys of the self-driven backends, and the checks they
 * share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"
#include "rendezvous-private.h"

/* Where the hyperpod backend keeps pod_resourceconfig.json by default. */
#define DEFAULT_RESOURCE_CONFIG_DIR "/opt/ml/input/config"
/* The file HyperPod's lifecycle scripts read, where they leave it. */
#define DEFAULT_RESOURCE_CONFIG "/opt/ml/config/resource_config.json"
/* torchrun's c10d last_call_timeout. */
#define DEFAULT_LAST_CALL_TIMEOUT_MS 30000
/* torchrun's c10d join_timeout. */
#define DEFAULT_JOIN_TIMEOUT_MS 600000
/* torchrun's c10d keep-alive: a beat every 5 s, a node that missed 3 is
 * gone. */
#define DEFAULT_KEEP_ALIVE_INTERVAL_MS 5000
#define DEFAULT_KEEP_ALIVE_MAX_ATTEMPT 3
/* torchrun's c10d close_timeout and read_timeout. */
#define DEFAULT_CLOSE_TIMEOUT_MS 30000
#define DEFAULT_READ_TIMEOUT_MS 60000
/* Long enough for a busy slurmctld, short enough that a dead one does not
 * hold the job for long before the environment's list is used. */
#define DEFAULT_SCONTROL_TIMEOUT_MS 10000

enum key_id {
        KEY_SCONTROL,
        KEY_SCONTROL_TIMEOUT,
        KEY_MASTER_PORT,
        KEY_RESOURCE_CONFIG,
        KEY_INSTANCE_GROUP,
        KEY_RESOURCE_CONFIG_DIR,
        KEY_IS_HOST,
        KEY_COORDINATE,
        KEY_JOIN_TIMEOUT,
        KEY_LAST_CALL_TIMEOUT,
        KEY_KEEP_ALIVE_INTERVAL,
        KEY_KEEP_ALIVE_MAX_ATTEMPT,
        KEY_CLOSE_TIMEOUT,
        KEY_READ_TIMEOUT,
};

#define B(backend) (1u << (backend))
/* The backends whose rounds run at a store: c10d's, and the coordinated
 * restarts of the others (--rdzv-conf coordinate). */
#define B_STORE                                                              \
        (B(HP_RDZV_C10D) | B(HP_RDZV_STATIC) | B(HP_RDZV_SLURM) |            \
         B(HP_RDZV_RESOURCE_CONFIG))

struct key_row {
        const char *name;
        unsigned backends; /* B(backend) bits */
};

static const struct key_row keys[] = {
        [KEY_SCONTROL] = { "scontrol", B(HP_RDZV_SLURM) },
        [KEY_SCONTROL_TIMEOUT] = { "scontrol_timeout", B(HP_RDZV_SLURM) },
        [KEY_MASTER_PORT] = { "master_port", B(HP_RDZV_SLURM) },
        [KEY_RESOURCE_CONFIG] = { "resource_config",
                                  B(HP_RDZV_RESOURCE_CONFIG) },
        [KEY_INSTANCE_GROUP] = { "instance_group",
                                 B(HP_RDZV_RESOURCE_CONFIG) },
        [KEY_RESOURCE_CONFIG_DIR] = { "resource_config_dir",
                                      B(HP_RDZV_HYPERPOD) },
        [KEY_IS_HOST] = { "is_host", B(HP_RDZV_C10D) },
        [KEY_COORDINATE] = { "coordinate", B_STORE & ~B(HP_RDZV_C10D) },
        [KEY_JOIN_TIMEOUT] = { "join_timeout", B_STORE },
        [KEY_LAST_CALL_TIMEOUT] = { "last_call_timeout", B(HP_RDZV_C10D) },
        [KEY_KEEP_ALIVE_INTERVAL] = { "keep_alive_interval", B_STORE },
        [KEY_KEEP_ALIVE_MAX_ATTEMPT] = { "keep_alive_max_attempt", B_STORE },
        [KEY_CLOSE_TIMEOUT] = { "close_timeout", B_STORE },
        [KEY_READ_TIMEOUT] = { "read_timeout", B_STORE },
};

bool hp_rdzv__same_host(const char *name, const char *me)
{
        size_t short_len = strcspn(me, ".");

        if (strcmp(name, me) == 0)
                return true;
        return strlen(name) == short_len && memcmp(name, me, short_len) == 0;
}

static void list_keys(enum hp_rdzv_backend backend, char *buf, size_t len)
{
        buf[0] = '\0';
        for (size_t i = 0; i < HP_ARRAY_SIZE(keys); i++) {
                if (!(keys[i].backends & B(backend)))
                        continue;
                if (buf[0] != '\0')
                        strncat(buf, ", ", len - strlen(buf) - 1);
                strncat(buf, keys[i].name, len - strlen(buf) - 1);
        }
}

static int store(char *dst, size_t len, const char *value, size_t value_len,
                 const char *key, char *errbuf, size_t errlen)
{
        if (value_len == 0 || value_len >= len) {
                snprintf(errbuf, errlen,
                         "--rdzv-conf %s: the value must be 1 to %zu bytes",
                         key, len - 1);
                return HP_ECONFIG;
        }
        memcpy(dst, value, value_len);
        dst[value_len] = '\0';
        return 0;
}

/* coordinate=on|off|PORT. */
static int parse_coordinate(const char *text, int *port, char *errbuf,
                            size_t errlen)
{
        char *end;
        long v;

        if (strcasecmp(text, "on") == 0 || strcasecmp(text, "true") == 0) {
                *port = -1;
                return 0;
        }
        if (strcasecmp(text, "off") == 0 || strcasecmp(text, "false") == 0) {
                *port = 0;
                return 0;
        }
        v = strtol(text, &end, 10);
        if (end == text || *end != '\0' || v < 1 || v > 65535) {
                snprintf(errbuf, errlen,
                         "invalid value '%s' for --rdzv-conf coordinate: "
                         "expected on, off or a port (1 to 65535)",
                         text);
                return HP_ECONFIG;
        }
        *port = (int)v;
        return 0;
}

/* A key whose value is seconds ("600", "0.5"); above 0 unless zero_ok. */
static int seconds_key(const char *value, size_t value_len, const char *key,
                       bool zero_ok, uint64_t *out_ms, char *errbuf,
                       size_t errlen)
{
        char text[64];

        if (value_len >= sizeof(text))
                value_len = sizeof(text) - 1;
        memcpy(text, value, value_len);
        text[value_len] = '\0';
        if (hp_parse_seconds_ms(text, out_ms) < 0 ||
            (*out_ms == 0 && !zero_ok)) {
                snprintf(errbuf, errlen,
                         "invalid value '%s' for --rdzv-conf %s: expected "
                         "seconds%s, e.g. 30 or 0.5",
                         text, key, zero_ok ? "" : " above 0");
                return HP_ECONFIG;
        }
        return 0;
}

static int apply_key(struct hp_rdzv *rdzv, enum key_id id, const char *value,
                     size_t value_len, char *errbuf, size_t errlen)
{
        struct hp_rdzv_options *opt = &rdzv->opt;
        char text[64];

        switch (id) {
        case KEY_SCONTROL:
                return store(opt->scontrol, sizeof(opt->scontrol), value,
                             value_len, "scontrol", errbuf, errlen);
        case KEY_SCONTROL_TIMEOUT:
                return seconds_key(value, value_len, "scontrol_timeout",
                                   false, &opt->scontrol_timeout_ms, errbuf,
                                   errlen);
        case KEY_MASTER_PORT:
                if (value_len != 5 || memcmp(value, "jobid", 5) != 0) {
                        snprintf(errbuf, errlen,
                                 "invalid value '%.*s' for --rdzv-conf "
                                 "master_port: the only value is jobid (a "
                                 "port from SLURM_JOB_ID); give a number "
                                 "with --master-port",
                                 (int)value_len, value);
                        return HP_ECONFIG;
                }
                if (rdzv->cfg->master_port_given) {
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf master_port=jobid and "
                                 "--master-port %d both choose the port; "
                                 "give one",
                                 rdzv->cfg->master_port);
                        return HP_ECONFIG;
                }
                opt->port_from_job_id = true;
                return 0;
        case KEY_RESOURCE_CONFIG:
                snprintf(opt->resource_config_source,
                         sizeof(opt->resource_config_source), "%s",
                         "--rdzv-conf resource_config");
                return store(opt->resource_config,
                             sizeof(opt->resource_config), value, value_len,
                             "resource_config", errbuf, errlen);
        case KEY_INSTANCE_GROUP:
                return store(opt->instance_group, sizeof(opt->instance_group),
                             value, value_len, "instance_group", errbuf,
                             errlen);
        case KEY_IS_HOST:
                /* torchrun reads it as a boolean with these spellings. */
                if (value_len >= sizeof(text))
                        value_len = sizeof(text) - 1;
                memcpy(text, value, value_len);
                text[value_len] = '\0';
                if (strcasecmp(text, "1") == 0 ||
                    strcasecmp(text, "true") == 0 ||
                    strcasecmp(text, "t") == 0 ||
                    strcasecmp(text, "yes") == 0 ||
                    strcasecmp(text, "y") == 0) {
                        opt->is_host = 1;
                } else if (strcasecmp(text, "0") == 0 ||
                           strcasecmp(text, "false") == 0 ||
                           strcasecmp(text, "f") == 0 ||
                           strcasecmp(text, "no") == 0 ||
                           strcasecmp(text, "n") == 0) {
                        opt->is_host = 0;
                } else {
                        snprintf(
                                errbuf, errlen,
                                "invalid value '%s' for --rdzv-conf is_host: "
                                "expected true or false (1, yes, ... 0, no)",
                                text);
                        return HP_ECONFIG;
                }
                return 0;
        case KEY_COORDINATE:
                if (value_len >= sizeof(text))
                        value_len = sizeof(text) - 1;
                memcpy(text, value, value_len);
                text[value_len] = '\0';
                return parse_coordinate(text, &opt->coordinate_port, errbuf,
                                        errlen);
        case KEY_JOIN_TIMEOUT:
                return seconds_key(value, value_len, "join_timeout", false,
                                   &opt->join_timeout_ms, errbuf, errlen);
        case KEY_LAST_CALL_TIMEOUT:
                return seconds_key(value, value_len, "last_call_timeout",
                                   true, &opt->last_call_timeout_ms, errbuf,
                                   errlen);
        case KEY_KEEP_ALIVE_INTERVAL:
                return seconds_key(value, value_len, "keep_alive_interval",
                                   false, &opt->keep_alive_interval_ms,
                                   errbuf, errlen);
        case KEY_CLOSE_TIMEOUT:
                return seconds_key(value, value_len, "close_timeout", false,
                                   &opt->close_timeout_ms, errbuf, errlen);
        case KEY_READ_TIMEOUT:
                return seconds_key(value, value_len, "read_timeout", false,
                                   &opt->read_timeout_ms, errbuf, errlen);
        case KEY_KEEP_ALIVE_MAX_ATTEMPT:
                if (value_len >= sizeof(text))
                        value_len = sizeof(text) - 1;
                memcpy(text, value, value_len);
                text[value_len] = '\0';
                if (hp_parse_int(text, 1, 1000,
                                 &opt->keep_alive_max_attempt) < 0) {
                        snprintf(errbuf, errlen,
                                 "invalid value '%s' for --rdzv-conf "
                                 "keep_alive_max_attempt: expected a count "
                                 "from 1 to 1000",
                                 text);
                        return HP_ECONFIG;
                }
                return 0;
        case KEY_RESOURCE_CONFIG_DIR:
                opt->resource_config_dir_given = true;
                return store(opt->resource_config_dir,
                             sizeof(opt->resource_config_dir), value,
                             value_len, "resource_config_dir", errbuf,
                             errlen);
        }
        return 0;
}

int hp_rdzv__options_parse(struct hp_rdzv *rdzv, char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = rdzv->cfg;
        struct hp_rdzv_options *opt = &rdzv->opt;
        bool seen[HP_ARRAY_SIZE(keys)] = { false };
        const char *env;

        memset(opt, 0, sizeof(*opt));
        opt->scontrol_timeout_ms = DEFAULT_SCONTROL_TIMEOUT_MS;
        opt->join_timeout_ms = DEFAULT_JOIN_TIMEOUT_MS;
        opt->last_call_timeout_ms = DEFAULT_LAST_CALL_TIMEOUT_MS;
        opt->keep_alive_interval_ms = DEFAULT_KEEP_ALIVE_INTERVAL_MS;
        opt->keep_alive_max_attempt = DEFAULT_KEEP_ALIVE_MAX_ATTEMPT;
        opt->close_timeout_ms = DEFAULT_CLOSE_TIMEOUT_MS;
        opt->read_timeout_ms = DEFAULT_READ_TIMEOUT_MS;
        opt->is_host = -1;
        snprintf(opt->resource_config_dir, sizeof(opt->resource_config_dir),
                 "%s", DEFAULT_RESOURCE_CONFIG_DIR);
        /* MIN:MAX takes rounds that admit and drop nodes: c10d's. */
        if (cfg->nnodes_min > 0 &&
            (cfg->standalone || cfg->rdzv_backend != HP_RDZV_C10D)) {
                snprintf(errbuf, errlen,
                         "--nnodes %d:%d: an elastic node count needs "
                         "--rdzv-backend c10d; %s takes a fixed one (give "
                         "one count, or MIN equal to MAX)",
                         cfg->nnodes_min, cfg->nnodes,
                         cfg->standalone ? "--standalone"
                                         : cfg->rdzv_backend_name);
                return HP_ECONFIG;
        }
        /* --standalone reads no key. */
        if (cfg->standalone)
                return 0;

        for (const char *p = cfg->rdzv_conf; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                const char *eq = memchr(p, '=', len);
                size_t key_len = eq ? (size_t)(eq - p) : len;
                size_t i;
                int r;

                for (i = 0; i < HP_ARRAY_SIZE(keys); i++)
                        if ((keys[i].backends & B(cfg->rdzv_backend)) &&
                            strlen(keys[i].name) == key_len &&
                            memcmp(keys[i].name, p, key_len) == 0)
                                break;
                if (i == HP_ARRAY_SIZE(keys) &&
                    cfg->rdzv_backend == HP_RDZV_STATIC) {
                        /* torchrun's static backend reads no key and
                         * ignores the others; so does this one. */
                        p += len;
                        if (*p == ',')
                                p++;
                        continue;
                }
                if (i == HP_ARRAY_SIZE(keys) &&
                    cfg->rdzv_backend == HP_RDZV_HYPERPOD) {
                        /* The reference's hyperpod backend ignores keys it
                         * does not know (job specs carry torch's own). */
                        hp_log_warn("--rdzv-conf key '%.*s' is not read by "
                                    "the hyperpod backend; ignored",
                                    (int)key_len, p);
                        p += len;
                        if (*p == ',')
                                p++;
                        continue;
                }
                if (i == HP_ARRAY_SIZE(keys) || eq == NULL) {
                        char known[512];

                        list_keys(cfg->rdzv_backend, known, sizeof(known));
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf key '%.*s' is not one of the "
                                 "%s backend's: %s",
                                 (int)key_len, p, cfg->rdzv_backend_name,
                                 known);
                        return HP_ECONFIG;
                }
                if (seen[i]) {
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf key '%s' is given twice",
                                 keys[i].name);
                        return HP_ECONFIG;
                }
                seen[i] = true;
                r = apply_key(rdzv, (enum key_id)i, eq + 1, len - key_len - 1,
                              errbuf, errlen);
                if (r < 0)
                        return r;
                p += len;
                if (*p == ',')
                        p++;
        }

        if (cfg->rdzv_backend == HP_RDZV_RESOURCE_CONFIG &&
            opt->resource_config[0] == '\0') {
                env = getenv("SAGEMAKER_RESOURCE_CONFIG_PATH");
                if (env != NULL && *env != '\0') {
                        if (hp_snprintf(opt->resource_config,
                                        sizeof(opt->resource_config), "%s",
                                        env) < 0) {
                                snprintf(errbuf, errlen,
                                         "SAGEMAKER_RESOURCE_CONFIG_PATH "
                                         "(environment) is too long");
                                return HP_ECONFIG;
                        }
                        snprintf(opt->resource_config_source,
                                 sizeof(opt->resource_config_source), "%s",
                                 "SAGEMAKER_RESOURCE_CONFIG_PATH");
                } else {
                        snprintf(opt->resource_config,
                                 sizeof(opt->resource_config), "%s",
                                 DEFAULT_RESOURCE_CONFIG);
                        snprintf(opt->resource_config_source,
                                 sizeof(opt->resource_config_source), "%s",
                                 "the default path");
                }
        }
        return 0;
}

int hp_rdzv__check_flags(const struct hp_config *cfg, const char *source,
                         struct hp_rdzv_info *out, char *errbuf,
                         size_t errlen)
{
        if (cfg->nnodes_given && cfg->nnodes != out->nnodes) {
                snprintf(errbuf, errlen,
                         "--nnodes %d disagrees with %s, which has %d "
                         "node%s; drop --nnodes or fix it",
                         cfg->nnodes, source, out->nnodes,
                         out->nnodes == 1 ? "" : "s");
                return HP_ECONFIG;
        }
        if (cfg->node_rank_given && cfg->node_rank != out->node_rank) {
                snprintf(errbuf, errlen,
                         "--node-rank %d disagrees with %s, which makes "
                         "this node rank %d; drop --node-rank or fix it",
                         cfg->node_rank, source, out->node_rank);
                return HP_ECONFIG;
        }
        if (cfg->master_addr_given &&
            hp_snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                        cfg->master_addr) < 0) {
                snprintf(errbuf, errlen, "--master-addr is too long");
                return HP_ECONFIG;
        }
        return 0;
}

int hp_rdzv_parse_endpoint(const char *text, char *host, size_t host_len,
                           int default_port, int *port)
{
        const char *host_start = text, *host_end, *colon;
        size_t n;

        *port = default_port;
        if (*text == '[') {
                host_start = text + 1;
                host_end = strchr(host_start, ']');
                if (host_end == NULL)
                        return HP_ECONFIG;
                colon = host_end[1] == ':' ? host_end + 1 : NULL;
                if (host_end[1] != '\0' && colon == NULL)
                        return HP_ECONFIG;
        } else {
                colon = strrchr(text, ':');
                /* A bare IPv6 address has several colons and no port. */
                if (colon != NULL && strchr(text, ':') != colon)
                        colon = NULL;
                host_end = colon ? colon : text + strlen(text);
        }
        n = (size_t)(host_end - host_start);
        if (n == 0 || n >= host_len)
                return HP_ECONFIG;
        memcpy(host, host_start, n);
        host[n] = '\0';
        if (colon != NULL && hp_parse_int(colon + 1, 1, 65535, port) < 0)
                return HP_ECONFIG;
        return 0;
}
