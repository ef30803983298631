# sessionctl, the admin tool (docs/api.md §9 and §10): every
# command, every --json field, exit codes 0/1/2/3, --help of every
# command, what lands in the database
# and the NOTIFYs that revoke cached auth answers.
#
# Runs from the repository root inside pg_virtualenv (PGHOST, PGPORT, ...):
#     pg_virtualenv -- prove -v t/010-sessionctl.t
# It works in a private database that it creates and drops, so the schema
# starts empty and other test files are not disturbed.

use strict;
use warnings;

use Test::More;
use File::Spec;
use File::Temp qw(tempdir);
use JSON::PP ();
use Digest::SHA qw(sha256_hex);
use MIME::Base64 qw(decode_base64);

use lib 't/lib';
use Session qw(migrations schema_latest);

my $BIN = File::Spec->rel2abs('build/sessionctl');
my $TMP = tempdir(CLEANUP => 1);
my $UUID = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
my $TIME = qr/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/;
my $NO_SUCH = '00000000-0000-4000-8000-000000000000';

delete @ENV{qw(SESSION_DB SESSION_KEY_PREFIX)};

# migrations shipped in src/sql, and the highest version
my $NMIG = () = migrations();
my $VERSION = schema_latest();

unless (-x $BIN) {
    fail("$BIN is built (make build first)");
    done_testing();
    exit;
}

my $ADMIN_DB = $ENV{PGDATABASE} // $ENV{PGUSER} // (getpwuid($<))[0];

if (system('psql -XAtq -c "SELECT 1" >/dev/null 2>&1') != 0) {
    plan skip_all => 'no PostgreSQL reachable (run inside pg_virtualenv)';
}

my @dropme;

sub admin_sql {
    my ($q, @binds) = @_;
    return psql($ADMIN_DB, $q, @binds);
}

sub new_db {
    my $name = shift;

    return undef unless defined eval {
        admin_sql('DROP DATABASE IF EXISTS :"p1"', $name);
        admin_sql('CREATE DATABASE :"p1"', $name);
    };

    push @dropme, $name;
    return $name;
}

END {
    my $rc = $?;
    for my $db (@dropme) {
        eval { admin_sql('DROP DATABASE IF EXISTS :"p1" WITH (FORCE)', $db) };
    }
    $? = $rc;
}

my $DB = new_db("sessionctl_t_$$");

if (defined $DB) {
    $ENV{PGDATABASE} = $DB;
} else {
    diag('cannot create a private database, using the current one');
    $DB = $ADMIN_DB;
}


# psql with $n parameters as psql variables (:'p1'); dies on an SQL error

sub psql {
    my ($db, $q, @binds) = @_;

    my $file = "$TMP/q.sql";
    open my $fh, '>', $file or die "$file: $!";
    print $fh $q, "\n";
    close $fh;

    my @vars = map { ('-v', 'p' . ($_ + 1) . "=$binds[$_]") } 0 .. $#binds;

    local $ENV{PGOPTIONS} = '-c client_min_messages=warning';
    open my $p, '-|', 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $db,
        @vars, '-f', $file
        or die "psql: $!";
    local $/;
    my $out = <$p>;
    close $p;
    die "psql failed: $q\n" if $?;

    $out //= '';
    $out =~ s/\n\z//;
    return $out;
}

sub sql { return psql($DB, @_) }

sub slurp {
    my $file = shift;
    open my $fh, '<', $file or return '';
    local $/;
    my $s = <$fh>;
    return $s // '';
}

sub result {
    my ($rc, $out, $err) = @_;
    my $json = eval { JSON::PP->new->decode($out) };
    return { rc => $rc, out => $out, err => $err, json => $json };
}

# ctl([{ENV => value or undef}], args...) runs build/sessionctl

sub ctl {
    my $env = ref $_[0] eq 'HASH' ? shift : {};
    my @args = @_;

    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        for my $k (keys %$env) {
            if (defined $env->{$k}) {
                $ENV{$k} = $env->{$k};
            } else {
                delete $ENV{$k};
            }
        }
        open STDOUT, '>', "$TMP/out" or die;
        open STDERR, '>', "$TMP/err" or die;
        exec $BIN, @args or exit 127;
    }

    waitpid $pid, 0;
    my $rc = ($? & 127) ? -1 : $? >> 8;

    return result($rc, slurp("$TMP/out"), slurp("$TMP/err"));
}

