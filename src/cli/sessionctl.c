/*
 * sessionctl: the admin tool of the Session Service (docs/api.md §9).
 *
 * A blocking libpq client: parse the command line, connect, run one
 * command, print one answer (text, or one JSON object with --json).
 * Exit status: 0 success, 1 refused request (message on stderr),
 * 2 usage error (usage on stderr), 3 the database could not be reached
 * or failed (message on stderr).
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "ngx_http_session_key.h"
#include "ngx_http_session_migrations.h"
#include "sessionctl_sql.h"


#define SESSIONCTL_OK              0
#define SESSIONCTL_REFUSED         1
#define SESSIONCTL_USAGE           2
#define SESSIONCTL_DB_FAILED       3

#define SESSIONCTL_UUID_LEN        36
#define SESSIONCTL_TIME_LEN        20
#define SESSIONCTL_KEY_BYTES       (NGX_HTTP_SESSION_KEY_HEX_LEN / 2)
#define SESSIONCTL_SECRET_BYTES    32
#define SESSIONCTL_SECRET_PREFIX   "whsec_"
/* "whsec_" + base64 of 32 bytes (44 characters) */
#define SESSIONCTL_SECRET_LEN      (sizeof(SESSIONCTL_SECRET_PREFIX) - 1 + 44)
#define SESSIONCTL_PLAN_NAME_MAX   64
#define SESSIONCTL_MAX_OPTS        2

/* pg_advisory_lock key serialising concurrent migrates ("sessmigr") */
#define SESSIONCTL_MIGRATE_LOCK    "8315161247355380082"

#define SESSIONCTL_FEATURE_LONG_POLL  0x01
#define SESSIONCTL_FEATURE_WEBHOOK    0x02


typedef struct {
    PGconn      *conn;
    const char  *conninfo;
    int          json;
    /* the database was unreachable or failed: exit 3, not 1 */
    int          db_failed;
} sessionctl_ctx_t;


typedef int (*sessionctl_handler_pt)(sessionctl_ctx_t *ctx, int argc,
    char **argv);


typedef struct {
    const char             *group;
    /* NULL for a command of one word */
    const char             *name;
    sessionctl_handler_pt   handler;
    /* "sessionctl COMMAND --help" */
    const char             *help;
} sessionctl_command_t;


typedef struct {
    const char  *name;
    /* NULL when the option was not given */
    const char  *value;
} sessionctl_opt_t;


static int sessionctl_usage(const char *fmt, ...);
static int sessionctl_help(const sessionctl_command_t *cmd,
    const char *group);
static int sessionctl_wants_help(int argc, char **argv);
static int sessionctl_refuse(const char *fmt, ...);
static int sessionctl_parse_args(int argc, char **argv, const char **pos,
    int npos, sessionctl_opt_t *opts, int nopts);
static int sessionctl_connect(sessionctl_ctx_t *ctx);
static int sessionctl_id_command(sessionctl_ctx_t *ctx, int argc,
    char **argv, const char *what, const char **id);
static void sessionctl_notice(void *arg, const char *message);
static PGresult *sessionctl_exec(sessionctl_ctx_t *ctx, const char *sql,
    int n, const char *const *values, const int *lengths,
    const int *formats);
static int sessionctl_run(sessionctl_ctx_t *ctx, const char *sql);
static void sessionctl_db_error(sessionctl_ctx_t *ctx, PGresult *res);
static int sessionctl_db_refused(PGresult *res);
static int sessionctl_print_json(json_t *obj);
static int sessionctl_print_created(sessionctl_ctx_t *ctx, PGresult *res,
    const char *not_found, const char *id_name, const char *secret_name,
    char *secret, size_t size);
static int sessionctl_uuid_valid(const char *s);
static int sessionctl_plan_name_valid(const char *s);
static int sessionctl_parse_quota(const char *s, long *quota);
static int sessionctl_parse_features(const char *s, unsigned *features);
static void sessionctl_features_text(unsigned features, char *buf,
    size_t size);
static json_t *sessionctl_features_json(const char *list);

