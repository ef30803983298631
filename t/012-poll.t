# The long poll, GET /api/v1/sessions/{sid}/poll (docs/api.md §5):
# validation of "timeout", the session's state, answers at once when
# unacknowledged images wait, 410 once a completed session has every
# image acknowledged, and otherwise a wait that an upload, a completion,
# the expiry sweep or the timeout ends, on whichever worker it is.
#
# Blocks whose checks need Perl say "--- check: NAME" (as t/008 does):
# the check runs from --- init against the nginx of the block.  A poll
# that must wait is sent on a raw socket and read later, so that the
# script can act in between; "it does not answer yet" is a bounded
# select() on that socket, never a fixed sleep before acting.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Socket::UNIX ();
use POSIX ();
use Socket qw(SOCK_STREAM);
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request send_get answered answer access_log
                    check_init db_http_config);

our $TAG = sprintf 't012-%d-%d', $$, time;

our (%KEY, %PROJECT, %SID);
our ($RELAY_PORT, $RELAY_PID);

for my $name (qw(MAIN OTHER)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$name");
    $KEY{$name} = $f->{key};
    $PROJECT{$name} = $f->{project_id};
}

# the smallest body the module takes for image/png: the signature
our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request, 30 s
sub api { return api_request(@_[0 .. 4], { timeout => 30 }) }

sub create {
    my ($key, $body) = @_;

    my $r = api('POST', '/api/v1/sessions', $key,
                $body || { delivery_mode => 'long_poll' });

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r->{json};
}

sub upload {
    my ($sid, $key) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images", $key || $KEY{MAIN},
                $PNG, { 'Content-Type' => 'image/png' });

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r;
}

sub ack {
    my ($sid, $iid) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images/$iid/ack", $KEY{MAIN});
    die "ack: $r->{status} $r->{content}\n" unless $r->{status} == 200;
}

sub complete {
    my ($sid) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/complete", $KEY{MAIN});
    die "complete: $r->{status} $r->{content}\n" unless $r->{status} == 200;
}

