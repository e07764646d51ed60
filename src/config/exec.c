/* SPDX-License-Identifier: Apache-2.0 */
/* Finding executables on PATH and checking the files options name. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "config-private.h"

int hp_config_find_executable(const char *name, char *path, size_t len)
{
        const char *search;
        int result = -ENOENT;

        if (strchr(name, '/') != NULL) {
                struct stat st;
                if (stat(name, &st) < 0)
                        return -errno;
                if (S_ISDIR(st.st_mode))
                        return -EISDIR;
                if (access(name, X_OK) < 0)
                        return -EACCES;
                return hp_snprintf(path, len, "%s", name) < 0 ? -ENAMETOOLONG
                                                              : 0;
        }
        search = getenv("PATH");
        if (search == NULL)
                search = "/usr/local/bin:/usr/bin:/bin";
        while (*search) {
                const char *colon = strchr(search, ':');
                size_t dir_len = colon ? (size_t)(colon - search)
                                       : strlen(search);
                struct stat st;

                if (hp_snprintf(path, len, "%.*s/%s", (int)dir_len, search,
                                name) == 0 &&
                    stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                        if (access(path, X_OK) == 0)
                                return 0;
                        result = -EACCES;
                }
                search += dir_len;
                if (*search == ':')
                        search++;
        }
        return result;
}

static int check_executable(const char *what, const char *name, char *errbuf,
                            size_t errlen)
{
        char path[PATH_MAX];
        int r = hp_config_find_executable(name, path, sizeof(path));

        if (r == 0)
                return 0;
        if (r == -EACCES)
                ERR("%s '%s' is not executable (chmod +x it, and give it a "
                    "#! line)",
                    what, name);
        if (r == -EISDIR)
                ERR("%s '%s' is a directory", what, name);
        if (strchr(name, '/') == NULL)
                ERR("%s '%s' was not found in PATH", what, name);
        ERR("%s '%s' does not exist", what, name);
}

int hp_config_check_files(const struct hp_config *cfg, char *errbuf,
                          size_t errlen)
{
        int r;

        if (cfg->pre_train_script) {
                r = check_executable("--pre-train-script",
                                     cfg->pre_train_script, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->post_train_script) {
                r = check_executable("--post-train-script",
                                     cfg->post_train_script, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->no_python)
                return check_executable("training program", cfg->script,
                                        errbuf, errlen);
        r = check_executable("python interpreter (PYTHON_EXEC)",
                             cfg->python_exec, errbuf, errlen);
        if (r < 0)
                return r;
        if (!cfg->module) {
                struct stat st;
                if (stat(cfg->script, &st) < 0)
                        ERR("training script '%s' does not exist",
                            cfg->script);
                if (S_ISDIR(st.st_mode))
                        ERR("training script '%s' is a directory",
                            cfg->script);
                if (access(cfg->script, R_OK) < 0)
                        ERR("training script '%s' is not readable",
                            cfg->script);
        }
        return 0;
}
