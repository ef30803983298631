# The database goes away (docs/api.md §2): 503 "database unavailable"
# with Retry-After: 1 within session_db_timeout, nginx keeps serving
# everything else, and the module reconnects by itself once the database is
# back, without a reload.  Then a query that hangs (a table lock) and a
# "database" that accepts connections but never answers.
#
# This script stops and starts THE database of TEST_NGINX_SESSION_DB, so it
# must not run in parallel with other scripts (prove without -j).  The
# commands come from
#
#     TEST_SESSION_PG_STOP / TEST_SESSION_PG_START    (run with sh -c)
#
# else, inside pg_virtualenv, from pg_ctlcluster on the cluster that listens
# on the conninfo's port (pg_lsclusters), "regress" failing that.  Without
# either the script is skipped.  Whatever happens, a database this script
# stopped is started again when it ends.

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use Session;
use SessionTest qw(:DEFAULT run_action add_no_error_log);

my $DB = $ENV{TEST_NGINX_SESSION_DB};

sub db_ready {
    return system('pg_isready', '-q', '-t', '1', '-d', $DB) == 0;
}

sub sh {
    my ($cmd) = @_;
    my $out = `$cmd 2>&1`;
    return ($? == 0, $out);
}

# The stop and start commands: (stop, start, where they come from) or ().
sub pg_commands {
    if ($ENV{TEST_SESSION_PG_STOP} && $ENV{TEST_SESSION_PG_START}) {
        return ($ENV{TEST_SESSION_PG_STOP}, $ENV{TEST_SESSION_PG_START},
                'TEST_SESSION_PG_STOP/START');
    }

    my ($have) = sh('command -v pg_ctlcluster && command -v pg_lsclusters');
    return () unless $have;

    my $port = conninfo_port($DB);
    my ($ver, $name);

    for (split /\n/, `pg_lsclusters -h 2>/dev/null`) {
        my @f = split ' ';
        next unless @f >= 3 && $f[0] =~ /^\d+(?:\.\d+)?$/;
        if ($f[2] eq $port) {
            ($ver, $name) = @f[0, 1];
            last;
        }
    }

    # pg_virtualenv: its cluster is <version>/regress
    if (!defined $ver && $ENV{PG_CLUSTER_CONF_ROOT}) {
        $name = 'regress';
        $ver = $ENV{PGVERSION};

        if (!$ver) {
            my $v = eval { psql('SHOW server_version_num') };
            $ver = int($v / 10000) if $v && $v =~ /^\d+$/;
        }
    }

    return () unless defined $ver && defined $name;

    return ("pg_ctlcluster $ver $name stop -m fast",
            "pg_ctlcluster $ver $name start",
            "pg_ctlcluster $ver $name");
}

our ($STOP, $START, $HOW) = pg_commands();

# (Test::Nginx has planned already: skip_all through the builder)
if (!defined $STOP) {
    Test::More->builder->skip_all('cannot stop and start the test database:'
        . ' set TEST_SESSION_PG_STOP and TEST_SESSION_PG_START, or run'
        . ' inside pg_virtualenv (pg_ctlcluster)');
}

if (!db_ready()) {
    Test::More->builder->skip_all('the database of TEST_NGINX_SESSION_DB'
                                  . ' is not up');
}

our $KEY = fixture(plan => 'pro')->{key};
our $HEX = substr $KEY, 5;

my $stopped;

sub start_db {
    my ($ok, $out) = sh($START);

    # pg_ctlcluster start returns before the server accepts connections
    my ($up) = wait_until(30, 0.1, \&db_ready);
    undef $stopped if $up;

    return ($up, $out);
}

END {
    local $?;    # keep the script's exit status

    if ($stopped) {
        my ($up, $out) = start_db();
        warn "004-db-outage.t: could not start the database again"
             . " ($START): $out\n" unless $up;
    }
}

my ($HANG_PORT) = hang_listener();
$ENV{TEST_NGINX_HANG_PORT} = $HANG_PORT;