# a poll sent on its own connection (SessionTest's send_get), answered
# later by answer()
sub poll_send {
    my ($sid, $query, $key) = @_;

    return send_get("/api/v1/sessions/$sid/poll" . ($query // ''),
                    $key // $KEY{MAIN});
}

sub ids { [ map { $_->{id} } @{ $_[0] || [] } ] }
sub seqs { join ',', map { $_->{sequence} } @{ $_[0] || [] } }


# --- sessions the plain blocks use ----------------------------------------

# made with the SQL functions behind the endpoints: nginx is not up yet

sub sql_create {
    my ($key) = @_;
    my $proj = $key eq $KEY{OTHER} ? $PROJECT{OTHER} : $PROJECT{MAIN};
    return scalar psql('SELECT id FROM session_create('
                       . sql_quote($proj) . ", 'long_poll', NULL, 3600)");
}

sub sql_upload {
    my ($sid) = @_;
    return scalar psql('SELECT id FROM image_upload('
                       . sql_quote($PROJECT{MAIN}) . ', ' . sql_quote($sid)
                       . ", 'image/png', sha256('x'::bytea), 'x'::bytea)");
}

sub sql_ack {
    my ($sid, $iid) = @_;
    psql('SELECT outcome FROM image_ack(' . sql_quote($PROJECT{MAIN}) . ', '
         . sql_quote($sid) . ', ' . sql_quote($iid) . ')');
}

sub sql_complete {
    my ($sid) = @_;
    psql('SELECT outcome FROM session_complete(' . sql_quote($PROJECT{MAIN})
         . ', ' . sql_quote($sid) . ')');
}

# open, no image
$SID{EMPTY} = sql_create($KEY{MAIN});

# open, images 1 2 3, 2 acknowledged
$SID{IMAGES} = sql_create($KEY{MAIN});
{
    my @img = map { sql_upload($SID{IMAGES}) } 1 .. 3;
    sql_ack($SID{IMAGES}, $img[1]);
}

# a webhook session with one image, its events dropped (nothing is sent)
$SID{HOOKED} = scalar psql('SELECT id FROM session_create('
                           . sql_quote($PROJECT{MAIN}) . ", 'webhook',"
                           . " 'https://hooks.example.com/t012', 3600)");
sql_upload($SID{HOOKED});
psql('DELETE FROM webhook_outbox WHERE session_id = '
     . sql_quote($SID{HOOKED}));

# completed, every image acknowledged
$SID{DONE} = sql_create($KEY{MAIN});
sql_ack($SID{DONE}, sql_upload($SID{DONE}));
sql_complete($SID{DONE});

# completed without an image
$SID{DONE_EMPTY} = sql_create($KEY{MAIN});
sql_complete($SID{DONE_EMPTY});

# completed, one image not acknowledged
$SID{DONE_UNACKED} = sql_create($KEY{MAIN});
sql_upload($SID{DONE_UNACKED});
sql_complete($SID{DONE_UNACKED});

# expired (and completed before)
$SID{EXPIRED} = sql_create($KEY{MAIN});
sql_complete($SID{EXPIRED});
psql("UPDATE sessions SET expires_at = now() - interval '1 second'"
     . ' WHERE id = ' . sql_quote($SID{EXPIRED}));

# another project's
$SID{OTHER} = sql_create($KEY{OTHER});

# 105 unacknowledged images
$SID{MANY} = sql_create($KEY{MAIN});
sql_upload($SID{MANY}) for 1 .. 105;


# --- the checks -----------------------------------------------------------

my %checks;

# images waiting: 200 at once, oldest first, acknowledged ones left out;
# the session and image objects exactly as GET renders them
$checks{at_once} = sub {
    my ($name) = @_;

    my $r = api('GET', "/api/v1/sessions/$SID{IMAGES}/poll?timeout=20",
                $KEY{MAIN});

    is($r->{status}, 200, "$name - 200");
    cmp_ok($r->{elapsed}, '<', 2, "$name - at once");
    is(join(',', sort keys %{ $r->{json} || {} }), 'images,session',
       "$name - session and images");
    is(seqs($r->{json}{images}), '1,3', "$name - unacknowledged, in order");

    my $s = api('GET', "/api/v1/sessions/$SID{IMAGES}", $KEY{MAIN});
    is_deeply($r->{json}{session}, $s->{json}, "$name - the session object");

    my $l = api('GET', "/api/v1/sessions/$SID{IMAGES}/images"
                . '?acknowledged=false', $KEY{MAIN});
    is_deeply($r->{json}{images}, $l->{json}{data},
              "$name - the image objects");

    like($r->{headers}{'x-ratelimit-limit'} // '', qr/^\d+$/,
         "$name - X-RateLimit-Limit");

    # at most 100, the oldest
    $r = api('GET', "/api/v1/sessions/$SID{MANY}/poll", $KEY{MAIN});
    is($r->{status}, 200, "$name - 105 waiting: 200");
    is(scalar @{ $r->{json}{images} || [] }, 100, "$name - 100 of them");
    is(seqs($r->{json}{images}), join(',', 1 .. 100),
       "$name - sequences 1 to 100");

    # a completed session with an image to acknowledge still answers
    $r = api('GET', "/api/v1/sessions/$SID{DONE_UNACKED}/poll", $KEY{MAIN});
    is($r->{status}, 200, "$name - completed, unacknowledged image: 200");
    is(scalar @{ $r->{json}{images} || [] }, 1, "$name - with the image");
    is($r->{json}{session}{status}, 'completed',
       "$name - the session says completed");
};

# a waiting poll answers the upload made on another connection
$checks{upload} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $p = poll_send($sid, '?timeout=20');

    ok(!answered($p, 1), "$name - no answer while nothing happens");

    my $up = decode_json(upload($sid)->{content});
    my $r = answer($p, 10);

    is($r->{status}, 200, "$name - 200");
    cmp_ok($r->{elapsed}, '<', 5, "$name - well before the timeout");
    is_deeply(ids($r->{json}{images}), [ $up->{id} ],
              "$name - with the uploaded image");
    is($r->{json}{session}{image_count}, 1, "$name - session image_count");
    is_deeply($r->{json}{images}[0], $up,
              "$name - the image object as the upload answered it");
    like($r->{headers}{'content-type'} // '', qr{^application/json},
         "$name - Content-Type");

    for my $h (qw(x-ratelimit-limit x-ratelimit-remaining
                  x-ratelimit-reset))
    {
        like($r->{headers}{$h} // '', qr/^\d+$/, "$name - $h");
    }
};

# a completion with every image acknowledged: 410
$checks{complete} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $img = decode_json(upload($sid)->{content});
    ack($sid, $img->{id});

    my $p = poll_send($sid, '?timeout=20');
    ok(!answered($p, 1), "$name - waits: its image is acknowledged");

    complete($sid);
    my $r = answer($p, 10);

    is($r->{status}, 410, "$name - 410");
    cmp_ok($r->{elapsed}, '<', 5, "$name - well before the timeout");
    is($r->{json}{message}, 'all images are acknowledged', "$name - message");
    like($r->{headers}{'x-ratelimit-remaining'} // '', qr/^\d+$/,
         "$name - X-RateLimit-Remaining");
};

# the sweep marks the session expired and notifies: 410
$checks{expire} = sub {
    my ($name) = @_;

    my $s = create($KEY{MAIN}, { delivery_mode => 'long_poll',
                                 expires_in => 2 });
    my $p = poll_send($s->{id}, '?timeout=30');

    my $r = answer($p, 20);

    is($r->{status}, 410, "$name - 410");
    is($r->{json}{message}, 'session has expired', "$name - message");
    cmp_ok($r->{elapsed}, '>', 1.5, "$name - not before expires_at");
    cmp_ok($r->{elapsed}, '<', 8, "$name - within seconds of it (sweep 1s)"
           . ', far from the timeout');
};

# nothing happens: 200 with no image after the timeout
$checks{timeout} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $r = api('GET', "/api/v1/sessions/$sid/poll?timeout=2", $KEY{MAIN});

    is($r->{status}, 200, "$name - 200");
    is_deeply($r->{json}{images}, [], "$name - no image");
    is($r->{json}{session}{id}, $sid, "$name - the session");
    cmp_ok($r->{elapsed}, '>=', 1.9, "$name - after the timeout");
    cmp_ok($r->{elapsed}, '<', 4, "$name - not much after it");

    $r = api('GET', "/api/v1/sessions/$sid/poll?timeout=0", $KEY{MAIN});
    is($r->{status}, 200, "$name - timeout=0: 200");
    is_deeply($r->{json}{images}, [], "$name - timeout=0: no image");
    cmp_ok($r->{elapsed}, '<', 1, "$name - timeout=0: at once");

    # two polls of one session, one times out, the other still waits
    my $long = poll_send($sid, '?timeout=20');
    $r = api('GET', "/api/v1/sessions/$sid/poll?timeout=1", $KEY{MAIN});
    is($r->{status}, 200, "$name - the short one answers");
    ok(!answered($long, 0.5), "$name - the long one still waits");

    my $up = decode_json(upload($sid)->{content});
    $r = answer($long, 10);
    is($r->{status}, 200, "$name - the long one: 200 on upload");
    is_deeply(ids($r->{json}{images}), [ $up->{id} ],
              "$name - the long one: with the image");
};

