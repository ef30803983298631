# Reads that wait for a database connection go to PostgreSQL together
# (docs/decisions.md (na)): pipeline mode, one Sync for up to
# session_db_batch of them.  Each request still gets its own answer; a
# read that fails does not take the others down with it; a request that
# goes away while its read waits or runs harms nobody.
#
# The one pool connection (session_db_connections 1) is held by a read
# that waits for a table lock taken by psql, so that the requests sent
# meanwhile queue up; session_status tells when they all wait
# (database.waiting) and how they were sent (database.batches, .batched).
# The keys stay in the auth cache for the whole block
# (session_auth_cache_ttl 1h), so that no key lookup joins the queue.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Handle ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request send_get answer status_json check_init
                   db_http_config worker_pids listening error_log
                   pipelined_ok);

our $TAG = sprintf 't026-%d-%d', $$, time;

our (%KEY, %PROJECT);

for my $name (qw(MAIN OTHER)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$name");
    $KEY{$name} = $f->{key};
    $PROJECT{$name} = $f->{project_id};
}

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request, 30 s
sub api { return api_request(@_[0 .. 4], { timeout => 30 }) }

sub create {
    my ($key) = @_;

    my $r = api('POST', '/api/v1/sessions', $key // $KEY{MAIN},
                { delivery_mode => 'long_poll' });

    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json}{id};
}

sub upload {
    my ($sid) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN}, $PNG,
                { 'Content-Type' => 'image/png' });

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json}{id};
}

# the database part of GET /status
sub database { return status_json()->{database} }

# until database.waiting is at least $n: the requests sent wait for the
# connection (the worker's own statements, the webhook queue's
# measurement about every second, may wait beside them: never reads)
sub waiting {
    my ($n) = @_;

    my ($db) = wait_until(10, 0.02, sub {
        my $d = database();
        $d->{waiting} >= $n ? $d : undef;
    });

    return $db;
}

# until nobody waits any more
sub drained {
    return (wait_until(10, 0.02, sub { database()->{waiting} == 0 }))[0];
}

# until nginx has read the requests for @paths (its debug log says so):
# the handler that queues a request's statement runs in the same turn of
# the loop
sub read_by_nginx {
    my (@paths) = @_;

    need_debug_log('nginx\'s "http request line" lines') or return 0;

    return (wait_until(10, 0.02, sub {
        open my $fh, '<', $Test::Nginx::Util::ErrLogFile or return 0;
        local $/;
        my $log = <$fh> // '';
        for my $path (@paths) {
            return 0 if index($log, qq{http request line: "GET $path HTTP/1.1"})
                        < 0;
        }
        return 1;
    }))[0];
}

