/* SPDX-License-Identifier: Apache-2.0 */
/* Who may use the API, and how often a report may be asked for: the
 * --server-token-file token (read once, compared in constant time) and
 * the rate limit of POST /debug/stacks. The checks are pure: the caller
 * passes the header and the loop's time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

/* The file holds one line: the token, its final newline dropped. */
static int check_token(const char *path, const char *text, size_t n,
                       size_t *len, char *errbuf, size_t errlen)
{
        while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
                n--;
        if (n == 0) {
                snprintf(errbuf, errlen,
                         "--server-token-file '%s' is empty: "
                         "write the token into it",
                         path);
                return -EINVAL;
        }
        /* What a header value can carry unchanged: visible ASCII. */
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)text[i];
                if (ch > 0x20 && ch < 0x7f)
                        continue;
                snprintf(errbuf, errlen,
                         "--server-token-file '%s': byte %zu "
                         "of the token is 0x%02x; a token "
                         "is one line of visible ASCII "
                         "(no space, no control character)",
                         path, i, ch);
                return -EINVAL;
        }
        *len = n;
        return 0;
}

int hp_op_token_load(const char *path, char **out, size_t *len, char *errbuf,
                     size_t errlen)
{
        struct stat st;
        char *text = NULL;
        ssize_t got;
        int fd, r;

        *out = NULL;
        *len = 0;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                r = -errno;
                snprintf(errbuf, errlen, "--server-token-file '%s': %s", path,
                         hp_strerror(r));
                return r;
        }
        if (fstat(fd, &st) < 0) {
                r = -errno;
                snprintf(errbuf, errlen, "--server-token-file '%s': %s", path,
                         hp_strerror(r));
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                r = -EINVAL;
                snprintf(errbuf, errlen,
                         "--server-token-file '%s' is not a "
                         "regular file",
                         path);
                goto out;
        }
        /* Whoever else can read the token can drive the agent, and
         * whoever can write it can lock the operator out. */
        if ((st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) != 0 ||
            (st.st_uid != 0 && st.st_uid != geteuid())) {
                r = -EPERM;
                snprintf(errbuf, errlen,
                         "--server-token-file '%s' (mode "
                         "%04o, owner uid %u) is %s; make it "
                         "owned by uid %u or root and "
                         "neither readable nor writable by "
                         "others (chmod 600, or "
                         "defaultMode: 0400 on a Kubernetes "
                         "secret volume)",
                         path, (unsigned)(st.st_mode & 07777),
                         (unsigned)st.st_uid,
                         (st.st_mode & S_IROTH) ? "readable by others"
                         : (st.st_mode & (S_IWOTH | S_IWGRP))
                                 ? "writable by its group or others"
                                 : "owned by another user",
                         (unsigned)geteuid());
                goto out;
        }
        if (st.st_size > HP_OP_TOKEN_MAX) {
                r = -EFBIG;
                snprintf(errbuf, errlen,
                         "--server-token-file '%s' is %lld "
                         "bytes, over the %d-byte limit",
                         path, (long long)st.st_size, HP_OP_TOKEN_MAX);
                goto out;
        }
        text = malloc(HP_OP_TOKEN_MAX + 2);
        if (text == NULL) {
                r = -ENOMEM;
                snprintf(errbuf, errlen,
                         "--server-token-file: out of memory");
                goto out;
        }
        do
                got = read(fd, text, HP_OP_TOKEN_MAX + 1);
        while (got < 0 && errno == EINTR);
        if (got < 0 || got > HP_OP_TOKEN_MAX) {
                r = got < 0 ? -errno : -EFBIG;
                snprintf(errbuf, errlen, "--server-token-file '%s': %s", path,
                         hp_strerror(r));
                goto out;
        }
        text[got] = '\0';
        r = check_token(path, text, (size_t)got, len, errbuf, errlen);
        if (r < 0)
                goto out;
        text[*len] = '\0';
        *out = text;
        text = NULL;
out:
        if (text != NULL) {
                explicit_bzero(text, HP_OP_TOKEN_MAX + 2);
                free(text);
        }
        close(fd);
        if (r < 0)
                *len = 0;
        return r;
}

bool hp_op_token_matches(const char *token, size_t len,
                         const char *authorization)
{
        static const char scheme[] = "Bearer";
        const char *given;
        size_t n;
        unsigned char diff;

        if (authorization == NULL ||
            strncasecmp(authorization, scheme, sizeof(scheme) - 1) != 0)
                return false;
        given = authorization + sizeof(scheme) - 1;
        if (*given != ' ' && *given != '\t')
                return false;
        while (*given == ' ' || *given == '\t')
                given++;
        n = strlen(given);
        while (n > 0 && (given[n - 1] == ' ' || given[n - 1] == '\t'))
                n--;
        /* Every byte of the token is looked at, whatever matched: the
         * time says nothing of how much of a guess was right. */
        diff = n != len;
        for (size_t i = 0; i < len; i++)
                diff |= (unsigned char)token[i] ^
                        (unsigned char)(i < n ? given[i] : 0);
        return diff == 0;
}

uint64_t hp_op_limit_wait(const struct hp_op_limit *l, uint64_t now_ms)
{
        return l->used && now_ms < l->next_ms ? l->next_ms - now_ms : 0;
}

void hp_op_limit_note(struct hp_op_limit *l, uint64_t now_ms,
                      uint64_t interval_ms)
{
        l->used = true;
        l->next_ms = now_ms + interval_ms;
}
