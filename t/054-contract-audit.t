# Statements of the contract (docs/api.md) that no
# other script checked, found by an audit of the contract line by line
# against t/*.t:
#
#   - stage 5 in its order: another project's expired session is 403,
#     an expired session is 410 before the operation's 409 (upload into
#     a completed session, ack of an acknowledged image) and before the
#     poll's "all images are acknowledged";
#   - the session list's status filter reads the status a session has
#     now: a session past expires_at (not yet swept) is "expired", not
#     "open" nor "completed";
#   - every answer from stage 2 on carries the X-RateLimit-* headers:
#     201, 200, 304, 400, 403 (another project, the plan), 404, 409,
#     410, 413 (both bodies), 415, 429 (the quota);
#   - Idempotency-Key: the path compared is the normalised one (merged
#     slashes replay), the query string as received; "visible ASCII" is
#     0x21 ... 0x7e, every one of them, and no other byte;
#   - an image's media type is compared lower-case without parameters
#     (IMAGE/PNG; x=y is image/png), and the stored type is what the
#     download and the image say;
#   - a poll's images stay until acknowledged (at-least-once), also in a
#     completed session, which answers 200 while one is left;
#   - the monthly quota counts the current UTC calendar month only;
#   - a 200 of the API is that 200 whatever conditional headers come
#     with it (If-Match, If-Unmodified-Since, If-None-Match: *): nginx
#     would answer 412 or 304 after an acknowledgement or a completion
#     was done (found by a black-box audit); the image's content keeps
#     its 304;
#   - a query parameter's name or value with a malformed escape ("%" not
#     followed by two hex digits) is taken as written and refused, not
#     read with the "%" dropped ("li%mit" is no "limit").
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT error_body api_request raw_http check_init
                    listening long_poll_session png_upload random_key);
use IO::Select ();
use IO::Socket::INET ();

our $TAG = sprintf 't054-%d-%d', $$, time;

our (%KEY, %PROJECT, %ACCOUNT);

