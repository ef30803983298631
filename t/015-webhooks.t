# Webhook delivery (docs/api.md §7, §8 and §10): events of the outbox
# reach a receiver on 127.0.0.1, signed the Standard Webhooks way, with
# retries on the schedule, refusals of private addresses at connect
# time, and one sender per event at a time.
#
# The receivers, the DNS responder (names under "hook.test" resolve to
# 127.0.0.1) and the certificates are made when the script starts, on
# free ports, and die with it (t/lib/Webhook.pm).  Blocks whose checks
# need Perl say "--- check: NAME" (as in t/009-expiry.t); waits are
# bounded polls of the receiver's log or the database, never fixed
# sleeps.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Compress::Zlib ();
use Digest::SHA qw(hmac_sha256);
use File::Temp ();
use HTTP::Tiny ();
use MIME::Base64 qw(decode_base64 encode_base64);
use POSIX ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request check_init db_http_config ping_request);
use Webhook;

our $TAG = sprintf 't015-%d-%d', $$, time;

our $UUID = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

our $F = fixture(plan => 'pro', name => "$TAG-main");

our $DIR = File::Temp->newdir('t015-XXXXXX', TMPDIR => 1);
our $LOG = "$DIR/requests.log";
our $TLS_LOG = "$DIR/tls.log";

our ($HOOK) = receiver_start($LOG);
our ($DNS) = dns_start('hook.test');

$ENV{TEST_NGINX_HOOK_PORT} = $HOOK;
$ENV{TEST_NGINX_DNS_PORT} = $DNS;

# a CA, and a certificate of it for hook.test and 127.0.0.1
our $TLS;

sub openssl {
    my @cmd = ('openssl', @_);

    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        open STDERR, '>', '/dev/null';
        exec @cmd or POSIX::_exit(127);
    }

    waitpid $pid, 0;
    $? == 0 or die "@cmd: failed\n";
}

{
    my $cnf = "$DIR/ext.cnf";
    open my $fh, '>', $cnf or die "$cnf: $!";
    print $fh "subjectAltName = DNS:hook.test, IP:127.0.0.1\n";
    close $fh;

    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
            '-subj', '/CN=t015 test CA', '-keyout', "$DIR/ca.key",
            '-out', "$DIR/ca.pem");
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=hook.test',
            '-keyout', "$DIR/server.key", '-out', "$DIR/server.csr");
    openssl('x509', '-req', '-in', "$DIR/server.csr", '-CA', "$DIR/ca.pem",
            '-CAkey', "$DIR/ca.key", '-CAcreateserial', '-days', '2',
            '-extfile', $cnf, '-out', "$DIR/server.pem");

    ($TLS) = receiver_start($TLS_LOG,
                                   tls => { cert => "$DIR/server.pem",
                                            key => "$DIR/server.key" });

    $ENV{TEST_NGINX_TLS_PORT} = $TLS;
    $ENV{TEST_NGINX_CA} = "$DIR/ca.pem";
}


# nginx's own way to the database ($TEST_NGINX_RELAY_DB_CONF), through a
# relay the script can cut (relay_db() of t/lib/SessionTest.pm)
our ($RELAY_PORT, $RELAY_PID) = relay_db();


# --- helpers -------------------------------------------------------------

my $Seq = 0;

sub tag { sprintf '%s-%d', $TAG, ++$Seq }

# api(METHOD, PATH, BODY, HEADERS): SessionTest's api_request with the
# key of $F; the body goes as it is
sub api {
    my ($method, $path, $body, $headers) = @_;

    return api_request($method, $path, $F->{key}, $body, $headers,
                       { raw => 1 });
}

# a webhook session aimed at URL; returns its id
sub session_to {
    my ($url) = @_;

    my $r = api('POST', '/api/v1/sessions',
                encode_json({ delivery_mode => 'webhook',
                              webhook_url => $url }),
                { 'Content-Type' => 'application/json' });

    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json}{id};
}

sub complete {
    my ($sid) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/complete");
    die "complete: $r->{status} $r->{content}\n" unless $r->{status} == 200;
}

sub png_chunk {
    my ($type, $data) = @_;
    return pack('N', length $data) . $type . $data
           . pack('N', Compress::Zlib::crc32($type . $data));
}

sub png {
    return "\x89PNG\r\n\x1a\n"
           . png_chunk('IHDR', pack('NNCCCCC', 1, 1, 8, 0, 0, 0, 0))
           . png_chunk('IDAT', Compress::Zlib::compress("\0\x80"))
           . png_chunk('IEND', '');
}

# an event queued straight into the outbox (as another node would),
# whatever its URL; returns its id
# (held: as if a sender had claimed it for an hour)
sub queue_event {
    my ($url, $held) = @_;

    my $sid = session_to('http://queued.example/unused');
    my $lease = $held ? "now() + interval '1 hour'" : 'NULL';

    return scalar psql(
        'INSERT INTO webhook_outbox (id, project_id, session_id, event_type,'
        . ' url, payload, attempts, claimed_until, next_attempt_at)'
        . ' SELECT u, ' . sql_quote($F->{project_id}) . ', '
        . sql_quote($sid) . ", 'session.completed', " . sql_quote($url)
        . ", json_build_object('id', u, 'type', 'session.completed',"
        . " 'created_at', '2026-11-25T00:00:00Z', 'data', '{}'::json)::text,"
        . ($held ? 1 : 0) . ", $lease, coalesce($lease, now())"
        . ' FROM gen_random_uuid() u RETURNING id');
}

# the outbox rows of a session (or one row by event id), as hashes
sub rows {
    my ($where) = @_;

    my @r;

    for (psql("SELECT json_build_object('id', id, 'type', event_type,"
              . " 'attempts', attempts, 'delivered', delivered_at IS NOT NULL,"
              . " 'failed', failed_at IS NOT NULL, 'last_error', last_error,"
              . " 'claimed', claimed_until IS NOT NULL, 'payload', payload,"
              . " 'next_in', extract(epoch FROM next_attempt_at - now()))"
              . " FROM webhook_outbox WHERE $where ORDER BY created_at, id"))
    {
        push @r, decode_json($_);
    }

    return @r;
}

