# session_db_pooler and session_db_listen (docs/decisions.md
# (pa), (pb)): what "nginx -t" refuses, and what the module finds out by
# itself about a pooler in front of it.
#
# Every connection's first statement compares the server process that
# answers it with the one the connection started with (PQbackendPID());
# PgBouncer makes up the latter, so a difference is a pooler.  Found on a
# pool connection that session_db_pooler does not name, the statements
# are not prepared there (a statement prepared on one server connection
# would be run on another); found on the LISTEN connection, it is said,
# an error where session_db_pooler says the pooler pools transactions.
#
# The PgBouncer here (started by the script, t/lib/Pgbouncer.pm) pools
# transactions, with one server connection, accepts the "options" startup
# parameter and drops it (ignore_startup_parameters = options, so that
# the module's default mode gets through), and sets no statement_timeout.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it) and PgBouncer
# (Debian's package pgbouncer, "make deps").

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session qw(:DEFAULT);
use SessionTest qw(:DEFAULT api_request check_init run_action error_log
                   listening send_get answer status_json);
use Pgbouncer;

BEGIN {
    if (!pgbouncer_path()) {
        Test::More->builder->skip_all('pgbouncer is not installed'
                                      . ' (package pgbouncer, make deps)');
    }
}

our $TAG = sprintf 't049-%d-%d', $$, time;

our $PGB = pgbouncer_start(pool_mode => 'transaction', pool_size => 1,
                           ignore => 'options');

# and one in session mode, which refuses "options"
our $SESS = pgbouncer_start(pool_mode => 'session', pool_size => 4,
                            port => ($ENV{TEST_NGINX_PORT} || 1984) + 6);
$ENV{TEST_NGINX_PGB_SESSION_CONF} = nginx_quote($SESS->{conninfo});

$ENV{TEST_NGINX_PGB_CONF} = nginx_quote($PGB->{conninfo});
$ENV{TEST_NGINX_PGB_OPTIONS_CONF} =
    nginx_quote("$PGB->{conninfo} options='-c work_mem=8MB'");

our $F = fixture(plan => 'pro', name => "$TAG-main");

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

sub api {
    my ($method, $path, $body, $headers) = @_;

    return api_request($method, $path, $F->{key}, $body, $headers,
                       { timeout => 20 });
}

# a create, a read, a list, an upload and a download: their statuses
sub statements {
    my @got;

    my $r = api('POST', '/api/v1/sessions', { delivery_mode => 'long_poll' });
    push @got, $r->{status};
    my $sid = $r->{json}{id} // 'none';

    push @got, api('GET', "/api/v1/sessions/$sid")->{status};
    push @got, api('GET', '/api/v1/sessions?limit=2')->{status};

    $r = api('POST', "/api/v1/sessions/$sid/images", $PNG,
             { 'Content-Type' => 'image/png' });
    push @got, $r->{status};
    my $iid = $r->{json}{id} // 'none';

    push @got, api('GET', "/api/v1/sessions/$sid/images/$iid/content")
               ->{status};

    return \@got;
}

# PgBouncer's server connections: their backend pids
sub server_pids {
    return map { $_->{remote_pid} }
           grep { $_->{database} eq 'pooled' }
           pgbouncer_admin($PGB, 'SHOW SERVERS');
}


# --- actions and checks ---------------------------------------------------

my %actions;

# before nginx starts: a new server connection, which holds no statement
# prepared in an earlier block
$actions{fresh} = sub { pgbouncer_admin($PGB, 'RECONNECT pooled') };

my %checks;

