# Database connections that the module must not lose for long.
#
# A pool query whose request goes away while the query runs is detached:
# its answer, if one comes, is dropped.  Its deadline stays with its
# connection (docs/decisions.md (kd)): when the server gives no answer by
# then, the connection is closed and opened again, as for a query that
# timed out, instead of staying busy until TCP gives up.
#
# An upload that finds every upload connection closed, waiting out its
# backoff, waits for the one that lost a connection that was up and
# tries again within session_db_timeout, or makes one whose last attempt
# was refused try now, instead of 503 at once (decision (ke)).
#
# The database is behind a relay that holds, for as long as the script
# runs, the Bind of a statement that names an id of the hold list (the
# server then waits for the rest of the message and never answers), as a
# server that hangs or a link that black-holes would.  A 2 s
# session_db_timeout:
#
#   - one pool connection, a download whose next slice is held, its
#     client gone meanwhile (nginx sees it when writing the slice
#     before): the connection is closed at the held slice's deadline,
#     logged, and a request after that is answered 200.  Before (kd) the
#     connection stayed busy for good and every later request got 503
#     after 2 s;
#   - one pool connection, an API request whose statement is held, its
#     client gone after 0.5 s: nginx does not watch the client of a
#     request that waits for the database (ngx_http_block_reading), so
#     the request stays until its query times out at 2 s and the query's
#     own timer closes the connection; a request after that is answered
#     200 (with or without (kd): this path was bounded already);
#   - one upload connection, an upload held until it times out, one
#     waiting behind it and one sent once the first has its 503, during
#     the connection's backoff: both 201 (503 at once before (ke));
#   - one upload connection, the relay cut: an upload gets 503 at once
#     while the database is away; the relay back, an upload sent before
#     the connection's next attempt is due gets 201 (503 before (ke));
#   - one pool connection (no hold, table locks instead, a 3 s
#     session_db_timeout), a download's slice, a small download and a
#     new key's lookup in one pipeline, the first's client gone: the
#     slice answered before its deadline, the lookup after it but
#     before its own: 200 for both others, the connection kept (before,
#     503 at the slice's deadline).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Spec ();
use IO::Socket::INET ();
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json repo_root);
use Images qw(png_bytes image_rows read_some);
use SessionTest qw(:DEFAULT api_request check_init relay_db relay_start
                    relay_stop wait_until key_headers send_get send_request
                    answer error_body error_log listening);

our (%KEY, $RELAY_PORT, $RELAY_PID, $FILTER, %STMT);

our $TAG = sprintf 't058-%d-%d', $$, time;

# The hold list, read by the relay at each read of a client: lines of
# "NAME SKIP ID", a Bind of the prepared statement NAME (ngx_session_<n>,
# ngx_upload_<n>) whose bytes hold ID is held after the first SKIP of
# them on its connection
our $HOLD = File::Spec->catfile(File::Spec->tmpdir, "t058-hold-$$");

# the pool's statements' numbers, from their enum: ngx_session_<n> is the
# n-th
sub stmt_numbers {
    my $file = repo_root() . '/src/db/ngx_http_session_sql.h';
    open my $fh, '<', $file or die "$file: $!";
    my $text = do { local $/; <$fh> };
    my ($list) = $text =~ /typedef enum \{(.*?)\} ngx_http_session_stmt_e/s
        or die "no ngx_http_session_stmt_e in $file\n";
    my @names = $list =~ /NGX_HTTP_SESSION_STMT_(\w+)/g;
    my %n;
    @n{@names} = 0 .. $#names;
    return %n;
}

%STMT = stmt_numbers();

sub hold {
    my (@lines) = @_;
    open my $fh, '>', "$HOLD.tmp" or die "$HOLD.tmp: $!";
    print $fh map { "$_\n" } @lines;
    close $fh;
    rename "$HOLD.tmp", $HOLD or die "$HOLD: $!";
}

hold();

END { unlink $HOLD }