# due_now(WHERE) of t/lib/Webhook.pm makes a scheduled retry due now:
# for the blocks that need a retry, not its spacing (which the retry,
# max_attempts and reload blocks check against the clock)

sub event_rows { rows('id = ' . sql_quote($_[0])) }
sub session_rows { rows('session_id = ' . sql_quote($_[0])) }

# waits until CODE returns true for the rows that WHERE selects
sub wait_rows {
    my ($where, $timeout, $code) = @_;

    my ($ok) = wait_until($timeout, 0.05, sub { $code->(rows($where)) });

    return $ok;
}

# the same for the rows of session $sid
sub wait_session {
    my ($sid, $timeout, $code) = @_;
    return wait_rows('session_id = ' . sql_quote($sid), $timeout, $code);
}

# waits until session $sid has $n rows (1 if not given), all delivered
sub wait_delivered {
    my ($sid, $timeout, $n) = @_;
    $n //= 1;
    return wait_session($sid, $timeout,
                        sub { @_ == $n && !grep { !$_->{delivered} } @_ });
}

sub wait_requests {
    my ($prefix, $n, $timeout, $log) = @_;

    my ($ok) = wait_until($timeout, 0.05, sub {
        receiver_requests($log // $LOG, $prefix) >= $n
    });

    return receiver_requests($log // $LOG, $prefix);
}

# the Standard Webhooks signature, computed here
sub signature {
    my ($secret, $id, $ts, $body) = @_;

    (my $b64 = $secret) =~ s/^whsec_//;

    return 'v1,' . encode_base64(hmac_sha256("$id.$ts.$body",
                                             decode_base64($b64)), '');
}

# a delivered request: method, headers, signature, body = the stored row
sub request_ok {
    my ($req, $name) = @_;

    my $h = $req->{headers};
    my $id = $h->{'webhook-id'} // '';

    is($req->{method}, 'POST', "$name - POST");
    like($id, $UUID, "$name - webhook-id");
    is($h->{'content-type'}, 'application/json', "$name - Content-Type");
    is($h->{'content-length'}, length $req->{body},
       "$name - Content-Length");
    like($h->{'webhook-timestamp'} // '', qr/^\d+$/,
         "$name - webhook-timestamp is epoch seconds");
    cmp_ok(abs(($h->{'webhook-timestamp'} // 0) - $req->{t}), '<', 30,
           "$name - webhook-timestamp is now");
    is($h->{'webhook-signature'},
       signature($F->{webhook_secret}, $id, $h->{'webhook-timestamp'} // '',
                 $req->{body}),
       "$name - webhook-signature verifies");

    my $body = eval { decode_json($req->{body}) } || {};
    is($body->{id}, $id, "$name - webhook-id is the body's id");

    my ($row) = event_rows($id);
    is($req->{body}, $row->{payload}, "$name - the body is the stored payload,"
       . ' byte for byte');

    return $body;
}

sub status_json {
    my $port = $Test::Nginx::Util::ServerPort;
    my $r = HTTP::Tiny->new(timeout => 5)
            ->get("http://127.0.0.1:$port/status?format=json");

    return eval { decode_json($r->{content}) } || {};
}


# --- the checks -----------------------------------------------------------

my %checks;

# each event type once, at once, signed, the body as stored
$checks{delivery} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/ok/$tag";
    my $sid = session_to("http://127.0.0.1:$HOOK$path?q=1");

    my $t0 = Time::HiRes::time();
    my $r = api('POST', "/api/v1/sessions/$sid/images", png(),
                { 'Content-Type' => 'image/png' });
    is($r->{status}, 201, "$name - uploaded");

    my @req = wait_requests($path, 1, 10);
    is(scalar @req, 1, "$name - image.uploaded arrived");
    my $late = @req ? $req[0]{t} - $t0 : 99;
    Test::More::note(sprintf '%s: upload to delivery %.3f s', $name, $late);
    cmp_ok($late, '<', 1.5, "$name - at once (NOTIFY), not on a timer");

    complete($sid);
    @req = wait_requests($path, 2, 10);

    psql("UPDATE sessions SET expires_at = now() - interval '1 second'"
         . ' WHERE id = ' . sql_quote($sid));
    @req = wait_requests($path, 3, 15);

    is(join(',', map { (eval { decode_json($_->{body}) } || {})->{type} // '' }
                 @req),
       'image.uploaded,session.completed,session.expired',
       "$name - the three events, in order");
    is($req[0]{path}, "$path?q=1", "$name - the URL's path and query");
    is($req[0]{headers}{host}, "127.0.0.1:$HOOK", "$name - Host");

    my %data;

    for my $i (0 .. $#req) {
        my $body = request_ok($req[$i], "$name - request " . ($i + 1));
        $data{$body->{type} // ''} = $body->{data};
    }

    is($data{'image.uploaded'}{session_id}, $sid,
       "$name - image.uploaded carries the image");
    is($data{'session.completed'}{status}, 'completed',
       "$name - session.completed carries the session");
    is($data{'session.expired'}{id}, $sid,
       "$name - session.expired carries the session");

    ok(wait_delivered($sid, 5, 3), "$name - the rows are delivered");

    for my $row (session_rows($sid)) {
        is($row->{attempts}, 1, "$name - $row->{type}: one attempt");
        ok(!$row->{claimed} && !$row->{failed} && !defined $row->{last_error},
           "$name - $row->{type}: no lease, no error");
    }

    is(status_json()->{webhooks}{delivered} // 0, 3,
       "$name - session_status counts three deliveries");
};

# a 500, then the retry 1 s (+-10 %) later succeeds
$checks{retry} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/status/500x1/$tag";
    my $sid = session_to("http://127.0.0.1:$HOOK$path");

    complete($sid);

    my @req = wait_requests($path, 2, 10);
    is(scalar @req, 2, "$name - two requests");

    ok(wait_delivered($sid, 5), "$name - delivered at the second attempt");

    my ($row) = session_rows($sid);
    is($row->{attempts}, 2, "$name - attempts 2");
    is($row->{last_error}, 'answered 500', "$name - last_error");

    my $gap = @req == 2 ? $req[1]{t} - $req[0]{t} : 0;
    Test::More::note(sprintf '%s: retry after %.3f s', $name, $gap);
    cmp_ok($gap, '>=', 0.9, "$name - not before 0.9 s");
    cmp_ok($gap, '<', 1.6, "$name - soon after 1.1 s");

    is($req[0]{body}, $req[1]{body}, "$name - the same body both times");
    request_ok($_, "$name - attempt") for @req;

    my $st = status_json()->{webhooks} || {};
    cmp_ok($st->{retried} // 0, '>=', 1, "$name - session_status: retried");
    cmp_ok($st->{delivered} // 0, '>=', 1,
           "$name - session_status: delivered");
};

# what decides is the final status line: interim answers (100, 103)
# before a 2xx are gone over, a long reason phrase does not matter; an
# endless run of interim answers and a 101 are failures
$checks{answer_heads} = sub {
    my ($name) = @_;

    my %want = (
        interim => undef,
        longreason => undef,
        interim500 => 'answered 500',
        upgrade => 'answered 101',
        endless => "the answer of 127.0.0.1:$HOOK has no final HTTP status"
                   . ' line in its first 65536 bytes',
    );
    my %sid;

    for my $kind (sort keys %want) {
        $sid{$kind} = session_to("http://127.0.0.1:$HOOK/head/$kind/"
                                 . tag());
        complete($sid{$kind});
    }

    for my $kind (sort keys %want) {
        ok(wait_session($sid{$kind}, 10,
                        sub { @_ == 1 && $_[0]{attempts} >= 1
                              && !$_[0]{claimed} }),
           "$name - $kind: the first attempt is over");

        my ($row) = session_rows($sid{$kind});

        if (defined $want{$kind}) {
            ok(!$row->{delivered}, "$name - $kind: not delivered");
            is($row->{last_error}, $want{$kind}, "$name - $kind: last_error");

        } else {
            ok($row->{delivered}, "$name - $kind: delivered");
            is($row->{attempts}, 1, "$name - $kind: at the first attempt");
            is($row->{last_error}, undef, "$name - $kind: no error");
        }
    }
};

# a 3xx is a failure, and the Location is not followed
$checks{redirect} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/status/302x1/$tag";
    my $sid = session_to("http://127.0.0.1:$HOOK$path");

    complete($sid);

    ok(wait_session($sid, 10,
                    sub { @_ == 1 && defined $_[0]{last_error}
                          && !$_[0]{claimed} }),
       "$name - the first attempt failed");

    due_now('session_id = ' . sql_quote($sid));

    ok(wait_delivered($sid, 10), "$name - delivered at the second attempt");

    my ($row) = session_rows($sid);
    is($row->{attempts}, 2, "$name - the 302 was an attempt");
    is($row->{last_error}, 'answered 302: redirects are not followed',
       "$name - last_error");
    is(scalar(receiver_requests($LOG, '/ok/redirected')), 0,
       "$name - the Location was not requested");
};

# session_webhook_max_attempts 3 against a receiver that fails three
# times; then "sessionctl webhook list" shows it and "webhook retry"
# sends it again
$checks{max_attempts} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/status/503x3/$tag";
    my $sid = session_to("http://127.0.0.1:$HOOK$path");

    complete($sid);

    ok(wait_session($sid, 15, sub { @_ == 1 && $_[0]{failed} }),
       "$name - the event failed");

    my ($row) = session_rows($sid);
    is($row->{attempts}, 3, "$name - after three attempts");
    is($row->{last_error}, 'answered 503', "$name - last_error");
    ok(!$row->{delivered} && !$row->{claimed}, "$name - not delivered,"
       . ' no lease');

    my @req = receiver_requests($LOG, $path);
    is(scalar @req, 3, "$name - three requests");

    if (@req == 3) {
        my @gap = ($req[1]{t} - $req[0]{t}, $req[2]{t} - $req[1]{t});
        Test::More::note(sprintf '%s: gaps %.3f s, %.3f s', $name, @gap);
        cmp_ok($gap[0], '>=', 0.9, "$name - first retry after 1 s - 10 %");
        cmp_ok($gap[1], '>=', 4.5, "$name - second retry after 5 s - 10 %");
        cmp_ok($gap[1], '<', 6.0, "$name - second retry by 5 s + 10 %");
    }

    my $st = status_json()->{webhooks} || {};
    cmp_ok($st->{failed} // 0, '>=', 1, "$name - session_status: failed");
    cmp_ok($st->{retried} // 0, '>=', 2, "$name - session_status: retried");

    # the operator's view
    my $list = sessionctl_ok('webhook', 'list', '--session', $sid);
    my ($e) = @{ $list->{events} || [] };
    is($e->{event_id}, $row->{id}, "$name - webhook list: the event");
    is($e->{state}, 'failed', "$name - webhook list: failed");
    is($e->{attempts}, 3, "$name - webhook list: attempts");
    is($e->{last_error}, 'answered 503', "$name - webhook list: last_error");
    is($e->{next_attempt_at}, undef, "$name - webhook list: no next attempt");
    like($e->{finished_at} // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/,
         "$name - webhook list: finished_at");

    $list = sessionctl_ok('webhook', 'list', '--project', $F->{project_id},
                          '--state', 'failed', '--limit', '1000');
    ok((grep { $_->{event_id} eq $row->{id} } @{ $list->{events} }),
       "$name - webhook list --project --state failed: the event");

    # again, by hand: the fourth request is answered 204
    my $r = sessionctl_ok('webhook', 'retry', $row->{id});
    is($r->{state}, 'pending', "$name - webhook retry: pending");

    ok(wait_delivered($sid, 5), "$name - retried by hand: delivered");
    is(scalar(receiver_requests($LOG, $path)), 4, "$name - four requests");
    ($row) = session_rows($sid);
    is($row->{attempts}, 1, "$name - a fresh count of attempts");
};

# the URL in the error log: '"' and '\' pass the syntax check at
# creation and are escaped as \x22 and \x5C; control bytes are refused at
# creation, and a row that holds one anyway (put into the outbox by hand)
# is logged with it escaped, so it cannot forge a line (TEST 29's
# error_log and no_error_log)
$checks{log_escape} = sub {
    my ($name) = @_;

    my $tag = tag();

    my $r = api('POST', '/api/v1/sessions',
                encode_json({ delivery_mode => 'webhook',
                              webhook_url => "http://127.0.0.1:$HOOK/a\nb" }),
                { 'Content-Type' => 'application/json' });
    is($r->{status}, 400, "$name - a line break is refused at creation");
    is($r->{json}{message},
       'webhook_url must be an absolute http or https URL',
       "$name - as an invalid URL");

    my $sid = session_to("http://127.0.0.1:$HOOK/status/503/$tag?q=\"x\\y");
    complete($sid);

    my $id = queue_event("http://127.0.0.1:$HOOK/log/$tag\n"
                         . '2026/01/01 00:00:00 [warn] 1#1: forged"');

    ok(wait_session($sid, 10, sub { @_ == 1 && $_[0]{failed} }),
       "$name - the event to the URL with '\"' and '\\' failed");
    ok(wait_rows('id = ' . sql_quote($id), 10,
                 sub { @_ == 1 && $_[0]{failed} }),
       "$name - the event to the URL with a line break failed");

    my ($row) = event_rows($id);
    is($row->{last_error}, 'webhook_url is not a valid URL',
       "$name - its last_error");
};

# sessionctl webhook: refusals
$checks{sessionctl} = sub {
    my ($name) = @_;

    my ($code, $err) = sessionctl('webhook', 'list');
    is($code, 2, "$name - list without --project or --session: exit 2");

    ($code, $err) = sessionctl('webhook', 'list', '--project', 'x');
    is("$code $err", '1 sessionctl: project not found',
       "$name - list, malformed project");

    ($code, $err) = sessionctl('webhook', 'list', '--session',
                               $F->{project_id}, '--state', 'done');
    is("$code $err", '1 sessionctl: invalid state "done": pending, sending,'
       . ' delivered or failed', "$name - list, unknown state");

    ($code, $err) = sessionctl('webhook', 'list', '--session',
                               $F->{project_id}, '--limit', '0');
    is("$code $err", '1 sessionctl: invalid limit "0": 1 to 10000',
       "$name - list, limit 0");

    my ($c, $list) = sessionctl('webhook', 'list', '--session',
                                $F->{project_id});
    is_deeply([$c, $list], [0, { events => [] }],
              "$name - list, no such session: no events");

    ($code, $err) = sessionctl('webhook', 'retry',
                               '00000000-0000-4000-8000-000000000000');
    is("$code $err", '1 sessionctl: event not found',
       "$name - retry, unknown event");

    ($code, $err) = sessionctl('webhook', 'retry', 'nope');
    is("$code $err", '1 sessionctl: event not found',
       "$name - retry, malformed id");

    # an event a sender holds is left alone
    my $id = queue_event('http://192.0.2.1/held', 1);

    ($code, $err) = sessionctl('webhook', 'retry', $id);
    is("$code $err", "1 sessionctl: event $id is being sent now; try again"
       . ' once its attempt has ended', "$name - retry, event in flight");

    my ($row) = event_rows($id);
    is($row->{attempts}, 1, "$name - retry, event in flight: untouched");

    ($c, $list) = sessionctl('webhook', 'list', '--session',
                             psql('SELECT session_id FROM webhook_outbox'
                                  . ' WHERE id = ' . sql_quote($id)));
    is($list->{events}[0]{state}, 'sending', "$name - list: sending");

    psql('DELETE FROM webhook_outbox WHERE id = ' . sql_quote($id));
};

# a receiver that never answers: the attempt ends at the timeout
$checks{timeout} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/hold/$tag";
    my $sid = session_to("http://127.0.0.1:$HOOK$path");

    complete($sid);

    my @req = wait_requests($path, 1, 5);
    is(scalar @req, 1, "$name - the request arrived");

    ok(wait_session($sid, 5,
                    sub { @_ == 1 && defined $_[0]{last_error} }),
       "$name - the attempt ended");

    my $t = Time::HiRes::time();
    my ($row) = session_rows($sid);

    is($row->{last_error}, 'timed out after 1000 ms waiting for the answer',
       "$name - last_error");
    cmp_ok($t - ($req[0]{t} // 0), '>=', 0.9, "$name - after the timeout");
    ok(!$row->{delivered} && !$row->{failed}, "$name - to be retried");
};

# allow_private off: private addresses are refused before any connection
$checks{private} = sub {
    my ($name) = @_;

    my $tag = tag();
    my %want = (
        "http://hook.test:$HOOK/ok/$tag-dns" =>
            'refused: "hook.test" resolves to the private address 127.0.0.1',
        "http://127.0.0.1:$HOOK/ok/$tag-ip" =>
            'refused: 127.0.0.1 is a private address',
        "http://[::ffff:127.0.0.1]:$HOOK/ok/$tag-mapped" =>
            'refused: ::ffff:127.0.0.1 is a private address',
        "http://[::1]:$HOOK/ok/$tag-v6" =>
            'refused: ::1 is a private address',
        "http://Sub.LocalHost:$HOOK/ok/$tag-name" =>
            'refused: "Sub.LocalHost" is a private host name',
    );

    # a session may name hook.test: the text is not private
    my $sid = session_to("http://hook.test:$HOOK/ok/$tag-dns");
    complete($sid);

    my %id = ("http://hook.test:$HOOK/ok/$tag-dns"
              => (session_rows($sid))[0]{id});

    for my $url (sort keys %want) {
        $id{$url} //= queue_event($url);
    }

    # the first attempts fail; the second ones (made due now) too
    my $ids = join ', ', map { sql_quote($_) } values %id;

    ok(wait_rows("id IN ($ids)", 10,
                 sub { @_ == 5 && !grep { !defined $_->{last_error}
                                          || $_->{claimed} } @_ }),
       "$name - first attempts refused");

    due_now("id IN ($ids)");

    for my $url (sort keys %want) {
        ok(wait_rows('id = ' . sql_quote($id{$url}), 10,
                     sub { @_ == 1 && $_[0]{attempts} >= 2
                           && !$_[0]{claimed} }),
           "$name - $url: two attempts");

        my ($row) = event_rows($id{$url});
        is($row->{last_error}, $want{$url}, "$name - $url: last_error");
        ok(!$row->{delivered}, "$name - $url: not delivered");
    }

    is(scalar(receiver_requests($LOG, "/ok/$tag")), 0,
       "$name - the receiver got nothing");
};

# allow_private on: the same name is resolved and delivered
$checks{dns} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/ok/$tag";
    my $sid = session_to("http://Hook.Test.:$HOOK$path");

    complete($sid);

    my @req = wait_requests($path, 1, 10);
    is(scalar @req, 1, "$name - delivered through the resolver");
    is($req[0]{headers}{host}, "Hook.Test.:$HOOK",
       "$name - Host as the URL writes it");
    request_ok($req[0], $name) if @req;
};

# no resolver: a host name fails with a last_error that says so
$checks{no_resolver} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $sid = session_to("http://hook.test:$HOOK/ok/$tag");

    complete($sid);

    ok(wait_session($sid, 10,
                    sub { @_ == 1 && defined $_[0]{last_error} }),
       "$name - the attempt failed");

    my ($row) = session_rows($sid);
    is($row->{last_error}, 'cannot resolve "hook.test": no "resolver" is '
       . 'configured in the http block', "$name - last_error");
};

# a receiver that is down at first gets the event once it is up
$checks{down_then_up} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $port = free_port();
    my $log = "$DIR/late.log";
    my $sid = session_to("http://127.0.0.1:$port/ok/$tag");

    complete($sid);

    ok(wait_session($sid, 10,
                    sub { @_ == 1 && defined $_[0]{last_error} }),
       "$name - the first attempt failed");

    my ($row) = session_rows($sid);
    like($row->{last_error} // '',
         qr/^cannot connect to 127\.0\.0\.1:$port: Connection refused$/,
         "$name - last_error");

    my (undef, $pid) = receiver_start($log, port => $port);
    due_now('session_id = ' . sql_quote($sid));

    my @req = wait_requests("/ok/$tag", 1, 15, $log);
    is(scalar @req, 1, "$name - delivered once the receiver is up");

    ok(wait_delivered($sid, 5), "$name - the row is delivered");

    stop($pid);
};

# two workers of this nginx and a second nginx on the same database:
# every event is sent once
$checks{race} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $n = 150;

    my $other = File::Temp->newdir('t015-nginx-XXXXXX', TMPDIR => 1);
    my $port = free_port();
    my $module = $ENV{TEST_NGINX_LOAD_MODULES};

    mkdir "$other/logs";
    open my $fh, '>', "$other/nginx.conf" or die $!;
    print $fh <<"EOF";
load_module $module;
error_log $other/logs/error.log info;
pid $other/nginx.pid;
worker_processes 2;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $other/body;
    proxy_temp_path $other/proxy;
    fastcgi_temp_path $other/fastcgi;
    uwsgi_temp_path $other/uwsgi;
    scgi_temp_path $other/scgi;
    session_db $ENV{TEST_NGINX_SESSION_DB_CONF};
    session_webhook_allow_private on;
    session_webhook_concurrency 4;
    server {
        listen 127.0.0.1:$port;
        location /api/ { session_api; }
    }
}
EOF
    close $fh;

    my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
    system($nginx, '-p', "$other/", '-c', "$other/nginx.conf") == 0
        or die "second nginx did not start\n";

    my @sid = map { session_to("http://127.0.0.1:$HOOK/ok/$tag/$_") } 1 .. $n;
    complete($_) for @sid;

    my @req = wait_requests("/ok/$tag/", $n, 30);

    my $list = join ', ', map { sql_quote($_) } @sid;
    ok(wait_rows("session_id IN ($list)", 10,
                 sub { @_ == $n && !grep { !$_->{delivered} } @_ }),
       "$name - $n events delivered");

    my %ids;
    $ids{ $_->{headers}{'webhook-id'} // '' }++ for @req;

    is(scalar @req, $n, "$name - $n requests");
    is(scalar keys %ids, $n, "$name - $n distinct events");
    is(scalar(grep { $_->{attempts} != 1 } rows("session_id IN ($list)")), 0,
       "$name - one attempt each");

    my $other_log = do { local (@ARGV, $/) = "$other/logs/error.log"; <> };
    my $mine = () = $other_log =~ /delivered|session webhook: claimed [1-9]/g;
    Test::More::note("$name: the second nginx's log mentions claims:"
                     . " $mine (only with a debug build)");

    system($nginx, '-p', "$other/", '-c', "$other/nginx.conf", '-s', 'stop');
    wait_until(5, 0.05, sub { !-e "$other/nginx.pid" });

    unlike($other_log, qr/\[(?:error|alert|crit)\]/,
           "$name - the second nginx logged no error");
};

# an event queued while nginx cannot reach PostgreSQL (its NOTIFY is
# lost) is sent once the database is back: LISTEN's return wakes the
# workers, not the one-minute rescan
$checks{outage} = sub {
    my ($name) = @_;

    SKIP: {
        skip "$name - no relay to the database (conninfo is a URI or has"
             . ' several hosts)', 4 unless defined $RELAY_PORT;

        my $tag = tag();
        my $sid = session_to("http://127.0.0.1:$HOOK/ok/$tag");

        relay_stop($RELAY_PID);
        undef $RELAY_PID;

        my $r = api('POST', "/api/v1/sessions/$sid/complete");
        is($r->{status}, 503, "$name - nginx has no database");

        # queued by another node, as it were
        psql('INSERT INTO webhook_outbox (id, project_id, session_id,'
             . ' event_type, url, payload)'
             . ' SELECT u, project_id, id, \'session.completed\','
             . " webhook_url, json_build_object('id', u)::text"
             . ' FROM sessions, gen_random_uuid() u WHERE id = '
             . sql_quote($sid));

        my $t0 = Time::HiRes::time();
        (undef, $RELAY_PID) = relay_start($RELAY_PORT);

        my @req = wait_requests("/ok/$tag", 1, 20);
        is(scalar @req, 1, "$name - delivered once the database is back");
        my $late = @req ? $req[0]{t} - $t0 : 99;
        Test::More::note(sprintf '%s: %.3f s after the database came back',
                         $name, $late);
        cmp_ok($late, '<', 15, "$name - well before the one-minute rescan");

        ok(wait_delivered($sid, 10), "$name - recorded as delivered");
    }
};

# https: the CA is trusted (session_webhook_trusted_certificate), SNI and
# the host name are checked
$checks{https} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $sid = session_to("https://hook.test:$TLS/ok/$tag-name");
    my $sid2 = session_to("https://127.0.0.1:$TLS/ok/$tag-ip");
    my $sid3 = session_to("https://other.hook.test:$TLS/ok/$tag-other");

    complete($_) for $sid, $sid2, $sid3;

    my @req = wait_requests("/ok/$tag-name", 1, 10, $TLS_LOG);
    is(scalar @req, 1, "$name - delivered to the host name");
    request_ok($req[0], "$name - by name") if @req;

    @req = wait_requests("/ok/$tag-ip", 1, 10, $TLS_LOG);
    is(scalar @req, 1, "$name - delivered to the IP address");

    ok(wait_session($sid3, 10,
                    sub { @_ == 1 && defined $_[0]{last_error} }),
       "$name - another name: the attempt failed");

    my ($row) = session_rows($sid3);
    like($row->{last_error} // '',
         qr/^TLS certificate of 127\.0\.0\.1:$TLS does not match "other\.hook\.test"$/,
         "$name - another name: last_error");
    is(scalar(receiver_requests($TLS_LOG, "/ok/$tag-other")), 0,
       "$name - another name: nothing sent");
};

# https with the system's trust store: the test CA is not in it
$checks{https_untrusted} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $sid = session_to("https://hook.test:$TLS/ok/$tag");

    complete($sid);

    ok(wait_session($sid, 10,
                    sub { @_ == 1 && defined $_[0]{last_error} }),
       "$name - the attempt failed");

    my ($row) = session_rows($sid);
    like($row->{last_error} // '',
         qr/^TLS certificate of 127\.0\.0\.1:$TLS not trusted: /,
         "$name - last_error");
    is(scalar(receiver_requests($TLS_LOG, "/ok/$tag")), 0,
       "$name - nothing sent");
};


