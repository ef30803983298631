/*
 * sessionctl, the admin tool (docs/api.md §9): what its three files
 * share.  sessionctl.c reads the command line and runs one command of
 * sessionctl_cmd.c; both use the helpers of sessionctl_lib.c (arguments,
 * the database, output).
 */

#ifndef _SESSIONCTL_H_INCLUDED_
#define _SESSIONCTL_H_INCLUDED_


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


/* a column of a listing: its name, where the result holds it, how shown */
typedef struct {
    const char                    *name;
    int                            col;
    /* text: printf's width (negative: left-aligned; 0: as long as it is) */
    int                            width;
    /* JSON: an integer, not a string */
    unsigned                       number:1;
} sessionctl_col_t;


/* the helpers (sessionctl_lib.c) */

/* the commands and their arguments, for usage errors and --help */
extern const char  sessionctl_usage_text[];

int sessionctl_usage(const char *fmt, ...);
int sessionctl_refuse(const char *fmt, ...);
int sessionctl_parse_args(int argc, char **argv, const char **pos,
    int npos, sessionctl_opt_t *opts, int nopts);
int sessionctl_id_command(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *what, const char **id);
int sessionctl_id_row(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *what, const char *sql, PGresult **res);
PGresult *sessionctl_exec(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const int *lengths, const int *formats);
int sessionctl_run(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values);
PGresult *sessionctl_exec_row(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found);
int sessionctl_change(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found, const char *notify,
    char *id);
void sessionctl_db_error(sessionctl_ctx_t *ctx, PGresult *res);
int sessionctl_db_refused(PGresult *res);
int sessionctl_print_json(json_t *obj);
int sessionctl_print_fields(sessionctl_ctx_t *ctx, const char *name1,
    const char *value1, const char *name2, const char *value2);
int sessionctl_print_rows(sessionctl_ctx_t *ctx, PGresult *res, int n,
    const sessionctl_col_t *text, const sessionctl_col_t *json,
    const char *name);
int sessionctl_print_value(sessionctl_ctx_t *ctx, const char *sql, int n,
    const char *const *values, const char *not_found, const char *name);
int sessionctl_print_created(sessionctl_ctx_t *ctx, PGresult *res,
    const char *not_found, const char *id_name, const char *secret_name,
    char *secret, size_t size);
int sessionctl_uuid_valid(const char *s);


/* the commands (sessionctl_cmd.c) */

int sessionctl_migrate(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_wakeups(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_plan_set(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_account_create(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_account_suspend(sessionctl_ctx_t *ctx, int argc,
    char **argv);
int sessionctl_account_activate(sessionctl_ctx_t *ctx, int argc,
    char **argv);
int sessionctl_project_create(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_key_create(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_key_list(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_key_delete(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_webhook_list(sessionctl_ctx_t *ctx, int argc, char **argv);
int sessionctl_webhook_retry(sessionctl_ctx_t *ctx, int argc, char **argv);


#endif /* _SESSIONCTL_H_INCLUDED_ */