static int sessionctl_migrate(sessionctl_ctx_t *ctx, int argc, char **argv);
static int sessionctl_plan_set(sessionctl_ctx_t *ctx, int argc, char **argv);
static int sessionctl_account_create(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_account_suspend(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_account_activate(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_account_status(sessionctl_ctx_t *ctx, int argc,
    char **argv, const char *status);
static int sessionctl_project_create(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_key_create(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_key_list(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_key_delete(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_webhook_list(sessionctl_ctx_t *ctx, int argc,
    char **argv);
static int sessionctl_webhook_retry(sessionctl_ctx_t *ctx, int argc,
    char **argv);


static const char  sessionctl_usage_text[] =
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


static const sessionctl_command_t  sessionctl_commands[] = {

    { "migrate", NULL, sessionctl_migrate,
      "usage: sessionctl [--json] [-d CONNINFO] migrate\n"
      "\n"
      "Creates the schema or applies every migration the database does\n"
      "not have yet, each in its own transaction; safe to repeat and to\n"
      "run on several hosts at once.  Seeds the plans free, pro and\n"
      "unlimited.\n"
      "\n"
      "output: schema version N       --json: {\"version\": N}\n" },

    { "plan", "set", sessionctl_plan_set,
      "usage: sessionctl [--json] [-d CONNINFO] plan set NAME\n"
      "           [--quota N|unlimited] [--features LIST]\n"
      "\n"
      "Creates or changes a plan.  NAME: 1 to 64 of A-Z a-z 0-9 _ . -.\n"
      "--quota: sessions per account per UTC month, 0 to 2147483647, or\n"
      "unlimited.  --features: a comma-separated list of long_poll and\n"
      "webhook (\"\" for none).  A new plan has no limit and no\n"
      "features unless given; on an existing plan only what is given\n"
      "changes.\n"
      "\n"
      "--json: {\"plan\": NAME, \"quota\": N|null, \"features\": [...]}\n" },

    { "account", "create", sessionctl_account_create,
      "usage: sessionctl [--json] [-d CONNINFO] account create NAME "
      "--plan PLAN\n"
      "\n"
      "Creates an active account on the plan.\n"
      "\n"
      "--json: {\"account_id\": ID}\n" },

    { "account", "suspend", sessionctl_account_suspend,
      "usage: sessionctl [--json] [-d CONNINFO] account suspend "
      "ACCOUNT_ID\n"
      "\n"
      "Suspends the account: its keys get 403 on every node at once.\n"
      "\n"
      "--json: {\"account_id\": ID, \"status\": \"suspended\"}\n" },

    { "account", "activate", sessionctl_account_activate,
      "usage: sessionctl [--json] [-d CONNINFO] account activate "
      "ACCOUNT_ID\n"
      "\n"
      "Makes a suspended account active again, on every node at once.\n"
      "\n"
      "--json: {\"account_id\": ID, \"status\": \"active\"}\n" },

    { "project", "create", sessionctl_project_create,
      "usage: sessionctl [--json] [-d CONNINFO] project create "
      "ACCOUNT_ID NAME\n"
      "\n"
      "Creates a project of the account with a new webhook signing\n"
      "secret (whsec_...), shown here.\n"
      "\n"
      "--json: {\"project_id\": ID, \"webhook_secret\": \"whsec_...\"}\n" },

    { "key", "create", sessionctl_key_create,
      "usage: sessionctl [--json] [-d CONNINFO] key create PROJECT_ID\n"
      "           [--prefix XXXX]\n"
      "\n"
      "Creates an API key for the project and prints it: the only time\n"
      "it is shown (the database keeps its SHA-256).  The prefix is\n"
      "--prefix, else $SESSION_KEY_PREFIX, else \"sess\": four letters,\n"
      "the session_key_prefix of the nginx that will see the key.\n"
      "\n"
      "--json: {\"key_id\": ID, \"key\": \"sess_...\"}\n" },

    { "key", "list", sessionctl_key_list,
      "usage: sessionctl [--json] [-d CONNINFO] key list PROJECT_ID\n"
      "\n"
      "Lists the project's keys, deleted ones too, with hints (the last\n"
      "four hex digits), never the keys.\n"
      "\n"
      "--json: {\"keys\": [{\"key_id\", \"hint\", \"created_at\", "
      "\"deleted_at\"}]}\n" },

    { "key", "delete", sessionctl_key_delete,
      "usage: sessionctl [--json] [-d CONNINFO] key delete KEY_ID\n"
      "\n"
      "Deletes the key: it gets 401 on every node at once.  Deleting a\n"
      "deleted or unknown key is refused (exit 1).\n"
      "\n"
      "--json: {\"key_id\": ID, \"deleted\": true}\n" },

    { "webhook", "list", sessionctl_webhook_list,
      "usage: sessionctl [--json] [-d CONNINFO] webhook list\n"
      "           (--project ID | --session ID) [--state STATE]"
      " [--limit N]\n"
      "\n"
      "Lists webhook events, newest first: their state (pending,\n"
      "sending, delivered, failed), attempts, next attempt and last\n"
      "error.  --limit: 1 to 10000 (default 100).\n"
      "\n"
      "--json: {\"events\": [...]}\n" },

    { "webhook", "retry", sessionctl_webhook_retry,
      "usage: sessionctl [--json] [-d CONNINFO] webhook retry EVENT_ID\n"
      "\n"
      "Sends a failed or pending event again now, from its first attempt;\n"
      "an event being sent right now is refused (exit 1).\n"
      "\n"
      "--json: {\"event_id\": ID, \"state\": \"pending\"}\n" },

    { NULL, NULL, NULL, NULL }
};


static const char  sessionctl_exit_text[] =
    "\n"
    "exit status: 0 success, 1 refused request, 2 usage error,\n"
    "             3 database unreachable or failed\n";


int
main(int argc, char **argv)
{
    int                          i, rc, group;
    sessionctl_ctx_t             ctx;
    const sessionctl_command_t  *cmd;

    memset(&ctx, 0, sizeof(sessionctl_ctx_t));

    ctx.conninfo = getenv("SESSION_DB");

    for (i = 1; i < argc; i++) {

        if (strcmp(argv[i], "--json") == 0) {
            ctx.json = 1;

        } else if (strcmp(argv[i], "-d") == 0) {
            if (i + 1 == argc) {
                return sessionctl_usage("option -d needs a value");
            }

            ctx.conninfo = argv[++i];

        } else if (strncmp(argv[i], "-d", 2) == 0) {
            ctx.conninfo = argv[i] + 2;

        } else if (strcmp(argv[i], "--help") == 0
                   || strcmp(argv[i], "-h") == 0)
        {
            return sessionctl_help(NULL, NULL);

        } else if (argv[i][0] == '-') {
            return sessionctl_usage("unknown option \"%s\"", argv[i]);

        } else {
            break;
        }
    }

    if (i == argc) {
        return sessionctl_usage(NULL);
    }

    if (ctx.conninfo == NULL) {
        /* libpq then reads PGHOST, PGDATABASE and the rest */
        ctx.conninfo = "";
    }

    if (strcmp(argv[i], "help") == 0) {
        /* "help", "help key", "help key create" */
        for (cmd = sessionctl_commands; cmd->group; cmd++) {
            if (i + 1 < argc && strcmp(argv[i + 1], cmd->group) == 0
                && (cmd->name == NULL || i + 2 == argc
                    || strcmp(argv[i + 2], cmd->name) == 0))
            {
                break;
            }
        }

        if (i + 1 == argc) {
            return sessionctl_help(NULL, NULL);
        }

        if (cmd->group == NULL || i + 4 <= argc
            || (cmd->name == NULL && i + 3 == argc))
        {
            return sessionctl_usage("no help for \"%s\"", argv[i + 1]);
        }

        return sessionctl_help(i + 2 == argc ? NULL : cmd, argv[i + 1]);
    }

    group = 0;

    for (cmd = sessionctl_commands; cmd->group; cmd++) {

        if (strcmp(argv[i], cmd->group) != 0) {
            continue;
        }

        group = 1;

        if (cmd->name == NULL) {
            break;
        }

        if (i + 1 < argc && strcmp(argv[i + 1], cmd->name) == 0) {
            break;
        }
    }

    if (cmd->group == NULL) {
        if (!group) {
            return sessionctl_usage("unknown command \"%s\"", argv[i]);
        }

        if (i + 1 == argc) {
            return sessionctl_usage("\"%s\" needs a subcommand", argv[i]);
        }

        if (sessionctl_wants_help(argc - i - 1, argv + i + 1)) {
            /* "sessionctl key --help" */
            return sessionctl_help(NULL, argv[i]);
        }

        return sessionctl_usage("unknown command \"%s %s\"", argv[i],
                                argv[i + 1]);
    }

    i += (cmd->name == NULL) ? 1 : 2;

    if (sessionctl_wants_help(argc - i, argv + i)) {
        return sessionctl_help(cmd, NULL);
    }

    rc = cmd->handler(&ctx, argc - i, argv + i);

    if (ctx.conn) {
        PQfinish(ctx.conn);
    }

    if (rc == SESSIONCTL_REFUSED && ctx.db_failed) {
        rc = SESSIONCTL_DB_FAILED;
    }

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sessionctl: cannot write the output\n");
        return SESSIONCTL_REFUSED;
    }

    return rc;
}


static int
sessionctl_usage(const char *fmt, ...)
{
    va_list  args;

    if (fmt) {
        fprintf(stderr, "sessionctl: ");
        va_start(args, fmt);
        vfprintf(stderr, fmt, args);
        va_end(args);
        fprintf(stderr, "\n");
    }

    fputs(sessionctl_usage_text, stderr);

    return SESSIONCTL_USAGE;
}


/*
 * Asked-for help goes to stdout with exit 0: all commands, the commands
 * of one group, or one command.
 */

static int
sessionctl_help(const sessionctl_command_t *cmd, const char *group)
{
    int                          first;
    const sessionctl_command_t  *c;

    if (cmd) {
        fputs(cmd->help, stdout);
        fputs(sessionctl_exit_text, stdout);

    } else if (group) {
        first = 1;

        for (c = sessionctl_commands; c->group; c++) {
            if (strcmp(c->group, group) == 0) {
                if (!first) {
                    fputs("\n", stdout);
                }

                fputs(c->help, stdout);
                first = 0;
            }
        }

        fputs(sessionctl_exit_text, stdout);

    } else {
        fputs(sessionctl_usage_text, stdout);
    }

    if (fflush(stdout) != 0 || ferror(stdout)) {
        return SESSIONCTL_REFUSED;
    }

    return SESSIONCTL_OK;
}


/* --help or -h among a command's arguments, before any "--" */

static int
sessionctl_wants_help(int argc, char **argv)
{
    int  i;

    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            return 0;
        }

        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            return 1;
        }
    }

    return 0;
}


static int
sessionctl_refuse(const char *fmt, ...)
{
    va_list  args;

    fprintf(stderr, "sessionctl: ");
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, "\n");

    return SESSIONCTL_REFUSED;
}


/*
 * Exactly npos positional arguments, and options "--name VALUE" or
 * "--name=VALUE" among opts, in any order; "--" ends the options.
 */

static int
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
 * without a connection), then the connection.
 */

static int
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

    return sessionctl_connect(ctx);
}