{
    my $bind = qr/B[\s\S]{4}\0(ngx_[a-z]+_\d+)\0/;

    $FILTER = sub {
        my ($buf, $state) = @_;

        return ($buf, 0) unless $buf =~ $bind;

        open my $fh, '<', $HOLD or return ($buf, 0);
        my @rules = map { [split ' '] } grep { /\S/ } <$fh>;
        close $fh;

        while ($buf =~ /$bind/g) {
            my $stmt = $1;

            for my $rule (@rules) {
                my ($name, $skip, $id) = @$rule;
                next unless $stmt eq $name && index($buf, $id) >= 0;
                return ($buf, 3600) if $state->{"$name $id"}++ >= $skip;
            }
        }

        return ($buf, 0);
    };

    ($RELAY_PORT, $RELAY_PID) = relay_db($FILTER);
}

{
    my $f = fixture(plan => 'pro', name => "$TAG-MAIN");
    $KEY{MAIN} = $f->{key};
}

my $GONE = qr/no answer to the query of a request that went away within 2000 ms/;


# --- helpers ------------------------------------------------------------

sub api {
    return api_request(@_[0 .. 4], { timeout => 10, raw => 1 });
}

sub create_session {
    my $r = api('POST', '/api/v1/sessions', $KEY{MAIN},
                encode_json({ delivery_mode => 'long_poll' }),
                { 'Content-Type' => 'application/json' });
    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}

sub get_session {
    my ($sid) = @_;
    return api('GET', "/api/v1/sessions/$sid", $KEY{MAIN});
}

# over session_body_buffer_size (128k) and the chunk: a streamed upload,
# on an upload connection
my $IMG = png_bytes(200 * 1024);

sub upload {
    my ($sid) = @_;
    return api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN}, $IMG,
               { 'Content-Type' => 'image/png' });
}

sub send_upload {
    my ($sid) = @_;
    return send_request('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN},
                        { 'Content-Type' => 'image/png' }, $IMG);
}

# a request answered 200 within SECS, asked again while 503
sub answered_200 {
    my ($sid, $secs) = @_;
    return (wait_until($secs, 0.1, sub {
        get_session($sid)->{status} == 200
    }))[0];
}

# the server of http_config: sndbuf=8k
sub port {
    return $Test::Nginx::Util::RandPorts->{TEST_NGINX_RAND_PORT_1}
        // die "no TEST_NGINX_RAND_PORT_1\n";
}

# a download on a connection with small buffers (the server's sndbuf=8k
# and the client's receive buffer): nginx keeps most of a slice of 2m
# until the client reads it
sub slow_get {
    my ($path) = @_;

    my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096))
        or die "setsockopt: $!";
    $s->connect(Socket::pack_sockaddr_in(port(),
                                         Socket::inet_aton('127.0.0.1')))
        or die "connect: $!";

    print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n"
             . "Authorization: Bearer $KEY{MAIN}\r\n"
             . "Connection: close\r\n\r\n";

    return $s;
}


# --- the checks ---------------------------------------------------------

my %checks;

# a download's next slice held, its client gone: the connection is
# closed at the slice's deadline and the pool serves again
$checks{download} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $RELAY_PORT;

        my $sid = create_session();

        # 16k, then slices of 2m less 16k: the third slice is held
        my $img = png_bytes(3 * 1024 * 1024);
        my $r = api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN},
                    $img, { 'Content-Type' => 'image/png' });
        die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;
        my $iid = $r->{json}{id};

        hold("ngx_session_$STMT{IMAGE_SLICE} 1 $iid");

        my $t0 = Time::HiRes::time();
        my $d = slow_get("/api/v1/sessions/$sid/images/$iid/content");

        # the headers, the first slice and some of the second: the
        # third is asked for once the second is being written
        my $got = read_some($d, 64 * 1024, 5);
        like($got, qr{^HTTP/1\.1 200 }, "$name - the download began");

        Time::HiRes::sleep(0.3);
        close $d;

        my ($seen) = wait_until(5, 0.05, sub {
            SessionTest::error_log_count(
                qr/writev\(\) failed/) > 0
        });
        ok($seen, "$name - nginx saw the client go");
        ok(Time::HiRes::time() - $t0 < 1.5,
           "$name - before the slice's deadline");

        ok(answered_200($sid, 8), "$name - a request after the deadline:"
                                  . ' 200');
        my $after = Time::HiRes::time() - $t0;
        ok($after < 3.5, "$name - soon after the deadline (2 s) and the"
                         . sprintf(' backoff (%.2f s)', $after));

        is(SessionTest::error_log_count($GONE), 1,
           "$name - the connection closed at the deadline, logged");

        hold();

        $r = api('GET', "/api/v1/sessions/$sid/images/$iid/content",
                 $KEY{MAIN});
        ok($r->{status} == 200 && $r->{content} eq $img,
           "$name - a whole download afterwards");
    }
};

