/* SPDX-License-Identifier: Apache-2.0 */
/* Replay's clock: the timestamps a line can start with (asctime, ISO
 * 8601, epoch seconds, glog) as epoch milliseconds, with no time zone or
 * libc state involved. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "replay-private.h"

/* A clock step back of more than this in a glog log (which has no year)
 * is the turn of a year. */
#define GLOG_YEAR_TURN_MS (180LL * 86400 * 1000)

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
        int64_t era;
        unsigned yoe, doy, doe;

        y -= m <= 2;
        era = (y >= 0 ? y : y - 399) / 400;
        yoe = (unsigned)(y - era * 400);
        doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char *p, const char *end, int n, int *out)
{
        int v = 0, i;

        if (end - p < n)
                return false;
        for (i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return false;
                v = v * 10 + (p[i] - '0');
        }
        *out = v;
        return true;
}

/* Fraction digits after a '.' or ',' as milliseconds (truncated). */
static const char *fraction_ms(const char *p, const char *end, int *ms)
{
        int scale = 100;

        *ms = 0;
        while (p < end && *p >= '0' && *p <= '9') {
                *ms += (*p - '0') * scale;
                scale /= 10;
                p++;
        }
        return p;
}

/* "05:51:29" and an optional ".300" or ",300" at p: seconds of the day
 * and milliseconds. Returns the end, or NULL. */
static const char *time_of_day(const char *p, const char *end, int *secs,
                               int *ms)
{
        int h, mi, s;

        if (!digits(p, end, 2, &h) || end - p < 8 || p[2] != ':' ||
            !digits(p + 3, end, 2, &mi) || p[5] != ':' ||
            !digits(p + 6, end, 2, &s) || h > 23 || mi > 59 || s > 60)
                return NULL;
        p += 8;
        *ms = 0;
        if (p < end && (*p == '.' || *p == ','))
                p = fraction_ms(p + 1, end, ms);
        *secs = h * 3600 + mi * 60 + s;
        return p;
}

/* 2025-06-17 05:51:29,300 (asctime) or 2025-06-17T05:51:29.3+02:00 (ISO
 * 8601, fraction and zone optional). A time without a zone is taken as
 * UTC: only differences matter here. */
bool logmon__ts_datetime(const char *p, const char *end, int64_t *out,
                         enum replay_clock *kind)
{
        int y, mo, d, secs, ms, zh, zm, sign;
        int64_t t;

        if (!digits(p, end, 4, &y) || end - p < 11 || p[4] != '-' ||
            !digits(p + 5, end, 2, &mo) || p[7] != '-' ||
            !digits(p + 8, end, 2, &d) || (p[10] != ' ' && p[10] != 'T') ||
            mo < 1 || mo > 12 || d < 1 || d > 31)
                return false;
        *kind = p[10] == 'T' ? CLOCK_ISO8601 : CLOCK_ASCTIME;
        p = time_of_day(p + 11, end, &secs, &ms);
        if (p == NULL)
                return false;
        t = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + secs;
        if (p < end && (*p == '+' || *p == '-') &&
            digits(p + 1, end, 2, &zh)) {
                sign = *p == '-' ? -1 : 1;
                p += 3;
                if (p < end && *p == ':')
                        p++;
                if (!digits(p, end, 2, &zm))
                        zm = 0;
                t -= sign * (zh * 3600 + zm * 60);
        }
        *out = t * 1000 + ms;
        return true;
}

bool logmon__parse_time(const char *s, int64_t *ms)
{
        enum replay_clock kind;
        const char *end = s + strlen(s), *p;

        if (!logmon__ts_datetime(s, end, ms, &kind))
                return false;
        /* Whatever ts_datetime did not read must be a zone it read, or
         * 'Z': look for junk after the seconds' fraction. */
        p = s + 19;
        if (p < end && (*p == '.' || *p == ','))
                for (p++; p < end && *p >= '0' && *p <= '9'; p++)
                        ;
        if (p < end && *p == 'Z')
                p++;
        else if (p < end && (*p == '+' || *p == '-'))
                p += p + 3 < end && p[3] == ':' ? 6 : p + 3 < end ? 5 : 3;
        return p == end;
}

/* 1750139489.300: ten digits of epoch seconds (2001 to 2286), ending the
 * line or followed by a fraction, a blank or a ']'. */
static bool ts_epoch(const char *p, const char *end, int64_t *out)
{
        int64_t secs = 0;
        int i, ms = 0;

        if (end - p < 10)
                return false;
        for (i = 0; i < 10; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return false;
                secs = secs * 10 + (p[i] - '0');
        }
        p += 10;
        if (p < end && *p != '.' && *p != ' ' && *p != ']')
                return false;
        if (p < end && *p == '.')
                fraction_ms(p + 1, end, &ms);
        *out = secs * 1000 + ms;
        return true;
}

/* I0617 05:51:29.300000: glog's severity letter, month and day, time of
 * day. glog writes no year; the caller's year is used. */
static bool ts_glog(const char *p, const char *end, int year, int64_t *out)
{
        int mo, d, secs, ms;

        if (end - p < 6 || p[0] == '\0' || strchr("IWEF", p[0]) == NULL ||
            !digits(p + 1, end, 2, &mo) || !digits(p + 3, end, 2, &d) ||
            p[5] != ' ' || mo < 1 || mo > 12 || d < 1 || d > 31)
                return false;
        if (time_of_day(p + 6, end, &secs, &ms) == NULL)
                return false;
        *out = (days_from_civil(year, (unsigned)mo, (unsigned)d) * 86400 +
                secs) * 1000 +
               ms;
        return true;
}

/*
 * The timestamp at the start of a line (after its console prefix),
 * optionally inside a '[', as epoch milliseconds. The first line that has
 * one fixes the format for the rest of the log.
 */
bool logmon__line_timestamp(struct logmon_replay *r, const char *line,
                            size_t len, int64_t *out)
{
        const char *p = line, *end = line + len;
        enum replay_clock kind = CLOCK_NONE;
        bool found = false;

        if (p < end && *p == '[')
                p++;
        switch (r->clock) {
        case CLOCK_NONE:
        case CLOCK_AGENT:
                if (logmon__ts_datetime(p, end, out, &kind)) {
                        found = true;
                } else if (ts_epoch(p, end, out)) {
                        kind = CLOCK_EPOCH;
                        found = true;
                } else if (ts_glog(p, end, r->glog_year, out)) {
                        kind = CLOCK_GLOG;
                        found = true;
                }
                if (found)
                        r->clock = kind;
                return found;
        case CLOCK_ASCTIME:
        case CLOCK_ISO8601:
                return logmon__ts_datetime(p, end, out, &kind);
        case CLOCK_EPOCH:
                return ts_epoch(p, end, out);
        case CLOCK_GLOG:
                if (!ts_glog(p, end, r->glog_year, out))
                        return false;
                if (*out < r->last_ts - GLOG_YEAR_TURN_MS) {
                        r->glog_year++;
                        ts_glog(p, end, r->glog_year, out);
                }
                return true;
        case CLOCK_RATE:
        case CLOCK_HEAD:
                break;
        }
        return false;
}