static int
sessionctl_connect(sessionctl_ctx_t *ctx)
{
    const char  *keys[3], *values[3];

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


/* one statement; on failure prints the reason and returns NULL */

static PGresult *
sessionctl_exec(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const int *lengths, const int *formats)
{
    PGresult        *res;
    ExecStatusType   status;

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


static int
sessionctl_run(sessionctl_ctx_t *ctx, const char *sql)
{
    PGresult  *res;

    res = sessionctl_exec(ctx, sql, 0, NULL, NULL, NULL);

    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    return SESSIONCTL_OK;
}


/*
 * The server refused the values (SQLSTATE class 22, data exception, or
 * 23, integrity constraint violation): a refused request, exit 1.  Any
 * other failure, a lost connection included, is the database's: exit 3.
 */

static int
sessionctl_db_refused(PGresult *res)
{
    const char  *state;

    state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

    return state && (strncmp(state, "22", 2) == 0
                     || strncmp(state, "23", 2) == 0);
}


/* the first line of the server's or libpq's message, then a newline */

static void
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


/* prints and frees obj; NULL means a failed allocation */

/*
 * The answer of a create that returns the new row's id and shows a secret
 * (a key, a webhook secret) this once: both printed, the secret wiped on
 * every path.
 */

static int
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

        if (ctx->json) {
            rc = sessionctl_print_json(json_pack("{s:s, s:s}", id_name, id,
                                                 secret_name, secret));

        } else {
            printf("%s %s\n%s %s\n", id_name, id, secret_name, secret);
            rc = SESSIONCTL_OK;
        }
    }

    OPENSSL_cleanse(secret, size);

    return rc;
}