sub shq {
    my $s = shift;
    $s =~ s/'/'\\''/g;
    return "'$s'";
}

# runs sessionctl from inside a psql session that LISTENs on session_auth;
# {notes} are the payloads that session received

sub ctl_listen {
    my @args = @_;

    my $cmd = join ' ', map { shq($_) } $BIN, @args;

    open my $sh, '>', "$TMP/run.sh" or die;
    print $sh "$cmd >$TMP/lout 2>$TMP/lerr\necho \$? >$TMP/lrc\n";
    close $sh;

    unlink "$TMP/lrc";

    my $out = psql($DB, "LISTEN session_auth;\n"
                        . "\\! sh $TMP/run.sh\n"
                        . "SELECT pg_sleep(0.3);\n"
                        . "SELECT 'done';");

    my @notes = $out =~ /Asynchronous\ notification\ "session_auth"
                         \ with\ payload\ "([^"]*)"/gx;

    my $rc = slurp("$TMP/lrc");
    chomp $rc;

    my $r = result($rc eq '' ? -1 : $rc + 0, slurp("$TMP/lout"),
                   slurp("$TMP/lerr"));
    $r->{notes} = \@notes;
    return $r;
}

sub one_json_line {
    my ($r, $name) = @_;
    ok(defined $r->{json} && ref $r->{json} eq 'HASH'
       && $r->{out} =~ /\A[^\n]+\n\z/, "$name: one JSON object on one line")
        or diag("stdout: $r->{out}stderr: $r->{err}");
}

sub ok_run {
    my ($r, $name) = @_;
    is($r->{rc}, 0, "$name: exit 0") or diag("stderr: $r->{err}");
    is($r->{err}, '', "$name: nothing on stderr");
}

sub refused {
    my ($r, $name, $msg) = @_;
    is($r->{rc}, 1, "$name: exit 1") or diag("stdout: $r->{out}");
    like($r->{err}, qr/\Asessionctl: [^\n]+\n\z/, "$name: one-line message");
    like($r->{err}, $msg, "$name: message") if $msg;
    unlike($r->{err}, qr/ERROR|invalid input syntax|SELECT|UPDATE|INSERT/,
           "$name: no SQL internals");
    is($r->{out}, '', "$name: nothing on stdout");
}

# exit 3: the database was unreachable or failed
sub db_failed {
    my ($r, $name, $msg) = @_;
    is($r->{rc}, 3, "$name: exit 3") or diag("stderr: $r->{err}");
    like($r->{err}, qr/\Asessionctl: [^\n]+\n\z/, "$name: one-line message");
    like($r->{err}, $msg, "$name: message") if $msg;
    is($r->{out}, '', "$name: nothing on stdout");
}

# asked-for help: stdout, exit 0, no database needed
sub help_ok {
    my ($r, $name, $want) = @_;
    is($r->{rc}, 0, "$name: exit 0") or diag("stderr: $r->{err}");
    is($r->{err}, '', "$name: nothing on stderr");
    like($r->{out}, $want, "$name: the command's usage on stdout");
    like($r->{out}, qr/3 database unreachable or failed/,
         "$name: names the exit statuses");
}

sub usage {
    my ($r, $name) = @_;
    is($r->{rc}, 2, "$name: exit 2") or diag("stderr: $r->{err}");
    like($r->{err}, qr/^usage: sessionctl/m, "$name: usage on stderr");
    is($r->{out}, '', "$name: nothing on stdout");
}


# --- migrate ---------------------------------------------------------------

my $r = ctl('migrate');
ok_run($r, 'migrate');
is($r->{out}, "schema version $VERSION\n", 'migrate: text output');

$r = ctl('--json', 'migrate');
ok_run($r, 'migrate again');
one_json_line($r, 'migrate --json');
is_deeply($r->{json}, { version => $VERSION }, 'migrate --json: version');