{
    sessionctl_ok('plan', 'set', "$TAG-q1", '--quota', '1', '--features',
                  'long_poll');

    my %fix = (MAIN => 'pro', OTHER => 'pro', FREE => 'free',
               LIST => 'pro', Q1 => "$TAG-q1");

    for my $name (sort keys %fix) {
        my $f = fixture(plan => $fix{$name}, name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $ACCOUNT{$name} = $f->{account_id};
    }
}

our $EXPIRED = error_body(410, 'Gone', 'session has expired');
our $FORBIDDEN = error_body(403, 'Forbidden',
                            'session belongs to another project');
our $MALFORMED = error_body(400, 'Bad Request',
                            'Idempotency-Key is malformed');

my $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

sub api { return api_request(@_[0 .. 4], { timeout => 30 }) }

sub create { return long_poll_session($KEY{ $_[0] // 'MAIN' }) }

sub upload { return png_upload($KEY{MAIN}, $_[0]) }

sub path_of { "/api/v1/sessions/$_[0]" }

# the session past its expires_at, as if its time had run out a moment
# ago and the sweep had not come yet (its status column still as it was)
sub expire {
    my ($sid) = @_;
    psql(q{UPDATE sessions SET created_at = created_at - interval '2 hours',}
         . q{ expires_at = now() - interval '1 second'}
         . ' WHERE id = ' . sql_quote($sid));
}

sub ack {
    my ($sid, $iid) = @_;
    return api('POST', path_of($sid) . "/images/$iid/ack", $KEY{MAIN});
}

sub poll_now {
    my ($sid, $key) = @_;
    return api('GET', path_of($sid) . '/poll?timeout=0', $KEY{$key // 'MAIN'});
}

sub list_ids {
    my ($key, $query) = @_;
    my (@ids, $cursor);

    for (;;) {
        my $q = $query . (defined $cursor ? "&cursor=$cursor" : '');
        my $r = api('GET', "/api/v1/sessions?$q", $KEY{$key});
        die "list: $r->{status} $r->{content}\n" unless $r->{status} == 200;
        push @ids, map { [$_->{id}, $_->{status}] } @{ $r->{json}{data} };
        last unless $r->{json}{has_more};
        $cursor = $r->{json}{next_cursor};
    }

    return @ids;
}


# --- the checks -----------------------------------------------------------

my %checks;

# stage 5: session (unknown, another project, expired) before the
# operation's own 409/410
$checks{stage5} = sub {
    my ($name) = @_;

    # completed, its one image acknowledged, then expired
    my $sid = create();
    my $img = upload($sid);
    is(ack($sid, $img->{id})->{status}, 200, "$name - ack");
    is(api('POST', path_of($sid) . '/complete', $KEY{MAIN})->{status}, 200,
       "$name - complete");

    my $r = poll_now($sid);
    is($r->{status}, 410, "$name - before expiry: the poll is finished");

    expire($sid);

    $r = api('POST', path_of($sid) . '/images', $KEY{MAIN}, $PNG,
             { 'Content-Type' => 'image/png' });
    is($r->{status}, 410, "$name - upload into a completed, expired session");
    is($r->{content}, $EXPIRED, "$name - upload: session has expired, not 409");

    $r = ack($sid, $img->{id});
    is($r->{status}, 410, "$name - ack of an acknowledged image, expired");
    is($r->{content}, $EXPIRED, "$name - ack: session has expired, not 409");

    $r = poll_now($sid);
    is($r->{content}, $EXPIRED,
       "$name - poll: session has expired, not all images are acknowledged");

    $r = api('POST', path_of($sid) . '/complete', $KEY{MAIN});
    is($r->{content}, $EXPIRED, "$name - complete again: expired");

    # another project: 403 before 410, on every route of the session
    for my $c (['GET', ''], ['POST', '/complete'], ['GET', '/images'],
               ['GET', "/images/$img->{id}"],
               ['GET', "/images/$img->{id}/content"],
               ['POST', "/images/$img->{id}/ack"], ['GET', '/poll'])
    {
        $r = api($c->[0], path_of($sid) . $c->[1], $KEY{OTHER});
        is($r->{content}, $FORBIDDEN,
           "$name - another project, expired: $c->[0] $c->[1] is 403");
    }

    $r = api('POST', path_of($sid) . '/images', $KEY{OTHER}, $PNG,
             { 'Content-Type' => 'image/png' });
    is($r->{content}, $FORBIDDEN,
       "$name - another project, expired: upload is 403");
};


# the list's status filter and every document read the status of now
$checks{list_status} = sub {
    my ($name) = @_;

    my $open = create('LIST');
    my $done = create('LIST');
    my $late_open = create('LIST');
    my $late_done = create('LIST');

    for my $sid ($done, $late_done) {
        my $r = api('POST', path_of($sid) . '/complete', $KEY{LIST});
        die "complete: $r->{status}\n" unless $r->{status} == 200;
    }

    # the sweep held off by its advisory lock (src/sql/005_expiry_sweep.sql),
    # so that the rows keep the status they were written with while the
    # documents are read: a sweep between expire() and the reads (every
    # 5 s by default) made "the rows not swept yet" fail now and then
    my $sweep = psql_begin('SELECT pg_advisory_xact_lock(8315179226771058804)',
                           q{SELECT count(*) FROM pg_locks}
                           . q{ WHERE locktype = 'advisory' AND granted}
                           . q{ AND classid = 1936028531}
                           . q{ AND objid = 2003136628});

    my $ok = eval {
        expire($_) for $late_open, $late_done;

        # a sweep now (as a worker's) does not run: the lock is held
        is(psql('SELECT ran FROM session_sweep(500)'), 'f',
           "$name - (the sweep is held off)");

        is(psql('SELECT string_agg(status, \',\' ORDER BY status DESC)'
                . ' FROM sessions WHERE id IN (' . sql_quote($late_open) . ', '
                . sql_quote($late_done) . ')'), 'open,completed',
           "$name - (the rows not swept yet)");

        my %want = (open => [$open], completed => [$done],
                    expired => [$late_done, $late_open]);

        for my $status (sort keys %want) {
            my @got = list_ids('LIST', "status=$status&limit=1");
            my @sids = sort map { $_->[0] } @got;
            is_deeply(\@sids, [sort @{ $want{$status} }],
                      "$name - status=$status: the sessions whose status is"
                      . " $status now");
            is_deeply([grep { $_->[1] ne $status } @got], [],
                      "$name - status=$status: each says so");
        }

        my %all = map { $_->[0] => $_->[1] } list_ids('LIST', 'limit=100');
        is($all{$late_open}, 'expired', "$name - unfiltered: the open one past"
                                        . ' expires_at is expired');
        is($all{$late_done}, 'expired', "$name - unfiltered: the completed one"
                                        . ' past expires_at is expired');
        1;
    };
    my $err = $@;

    psql_end($sweep, 'ROLLBACK');

    die $err unless $ok;
};


# X-RateLimit-* on every answer from stage 2 on
$checks{rl_headers} = sub {
    my ($name) = @_;

    my $sid = create();
    my $img = upload($sid);
    my $done = create();
    api('POST', path_of($done) . '/complete', $KEY{MAIN});
    my $gone = create();
    expire($gone);

    my $big = encode_json({ delivery_mode => 'long_poll',
                            pad => 'x' x 70000 });

    my @cases = (
        [201, 'create', 'POST', '/api/v1/sessions', 'MAIN',
         '{"delivery_mode": "long_poll"}'],
        [200, 'get', 'GET', path_of($sid), 'MAIN'],
        [200, 'list', 'GET', '/api/v1/sessions?limit=1', 'MAIN'],
        [200, 'poll', 'GET', path_of($sid) . '/poll?timeout=0', 'MAIN'],
        [304, 'content, If-None-Match', 'GET',
         path_of($sid) . "/images/$img->{id}/content", 'MAIN', undef,
         { 'If-None-Match' => qq{"$img->{sha256}"} }],
        [400, 'a bad body', 'POST', '/api/v1/sessions', 'MAIN', '{}'],
        [400, 'a bad query', 'GET', '/api/v1/sessions?limit=0', 'MAIN'],
        [403, 'another project', 'GET', path_of($sid), 'OTHER'],
        [403, 'the plan', 'POST', '/api/v1/sessions', 'FREE',
         '{"delivery_mode": "webhook", "webhook_url": "https://e.com/"}'],
        [404, 'session not found', 'GET',
         '/api/v1/sessions/00000000-0000-4000-8000-000000000000', 'MAIN'],
        [409, 'upload, completed', 'POST', path_of($done) . '/images',
         'MAIN', $PNG, { 'Content-Type' => 'image/png' }],
        [410, 'expired', 'GET', path_of($gone), 'MAIN'],
        [413, 'a sessions body over 64 KiB', 'POST', '/api/v1/sessions',
         'MAIN', $big],
        [413, 'an image over the limit', 'POST', path_of($sid) . '/images',
         'MAIN', $PNG . ('x' x 2048), { 'Content-Type' => 'image/png' }],
        [415, 'JSON endpoint', 'POST', '/api/v1/sessions', 'MAIN',
         '{"delivery_mode": "long_poll"}', { 'Content-Type' => 'text/plain' }],
        [415, 'upload', 'POST', path_of($sid) . '/images', 'MAIN', $PNG,
         { 'Content-Type' => 'text/plain' }],
    );

    for my $c (@cases) {
        my ($status, $what, $m, $path, $who, $body, $h) = @$c;
        my $r = api($m, $path, $KEY{$who}, $body, $h);
        is($r->{status}, $status, "$name - $what: $status");

        for my $hdr (qw(x-ratelimit-limit x-ratelimit-remaining
                        x-ratelimit-reset))
        {
            like($r->{headers}{$hdr} // 'none', qr/^\d+$/,
                 "$name - $what: $hdr");
        }
    }

    # stage 6's 429: the quota of a plan that allows one session a month
    my @r = map { api('POST', '/api/v1/sessions', $KEY{Q1},
                      '{"delivery_mode": "long_poll"}') } 1 .. 2;
    is($r[1]{status}, 429, "$name - over the quota: 429");
    like($r[1]{headers}{'x-ratelimit-remaining'} // 'none', qr/^\d+$/,
         "$name - quota 429: X-RateLimit-Remaining");
};


# the quota counts this UTC month only: last month's use does not count
$checks{quota_month} = sub {
    my ($name) = @_;

    my $acct = sql_quote($ACCOUNT{Q1});

    psql('DELETE FROM monthly_usage WHERE account_id = ' . $acct);
    psql('INSERT INTO monthly_usage (account_id, month, sessions_created)'
         . " VALUES ($acct, (date_trunc('month', now() AT TIME ZONE 'UTC')"
         . " - interval '1 month')::date, 1)");

    my $r = api('POST', '/api/v1/sessions', $KEY{Q1},
                '{"delivery_mode": "long_poll"}');
    is($r->{status}, 201, "$name - last month's session leaves this month's");

    $r = api('POST', '/api/v1/sessions', $KEY{Q1},
             '{"delivery_mode": "long_poll"}');
    is($r->{status}, 429, "$name - this month's one used: 429");
    is($r->{content}, error_body(429, 'Too Many Requests',
                                 'monthly session quota exceeded'),
       "$name - the message");

    is(psql('SELECT month FROM monthly_usage WHERE account_id = ' . $acct
            . ' AND sessions_created = 1 ORDER BY month DESC LIMIT 1'),
       psql(q{SELECT date_trunc('month', now() AT TIME ZONE 'UTC')::date}),
       "$name - counted in the row of this UTC month");
};


# Idempotency-Key: the normalised path; the query as received; the bytes
$checks{idem} = sub {
    my ($name) = @_;

    my $body = '{"delivery_mode": "long_poll"}';
    my $k = "$TAG-path";

    my $r1 = api('POST', '/api/v1/sessions', $KEY{MAIN}, $body,
                 { 'Idempotency-Key' => $k });
    is($r1->{status}, 201, "$name - first: 201");

    my $r2 = api('POST', '//api//v1///sessions', $KEY{MAIN}, $body,
                 { 'Idempotency-Key' => $k });
    is($r2->{status}, 201, "$name - merged slashes: the same request");
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - merged slashes: a replay");
    is($r2->{content}, $r1->{content}, "$name - merged slashes: same body");

    # the query as received: %41 and A are two requests
    $k = "$TAG-query";
    $r1 = api('POST', '/api/v1/sessions?x=%41', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => $k });
    is($r1->{status}, 400, "$name - query: an unknown parameter, 400");
    $r2 = api('POST', '/api/v1/sessions?x=%41', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => $k });
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - query: the same bytes replay");
    $r2 = api('POST', '/api/v1/sessions?x=A', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => $k });
    is($r2->{status}, 422, "$name - query: decoded the same, received"
                           . ' otherwise: another request');

    # every visible ASCII character, in one key
    my $all = join '', map { chr } 0x21 .. 0x7e;
    $r1 = api('POST', '/api/v1/sessions', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => $all });
    is($r1->{status}, 201, "$name - every visible ASCII character: 201");
    $r2 = api('POST', '/api/v1/sessions', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => $all });
    is($r2->{headers}{'idempotent-replayed'}, 'true',
       "$name - every visible ASCII character: replayed");

    # one character: the shortest
    $r1 = api('POST', '/api/v1/sessions', $KEY{MAIN}, $body,
              { 'Idempotency-Key' => '~' });
    is($r1->{status}, 201, "$name - a key of one character: 201");

    # DEL, a tab inside, a byte of Latin-1: not visible ASCII
    for my $c (["\x7f", 'DEL'], ["a\tb", 'a tab inside'],
               ["a\xe9", 'a Latin-1 byte'])
    {
        my ($bad, $what) = @$c;
        my $r = raw_http("POST /api/v1/sessions HTTP/1.1\r\n"
                         . "Host: localhost\r\nConnection: close\r\n"
                         . "Authorization: Bearer $KEY{MAIN}\r\n"
                         . "Content-Type: application/json\r\n"
                         . "Idempotency-Key: $bad\r\n"
                         . 'Content-Length: ' . length($body) . "\r\n\r\n"
                         . $body);
        is($r->{status}, 400, "$name - $what: 400");
        is($r->{content}, $MALFORMED, "$name - $what: malformed");
    }
};


# an image's media type: lower-case, without parameters
$checks{media_type} = sub {
    my ($name) = @_;

    my $sid = create();
    my $r = api('POST', path_of($sid) . '/images', $KEY{MAIN}, $PNG,
                { 'Content-Type' => 'IMAGE/Png ; name=x' });
    is($r->{status}, 201, "$name - IMAGE/Png with a parameter: 201");
    is($r->{json}{content_type}, 'image/png', "$name - stored as image/png");

    my $c = api('GET', path_of($sid) . "/images/$r->{json}{id}/content",
                $KEY{MAIN});
    is($c->{status}, 200, "$name - content: 200");
    is($c->{headers}{'content-type'}, 'image/png',
       "$name - content: Content-Type image/png");
    is($c->{headers}{'content-length'}, length $PNG,
       "$name - content: Content-Length");
    is($c->{headers}{etag}, qq{"$r->{json}{sha256}"}, "$name - content: ETag");
    is($c->{content}, $PNG, "$name - content: the bytes");
};


# the poll's images stay until acknowledged; a completed session with
# one left answers 200
$checks{at_least_once} = sub {
    my ($name) = @_;

    my $sid = create();
    my @img = map { upload($sid) } 1 .. 3;
    my @ids = map { $_->{id} } @img;

    my $ids = sub { [map { $_->{id} } @{ $_[0]{json}{images} || [] }] };

    my $r = poll_now($sid);
    is_deeply($ids->($r), \@ids, "$name - three images, oldest first");
    is($r->{json}{session}{id}, $sid, "$name - with the session");
    is($r->{json}{session}{image_count}, 3, "$name - its image_count");

    $r = poll_now($sid);
    is_deeply($ids->($r), \@ids, "$name - polled again: the same three");

    is(ack($sid, $ids[1])->{status}, 200, "$name - ack the second");
    $r = poll_now($sid);
    is_deeply($ids->($r), [@ids[0, 2]], "$name - the two not acknowledged");

    is(api('POST', path_of($sid) . '/complete', $KEY{MAIN})->{status}, 200,
       "$name - complete");
    $r = poll_now($sid);
    is($r->{status}, 200, "$name - completed, two left: 200");
    is_deeply($ids->($r), [@ids[0, 2]], "$name - completed: the two");

    ack($sid, $_) for @ids[0, 2];
    $r = poll_now($sid);
    is($r->{status}, 410, "$name - completed, all acknowledged: 410");
    is($r->{content}, error_body(410, 'Gone', 'all images are acknowledged'),
       "$name - the message");
};


# If-None-Match in the forms a client (or a cache) sends: a list with the
# tag in it, the tag marked weak (If-None-Match compares weakly)
$checks{etag_forms} = sub {
    my ($name) = @_;

    my $sid = create();
    my $img = upload($sid);
    my $path = path_of($sid) . "/images/$img->{id}/content";
    my $tag = qq{"$img->{sha256}"};

    for my $c ([$tag, 'the tag'], [qq{"abc", $tag}, 'a list with the tag'],
               ["W/$tag", 'the tag marked weak'])
    {
        my $r = api('GET', $path, $KEY{MAIN}, undef,
                    { 'If-None-Match' => $c->[0] });
        is($r->{status}, 304, "$name - $c->[1]: 304");
        is($r->{content} // '', '', "$name - $c->[1]: no body");
        is($r->{headers}{etag}, $tag, "$name - $c->[1]: the ETag");
    }

    my $r = api('GET', $path, $KEY{MAIN}, undef,
                { 'If-None-Match' => qq{"abc", "def"} });
    is($r->{status}, 200, "$name - a list without it: 200");
};


# every 200 of the API with conditional headers that its documents (no
# ETag, no Last-Modified) cannot meet: still 200, the document, the
# X-RateLimit-* headers; the acknowledgement and the completion done once
$checks{conditional} = sub {
    my ($name) = @_;

    my @cond = (['If-Match', '"x"'],
                ['If-Unmodified-Since', 'Sat, 28 Nov 2020 00:00:00 GMT'],
                ['If-None-Match', '*']);

    for my $c (@cond) {
        my ($h, $v) = @$c;
        my $sid = create();
        my $img = upload($sid);
        my $p = path_of($sid);

        for my $req (['GET', '/api/v1/sessions?limit=1', 'list'],
                     ['GET', $p, 'session'],
                     ['GET', "$p/images", 'image list'],
                     ['GET', "$p/images/$img->{id}", 'image'],
                     ['GET', "$p/poll?timeout=0", 'poll'],
                     ['POST', "$p/images/$img->{id}/ack", 'ack'],
                     ['POST', "$p/complete", 'complete'])
        {
            my ($m, $path, $what) = @$req;
            my $r = api($m, $path, $KEY{MAIN}, undef, { $h => $v });

            is($r->{status}, 200, "$name - $h: $what: 200");
            ok(ref $r->{json} eq 'HASH', "$name - $h: $what: the document");
            ok(defined $r->{headers}{'x-ratelimit-limit'},
               "$name - $h: $what: X-RateLimit-Limit");
        }

        my $r = api('GET', "$p/images/$img->{id}", $KEY{MAIN});
        ok($r->{json}{acknowledged}, "$name - $h: the image acknowledged");
        is(api('GET', $p, $KEY{MAIN})->{json}{status}, 'completed',
           "$name - $h: the session completed");
    }

    # the content has its ETag: If-None-Match: * is a 304 there
    my $sid = create();
    my $img = upload($sid);
    my $content = path_of($sid) . "/images/$img->{id}/content";
    my $r = api('GET', $content, $KEY{MAIN}, undef,
                { 'If-None-Match' => '*' });
    is($r->{status}, 304, "$name - the content with If-None-Match: *: 304");

    # and If-Match or If-Unmodified-Since are not evaluated there: the
    # bytes never change (docs/api.md §5.8); the 412 nginx would answer
    # is none of the API's, and came without the rate limit's headers
    for my $c (['If-Match', '"x"'], ['If-Match', qq{W/"$img->{sha256}"}],
               ['If-Unmodified-Since', 'Thu, 01 Jan 2099 00:00:00 GMT'],
               ['If-Unmodified-Since', 'Sat, 28 Nov 2020 00:00:00 GMT'])
    {
        my ($h, $v) = @$c;

        for my $m ('GET', 'HEAD') {
            my $got = api($m, $content, $KEY{MAIN}, undef, { $h => $v });

            is($got->{status}, 200, "$name - the content, $m, $h: $v: 200");
            is($got->{headers}{etag}, qq{"$img->{sha256}"},
               "$name - the content, $m, $h: $v: the ETag");
            ok(defined $got->{headers}{'x-ratelimit-limit'},
               "$name - the content, $m, $h: $v: X-RateLimit-Limit");
        }
    }
};

# "Expect: 100-continue": the headers alone, then what the server says
# before the body would be sent (until it closes, or WAIT seconds); with
# BODY, once "100 Continue" came, the body too and the rest of the answer
sub expecting {
    my ($head, $wait, $body) = @_;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp', Timeout => 5)
        or die "connect: $!";
    my $sel = IO::Select->new($s);
    my ($got, $sent) = ('', 0);
    my $deadline = Time::HiRes::time() + $wait;

    syswrite $s, $head;

    while (Time::HiRes::time() < $deadline) {
        if (defined $body && !$sent && $got =~ m{\AHTTP/1\.1 100 [^\r]*\r\n\r\n}) {
            syswrite $s, $body;
            $sent = 1;
        }

        last if defined $body && $got =~ m{\r\n\r\n\{.*\}\z}s;
        next unless $sel->can_read(0.05);

        my $n = sysread $s, my $chunk, 65536;
        last unless $n;
        $got .= $chunk;
    }

    close $s;

    return $got;
}

# a refusal before the body is read does not ask for the body with
# "100 Continue", and says that the connection closes; an upload that
# is taken gets "100 Continue", then its 201
$checks{expect_continue} = sub {
    my ($name) = @_;

    my $sid = create();
    my $p = path_of($sid);
    my $key = $KEY{MAIN};
    my $head = sub {
        my ($path, $auth, $type, $len) = @_;
        return "POST $path HTTP/1.1\r\nHost: localhost\r\n"
               . ($auth ? "Authorization: Bearer $auth\r\n" : '')
               . "Content-Type: $type\r\nContent-Length: $len\r\n"
               . "Expect: 100-continue\r\n\r\n";
    };

    for my $c (["$p/images", $key, 'image/png', 2049, 413,
                'image exceeds 2048 bytes', 'too large'],
               ["$p/images", $key, 'text/plain', 100, 415,
                'unsupported image type: text/plain', 'wrong type'],
               ['/api/v1/sessions', random_key('sess'), 'application/json',
                30, 401, 'API key is invalid', 'unknown key'],
               ["$p/images?x=1", $key, 'image/png', 100, 400,
                'unknown query parameter: x', 'unknown parameter'])
    {
        my ($path, $auth, $type, $len, $status, $msg, $what) = @$c;
        my $got = expecting($head->($path, $auth, $type, $len), 10);

        unlike($got, qr{HTTP/1\.1 100 }, "$name - $what: no 100 Continue");
        like($got, qr{\AHTTP/1\.1 $status }, "$name - $what: $status");
        like($got, qr{\r\nConnection: close\r\n}i,
             "$name - $what: the connection closes");
        like($got, qr{"message": "\Q$msg\E"}, "$name - $what: the message");
    }

    my $got = expecting($head->("$p/images", $key, 'image/png', length $PNG),
                        10, $PNG);
    like($got, qr{\AHTTP/1\.1 100 Continue\r\n\r\nHTTP/1\.1 201 },
         "$name - a taken upload: 100 Continue, then 201");

    is(api('GET', $p, $KEY{MAIN})->{json}{image_count}, 1,
       "$name - only the taken upload is stored");
};

# a malformed escape in a query parameter's name or value: as written
$checks{escapes} = sub {
    my ($name) = @_;

    my $sid = create();
    my $p = path_of($sid);
    my $cursor = '';

    create() for 1 .. 2;
    my $page = api('GET', '/api/v1/sessions?limit=1', $KEY{MAIN});
    $cursor = $page->{json}{next_cursor} // '';
    ok(length $cursor, "$name - a cursor to spoil");

    my $limit = error_body(400, 'Bad Request',
                           'limit must be an integer between 1 and 100');
    my $unknown = sub {
        error_body(400, 'Bad Request', "unknown query parameter: $_[0]");
    };

    for my $c (['/api/v1/sessions?li%mit=2', $unknown->('li%mit')],
               ['/api/v1/sessions?limit=1%', $limit],
               ['/api/v1/sessions?limit=1%4', $limit],
               ['/api/v1/sessions?limit=%3', $limit],
               ['/api/v1/sessions?limit=1%zz', $limit],
               ['/api/v1/sessions?limit=2&x%=1', $unknown->('x%')],
               ['/api/v1/sessions?status=op%en',
                error_body(400, 'Bad Request',
                           'status must be one of: open, completed, expired')],
               ["/api/v1/sessions?cursor=$cursor%",
                error_body(400, 'Bad Request', 'cursor is invalid')],
               ["$p/images?acknowledged=tr%ue",
                error_body(400, 'Bad Request',
                           'acknowledged must be true or false')],
               ["$p/poll?ti%meout=0", $unknown->('ti%meout')])
    {
        my $r = api('GET', $c->[0], $KEY{MAIN});
        is($r->{status}, 400, "$name - $c->[0]: 400");
        is($r->{content}, $c->[1], "$name - $c->[0]: the message");
    }

    # well-formed escapes are still decoded, the two hex digits any case
    my $r = api('GET', '/api/v1/sessions?l%69mit=%31&status=op%65n',
                $KEY{MAIN});
    is($r->{status}, 200, "$name - well-formed escapes: 200");
    $r = api('GET', "/api/v1/sessions?limit=1&cursor=$cursor", $KEY{MAIN});
    is($r->{status}, 200, "$name - the cursor itself: 200");
};

# the image list's default limit, 100; the acknowledged filter with a
# cursor
$checks{image_pages} = sub {
    my ($name) = @_;

    my $sid = create();
    my @ids = map { upload($sid)->{id} } 1 .. 101;

    my $base = path_of($sid) . '/images';
    my $r = api('GET', $base, $KEY{MAIN});
    is(scalar @{ $r->{json}{data} || [] }, 100, "$name - default: 100");
    is_deeply([map { $_->{id} } @{ $r->{json}{data} }], [@ids[0 .. 99]],
              "$name - default: the first 100, ascending sequence");
    ok($r->{json}{has_more}, "$name - default: has_more");

    $r = api('GET', "$base?cursor=$r->{json}{next_cursor}", $KEY{MAIN});
    is_deeply([map { $_->{id} } @{ $r->{json}{data} }], [$ids[100]],
              "$name - the next page: the 101st");
    ok(!$r->{json}{has_more}, "$name - the next page: the last");

    # the even sequences acknowledged; acknowledged=true|false in pages
    ack($sid, $ids[$_]) for grep { $_ % 2 } 0 .. 100;

    for my $want (['true', [grep { $_ % 2 } 0 .. 100]],
                  ['false', [grep { !($_ % 2) } 0 .. 100]])
    {
        my ($v, $idx) = @$want;
        my (@got, $cursor, $pages);

        for (1 .. 20) {
            my $q = "acknowledged=$v&limit=7"
                    . (defined $cursor ? "&cursor=$cursor" : '');
            my $p = api('GET', "$base?$q", $KEY{MAIN});
            die "list: $p->{status}\n" unless $p->{status} == 200;
            $pages++;
            push @got, map { $_->{id} } @{ $p->{json}{data} };
            last unless $p->{json}{has_more};
            $cursor = $p->{json}{next_cursor};
        }

        is_deeply(\@got, [@ids[@$idx]],
                  "$name - acknowledged=$v, pages of 7: every one, in order");
        is($pages, int((@$idx + 6) / 7), "$name - acknowledged=$v: pages");
    }
};


# a query past session_db_timeout (its default, 5 s) after stage 2: 503
# with Retry-After: 1 and the X-RateLimit-* headers
$checks{db_timeout} = sub {
    my ($name) = @_;

    my $sid = create();

    # the key in the auth cache (5 s by default): stage 1 needs no query
    my $r = api('GET', path_of($sid), $KEY{MAIN});
    is($r->{status}, 200, "$name - the session");

    my $fh = psql_begin('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE',
                        q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
                        . q{ ON c.oid = l.relation WHERE c.relname = }
                        . q{'sessions' AND l.mode = 'AccessExclusiveLock'}
                        . q{ AND l.granted});

    $r = api('GET', path_of($sid), $KEY{MAIN});

    psql_end($fh, 'ROLLBACK');

    is($r->{status}, 503, "$name - 503");
    is($r->{content}, error_body(503, 'Service Unavailable',
                                 'database unavailable'), "$name - the body");
    is($r->{headers}{'content-type'}, 'application/json', "$name - JSON");
    is($r->{headers}{'retry-after'}, 1, "$name - Retry-After: 1");
    like($r->{headers}{'x-ratelimit-remaining'} // 'none', qr/^\d+$/,
         "$name - X-RateLimit-Remaining (stage 5)");
    ok($r->{elapsed} >= 4.5 && $r->{elapsed} < 7,
       sprintf('%s - after the default session_db_timeout, 5 s (%.2f s)',
               $name, $r->{elapsed}));

    my ($ok) = wait_until(10, 0.1, sub {
        api('GET', path_of($sid), $KEY{MAIN})->{status} == 200;
    });
    ok($ok, "$name - served again once the lock is gone");
};


# session_auth_cache_ttl's default, 5 s: a key deleted in SQL (no
# notification) is still served from the cache until its answer is 5 s
# old, and refused after
$checks{auth_ttl} = sub {
    my ($name) = @_;

    listening();

    my $f = fixture(plan => 'pro', name => "$TAG-ttl");
    my $path = '/api/v1/sessions?limit=1';

    my $t0 = Time::HiRes::time();
    is(api('GET', $path, $f->{key})->{status}, 200, "$name - the key works");

    psql('UPDATE api_keys SET deleted_at = now() WHERE id = '
         . sql_quote($f->{key_id}));

    my $r = api('GET', $path, $f->{key});
    my $t1 = Time::HiRes::time();
    is($r->{status}, 200, "$name - the cached answer is reused")
        if $t1 - $t0 < 4;

    my ($gone) = wait_until(10, 0.05, sub {
        api('GET', $path, $f->{key})->{status} == 401;
    });
    my $elapsed = Time::HiRes::time() - $t0;

    ok($gone, "$name - refused once the cached answer expired");
    ok($elapsed >= 4.5 && $elapsed < 6.5,
       sprintf('%s - after about 5 s (%.2f s)', $name, $elapsed));
};


our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_image_max_size 2k;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config',
                      "    session_db \$TEST_NGINX_SESSION_DB_CONF;\n")
        unless defined $block->http_config;
    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY{MAIN}\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: stage 5 in order: another project, then expiry, then the operation's 409/410
--- check: stage5
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: the list's status filter reads the status of now
--- check: list_status
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: X-RateLimit-* on every answer from stage 2 on
--- check: rl_headers
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: the monthly quota counts this UTC month only
--- check: quota_month
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: Idempotency-Key: normalised path, query as received, visible ASCII
--- check: idem
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: an image's media type: lower-case, without parameters
--- check: media_type
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: the poll's images stay until acknowledged
--- check: at_least_once
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: If-None-Match: a list with the tag, the tag marked weak
--- check: etag_forms
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: the image list's default limit is 100; acknowledged with a cursor
--- check: image_pages
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: a query past the default session_db_timeout (5 s) in stage 5: 503, Retry-After, X-RateLimit-*
--- check: db_timeout
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 15
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 11: session_auth_cache_ttl's default is 5 s
--- check: auth_ttl
--- debug_log: the "session listen: listening" lines
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- timeout: 15
--- no_error_log
[error]



=== TEST 12: conditional headers do not turn the API's 200s into 412 or 304
--- check: conditional
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 13: a malformed percent-escape in the query: as written, refused
--- check: escapes
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 14: Expect: 100-continue: no 100 before a refusal, and the connection closes
--- check: expect_continue
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