# an API request's statement held, its client gone: nginx does not
# notice, the query times out and its own timer closes the connection
$checks{request} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $RELAY_PORT;

        my $held = create_session();
        my $other = create_session();

        hold("ngx_session_$STMT{SESSION_GET} 0 $held");

        my $timed_out = SessionTest::error_log_count(
                                          qr/session db: query timed out/);

        my $p = send_get("/api/v1/sessions/$held", $KEY{MAIN});
        Time::HiRes::sleep(0.5);
        close $p->{sock};

        my ($out, $when) = wait_until(5, 0.05, sub {
            SessionTest::error_log_count(qr/session db: query timed out/)
            > $timed_out
        });
        ok($out, "$name - the query timed out");
        ok($when > 1.2, sprintf("$name - at its timeout, the request"
                                . ' stayed (%.2f s after the close)',
                                $when));

        ok(answered_200($other, 3), "$name - a request afterwards: 200");

        is(SessionTest::error_log_count($GONE), 0,
           "$name - no query of a request that went away");

        hold();
    }
};

# an upload held until it times out, one waiting behind it, one sent
# during the backoff that follows: both wait for the reconnect
$checks{upload_timeout} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $RELAY_PORT;

        my ($held, $behind, $during) = map { create_session() } 1 .. 3;

        hold("ngx_upload_1 0 $held");

        my $first = send_upload($held);
        Time::HiRes::sleep(1.5);
        my $second = send_upload($behind);

        my $a = answer($first, 10);
        my $r = upload($during);
        my $b = answer($second, 10);

        hold();

        is($a->{status}, 503, "$name - the held upload: 503");
        ok($a->{elapsed} >= 1.8 && $a->{elapsed} < 3,
           sprintf("$name - at session_db_timeout (%.2f s)",
                   $a->{elapsed}));

        is($b->{status}, 201, "$name - the one waiting behind it: 201")
            or diag("$b->{status} " . ($b->{content} // ''));
        is($r->{status}, 201, "$name - one sent during the backoff: 201")
            or diag("$r->{status} $r->{content}");
        ok($r->{elapsed} < 1, sprintf("$name - soon (%.2f s)",
                                      $r->{elapsed}));

        is(image_rows($held), 0, "$name - nothing of the held one");
        is(image_rows($behind) + image_rows($during), 2,
           "$name - both others stored");
    }
};

# the relay cut: 503 at once; back: the next upload tries at once
$checks{upload_back} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $RELAY_PORT;

        my $sid = create_session();

        # the upload connection opens, the key is in the auth cache
        my $r = upload($sid);
        is($r->{status}, 201, "$name - an upload: 201");

        relay_stop($RELAY_PID);

        # a few attempts refused: the backoff grows past 400 ms
        Time::HiRes::sleep(1.2);

        $r = upload($sid);
        is($r->{status}, 503, "$name - the database away: 503");
        is($r->{content}, error_body(503, 'Service Unavailable',
                                     'database unavailable'),
           "$name - the JSON error");
        ok($r->{elapsed} < 1, sprintf("$name - at once (%.2f s)",
                                      $r->{elapsed}));

        # the next early try is allowed 250 ms after the last one
        Time::HiRes::sleep(0.3);

        (undef, $RELAY_PID) = relay_start($RELAY_PORT, $FILTER);

        $r = upload($sid);
        is($r->{status}, 201, "$name - back: the next upload 201")
            or diag("$r->{status} $r->{content}");
        ok($r->{elapsed} < 1, sprintf("$name - at once (%.2f s)",
                                      $r->{elapsed}));

        is(image_rows($sid), 2, "$name - two images stored");
    }
};