$r = ctl('--json', 'migrate');
ok_run($r, 'migrate a third time');
is($r->{json}{version}, $VERSION, 'migrate is idempotent');

is(sql('SELECT count(*), count(DISTINCT version), max(version)'
       . ' FROM session_schema_migrations'),
   "$NMIG|$NMIG|$VERSION",
   'session_schema_migrations: one row per migration');

is(sql("SELECT name || ':' || coalesce(monthly_quota::text, 'null') || ':'"
       . " || array_to_string(features, ',') FROM plans"
       . " WHERE name IN ('free', 'pro', 'unlimited') ORDER BY name"),
   "free:100:long_poll\npro:10000:long_poll,webhook\n"
   . "unlimited:null:long_poll,webhook",
   'migrate seeds free, pro and unlimited');

# concurrent migrates on an empty database serialise on the advisory lock
SKIP: {
    my $db2 = new_db("sessionctl_t2_$$");
    skip 'cannot create a second database', 3 unless defined $db2;

    my @pids;
    for my $i (1 .. 4) {
        my $pid = fork // die;
        if ($pid == 0) {
            open STDOUT, '>', "$TMP/par$i.out" or die;
            open STDERR, '>', "$TMP/par$i.err" or die;
            exec $BIN, '--json', '-d', "dbname=$db2", 'migrate' or exit 127;
        }
        push @pids, $pid;
    }

    my @rc;
    for my $pid (@pids) {
        waitpid $pid, 0;
        push @rc, $? >> 8;
    }

    is_deeply(\@rc, [0, 0, 0, 0], 'four concurrent migrates: all exit 0')
        or diag(join '', map { slurp("$TMP/par$_.err") } 1 .. 4);
    is_deeply([map { eval { JSON::PP->new->decode(slurp("$TMP/par$_.out"))
                            ->{version} } } 1 .. 4],
              [($VERSION) x 4], 'four concurrent migrates: same version');
    is(psql($db2, 'SELECT count(*) FROM session_schema_migrations'),
       $NMIG,
       'four concurrent migrates: each migration applied once');
}


# --- global options and usage ----------------------------------------------

usage(ctl(), 'no command');
help_ok(ctl({ SESSION_DB => 'host=/nonexistent' }, '--help'), '--help',
        qr/\Ausage: sessionctl .*^  key delete KEY_ID$/ms);
help_ok(ctl('-h'), '-h', qr/\Ausage: sessionctl /);
help_ok(ctl('help'), 'help', qr/\Ausage: sessionctl .*^  migrate$/ms);

# every command: COMMAND --help, COMMAND ARGS --help, help COMMAND
for my $cmd (['migrate'], ['plan', 'set'], ['account', 'create'],
             ['account', 'suspend'], ['account', 'activate'],
             ['project', 'create'], ['key', 'create'], ['key', 'list'],
             ['key', 'delete'])
{
    my $want = qr/\Ausage: sessionctl \[--json\] \[-d CONNINFO\] @$cmd\b/;
    my $env = { SESSION_DB => 'host=/nonexistent' };
    help_ok(ctl($env, @$cmd, '--help'), "@$cmd --help", $want);
    help_ok(ctl($env, @$cmd, $NO_SUCH, '-h'), "@$cmd ID -h", $want);
    help_ok(ctl($env, 'help', @$cmd), "help @$cmd", $want);
}
help_ok(ctl('key', '--help'), 'key --help',
        qr/key create.*key list.*key delete/s);
help_ok(ctl('help', 'account'), 'help account',
        qr/account create.*account suspend.*account activate/s);
usage(ctl('help', 'frobnicate'), 'help for an unknown command');
$r = ctl('key', 'delete', '--', '--help');
refused($r, '"--" ends the options, --help included', qr/key not found/);
usage(ctl('--json'), '--json without a command');
usage(ctl('frobnicate'), 'unknown command');
usage(ctl('key'), 'key without a subcommand');
usage(ctl('key', 'frob', $NO_SUCH), 'unknown subcommand');
usage(ctl('--bogus', 'migrate'), 'unknown global option');
usage(ctl('-d'), '-d without a value');
usage(ctl('migrate', 'extra'), 'migrate with an extra argument');
usage(ctl({ SESSION_DB => 'host=/nonexistent' }, 'plan', 'set'),
      'usage errors are found before connecting');

