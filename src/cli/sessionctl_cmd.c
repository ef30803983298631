/*
 * sessionctl's commands: the schema (migrate), plans, accounts, projects,
 * keys and webhook events, each one blocking round trip or a few.
 */

#include "sessionctl.h"
#include "ngx_http_session_migrations.h"


static int sessionctl_plan_name_valid(const char *s);
static int sessionctl_parse_quota(const char *s, long *quota);
static int sessionctl_parse_features(const char *s, unsigned *features);
static void sessionctl_features_text(unsigned features, char *buf,
    size_t size);
static json_t *sessionctl_features_json(const char *list);
static int sessionctl_account_status(sessionctl_ctx_t *ctx, int argc,
    char **argv, const char *status);


/* key list: key_id, hint, created_at, deleted_at */
static const sessionctl_col_t  sessionctl_key_cols[] = {
    { "key_id", 0, -36, 0 },
    { "hint", 1, -4, 0 },
    { "created_at", 2, -20, 0 },
    { "deleted_at", 3, 0, 0 },
    { NULL, 0, 0, 0 }
};

/*
 * webhook list: event_id, session_id, type, state, attempts, last_error,
 * url, created_at, next_attempt_at, finished_at
 */
static const sessionctl_col_t  sessionctl_event_text[] = {
    { "event_id", 0, -36, 0 },
    { "type", 2, -17, 0 },
    { "state", 3, -9, 0 },
    { "attempts", 4, 8, 0 },
    { "next_attempt", 8, -20, 0 },
    { "last_error", 5, 0, 0 },
    { NULL, 0, 0, 0 }
};

static const sessionctl_col_t  sessionctl_event_json[] = {
    { "event_id", 0, 0, 0 },
    { "session_id", 1, 0, 0 },
    { "type", 2, 0, 0 },
    { "state", 3, 0, 0 },
    { "attempts", 4, 0, 1 },
    { "last_error", 5, 0, 0 },
    { "url", 6, 0, 0 },
    { "created_at", 7, 0, 0 },
    { "next_attempt_at", 8, 0, 0 },
    { "finished_at", 9, 0, 0 },
    { NULL, 0, 0, 0 }
};


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

int
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

    if (sessionctl_run(ctx, SESSIONCTL_SQL_LOCK, 1, values) != SESSIONCTL_OK
        || sessionctl_run(ctx, SESSIONCTL_SQL_MIGRATIONS_TABLE, 0, NULL)
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

    snprintf(version, sizeof(version), "%ld", current);
    values[0] = version;

    if (sessionctl_run(ctx, SESSIONCTL_SQL_SCHEMA_BEFORE, 1, values)
        != SESSIONCTL_OK)
    {
        return SESSIONCTL_REFUSED;
    }

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

        if (sessionctl_run(ctx, SESSIONCTL_SQL_BEGIN, 0, NULL)
            != SESSIONCTL_OK)
        {
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

        if (sessionctl_run(ctx, SESSIONCTL_SQL_MIGRATION_DONE, 2, values)
            != SESSIONCTL_OK
            || sessionctl_run(ctx, SESSIONCTL_SQL_COMMIT, 0, NULL)
               != SESSIONCTL_OK)
        {
            return SESSIONCTL_REFUSED;
        }

        if (m->version > current) {
            current = m->version;
        }
    }

    values[0] = SESSIONCTL_MIGRATE_LOCK;

    if (sessionctl_run(ctx, SESSIONCTL_SQL_UNLOCK, 1, values)
        != SESSIONCTL_OK)
    {
        return SESSIONCTL_REFUSED;
    }

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:I}", "version",
                                               (json_int_t) current));
    }

    printf("schema version %ld\n", current);

    return SESSIONCTL_OK;
}


/*
 * Shows, or sets, whether a write wakes the long polls of every session
 * (all) or only of the sessions a poll armed (polled); polled only once
 * every node runs a release that arms (docs/operations.md, "Upgrading")
 */

int
sessionctl_wakeups(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int          rc;
    PGresult    *res;
    const char  *pos[1];

    pos[0] = NULL;

    if (argc > 0) {
        rc = sessionctl_parse_args(argc, argv, pos, 1, NULL, 0);
        if (rc != SESSIONCTL_OK) {
            return rc;
        }

        /* a bad value, as webhook list's --state: exit 1 */

        if (strcmp(pos[0], "all") != 0 && strcmp(pos[0], "polled") != 0) {
            return sessionctl_refuse("invalid mode \"%s\": all or polled",
                                     pos[0]);
        }
    }

    /* a schema before version 20 has no such setting: say so plainly */

    res = sessionctl_exec(ctx, SESSIONCTL_SQL_WAKEUPS_TABLE, 0, NULL, NULL,
                          NULL);
    if (res == NULL) {
        return SESSIONCTL_REFUSED;
    }

    rc = (PQgetvalue(res, 0, 0)[0] == 't');
    PQclear(res);

    if (!rc) {
        return sessionctl_refuse("no wakeups setting before schema version "
                                 "20: run sessionctl migrate");
    }

    return sessionctl_print_value(ctx, pos[0] ? SESSIONCTL_SQL_WAKEUPS_SET
                                              : SESSIONCTL_SQL_WAKEUPS,
                                  pos[0] ? 1 : 0, pos,
                                  "no wakeups setting: run sessionctl migrate",
                                  "wakeups");
}


