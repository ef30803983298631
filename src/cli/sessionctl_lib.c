/*
 * sessionctl's helpers: arguments, the database connection and its
 * errors, and the output (text, or one JSON object with --json).
 */

#include "sessionctl.h"
#include "ngx_http_session_conninfo.h"


static int sessionctl_connect(sessionctl_ctx_t *ctx);
static void sessionctl_notice(void *arg, const char *message);
static int sessionctl_conninfo_check(const char *conninfo);
static void sessionctl_say(const char *fmt, va_list args);


const char  sessionctl_usage_text[] =
    "usage: sessionctl [--json] [-d CONNINFO] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  migrate\n"
    "  plan set NAME [--quota N|unlimited] [--features a,b]\n"
    "  account create NAME --plan PLAN\n"
    "  account suspend ACCOUNT_ID\n"
    "  account activate ACCOUNT_ID\n"
    "  project create ACCOUNT_ID NAME\n"
    "  key create PROJECT_ID [--prefix XXXX]\n"
    "  key list PROJECT_ID\n"
    "  key delete KEY_ID\n"
    "  webhook list (--project ID | --session ID) [--state STATE]"
    " [--limit N]\n"
    "  webhook retry EVENT_ID\n"
    "  wakeups [all|polled]\n"
    "  help [COMMAND]\n"
    "\n"
    "options:\n"
    "  --json        print one JSON object instead of text\n"
    "  -d CONNINFO   libpq connection string; default $SESSION_DB,\n"
    "                else the libpq environment (PGHOST, PGDATABASE...)\n"
    "  -h, --help    this text; \"sessionctl COMMAND --help\" for one\n"
    "                command\n"
    "\n"
    "features: long_poll, webhook\n"
    "webhook states: pending, sending, delivered, failed\n"
    "key prefix: --prefix, else $SESSION_KEY_PREFIX, else \"sess\"\n"
    "exit status: 0 success, 1 refused request, 2 usage error,\n"
    "             3 database unreachable or failed\n";


int
sessionctl_usage(const char *fmt, ...)
{
    va_list  args;

    if (fmt) {
        va_start(args, fmt);
        sessionctl_say(fmt, args);
        va_end(args);
    }

    fputs(sessionctl_usage_text, stderr);

    return SESSIONCTL_USAGE;
}


int
sessionctl_refuse(const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    sessionctl_say(fmt, args);
    va_end(args);

    return SESSIONCTL_REFUSED;
}


/* "sessionctl: <message>" on a line of stderr */