$r = ctl('--json', '-d', "dbname=$DB", 'migrate');
ok_run($r, '-d CONNINFO');
is($r->{json}{version}, $VERSION, '-d CONNINFO: version');

$r = ctl('--json', "-ddbname=$DB", 'migrate');
ok_run($r, '-dCONNINFO');

$r = ctl({ SESSION_DB => "dbname=$DB" }, '--json', 'migrate');
ok_run($r, '$SESSION_DB');

db_failed(ctl({ SESSION_DB => 'host=/nonexistent' }, 'migrate'),
          'unreachable $SESSION_DB', qr/cannot connect to the database/);

$r = ctl({ SESSION_DB => 'host=/nonexistent' }, '-d', "dbname=$DB",
         'migrate');
ok_run($r, '-d wins over $SESSION_DB');

db_failed(ctl('-d', 'host=/nonexistent', 'migrate'), 'unreachable -d',
          qr/cannot connect to the database/);

# a connection string that could never connect is a bad value (exit 1),
# not "the database failed, try again later" (exit 3); a value libpq
# takes goes on to connect
for my $c (['bogus=1', qr/invalid connection string: invalid connection option "bogus"/],
           ["dbname=$DB sslmode=bogus", qr/invalid sslmode "bogus" in the connection string, expected one of disable/],
           ["dbname=$DB port=abc", qr/invalid port "abc"/],
           ["dbname=$DB port=0", qr/invalid port "0"/],
           ["dbname=$DB hostaddr=notanip", qr/invalid hostaddr "notanip"/],
           ["dbname=$DB target_session_attrs=READ-WRITE", qr/invalid target_session_attrs/],
           ["dbname=$DB connect_timeout=soon", qr/invalid connect_timeout "soon"/],
           ["postgresql://x/y?sslmode=bogus", qr/invalid sslmode "bogus"/],
           ["dbname='x", qr/invalid connection string/])
{
    refused(ctl('-d', $c->[0], 'migrate'), "-d $c->[0]", $c->[1]);
    refused(ctl({ SESSION_DB => $c->[0] }, 'migrate'),
            "\$SESSION_DB $c->[0]", $c->[1]);
}

ok_run(ctl('-d', "dbname=$DB sslmode=disable connect_timeout=5", 'migrate'),
       '-d with values libpq takes');
for my $cmd (['plan', 'set', 'gold'], ['account', 'create', 'A', '--plan',
             'free'], ['account', 'suspend', $NO_SUCH],
             ['project', 'create', $NO_SUCH, 'P'], ['key', 'create', $NO_SUCH],
             ['key', 'list', $NO_SUCH], ['key', 'delete', $NO_SUCH])
{
    db_failed(ctl({ SESSION_DB => 'host=/nonexistent' }, @$cmd),
              "@$cmd, database unreachable", qr/cannot connect/);
}

# a database that answers but fails (no schema): exit 3, not 1
SKIP: {
    my $bare = new_db("sessionctl_bare_$$");
    skip 'cannot create a second database', 8 unless defined $bare;
    db_failed(ctl('-d', "dbname=$bare", 'key', 'list', $NO_SUCH),
              'key list without a schema', qr/database error/);
    db_failed(ctl('-d', "dbname=$bare", 'account', 'create', 'A', '--plan',
                  'free'),
              'account create without a schema', qr/database error/);
}


# --- plan set --------------------------------------------------------------

my $plan = "t$$";

sub plan_row {
    return sql("SELECT coalesce(monthly_quota::text, 'null') || ':'"
               . " || array_to_string(features, ',')"
               . " FROM plans WHERE name = :'p1'", shift);
}

$r = ctl('--json', 'plan', 'set', $plan);
ok_run($r, 'plan set new');
one_json_line($r, 'plan set --json');
is($r->{json}{plan}, $plan, 'plan set: plan field');
is_deeply([$r->{json}{quota}, $r->{json}{features}], [undef, []],
          'plan set: quota and features fields');
