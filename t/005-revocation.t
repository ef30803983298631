# Revocation (docs/api.md §8 and §9): auth answers are cached in shared
# memory for session_auth_cache_ttl (default 5s), yet "sessionctl key
# delete" and "account suspend|activate" take effect at once, by
# notification: here within one second, on every worker.
#
# nginx runs with a master and two workers.  The requests that drive the
# checks go, from Perl, to a second server that listens with "reuseport",
# so that the kernel spreads new connections over both workers, and that
# names the worker in X-Worker: the checks see the answers of both.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET;
use Time::HiRes qw(time);
use Session;
use SessionTest qw(:DEFAULT run_action);

our $DEL = fixture(plan => 'pro');       # its key is deleted
our $SUSP = fixture(plan => 'pro');      # its account suspended, activated
our $RAW = fixture(plan => 'pro');       # deleted in SQL, no notification

$ENV{TEST_NGINX_REUSEPORT_PORT} = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1, ReuseAddr => 1)
        or die "listen: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

my $BASE = "http://127.0.0.1:$ENV{TEST_NGINX_REUSEPORT_PORT}";

our $NOT_FOUND = '{"statusCode": 404, "error": "Not Found", '
                 . '"message": "route not found"}';
our $INVALID = '{"statusCode": 401, "error": "Unauthorized", '
               . '"message": "API key is invalid"}';
our $SUSPENDED = '{"statusCode": 403, "error": "Forbidden", '
                 . '"message": "account is suspended"}';

master_on();
workers(2);
no_shuffle();
no_long_string();

sub ask {
    my ($key) = @_;
    return http_request('GET', "$BASE/api/v1/nope",
                        { Authorization => "Bearer $key" }, 5);
}