our $UNAVAILABLE = '{"statusCode": 503, "error": "Service Unavailable", '
                   . '"message": "database unavailable"}';
our $NOT_FOUND = '{"statusCode": 404, "error": "Not Found", '
                 . '"message": "route not found"}';

my %auth = (Authorization => "Bearer $KEY");

# The lock that makes the auth query hang: a psql holding
# ACCESS EXCLUSIVE on api_keys in an open transaction.
my $locker;

sub take_lock {
    open $locker, '|-', 'psql', '-X', '-q', '-d', $DB
        or die "psql: $!";
    my $old = select $locker;
    $| = 1;
    select $old;

    print $locker "BEGIN;\nLOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE;\n";

    my ($held) = wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_locks WHERE granted}
             . q{ AND mode = 'AccessExclusiveLock'}
             . q{ AND relation = 'api_keys'::regclass}) > 0
    });

    return $held;
}

sub release_lock {
    return unless $locker;
    print $locker "ROLLBACK;\n\\q\n";
    close $locker;
    undef $locker;
}

END {
    local $?;
    release_lock();
}

# A block's "--- action" runs before its request, against the nginx the
# previous block left running (a block without --- config keeps it).
my %actions = (

    # stop the database; the next API request fails within the timeout
    stop => sub {
        my ($name) = @_;

        $stopped = 1;
        my ($ok, $out) = sh($STOP);
        ok($ok, "$name - database stopped ($HOW)") or diag($out);

        my ($down, $waited) = wait_until(15, 0.1, sub { !db_ready() });
        ok($down, "$name - the database is down");

        my $res = http_request('GET', '/api/v1/nope', \%auth, 10);
        is($res->{status}, 503, "$name - 503 while the database is down");
        cmp_ok($res->{elapsed}, '<', 3,
               "$name - answered within session_db_timeout (2s) + 1s");
        Test::More::note(sprintf '%s: down after %.2f s, 503 after %.3f s',
                         $name, $waited, $res->{elapsed});
    },

    # start the database; poll (bounded) until the key works again
    start => sub {
        my ($name) = @_;

        my ($up, $out) = start_db();
        ok($up, "$name - database started ($HOW)") or diag($out);

        my $t0 = time;
        my ($res) = wait_until(10, 0.1, sub {
            my $r = http_request('GET', '/api/v1/nope', \%auth, 5);
            return $r->{status} == 404 ? $r : undef;
        });
        ok($res, "$name - the key authenticates again within 10 s"
                 . " of the database accepting connections, no reload");
        Test::More::note(sprintf '%s: 404 again %.2f s after the database'
                         . ' accepted connections', $name, time - $t0);
    },

    # the auth query hangs on a lock: 503 within 1 s + slack; /ping is
    # served at once meanwhile
    lock => sub {
        my ($name) = @_;

        ok(take_lock(), "$name - api_keys is locked");
        hanging_request_check($name);
    },

    unlock => sub {
        my ($name) = @_;

        release_lock();

        my ($res) = wait_until(10, 0.1, sub {
            my $r = http_request('GET', '/api/v1/nope', \%auth, 5);
            return $r->{status} == 404 ? $r : undef;
        });
        ok($res, "$name - the key authenticates again once the lock is gone");
    },

    hang => sub {
        my ($name) = @_;
        hanging_request_check($name);
    },
);