int
sessionctl_plan_set(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc;
    long               quota;
    char               quota_text[24], features_text[32], name[80];
    unsigned           features;
    json_t            *obj, *list;
    PGresult          *res;
    const char        *pos[1], *values[5];
    sessionctl_opt_t   opts[2] = {
        { "--quota", NULL }, { "--features", NULL }
    };

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


int
sessionctl_account_create(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc;
    const char        *pos[1], *values[2];
    sessionctl_opt_t   opts[1] = { { "--plan", NULL } };

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

    values[0] = pos[0];
    values[1] = opts[0].value;

    return sessionctl_print_value(ctx, SESSIONCTL_SQL_ACCOUNT_CREATE, 2,
                                  values, "plan not found", "account_id");
}


int
sessionctl_account_suspend(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    return sessionctl_account_status(ctx, argc, argv, "suspended");
}


int
sessionctl_account_activate(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    return sessionctl_account_status(ctx, argc, argv, "active");
}


/* the status change, with the notification that drops cached answers */

static int
sessionctl_account_status(sessionctl_ctx_t *ctx, int argc, char **argv,
    const char *status)
{
    int          rc;
    char         id[SESSIONCTL_UUID_LEN + 1];
    const char  *pos[1], *values[2];

    rc = sessionctl_id_command(ctx, argc, argv, "account", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    values[0] = pos[0];
    values[1] = status;

    rc = sessionctl_change(ctx, SESSIONCTL_SQL_ACCOUNT_STATUS, 2, values,
                           "account not found",
                           SESSIONCTL_SQL_NOTIFY_ACCOUNT, id);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    return sessionctl_print_fields(ctx, "account_id", id, "status", status);
}


int
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

int
sessionctl_key_create(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                rc, lengths[4], formats[4];
    char               key[NGX_HTTP_SESSION_KEY_LEN + 1];
    char               hint[NGX_HTTP_SESSION_KEY_HINT_LEN + 1];
    PGresult          *res;
    const char        *pos[1], *values[4], *prefix;
    unsigned char      raw[SESSIONCTL_KEY_BYTES];
    unsigned char      hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    sessionctl_opt_t   opts[1] = { { "--prefix", NULL } };

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


int
sessionctl_key_list(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int        rc, n;
    PGresult  *res;

    rc = sessionctl_id_row(ctx, argc, argv, "project",
                           SESSIONCTL_SQL_KEY_LIST, &res);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    /* a project without keys is one row of NULLs from the outer join */
    n = PQgetisnull(res, 0, 0) ? 0 : PQntuples(res);

    return sessionctl_print_rows(ctx, res, n, sessionctl_key_cols,
                                 sessionctl_key_cols, "keys");
}


/* the deletion, with the notification naming the key's hash */

int
sessionctl_key_delete(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int          rc;
    char         id[SESSIONCTL_UUID_LEN + 1];
    const char  *pos[1];

    rc = sessionctl_id_command(ctx, argc, argv, "key", pos);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    rc = sessionctl_change(ctx, SESSIONCTL_SQL_KEY_DELETE, 1, pos,
                           "key not found or already deleted",
                           SESSIONCTL_SQL_NOTIFY_KEY, id);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    if (ctx->json) {
        return sessionctl_print_json(json_pack("{s:s, s:b}", "key_id", id,
                                               "deleted", 1));
    }

    printf("key_id %s\ndeleted true\n", id);

    return SESSIONCTL_OK;
}


/* the outbox, newest first: what was sent, what waits, what failed */

int
sessionctl_webhook_list(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int                n, rc, limit;
    char              *end, lim[16];
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

    return sessionctl_print_rows(ctx, res, n, sessionctl_event_text,
                                 sessionctl_event_json, "events");
}


/* an event due again now, with a fresh count of attempts */

int
sessionctl_webhook_retry(sessionctl_ctx_t *ctx, int argc, char **argv)
{
    int        rc, busy;
    char       id[SESSIONCTL_UUID_LEN + 1];
    PGresult  *res;

    rc = sessionctl_id_row(ctx, argc, argv, "event",
                           SESSIONCTL_SQL_WEBHOOK_RETRY, &res);
    if (rc != SESSIONCTL_OK) {
        return rc;
    }

    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    busy = PQgetvalue(res, 0, 1)[0] == 't';
    PQclear(res);

    if (busy) {
        return sessionctl_refuse("event %s is being sent now; try again "
                                 "once its attempt has ended", id);
    }

    return sessionctl_print_fields(ctx, "event_id", id, "state", "pending");
}
