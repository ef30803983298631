/*
 * The database directives.
 *
 * session_db names the database of the query pool; session_db_listen,
 * when given, that of the worker's LISTEN connection, which otherwise
 * uses session_db's.  Both conninfos are parsed only ("nginx -t" never
 * connects): their host lists for db_hosts.c, their "options" for the
 * server options the module adds (db_conn.c).
 *
 * session_db_pooler transaction says that session_db reaches PostgreSQL
 * through a pooler that gives each transaction whichever server
 * connection is free (PgBouncer's pool_mode = transaction): nothing of a
 * session survives from one statement to the next there.  The pool then
 * sends no startup options and prepares nothing (db_query.c), and the
 * configuration is refused unless LISTEN has a connection of its own.
 * session_db_pooler session: a pooler that keeps a server connection for
 * each client connection; the statements are prepared as usual.  Behind
 * either, session_db must not have options, which no pooler passes on.
 */

#include "ngx_http_session_db_conf.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_db_hosts.h"
#include "ngx_http_session_conninfo.h"

#include <libpq-fe.h>


static char *ngx_http_session_db_conninfo(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *conninfo, ngx_str_t *options,
    ngx_http_session_dbhosts_t **hosts);


static ngx_conf_enum_t  ngx_http_session_db_poolers[] = {
    { ngx_string("off"), NGX_HTTP_SESSION_POOLER_OFF },
    { ngx_string("session"), NGX_HTTP_SESSION_POOLER_SESSION },
    { ngx_string("transaction"), NGX_HTTP_SESSION_POOLER_TRANSACTION },
    { ngx_null_string, 0 }
};


char *
ngx_http_session_db(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    return ngx_http_session_db_conninfo(cf, cmd, &smcf->db_conninfo,
                                        &smcf->db_options, &smcf->db_hosts);
}


char *
ngx_http_session_db_listen(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    return ngx_http_session_db_conninfo(cf, cmd, &smcf->listen_conninfo,
                                        &smcf->listen_options,
                                        &smcf->listen_hosts);
}


char *
ngx_http_session_db_pooler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    ngx_str_t   *value;
    ngx_uint_t   i;

    if (smcf->db_pooler != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 0; ngx_http_session_db_poolers[i].name.len; i++) {
        if (value[1].len == ngx_http_session_db_poolers[i].name.len
            && ngx_strcmp(value[1].data,
                          ngx_http_session_db_poolers[i].name.data)
               == 0)
        {
            smcf->db_pooler = ngx_http_session_db_poolers[i].value;
            smcf->db_pooler_file = cf->conf_file->file.name;
            smcf->db_pooler_line = cf->conf_file->line;

            return NGX_CONF_OK;
        }
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\", "
                       "expected \"off\", \"session\" or \"transaction\"",
                       &value[1], &cmd->name);

    return NGX_CONF_ERROR;
}


/* the conninfo of session_db or session_db_listen, parsed and kept, once */

static char *
ngx_http_session_db_conninfo(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *conninfo, ngx_str_t *options,
    ngx_http_session_dbhosts_t **hosts)
{
    char              *err;
    size_t             len;
    ngx_str_t         *value;
    const char        *expect;
    PQconninfoOption  *opts, *opt;

    if (conninfo->data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    err = NULL;
    opts = PQconninfoParse((const char *) value[1].data, &err);

    if (opts == NULL) {
        if (err == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "cannot parse \"%V\": out of memory",
                               &cmd->name);
            return NGX_CONF_ERROR;
        }

        len = ngx_strlen(err);

        /* libpq ends its messages with a newline */
        while (len && (err[len - 1] == '\n' || err[len - 1] == ' ')) {
            len--;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid connection string in \"%V\": %*s",
                           &cmd->name, len, err);
        PQfreemem(err);

        return NGX_CONF_ERROR;
    }

    /* the operator's own server options, to which the module adds */

    for (opt = opts; opt->keyword; opt++) {

        /* what libpq would refuse only when it connects */

        expect = ngx_http_session_conninfo_check(opt->keyword, opt->val);

        if (expect) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid %s \"%s\" in \"%V\", expected %s",
                               opt->keyword, opt->val, &cmd->name, expect);
            PQconninfoFree(opts);
            return NGX_CONF_ERROR;
        }

        if (ngx_strcmp(opt->keyword, "options") == 0 && opt->val) {
            len = ngx_strlen(opt->val);

            options->data = ngx_pnalloc(cf->pool, len + 1);
            if (options->data == NULL) {
                PQconninfoFree(opts);
                return NGX_CONF_ERROR;
            }

            ngx_memcpy(options->data, opt->val, len + 1);
            options->len = len;
        }
    }

    if (ngx_http_session_dbhost_parse(cf, &cmd->name, opts, hosts)
        != NGX_CONF_OK)
    {
        PQconninfoFree(opts);
        return NGX_CONF_ERROR;
    }

    PQconninfoFree(opts);

    conninfo->len = value[1].len;
    conninfo->data = ngx_pnalloc(cf->pool, value[1].len + 1);
    if (conninfo->data == NULL) {
        return NGX_CONF_ERROR;
    }

    (void) ngx_cpystrn(conninfo->data, value[1].data, value[1].len + 1);

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_session_db_init_conf(ngx_conf_t *cf,
    ngx_http_session_main_conf_t *smcf)
{
    if (smcf->db_pooler == NGX_CONF_UNSET_UINT) {
        smcf->db_pooler = NGX_HTTP_SESSION_POOLER_OFF;
    }

    if (smcf->db_pooler == NGX_HTTP_SESSION_POOLER_TRANSACTION) {

        /*
         * LISTEN holds for the session that ran it: through a pooler in
         * transaction mode it holds for a server connection the pooler
         * hands to others, and no notification comes back
         */

        if (smcf->listen_conninfo.data == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"session_db_pooler transaction\" in %V:%ui "
                          "needs \"session_db_listen\": LISTEN does not "
                          "pass through a pooler in transaction mode, "
                          "notifications need a connection of their own "
                          "to PostgreSQL", &smcf->db_pooler_file,
                          smcf->db_pooler_line);
            return NGX_ERROR;
        }
    }

    /* PgBouncer refuses the startup parameter, or drops it */

    if (smcf->db_pooler != NGX_HTTP_SESSION_POOLER_OFF
        && smcf->db_options.len)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"session_db\" has options=, which a pooler does "
                      "not pass on to PostgreSQL (\"session_db_pooler\" "
                      "in %V:%ui): set them on the role or the database "
                      "(ALTER ROLE ... SET)",
                      &smcf->db_pooler_file, smcf->db_pooler_line);
        return NGX_ERROR;
    }

    if (ngx_http_session_dbhost_init_conf(cf, smcf->db_hosts) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_session_dbhost_init_conf(cf, smcf->listen_hosts);
}