# the session_poll_timeout default applies without "timeout"
$checks{default_timeout} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $r = api('GET', "/api/v1/sessions/$sid/poll", $KEY{MAIN});

    is($r->{status}, 200, "$name - 200");
    is_deeply($r->{json}{images}, [], "$name - no image");
    cmp_ok($r->{elapsed}, '>=', 0.9, "$name - after session_poll_timeout");
    cmp_ok($r->{elapsed}, '<', 3, "$name - of 1s");
};

# polls held by every worker, one upload handled by one of them
$checks{workers} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my @polls = map { poll_send($sid, '?timeout=20') } 1 .. 12;

    ok(!answered($polls[-1], 1), "$name - the polls wait");

    my $up = upload($sid);
    my $up_pid = $up->{headers}{'x-pid'} // '';
    my %pids;
    my $ok = 0;

    for my $p (@polls) {
        my $r = answer($p, 10);
        $ok++ if $r->{status} == 200 && $r->{elapsed} < 5
                 && @{ $r->{json}{images} || [] } == 1;
        $pids{ $r->{headers}{'x-pid'} // '' }++;
    }

    is($ok, 12, "$name - every poll answered 200 with the image, at once");
    cmp_ok(scalar(grep { $_ ne $up_pid } keys %pids), '>=', 1,
           "$name - polls held by another worker than the upload's");
    Test::More::note("$name: upload on $up_pid, polls on "
                     . join(', ', map { "$_ x $pids{$_}" } sort keys %pids));
};