static int
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


/* the canonical 8-4-4-4-12 form, hex digits in either case */

static int
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


/* as the CHECK on plans.name: ^[A-Za-z0-9_.-]{1,64}$ */

static int
sessionctl_plan_name_valid(const char *s)
{
    size_t  i, len;

    len = strlen(s);

    if (len == 0 || len > SESSIONCTL_PLAN_NAME_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z')
              || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9')
              || s[i] == '_' || s[i] == '.' || s[i] == '-'))
        {
            return 0;
        }
    }

    return 1;
}


/*
 * A decimal integer 0 ... 2^31 - 1 (plans.monthly_quota is an integer),
 * or "unlimited", given back as -1.
 */

static int
sessionctl_parse_quota(const char *s, long *quota)
{
    long    n;
    size_t  i;

    if (strcmp(s, "unlimited") == 0) {
        *quota = -1;
        return 0;
    }

    if (*s == '\0') {
        return -1;
    }

    n = 0;

    for (i = 0; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }

        n = n * 10 + (s[i] - '0');

        if (n > 2147483647L) {
            return -1;
        }
    }

    *quota = n;

    return 0;
}


/* "a,b" of long_poll and webhook; "" is no features */

static int
sessionctl_parse_features(const char *s, unsigned *features)
{
    size_t  len;

    *features = 0;

    if (*s == '\0') {
        return SESSIONCTL_OK;
    }

    for ( ;; ) {
        len = strcspn(s, ",");

        if (len == sizeof("long_poll") - 1
            && strncmp(s, "long_poll", len) == 0)
        {
            *features |= SESSIONCTL_FEATURE_LONG_POLL;

        } else if (len == sizeof("webhook") - 1
                   && strncmp(s, "webhook", len) == 0)
        {
            *features |= SESSIONCTL_FEATURE_WEBHOOK;

        } else {
            return sessionctl_refuse("unknown feature \"%.*s\" (known: "
                                     "long_poll, webhook)", (int) len, s);
        }

        if (s[len] == '\0') {
            return SESSIONCTL_OK;
        }

        s += len + 1;
    }
}


static void
sessionctl_features_text(unsigned features, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s%s",
             (features & SESSIONCTL_FEATURE_LONG_POLL) ? "long_poll" : "",
             (features == (SESSIONCTL_FEATURE_LONG_POLL
                           | SESSIONCTL_FEATURE_WEBHOOK)) ? "," : "",
             (features & SESSIONCTL_FEATURE_WEBHOOK) ? "webhook" : "");
}


/* a JSON array from "a,b" as array_to_string() gives it */

static json_t *
sessionctl_features_json(const char *list)
{
    size_t   len;
    json_t  *arr;

    arr = json_array();

    if (arr == NULL || *list == '\0') {
        return arr;
    }

    for ( ;; ) {
        len = strcspn(list, ",");

        if (json_array_append_new(arr, json_stringn(list, len)) != 0) {
            json_decref(arr);
            return NULL;
        }

        if (list[len] == '\0') {
            return arr;
        }

        list += len + 1;
    }
}


/*
 * Every embedded migration the database has not had yet, in version
 * order, each in its own transaction with its row in
 * session_schema_migrations, under an advisory lock so that concurrent
 * runs apply each one once.  A migration is looked up by its own number,
 * not compared with the highest applied one, so that one merged later
 * with a lower number is still applied.
 */