is(plan_row($plan), 'null:', 'new plan: no quota limit, no features');

$r = ctl('--json', 'plan', 'set', $plan, '--quota', '0');
ok_run($r, 'plan set --quota 0');
is($r->{json}{quota}, 0, 'plan set --quota 0: quota 0');
is(plan_row($plan), '0:', '--quota 0 is stored, features unchanged');

$r = ctl('--json', 'plan', 'set', $plan, '--features', 'webhook,long_poll');
ok_run($r, 'plan set --features');
is_deeply($r->{json}{features}, ['long_poll', 'webhook'],
          'plan set --features: features field');
is(plan_row($plan), '0:long_poll,webhook', '--features keeps the quota');

$r = ctl('--json', 'plan', 'set', $plan, '--quota=250');
ok_run($r, 'plan set --quota=N');
is(plan_row($plan), '250:long_poll,webhook', '--quota keeps the features');

$r = ctl('--json', 'plan', 'set', $plan, '--quota', 'unlimited',
         '--features', 'webhook,webhook');
ok_run($r, 'plan set both options');
is($r->{json}{quota}, undef, 'plan set --quota unlimited: quota null');
is(plan_row($plan), 'null:webhook', 'unlimited and deduplicated features');

$r = ctl('--json', 'plan', 'set', $plan, '--features', '');
ok_run($r, 'plan set --features ""');
is(plan_row($plan), 'null:', '--features "" clears the features');

$r = ctl('plan', 'set', $plan, '--quota', '7', '--features', 'long_poll');
ok_run($r, 'plan set, text mode');
is($r->{out}, "plan $plan\nquota 7\nfeatures long_poll\n",
   'plan set: text output');

$r = ctl('--json', 'plan', 'set', 'free');
ok_run($r, 'plan set on a seeded plan without options');
is(plan_row('free'), '100:long_poll',
   'a plan set without options changes nothing');

for my $q ('-1', 'abc', '1.5', '', '+3', '2147483648', '99999999999',
           'Unlimited')
{
    refused(ctl('plan', 'set', $plan, '--quota', $q), "bad quota \"$q\"",
            qr/quota/);
}

for my $f ('foo', 'long_poll,', 'long_poll,sms', 'Webhook') {
    refused(ctl('plan', 'set', $plan, '--features', $f),
            "unknown feature \"$f\"", qr/feature/);
}

is(plan_row($plan), '7:long_poll', 'refused plan sets change nothing');

refused(ctl('plan', 'set', 'bad name'), 'bad plan name', qr/plan name/);
refused(ctl('plan', 'set', 'x' x 65), 'plan name too long', qr/plan name/);

usage(ctl('plan', 'set'), 'plan set without a name');
usage(ctl('plan', 'set', $plan, '--quota'), 'plan set --quota without value');
usage(ctl('plan', 'set', $plan, '--bogus', '1'), 'plan set unknown option');
usage(ctl('plan', 'set', $plan, 'extra'), 'plan set extra argument');
usage(ctl('plan', 'set', $plan, '--quota', '1', '--quota', '2'),
      'plan set option twice');


# --- account ---------------------------------------------------------------