# a client that goes away: its wait ends, the server goes on
$checks{disconnect} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $p = poll_send($sid, '?timeout=20');

    ok(!answered($p, 0.5), "$name - the poll waits");
    close $p->{sock};

    my ($seen) = wait_until(5, 0.1, sub {
        access_log() =~ m{"GET /api/v1/sessions/\Q$sid\E/poll\S* HTTP/1\.1" 499 };
    });
    ok($seen, "$name - the wait ended at once (499 in the access log)");

    my $r = api('GET', "/api/v1/sessions/$sid/poll?timeout=0", $KEY{MAIN});
    is($r->{status}, 200, "$name - a later poll of the session answers");

    my $q = poll_send($sid, '?timeout=20');
    ok(!answered($q, 0.5), "$name - a new poll waits");
    my $up = decode_json(upload($sid)->{content});
    $r = answer($q, 10);
    is($r->{status}, 200, "$name - and is woken by an upload");
    is_deeply(ids($r->{json}{images}), [ $up->{id} ],
              "$name - with the image");
};

# a reload: the old worker answers its waiting polls at once (as at the
# timeout) instead of holding them, and exits
$checks{reload} = sub {
    my ($name) = @_;

    my $sid = create($KEY{MAIN})->{id};
    my $p = poll_send($sid, '?timeout=30');

    ok(!answered($p, 0.5), "$name - the poll waits");

    my $pidfile = "$Test::Nginx::Util::ServRoot/logs/nginx.pid";
    open my $fh, '<', $pidfile or die "$pidfile: $!";
    chomp(my $master = <$fh>);
    close $fh;

    ok(kill('HUP', $master), "$name - reload");

    my $r = answer($p, 15);
    is($r->{status}, 200, "$name - 200");
    is_deeply($r->{json}{images}, [], "$name - no image");
    cmp_ok($r->{elapsed}, '<', 5, "$name - within a second or two of the"
           . ' reload, not at the timeout');

    # the new worker serves polls
    my $q = poll_send($sid, '?timeout=20');
    my ($up) = wait_until(10, 0.2, sub {
        my $u = api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN},
                    $PNG, { 'Content-Type' => 'image/png' });
        $u->{status} == 201 ? $u : undef;
    });
    $r = answer($q, 10);
    is($r->{status}, 200, "$name - a poll after the reload is woken");
};

# the database goes away while a poll waits: the notification of an
# upload made meanwhile is lost, the poll answers at its timeout (503:
# it cannot read), and once the database is back a poll gets the image
$checks{outage} = sub {
    my ($name) = @_;

    unless (defined $RELAY_PID) {
        Test::More::pass("$name - skipped: no relay to the database");
        return;
    }

    my $sid = create($KEY{MAIN})->{id};
    my $p = poll_send($sid, '?timeout=3');

    ok(!answered($p, 0.5), "$name - the poll waits");

    relay_stop($RELAY_PID);
    undef $RELAY_PID;

    my $iid = sql_upload($sid);

    my $r = answer($p, 10);
    is($r->{status}, 503, "$name - 503 at the timeout");
    is($r->{json}{message}, 'database unavailable', "$name - message");
    cmp_ok($r->{elapsed}, '>=', 2.9, "$name - not before the timeout");
    like($r->{headers}{'x-ratelimit-limit'} // '', qr/^\d+$/,
         "$name - with the rate-limit headers");

    ($RELAY_PORT, $RELAY_PID) = relay_start($RELAY_PORT);

    my ($back) = wait_until(15, 0.2, sub {
        my $x = api('GET', "/api/v1/sessions/$sid/poll?timeout=0",
                    $KEY{MAIN});
        $x->{status} == 200 ? $x : undef;
    });

    ok($back, "$name - the database is back");
    is_deeply(ids($back->{json}{images}), [ $iid ],
              "$name - the image uploaded during the outage");
};


