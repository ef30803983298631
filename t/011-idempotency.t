# Idempotency-Key on POST requests (docs/api.md §6):
#
#     malformed key                       400 before anything else of stage 4
#     a repeat of the same request        the first answer again, with
#                                         Idempotent-Replayed: true, nothing
#                                         done twice (no session, no quota)
#     another method, path or body        422
#     the first request still running     409
#     429 and 5xx                         not kept: a retry runs again
#     24 h, and a claim left behind       the key is free again
#     the work and its answer             one commit: a statement that
#                                         commits after the module gave up
#                                         on it, or a worker killed
#                                         mid-request, and the retry
#                                         replays or runs once, never twice
#
# Blocks 1a, 2a, 4a and 5a repeat 1, 2, 4 and 5 with a plan without a
# quota, whose keyed create inserts the key's row first (decisions.md
# (xf)); the others use a plan with one.
#
# The blocks whose checks need Perl say "--- check: NAME" (as in
# t/007-sessions.t): the check runs against the nginx of the block, from
# --- init, before the block's own request.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT error_body api_request burst check_init
                    db_http_config key_headers png_upload error_log);

our (%KEY, %PROJECT);

our $TAG = sprintf 't011-%d-%d', $$, time;

# the database with no statement_timeout: a statement the module gave up
# on goes on in the server (what a network delay does in production)
$ENV{TEST_NGINX_SESSION_DB_NO_TIMEOUT} =
    nginx_quote($ENV{TEST_NGINX_SESSION_DB}
                . " options='-c statement_timeout=0'");

