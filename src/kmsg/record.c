/* SPDX-License-Identifier: Apache-2.0 */
/* One /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,...];<message>". */
#include <errno.h>
#include <string.h>

#include "hyperpod/kmsg.h"

static int number(const char **p, const char *end, char stop, uint64_t *out)
{
        uint64_t v = 0;
        const char *s = *p;

        if (s == end || *s < '0' || *s > '9')
                return -EBADMSG;
        for (; s < end && *s >= '0' && *s <= '9'; s++) {
                if (v > (UINT64_MAX - 9) / 10)
                        return -EBADMSG;
                v = v * 10 + (uint64_t)(*s - '0');
        }
        if (s == end || *s != stop)
                return -EBADMSG;
        *p = s + 1;
        *out = v;
        return 0;
}

int kmsg_record_parse(const char *buf, size_t len, struct kmsg_record *out)
{
        const char *p = buf, *end = buf + len, *semi, *nl;
        uint64_t prio, seq, usec;

        semi = memchr(buf, ';', len);
        nl = memchr(buf, '\n', len);
        if (semi == NULL || (nl != NULL && nl < semi))
                return -EBADMSG;
        /* The flags field may be followed by more comma-separated fields
         * in later kernels: only the first three are read. */
        if (number(&p, semi, ',', &prio) < 0 || prio > 1023)
                return -EBADMSG;
        /* From here on the line has a record's header: a bad sequence
         * number or timestamp (a negative one, say) makes it a broken
         * record, not a plain line to be taken as logged now. */
        if (number(&p, semi, ',', &seq) < 0)
                return -EPROTO;
        if (number(&p, semi, ',', &usec) < 0 &&
            number(&p, semi + 1, ';', &usec) < 0)
                return -EPROTO;
        out->prio = (int)prio;
        out->seq = seq;
        out->usec = usec;
        out->msg = semi + 1;
        nl = memchr(out->msg, '\n', (size_t)(end - out->msg));
        out->msg_len = (size_t)((nl != NULL ? nl : end) - out->msg);
        return 0;
}