static void
sessionctl_say(const char *fmt, va_list args)
{
    fprintf(stderr, "sessionctl: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
}


/*
 * Exactly npos positional arguments, and options "--name VALUE" or
 * "--name=VALUE" among opts, in any order; "--" ends the options.
 */

int
sessionctl_parse_args(int argc, char **argv, const char **pos, int npos,
    sessionctl_opt_t *opts, int nopts)
{
    int          i, j, n, options;
    size_t       len;
    const char  *arg, *value;

    n = 0;
    len = 0;
    options = 1;

    for (i = 0; i < argc; i++) {
        arg = argv[i];

        if (options && strcmp(arg, "--") == 0) {
            options = 0;
            continue;
        }

        if (!options || arg[0] != '-' || arg[1] == '\0') {
            if (n == npos) {
                return sessionctl_usage("unexpected argument \"%s\"", arg);
            }

            pos[n++] = arg;
            continue;
        }

        for (j = 0; j < nopts; j++) {
            len = strlen(opts[j].name);

            if (strncmp(arg, opts[j].name, len) == 0
                && (arg[len] == '\0' || arg[len] == '='))
            {
                break;
            }
        }

        if (j == nopts) {
            return sessionctl_usage("unknown option \"%s\"", arg);
        }

        if (opts[j].value) {
            return sessionctl_usage("option %s given twice", opts[j].name);
        }

        if (arg[len] == '=') {
            value = arg + len + 1;

        } else if (i + 1 < argc) {
            value = argv[++i];

        } else {
            return sessionctl_usage("option %s needs a value", opts[j].name);
        }

        opts[j].value = value;
    }

    if (n < npos) {
        return sessionctl_usage("missing argument");
    }

    return SESSIONCTL_OK;
}


/*
 * The opening of every "COMMAND ID" command: exactly one argument, a
 * UUID (anything else cannot name a row: "<what> not found", exit 1,
 * without a connection).
 */

int
sessionctl_id_command(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *what, const char **id)
{
    int  rc;

    rc = sessionctl_parse_args(argc, argv, id, 1, NULL, 0);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (!sessionctl_uuid_valid(id[0])) {
        return sessionctl_refuse("%s not found", what);
    }

    return SESSIONCTL_OK;
}


/*
 * The whole of a "COMMAND ID" command that reads the row the statement
 * names by the id ($1): as sessionctl_id_command(), then the statement;
 * no row is "<what> not found"
 */

int
sessionctl_id_row(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *what, const char *sql, PGresult **res)
{
    int          rc;
    char         not_found[64];
    const char  *id[1];

    rc = sessionctl_id_command(ctx, argc, argv, what, id);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    snprintf(not_found, sizeof(not_found), "%s not found", what);

    *res = sessionctl_exec_row(ctx, sql, 1, id, not_found);

    return (*res == NULL) ? SESSIONCTL_REFUSED : SESSIONCTL_OK;
}


static int
sessionctl_connect(sessionctl_ctx_t *ctx)
{
    int          rc;
    const char  *keys[3], *values[3];

    /* a connection string that could never connect is a bad value */

    rc = sessionctl_conninfo_check(ctx->conninfo);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    /* an empty dbname is ignored, so the libpq environment applies */
    keys[0] = "dbname";
    values[0] = ctx->conninfo;
    keys[1] = "fallback_application_name";
    values[1] = "sessionctl";
    keys[2] = NULL;
    values[2] = NULL;

    ctx->conn = PQconnectdbParams(keys, values, 1);

    if (ctx->conn == NULL) {
        return sessionctl_refuse("out of memory");
    }

    if (PQstatus(ctx->conn) != CONNECTION_OK) {
        fprintf(stderr, "sessionctl: cannot connect to the database: ");
        sessionctl_db_error(ctx, NULL);
        ctx->db_failed = 1;
        return SESSIONCTL_REFUSED;
    }

    /* "relation already exists, skipping" and the like are not news */
    PQsetNoticeProcessor(ctx->conn, sessionctl_notice, NULL);

    return SESSIONCTL_OK;
}


static void
sessionctl_notice(void *arg, const char *message)
{
}


/*
 * What libpq would refuse only as it connects (exit 3, "try again
 * later"), refused now as the bad value it is (exit 1): the syntax, and
 * the values of ngx_http_session_conninfo_check().  A plain database
 * name is left to libpq.
 */

static int
sessionctl_conninfo_check(const char *conninfo)
{
    int                rc;
    char              *err;
    size_t             len;
    const char        *expect;
    PQconninfoOption  *opts, *opt;

    if (strchr(conninfo, '=') == NULL
        && strncmp(conninfo, "postgresql://", sizeof("postgresql://") - 1)
           != 0
        && strncmp(conninfo, "postgres://", sizeof("postgres://") - 1) != 0)
    {
        return SESSIONCTL_OK;
    }

    err = NULL;
    opts = PQconninfoParse(conninfo, &err);

    if (opts == NULL) {
        if (err == NULL) {
            return sessionctl_refuse("out of memory");
        }

        /* its first line, as sessionctl_db_error() prints libpq's */
        len = strcspn(err, "\n");

        rc = sessionctl_refuse("invalid connection string: %.*s", (int) len,
                               err);
        PQfreemem(err);

        return rc;
    }

    rc = SESSIONCTL_OK;

    for (opt = opts; opt->keyword; opt++) {
        expect = ngx_http_session_conninfo_check(opt->keyword, opt->val);

        if (expect) {
            rc = sessionctl_refuse("invalid %s \"%s\" in the connection "
                                   "string, expected %s", opt->keyword,
                                   opt->val, expect);
            break;
        }
    }

    PQconninfoFree(opts);

    return rc;
}


/*
 * One statement, the command's first on a new connection (a command
 * connects once its arguments are found valid); on failure prints the
 * reason and returns NULL
 */

PGresult *
sessionctl_exec(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const int *lengths, const int *formats)
{
    PGresult        *res;
    ExecStatusType   status;

    if (ctx->conn == NULL && sessionctl_connect(ctx) != SESSIONCTL_OK) {
        return NULL;
    }

    res = PQexecParams(ctx->conn, sql, n, NULL, values, lengths, formats, 0);

    status = PQresultStatus(res);

    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
        return res;
    }

    fprintf(stderr, "sessionctl: database error: ");
    sessionctl_db_error(ctx, res);

    ctx->db_failed = !sessionctl_db_refused(res);

    PQclear(res);

    return NULL;
}