# session_status's queue figures: one slot (session_webhook_concurrency
# 1) held by a receiver that never answers, events behind it are due
# and wait; the figures come from the workers' own measurement, about
# once a second, not from the status request
$checks{queue} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $held = session_to("http://127.0.0.1:$HOOK/hold/$tag");
    complete($held);

    my @req = wait_requests("/hold/$tag", 1, 10);
    is(scalar @req, 1, "$name - the slot is taken");

    my @sid = map { session_to("http://127.0.0.1:$HOOK/ok/$tag/$_") } 1, 2;
    complete($_) for @sid;

    my $st;
    my ($ok) = wait_until(10, 0.1, sub {
        $st = status_json()->{webhooks}{queue};
        $st && $st->{depth} >= 3 && $st->{oldest_due_seconds} >= 0.5
    });

    ok($ok, "$name - depth and oldest due age seen")
        or diag(encode_json($st // {}));
    is(scalar(receiver_requests($LOG, "/ok/$tag/")), 0,
       "$name - the due events wait for the slot");
    cmp_ok(abs(($st->{measured_at} // 0) - Time::HiRes::time()), '<', 3,
           "$name - measured within the last seconds");

    my $port = $Test::Nginx::Util::ServerPort;
    my $prom = HTTP::Tiny->new(timeout => 5)
               ->get("http://127.0.0.1:$port/status?format=prometheus");
    like($prom->{content}, qr/^session_api_webhook_queue_depth [1-9]\d*$/m,
         "$name - Prometheus: queue depth");
    like($prom->{content},
         qr/^session_api_webhook_oldest_due_seconds \d+\.\d{3}$/m,
         "$name - Prometheus: oldest due age");
    like($prom->{content},
         qr/^session_api_webhook_queue_measured_timestamp_seconds \d+\.\d{3}$/m,
         "$name - Prometheus: when measured");

    # the held attempt times out, the two behind it go out
    @req = wait_requests("/ok/$tag/", 2, 10);
    is(scalar @req, 2, "$name - delivered once the slot is free");

    psql('DELETE FROM webhook_outbox WHERE session_id = ' . sql_quote($held));

    ($ok) = wait_until(10, 0.1, sub {
        $st = status_json()->{webhooks}{queue};
        $st && $st->{oldest_due_seconds} == 0
    });
    ok($ok, "$name - nothing due: oldest due age 0");
};

# the event sent to a receiver that holds the first request: returns
# the event's row and the receiver's record of that request
sub held_event {
    my ($name, $path) = @_;

    my $sid = session_to("http://127.0.0.1:$HOOK$path");
    complete($sid);

    my @req = wait_requests($path, 1, 10);
    is(scalar @req, 1, "$name - the first attempt is in flight");

    my ($row) = session_rows($sid);

    return ($sid, $row, $req[0]);
}

# nginx stops (fast shutdown: the worker ends mid-send) and starts again;
# the event's lease keeps the new workers from sending it while the
# first send might still be in flight, and once the lease has ended the
# event is delivered.  The lease (session_webhook_timeout 2s +
# session_db_timeout 1s + 10 s) is checked in the row, then ended by
# hand rather than waited for.
$checks{restart} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/holdx1/$tag";
    my ($sid, $row, $first) = held_event($name, $path);

    ok($row->{claimed} && $row->{attempts} == 1, "$name - leased");
    cmp_ok($row->{next_in}, '>', 13 - 1.5, "$name - for the lease, about"
           . ' 13 s');
    cmp_ok($row->{next_in}, '<=', 13, "$name - not longer");

    my $master = master_pid();
    kill 'TERM', $master or die "kill TERM: $!";
    ok((wait_until(10, 0.05, sub { !kill 0, $master }))[0],
       "$name - nginx stopped");

    my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
    my $root = $Test::Nginx::Util::ServRoot;
    system($nginx, '-e', "$root/logs/error.log", '-p', "$root/", '-c',
           $Test::Nginx::Util::ConfFile) == 0
        or die "nginx did not start again\n";
    ok((wait_until(10, 0.05, sub {
            api('GET', '/api/v1/sessions/' . $sid)->{status} == 200 }))[0],
       "$name - nginx is back");

    # the new workers have claimed at least once (they start within
    # half a second); the leased event is not theirs yet
    my ($sent) = wait_until(1, 0.05,
                            sub { receiver_requests($LOG, $path) > 1 });
    ok(!$sent, "$name - not sent again while the lease holds");
    ($row) = session_rows($sid);
    is($row->{attempts}, 1, "$name - not claimed again");

    # the lease ends (as it would in a few seconds)
    psql('UPDATE webhook_outbox SET next_attempt_at = now(),'
         . ' claimed_until = now() WHERE session_id = ' . sql_quote($sid)
         . '; NOTIFY session_webhooks');

    my @req = wait_requests($path, 2, 10);
    is(scalar @req, 2, "$name - sent again once the lease ended");
    is($req[1]{body}, $first->{body}, "$name - the same body");
    request_ok($req[1], "$name - the second attempt") if @req == 2;

    ok(wait_delivered($sid, 5), "$name - delivered");
    ($row) = session_rows($sid);
    is($row->{attempts}, 2, "$name - two attempts");
};

# a reload (SIGHUP) while a send is in flight: the old worker finishes
# the attempt (here it times out after 2 s) and records it, the new
# workers leave the event alone meanwhile, then retry it on the
# schedule: no loss, and no second send while the first is in flight
$checks{reload} = sub {
    my ($name) = @_;

    my $tag = tag();
    my $path = "/holdx1/$tag";
    my ($sid, $row, $first) = held_event($name, $path);

    kill 'HUP', master_pid() or die "kill HUP: $!";

    my @req = wait_requests($path, 2, 15);
    is(scalar @req, 2, "$name - sent again after the reload");

    my $gap = @req == 2 ? $req[1]{t} - $first->{t} : 0;
    Test::More::note(sprintf '%s: second send %.3f s after the first',
                     $name, $gap);
    # 0.1 s of slack: the receiver times the first request when it has
    # read it, a little after the attempt's clock started, and nginx
    # starts its timers from the loop's cached time, which a loaded
    # machine leaves a few ms behind (2.891 s was seen once)
    cmp_ok($gap, '>=', 2 + 0.9 - 0.1, "$name - only after the first"
           . ' attempt timed out (2 s) and the retry delay (1 s - 10 %)');
    cmp_ok($gap, '<', 6, "$name - soon after: the old worker's NOTIFY"
           . ' wakes the new ones, no waiting for the lease (13 s) or a'
           . ' rescan');

    ok(wait_delivered($sid, 5), "$name - delivered");
    ($row) = session_rows($sid);
    is($row->{attempts}, 2, "$name - two attempts");
    is($row->{last_error}, 'timed out after 2000 ms waiting for the answer',
       "$name - the old worker recorded its attempt");
    is($req[1]{body}, $first->{body}, "$name - the same body") if @req == 2;
};

# connections are reused: events one after another go over the
# connection their worker kept.  Each of the two workers races for an
# event's claim (its LISTEN connection hears the NOTIFY), so which worker
# sends which event is not fixed: with four events in a row, no worker may
# open a second connection, so they go over at most two (a sender that
# kept none would use four).  A receiver that drops a reused connection
# without an answer gets the event again on a new one, within the same
# attempt: of four such events one after another, whichever worker sends
# each, at least one goes over a reused connection and is dropped
$checks{keepalive} = sub {
    my ($name) = @_;

    my $tag = tag();
    my (@conn, @sid, %seen);

    for my $i (1 .. 4) {
        my $sid = session_to("http://127.0.0.1:$HOOK/keep/$tag/$i");
        complete($sid);
        my @req = wait_requests("/keep/$tag/$i", 1, 10);
        is(scalar @req, 1, "$name - event $i delivered");
        push @conn, $req[0]{conn} // 0;
        request_ok($req[0], "$name - event $i") if @req;
        ok(wait_delivered($sid, 5), "$name - event $i recorded");
    }

    $seen{$_}++ for @conn;
    cmp_ok(scalar keys %seen, '<=', 2, "$name - four events, at most one"
           . " connection for each of the two workers (@conn)");

    my $dropped = 0;

    for my $i (1 .. 4) {
        my $sid = session_to("http://127.0.0.1:$HOOK/keepdrop/$tag/$i");
        complete($sid);
        ok(wait_delivered($sid, 10),
           "$name - dropping receiver, event $i delivered");

        my ($row) = session_rows($sid);
        is($row->{attempts}, 1, "$name - event $i within one attempt");
        is($row->{last_error}, undef, "$name - event $i no error recorded");

        my @req = wait_requests("/keepdrop/$tag/$i", 1, 5);
        my @nth = map { $_->{nth} } @req;

        if (@req == 2) {
            $dropped++;
            cmp_ok($nth[0], '>=', 2,
                   "$name - event $i dropped on a reused connection");
            is($nth[1], 1, "$name - event $i sent again on a new one");
            is($req[0]{body}, $req[1]{body}, "$name - event $i the same body");
        } else {
            is_deeply(\@nth, [1], "$name - event $i on a new connection,"
                      . ' answered the first time');
        }
    }

    cmp_ok($dropped, '>=', 1, "$name - four events from two workers: at"
           . ' least one went over a reused connection and was sent again');
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
    location = /ping {
        return 200 "pong\n";
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block, "session_expiry_sweep_interval 1s;\n"
                           . "session_webhook_allow_private on;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;

    check_init($block, \%checks);

    ping_request($block);
});


run_tests();

__DATA__

=== TEST 1: image.uploaded, session.completed and session.expired, signed
--- check: delivery
--- no_error_log
[error]
[alert]



=== TEST 2: a 500, then success on the retry 1 s later
--- check: retry
--- no_error_log
[error]
[alert]



=== TEST 3: a 302 is a failure and is not followed
--- check: redirect
--- no_error_log
[error]
[alert]



=== TEST 4: session_webhook_max_attempts 3: failed, listed, retried by hand
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_max_attempts 3;
--- check: max_attempts
--- error_log eval
qr/\[warn\] .*session webhook: event \S+ to "[^"]+" failed after 3 attempts: answered 503/
--- no_error_log
[error]
[alert]



=== TEST 5: sessionctl webhook list and retry refusals
--- check: sessionctl
--- no_error_log
[error]
[alert]



=== TEST 6: session_webhook_timeout 1s against a receiver that never answers
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_timeout 1s;
--- check: timeout
--- no_error_log
[error]
[alert]



=== TEST 7: allow_private off: private addresses are refused at connect time
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT ipv6=off;
--- check: private
--- no_error_log
[error]
[alert]



=== TEST 8: allow_private on: a host name is resolved and delivered
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT ipv6=off;
--- check: dns
--- no_error_log
[error]
[alert]
no "resolver"



=== TEST 9: no resolver: host names fail with a clear last_error
--- check: no_resolver
--- error_log
no "resolver" in the http block: webhooks to host names will fail
--- no_error_log
[error]
[alert]



=== TEST 10: a receiver that is down at first gets the event later
--- check: down_then_up
--- no_error_log
[error]
[alert]



=== TEST 11: two workers and a second nginx: every event sent once
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_concurrency 4;
--- check: race
--- no_error_log
[error]
[alert]



=== TEST 12: the database goes away while an event is queued
--- http_config
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_timeout 1s;
    session_webhook_allow_private on;
--- check: outage
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 13: https with the test CA trusted: SNI and host name checked
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_trusted_certificate $TEST_NGINX_CA;
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT ipv6=off;
--- check: https
--- no_error_log
[error]
[alert]



=== TEST 14: https with the system's trust store: the test CA is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    resolver 127.0.0.1:$TEST_NGINX_DNS_PORT ipv6=off;
--- check: https_untrusted
--- no_error_log
[error]
[alert]



=== TEST 15: session_status: queue depth and age of the oldest due event
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_concurrency 1;
    session_webhook_timeout 3s;
--- check: queue
--- no_error_log
[error]
[alert]



=== TEST 16: nginx stops and starts during a send: the event survives
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 1s;
    session_webhook_allow_private on;
    session_webhook_timeout 2s;
--- check: restart
--- no_error_log
[error]
[alert]



=== TEST 17: a reload during a send: no loss, no second send meanwhile
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 1s;
    session_webhook_allow_private on;
    session_webhook_timeout 2s;
--- check: reload
--- no_error_log
[error]
[alert]



=== TEST 18: connections to a receiver are reused
--- check: keepalive
--- no_error_log
[error]
[alert]



=== TEST 19: session_webhook_timeout 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_timeout 0;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_timeout" directive must be between 1ms and 2147483647ms \(24d\) in \S+nginx\.conf:\d+$/



=== TEST 20: session_webhook_timeout abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_timeout abc;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_timeout" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 21: session_webhook_max_attempts 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_max_attempts 0;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_max_attempts" directive must be between 1 and 100 in \S+nginx\.conf:\d+$/



=== TEST 22: session_webhook_max_attempts 101
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_max_attempts 101;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_max_attempts" directive must be between 1 and 100 in \S+nginx\.conf:\d+$/



=== TEST 23: session_webhook_max_attempts x
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_max_attempts x;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_max_attempts" directive invalid number in \S+nginx\.conf:\d+$/



=== TEST 24: session_webhook_max_attempts twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_max_attempts 3;
    session_webhook_max_attempts 4;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_max_attempts" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 25: session_webhook_concurrency 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_concurrency 0;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_concurrency" directive must be between 1 and 4096 in \S+nginx\.conf:\d+$/



=== TEST 26: session_webhook_trusted_certificate that does not exist
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_trusted_certificate /nonexistent/ca.pem;
--- must_die
--- error_log eval
qr/\[emerg\] .*cannot load "session_webhook_trusted_certificate" "\/nonexistent\/ca\.pem" in \S+nginx\.conf:\d+ \(SSL:/



=== TEST 27: session_webhook_timeout in a server block
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    session_webhook_timeout 2s;
    location /api/ { session_api; }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_webhook_timeout" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 28: interim answers, a long reason phrase, endless interim answers, a 101
--- check: answer_heads
--- no_error_log
[alert]



=== TEST 29: the error log escapes a webhook URL's '"', '\' and control bytes
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    session_webhook_max_attempts 1;
--- check: log_escape
--- error_log eval
[qr/\[warn\] .*session webhook: event \S+ to "http:\/\/127\.0\.0\.1:\d+\/status\/503\/t015-[\d-]+\?q=\\x22x\\x5Cy" failed after 1 attempts: answered 503$/,
 qr/\[warn\] .*session webhook: event \S+ to "http:\/\/127\.0\.0\.1:\d+\/log\/t015-[\d-]+\\x0A2026\/01\/01 00:00:00 \[warn\] 1#1: forged\\x22" failed after 1 attempts: webhook_url is not a valid URL$/]
--- no_error_log eval
[qr/^2026\/01\/01 00:00:00 \[warn\] 1#1: forged/, '[error]', '[alert]']