static int
sessionctl_migrate(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                                  rc, applied;
    char                                 version[16];
    long                                 pid, current;
    PGresult                            *res;
    const char                          *values[2];
    const ngx_http_session_migration_t  *m;

    rc = sessionctl_parse_args(argc, argv, NULL, 0, NULL, 0);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    /*
     * The advisory lock is a session's: through a pooler that pools
     * transactions it would be taken on one server connection, left
     * there, and released (or not) on another
     */

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_BACKEND, 0, NULL, NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    pid = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);

    if (pid != PQbackendPID(ctx->conn)) {
        fprintf(stderr, "sessionctl: migrate needs a connection to "
                "PostgreSQL itself, a connection pooler stands in between "
                "(the server process differs from the connection's)\n");
        return SESSIONCTL_REFUSED;
    }

    values[0] = SESSIONCTL_MIGRATE_LOCK;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_LOCK, 1, values, NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    if (sessionctl_run(ctx, SESSIONCTL_SQL_MIGRATIONS_TABLE)
        != SESSIONCTL_OK)
    {
        return SESSIONCTL_REFUSED;
    }

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_SCHEMA_VERSION, 0, NULL, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    current = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);

    for (m = ngx_http_session_migrations; m->name; m++) {

        snprintf(version, sizeof(version), "%d", m->version);
        values[0] = version;

        res = sessionctl_exec(ctx, SESSIONCTL_SQL_MIGRATION_APPLIED, 1,
                              values, NULL, NULL);
        if (res == NULL) {
            return SESSIONCTL_REFUSED;
        }

        applied = PQntuples(res);
        PQclear(res);

        if (applied) {
            continue;
        }

        if (sessionctl_run(ctx, SESSIONCTL_SQL_BEGIN) != SESSIONCTL_OK) {
            return SESSIONCTL_REFUSED;
        }

        /* several statements: the simple query protocol */
        res = PQexec(ctx->conn, m->sql);

        if (PQresultStatus(res) != PGRES_COMMAND_OK
            && PQresultStatus(res) != PGRES_TUPLES_OK)
        {
            fprintf(stderr, "sessionctl: migration %s failed: ", m->name);
            sessionctl_db_error(ctx, res);
            PQclear(res);
            ctx->db_failed = 1;
            return SESSIONCTL_REFUSED;
        }

        PQclear(res);

        values[0] = version;
        values[1] = m->name;

        res = sessionctl_exec(ctx, SESSIONCTL_SQL_MIGRATION_DONE, 2, values,
                              NULL, NULL);
        if (res == NULL) {
            return SESSIONCTL_REFUSED;
        }

        PQclear(res);

        if (sessionctl_run(ctx, SESSIONCTL_SQL_COMMIT) != SESSIONCTL_OK) {
            return SESSIONCTL_REFUSED;
        }

        if (m->version > current) {
            current = m->version;
        }
    }

    values[0] = SESSIONCTL_MIGRATE_LOCK;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_UNLOCK, 1, values, NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:I}", "version",
                                               (json_int_t) current));
    }

    printf("schema version %ld\n", current);

    return SESSIONCTL_OK;
}


static int
sessionctl_plan_set(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc;
    long               quota;
    char               quota_text[24], features_text[32], name[80];
    unsigned           features;
    json_t            *obj, *list;
    PGresult          *res;
    const char        *pos[1], *values[5];
    sessionctl_opt_t   opts[SESSIONCTL_MAX_OPTS];

    opts[0].name = "--quota";
    opts[0].value = NULL;
    opts[1].name = "--features";
    opts[1].value = NULL;

    rc = sessionctl_parse_args(argc, argv, pos, 1, opts, 2);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (!sessionctl_plan_name_valid(pos[0])) {
        return sessionctl_refuse("invalid plan name \"%s\" (1 to 64 of "
                                 "A-Z a-z 0-9 _ . -)", pos[0]);
    }

    quota = -1;

    if (opts[0].value
        && sessionctl_parse_quota(opts[0].value, &quota) != 0)
    {
        return sessionctl_refuse("invalid quota \"%s\" (a non-negative "
                                 "integer or \"unlimited\")", opts[0].value);
    }

    features = 0;

    if (opts[1].value) {
        rc = sessionctl_parse_features(opts[1].value, &features);
        if (rc != SESSIONCTL_OK) {
            return rc;
        }
    }

    snprintf(quota_text, sizeof(quota_text), "%ld", quota);
    sessionctl_features_text(features, features_text, sizeof(features_text));

    values[0] = pos[0];
    values[1] = opts[0].value ? "true" : "false";
    values[2] = (quota >= 0) ? quota_text : NULL;
    values[3] = opts[1].value ? "true" : "false";
    values[4] = features_text;

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_PLAN_SET, 5, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    snprintf(name, sizeof(name), "%s", PQgetvalue(res, 0, 0));

    quota = -1;

    if (!PQgetisnull(res, 0, 1)) {
        quota = strtol(PQgetvalue(res, 0, 1), NULL, 10);
    }

    snprintf(features_text, sizeof(features_text), "%s",
             PQgetvalue(res, 0, 2));

    PQclear(res);

    if (ctx->json) {
        list = sessionctl_features_json(features_text);
        if (list == NULL) {
            return sessionctl_refuse("out of memory");
        }

        if (quota >= 0) {
            obj = json_pack("{s:s, s:I, s:o}", "plan", name, "quota",
                            (json_int_t) quota, "features", list);

        } else {
            obj = json_pack("{s:s, s:n, s:o}", "plan", name, "quota",
                            "features", list);
        }

        return sessionctl_print_json(obj);
    }

    printf("plan %s\n", name);

    if (quota >= 0) {
        printf("quota %ld\n", quota);

    } else {
        printf("quota unlimited\n");
    }

    printf("features %s\n", features_text[0] ? features_text : "none");

    return SESSIONCTL_OK;
}