# An API request that waits on the database, and while it waits a request
# to /ping: the latter answers at once, the former 503 within the timeout
# (session_db_timeout 1s, plus 1s of slack).
sub hanging_request_check {
    my ($name) = @_;

    my $port = $Test::Nginx::Util::ServerPort;

    my $t0 = time;
    my $api = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port)
        or die "connect: $!";
    print $api "GET /api/v1/nope HTTP/1.1\r\nHost: localhost\r\n"
               . "Authorization: Bearer $KEY\r\nConnection: close\r\n\r\n";

    sleep 0.1;

    my $ping = http_request('GET', '/ping', {}, 5);
    is($ping->{status}, 200, "$name - /ping answers while the API waits");
    cmp_ok($ping->{elapsed}, '<', 0.5, "$name - /ping answers at once");

    $api->timeout(5);
    local $/;
    my $raw = <$api>;
    my $elapsed = time - $t0;
    close $api;

    like($raw // '', qr{^HTTP/1\.1 503 Service Unavailable\r\n},
         "$name - the API request gets 503");
    like($raw // '', qr{\r\nRetry-After: 1\r\n}i, "$name - Retry-After: 1");
    cmp_ok($elapsed, '<', 2, "$name - within session_db_timeout + 1s")
        or diag($raw);
    Test::More::note(sprintf "%s: /ping %.3f s, API 503 after %.3f s", $name,
                 $ping->{elapsed}, $elapsed);
}

no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    run_action($block, \%actions);

    if (defined $block->api_request && !defined $block->more_headers) {
        $block->set_value('more_headers', "Authorization: Bearer $KEY\n");
    }

    # no key material in the log, whatever happened
    add_no_error_log($block, qr/\Q$HEX\E/i);
});

run_tests();

__DATA__

=== TEST 1: the database is up: the key authenticates (no auth cache)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 2s;
    session_auth_cache_ttl 0;
--- config
    location /api/ {
        session_api;
    }
    location = /ping {
        return 200 "pong\n";
    }
--- api_request
--- request
GET /api/v1/nope
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 2: the database is stopped: 503 database unavailable, Retry-After: 1
--- action: stop
--- api_request
--- request
GET /api/v1/nope
--- timeout: 3
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 503 Service Unavailable\r\n
--- response_body eval
$::UNAVAILABLE
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: the database is down: nginx keeps serving, the API keeps answering 503
--- api_request
--- pipelined_requests eval
["GET /ping", "GET /api/v1/sessions", "GET /ping"]
--- timeout: 3
--- error_code eval
[200, 503, 200]
--- response_body eval
["pong\n", $::UNAVAILABLE, "pong\n"]
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: a malformed key needs no database: still 401 while it is down
--- request
GET /api/v1/nope
--- more_headers
Authorization: Bearer sess_nope
--- error_code: 401
--- response_body chomp
{"statusCode": 401, "error": "Unauthorized", "message": "API key is malformed"}
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: the database is back: the module reconnects by itself
--- action: start
--- api_request
--- request
GET /api/v1/nope
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: a query that hangs on a lock: 503 within session_db_timeout
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 1s;
    session_auth_cache_ttl 0;
--- config
    location /api/ {
        session_api;
    }
    location = /ping {
        return 200 "pong\n";
    }
--- api_request
--- request
GET /api/v1/nope
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 7: (the lock is taken) 503 JSON again, still within the timeout
--- action: lock
--- api_request
--- request
GET /api/v1/nope
--- timeout: 2.5
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- response_body eval
$::UNAVAILABLE
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: the lock is released: the key authenticates again, no reload
--- action: unlock
--- api_request
--- pipelined_requests eval
["GET /api/v1/nope", "GET /ping"]
--- error_code eval
[404, 200]
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 9: a database that accepts connections but never answers
--- http_config
    session_db "host=127.0.0.1 port=$TEST_NGINX_HANG_PORT dbname=s user=s";
    session_db_timeout 1s;
    session_auth_cache_ttl 0;
--- config
    location /api/ {
        session_api;
    }
    location = /ping {
        return 200 "pong\n";
    }
--- api_request
--- request
GET /api/v1/nope
--- timeout: 2.5
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/json
--- response_body eval
$::UNAVAILABLE
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10: (never answers) /ping answers at once while an API request waits
--- action: hang
--- api_request
--- pipelined_requests eval
["GET /api/v1/nope", "GET /ping"]
--- timeout: 3
--- error_code eval
[503, 200]
--- response_body eval
[$::UNAVAILABLE, "pong\n"]
--- no_error_log
[alert]
[crit]
[emerg]
