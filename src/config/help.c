/* SPDX-License-Identifier: Apache-2.0 */
/* The --help text, from the option table in options.h. man/hyperpodrun.1.in
 * and docs/usage.md say the same; the docs test checks that every long
 * option here appears in both. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "options.h"

#define HELP_COLUMN 29 /* where an option's text starts */

struct help_row {
        const char *name;
        int letter;
        const char *metavar;
        bool torchrun; /* has a PET_ variable: listed with torchrun's */
        const char *help;
};

static const struct help_row help_rows[] = {
#define XX(id, name, letter, metavar, env, kind, conv, help)                 \
        { name, letter, metavar, env != NULL, help },
        HP_OPTION_TABLE(XX)
#undef XX
};

/* The text around the options, laid out as printed. */
/* clang-format off */
static const char usage[] =
"Usage: hyperpodrun [OPTIONS] TRAINING_SCRIPT [SCRIPT ARGS...]\n"
"       hyperpodrun [OPTIONS] -m MODULE [ARGS...]\n"
"       hyperpodrun [OPTIONS] --no-python PROGRAM [ARGS...]\n"
"       hyperpodrun --replay LOG --log-monitoring-config RULES\n"
"                   [--replay-rate LINES_PER_SEC] [--expect FILE]\n"
"                   [--replay-until TIME|+SECS|verdict] [--strict]\n"
"                   [--replay-input FORMAT] [--replay-format text|json]\n"
"                   [--emit-expect FILE]\n"
"       hyperpodrun --check-rules RULES [--strict]\n"
"\n"
"Launch one training process per local accelerator with the torchrun\n"
"environment, tee their output to per-rank files and the console, and\n"
"supervise them (SageMaker HyperPod elastic agent, in C).\n"
"\n"
;

static const char torchrun_intro[] =
"torchrun options (also --name_with_underscores; each can be set with the\n"
"environment variable PET_<NAME>, e.g. PET_NPROC_PER_NODE; flags win; a\n"
"flag's PET_ value is an integer, 0 for off, as torchrun reads it):\n"
;

static const char torchrun_outro[] =
"  (docs/torchrun-flags.md: every torchrun flag and what hyperpodrun does)\n"
"\n"
"hyperpodrun options:\n";
static const char closing[] =
"\n"
"Exit status: 0 when every stage succeeded; the root-cause worker's exit\n"
"code, or 128+N when it was killed by signal N; 128+N when hyperpodrun was\n"
"stopped by signal N; 124 when a log rule stopped the job and no restart\n"
"was left; 122 when another node left a c10d job; 2 for a bad command line\n"
"or setup error. --replay exits 0, or 1\n"
"when --expect is not met, or 2 when the rules, the expectation or the log\n"
"cannot be used. --check-rules exits 0, or 2 for rules that cannot be used.\n"
"See hyperpodrun(1) for the environment, files and signals.\n";

/* clang-format on */

struct help_buf {
        char *text;
        size_t len, cap;
};

static void put(struct help_buf *b, const char *text, size_t len)
{
        if (b->len + len + 1 > b->cap)
                abort(); /* sized below for the table's text */
        memcpy(b->text + b->len, text, len);
        b->len += len;
        b->text[b->len] = '\0';
}

static void puts_(struct help_buf *b, const char *text)
{
        put(b, text, strlen(text));
}

static void pad_to(struct help_buf *b, size_t line_start, size_t column)
{
        while (b->len - line_start < column)
                put(b, " ", 1);
}

/* "  -m, --module" or "  --a, --b METAVAR", then the text's lines from
 * HELP_COLUMN, on the heading's line where it leaves room. */
static void put_rows(struct help_buf *b, bool torchrun)
{
        size_t line_start = b->len;
        bool open = false;

        for (size_t i = 0; i < HP_ARRAY_SIZE(help_rows); i++) {
                const struct help_row *row = &help_rows[i];
                const char *text, *nl;
                char letter[8];

                if (row->torchrun != torchrun)
                        continue;
                if (!open) {
                        line_start = b->len;
                        puts_(b, "  ");
                        open = true;
                } else {
                        puts_(b, ", ");
                }
                if (row->letter) {
                        snprintf(letter, sizeof(letter), "-%c, ",
                                 row->letter);
                        puts_(b, letter);
                }
                puts_(b, "--");
                puts_(b, row->name);
                if (row->help == NULL)
                        continue; /* listed with the next row */
                if (row->metavar) {
                        puts_(b, " ");
                        puts_(b, row->metavar);
                }
                if (b->len - line_start + 1 > HELP_COLUMN) {
                        puts_(b, "\n");
                        line_start = b->len;
                }
                for (text = row->help;; text = nl + 1) {
                        pad_to(b, line_start, HELP_COLUMN);
                        nl = strchr(text, '\n');
                        put(b, text, nl ? (size_t)(nl - text) : strlen(text));
                        puts_(b, "\n");
                        line_start = b->len;
                        if (nl == NULL)
                                break;
                }
                open = false;
        }
}

const char *hp_config_help(void)
{
        static char text[20480];
        struct help_buf b = { text, 0, sizeof(text) };

        if (text[0] != '\0')
                return text;
        puts_(&b, usage);
        puts_(&b, torchrun_intro);
        put_rows(&b, true);
        puts_(&b, torchrun_outro);
        put_rows(&b, false);
        puts_(&b, closing);
        return text;
}