static int
sessionctl_account_create(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc;
    char               id[SESSIONCTL_UUID_LEN + 1];
    PGresult          *res;
    const char        *pos[1], *values[2];
    sessionctl_opt_t   opts[1];

    opts[0].name = "--plan";
    opts[0].value = NULL;

    rc = sessionctl_parse_args(argc, argv, pos, 1, opts, 1);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (opts[0].value == NULL) {
        return sessionctl_usage("account create needs --plan PLAN");
    }

    if (pos[0][0] == '\0') {
        return sessionctl_refuse("the account name must not be empty");
    }

    if (!sessionctl_plan_name_valid(opts[0].value)) {
        return sessionctl_refuse("plan not found");
    }

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    values[0] = pos[0];
    values[1] = opts[0].value;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_ACCOUNT_CREATE, 2, values,
                          NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    if (PQntuples(res) == 0) {
        PQclear(res);
        return sessionctl_refuse("plan not found");
    }

    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:s}", "account_id", id));
    }

    printf("account_id %s\n", id);

    return SESSIONCTL_OK;
}


static int
sessionctl_account_suspend(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    return sessionctl_account_status(ctx, argc, argv, "suspended");
}


static int
sessionctl_account_activate(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    return sessionctl_account_status(ctx, argc, argv, "active");
}


/*
 * The status change and the notification that makes every worker of
 * every node forget its cached answer commit together.
 */

static int
sessionctl_account_status(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *status)
{
    int          rc;
    char         id[SESSIONCTL_UUID_LEN + 1];
    PGresult    *res;
    const char  *pos[1], *values[2];

    rc = sessionctl_id_command(ctx, argc, argv, "account", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (sessionctl_run(ctx, SESSIONCTL_SQL_BEGIN) != SESSIONCTL_OK) {
        return SESSIONCTL_REFUSED;
    }

    values[0] = pos[0];
    values[1] = status;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_ACCOUNT_STATUS, 2, values,
                          NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    if (PQntuples(res) == 0) {
        PQclear(res);
        return sessionctl_refuse("account not found");
    }

    /* the canonical lower-case form, as the server caches it */
    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    values[0] = id;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_NOTIFY_ACCOUNT, 1, values,
                          NULL, NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    if (sessionctl_run(ctx, SESSIONCTL_SQL_COMMIT) != SESSIONCTL_OK) {
        return SESSIONCTL_REFUSED;
    }

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:s, s:s}", "account_id",
                                               id, "status", status));
    }

    printf("account_id %s\nstatus %s\n", id, status);

    return SESSIONCTL_OK;
}


static int
sessionctl_project_create(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int             rc;
    char            secret[SESSIONCTL_SECRET_LEN + 1];
    PGresult       *res;
    const char     *pos[2], *values[3];
    unsigned char   raw[SESSIONCTL_SECRET_BYTES];

    rc = sessionctl_parse_args(argc, argv, pos, 2, NULL, 0);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (!sessionctl_uuid_valid(pos[0])) {
        return sessionctl_refuse("account not found");
    }

    if (pos[1][0] == '\0') {
        return sessionctl_refuse("the project name must not be empty");
    }

    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        return sessionctl_refuse("the random generator failed");
    }

    memcpy(secret, SESSIONCTL_SECRET_PREFIX,
           sizeof(SESSIONCTL_SECRET_PREFIX) - 1);

    EVP_EncodeBlock((unsigned char *) secret
                    + sizeof(SESSIONCTL_SECRET_PREFIX) - 1,
                    raw, sizeof(raw));

    OPENSSL_cleanse(raw, sizeof(raw));

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        OPENSSL_cleanse(secret, sizeof(secret));
        return rc;
    }

    values[0] = pos[0];
    values[1] = pos[1];
    values[2] = secret;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_PROJECT_CREATE, 3, values,
                          NULL, NULL);

    return sessionctl_print_created(ctx, res, "account not found",
                                    "project_id", "webhook_secret", secret,
                                    sizeof(secret));
}


/*
 * The key is "<prefix>_<32 lower-case hex>"; only its SHA-256 (as the
 * server computes it), the prefix and the last four hex digits are stored.
 */

