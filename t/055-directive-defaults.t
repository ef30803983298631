# The defaults of docs/api.md §8 (and docs/directives.md) that no other
# script checked with the directive left out of nginx.conf:
#
#   - session_auth_fail_limit 100: from one address, 100 unknown keys
#     answer 401 and the 101st 429 (§10.12); behind that address a key
#     found valid before is served, also once its cached answer is stale,
#     and a valid key never seen is refused (decisions.md (ua));
#   - session_db_connections 4: each worker has four pool connections to
#     PostgreSQL, and keeps four when more requests wait than four can
#     carry, beside the node's one LISTEN connection;
#   - session_webhook_timeout 5 s: a receiver that accepts and never
#     answers has its connection closed 5 s after the attempt connected;
#   - session_webhook_max_attempts 8: an event to a receiver that always
#     answers 500 is attempted eight times, then marked failed (the
#     retries made due at once by due_now of t/lib/Webhook.pm, as t/015
#     does: the schedule itself, 1 s x 5^(n-1), would take hours);
#   - session_poll_timeout 30 s: a poll without ?timeout= waits 30000 ms,
#     as the module's debug line "session poll: waiting on SID for N ms"
#     says (a poll of 30 s would be too slow for make test).
#
# Every block leaves the directive it checks out of its configuration.
# Blocks that say "--- check: NAME" run NAME from --- init against the
# nginx Test::Nginx started for the block; waits are bounded polls of
# the logs or the database, never fixed sleeps.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT error_body api_request send_get answer
                    check_init listening long_poll_session error_log
                    fresh_window);
use Webhook;

our $TAG = sprintf 't055-%d-%d', $$, time;

our (%KEY, $PROJECT);

{
    my $f = fixture(plan => 'pro', name => "$TAG-main");
    $KEY{MAIN} = $f->{key};
    $PROJECT = $f->{project_id};

    # keys of their own for the failure limit: SEEN is found valid before
    # the failures, UNSEEN never before them
    for my $name (qw(SEEN UNSEEN)) {
        $KEY{$name} = sessionctl_ok('key', 'create', $PROJECT)->{key};
    }
}

our $DIR = File::Temp->newdir('t055-XXXXXX', TMPDIR => 1);
our $LOG = "$DIR/requests.log";
our $CONN_LOG = "$DIR/connections.log";

our ($HOOK) = receiver_start($LOG, conn_log => $CONN_LOG);

master_on();
workers(2);
no_shuffle();
no_long_string();

our $INVALID = error_body(401, 'Unauthorized', 'API key is invalid');
our $TOO_MANY = error_body(429, 'Too Many Requests',
                           'too many failed authentication attempts');


# --- helpers -------------------------------------------------------------

sub api { return api_request(@_[0 .. 4], { timeout => 30 }) }

# a webhook session of the MAIN project aimed at URL, completed: its
# session.completed event is queued; returns its id
sub completed_to {
    my ($url) = @_;

    my $r = api('POST', '/api/v1/sessions', $KEY{MAIN},
                { delivery_mode => 'webhook', webhook_url => $url });
    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    my $sid = $r->{json}{id};

    $r = api('POST', "/api/v1/sessions/$sid/complete", $KEY{MAIN});
    die "complete: $r->{status} $r->{content}\n" unless $r->{status} == 200;

    return $sid;
}

# the outbox row of a session's event, as a hash
sub outbox_row {
    my ($sid) = @_;

    my ($json) = psql("SELECT json_build_object('attempts', attempts,"
                      . " 'delivered', delivered_at IS NOT NULL,"
                      . " 'failed', failed_at IS NOT NULL,"
                      . " 'claimed', claimed_until IS NOT NULL,"
                      . " 'last_error', last_error)"
                      . ' FROM webhook_outbox WHERE session_id = '
                      . sql_quote($sid));

    return defined $json ? decode_json($json) : {};
}

# the socket inodes a process holds
sub socket_inodes {
    my ($pid) = @_;

    my %ino;

    opendir my $dh, "/proc/$pid/fd" or return {};

    for my $fd (readdir $dh) {
        my $l = readlink "/proc/$pid/fd/$fd" // next;
        $ino{$1} = 1 if $l =~ /^socket:\[(\d+)\]$/;
    }

    closedir $dh;

    return \%ino;
}