$r = ctl('--json', 'account', 'create', 'Acme Corp', '--plan', $plan);
ok_run($r, 'account create');
one_json_line($r, 'account create --json');
like($r->{json}{account_id} // '', qr/\A$UUID\z/, 'account create: account_id');
my $account = $r->{json}{account_id} // $NO_SUCH;

is(sql("SELECT name || '|' || plan || '|' || status FROM accounts"
       . " WHERE id = :'p1'", $account),
   "Acme Corp|$plan|active", 'account row: name, plan, active');

$r = ctl('account', 'create', '--plan', 'free', 'Other');
ok_run($r, 'account create, text mode, option first');
like($r->{out}, qr/\Aaccount_id $UUID\n\z/, 'account create: text output');

refused(ctl('account', 'create', 'X', '--plan', 'no-such-plan'),
        'account create, unknown plan', qr/plan not found/);
refused(ctl('account', 'create', 'X', '--plan', 'bad plan'),
        'account create, malformed plan', qr/plan not found/);
usage(ctl('account', 'create', 'X'), 'account create without --plan');
usage(ctl('account', 'create', '--plan', 'free'),
      'account create without a name');

$r = ctl_listen('--json', 'account', 'suspend', $account);
ok_run($r, 'account suspend');
one_json_line($r, 'account suspend --json');
is_deeply($r->{json}, { account_id => $account, status => 'suspended' },
          'account suspend: fields');
is(sql("SELECT status FROM accounts WHERE id = :'p1'", $account),
   'suspended', 'account suspended in the database');
is_deeply($r->{notes}, ["account:$account"],
          'account suspend sends NOTIFY session_auth account:<id>');

$r = ctl_listen('--json', 'account', 'activate', uc $account);
ok_run($r, 'account activate (upper-case id)');
is_deeply($r->{json}, { account_id => $account, status => 'active' },
          'account activate: fields, canonical id');
is(sql("SELECT status FROM accounts WHERE id = :'p1'", $account),
   'active', 'account active in the database');
is_deeply($r->{notes}, ["account:$account"],
          'account activate sends NOTIFY with the canonical id');

$r = ctl('account', 'suspend', $account);
ok_run($r, 'account suspend, text mode');
is($r->{out}, "account_id $account\nstatus suspended\n",
   'account suspend: text output');
ok_run(ctl('account', 'activate', $account), 'account activate again');

for my $id ($NO_SUCH, '123', 'not-a-uuid', "$account-0",
            'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz')
{
    $r = ctl_listen('account', 'suspend', $id);
    refused($r, "account suspend \"$id\"", qr/account not found/);
    is_deeply($r->{notes}, [], "account suspend \"$id\": no NOTIFY");
    refused(ctl('account', 'activate', $id), "account activate \"$id\"",
            qr/account not found/);
}

usage(ctl('account', 'suspend'), 'account suspend without id');
usage(ctl('account', 'activate', $account, 'x'),
      'account activate extra argument');


# --- project ---------------------------------------------------------------

$r = ctl('--json', 'project', 'create', $account, 'Website');
ok_run($r, 'project create');
one_json_line($r, 'project create --json');
like($r->{json}{project_id} // '', qr/\A$UUID\z/, 'project create: project_id');
my $project = $r->{json}{project_id} // $NO_SUCH;
my $secret = $r->{json}{webhook_secret} // '';
like($secret, qr{\Awhsec_[A-Za-z0-9+/]{43}=\z},
     'webhook_secret: whsec_ + standard base64');
is(length(decode_base64(substr($secret, 6))), 32,
   'webhook_secret: 32 random bytes');
is(sql("SELECT account_id || '|' || name || '|' || webhook_secret"
       . " FROM projects WHERE id = :'p1'", $project),
   "$account|Website|$secret", 'project row');

$r = ctl('project', 'create', $account, 'Second');
ok_run($r, 'project create, text mode');
like($r->{out},
     qr{\Aproject_id $UUID\nwebhook_secret whsec_[A-Za-z0-9+/]{43}=\n\z},
     'project create: text output');
my ($secret2) = $r->{out} =~ /webhook_secret (\S+)/;
isnt($secret2, $secret, 'each project has its own secret');
my ($project2) = $r->{out} =~ /project_id (\S+)/;

refused(ctl('project', 'create', $NO_SUCH, 'P'),
        'project create, unknown account',
        qr/account not found/);
refused(ctl('project', 'create', 'nope', 'P'),
        'project create, malformed account', qr/account not found/);
usage(ctl('project', 'create', $account), 'project create without a name');


# --- key create ------------------------------------------------------------

sub key_row {
    return sql("SELECT encode(key_hash, 'hex') || '|' || prefix || '|' || hint"
               . " || '|' || project_id FROM api_keys WHERE id = :'p1'",
               shift);
}

sub key_stored_anywhere {
    my $key = shift;
    (my $hex = $key) =~ s/^[A-Za-z]{4}_//;
    return sql("SELECT count(*) FROM api_keys a"
               . " WHERE strpos(lower(a::text), lower(:'p1')) > 0"
               . " OR strpos(lower(a::text), lower(:'p2')) > 0",
               $key, $hex);
}

$r = ctl('--json', 'key', 'create', $project);
ok_run($r, 'key create');
one_json_line($r, 'key create --json');
like($r->{json}{key_id} // '', qr/\A$UUID\z/, 'key create: key_id');
like($r->{json}{key} // '', qr/\Asess_[0-9a-f]{32}\z/,
     'key create: sess_ + 32 lower-case hex');
my ($key1_id, $key1) = ($r->{json}{key_id} // $NO_SUCH, $r->{json}{key} // '');

is(key_row($key1_id),
   sha256_hex(lc $key1) . '|sess|' . substr($key1, -4) . "|$project",
   'api_keys holds SHA-256 of the key, prefix, hint, project');
is(key_stored_anywhere($key1), 0, 'api_keys never holds the key itself');

$r = ctl('key', 'create', $project);
ok_run($r, 'key create, text mode');
like($r->{out}, qr/\Akey_id $UUID\nkey sess_[0-9a-f]{32}\n\z/,
     'key create: text output');
my ($key2_id, $key2) = $r->{out} =~ /\Akey_id (\S+)\nkey (\S+)\n/;
$key2_id //= $NO_SUCH;
$key2 //= '';
isnt($key2, $key1, 'two keys differ');
is(key_row($key2_id), sha256_hex($key2) . '|sess|' . substr($key2, -4)
   . "|$project", 'second key stored as its hash');

$r = ctl('--json', 'key', 'create', $project, '--prefix', 'ABCD');
ok_run($r, 'key create --prefix ABCD');
like($r->{json}{key} // '', qr/\AABCD_[0-9a-f]{32}\z/,
     'key create --prefix: the prefix as given');
my ($key3_id, $key3) = ($r->{json}{key_id} // $NO_SUCH, $r->{json}{key} // '');
is(key_row($key3_id), sha256_hex(lc $key3) . '|ABCD|' . substr($key3, -4)
   . "|$project", 'hash of the lower-cased key, as the server computes it');
is(key_stored_anywhere($key3), 0, 'prefixed key not stored');

$r = ctl({ SESSION_KEY_PREFIX => 'wxyz' }, '--json', 'key', 'create',
         $project);
ok_run($r, 'key create with $SESSION_KEY_PREFIX');
like($r->{json}{key} // '', qr/\Awxyz_[0-9a-f]{32}\z/,
     '$SESSION_KEY_PREFIX is the default prefix');

$r = ctl({ SESSION_KEY_PREFIX => 'wxyz' }, '--json', 'key', 'create',
         $project, '--prefix=abcd');
ok_run($r, 'key create --prefix=abcd with $SESSION_KEY_PREFIX');
like($r->{json}{key} // '', qr/\Aabcd_[0-9a-f]{32}\z/,
     '--prefix wins over $SESSION_KEY_PREFIX');

my $nkeys = sql("SELECT count(*) FROM api_keys WHERE project_id = :'p1'",
                $project);

for my $p ('ab1d', 'abc', 'abcde', '', 'ab_d', "ab\x{e9}d") {
    refused(ctl('key', 'create', $project, '--prefix', $p),
            "key create --prefix \"$p\"", qr/prefix/);
}
refused(ctl({ SESSION_KEY_PREFIX => '12ab' }, 'key', 'create', $project),
        'key create with a bad $SESSION_KEY_PREFIX', qr/prefix/);
refused(ctl('key', 'create', $NO_SUCH), 'key create, unknown project',
        qr/project not found/);
refused(ctl('key', 'create', 'abc'), 'key create, malformed project',
        qr/project not found/);
is(sql("SELECT count(*) FROM api_keys WHERE project_id = :'p1'", $project),
   $nkeys, 'refused key creates store nothing');

usage(ctl('key', 'create'), 'key create without a project');
usage(ctl('key', 'create', $project, '--prefix'),
      'key create --prefix without a value');


# --- key list --------------------------------------------------------------

$r = ctl('--json', 'key', 'list', $project);
ok_run($r, 'key list');
one_json_line($r, 'key list --json');
my $keys = $r->{json}{keys} // [];
is(ref $keys, 'ARRAY', 'key list: keys array');
is(scalar @$keys, $nkeys, 'key list: every key of the project');
is_deeply([map { $_->{key_id} } @$keys[0 .. 2]], [$key1_id, $key2_id, $key3_id],
          'key list: oldest first');
is_deeply([sort keys %{ $keys->[0] // {} }],
          [qw(created_at deleted_at hint key_id)], 'key list: item fields');
is($keys->[0]{hint}, substr($key1, -4), 'key list: hint is the last 4 hex');
ok(!grep({ ($_->{created_at} // '') !~ /\A$TIME\z/ } @$keys),
   'key list: created_at RFC 3339 UTC');
ok(!grep({ defined $_->{deleted_at} } @$keys), 'key list: deleted_at null');
is(sql("SELECT to_char(created_at AT TIME ZONE 'UTC',"
       . " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM api_keys WHERE id = :'p1'",
       $key1_id), $keys->[0]{created_at}, 'key list: created_at value');
for my $k ($key1, $key2, $key3) {
    my $hex = substr $k, 5;
    unlike($r->{out}, qr/$hex/i, 'key list never shows a key');
}

$r = ctl('key', 'list', $project);
ok_run($r, 'key list, text mode');
like($r->{out}, qr/^\Q$key1_id\E\s+\Q${\ substr($key1, -4)}\E\s+$TIME\s+-$/m,
     'key list: text row');

$r = ctl('--json', 'key', 'list', $project2);
ok_run($r, 'key list, project without keys');
is_deeply($r->{json}, { keys => [] }, 'key list: empty list');

refused(ctl('key', 'list', $NO_SUCH), 'key list, unknown project',
        qr/project not found/);
refused(ctl('key', 'list', '1'), 'key list, malformed project',
        qr/project not found/);
usage(ctl('key', 'list'), 'key list without a project');


# --- key delete ------------------------------------------------------------

$r = ctl_listen('--json', 'key', 'delete', $key1_id);
ok_run($r, 'key delete');
one_json_line($r, 'key delete --json');
is($r->{json}{key_id}, $key1_id, 'key delete: key_id');
ok(JSON::PP::is_bool($r->{json}{deleted}) && $r->{json}{deleted},
   'key delete: deleted true');
is_deeply($r->{notes}, ['key:' . sha256_hex(lc $key1)],
          'key delete sends NOTIFY session_auth key:<sha256 hex>');
like(sql("SELECT to_char(deleted_at AT TIME ZONE 'UTC',"
         . " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM api_keys"
         . " WHERE id = :'p1'", $key1_id), qr/\A$TIME\z/,
     'deleted_at is set');

$r = ctl_listen('key', 'delete', $key1_id);
refused($r, 'key delete twice', qr/not found|deleted/);
is_deeply($r->{notes}, [], 'key delete twice: no NOTIFY');

$r = ctl_listen('key', 'delete', uc $key3_id);
ok_run($r, 'key delete, text mode, upper-case id');
is($r->{out}, "key_id $key3_id\ndeleted true\n", 'key delete: text output');
is_deeply($r->{notes}, ['key:' . sha256_hex(lc $key3)],
          'key delete NOTIFY names the hash of the lower-cased key');

$r = ctl('--json', 'key', 'list', $project);
my %deleted = map { $_->{key_id} => $_->{deleted_at} } @{ $r->{json}{keys} };
like($deleted{$key1_id} // '', qr/\A$TIME\z/,
     'key list: deleted_at of a deleted key');
is($deleted{$key2_id}, undef, 'key list: live key keeps deleted_at null');

for my $id ($NO_SUCH, 'x', $project) {
    refused(ctl('key', 'delete', $id), "key delete \"$id\"",
            qr/not found/);
}
usage(ctl('key', 'delete'), 'key delete without an id');

is(key_stored_anywhere($_), 0, 'no key stored anywhere in api_keys')
    for $key1, $key2, $key3;

done_testing();