static int
sessionctl_key_create(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc, lengths[4], formats[4];
    char               key[NGX_HTTP_SESSION_KEY_LEN + 1];
    char               hint[NGX_HTTP_SESSION_KEY_HINT_LEN + 1];
    PGresult          *res;
    const char        *pos[1], *values[4], *prefix;
    unsigned char      raw[SESSIONCTL_KEY_BYTES];
    unsigned char      hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    sessionctl_opt_t   opts[1];

    opts[0].name = "--prefix";
    opts[0].value = NULL;

    rc = sessionctl_parse_args(argc, argv, pos, 1, opts, 1);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    prefix = opts[0].value;

    if (prefix == NULL) {
        prefix = getenv("SESSION_KEY_PREFIX");

        if (prefix == NULL || *prefix == '\0') {
            prefix = "sess";
        }
    }

    if (!ngx_http_session_prefix_valid((const unsigned char *) prefix,
                                       strlen(prefix)))
    {
        return sessionctl_refuse("invalid key prefix \"%s\" (four letters)",
                                 prefix);
    }

    if (!sessionctl_uuid_valid(pos[0])) {
        return sessionctl_refuse("project not found");
    }

    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        return sessionctl_refuse("the random generator failed");
    }

    memcpy(key, prefix, NGX_HTTP_SESSION_KEY_PREFIX_LEN);
    key[NGX_HTTP_SESSION_KEY_PREFIX_LEN] = '_';
    ngx_http_session_hex(raw, sizeof(raw), (unsigned char *) key
                         + NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1);
    key[NGX_HTTP_SESSION_KEY_LEN] = '\0';

    OPENSSL_cleanse(raw, sizeof(raw));

    memcpy(hint,
           key + NGX_HTTP_SESSION_KEY_LEN - NGX_HTTP_SESSION_KEY_HINT_LEN,
           NGX_HTTP_SESSION_KEY_HINT_LEN);
    hint[NGX_HTTP_SESSION_KEY_HINT_LEN] = '\0';

    if (ngx_http_session_key_hash((const unsigned char *) key, hash) != 0) {
        OPENSSL_cleanse(key, sizeof(key));
        return sessionctl_refuse("cannot hash the key");
    }

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        OPENSSL_cleanse(key, sizeof(key));
        return rc;
    }

    values[0] = pos[0];
    values[1] = (const char *) hash;
    values[2] = prefix;
    values[3] = hint;

    lengths[0] = 0;
    lengths[1] = sizeof(hash);
    lengths[2] = 0;
    lengths[3] = 0;

    formats[0] = 0;
    formats[1] = 1;
    formats[2] = 0;
    formats[3] = 0;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_KEY_CREATE, 4, values, lengths,
                          formats);

    return sessionctl_print_created(ctx, res, "project not found", "key_id",
                                    "key", key, sizeof(key));
}


static int
sessionctl_key_list(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int          rc, i, n;
    json_t      *keys, *item;
    PGresult    *res;
    const char  *pos[1], *values[1];

    rc = sessionctl_id_command(ctx, argc, argv, "project", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    values[0] = pos[0];

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_KEY_LIST, 1, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    n = PQntuples(res);

    if (n == 0) {
        PQclear(res);
        return sessionctl_refuse("project not found");
    }

    /* a project without keys is one row of NULLs from the outer join */
    if (PQgetisnull(res, 0, 0)) {
        n = 0;
    }

    if (!ctx->json) {
        printf("%-36s  %-4s  %-20s  %s\n", "key_id", "hint", "created_at",
               "deleted_at");

        for (i = 0; i < n; i++) {
            printf("%-36s  %-4s  %-20s  %s\n", PQgetvalue(res, i, 0),
                   PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
                   PQgetisnull(res, i, 3) ? "-" : PQgetvalue(res, i, 3));
        }

        PQclear(res);

        return SESSIONCTL_OK;
    }

    keys = json_array();

    if (keys == NULL) {
        PQclear(res);
        return sessionctl_refuse("out of memory");
    }

    for (i = 0; i < n; i++) {
        item = json_pack("{s:s, s:s, s:s, s:o}",
                         "key_id", PQgetvalue(res, i, 0),
                         "hint", PQgetvalue(res, i, 1),
                         "created_at", PQgetvalue(res, i, 2),
                         "deleted_at",
                         PQgetisnull(res, i, 3)
                             ? json_null()
                             : json_string(PQgetvalue(res, i, 3)));

        if (json_array_append_new(keys, item) != 0) {
            PQclear(res);
            json_decref(keys);
            return sessionctl_refuse("out of memory");
        }
    }

    PQclear(res);

    return sessionctl_print_json(json_pack("{s:o}", "keys", keys));
}


/*
 * The deletion and the notification naming the key's hash, on which
 * every worker of every node drops its cached answer, commit together.
 */

static int
sessionctl_key_delete(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int          rc;
    char         id[SESSIONCTL_UUID_LEN + 1];
    PGresult    *res;
    const char  *pos[1], *values[1];

    rc = sessionctl_id_command(ctx, argc, argv, "key", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (sessionctl_run(ctx, SESSIONCTL_SQL_BEGIN) != SESSIONCTL_OK) {
        return SESSIONCTL_REFUSED;
    }

    values[0] = pos[0];

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_KEY_DELETE, 1, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    if (PQntuples(res) == 0) {
        PQclear(res);
        return sessionctl_refuse("key not found or already deleted");
    }

    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    values[0] = id;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_NOTIFY_KEY, 1, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    PQclear(res);

    if (sessionctl_run(ctx, SESSIONCTL_SQL_COMMIT) != SESSIONCTL_OK) {
        return SESSIONCTL_REFUSED;
    }

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:s, s:b}", "key_id", id,
                                               "deleted", 1));
    }

    printf("key_id %s\ndeleted true\n", id);

    return SESSIONCTL_OK;
}


