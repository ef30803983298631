/*
 * sessionctl: the admin tool of the Session Service (docs/api.md §9).
 *
 * A blocking libpq client: parse the command line, connect, run one
 * command, print one answer (text, or one JSON object with --json).
 * Exit status: 0 success, 1 refused request (message on stderr),
 * 2 usage error (usage on stderr), 3 the database could not be reached
 * or failed (message on stderr).
 */

#include "sessionctl.h"


static int sessionctl_help(const sessionctl_command_t *cmd,
    const char *group);
static int sessionctl_wants_help(int argc, char **argv);


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

    { "wakeups", NULL, sessionctl_wakeups,
      "usage: sessionctl [--json] [-d CONNINFO] wakeups [all|polled]\n"
      "\n"
      "Shows or sets which writes wake long polls.  all: every upload\n"
      "and complete notifies, as releases before schema 20 need.\n"
      "polled: only those into a session that a poll armed, which every\n"
      "node of this release does; set it once no older node serves.  A\n"
      "database made by this release's migrate starts at polled, an\n"
      "upgraded one at all.\n"
      "\n"
      "output: wakeups MODE           --json: {\"wakeups\": MODE}\n" },

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