# A TCP relay on 127.0.0.1 to the test database, nginx's
# $TEST_NGINX_RELAY_DB_CONF (relay_db() of t/lib/SessionTest.pm): killing
# it cuts every connection of nginx to PostgreSQL, LISTEN included.
($RELAY_PORT, $RELAY_PID) = relay_db();


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        add_header X-Pid $pid always;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block, "session_expiry_sweep_interval 1s;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;

    if (!defined $block->raw_request && !defined $block->more_headers) {
        (my $who = $block->api_key // 'MAIN') =~ s/\s+//g;
        die "no fixture $who" unless $KEY{$who};

        $block->set_value('more_headers',
                          "Authorization: Bearer $KEY{$who}\n");
    }

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: unacknowledged images: 200 at once, oldest first, at most 100
--- check: at_once
--- request eval
"GET /api/v1/sessions/$::SID{IMAGES}/poll?timeout=0"
--- error_code: 200
--- response_headers_like
X-RateLimit-Limit: \d+
--- no_error_log
[error]



=== TEST 1b: a webhook session is polled as a long_poll one (docs/api.md 5.10)
--- request eval
"GET /api/v1/sessions/$::SID{HOOKED}/poll?timeout=0"
--- error_code: 200
--- response_body_like eval
qr/^\{"session": \{"id": "$::SID{HOOKED}", [^{}]*"delivery_mode": "webhook", [^{}]*\}, "images": \[\{"id": "[-0-9a-f]{36}", "session_id": "$::SID{HOOKED}", "sequence": 1, /
--- no_error_log
[error]



=== TEST 2: completed, every image acknowledged: 410
--- request eval
"GET /api/v1/sessions/$::SID{DONE}/poll"
--- error_code: 410
--- response_body chomp
{"statusCode": 410, "error": "Gone", "message": "all images are acknowledged"}
--- no_error_log
[error]



=== TEST 3: completed without any image: 410
--- request eval
"GET /api/v1/sessions/$::SID{DONE_EMPTY}/poll?timeout=5"
--- error_code: 410
--- response_body chomp
{"statusCode": 410, "error": "Gone", "message": "all images are acknowledged"}
--- no_error_log
[error]



=== TEST 4: unknown session: 404
--- request
GET /api/v1/sessions/00000000-0000-4000-8000-000000000000/poll
--- error_code: 404
--- response_body chomp
{"statusCode": 404, "error": "Not Found", "message": "session not found"}
--- no_error_log
[error]



=== TEST 5: malformed session id: 404
--- request
GET /api/v1/sessions/not-a-uuid/poll?timeout=1
--- error_code: 404
--- response_body chomp
{"statusCode": 404, "error": "Not Found", "message": "session not found"}
--- no_error_log
[error]



=== TEST 6: another project's session: 403
--- request eval
"GET /api/v1/sessions/$::SID{OTHER}/poll"
--- error_code: 403
--- response_body chomp
{"statusCode": 403, "error": "Forbidden", "message": "session belongs to another project"}
--- no_error_log
[error]



=== TEST 7: expired session: 410 (completed or not)
--- request eval
"GET /api/v1/sessions/$::SID{EXPIRED}/poll"
--- error_code: 410
--- response_body chomp
{"statusCode": 410, "error": "Gone", "message": "session has expired"}
--- no_error_log
[error]



=== TEST 8: timeout=-1
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=-1"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 9: timeout=abc
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=abc"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 10: timeout=1.5
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=1.5"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 11: timeout=61, over session_poll_max_timeout
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=61"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 12: timeout= (empty)
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout="
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 13: a huge timeout
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=99999999999999999999999"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 14: unknown query parameter
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=1&limit=5"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "unknown query parameter: limit"}
--- no_error_log
[error]



=== TEST 15: stage 4 before stage 5: a bad timeout on an unknown session is 400
--- request
GET /api/v1/sessions/not-a-uuid/poll?timeout=x
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 60"}
--- no_error_log
[error]



=== TEST 16: timeout=0: 200 at once with no image
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- response_body_like chomp
^\{"session": \{"id": "[0-9a-f-]{36}", .*"status": "open", .*\}, "images": \[\]\}$
--- no_error_log
[error]



=== TEST 17: HEAD: the status and headers of GET, no body
--- request eval
"HEAD /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- response_body
--- response_headers_like
Content-Type: application/json
X-RateLimit-Remaining: \d+
--- no_error_log
[error]



=== TEST 18: POST: 405
--- request eval
"POST /api/v1/sessions/$::SID{EMPTY}/poll\nx"
--- error_code: 405
--- response_headers
Allow: GET, HEAD
--- no_error_log
[error]



=== TEST 19: a waiting poll is woken by an upload on another connection
--- check: upload
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]



=== TEST 20: a waiting poll is woken by the completion: 410
--- check: complete
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]



=== TEST 21: a waiting poll is woken by the expiry sweep: 410
--- check: expire
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]



=== TEST 22: at the timeout: 200 with no image; timeout=0; two polls
--- check: timeout
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]



