# session_retention (docs/api.md §8 and §10, docs/directives.md): the
# expiry sweep deletes, in small batches, sessions whose expires_at is
# older than the retention, with their images, webhook events and the
# Idempotency-Key rows of requests about them; afterwards their ids
# answer 404 "session not found", and session_status counts them.
#
# Blocks whose checks need Perl say "--- check: NAME" (as in
# t/009-expiry.t).  Every wait is a bounded poll on the event itself
# (the row gone, the sweep counter moved), never a fixed sleep.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request check_init db_http_config ping_request);

our $TAG = sprintf 't021-%d-%d', $$, time;

# the sweep's advisory lock, "sesswept" as a bigint
our $SWEEP_LOCK = '8315179226771058804';

our $HOOK = 'https://example.com/hook';
our $PNG = "\x89PNG\r\n\x1a\n" . ("\0" x 24);

our (%KEY, %PROJECT);

for my $name (qw(PURGE KEEP OFF DEFAULT SQL)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$name");
    $KEY{$name} = $f->{key};
    $PROJECT{$name} = $f->{project_id};
}


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request; a
# string body goes as it is
sub api { return api_request(@_[0 .. 4], { raw => 1 }) }

sub create {
    my ($key, $body, $headers) = @_;

    my $r = api('POST', '/api/v1/sessions', $key, $body, $headers);

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r->{json};
}

sub upload {
    my ($key, $sid, $headers) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images", $key, $PNG,
                { 'Content-Type' => 'image/png', %{ $headers || {} } });

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json};
}

sub count_rows {
    my ($table, $where) = @_;
    return scalar psql("SELECT count(*) FROM $table WHERE $where");
}

sub status_json {
    my $r = api('GET', '/status', undef);
    return eval { decode_json($r->{content}) } || {};
}

sub sweeps { status_json()->{expiry_sweep} || {} }