{
    sessionctl_ok('plan', 'set', "$TAG-q0", '--quota', '0', '--features',
                  'long_poll');

    my %fix = (
        A    => 'pro',
        B    => 'pro',
        RACE => 'pro',
        Q0   => "$TAG-q0",
        LATE => 'pro',
        KILL => 'pro',
        # a plan without a quota: the create's keyed statement inserts
        # the key's row first (decisions.md (xf))
        UA    => 'unlimited',
        UB    => 'unlimited',
        URACE => 'unlimited',
    );

    for my $name (sort keys %fix) {
        my $f = fixture(plan => $fix{$name}, name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $PROJECT{"$name.account"} = $f->{account_id};
    }
}


our $MALFORMED = error_body(400, 'Bad Request',
                            'Idempotency-Key is malformed');
our $MISMATCH = error_body(422, 'Unprocessable Entity',
                           'Idempotency-Key was used with a different request');
our $RUNNING = error_body(409, 'Conflict',
                          'a request with this Idempotency-Key is in progress');

my $LP = '{"delivery_mode": "long_poll"}';


# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request
sub api { return api_request(@_) }

sub idem { { 'Idempotency-Key' => $_[0] } }

sub sessions_of {
    my ($who) = @_;
    return psql('SELECT count(*) FROM sessions WHERE project_id = '
                . sql_quote($PROJECT{$who}));
}

sub usage_of {
    my ($who) = @_;
    return psql('SELECT coalesce(sum(sessions_created), 0) FROM monthly_usage'
                . ' WHERE account_id = ' . sql_quote($PROJECT{"$who.account"}))
           + 0;
}

sub key_row {
    my ($who, $key, $cols) = @_;
    return psql("SELECT $cols FROM idempotency_keys WHERE project_id = "
                . sql_quote($PROJECT{$who}) . ' AND key = ' . sql_quote($key));
}

sub new_key { sprintf '%s-%s-%d', $TAG, $_[0], int rand 1e9 }


our %checks;

# a repeated create: one session, one unit of quota (none for a plan
# without a quota: $units), the same answer; $other: another project
sub replay_create {
    my ($name, $who, $other, $units) = @_;
    my $k = new_key('create');

    my $before = sessions_of($who);
    my $usage = usage_of($who);

    my $r1 = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r1->{status}, 201, "$name - first: 201");
    ok(!exists $r1->{headers}{'idempotent-replayed'},
       "$name - first: not a replay");

    for my $i (1 .. 2) {
        my $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
        is($r->{status}, 201, "$name - repeat $i: 201");
        is($r->{content}, $r1->{content}, "$name - repeat $i: same body");
        is($r->{headers}{location}, $r1->{headers}{location},
           "$name - repeat $i: same Location");
        is($r->{headers}{'idempotent-replayed'}, 'true',
           "$name - repeat $i: Idempotent-Replayed: true");
        is($r->{headers}{'content-type'}, 'application/json',
           "$name - repeat $i: JSON");
        ok(defined $r->{headers}{'x-ratelimit-remaining'},
           "$name - repeat $i: rate-limit headers");
    }

    # a bare "?" is an empty query, as none is (docs/api.md, Idempotency)
    my $rq = api('POST', '/api/v1/sessions?', $KEY{$who}, $LP, idem($k));
    is($rq->{status}, 201, "$name - a bare '?': 201");
    is($rq->{headers}{'idempotent-replayed'}, 'true',
       "$name - a bare '?': replayed");
    is($rq->{content}, $r1->{content}, "$name - a bare '?': same body");

    is(sessions_of($who), $before + 1, "$name - one session created");
    is(usage_of($who), $usage + $units, "$name - one unit of quota used");
    is(key_row($who, $k, 'status'), '201', "$name - the answer is kept");
    is(key_row($who, $k, 'body IS NULL AND (answer_session).id IS NOT NULL'),
       't', "$name - kept with the work, as the session");
    is(key_row($who, $k, q{expires_at - now() BETWEEN interval '23 hours 59 }
                        . q{minutes' AND interval '24 hours'}),
       't', "$name - for 24 h from the answer");
    is(key_row($who, $k, q{encode(body_sha256, 'hex')}),
       Digest::SHA::sha256_hex($LP), "$name - SHA-256 of the body");

    # the same key in another project is another key
    my $rb = api('POST', '/api/v1/sessions', $KEY{$other}, $LP, idem($k));
    is($rb->{status}, 201, "$name - other project: 201");
    ok(!exists $rb->{headers}{'idempotent-replayed'},
       "$name - other project: not a replay");
    isnt($rb->{json}{id}, $r1->{json}{id}, "$name - other project: new id");
}

$checks{replay_create} = sub { replay_create($_[0], 'A', 'B', 1) };
$checks{replay_create_free} = sub { replay_create($_[0], 'UA', 'UB', 0) };

# same key, another body, path, query or route: 422, nothing done
sub mismatch {
    my ($name, $who) = @_;
    my $k = new_key('mismatch');

    my $r1 = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r1->{status}, 201, "$name - first: 201");
    my $before = sessions_of($who);
    my $sid = $r1->{json}{id};

    my @other = (
        ['body', 'POST', '/api/v1/sessions',
         '{"delivery_mode": "long_poll", "expires_in": 60}'],
        ['whitespace in the body', 'POST', '/api/v1/sessions',
         '{"delivery_mode":"long_poll"}'],
        ['query', 'POST', '/api/v1/sessions?x=1', $LP],
        ['route', 'POST', "/api/v1/sessions/$sid/complete", $LP],
    );

    for my $o (@other) {
        my ($what, $method, $path, $body) = @$o;
        my $r = api($method, $path, $KEY{$who}, $body, idem($k));
        is($r->{status}, 422, "$name - another $what: 422");
        is($r->{content}, $MISMATCH, "$name - another $what: message");
        ok(!exists $r->{headers}{'idempotent-replayed'},
           "$name - another $what: not a replay");
    }

    is(sessions_of($who), $before, "$name - nothing created");
    is(psql('SELECT status FROM sessions WHERE id = ' . sql_quote($sid)),
       'open', "$name - the session was not completed");

    # the first request still replays
    my $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 201, "$name - the first request still replays");
    is($r->{headers}{'idempotent-replayed'}, 'true', "$name - replayed");
}

$checks{mismatch} = sub { mismatch($_[0], 'A') };
$checks{mismatch_free} = sub { mismatch($_[0], 'UA') };

# 4xx answers are kept; 429 is not
$checks{kept} = sub {
    my ($name) = @_;

    my $k = new_key('400');
    my $bad = '{"delivery_mode": "fax"}';
    my $r1 = api('POST', '/api/v1/sessions', $KEY{A}, $bad, idem($k));
    is($r1->{status}, 400, "$name - 400 first");
    my $r2 = api('POST', '/api/v1/sessions', $KEY{A}, $bad, idem($k));
    is($r2->{status}, 400, "$name - 400 again");
    is($r2->{content}, $r1->{content}, "$name - the same 400");
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - the 400 is a replay");

    # 415 (no JSON content type) is kept too
    $k = new_key('415');
    $r1 = api('POST', '/api/v1/sessions', $KEY{A}, $LP,
              { %{ idem($k) }, 'Content-Type' => 'text/plain' });
    is($r1->{status}, 415, "$name - 415 first");
    $r2 = api('POST', '/api/v1/sessions', $KEY{A}, $LP,
              { %{ idem($k) }, 'Content-Type' => 'text/plain' });
    is($r2->{status}, 415, "$name - 415 again");
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - the 415 is a replay");

    # the monthly quota's 429 is not kept: the retry runs again
    $k = new_key('429');
    for my $i (1 .. 2) {
        my $r = api('POST', '/api/v1/sessions', $KEY{Q0}, $LP, idem($k));
        is($r->{status}, 429, "$name - quota 429 ($i)");
        ok(!exists $r->{headers}{'idempotent-replayed'},
           "$name - quota 429 ($i) is not a replay");
    }

    is(key_row('Q0', $k, 'count(*)'), '0', "$name - no row kept for 429");

    # complete: 200 kept, and a 404 of an unknown session
    my $s = api('POST', '/api/v1/sessions', $KEY{A}, $LP);
    my $sid = $s->{json}{id};
    $k = new_key('complete');
    $r1 = api('POST', "/api/v1/sessions/$sid/complete", $KEY{A}, undef,
              idem($k));
    is($r1->{status}, 200, "$name - complete: 200");
    $r2 = api('POST', "/api/v1/sessions/$sid/complete", $KEY{A}, undef,
              idem($k));
    is($r2->{status}, 200, "$name - complete again: 200");
    is($r2->{content}, $r1->{content}, "$name - complete: the same body");
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - complete: a replay");

    $k = new_key('404');
    my $nope = '/api/v1/sessions/00000000-0000-4000-8000-000000000000'
               . '/complete';
    $r1 = api('POST', $nope, $KEY{A}, undef, idem($k));
    is($r1->{status}, 404, "$name - unknown session: 404");
    $r2 = api('POST', $nope, $KEY{A}, undef, idem($k));
    is($r2->{status}, 404, "$name - unknown session again: 404");
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - the 404 is a replay");

    # without the header nothing is kept
    my $n = psql('SELECT count(*) FROM idempotency_keys WHERE project_id = '
                 . sql_quote($PROJECT{A}));
    api('POST', '/api/v1/sessions', $KEY{A}, $LP);
    is(psql('SELECT count(*) FROM idempotency_keys WHERE project_id = '
            . sql_quote($PROJECT{A})), $n, "$name - no header, no row");
};

# a claim still held (its request is running) gives 409; one left behind
# by a request that never answered is taken over after its lease; a key
# past its 24 h is free again
sub claims {
    my ($name, $who) = @_;
    my $hash = Digest::SHA::sha256_hex($LP);

    my $insert = sub {
        my ($k, $claimed_ago, $expires_in, $body_hash) = @_;
        psql('INSERT INTO idempotency_keys (project_id, key, method, path,'
             . ' body_sha256, claim_id, claimed_at, created_at, expires_at)'
             . ' VALUES (' . sql_quote($PROJECT{$who}) . ', ' . sql_quote($k)
             . q{, 'POST', '/api/v1/sessions', decode('} . $body_hash
             . q{', 'hex'), gen_random_uuid(), now() - interval '}
             . $claimed_ago . q{', now(), now() + interval '} . $expires_in
             . q{')});
    };

    my $k = new_key('running');
    $insert->($k, '1 second', '24 hours', $hash);
    my $before = sessions_of($who);

    my $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 409, "$name - running: 409");
    is($r->{content}, $RUNNING, "$name - running: message");
    is(sessions_of($who), $before, "$name - running: nothing created");

    # a different request under a running key is still a mismatch
    $r = api('POST', '/api/v1/sessions?a=b', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 422, "$name - running, another request: 422");

    $k = new_key('lease');
    $insert->($k, '10 minutes', '24 hours', $hash);
    $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 201, "$name - a claim past its lease: taken over");
    is(key_row($who, $k, 'status'), '201', "$name - and its answer kept");

    $k = new_key('expired');
    $insert->($k, '25 hours', '-1 hour', '00' x 32);
    $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 201, "$name - a key past 24 h: free again");
    ok(!exists $r->{headers}{'idempotent-replayed'},
       "$name - past 24 h: not a replay");
    is(key_row($who, $k, q{encode(body_sha256, 'hex')}), $hash,
       "$name - past 24 h: the new request's fingerprint");
}

$checks{claims} = sub { claims($_[0], 'A') };
$checks{claims_free} = sub { claims($_[0], 'UA') };

# identical requests at the same time: one session ($units of quota)
sub race {
    my ($name, $who, $units) = @_;
    my $n = 8;
    my $k = new_key('race');

    # authenticate once, so that the burst finds the key in the cache
    api('GET', '/api/v1/sessions', $KEY{$who});

    my $req = "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
              . "Authorization: Bearer $KEY{$who}\r\n"
              . "Idempotency-Key: $k\r\n"
              . "Content-Type: application/json\r\n"
              . "Content-Length: " . length($LP) . "\r\n"
              . "Connection: close\r\n\r\n$LP";

    my ($raws, $left) = burst($n, $req);
    is($left, 0, "$name - every answer within 30 s");

    my (%status, %ids);
    for my $raw (grep { length } @$raws) {
        my ($st) = $raw =~ m{^HTTP/1\.1 (\d+)};
        $st //= 'none';
        $status{$st}++;
        if ($st eq '201') {
            my ($body) = $raw =~ /\r\n\r\n(.*)\z/s;
            $ids{ decode_json($body)->{id} }++;
        }
    }

    my $other = join ',', grep { $_ ne '201' && $_ ne '409' } keys %status;
    is($other, '', "$name - only 201 and 409");
    ok(($status{201} // 0) >= 1, "$name - at least one 201");
    is(scalar keys %ids, 1, "$name - every 201 is the same session");
    is(sessions_of($who), 1, "$name - one session in the database");
    is(usage_of($who), $units, "$name - one unit of quota");

    # and afterwards, a replay of it
    my $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 201, "$name - after: 201");
    is($r->{headers}{'idempotent-replayed'}, 'true', "$name - after: replay");
    is(join(',', keys %ids), $r->{json}{id}, "$name - after: that session");
}

$checks{race} = sub { race($_[0], 'RACE', 1) };
$checks{race_free} = sub { race($_[0], 'URACE', 0) };

# keys past their 24 h are dropped by the periodic sweep
$checks{purge} = sub {
    my ($name) = @_;
    my ($old, $live) = (new_key('purge-old'), new_key('purge-live'));

    for my $k ([$old, '-1 second'], [$live, '1 hour']) {
        psql('INSERT INTO idempotency_keys (project_id, key, method, path,'
             . ' body_sha256, status, body, expires_at) VALUES ('
             . sql_quote($PROJECT{A}) . ', ' . sql_quote($k->[0])
             . q{, 'POST', '/api/v1/sessions', '\x00', 201, '\x7b7d', }
             . q{now() + interval '} . $k->[1] . q{')});
    }

    my ($gone) = wait_until(10, 0.1, sub {
        key_row('A', $old, 'count(*)') eq '0'
    });

    ok($gone, "$name - a key past 24 h is dropped");
    is(key_row('A', $live, 'count(*)'), '1', "$name - a live key stays");
};

# an upload: the repeat creates no second image and takes no sequence
$checks{upload} = sub {
    my ($name) = @_;

    my $s = api('POST', '/api/v1/sessions', $KEY{A}, $LP);
    my $sid = $s->{json}{id};
    my $img = "\x89PNG\r\n\x1a\n" . ('x' x 200);
    my $k = new_key('upload');
    my $path = "/api/v1/sessions/$sid/images";

    my $r1 = api('POST', $path, $KEY{A}, $img,
                 { %{ idem($k) }, 'Content-Type' => 'image/png' });
    is($r1->{status}, 201, "$name - first upload: 201");
    is($r1->{json}{sequence}, 1, "$name - sequence 1");

    my $r2 = api('POST', $path, $KEY{A}, $img,
                 { %{ idem($k) }, 'Content-Type' => 'image/png' });
    is($r2->{status}, 201, "$name - repeat: 201");
    is($r2->{headers}{'idempotent-replayed'}, 'true', "$name - a replay");
    is($r2->{content}, $r1->{content}, "$name - the same image");
    is($r2->{headers}{location}, $r1->{headers}{location},
       "$name - the same Location");
    is(psql('SELECT count(*) FROM images WHERE session_id = '
            . sql_quote($sid)), '1', "$name - one image stored");
    is($r1->{json}{sha256}, Digest::SHA::sha256_hex($img),
       "$name - the image's sha256 is the body's");

    # another image under the same key: 422
    my $r3 = api('POST', $path, $KEY{A}, $img . 'y',
                 { %{ idem($k) }, 'Content-Type' => 'image/png' });
    is($r3->{status}, 422, "$name - another image, same key: 422");

    # the next upload without a key is sequence 2: nothing was taken
    my $r4 = api('POST', $path, $KEY{A}, $img,
                 { 'Content-Type' => 'image/png' });
    is($r4->{json}{sequence}, 2, "$name - next upload: sequence 2");

    # an acknowledgement with a key: once, and replayed as answered
    my $ack = "$path/$r1->{json}{id}/ack";
    $k = new_key('ack');
    my $a1 = api('POST', $ack, $KEY{A}, undef, idem($k));
    is($a1->{status}, 200, "$name - ack: 200");
    my $a2 = api('POST', $ack, $KEY{A}, undef, idem($k));
    is($a2->{status}, 200, "$name - ack again: 200");
    is($a2->{headers}{'idempotent-replayed'}, 'true', "$name - ack: replay");
    is($a2->{content}, $a1->{content}, "$name - ack: the same body");
    is(psql('SELECT acknowledged_count FROM sessions WHERE id = '
            . sql_quote($sid)), '1', "$name - ack: counted once");
    is(key_row('A', $k, 'body IS NULL AND (answer_image).id IS NOT NULL'),
       't', "$name - ack: kept with the work, as the image");
};

# a body over the route's limit is refused with the route's 413 whether it
# is announced (Content-Length) or chunked, and nothing is kept
$checks{too_large} = sub {
    my ($name) = @_;
    my $port = $Test::Nginx::Util::ServerPort;
    my $k = new_key('large');
    my $big = '{"delivery_mode": "long_poll"' . (' ' x 70000) . '}';
    my $msg = error_body(413, 'Payload Too Large',
                         'request body exceeds 65536 bytes');

    my $r = api('POST', '/api/v1/sessions', $KEY{A}, $big, idem($k));
    is($r->{status}, 413, "$name - announced: 413");
    is($r->{content}, $msg, "$name - announced: message");

    my $body = '';
    for (my $i = 0; $i < length $big; $i += 8192) {
        my $c = substr $big, $i, 8192;
        $body .= sprintf("%x\r\n", length $c) . $c . "\r\n";
    }
    $body .= "0\r\n\r\n";

    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $port, Proto => 'tcp',
                                     Timeout => 5) or die "connect: $!";
    print $sock "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
                . "Authorization: Bearer $KEY{A}\r\n"
                . "Idempotency-Key: $k\r\n"
                . "Content-Type: application/json\r\n"
                . "Transfer-Encoding: chunked\r\n"
                . "Connection: close\r\n\r\n" . $body;

    my $raw = '';
    my $sel = IO::Select->new($sock);
    while ($sel->can_read(10)) {
        my $n = sysread $sock, my $chunk, 65536;
        last unless $n;
        $raw .= $chunk;
    }
    close $sock;

    like($raw, qr{^HTTP/1\.1 413 }, "$name - chunked: 413");
    like($raw, qr{\Q$msg\E}, "$name - chunked: message");
    is(key_row('A', $k, 'count(*)'), '0', "$name - nothing kept");

    # the complete and the ack ignore their body, but with a key it is
    # part of the fingerprint: announced over 65536 bytes, 413 before any
    # work, nothing kept, and the same again (the key was not run without)
    my $sid = api('POST', '/api/v1/sessions', $KEY{A}, $LP)->{json}{id};
    my $img = png_upload($KEY{A}, $sid);
    my $over = 'a' x 65537;
    my $large = error_body(413, 'Payload Too Large',
                           'request body is too large');

    for my $c (["/api/v1/sessions/$sid/images/$img->{id}/ack", 'ack'],
               ["/api/v1/sessions/$sid/complete", 'complete'])
    {
        my ($path, $what) = @$c;
        my $kk = new_key("large-$what");

        for my $try (1, 2) {
            $r = api('POST', $path, $KEY{A}, $over,
                     { %{ idem($kk) }, 'Content-Type' => 'text/plain' });
            is($r->{status}, 413, "$name - $what, try $try: 413");
            is($r->{content}, $large, "$name - $what, try $try: message");
        }

        is(key_row('A', $kk, 'count(*)'), '0', "$name - $what: nothing kept");
    }

    $r = api('GET', "/api/v1/sessions/$sid/images/$img->{id}", $KEY{A});
    ok(!$r->{json}{acknowledged}, "$name - the image not acknowledged");
    is(api('GET', "/api/v1/sessions/$sid", $KEY{A})->{json}{status}, 'open',
       "$name - the session not completed");

    # exactly 65536 bytes: read, and the key kept with the answer
    my $kk = new_key('at-limit');
    $r = api('POST', "/api/v1/sessions/$sid/complete", $KEY{A}, 'a' x 65536,
             { %{ idem($kk) }, 'Content-Type' => 'text/plain' });
    is($r->{status}, 200, "$name - 65536 bytes: 200");
    $r = api('POST', "/api/v1/sessions/$sid/complete", $KEY{A}, 'a' x 65536,
             { %{ idem($kk) }, 'Content-Type' => 'text/plain' });
    is($r->{headers}{'idempotent-replayed'}, 'true',
       "$name - 65536 bytes: replayed");
};

# uses up a create limit of 1
$checks{burn} = sub {
    my ($name) = @_;
    my $r = api('POST', '/api/v1/sessions', $KEY{B}, $LP);
    is($r->{status}, 201, "$name - the one create of the minute");
};

# A psql that holds the locks its statement takes in an open transaction
# until release_lock(), so that the module's statements that need them
# wait: ACCESS EXCLUSIVE on a table (take_lock), or the rows of a
# "SELECT ... FOR UPDATE" (row_lock).  Both return once the locks are held.
my $locker;

sub hold_locks {
    my ($sql) = @_;

    local $ENV{PGAPPNAME} = "$TAG-locker";
    open $locker, '|-', 'psql', '-X', '-q', '-o', '/dev/null',
         '-d', db_conninfo() or die "psql: $!";
    my $old = select $locker;
    $| = 1;
    select $old;

    print $locker "BEGIN;\n$sql;\nSET application_name = '$TAG-locked';\n";

    my ($held) = wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity WHERE application_name}
             . qq{ = '$TAG-locked'}) > 0
    });

    return $held;
}