=== TEST 23: four workers: an upload on one wakes the polls on the others
--- workers: 4
--- check: workers
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 24: a client that disconnects mid-wait
--- check: disconnect
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 25: session_poll_timeout 1s in http: the default wait
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_timeout 1s;
--- check: default_timeout
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]



=== TEST 26: session_poll_max_timeout in server, inherited by the location
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    session_poll_max_timeout 5s;
    session_poll_timeout 2;
    location /api/ {
        session_api;
    }
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=6"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 5"}
--- no_error_log
[error]



=== TEST 27: the location overrides the http level
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_max_timeout 5s;
    session_poll_timeout 5s;
--- config
    location /api/ {
        session_api;
        session_poll_max_timeout 2m;
    }
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=121"
--- error_code: 400
--- response_body chomp
{"statusCode": 400, "error": "Bad Request", "message": "timeout must be an integer between 0 and 120"}
--- no_error_log
[error]



=== TEST 28: session_poll_timeout greater than session_poll_max_timeout
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_timeout 90s;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_timeout" 90 must not be greater than "session_poll_max_timeout" 60/



=== TEST 29: ... also when the maximum is lowered in a location
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        session_poll_max_timeout 10s;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_timeout" 30 must not be greater than "session_poll_max_timeout" 10/



=== TEST 30: session_poll_max_timeout 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_max_timeout 0;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_max_timeout" directive must be between 1s and 3600s in \S+nginx\.conf:\d+/



=== TEST 31: session_poll_max_timeout over an hour
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_max_timeout 2h;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_max_timeout" directive must be between 1s and 3600s in \S+nginx\.conf:\d+/



=== TEST 32: session_poll_timeout with a bad value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_timeout soon;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_timeout" directive invalid value in \S+nginx\.conf:\d+/



=== TEST 33: session_poll_timeout inside "if": not allowed
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        if ($arg_x) {
            session_poll_timeout 1s;
        }
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_poll_timeout" directive is not allowed here in \S+nginx\.conf:\d+/



=== TEST 34: session_poll_timeout 0: polls answer at once by default
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_poll_timeout 0;
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll"
--- error_code: 200
--- response_body_like chomp
"images": \[\]\}$
--- timeout: 3
--- no_error_log
[error]



=== TEST 35: a reload: the old worker answers its waiting polls at once
--- check: reload
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 36: the database goes away while a poll waits: 503 at the timeout
--- http_config
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_timeout 1s;
--- check: outage
--- request eval
"GET /api/v1/sessions/$::SID{EMPTY}/poll?timeout=0"
--- error_code: 200
--- no_error_log
[alert]