/* a statement whose rows do not matter */

int
sessionctl_run(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values)
{
    PGresult  *res;

    res = sessionctl_exec(ctx, sql, n, values, NULL, NULL);

    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    return SESSIONCTL_OK;
}


/*
 * A statement that names a row by its id: no row is "<not_found>" (a
 * refused request), and NULL as for a failure
 */

PGresult *
sessionctl_exec_row(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found)
{
    PGresult  *res;

    res = sessionctl_exec(ctx, sql, n, values, NULL, NULL);

    if (res != NULL && PQntuples(res) == 0) {
        PQclear(res);
        (void) sessionctl_refuse("%s", not_found);
        return NULL;
    }

    return res;
}


/*
 * A change and the notification naming the row (its id, in the canonical
 * form the change returns first), on which every worker of every node
 * drops its cached answer, commit together; id gets the row's id.
 */

int
sessionctl_change(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found, const char *notify,
    char *id)
{
    PGresult    *res;
    const char  *name[1];

    if (sessionctl_run(ctx, SESSIONCTL_SQL_BEGIN, 0, NULL) != SESSIONCTL_OK) {
        return SESSIONCTL_REFUSED;
    }

    res = sessionctl_exec_row(ctx, sql, n, values, not_found);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    snprintf(id, SESSIONCTL_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    name[0] = id;

    if (sessionctl_run(ctx, notify, 1, name) != SESSIONCTL_OK
        || sessionctl_run(ctx, SESSIONCTL_SQL_COMMIT, 0, NULL)
           != SESSIONCTL_OK)
    {
        return SESSIONCTL_REFUSED;
    }

    return SESSIONCTL_OK;
}


/*
 * The server refused the values (SQLSTATE class 22, data exception, or
 * 23, integrity constraint violation): a refused request, exit 1.  Any
 * other failure, a lost connection included, is the database's: exit 3.
 */

int
sessionctl_db_refused(PGresult *res)
{
    const char  *state;

    state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    return state && (strncmp(state, "22", 2) == 0
                     || strncmp(state, "23", 2) == 0);
}


/* the first line of the server's or libpq's message, then a newline */

void
sessionctl_db_error(sessionctl_ctx_t *ctx, PGresult *res)
{
    size_t       len;
    const char  *msg;

    msg = NULL;

    if (res) {
        msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    }

    if (msg == NULL || *msg == '\0') {
        msg = PQerrorMessage(ctx->conn);
    }

    if (msg == NULL || *msg == '\0') {
        msg = "unknown error";
    }

    len = strcspn(msg, "\n");

    fprintf(stderr, "%.*s\n", (int) len, msg);
}


/*
 * A statement that names a row and returns one value: printed as "name
 * value", or with --json an object; no row is "<not_found>"
 */

int
sessionctl_print_value(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found, const char *name)
{
    int        rc;
    PGresult  *res;

    res = sessionctl_exec_row(ctx, sql, n, values, not_found);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    rc = sessionctl_print_fields(ctx, name, PQgetvalue(res, 0, 0), NULL,
                                 NULL);
    PQclear(res);

    return rc;
}


/*
 * The answer of a create that returns the new row's id and shows a secret
 * (a key, a webhook secret) this once: both printed, the secret wiped on
 * every path.
 */

int
sessionctl_print_created(sessionctl_ctx_t *ctx, PGresult *res,
    const char *not_found, const char *id_name, const char *secret_name,
    char *secret, size_t size)
{
    int   rc;
    char  id[SESSIONCTL_UUID_LEN + 1];

    if (res == NULL) {
        rc = SESSIONCTL_REFUSED;

    } else if (PQntuples(res) == 0) {
        PQclear(res);
        rc = sessionctl_refuse(not_found);

    } else {
        snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
        PQclear(res);

        rc = sessionctl_print_fields(ctx, id_name, id, secret_name, secret);
    }

    OPENSSL_cleanse(secret, size);

    return rc;
}


/*
 * One or two named strings (name2 NULL: one): "name value" lines, or with
 * --json an object
 */

int
sessionctl_print_fields(sessionctl_ctx_t *ctx, const char *name1,
    const char *value1, const char *name2, const char *value2)
{
    if (ctx->json) {
        return sessionctl_print_json(name2
            ? json_pack("{s:s, s:s}", name1, value1, name2, value2)
            : json_pack("{s:s}", name1, value1));
    }

    printf("%s %s\n", name1, value1);

    if (name2) {
        printf("%s %s\n", name2, value2);
    }

    return SESSIONCTL_OK;
}


int
sessionctl_print_json(json_t *obj)
{
    char  *text;

    if (obj == NULL) {
        return sessionctl_refuse("out of memory");
    }

    text = json_dumps(obj, JSON_PRESERVE_ORDER);
    json_decref(obj);

    if (text == NULL) {
        return sessionctl_refuse("out of memory");
    }

    printf("%s\n", text);

    /* the text may hold a key that was just made */
    OPENSSL_cleanse(text, strlen(text));
    free(text);

    return SESSIONCTL_OK;
}


/*
 * n rows of res as a listing: a header and a line a row of the text
 * columns (NULL shown as "-"), or with --json one object, {name: [...]},
 * of the JSON columns (NULL as null).  Clears res.
 */

int
sessionctl_print_rows(sessionctl_ctx_t *ctx, PGresult *res, int n,
    const sessionctl_col_t *text, const sessionctl_col_t *json,
    const char *name)
{
    int                      i;
    json_t                  *rows, *row, *v;
    const char              *value;
    const sessionctl_col_t  *c;

    if (!ctx->json) {
        for (c = text; c->name; c++) {
            printf("%s%*s", c == text ? "" : "  ", c->width, c->name);
        }

        putchar('\n');

        for (i = 0; i < n; i++) {
            for (c = text; c->name; c++) {
                value = PQgetisnull(res, i, c->col)
                        ? "-" : PQgetvalue(res, i, c->col);
                printf("%s%*s", c == text ? "" : "  ", c->width, value);
            }

            putchar('\n');
        }

        PQclear(res);

        return SESSIONCTL_OK;
    }

    rows = json_array();

    for (i = 0; rows && i < n; i++) {
        row = json_object();

        for (c = json; row && c->name; c++) {
            value = PQgetvalue(res, i, c->col);

            v = PQgetisnull(res, i, c->col) ? json_null()
                : c->number ? json_integer(strtoll(value, NULL, 10))
                : json_string(value);

            if (json_object_set_new(row, c->name, v) != 0) {
                json_decref(row);
                row = NULL;
            }
        }

        if (row == NULL || json_array_append_new(rows, row) != 0) {
            json_decref(rows);
            rows = NULL;
        }
    }

    PQclear(res);

    if (rows == NULL) {
        return sessionctl_refuse("out of memory");
    }

    return sessionctl_print_json(json_pack("{s:o}", name, rows));
}


/* the canonical 8-4-4-4-12 form, hex digits in either case */

int
sessionctl_uuid_valid(const char *s)
{
    size_t  i;

    if (strlen(s) != SESSIONCTL_UUID_LEN) {
        return 0;
    }

    for (i = 0; i < SESSIONCTL_UUID_LEN; i++) {

        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') {
                return 0;
            }

            continue;
        }

        if (!((s[i] >= '0' && s[i] <= '9')
              || (s[i] >= 'a' && s[i] <= 'f')
              || (s[i] >= 'A' && s[i] <= 'F')))
        {
            return 0;
        }
    }

    return 1;
}