# the default mode, through the pooler: it is found, nothing is prepared,
# and the statements still run once PgBouncer has another server
# connection
$checks{found} = sub {
    my ($name) = @_;

    listening();

    is_deeply(statements(), [201, 200, 200, 201, 200],
              "$name - through the pooler: every statement runs");

    my %before = map { $_ => 1 } server_pids();

    pgbouncer_admin($PGB, 'RECONNECT pooled');

    my ($new) = wait_until(10, 0.05, sub {
        api('GET', '/api/v1/sessions?limit=1');
        my @now = server_pids();
        return @now && !grep { $before{$_} } @now;
    });
    ok($new, "$name - PgBouncer has a new server connection");

    is_deeply(statements(), [201, 200, 200, 201, 200],
              "$name - on the new one too");

    like(error_log(), qr/\[warn\] .*session db: a connection pooler stands/,
         "$name - the pooler is said");

    # sessionctl migrate's advisory lock would not hold through it
    my ($code, undef, $err) =
        Session::_run(Session::sessionctl_path(), '-d', $PGB->{conninfo},
                      'migrate');
    is($code, 1, "$name - sessionctl migrate through the pooler: refused");
    like($err, qr/^sessionctl: migrate needs a connection to PostgreSQL itself/,
         "$name - its message");

    # the other commands, in transactions of their own, go through it
    my @ctl = (Session::sessionctl_path(), '--json', '-d', $PGB->{conninfo});
    my $acct = "$TAG-through";
    ($code, my $out) = Session::_run(@ctl, 'account', 'create', $acct,
                                     '--plan', 'pro');
    is($code, 0, "$name - sessionctl account create through the pooler");
    my $id = eval { Session::decode_json($out)->{account_id} } // 'none';
    for my $cmd (qw(suspend activate)) {
        ($code) = Session::_run(@ctl, 'account', $cmd, $id);
        is($code, 0, "$name - sessionctl account $cmd through the pooler");
    }
    is(psql("SELECT status FROM accounts WHERE id = '$id'"), 'active',
       "$name - the account is active again");
    unlike(error_log(), qr/preparing the statements failed/,
           "$name - nothing was prepared");
};

# the LISTEN connection is the one of session_db_listen
$checks{listen_own} = sub {
    my ($name) = @_;

    my ($ok) = wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE application_name = 't049-listen'}) == 1;
    });
    ok($ok, "$name - LISTEN runs on the connection of session_db_listen");
};

# session_db_pooler session through PgBouncer in session mode, LISTEN
# too: the statements are prepared, nothing is said, a poll is woken
$checks{session_mode} = sub {
    my ($name) = @_;

    listening();

    is_deeply(statements(), [201, 200, 200, 201, 200],
              "$name - every statement runs");

    like(error_log(), qr/session db: the statements are prepared/,
         "$name - the statements are prepared");
    unlike(error_log(), qr/connection pooler/, "$name - nothing is said");

    my $r = api('POST', '/api/v1/sessions', { delivery_mode => 'long_poll' });
    my $sid = $r->{json}{id} // 'none';
    my $poll = send_get("/api/v1/sessions/$sid/poll?timeout=30", $F->{key});

    my ($waits) = wait_until(10, 0.02, sub {
        status_json()->{long_poll}{waiting} > 0;
    });
    ok($waits, "$name - the poll waits");

    api('POST', "/api/v1/sessions/$sid/images", $PNG,
        { 'Content-Type' => 'image/png' });

    my $a = answer($poll, 30);
    is($a->{status}, 200, "$name - the poll: 200");
    ok($a->{elapsed} < 10, "$name - woken through LISTEN, at once")
        or diag("after $a->{elapsed} s");
};

# session_db_pooler transaction straight to PostgreSQL: unnamed
# statements, no startup options
$checks{direct} = sub {
    my ($name) = @_;

    listening();

    is_deeply(statements(), [201, 200, 200, 201, 200],
              "$name - every statement runs");

    unlike(error_log(), qr/connection pooler/, "$name - no pooler found");
    unlike(error_log(), qr/the statements are prepared/,
           "$name - nothing is prepared");
};


# --- blocks -------------------------------------------------------------

master_on();
workers(1);
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=100000 list=100000 other=100000;
    }
    location = /ping {
        return 200 "pong\n";
    }
    location = /status {
        session_status;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('config', $CONFIG) unless defined $block->config;

    if (!defined $block->request && !defined $block->must_die) {
        $block->set_value('request', "GET /ping\n");
        $block->set_value('response_body', "pong\n");
    }

    run_action($block, \%actions);
    check_init($block, \%checks);

    # "--- wait_log: REGEX": the block's request once the error log has
    # a line that matches (the connections log as they connect)
    $block->set_value('init', 'main::wait_log($block)')
        if defined $block->wait_log;
});