# N requests, each on its own connection: are they all STATUS, and which
# workers answered?
sub all_answer {
    my ($name, $key, $status, $n) = @_;

    my (%workers, @bad);

    for (1 .. $n) {
        my $res = ask($key);
        $workers{ $res->{headers}{'x-worker'} // '?' }++;
        push @bad, $res->{status} if $res->{status} != $status;
    }

    ok(!@bad, "$name - $n more requests all answer $status")
        or diag("got: @bad");

    return scalar keys %workers;
}

# Until both workers have answered STATUS (at most 50 connections).
sub both_workers_answer {
    my ($name, $key, $status) = @_;

    my (%workers, @bad);

    for (1 .. 50) {
        my $res = ask($key);
        push @bad, $res->{status} if $res->{status} != $status;
        $workers{ $res->{headers}{'x-worker'} // '?' }++;
        last if keys %workers >= 2;
    }

    is(scalar(keys %workers), 2,
       "$name - both workers answered (reuseport spreads the connections)");
    ok(!@bad, "$name - every answer was $status") or diag("got: @bad");
}

# Runs CMD (sessionctl arguments), then polls every 50 ms, for at most
# one second, until KEY gets STATUS; checks that it did, within 1 s.
sub revoke_and_wait {
    my ($name, $key, $status, @cmd) = @_;

    # a cached answer to be revoked: the key is known to both workers
    my $before = $status == 404 ? 403 : 404;
    both_workers_answer("$name (before)", $key, $before);

    sessionctl_ok(@cmd);
    my $t0 = time;

    my ($res) = wait_until(1, 0.05, sub {
        my $r = ask($key);
        return $r->{status} == $status ? $r : undef;
    });
    my $elapsed = time - $t0;

    ok($res, "$name - answers $status after sessionctl @cmd[0, 1]");
    cmp_ok($elapsed, '<', 1, "$name - within one second");
    Test::More::note(sprintf '%s: %d after %.3f s', $name, $status,
                     $elapsed);

    # and no worker keeps the old answer
    both_workers_answer("$name (after)", $key, $status);
    all_answer($name, $key, $status, 20);
}

my %actions = (

    delete_key => sub {
        revoke_and_wait($_[0], $DEL->{key}, 401,
                        'key', 'delete', $DEL->{key_id});
    },

    suspend => sub {
        revoke_and_wait($_[0], $SUSP->{key}, 403,
                        'account', 'suspend', $SUSP->{account_id});
    },

    activate => sub {
        revoke_and_wait($_[0], $SUSP->{key}, 404,
                        'account', 'activate', $SUSP->{account_id});
    },

    # Without a notification a change is seen only once the cached answer
    # expires: the answers above came from the notification, not from a
    # missing cache.  (session_auth_cache_ttl 2s here.)
    sql_delete => sub {
        my ($name) = @_;

        # the node's LISTEN connection (worker 0's) empties the shared
        # auth cache once it is up: the nginx of TEST 6 is fresh, so wait
        # for it, or the flush could fall between the two requests below
        need_debug_log('the "session listen: listening" lines') or return;

        my ($listening) = wait_until(10, 0.05, sub {
            open my $fh, '<', $Test::Nginx::Util::ErrLogFile or return 0;
            local $/;
            my $log = <$fh> // '';
            return $log =~ /session listen: listening/;
        });
        ok($listening, "$name - the node listens");

        my $t0 = time;
        is(ask($RAW->{key})->{status}, 404, "$name - the key works");

        psql('UPDATE api_keys SET deleted_at = now() WHERE id = '
             . sql_quote($RAW->{key_id}));

        my $res = ask($RAW->{key});
        if (time - $t0 < 1.5) {
            is($res->{status}, 404,
               "$name - the cached answer is reused within the TTL");
        }

        my ($gone) = wait_until(4, 0.05, sub { ask($RAW->{key})->{status}
                                               == 401 });
        my $elapsed = time - $t0;
        ok($gone, "$name - refused once the cached answer expired");
        cmp_ok($elapsed, '<', 2 + 1, "$name - within the TTL (2s) + 1s");
        Test::More::note(sprintf '%s: 401 after %.3f s', $name, $elapsed);
    },
);

add_block_preprocessor(sub {
    my $block = shift;

    run_action($block, \%actions);
});

run_tests();

__DATA__

=== TEST 1: two workers, default cache TTL: each key authenticates
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;

    server {
        listen 127.0.0.1:$TEST_NGINX_REUSEPORT_PORT reuseport;
        location /api/ {
            session_api;
            add_header X-Worker $pid always;
        }
    }
--- config
    location /api/ {
        session_api;
    }
--- more_headers eval
"Authorization: Bearer $::DEL->{key}"
--- pipelined_requests eval
["GET /api/v1/nope", "GET /api/v1/nope"]
--- error_code eval
[404, 404]
--- response_body eval
[$::NOT_FOUND, $::NOT_FOUND]
--- no_error_log
[error]



=== TEST 2: key delete: refused on every worker within one second
--- action: delete_key
--- more_headers eval
"Authorization: Bearer $::DEL->{key}"
--- request
GET /api/v1/nope
--- error_code: 401
--- response_body eval
$::INVALID
--- no_error_log
[error]



=== TEST 3: account suspend: 403 on every worker within one second
--- action: suspend
--- more_headers eval
"Authorization: Bearer $::SUSP->{key}"
--- request
GET /api/v1/nope
--- error_code: 403
--- response_body eval
$::SUSPENDED
--- no_error_log
[error]



=== TEST 4: account activate: accepted again on every worker within one second
--- action: activate
--- more_headers eval
"Authorization: Bearer $::SUSP->{key}"
--- request
GET /api/v1/nope
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 5: the deleted key stays refused (no stale positive answer came back)
--- more_headers eval
"Authorization: Bearer $::DEL->{key}"
--- pipelined_requests eval
["GET /api/v1/nope", "GET /api/v1/sessions"]
--- error_code eval
[401, 401]
--- response_body eval
[$::INVALID, $::INVALID]
--- no_error_log
[error]



=== TEST 6: (control) cache TTL 2s, fresh nginx
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 2s;

    server {
        listen 127.0.0.1:$TEST_NGINX_REUSEPORT_PORT reuseport;
        location /api/ {
            session_api;
            add_header X-Worker $pid always;
        }
    }
--- config
    location /api/ {
        session_api;
    }
--- request
GET /api/v1/nope
--- error_code: 401
--- no_error_log
[error]



=== TEST 7: (control) a deletion made in SQL, without a notification, waits for the TTL
--- debug_log: the "session listen: listening" lines
--- action: sql_delete
--- more_headers eval
"Authorization: Bearer $::RAW->{key}"
--- request
GET /api/v1/nope
--- error_code: 401
--- response_body eval
$::INVALID
--- no_error_log
[error]
