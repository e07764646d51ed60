/* SPDX-License-Identifier: Apache-2.0 */
/* ${variable} expansion for the console prefix template. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"

static const struct hp_template_var *
find_var(const struct hp_template_var *vars, size_t nvars, const char *name,
         size_t name_len)
{
        for (size_t i = 0; i < nvars; i++)
                if (strlen(vars[i].name) == name_len &&
                    memcmp(vars[i].name, name, name_len) == 0)
                        return &vars[i];
        return NULL;
}

static int append(char *out, size_t len, size_t *pos, const char *s, size_t n)
{
        if (*pos + n >= len)
                return HP_ETOOBIG;
        memcpy(out + *pos, s, n);
        *pos += n;
        out[*pos] = '\0';
        return 0;
}

int hp_template_expand(const char *tmpl, const struct hp_template_var *vars,
                       size_t nvars, char *out, size_t len, size_t *out_len,
                       char *errbuf, size_t errlen)
{
        size_t pos = 0;
        int r;

        if (len == 0)
                return HP_ETOOBIG;
        out[0] = '\0';
        for (const char *p = tmpl; *p != '\0';) {
                const struct hp_template_var *var;
                const char *name;
                size_t name_len;

                if (*p != '$') {
                        const char *dollar = strchr(p, '$');
                        size_t n = dollar ? (size_t)(dollar - p) : strlen(p);
                        r = append(out, len, &pos, p, n);
                        if (r < 0)
                                goto too_big;
                        p += n;
                        continue;
                }
                if (p[1] == '$') {
                        r = append(out, len, &pos, "$", 1);
                        if (r < 0)
                                goto too_big;
                        p += 2;
                        continue;
                }
                if (p[1] == '{') {
                        const char *close = strchr(p + 2, '}');
                        if (close == NULL) {
                                snprintf(errbuf, errlen,
                                         "unterminated '${' in template '%s'",
                                         tmpl);
                                return HP_ECONFIG;
                        }
                        name = p + 2;
                        name_len = (size_t)(close - name);
                        p = close + 1;
                } else {
                        name = p + 1;
                        name_len = 0;
                        while (isalnum((unsigned char)name[name_len]) ||
                               name[name_len] == '_')
                                name_len++;
                        if (name_len == 0) {
                                snprintf(errbuf, errlen,
                                         "a lone '$' in template '%s' (write "
                                         "'$$' for a dollar sign)",
                                         tmpl);
                                return HP_ECONFIG;
                        }
                        p = name + name_len;
                }
                var = find_var(vars, nvars, name, name_len);
                if (var == NULL) {
                        snprintf(errbuf, errlen,
                                 "unknown variable '%.*s' in template '%s'",
                                 (int)name_len, name, tmpl);
                        return HP_ECONFIG;
                }
                r = append(out, len, &pos, var->value, strlen(var->value));
                if (r < 0)
                        goto too_big;
        }
        if (out_len)
                *out_len = pos;
        return 0;

too_big:
        snprintf(errbuf, errlen,
                 "template '%s' expands to more than %zu bytes", tmpl,
                 len - 1);
        return HP_ETOOBIG;
}