sub take_lock { hold_locks("LOCK TABLE $_[0] IN ACCESS EXCLUSIVE MODE") }

sub row_lock { hold_locks("$_[0] FOR UPDATE") }

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

# the database does not answer: 503 and nothing kept, so a retry runs
$checks{outage} = sub {
    my ($name) = @_;

    # warm the auth cache: the key's lookup must not be what hangs
    api('GET', '/api/v1/sessions', $KEY{B});

    # the claim itself hangs
    my $k = new_key('claim-hangs');
    ok(take_lock('idempotency_keys'), "$name - idempotency_keys locked");
    my $before = sessions_of('B');
    my $r = api('POST', '/api/v1/sessions', $KEY{B}, $LP, idem($k));
    release_lock();

    is($r->{status}, 503, "$name - claim hangs: 503");
    is($r->{headers}{'retry-after'}, '1', "$name - claim hangs: Retry-After");
    is(sessions_of('B'), $before, "$name - claim hangs: nothing created");

    # the endpoint hangs after the claim: the claim is given up
    $k = new_key('create-hangs');
    ok(take_lock('sessions'), "$name - sessions locked");
    $r = api('POST', '/api/v1/sessions', $KEY{B}, $LP, idem($k));

    is($r->{status}, 503, "$name - create hangs: 503");
    is(key_row('B', $k, 'count(*)'), '0',
       "$name - create hangs: the claim was given up");

    # the server gave the statement up as well (statement_timeout is
    # session_db_timeout): it does not go on to create the session once
    # the lock is gone
    my ($gone) = wait_until(5, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE }
             . q{'%session_create(%' AND state = 'active'}
             . q{ AND pid <> pg_backend_pid()}) == 0
    });
    ok($gone, "$name - create hangs: the server cancelled the statement");
    release_lock();
    is(sessions_of('B'), $before, "$name - create hangs: nothing created");

    $r = api('POST', '/api/v1/sessions', $KEY{B}, $LP, idem($k));
    is($r->{status}, 201, "$name - the retry runs: 201");
    ok(!exists $r->{headers}{'idempotent-replayed'},
       "$name - the retry is not a replay");
};