/* the outbox, newest first: what was sent, what waits, what failed */

static int
sessionctl_webhook_list(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                i, n, rc, limit;
    char              *end, lim[16];
    json_t            *events, *item;
    PGresult          *res;
    const char        *values[4], *v;
    sessionctl_opt_t   opts[4] = {
        { "--project", NULL }, { "--session", NULL }, { "--state", NULL },
        { "--limit", NULL }
    };

    rc = sessionctl_parse_args(argc, argv, NULL, 0, opts, 4);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (opts[0].value == NULL && opts[1].value == NULL) {
        return sessionctl_usage("webhook list needs --project or --session");
    }

    if (opts[0].value && !sessionctl_uuid_valid(opts[0].value)) {
        return sessionctl_refuse("project not found");
    }

    if (opts[1].value && !sessionctl_uuid_valid(opts[1].value)) {
        return sessionctl_refuse("session not found");
    }

    v = opts[2].value;

    if (v && strcmp(v, "pending") != 0 && strcmp(v, "sending") != 0
        && strcmp(v, "delivered") != 0 && strcmp(v, "failed") != 0)
    {
        return sessionctl_refuse("invalid state \"%s\": pending, sending, "
                                 "delivered or failed", v);
    }

    limit = 100;

    if (opts[3].value) {
        errno = 0;
        limit = (int) strtol(opts[3].value, &end, 10);

        if (errno || *end != '\0' || end == opts[3].value || limit < 1
            || limit > 10000)
        {
            return sessionctl_refuse("invalid limit \"%s\": 1 to 10000",
                                     opts[3].value);
        }
    }

    snprintf(lim, sizeof(lim), "%d", limit);

    rc = sessionctl_connect(ctx);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    values[0] = opts[0].value;
    values[1] = opts[1].value;
    values[2] = opts[2].value;
    values[3] = lim;

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_WEBHOOK_LIST, 4, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    n = PQntuples(res);

    if (!ctx->json) {
        printf("%-36s  %-17s  %-9s  %8s  %-20s  %s\n", "event_id", "type",
               "state", "attempts", "next_attempt", "last_error");

        for (i = 0; i < n; i++) {
            printf("%-36s  %-17s  %-9s  %8s  %-20s  %s\n",
                   PQgetvalue(res, i, 0), PQgetvalue(res, i, 2),
                   PQgetvalue(res, i, 3), PQgetvalue(res, i, 4),
                   PQgetisnull(res, i, 8) ? "-" : PQgetvalue(res, i, 8),
                   PQgetisnull(res, i, 5) ? "-" : PQgetvalue(res, i, 5));
        }

        PQclear(res);

        return SESSIONCTL_OK;
    }

    events = json_array();

    if (events == NULL) {
        PQclear(res);
        return sessionctl_refuse("out of memory");
    }

    for (i = 0; i < n; i++) {
        item = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:s, s:s, s:o, s:o}",
                         "event_id", PQgetvalue(res, i, 0),
                         "session_id", PQgetvalue(res, i, 1),
                         "type", PQgetvalue(res, i, 2),
                         "state", PQgetvalue(res, i, 3),
                         "attempts", atoi(PQgetvalue(res, i, 4)),
                         "last_error",
                         PQgetisnull(res, i, 5)
                             ? json_null()
                             : json_string(PQgetvalue(res, i, 5)),
                         "url", PQgetvalue(res, i, 6),
                         "created_at", PQgetvalue(res, i, 7),
                         "next_attempt_at",
                         PQgetisnull(res, i, 8)
                             ? json_null()
                             : json_string(PQgetvalue(res, i, 8)),
                         "finished_at",
                         PQgetisnull(res, i, 9)
                             ? json_null()
                             : json_string(PQgetvalue(res, i, 9)));

        if (json_array_append_new(events, item) != 0) {
            PQclear(res);
            json_decref(events);
            return sessionctl_refuse("out of memory");
        }
    }

    PQclear(res);

    return sessionctl_print_json(json_pack("{s:o}", "events", events));
}


/* an event due again now, with a fresh count of attempts */

static int
sessionctl_webhook_retry(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int          rc, busy;
    char         id[SESSIONCTL_UUID_LEN + 1];
    PGresult    *res;
    const char  *pos[1], *values[1];

    rc = sessionctl_id_command(ctx, argc, argv, "event", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    values[0] = pos[0];

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_WEBHOOK_RETRY, 1, values, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    if (PQntuples(res) == 0) {
        PQclear(res);
        return sessionctl_refuse("event not found");
    }

    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    busy = PQgetvalue(res, 0, 1)[0] == 't';
    PQclear(res);

    if (busy) {
        return sessionctl_refuse("event %s is being sent now; try again "
                                 "once its attempt has ended", id);
    }

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:s, s:s}", "event_id", id,
                                               "state", "pending"));
    }

    printf("event_id %s\nstate pending\n", id);

    return SESSIONCTL_OK;
}