# psql holding "LOCK TABLE <table> IN ACCESS EXCLUSIVE MODE" in an open
# transaction until unlock(); returns once the lock is granted
sub lock_table {
    my ($table) = @_;

    return psql_begin("LOCK TABLE $table IN ACCESS EXCLUSIVE MODE",
                      q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
                      . q{ ON c.oid = l.relation WHERE c.relname = '} . $table
                      . q{' AND l.mode = 'AccessExclusiveLock'}
                      . q{ AND l.granted});
}

sub unlock { psql_end($_[0]) }

# a statement of the module waits for a lock (the connection is held)
sub blocked {
    my $sql = q{SELECT count(*) FROM pg_stat_activity}
              . q{ WHERE wait_event_type = 'Lock'}
              . q{ AND application_name = 'nginx session pool'};

    return (wait_until(10, 0.02, sub { psql($sql) >= 1 }))[0];
}

# the connection's read that holds it: a GET that waits for $table's lock
sub hold_connection {
    my ($sid) = @_;

    my $lock = lock_table('sessions');
    my $holder = send_get("/api/v1/sessions/$sid", $KEY{MAIN});

    die "the holder does not wait for the lock\n" unless blocked();

    return ($lock, $holder);
}


# --- the checks -----------------------------------------------------------

my %checks;

# 12 reads of four kinds (and of another project's session, of a missing
# one) wait for the connection and go in one pipeline; each gets its own
# answer
$checks{batch} = sub {
    my ($name) = @_;

    # the LISTEN connection up first: when it comes up it empties the
    # auth cache, and a key lookup would join the reads counted here
    listening();

    my @sid = map { create() } 1 .. 4;
    my $other = create($KEY{OTHER});
    my $iid = upload($sid[0]);
    my $missing = '00000000-0000-4000-8000-000000000000';

    # both keys known to the auth cache: the only statements are the GETs
    api('GET', "/api/v1/sessions/$sid[0]", $KEY{$_}) for qw(MAIN OTHER);

    my ($lock, $holder) = hold_connection($sid[0]);
    my $before = database();
    my $mark = length error_log();

    # the statement that waits is shown as itself: each statement is
    # prepared with a text of its own (one "PREPARE a AS ...; PREPARE b
    # AS ..." text showed every statement as the first, the key lookup)
    my $running = psql(q{SELECT query FROM pg_stat_activity}
                       . q{ WHERE wait_event_type = 'Lock'}
                       . q{ AND application_name = 'nginx session pool'});
    my $get = qr/\ASELECT s\.id, s\.project_id, .*/s;
    like($running, qr/$get FROM sessions s WHERE s\.id = \$1::uuid\z/,
         "$name - pg_stat_activity shows the session read that waits");

    my @want = (
        (map { ["/api/v1/sessions/$_", 200, $_] } @sid),
        ["/api/v1/sessions/$other", 403, 'session belongs to another project'],
        ["/api/v1/sessions/$missing", 404, 'session not found'],
        ["/api/v1/sessions/$sid[0]/images", 200, $iid],
        ["/api/v1/sessions/$sid[0]/images/$iid", 200, $iid],
        ["/api/v1/sessions/$sid[0]/images/$missing", 404, 'image not found'],
        ["/api/v1/sessions?limit=4", 200, $sid[3]],
        ["/api/v1/sessions/$sid[1]/poll?timeout=0", 200, $sid[1]],
        ["/api/v1/sessions/$sid[0]/images/$iid/content", 200, $PNG],
    );

    my @req = map { send_get($_->[0], $KEY{MAIN}) } @want;
    my $n = @req;

    ok(read_by_nginx(map { $_->[0] } @want) && waiting($n),
       "$name - the $n reads wait for the connection");

    unlock($lock);

    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    for my $i (0 .. $#want) {
        my ($path, $status, $what) = @{ $want[$i] };
        my $r = answer($req[$i], 20);

        is($r->{status}, $status, "$name - $path: $status");

        my $got = $path =~ m{/content$} ? $r->{content}
                : $status != 200        ? $r->{json}{message}
                : $path =~ m{/poll}     ? $r->{json}{session}{id}
                : ref $r->{json}{data}  ? $r->{json}{data}[0]{id}
                :                         $r->{json}{id};

        is($got, $what, "$name - $path: its own answer");
    }

    my $after = database();

    pipelined_ok($before, $after, 1, $n, $mark, $name);
    ok(drained(), "$name - nobody waits after");
    is($after->{failures} - $before->{failures}, 0, "$name - no failure");
};

# the first read of a pipeline fails (lock_timeout): it alone answers 500,
# the others, which PostgreSQL skipped, run again and answer 200
$checks{aborted} = sub {
    my ($name) = @_;

    listening();

    my @sid = map { create() } 1 .. 5;
    my $iid = upload($sid[0]);

    api('GET', "/api/v1/sessions/$sid[0]", $KEY{MAIN});

    my $images = lock_table('images');
    my ($lock, $holder) = hold_connection($sid[0]);
    my $before = database();
    my $mark = length error_log();

    # first in line: a read of the locked images table
    my $bad_path = "/api/v1/sessions/$sid[0]/images/$iid";
    my $bad = send_get($bad_path, $KEY{MAIN});
    ok(read_by_nginx($bad_path), "$name - the image read waits");

    my @req = map { send_get("/api/v1/sessions/$_", $KEY{MAIN}) } @sid;
    ok(read_by_nginx(map { "/api/v1/sessions/$_" } @sid) && waiting(6),
       "$name - then five session reads");

    unlock($lock);

    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    my $r = answer($bad, 20);
    is($r->{status}, 500, "$name - the read past lock_timeout: 500");
    is($r->{json}{message}, 'internal server error', "$name - its message");

    for my $i (0 .. $#sid) {
        my $a = answer($req[$i], 20);
        is($a->{status}, 200, "$name - session read $i: 200");
        is($a->{json}{id}, $sid[$i], "$name - session read $i: its session");
    }

    unlock($images);

    my $after = database();

    # two pipelines: the first's six reads, then the five it skipped again
    pipelined_ok($before, $after, 2, 6 + 5, $mark, $name);
    ok(drained(), "$name - nobody waits after");
};

# requests that go away while their reads wait: the others are answered,
# and the connection serves the next request
$checks{gone} = sub {
    my ($name) = @_;

    my @sid = map { create() } 1 .. 6;

    api('GET', "/api/v1/sessions/$sid[0]", $KEY{MAIN});

    my ($lock, $holder) = hold_connection($sid[0]);

    my @req = map { send_get("/api/v1/sessions/$_", $KEY{MAIN}) } @sid;
    ok(read_by_nginx(map { "/api/v1/sessions/$_" } @sid) && waiting(6),
       "$name - six reads wait");

    # three of the clients go away (nginx learns it when it writes their
    # answers: a GET's connection is not read while its statement waits)
    close $req[$_]{sock} for 0, 2, 4;

    unlock($lock);

    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    for my $i (1, 3, 5) {
        my $r = answer($req[$i], 20);
        is($r->{status}, 200, "$name - read $i: 200");
        is($r->{json}{id}, $sid[$i], "$name - read $i: its session");
    }

    my $r = api('GET', "/api/v1/sessions/$sid[2]", $KEY{MAIN});
    is($r->{status}, 200, "$name - the next request: 200");
};

# the connection is lost while a pipeline runs: each of its reads answers
# 503 at once, and the worker connects again by itself
$checks{lost} = sub {
    my ($name) = @_;

    listening();

    my @sid = map { create() } 1 .. 5;
    my @iid = map { upload($_) } @sid;

    api('GET', "/api/v1/sessions/$sid[0]", $KEY{MAIN});

    my $images = lock_table('images');
    my ($lock, $holder) = hold_connection($sid[0]);
    my $before = database();
    my $mark = length error_log();

    my @path = map { "/api/v1/sessions/$sid[$_]/images/$iid[$_]" } 0 .. 4;
    my @req = map { send_get($_, $KEY{MAIN}) } @path;
    ok(read_by_nginx(@path) && waiting(5), "$name - five image reads wait");

    unlock($lock);
    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    # the pipeline's first read waits for the images lock
    ok(blocked(), "$name - the pipeline waits for the lock");
    # the five went in one pipeline
    pipelined_ok($before, database(), 1, 5, $mark, $name);

    psql(q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity}
         . q{ WHERE application_name = 'nginx session pool'});

    for my $i (0 .. 4) {
        my $r = answer($req[$i], 20);
        is($r->{status}, 503, "$name - read $i: 503");
        is($r->{json}{message}, 'database unavailable',
           "$name - read $i: message");
    }

    unlock($images);

    my ($ok) = wait_until(10, 0.05, sub {
        api('GET', "/api/v1/sessions/$sid[1]/images/$iid[1]", $KEY{MAIN})
            ->{status} == 200;
    });
    ok($ok, "$name - connected again: 200");
    ok(drained(), "$name - nobody waits after");
};

# the backend process of the worker's one pool connection
sub pool_pid {
    return psql(q{SELECT coalesce(max(pid), 0) FROM pg_stat_activity}
                . q{ WHERE application_name = 'nginx session pool'});
}

# A pool connection that carried 4 MB or more would be replaced once its
# statement is over (libpq keeps its buffers at their largest).  Images
# no longer go through it whole (docs/decisions.md, "Images"): a 5 MB
# upload streams on an upload connection of its own, a download comes a
# slice of session_image_chunk_size at a time, alone or in a pipeline,
# with every answer whole, and the pool connection stays the same
$checks{recycle} = sub {
    my ($name) = @_;

    my $big = "\x89PNG\r\n\x1a\n"
              . join('', map { pack 'N', ($_ * 2654435761) % 4294967296 }
                             1 .. 5 * 1024 * 1024 / 4);
    my @sid = map { create() } 1 .. 3;

    my $pid = pool_pid();
    ok($pid, "$name - the pool connection is there");

    my $r = api('POST', "/api/v1/sessions/$sid[0]/images", $KEY{MAIN}, $big,
                { 'Content-Type' => 'image/png' });
    is($r->{status}, 201, "$name - 5 MB upload: 201");
    my $iid = $r->{json}{id};

    is(pool_pid(), $pid, "$name - the upload did not go through the pool");
    ok(psql(q{SELECT count(*) FROM pg_stat_activity}
            . q{ WHERE application_name = 'nginx session upload'}) > 0,
       "$name - but on an upload connection");

    my $path = "/api/v1/sessions/$sid[0]/images/$iid/content";

    $r = api('GET', $path, $KEY{MAIN});
    is($r->{status}, 200, "$name - 5 MB download: 200");
    ok($r->{content} eq $big, "$name - 5 MB download: the bytes");

    is(pool_pid(), $pid, "$name - kept after the download");

    # small reads leave it alone
    for my $sid (@sid) {
        is(api('GET', "/api/v1/sessions/$sid", $KEY{MAIN})->{status}, 200,
           "$name - a small read: 200");
    }
    is(pool_pid(), $pid, "$name - small reads: the same connection");

    # the download in a pipeline with two small reads
    my ($lock, $holder) = hold_connection($sid[1]);
    my @paths = ($path, map { "/api/v1/sessions/$_" } @sid[1, 2]);
    my @req = map { send_get($_, $KEY{MAIN}) } @paths;
    ok(read_by_nginx(@paths) && waiting(3), "$name - three reads wait");

    my $before = database();
    my $mark = length error_log();
    unlock($lock);
    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    my $a = answer($req[0], 30);
    is($a->{status}, 200, "$name - in a pipeline: the download's 200");
    ok(($a->{content} // '') eq $big, "$name - in a pipeline: the bytes");
    for my $i (1, 2) {
        is(answer($req[$i], 20)->{json}{id}, $sid[$i],
           "$name - in a pipeline: read $i");
    }
    # they went in one pipeline
    pipelined_ok($before, database(), 1, 3, $mark, $name);

    is(pool_pid(), $pid, "$name - kept after the pipeline");
};

# a connection that has served one request and is kept alive: the next
# request written on it is read by nginx as soon as its worker looks
sub kept_alive {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp')
        or die "kept_alive: connect: $!";

    print $s "GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n";

    my $buf = '';
    my $sel = IO::Select->new($s);

    while ($sel->can_read(10)) {
        sysread($s, my $chunk, 65536) or last;
        $buf .= $chunk;

        last if $buf =~ /\r\nTransfer-Encoding: chunked\r\n/i
                && $buf =~ /\r\n0\r\n\r\n\z/;

        my $end = index $buf, "\r\n\r\n";

        if ($end >= 0 && $buf =~ /\r\nContent-Length: (\d+)\r\n/i) {
            last if length($buf) >= $end + 4 + $1;
        }
    }

    die "kept_alive: no answer\n" unless $buf =~ m{^HTTP/1\.1 200};

    return $s;
}

# the kernel's state letter of process $pid ("T" when stopped)
sub proc_state {
    my ($pid) = @_;

    open my $fh, '<', "/proc/$pid/stat" or return '';
    my $stat = <$fh> // '';

    return $stat =~ /\) (\S)/ ? $1 : '';
}

# Reads that reach the worker in the same turn of its event loop go in
# one pipeline even though connections are free: the worker is stopped
# while six requests are written on six kept-alive connections, so that
# it finds all six when it goes on
$checks{turn} = sub {
    my ($name) = @_;

    listening();

    my @sid = map { create() } 1 .. 6;

    api('GET', "/api/v1/sessions/$sid[0]", $KEY{MAIN});

    my @sock = map { kept_alive() } @sid;
    my ($pid) = worker_pids();
    my $before = database();
    my $mark = length error_log();

    kill 'STOP', $pid;
    my ($stopped) = wait_until(10, 0.01, sub { proc_state($pid) eq 'T' });

    for my $i (0 .. $#sid) {
        print { $sock[$i] } "GET /api/v1/sessions/$sid[$i] HTTP/1.1\r\n"
                            . "Host: localhost\r\n"
                            . "Authorization: Bearer $KEY{MAIN}\r\n"
                            . "Connection: close\r\n\r\n";
    }

    kill 'CONT', $pid;

    ok($stopped, "$name - the worker was stopped while they were sent");

    for my $i (0 .. $#sid) {
        my $r = answer({ sock => $sock[$i] }, 20);
        is($r->{status}, 200, "$name - read $i: 200");
        is($r->{json}{id}, $sid[$i], "$name - read $i: its session");
    }

    my $after = database();

    pipelined_ok($before, $after, 1, 6, $mark, $name);
    ok(drained(), "$name - nobody waits after");
};

# session_db_batch 1: the same queue, sent one by one
$checks{one_by_one} = sub {
    my ($name) = @_;

    my @sid = map { create() } 1 .. 5;

    api('GET', "/api/v1/sessions/$sid[0]", $KEY{MAIN});

    my ($lock, $holder) = hold_connection($sid[0]);
    my $before = database();

    my @req = map { send_get("/api/v1/sessions/$_", $KEY{MAIN}) } @sid;
    ok(read_by_nginx(map { "/api/v1/sessions/$_" } @sid) && waiting(5),
       "$name - five reads wait");

    unlock($lock);

    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    for my $i (0 .. $#sid) {
        my $r = answer($req[$i], 20);
        is($r->{json}{id}, $sid[$i], "$name - read $i: its session");
    }

    my $after = database();

    is($after->{batches} - $before->{batches}, 0, "$name - no pipeline");
    is($after->{batched} - $before->{batched}, 0, "$name - nothing batched");
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /status {
        session_status;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    # one pool connection, statements that may wait long, no sweep and no
    # key lookup in the middle of a check
    db_http_config($block, "session_db_connections 1;\n"
                           . "session_db_timeout 20s;\n"
                           . "session_expiry_sweep_interval 30s;\n"
                           . "session_auth_cache_ttl 1h;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY{MAIN}\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: waiting reads go in one pipeline, each with its own answer
--- debug_log: nginx's "http request line" lines
--- check: batch
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: a read that fails in a pipeline fails alone
--- debug_log: nginx's "http request line" lines
--- http_config
    session_db "$TEST_NGINX_SESSION_DB options='-c lock_timeout=1500'";
    session_db_connections 1;
    session_db_timeout 20s;
    session_expiry_sweep_interval 30s;
    session_auth_cache_ttl 1h;
--- check: aborted
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log
canceling statement due to lock timeout
--- no_error_log
[alert]



=== TEST 3: clients that go away while their reads wait
--- debug_log: nginx's "http request line" lines
--- check: gone
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]



=== TEST 4: the connection is lost while a pipeline runs
--- debug_log: nginx's "http request line" lines
--- check: lost
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]



=== TEST 5: a 5 MB image up and down: the pool connection never carries it whole
--- debug_log: nginx's "http request line" lines
--- check: recycle
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: the reads of one turn of the event loop go together
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 4;
    session_db_timeout 20s;
    session_expiry_sweep_interval 30s;
    session_auth_cache_ttl 1h;
--- check: turn
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: session_db_batch 1 sends them one by one
--- debug_log: nginx's "http request line" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 1;
    session_db_batch 1;
    session_db_timeout 20s;
    session_expiry_sweep_interval 30s;
    session_auth_cache_ttl 1h;
--- check: one_by_one
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: session_db_batch 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_batch 0;
--- config
--- must_die
--- error_log eval
qr/"session_db_batch" directive must be between 1 and 64 in .*nginx\.conf:\d+/



=== TEST 9: session_db_batch 65
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_batch 65;
--- config
--- must_die
--- error_log eval
qr/"session_db_batch" directive must be between 1 and 64 in .*nginx\.conf:\d+/



=== TEST 10: session_db_batch many
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_batch many;
--- config
--- must_die
--- error_log eval
qr/"session_db_batch" directive invalid number in .*nginx\.conf:\d+/