# the module's backends in pg_stat_activity, by application_name, each
# as [its client port, whether it waits for a lock]
sub backends {
    my ($app) = @_;

    return map { [split /\|/] }
           psql(q{SELECT client_port || '|'}
                . q{ || (wait_event_type IS NOT DISTINCT FROM 'Lock')::int}
                . q{ FROM pg_stat_activity WHERE application_name = }
                . sql_quote($app));
}

# BACKENDS (of backends()) by the nginx process whose TCP connection has
# the backend's client port: { pid => [backend, ...] }, the backends of
# no worker under "none"
sub by_process {
    my ($pids, @backends) = @_;

    # local port => socket inode, of every TCP socket of the machine
    my %inode;

    for my $file ('/proc/net/tcp', '/proc/net/tcp6') {
        open my $fh, '<', $file or next;

        while (<$fh>) {
            my @f = split ' ';
            next unless @f > 9 && $f[1] =~ /:([0-9A-F]{4})$/;
            $inode{hex $1}{ $f[9] } = 1;
        }

        close $fh;
    }

    my %sockets = map { $_ => socket_inodes($_) } @$pids;
    my %by = map { $_ => [] } @$pids, 'none';

    for my $b (@backends) {
        my ($owner) = grep {
            my $pid = $_;
            grep { $sockets{$pid}{$_} } keys %{ $inode{ $b->[0] } || {} };
        } @$pids;

        push @{ $by{ $owner // 'none' } }, $b;
    }

    return \%by;
}


# --- the checks -----------------------------------------------------------

my %checks;

# session_auth_fail_limit's default, 100 a minute: the 101st unknown key
# from one address is refused; a key found valid before is still served
# behind it, fresh from the cache or looked up again once its cached
# answer is stale (session_auth_cache_ttl, 5 s); a valid key the node
# has not found valid is refused like an unknown one
$checks{fail_limit} = sub {
    my ($name) = @_;

    fresh_window(20);

    listening();

    my $path = '/api/v1/sessions?limit=1';

    my $seen = api('GET', $path, $KEY{SEEN});
    my $t_seen = Time::HiRes::time();
    is($seen->{status}, 200, "$name - SEEN found valid first");

    my (@status, %body);

    for (1 .. 100) {
        my $r = api('GET', $path, random_key('sess'));
        push @status, $r->{status};
        $body{ $r->{content} // '' }++;
    }

    is(scalar(grep { $_ == 401 } @status), 100,
       "$name - 100 unknown keys: 401 each");
    is_deeply([keys %body], [$INVALID], "$name - API key is invalid");

    my $t0 = time;
    my $r = api('GET', $path, random_key('sess'));

    is($r->{status}, 429, "$name - the 101st unknown key: 429");
    is($r->{content}, $TOO_MANY, "$name - the message");
    is($r->{headers}{'content-type'}, 'application/json', "$name - JSON");

    my $ra = $r->{headers}{'retry-after'} // '';
    my $left = 60 - $t0 % 60;
    ok($ra =~ /^\d+$/ && $ra >= 1 && $ra <= 60 && abs($ra - $left) <= 2,
       "$name - Retry-After $ra: the seconds to the minute's end");
    ok(!grep({ /^x-ratelimit/ } keys %{ $r->{headers} }),
       "$name - no X-RateLimit-* headers");

    $r = api('GET', $path, $KEY{UNSEEN});
    is($r->{status}, 429, "$name - a valid key not found valid before: 429");

    $r = api('GET', $path, $KEY{SEEN});
    is($r->{status}, 200, "$name - SEEN behind the address: 200");
    like($r->{headers}{'x-ratelimit-limit'} // '', qr/^\d+$/,
         "$name - SEEN: rate limited as usual");

    # once SEEN's cached answer is stale (5 s after it was found valid),
    # it is looked up again and served; the address is still over
    wait_until(10, 0.1, sub {
        Time::HiRes::time() - $t_seen > 5.5
    });

    $r = api('GET', $path, $KEY{SEEN});
    is($r->{status}, 200, "$name - SEEN, its cached answer stale: 200");

    $r = api('GET', $path, $KEY{UNSEEN});
    is($r->{status}, 429, "$name - UNSEEN still refused: the same minute");

    is(int(time / 60), int($t0 / 60), "$name - all in one UTC minute");
};

# session_db_connections' default, 4: every worker has four pool
# connections; requests that wait for the database (a lock on sessions)
# take them one by one, and a worker's fifth waits for one of them
# rather than opening another
$checks{db_connections} = sub {
    my ($name) = @_;

    listening();

    my @workers = worker_pids();
    is(scalar @workers, 2, "$name - two workers");

    # each worker opens its pool when it starts
    my ($opened) = wait_until(10, 0.05, sub {
        my $by = by_process(\@workers, backends('nginx session pool'));
        !grep { @{ $by->{$_} } != 4 } @workers;
    });

    my $by = by_process(\@workers, backends('nginx session pool'));

    for my $pid (@workers) {
        is(scalar @{ $by->{$pid} }, 4, "$name - worker $pid: 4 connections");
    }

    is(scalar @{ $by->{none} }, 0, "$name - no pool connection of no worker");
    is(scalar(backends('nginx session listen')), 1,
       "$name - one LISTEN connection for the node");

    my $sid = long_poll_session($KEY{MAIN});
    my $path = "/api/v1/sessions/$sid";

    # the key in the auth cache: the requests below read sessions only
    is(api('GET', $path, $KEY{MAIN})->{status}, 200, "$name - the session");

    my $lock = psql_begin('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE',
                          q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
                          . q{ ON c.oid = l.relation WHERE c.relname =}
                          . q{ 'sessions' AND l.mode = 'AccessExclusiveLock'}
                          . q{ AND l.granted});

    my (@req, $busy, $full);

    my $ok = eval {
        # busy: a worker's connections that wait for the lock
        my $count = sub {
            my $b = by_process(\@workers, backends('nginx session pool'));
            return { map { $_ => scalar grep { $_->[1] } @{ $b->{$_} } }
                     @workers };
        };

        # one request at a time, each sent once the one before waits on
        # a connection (or had none to wait on), until a worker has
        # every connection waiting
        for (1 .. 12) {
            my $before = 0;
            $before += $_ for values %{ $count->() };

            push @req, send_get($path, $KEY{MAIN});

            wait_until(0.3, 0.02, sub {
                $busy = $count->();
                my $n = 0;
                $n += $_ for values %$busy;
                $n > $before;
            });

            ($full) = grep { $busy->{$_} >= 4 } @workers;
            last if $full;
        }

        Test::More::note("$name: connections waiting, by worker: "
                         . join ', ', map { "$_ $busy->{$_}" } @workers);
        ok($full, "$name - a worker with its four connections waiting");

        # four more at once: no worker opens a fifth
        push @req, send_get($path, $KEY{MAIN}) for 1 .. 4;

        my ($over) = wait_until(0.5, 0.05, sub {
            my $b = by_process(\@workers, backends('nginx session pool'));
            grep { @{ $b->{$_} } > 4 } @workers, 'none';
        });

        ok(!$over, "$name - no worker has more than four connections");

        $busy = $count->();
        ok(!grep({ $busy->{$_} > 4 } @workers),
           "$name - no more than four waiting per worker");

        1;
    };

    psql_end($lock, 'ROLLBACK');
    die $@ unless $ok;

    my @st = map { answer($_, 20)->{status} } @req;
    is(scalar(grep { $_ != 200 } @st), 0,
       "$name - " . @st . " requests answered 200 once the lock is gone");

    $by = by_process(\@workers, backends('nginx session pool'));

    for my $pid (@workers) {
        is(scalar @{ $by->{$pid} }, 4,
           "$name - worker $pid: still 4 connections");
    }
};

# session_webhook_timeout's default, 5 s: the receiver holds the request;
# the attempt's connection is closed by nginx 5 s after it connected
$checks{webhook_timeout} = sub {
    my ($name) = @_;

    my $p = "/hold/$TAG-timeout";
    my $sid = completed_to("http://127.0.0.1:$HOOK$p");

    my ($req) = wait_until(10, 0.05, sub {
        (receiver_requests($LOG, $p))[0];
    });
    ok($req, "$name - the request arrived");
    $req ||= { conn => 0 };
    is($req->{nth}, 1, "$name - the first request on its connection");

    my ($c) = wait_until(15, 0.05, sub {
        my $c = receiver_connections($CONN_LOG, $req->{conn});
        defined $c->{close} ? $c : undef;
    });

    ok($c, "$name - the connection was closed");
    $c ||= { accept => 0, close => 99 };

    my $held = $c->{close} - ($c->{accept} // 0);
    Test::More::note(sprintf '%s: connect to close %.3f s', $name, $held);
    is($c->{by}, 'peer', "$name - closed by nginx");
    ok($held >= 4.5 && $held < 5.7,
       sprintf('%s - after about 5 s (%.3f s)', $name, $held));

    my ($row) = wait_until(5, 0.05, sub {
        my $r = outbox_row($sid);
        defined $r->{last_error} && !$r->{claimed} ? $r : undef;
    });
    $row ||= {};

    is($row->{last_error}, 'timed out after 5000 ms waiting for the answer',
       "$name - last_error");
    ok(!$row->{delivered} && !$row->{failed}, "$name - to be retried");
};

# session_webhook_max_attempts' default, 8: a receiver that always
# answers 500 gets the event eight times; then it is failed.  Each retry
# is made due at once (due_now), the schedule's spacing left to t/015.
$checks{max_attempts} = sub {
    my ($name) = @_;

    my $p = "/status/500/$TAG-attempts";
    my $sid = completed_to("http://127.0.0.1:$HOOK$p");
    my $where = 'session_id = ' . sql_quote($sid);
    my $row = {};

    for my $n (1 .. 12) {
        # attempt n over: failed, or waiting for its retry
        ($row) = wait_until(10, 0.02, sub {
            my $r = outbox_row($sid);
            ($r->{failed} || ($r->{attempts} // 0) >= $n && !$r->{claimed}
             && defined $r->{last_error}) ? $r : undef;
        });

        last if !$row || $row->{failed};

        due_now($where);
    }

    $row ||= {};

    ok($row->{failed}, "$name - the event failed");
    is($row->{attempts}, 8, "$name - after 8 attempts");
    is($row->{last_error}, 'answered 500', "$name - last_error");
    ok(!$row->{delivered} && !$row->{claimed}, "$name - not delivered,"
       . ' no lease');
    is(scalar(receiver_requests($LOG, $p)), 8, "$name - 8 requests");
};

# session_poll_timeout's default, 30 s: a poll without ?timeout= waits
# 30000 ms (the module's debug line); the client leaves before
$checks{poll_timeout} = sub {
    my ($name) = @_;

    my $sid = long_poll_session($KEY{MAIN});
    my $p = send_get("/api/v1/sessions/$sid/poll", $KEY{MAIN});

    my ($ms) = wait_until(10, 0.05, sub {
        error_log() =~ /session poll: waiting on \Q$sid\E for (\d+) ms/
            ? $1 : undef;
    });

    is($ms, 30000, "$name - the poll waits 30000 ms");
    is(answer($p, 0.2)->{status}, 0, "$name - no answer meanwhile");
};


our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config',
                      "    session_db \$TEST_NGINX_SESSION_DB_CONF;\n")
        unless defined $block->http_config;
    $block->set_value('config', $CONFIG) unless defined $block->config;

    # the block's own request: with --- api_key's key (default MAIN)
    (my $who = $block->api_key // 'MAIN') =~ s/\s+//g;
    $block->set_value('more_headers', "Authorization: Bearer $KEY{$who}\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: session_auth_fail_limit's default: 100 failures, the 101st refused
--- check: fail_limit
--- api_key: SEEN
--- debug_log: the "session listen: listening" lines
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 30
--- no_error_log
[error]
[alert]



=== TEST 2: session_db_connections' default: four a worker, never more
--- check: db_connections
--- debug_log: the "session listen: listening" lines
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 30
--- no_error_log
[error]
[alert]



=== TEST 3: session_webhook_timeout's default: the receiver is given up on after 5 s
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
--- check: webhook_timeout
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 30
--- no_error_log
[error]
[alert]



=== TEST 4: session_webhook_max_attempts' default: 8 attempts, then failed
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
--- check: max_attempts
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 30
--- error_log eval
qr/\[warn\] .*session webhook: event \S+ to "[^"]+" failed after 8 attempts: answered 500/
--- no_error_log
[error]
[alert]



=== TEST 5: session_poll_timeout's default: a poll waits 30000 ms
--- check: poll_timeout
--- debug_log: the "session poll: waiting" lines
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
[alert]