# backends of the module waiting for a lock
sub lock_waiters {
    return psql(q{SELECT count(*) FROM pg_stat_activity}
                . q{ WHERE wait_event_type = 'Lock'}
                . qq{ AND application_name NOT LIKE '$TAG-%'}
                . q{ AND pid <> pg_backend_pid()});
}

# a request with the same key until its answer is neither 5xx nor 409
# (bounded); the last answer
sub retry {
    my ($method, $path, $who, $body, $headers) = @_;
    my $r;

    wait_until(20, 0.2, sub {
        $r = api($method, $path, $KEY{$who}, $body, $headers);
        $r->{status} < 500 && $r->{status} != 409
    });

    return $r;
}

sub images_of {
    my ($sid) = @_;
    return psql('SELECT count(*) FROM images WHERE session_id = '
                . sql_quote($sid));
}

# The server commits the work after the module gave up on the statement
# (session_db_timeout passed while it waited for a row lock; the server
# has no statement_timeout here): the 503 told the client nothing, and
# the retry must find the answer of that work, not do it again.  (A
# streamed upload cannot commit once given up: its retry does it once.)
$checks{late_commit} = sub {
    my ($name) = @_;
    my $acct = $PROJECT{'LATE.account'};

    # the usage row exists, the key is in the auth cache
    my $s = api('POST', '/api/v1/sessions', $KEY{LATE}, $LP);
    is($s->{status}, 201, "$name - a first session");
    my $sid = $s->{json}{id};

    my $img = "\x89PNG\r\n\x1a\n" . ('z' x 100);
    my $png = { 'Content-Type' => 'image/png' };

    my @cases = (
        ['create', 'POST', '/api/v1/sessions', $LP, {},
         'SELECT 1 FROM monthly_usage WHERE account_id = ' . sql_quote($acct),
         sub { sessions_of('LATE') }],
        ['upload', 'POST', "/api/v1/sessions/$sid/images", $img, $png,
         'SELECT 1 FROM sessions WHERE id = ' . sql_quote($sid),
         sub { images_of($sid) }],
    );

    for my $c (@cases) {
        my ($what, $method, $path, $body, $h, $lock, $count) = @$c;
        my $k = new_key("late-$what");
        my %h = (%$h, %{ idem($k) });
        my $before = $count->();
        my $usage = usage_of('LATE');

        ok(row_lock($lock), "$name - $what: row locked");
        my $t0 = Time::HiRes::time();
        my $r = api($method, $path, $KEY{LATE}, $body, \%h);
        my $took = Time::HiRes::time() - $t0;
        is($r->{status}, 503, "$name - $what: 503 after session_db_timeout");

        # giving the claim up does not wait for the statement's row lock
        cmp_ok($took, '<', 1.9, "$name - $what: 503 within about 1 s");

        # the statement still waits in the server; now it goes on
        release_lock();

        # An image over session_image_chunk_size (t/043) is streamed: a
        # transaction of several round trips that the module drives, the
        # key's lock and row read by its first statement.  Given up, it
        # never reaches its COMMIT (docs/decisions.md (zd)): nothing is
        # kept, and the retry does the work, once.
        my $streamed = $what eq 'upload'
            && length($body) > ($ENV{TEST_NGINX_SESSION_IMAGE_CHUNK}
                                // 65536);

        if ($streamed) {
            my ($over) = wait_until(10, 0.05, sub {
                lock_waiters() == 0
                && psql(q{SELECT count(*) FROM pg_stat_activity}
                        . q{ WHERE application_name = 'nginx session upload'}
                        . q{ AND state <> 'idle'}) == 0
            });
            ok($over, "$name - $what: streamed: the server is done with it");
            is($count->(), $before, "$name - $what: streamed: not committed");
            is(key_row('LATE', $k, 'count(*)'), '0',
               "$name - $what: streamed: nothing kept");

        } else {
            my ($done) = wait_until(10, 0.05, sub {
                $count->() == $before + 1 && lock_waiters() == 0
            });
            ok($done, "$name - $what: the server committed the work");
        }

        my $again = retry($method, $path, 'LATE', $body, \%h);
        is($again->{status}, 201, "$name - $what: the retry: 201");
        is($again->{headers}{'idempotent-replayed'},
           $streamed ? undef : 'true',
           $streamed ? "$name - $what: streamed: the retry does the work"
                     : "$name - $what: the retry is a replay of that work");
        is($count->(), $before + 1, "$name - $what: done once");
        is(key_row('LATE', $k, 'status'), '201',
           "$name - $what: the answer is kept");

        if ($what eq 'create') {
            is(usage_of('LATE'), $usage + 1,
               "$name - $what: one unit of quota");
            is(psql('SELECT count(*) FROM sessions WHERE id = '
                    . sql_quote($again->{json}{id} // '')
                    . '::uuid'), '1',
               "$name - $what: the replayed session is the one created");
        }

        my $third = api($method, $path, $KEY{LATE}, $body, \%h);
        is($third->{headers}{'idempotent-replayed'}, 'true',
           "$name - $what: then a replay");
        is($third->{content}, $again->{content},
           "$name - $what: replays answer the same body");
        is($third->{headers}{location}, $again->{headers}{location},
           "$name - $what: and the same Location");
    }
};

# A worker killed (SIGKILL) while keyed creates wait in the database, some
# sent, some not yet: once their claims' lease has passed, retrying every
# key creates each session once and uses the quota once per key.
$checks{killed} = sub {
    my ($name) = @_;
    my $n = 8;
    my $port = $Test::Nginx::Util::ServerPort;
    my $acct = $PROJECT{'KILL.account'};

    my $s = api('POST', '/api/v1/sessions', $KEY{KILL}, $LP);
    is($s->{status}, 201, "$name - a first session");
    my $before = sessions_of('KILL');
    my $usage = usage_of('KILL');

    ok(row_lock('SELECT 1 FROM monthly_usage WHERE account_id = '
                . sql_quote($acct)), "$name - usage row locked");

    my @keys = map { new_key("kill-$_") } 1 .. $n;
    my @socks;

    for my $k (@keys) {
        my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                         PeerPort => $port, Proto => 'tcp',
                                         Timeout => 5) or die "connect: $!";
        print $sock "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
                    . "Authorization: Bearer $KEY{KILL}\r\n"
                    . "Idempotency-Key: $k\r\n"
                    . "Content-Type: application/json\r\n"
                    . "Content-Length: " . length($LP) . "\r\n"
                    . "Connection: close\r\n\r\n$LP";
        push @socks, $sock;
    }

    # every pool connection is busy with a create that waits
    my ($waiting) = wait_until(15, 0.05, sub { lock_waiters() >= 2 });
    ok($waiting, "$name - creates wait in the database");

    my @workers = worker_pids();
    ok(@workers >= 1, "$name - the worker");
    kill 'KILL', @workers;
    my ($gone) = wait_until(10, 0.05, sub { !grep { kill 0, $_ } @workers });
    ok($gone, "$name - the worker is gone");
    close $_ for @socks;

    release_lock();

    # the statements sent before the kill finish in the server
    my ($settled) = wait_until(15, 0.05, sub { lock_waiters() == 0 });
    ok($settled, "$name - the server finished what it had");

    # claims the dead worker left: past their lease
    psql(q{UPDATE idempotency_keys SET claimed_at = now() - interval '1 hour'}
         . ' WHERE status IS NULL AND project_id = '
         . sql_quote($PROJECT{KILL}));

    my %ids;
    for my $k (@keys) {
        my $r = retry('POST', '/api/v1/sessions', 'KILL', $LP, idem($k));
        is($r->{status}, 201, "$name - $k: 201");
        $ids{ $r->{json}{id} // 'none' }++;
    }

    is(scalar keys %ids, $n, "$name - a session per key");
    is(sessions_of('KILL'), $before + $n, "$name - no session twice");
    is(usage_of('KILL'), $usage + $n, "$name - quota used once per key");
    is(psql('SELECT count(*) FROM sessions WHERE project_id = '
            . sql_quote($PROJECT{KILL}) . ' AND id::text IN ('
            . join(', ', map { sql_quote($_) } keys %ids) . ')'),
       $n, "$name - every answered session is in the database");
};

# a body nginx spooled to a file hashes the same as one in memory (the
# block turns off session_body_buffer_size, which would gather it whole)
$checks{spooled} = sub {
    my ($name) = @_;
    my $k = new_key('spooled');

    my $body = '{"delivery_mode": "long_poll"' . (' ' x 4000) . '}';

    my $r1 = api('POST', '/api/v1/sessions', $KEY{A}, $body, idem($k));
    is($r1->{status}, 201, "$name - first: 201");
    like(error_log(), qr/a client request body is buffered to a temporary file/,
         "$name - first: nginx spooled it");
    is(key_row('A', $k, q{encode(body_sha256, 'hex')}),
       Digest::SHA::sha256_hex($body), "$name - SHA-256 of the whole body");

    my $r2 = api('POST', '/api/v1/sessions', $KEY{A}, $body, idem($k));
    is($r2->{headers}{'idempotent-replayed'}, 'true', "$name - replayed");
    is($r2->{content}, $r1->{content}, "$name - the same answer");
};


master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block);

    $block->set_value('config', $CONFIG) unless defined $block->config;

    key_headers($block, \%KEY, 'A', 'application/json');

    # run from --- init: nginx is up, the block's request comes after
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a repeated create answers the first 201 and creates nothing
--- check: replay_create
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 1a: the same with a plan without a quota (the key's row first)
--- check: replay_create_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: the same key with another request: 422
--- check: mismatch
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2a: the same with a plan without a quota
--- check: mismatch_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: 4xx answers are kept, the quota's 429 is not
--- check: kept
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: running claims, leases and keys past 24 h
--- check: claims
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4a: the same with a plan without a quota
--- check: claims_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: identical requests at once create one session (2 workers)
--- workers: 2
--- check: race
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5a: the same with a plan without a quota
--- workers: 2
--- check: race_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: a body spooled to a temporary file
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    client_body_buffer_size 1k;
    session_body_buffer_size 0;
--- check: spooled
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: the database hangs: 503, nothing kept
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 1s;
    session_auth_cache_ttl 60s;
--- check: outage
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200



=== TEST 7a: the server commits after the module gave up: the retry replays
--- http_config
    session_db $TEST_NGINX_SESSION_DB_NO_TIMEOUT;
    session_db_timeout 1s;
    session_auth_cache_ttl 60s;
--- check: late_commit
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200



=== TEST 7b: a worker killed mid-request: every key done once
--- http_config
    session_db $TEST_NGINX_SESSION_DB_NO_TIMEOUT;
    session_db_timeout 3s;
    session_db_connections 4;
    session_auth_cache_ttl 60s;
--- check: killed
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200



=== TEST 8: the sweep drops keys past their 24 h
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 1s;
--- check: purge
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: an upload with a key
--- check: upload
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: bodies over the route's limit
--- check: too_large
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200



=== TEST 11: a key of 256 characters is malformed
--- request eval
"POST /api/v1/sessions\n" . '{"delivery_mode": "long_poll"}'
--- more_headers eval
"Idempotency-Key: " . ("k" x 256) . "\n"
--- error_code: 400
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 12: a key of 255 characters is fine
--- request eval
"POST /api/v1/sessions\n" . '{"delivery_mode": "long_poll"}'
--- more_headers eval
my $k = sprintf "t011-%09d-", rand 1e9; "Idempotency-Key: $k" . ("k" x (255 - length $k)) . "\n"
--- error_code: 201
--- no_error_log
[error]



=== TEST 13: a space inside the key
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- more_headers
Idempotency-Key: two words
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 14: a byte outside ASCII
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- more_headers eval
"Idempotency-Key: caf\xc3\xa9\n"
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 15: an empty key
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- more_headers eval
"Idempotency-Key: \n"
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 16: two Idempotency-Key headers
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- more_headers
Idempotency-Key: one
Idempotency-Key: two
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 17: a malformed key comes before the body's checks
--- request
POST /api/v1/sessions
not json
--- more_headers
Idempotency-Key: a b
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 18: a malformed key on another POST route (complete)
--- request
POST /api/v1/sessions/nope/complete
--- more_headers
Idempotency-Key: a b
--- error_code: 400
--- response_body eval
$::MALFORMED



=== TEST 19: GET ignores the header
--- request
GET /api/v1/sessions?limit=1
--- more_headers
Idempotency-Key: a b
--- error_code: 200
--- no_error_log
[error]



=== TEST 20: route and method come first: 404 and 405 with a malformed key
--- request
POST /api/v1/nope
--- more_headers
Idempotency-Key: a b
--- error_code: 404



=== TEST 21: rate limit comes first: 429 with a malformed key
--- config
    location /api/ {
        session_api;
        session_limits create=1 list=1000 other=1000;
    }
--- api_key: B
--- check: burn
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- more_headers
Idempotency-Key: a b
--- error_code: 429