# psql holding an ACCESS EXCLUSIVE lock on $table in an open transaction
# until psql_end(); returns once the lock is granted
sub lock_table {
    my ($table) = @_;

    return psql_begin("LOCK TABLE $table IN ACCESS EXCLUSIVE MODE",
                      q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
                      . q{ ON c.oid = l.relation WHERE c.relname = '} . $table
                      . q{' AND l.mode = 'AccessExclusiveLock'}
                      . q{ AND l.granted});
}

# how many statements of the pool wait for a lock
sub lock_waits {
    return psql(q{SELECT count(*) FROM pg_stat_activity}
                . q{ WHERE wait_event_type = 'Lock'}
                . q{ AND application_name = 'nginx session pool'});
}

# how many lines of the error log match $re, from byte $mark on
sub log_since {
    my ($mark, $re) = @_;
    my @n = substr(error_log(), $mark) =~ /$re/g;
    return scalar @n;
}

# A download's slice (A), a small image's download (F) and another
# request's key lookup (B) go in one pipeline behind a session read; A's
# client goes, A is answered in time, B is slow but within its own
# deadline: 200 for F and B, and the connection stays (decision (kd)).
# PostgreSQL sends what a pipeline's reads return when its 8k output
# buffer is full, or at the Sync: F's 12k push out the end of A's answer
# while B waits for its lock.
$checks{pipeline} = sub {
    my ($name) = @_;

    listening();

    my $sid = create_session();
    my $other = create_session();

    my $small = png_bytes(12 * 1024);
    my $r = api('POST', "/api/v1/sessions/$other/images", $KEY{MAIN},
                $small, { 'Content-Type' => 'image/png' });
    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    my $small_id = $r->{json}{id};

    # 16k, then slices of 2m less 16k, 2m and 1m: the fourth is asked for
    # once the second is written
    my $img = png_bytes(5 * 1024 * 1024);
    $r = api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN},
                $img, { 'Content-Type' => 'image/png' });
    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    my $iid = $r->{json}{id};

    # a key the node has not looked up
    my $fresh = fixture(plan => 'pro', name => "$TAG-FRESH")->{key};

    my $mark = length error_log();
    my $slice = qr/session image: slice of \d+ bytes/;

    # the headers, the first slice and some of the second; the third is
    # asked for and answered meanwhile
    my $d = slow_get("/api/v1/sessions/$sid/images/$iid/content");
    my $got = read_some($d, 64 * 1024, 5);
    like($got, qr{^HTTP/1\.1 200 }, "$name - the download began");
    ok((wait_until(5, 0.02, sub { log_since($mark, $slice) >= 2 }))[0],
       "$name - the third slice asked for");

    # the connection held by a session read that waits for a lock
    my $sessions = lock_table('sessions');
    my $holder = send_get("/api/v1/sessions/$other", $KEY{MAIN});
    ok((wait_until(5, 0.02, sub { lock_waits() >= 1 }))[0],
       "$name - a session read holds the connection");

    my $images = lock_table('images');
    my $keys = lock_table('api_keys');

    # the rest of the second slice: the fourth is asked for (A), and
    # waits for the connection
    $got = read_some($d, 2 * 1024 * 1024, 10);
    ok((wait_until(5, 0.02, sub { log_since($mark, $slice) >= 3 }))[0],
       "$name - the fourth slice asked for");
    my $t0 = Time::HiRes::time();

    # a second later, F and the lookup of a new key (B) wait too: their
    # deadlines are a second after A's
    Time::HiRes::sleep(1);
    my $f = send_get("/api/v1/sessions/$other/images/$small_id/content",
                     $KEY{MAIN});
    Time::HiRes::sleep(0.1);
    my $b = send_get('/api/v1/sessions?limit=1', $fresh);
    Time::HiRes::sleep(0.1);

    # the session read answered: A, F and B go in one pipeline, A waits
    # for the images, F and B behind it
    psql_end($sessions);
    my $holder_r = answer($holder, 5);
    is($holder_r->{status}, 200, "$name - the session read: 200");

    ok((wait_until(5, 0.02, sub {
        log_since($mark, qr/session db: 3 reads in one pipeline/) >= 1
        && lock_waits() >= 1
    }))[0], "$name - the slice, the download and the key lookup in one"
            . ' pipeline');

    # A's client goes: A is detached, its deadline on the connection
    my $resets = SessionTest::error_log_count(qr/writev\(\) failed/);
    close $d;
    ok((wait_until(5, 0.02, sub {
        SessionTest::error_log_count(qr/writev\(\) failed/) > $resets
    }))[0], "$name - nginx saw the client go");

    # A answered before its deadline (3 s after $t0), B after it, before
    # its own
    Time::HiRes::sleep(1.8 - (Time::HiRes::time() - $t0));
    psql_end($images);
    Time::HiRes::sleep(3.5 - (Time::HiRes::time() - $t0));
    psql_end($keys);

    my $ra = answer($b, 5);
    my $rf = answer($f, 5);
    is($ra->{status}, 200, "$name - the key lookup answered after the"
                           . " slice's deadline: 200")
        or diag("$ra->{status} " . ($ra->{content} // ''));
    ok($ra->{t1} - $t0 < 4, sprintf("$name - before its own deadline"
                                    . ' (%.2f s)', $ra->{t1} - $t0));
    ok($rf->{status} == 200 && $rf->{content} eq $small,
       "$name - the small download: 200, whole")
        or diag("$rf->{status}");

    is(log_since($mark, qr/no answer to the query of a request that went/),
       0, "$name - the connection was not closed");
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    $block->set_value('http_config', <<'EOF') unless defined $block->http_config;
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_connections 1;
    session_db_timeout 2s;
    session_image_chunk_size 1m;

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;

        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
    }
EOF

    $block->set_value('config', <<'EOF') unless defined $block->config;
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
EOF

    key_headers($block, \%KEY, 'MAIN', 'image/png');

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a download's slice held, its client gone: closed at the deadline
--- check: download
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
no answer to the query of a request that went away within 2000 ms
--- no_error_log
[alert]



=== TEST 2: an API request held, its client gone: it stays, its query times out
--- check: request
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
session db: query timed out
--- no_error_log
[alert]



=== TEST 3: an upload times out: the next ones wait for the reconnect, 201
--- check: upload_timeout
--- http_config
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_timeout 2s;
    session_image_chunk_size 4k;
    session_image_upload_connections 1;
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
upload timed out waiting for the database
--- no_error_log
[alert]



=== TEST 4: the database back during the backoff: the next upload tries at once
--- check: upload_back
--- http_config
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_connections 1;
    session_db_timeout 2s;
    session_auth_cache_ttl 60s;
    session_image_chunk_size 4k;
    session_image_upload_connections 1;
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
session db: an upload waits, connecting before the backoff is over
--- no_error_log
[alert]



=== TEST 5: a pipeline's read that went away answered in time: the others keep their deadlines
--- debug_log: the "session db: 3 reads in one pipeline" lines
--- check: pipeline
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 1;
    session_db_timeout 3s;
    session_auth_cache_ttl 1h;
    session_expiry_sweep_interval 30s;
    session_image_chunk_size 1m;

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;

        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
    }
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
no answer to the query of a request that went away
[alert]