# waits until the node's sweeps have run $n more times
sub wait_sweeps {
    my ($n, $timeout) = @_;

    my $start = sweeps()->{runs} // 0;

    my ($ok) = wait_until($timeout, 0.1, sub {
        (sweeps()->{runs} // 0) >= $start + $n
    });

    return $ok;
}

# a session inserted with SQL whose expires_at is $secs seconds ago
sub insert_expired {
    my ($project, $secs) = @_;

    return scalar psql('INSERT INTO sessions (project_id, delivery_mode, '
                       . 'created_at, expires_at) VALUES ('
                       . sql_quote($project) . ", 'long_poll', "
                       . "now() - ($secs + 60) * interval '1 second', "
                       . "now() - $secs * interval '1 second') RETURNING id");
}

# session_sweep_retain() from psql, again while nginx's sweep holds the
# lock (ran false), a bounded number of times: "purged|more|ran"
sub sweep_sql {
    my ($args) = @_;

    my $out = '';

    for (1 .. 50) {
        $out = psql("SELECT purged || '|' || more || '|' || ran"
                    . " FROM session_sweep_retain($args)");
        last if $out =~ /\|true$/;
        Time::HiRes::sleep(0.05);
    }

    return $out;
}


# --- the checks -----------------------------------------------------------

my %checks;

# session_retention 1s: the sessions, their images, events and
# idempotency rows go; live sessions and other rows stay.
$checks{purge} = sub {
    my ($name) = @_;

    my $before = sweeps()->{sessions_purged} // 0;

    my $lp = create($KEY{PURGE}, { delivery_mode => 'long_poll' },
                    { 'Idempotency-Key' => "$TAG-create" });
    my $img = upload($KEY{PURGE}, $lp->{id},
                     { 'Idempotency-Key' => "$TAG-upload" });
    my $r = api('POST', "/api/v1/sessions/$lp->{id}/images/$img->{id}/ack",
                $KEY{PURGE}, undef, { 'Idempotency-Key' => "$TAG-ack" });
    is($r->{status}, 200, "$name - an image is acknowledged");

    my $wh = create($KEY{PURGE}, { delivery_mode => 'webhook',
                                   webhook_url => $HOOK });
    upload($KEY{PURGE}, $wh->{id});
    $r = api('POST', "/api/v1/sessions/$wh->{id}/complete", $KEY{PURGE},
             undef, { 'Idempotency-Key' => "$TAG-complete" });
    is($r->{status}, 200, "$name - a webhook session is completed");

    my $live = create($KEY{PURGE}, { delivery_mode => 'long_poll' },
                      { 'Idempotency-Key' => "$TAG-live" });
    upload($KEY{PURGE}, $live->{id});

    # an idempotency row about no session (a refused create)
    $r = api('POST', '/api/v1/sessions', $KEY{PURGE}, { bogus => 1 },
             { 'Idempotency-Key' => "$TAG-refused" });
    is($r->{status}, 400, "$name - a refused create is kept too");

    my $gone = join ', ', map { sql_quote($_) } $lp->{id}, $wh->{id};
    my $proj = sql_quote($PROJECT{PURGE});

    is(count_rows('images', "session_id IN ($gone)"), 2,
       "$name - two images before");
    cmp_ok(count_rows('webhook_outbox', "session_id = '$wh->{id}'"), '>=',
           2, "$name - webhook events before");
    is(count_rows('idempotency_keys', "project_id = $proj"), 6,
       "$name - six idempotency rows before");

    # both expire now; the sweep marks them, then purges them 1 s later
    psql("UPDATE sessions SET expires_at = now() WHERE id IN ($gone)");

    my ($purged, $waited) = wait_until(20, 0.1, sub {
        count_rows('sessions', "id IN ($gone)") == 0
    });
    ok($purged, "$name - both sessions are deleted");
    Test::More::note(sprintf '%s: purged %.2f s after expires_at',
                     $name, $waited // -1);

    is(count_rows('images', "session_id IN ($gone)"), 0,
       "$name - their images are deleted");
    is(count_rows('webhook_outbox', "session_id IN ($gone)"), 0,
       "$name - their webhook events are deleted");
    is(join(',', psql('SELECT key FROM idempotency_keys WHERE project_id = '
                      . "$proj ORDER BY key")),
       "$TAG-live,$TAG-refused",
       "$name - their idempotency rows are deleted, the others stay");

    for my $path ("/api/v1/sessions/$lp->{id}",
                  "/api/v1/sessions/$lp->{id}/images",
                  "/api/v1/sessions/$lp->{id}/images/$img->{id}",
                  "/api/v1/sessions/$wh->{id}")
    {
        $r = api('GET', $path, $KEY{PURGE});
        is($r->{status}, 404, "$name - GET $path: 404");
        is($r->{json}{message}, 'session not found',
           "$name - GET $path: session not found");
    }

    $r = api('POST', "/api/v1/sessions/$wh->{id}/complete", $KEY{PURGE});
    is($r->{status}, 404, "$name - complete a purged session: 404");

    # the Idempotency-Key of the purged create is free: a new session
    $r = api('POST', '/api/v1/sessions', $KEY{PURGE},
             { delivery_mode => 'long_poll' },
             { 'Idempotency-Key' => "$TAG-create" });
    is($r->{status}, 201, "$name - the create's key runs again: 201");
    ok(!$r->{headers}{'idempotent-replayed'},
       "$name - not a replay of the purged answer");
    isnt($r->{json}{id} // '', $lp->{id}, "$name - a new session");

    $r = api('GET', "/api/v1/sessions/$live->{id}", $KEY{PURGE});
    is($r->{status}, 200, "$name - the live session stays");
    is(count_rows('images', "session_id = '$live->{id}'"), 1,
       "$name - with its image");

    my ($counted) = wait_until(5, 0.1, sub {
        (sweeps()->{sessions_purged} // 0) >= $before + 2
    });
    ok($counted, "$name - session_status: sessions_purged counts them");

    my $prom = api('GET', '/status?format=prometheus', undef)->{content};
    like($prom, qr/^# TYPE session_api_sessions_purged_total counter$/m,
         "$name - the Prometheus metric is typed");
    like($prom, qr/^session_api_sessions_purged_total ([2-9]|\d\d+)$/m,
         "$name - and counts them");
};

# A retention that has not passed: expired sessions are marked, and
# stay for sweep after sweep.
$checks{keep} = sub {
    my ($name) = @_;

    my $s = create($KEY{KEEP}, { delivery_mode => 'long_poll',
                                 expires_in => 1 });
    my $old = insert_expired($PROJECT{KEEP}, 3000);

    my ($expired) = wait_until(20, 0.1, sub {
        psql("SELECT status FROM sessions WHERE id = '$s->{id}'")
            eq 'expired'
    });
    ok($expired, "$name - the session is marked expired");
    ok(wait_sweeps(3, 20), "$name - three more sweeps ran");

    is(count_rows('sessions', "id IN ('$s->{id}', '$old')"), 2,
       "$name - both sessions are still there");
    my $r = api('GET', "/api/v1/sessions/$s->{id}", $KEY{KEEP});
    is($r->{status}, 410, "$name - GET: still 410 session has expired");
    is(sweeps()->{sessions_purged}, 0, "$name - nothing purged");
};

# session_retention off: even a session expired long ago stays.
$checks{off} = sub {
    my ($name) = @_;

    my $old = insert_expired($PROJECT{OFF}, 400 * 86400);

    my ($expired) = wait_until(20, 0.1, sub {
        psql("SELECT status FROM sessions WHERE id = '$old'") eq 'expired'
    });
    ok($expired, "$name - the session is marked expired");
    ok(wait_sweeps(3, 20), "$name - three more sweeps ran");
    is(count_rows('sessions', "id = '$old'"), 1, "$name - it stays");
    is(sweeps()->{sessions_purged}, 0, "$name - nothing purged");

    psql("DELETE FROM sessions WHERE id = '$old'");
};

# The default, 7d: 8 days after expires_at a session goes, 6 days after
# it stays.
$checks{default} = sub {
    my ($name) = @_;

    my $eight = insert_expired($PROJECT{DEFAULT}, 8 * 86400);
    my $six = insert_expired($PROJECT{DEFAULT}, 6 * 86400);

    my ($gone) = wait_until(20, 0.1, sub {
        count_rows('sessions', "id = '$eight'") == 0
    });
    ok($gone, "$name - 8 days after expires_at: deleted");
    ok(wait_sweeps(2, 20), "$name - two more sweeps ran");
    is(count_rows('sessions', "id = '$six'"), 1,
       "$name - 6 days after expires_at: kept");

    # no 6-day-old rows left for the next runs of the suite
    psql("DELETE FROM sessions WHERE id = '$six'");
};

# The SQL function itself: batches, "off", the lock.
$checks{sql} = sub {
    my ($name) = @_;

    my $proj = sql_quote($PROJECT{SQL});

    psql('INSERT INTO sessions (project_id, delivery_mode, status, '
         . "created_at, expires_at) SELECT $proj, 'long_poll', 'expired', "
         . "now() - interval '2 hours', now() - interval '1 hour' "
         . 'FROM generate_series(1, 120)');

    is(sweep_sql('1000, 50, 60'), '50|true|true',
       "$name - one run purges one batch and says more");
    is(count_rows('sessions', "project_id = $proj"), 70,
       "$name - 70 left");
    is(sweep_sql('1000, 50, NULL'), '0|false|true',
       "$name - retention NULL (off) purges nothing");
    is(sweep_sql('1000, 50, 7200'), '0|false|true',
       "$name - a retention not reached purges nothing");
    like(sweep_sql('1000, 100, 60'), qr/^(7\d|8\d|9\d)\|false\|true$/,
         "$name - a batch that is not full says no more");
    is(count_rows('sessions', "project_id = $proj"), 0,
       "$name - none left");

    # another sweep holds the lock: nothing is done, nobody waits
    open my $holder, '|-', 'psql', '-X', '-q', '-d', db_conninfo()
        or die "psql: $!";
    my $old = select $holder;
    $| = 1;
    select $old;
    print $holder "BEGIN; SELECT pg_advisory_xact_lock($SWEEP_LOCK);\n";

    my ($held) = wait_until(10, 0.05, sub {
        psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
             . ' AND granted AND pid <> pg_backend_pid()') > 0
    });
    ok($held, "$name - a psql holds the sweep's lock");

    my $id = insert_expired($PROJECT{SQL}, 7200);
    psql("UPDATE sessions SET status = 'expired' WHERE id = '$id'");

    my $t0 = Time::HiRes::time();
    is(psql("SELECT swept || '|' || purged || '|' || more || '|' || ran"
            . ' FROM session_sweep_retain(10, 50, 60)'),
       '0|0|false|false', "$name - the lock is taken: nothing done");
    cmp_ok(Time::HiRes::time() - $t0, '<', 2, "$name - and no wait");
    is(count_rows('sessions', "id = '$id'"), 1, "$name - the row stays");

    print $holder "ROLLBACK;\n";
    close $holder;

    is(sweep_sql('1000, 50, 60'), '1|false|true',
       "$name - the lock is free again: purged");
};

master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'NGINX';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /status {
        allow 127.0.0.1;
        deny all;
        session_status;
    }
    location = /ping {
        return 200 "pong\n";
    }
NGINX

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block, "session_expiry_sweep_interval 1s;\n"
                           . "session_retention 1s;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;

    check_init($block, \%checks);

    ping_request($block);
});


run_tests();

__DATA__

=== TEST 1: session_retention 1s: sessions, images, events, keys go; 404 after
--- workers: 2
--- check: purge
--- no_error_log
[error]
[alert]



=== TEST 2: a retention not yet reached keeps expired sessions
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 1s;
    session_retention 2h;
--- check: keep
--- no_error_log
[error]
[alert]



=== TEST 3: session_retention off keeps everything
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 1s;
    session_retention off;
--- check: off
--- no_error_log
[error]
[alert]



=== TEST 4: the default is 7d
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 1s;
--- check: default
--- no_error_log
[error]
[alert]



=== TEST 5: batches, NULL, a retention not reached, the lock
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
    session_retention off;
--- check: sql
--- no_error_log
[error]
[alert]



=== TEST 6: session_retention 30d is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention 30d;
--- no_error_log
[emerg]



=== TEST 7: session_retention 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention 0;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_retention" directive must be between 1s and 2147483647s \(68y\), or off in \S+nginx\.conf:\d+$/



=== TEST 8: session_retention abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention abc;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_retention" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 9: session_retention twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention 1d;
    session_retention 2d;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_retention" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 10: session_retention in a server block
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    session_retention 1d;
    location = /ping { return 200 "pong\n"; }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_retention" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 11: session_retention without a value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention;
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid number of arguments in "session_retention" directive in \S+nginx\.conf:\d+$/



=== TEST 12: session_retention past what PostgreSQL's timestamps hold before now
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention 7000y;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_retention" directive must be between 1s and 2147483647s \(68y\), or off in \S+nginx\.conf:\d+$/



=== TEST 13: session_retention 68y is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_retention 68y;
--- no_error_log
[emerg]