sub wait_log {
    my ($block) = @_;

    (my $re = $block->wait_log) =~ s/^\s+|\s+$//g;

    my ($ok) = wait_until(10, 0.05, sub { error_log() =~ /\Q$re\E/ });
    Test::More::ok($ok, $block->name . " - logged: $re");
}


run_tests();

__DATA__

=== TEST 1: session_db_pooler transaction without session_db_listen
--- http_config
    session_db $TEST_NGINX_PGB_CONF;
    session_db_pooler transaction;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_db_pooler transaction" in \S+nginx\.conf:\d+ needs "session_db_listen": LISTEN does not pass through a pooler in transaction mode/



=== TEST 2: session_db_pooler transaction with options in session_db
--- http_config
    session_db $TEST_NGINX_PGB_OPTIONS_CONF;
    session_db_pooler transaction;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_db" has options=, which a pooler does not pass on to PostgreSQL \("session_db_pooler" in \S+nginx\.conf:\d+\): set them on the role or the database/



=== TEST 3: session_db_pooler with an unknown value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_pooler statement;
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid value "statement" in "session_db_pooler", expected "off", "session" or "transaction" in \S+nginx\.conf:\d+/



=== TEST 4: session_db_pooler twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_pooler off;
    session_db_pooler off;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_db_pooler" directive is duplicate in \S+nginx\.conf:\d+/



=== TEST 5: session_db_listen twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_db_listen" directive is duplicate in \S+nginx\.conf:\d+/



=== TEST 6: session_db_listen that libpq cannot parse
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_listen "host='nowhere";
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid connection string in "session_db_listen": .* in \S+nginx\.conf:\d+/



=== TEST 7: session_db_listen alone: the LISTEN connection uses it
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_listen "$TEST_NGINX_SESSION_DB application_name=t049-listen";
--- check: listen_own
--- no_error_log
[error]



=== TEST 8: the default mode through PgBouncer: the pooler is found
--- http_config
    session_db $TEST_NGINX_PGB_CONF;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 1;
    session_auth_cache_ttl 1h;
--- action: fresh
--- check: found
--- no_error_log
[error]



=== TEST 9: LISTEN through the pooler, in the default mode: a warning
--- http_config
    session_db $TEST_NGINX_PGB_CONF;
--- wait_log: session listen: the LISTEN connection goes through
--- error_log eval
qr/\[warn\] .*session listen: the LISTEN connection goes through a connection pooler .* point "session_db" at PostgreSQL itself/
--- no_error_log
[error]



=== TEST 10: session_db_listen through a pooler that pools transactions
--- http_config
    session_db $TEST_NGINX_PGB_CONF;
    session_db_pooler transaction;
    session_db_listen $TEST_NGINX_PGB_CONF;
--- wait_log: session listen: the LISTEN connection goes through
--- error_log eval
qr/\[error\] .*session listen: the LISTEN connection goes through a connection pooler .* point "session_db_listen" at PostgreSQL itself/



=== TEST 11: no statement_timeout behind the pooler: a warning
--- http_config
    session_db $TEST_NGINX_PGB_CONF;
    session_db_pooler transaction;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 3s;
--- wait_log: statement_timeout is
--- error_log eval
qr/\[warn\] .*session db: statement_timeout is 0 ms on the server behind the pooler \(0: none\), a statement given up on after session_db_timeout \(3000 ms\) runs on/
--- no_error_log
[error]



=== TEST 12: session_db_pooler transaction straight to PostgreSQL
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_pooler transaction;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 1h;
--- check: direct
--- no_error_log
[error]



=== TEST 13: session_db_pooler session through PgBouncer in session mode
--- http_config
    session_db $TEST_NGINX_PGB_SESSION_CONF;
    session_db_pooler session;
    session_db_connections 1;
    session_auth_cache_ttl 1h;
--- check: session_mode
--- no_error_log
[error]
