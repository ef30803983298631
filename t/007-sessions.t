# The sessions endpoints (docs/api.md §1, §4, §5 and §10):
#
#     POST /api/v1/sessions                     create: 415, 413, 400 in the
#                                               order of the table, plan 403,
#                                               monthly quota 429, 201
#     GET  /api/v1/sessions                     list: project, order, limit,
#                                               status, cursor
#     GET  /api/v1/sessions/{sid}               get: 404, 403, 410
#     POST /api/v1/sessions/{sid}/complete      complete: idempotent
#
# Error bodies are compared as exact strings.  A session body is parsed
# and compared field by field: session_shape() turns it into canonical JSON
# in which the id is "<uuid>" when it is a lower-case UUID, a timestamp
# "<ts>" when it is RFC 3339 UTC with seconds, the project id the name of
# the fixture it belongs to, plus "expires_at - created_at" in seconds;
# session() writes what a block expects in the same form.
#
# Blocks whose checks need Perl (many requests, concurrency, the clock,
# comparing one answer with another) say "--- check: NAME": the check runs
# against the nginx that Test::Nginx started for the block (from --- init,
# after the start and before the block's own request).
#
# Every fixture (plans, accounts, projects, keys, sessions inserted with
# SQL) is made here with names of its own, so that this script neither
# sees nor disturbs what other scripts make in the same database.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET ();
use Time::HiRes ();
use Time::Local ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT error_body api_request raw_http burst check_init
                    db_http_config key_headers);

our (%KEY, %PROJECT, %NAME_OF, @BULK, @TIES);

our $TAG = sprintf 't007-%d-%d', $$, time;

our $UUID = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

{
    my %plan = (
        # webhook only: long_poll is refused, no quota
        nolp => ['--features', 'webhook'],
        # the race for the last sessions of a month
        q10  => ['--quota', '10', '--features', 'long_poll'],
        # no session at all; webhook is not in the plan either
        q0   => ['--quota', '0', '--features', 'long_poll'],
    );

    for my $p (sort keys %plan) {
        sessionctl_ok('plan', 'set', "$TAG-$p", @{ $plan{$p} });
    }

    my %fix = (
        PRO   => 'pro',            # validation, create, get, complete
        FREE  => 'free',           # seeded: long_poll only
        NOLP  => "$TAG-nolp",
        Q10   => "$TAG-q10",
        Q0    => "$TAG-q0",
        LIST  => 'pro',            # the list checks
        PAGE  => 'pro',            # pagination while sessions are created
        TIES  => 'pro',            # equal created_at, order by id
        BULK  => 'pro',            # 120 sessions, for limit=100
        EXP   => 'pro',            # expiry
    );

    for my $name (sort keys %fix) {
        my $f = fixture(plan => $fix{$name}, name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $PROJECT{"$name.account"} = $f->{account_id};
    }

    # more projects of existing accounts: same account, another project
    for my $more (['OTHER', 'PRO'], ['LIST2', 'LIST'], ['Q10B', 'Q10']) {
        my ($name, $of) = @$more;
        my $p = sessionctl_ok('project', 'create', $PROJECT{"$of.account"},
                              "$TAG-$name");
        $PROJECT{$name} = $p->{project_id};
        $KEY{$name} = sessionctl_ok('key', 'create', $p->{project_id})->{key};
    }

    %NAME_OF = map { $PROJECT{$_} => $_ } grep { !/\./ } keys %PROJECT;

    # BULK: 120 sessions one second apart, newest first in @BULK
    @BULK = psql('INSERT INTO sessions (project_id, delivery_mode, '
                 . 'created_at, expires_at) '
                 . 'SELECT ' . sql_quote($PROJECT{BULK}) . q{, 'long_poll', }
                 . q{now() - i * interval '1 second', }
                 . q{now() + interval '1 day' }
                 . 'FROM generate_series(1, 120) AS i '
                 . 'ORDER BY i RETURNING id');

    # TIES: three sessions at T, two at T + 1 us, two at T - 1 us; in
    # @TIES in the order of the API: created_at, then id, both descending
    psql('INSERT INTO sessions (project_id, delivery_mode, created_at, '
         . 'expires_at) SELECT ' . sql_quote($PROJECT{TIES})
         . q{, 'long_poll', t, t + interval '1 day' FROM (VALUES }
         . q{(0), (0), (0), (1), (1), (-1), (-1)) AS d(us), }
         . q{LATERAL (SELECT date_trunc('second', now()) }
         . q{+ d.us * interval '1 microsecond' AS t) AS x});

    @TIES = psql('SELECT id FROM sessions WHERE project_id = '
                 . sql_quote($PROJECT{TIES})
                 . ' ORDER BY created_at DESC, id DESC');

    die "fixtures: expected 120 and 7 sessions, got " . @BULK . " and "
        . @TIES unless @BULK == 120 && @TIES == 7;
}


# --- expected answers ---------------------------------------------------

sub bad { error_body(400, 'Bad Request', $_[0]) }

our $NOT_FOUND = error_body(404, 'Not Found', 'session not found');
our $FORBIDDEN = error_body(403, 'Forbidden',
                            'session belongs to another project');
our $EXPIRED = error_body(410, 'Gone', 'session has expired');
our $QUOTA = error_body(429, 'Too Many Requests',
                        'monthly session quota exceeded');
our $NO_WEBHOOK = error_body(403, 'Forbidden', 'plan does not allow webhook');
our $NO_LONG_POLL = error_body(403, 'Forbidden',
                               'plan does not allow long_poll');
our $MEDIA = error_body(415, 'Unsupported Media Type',
                        'Content-Type must be application/json');
our $TOO_LARGE = error_body(413, 'Payload Too Large',
                            'request body exceeds 65536 bytes');
our $NOT_OBJECT = bad('request body must be a JSON object');
our $ABSOLUTE = bad('webhook_url must be an absolute http or https URL');
our $PRIVATE = bad('webhook_url must not point to a private address');

sub expires_msg {
    my ($max) = @_;
    return bad("expires_in must be an integer between 1 and $max");
}

sub ts_epoch {
    my ($ts) = @_;

    return undef unless defined $ts
        && $ts =~ /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z$/;

    return Time::Local::timegm($6, $5, $4, $3, $2 - 1, $1);
}

# The canonical form of a session object (see the top of the file).
sub session_shape {
    my ($body) = @_;

    my $s = ref $body ? $body : eval { decode_json($body) };
    return "not a JSON object: " . ($body // 'undef') unless ref $s eq 'HASH';

    my %o = %$s;

    $o{id} = '<uuid>' if defined $o{id} && $o{id} =~ $UUID;

    $o{project_id} = $NAME_OF{$o{project_id}}
        if defined $o{project_id} && exists $NAME_OF{$o{project_id}};

    for my $k (qw(created_at expires_at completed_at)) {
        $o{$k} = '<ts>' if defined ts_epoch($o{$k});
    }

    my ($c, $e) = (ts_epoch($s->{created_at}), ts_epoch($s->{expires_at}));
    $o{'expires_at - created_at'} = defined $c && defined $e ? $e - $c : undef;

    return encode_json(\%o);
}

# session(project => 'PRO', mode => 'long_poll', url => undef,
#         ttl => 3600, status => 'open', completed => 0)
sub session {
    my (%o) = @_;

    return encode_json({
        id                        => '<uuid>',
        project_id                => $o{project} // 'PRO',
        delivery_mode             => $o{mode} // 'long_poll',
        webhook_url               => $o{url},
        status                    => $o{status} // 'open',
        image_count               => 0,
        acknowledged_count        => 0,
        created_at                => '<ts>',
        expires_at                => '<ts>',
        completed_at              => $o{completed} ? '<ts>' : undef,
        'expires_at - created_at' => $o{ttl} // 3600,
    });
}

our $LONG_URL = 'https://example.com/' . ('a' x 2028);     # 2048 bytes

# A body of exactly $n bytes: a valid create, padded with white space
# inside the object.  (Only for the checks: Test::Nginx trims a request
# body with a regular expression that takes minutes on long runs of
# white space.)
sub padded {
    my ($n) = @_;
    my $json = '{"delivery_mode": "long_poll"}';
    return substr($json, 0, -1) . (' ' x ($n - length $json)) . '}';
}

# A body of exactly $n bytes that would be a 400 (an unknown field) if it
# were read: a 413 for it is decided by its size alone.
sub big_unknown {
    my ($n) = @_;
    my $json = '{"delivery_mode": "long_poll", "pad": ""}';
    return substr($json, 0, -2) . ('x' x ($n - length $json)) . '"}';
}

# a chunked POST /api/v1/sessions of $body, in chunks of 8000 bytes
sub chunked_request {
    my ($body) = @_;

    my $req = "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
              . "Authorization: Bearer $KEY{PRO}\r\n"
              . "Content-Type: application/json\r\n"
              . "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

    for (my $i = 0; $i < length $body; $i += 8000) {
        my $chunk = substr $body, $i, 8000;
        $req .= sprintf("%x\r\n", length $chunk) . $chunk . "\r\n";
    }

    return $req . "0\r\n\r\n";
}


# --- helpers for the checks ---------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request
sub api { return api_request(@_) }

# creates a session; returns its decoded body, or dies
sub create {
    my ($key, $body) = @_;

    my $r = api('POST', '/api/v1/sessions', $key,
                $body // { delivery_mode => 'long_poll' });

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r->{json};
}

# GET /api/v1/sessions?$query: the decoded envelope, or dies
sub list {
    my ($key, $query) = @_;

    my $r = api('GET', '/api/v1/sessions'
                       . (defined $query && length $query ? "?$query" : ''),
                $key);

    die "list ?$query: $r->{status} $r->{content}\n"
        unless $r->{status} == 200 && ref $r->{json} eq 'HASH';

    return $r->{json};
}

# every page of a list: (the ids in the order received, the pages)
sub all_pages {
    my ($key, $query) = @_;

    my (@ids, @pages, $cursor);

    for (1 .. 200) {
        my $q = $query // '';
        $q .= ($q eq '' ? '' : '&') . "cursor=$cursor" if defined $cursor;

        my $page = list($key, $q);
        push @pages, $page;
        push @ids, map { $_->{id} } @{ $page->{data} };

        last unless $page->{has_more};
        $cursor = $page->{next_cursor};
        die "has_more without a next_cursor\n" unless defined $cursor;
    }

    return (\@ids, \@pages);
}

sub ids { [map { $_->{id} } @{ $_[0]{data} }] }

# The envelope is exactly {data, has_more, next_cursor}, has_more a JSON
# boolean, next_cursor a string exactly when has_more is true.
sub envelope_ok {
    my ($env, $what) = @_;

    is(join(',', sort keys %$env), 'data,has_more,next_cursor',
       "$what - envelope fields");
    ok(JSON::PP::is_bool($env->{has_more}), "$what - has_more is a boolean");
    ok($env->{has_more} ? (defined $env->{next_cursor}
                           && !ref $env->{next_cursor}
                           && $env->{next_cursor} =~ /^[A-Za-z0-9_-]+$/)
                        : !defined $env->{next_cursor},
       "$what - next_cursor is a URL-safe string exactly when has_more");
}

sub count_sessions {
    my ($project) = @_;
    return psql('SELECT count(*) FROM sessions WHERE project_id = '
                . sql_quote($PROJECT{$project}));
}


# --- the checks ---------------------------------------------------------

my %checks;

# 201: Location is the session's path, the body what GET answers, the row
# in the database; the default lifetime is session_ttl (1 h).
$checks{created} = sub {
    my ($name) = @_;

    my $r = api('POST', '/api/v1/sessions', $KEY{PRO},
                '{"delivery_mode": "long_poll"}');

    is($r->{status}, 201, "$name - 201");
    is($r->{headers}{'content-type'}, 'application/json',
       "$name - Content-Type");
    is(session_shape($r->{content}), session(), "$name - the session");

    my $id = $r->{json}{id} // '';
    is($r->{headers}{location}, "/api/v1/sessions/$id",
       "$name - Location is /api/v1/sessions/<id>");

    my $t = time;
    my $created = ts_epoch($r->{json}{created_at}) // 0;
    ok(abs($created - $t) <= 5, "$name - created_at is now")
        or diag("created_at $r->{json}{created_at}, now $t");

    my $g = api('GET', $r->{headers}{location} // '/none', $KEY{PRO});
    is($g->{status}, 200, "$name - GET Location - 200");
    is_deeply($g->{json}, $r->{json},
              "$name - GET Location - the same session");

    is(psql('SELECT project_id || delivery_mode || status FROM sessions '
            . 'WHERE id = ' . sql_quote($id)),
       "$PROJECT{PRO}long_pollopen", "$name - the row in the database");

    # each create is a new session
    my $r2 = api('POST', '/api/v1/sessions', $KEY{PRO},
                 '{"delivery_mode": "long_poll"}');
    is($r2->{status}, 201, "$name - 2nd create - 201");
    isnt($r2->{json}{id}, $id, "$name - 2nd create - another id");
};

# 64 KiB is the limit: the exact size is accepted and one more byte is
# 413, whether the size is announced (Content-Length) or not (chunked);
# an announced size over the limit is answered without the body.
$checks{body_size} = sub {
    my ($name) = @_;

    my $head = "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
               . "Authorization: Bearer $KEY{PRO}\r\n"
               . "Content-Type: application/json\r\nConnection: close\r\n";

    for my $c ([65536, 201], [65537, 413]) {
        my ($n, $want) = @$c;

        my $r = api('POST', '/api/v1/sessions', $KEY{PRO}, padded($n));
        is($r->{status}, $want, "$name - Content-Length $n - $want");
        is($want == 201 ? session_shape($r->{content}) : $r->{content},
           $want == 201 ? session() : $TOO_LARGE,
           "$name - Content-Length $n - body");

        $r = raw_http(chunked_request(padded($n)));
        is($r->{status}, $want, "$name - chunked $n - $want");
        is($want == 201 ? session_shape($r->{content}) : $r->{content},
           $want == 201 ? session() : $TOO_LARGE, "$name - chunked $n - body");
    }

    my $r = raw_http(chunked_request(padded(300000)));
    is($r->{status}, 413, "$name - chunked 300000 - 413");
    is($r->{content}, $TOO_LARGE, "$name - chunked 300000 - body");

    # Content-Length says 1 MiB; only 100 bytes of it are ever sent
    $r = raw_http($head . "Content-Length: 1048576\r\n\r\n"
                  . substr(padded(1048576), 0, 100), 5);
    is($r->{status}, 413, "$name - Content-Length 1048576, body unsent - 413");
    is($r->{content}, $TOO_LARGE,
       "$name - Content-Length 1048576, body unsent - body");
    ok($r->{elapsed} < 3,
       "$name - Content-Length 1048576 - answered without the body");

};

# q10: 50 creates at once on 4 workers: exactly 10 sessions, the other 40
# are 429, in the answers and in the database; the quota is the account's
# (another project of the account is refused too).
$checks{quota_race} = sub {
    my ($name) = @_;
    my $n = 50;

    # authenticate once, so that the burst finds the key in the cache
    my $w = api('GET', '/api/v1/sessions', $KEY{Q10});
    is($w->{status}, 200, "$name - warm-up (list)");

    my $body = '{"delivery_mode": "long_poll"}';
    my $req = "POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
              . "Authorization: Bearer $KEY{Q10}\r\n"
              . "Content-Type: application/json\r\n"
              . "Content-Length: " . length($body) . "\r\n"
              . "Connection: close\r\n\r\n$body";

    # every connection is open before the first request is sent
    my ($raws, $left) = burst($n, $req);
    is($left, 0, "$name - every answer within 30 s");

    my (%status, %ids, @bad);

    for my $raw (@$raws) {
        my ($st) = $raw =~ m{^HTTP/1\.1 (\d{3}) };
        my ($content) = $raw =~ /\r\n\r\n(.*)\z/s;

        $st //= 'none';
        $status{$st}++;

        if ($st eq '201') {
            my $s = eval { decode_json($content) };
            push @bad, "201 with $content" unless ref $s eq 'HASH'
                && session_shape($s) eq session(project => 'Q10');
            $ids{$s->{id}}++ if ref $s eq 'HASH';

        } elsif ($st eq '429') {
            push @bad, "429 with $content" unless $content eq $QUOTA;
        }
    }

    is($status{201} // 0, 10, "$name - exactly 10 created");
    is($status{429} // 0, 40, "$name - 40 refused (429)");
    is(join(' ', map { "$_: $status{$_}" } sort keys %status),
       '201: 10 429: 40', "$name - no other answer");
    is(scalar keys %ids, 10, "$name - 10 distinct ids");
    is_deeply(\@bad, [], "$name - every 201 a session, every 429 the quota");

    is(count_sessions('Q10'), 10, "$name - 10 sessions in the database");
    is(psql('SELECT sum(sessions_created) FROM monthly_usage '
            . 'WHERE account_id = ' . sql_quote($PROJECT{'Q10.account'})),
       10, "$name - usage 10 in the database");

    my $r = api('POST', '/api/v1/sessions', $KEY{Q10B},
                { delivery_mode => 'long_poll' });
    is($r->{status}, 429, "$name - another project of the account - 429");
    is($r->{content}, $QUOTA, "$name - another project of the account - body");
    is(count_sessions('Q10B'), 0,
       "$name - another project of the account - no session");
};

# The list: only the key's project, newest first, limit, status, cursor.
$checks{list} = sub {
    my ($name) = @_;

    # 25 sessions of LIST: 22 open (some of them webhook), 3 completed;
    # 2 expired ones, older, inserted with SQL; sessions of another
    # project of the same account and of another account
    my @made;
    for my $i (1 .. 25) {
        push @made, create($KEY{LIST}, $i % 4
                           ? { delivery_mode => 'long_poll' }
                           : { delivery_mode => 'webhook',
                               webhook_url => "https://example.com/h/$i" });
    }

    my @expired = psql('INSERT INTO sessions (project_id, delivery_mode, '
                       . 'created_at, expires_at) SELECT '
                       . sql_quote($PROJECT{LIST}) . q{, 'long_poll', }
                       . q{now() - interval '2 hours' - i * interval '1 s', }
                       . q{now() - interval '1 hour' }
                       . 'FROM generate_series(1, 2) AS i ORDER BY i '
                       . 'RETURNING id');

    my @foreign = (create($KEY{LIST2}), create($KEY{LIST2}),
                   create($KEY{PRO}));
    push @foreign, create($KEY{LIST2}) for 1 .. 2;

    my @completed = @made[3, 10, 24];
    for my $s (@completed) {
        my $r = api('POST', "/api/v1/sessions/$s->{id}/complete", $KEY{LIST});
        is($r->{status}, 200, "$name - complete a session");
    }
    my %completed = map { $_->{id} => 1 } @completed;

    my @all = ((reverse map { $_->{id} } @made), @expired);
    my @open = grep { !$completed{$_} } reverse map { $_->{id} } @made;
    my @done = grep { $completed{$_} } reverse map { $_->{id} } @made;

    # the default page
    my $p = list($KEY{LIST});
    envelope_ok($p, "$name - default");
    is_deeply(ids($p), [@all[0 .. 19]],
              "$name - default: the 20 newest, newest first");
    ok($p->{has_more}, "$name - default: has_more");

    my %status = map { $_->{id} => $_->{status} } @{ $p->{data} };
    is($status{$made[24]{id}}, 'completed', "$name - a completed one");
    is($status{$made[23]{id}}, 'open', "$name - an open one");

    my @bad = grep { session_shape($_) !~ /"project_id":"LIST"/ }
              @{ $p->{data} };
    is_deeply(\@bad, [], "$name - every item is a session of the project");

    my %foreign = map { $_->{id} => 1 } @foreign;
    my ($every) = all_pages($KEY{LIST}, 'limit=3');
    is_deeply($every, \@all,
              "$name - limit=3, every page: all 27 once, in order");
    ok(!(grep { $foreign{$_} } @$every),
       "$name - no session of another project");

    # limits
    $p = list($KEY{LIST}, 'limit=1');
    envelope_ok($p, "$name - limit=1");
    is_deeply(ids($p), [$all[0]], "$name - limit=1: the newest");

    $p = list($KEY{LIST}, 'limit=27');
    envelope_ok($p, "$name - limit=27");
    is_deeply(ids($p), \@all, "$name - limit=27: all");
    ok(!$p->{has_more}, "$name - limit=27: no more (exactly as many)");

    $p = list($KEY{LIST}, 'limit=100');
    is_deeply(ids($p), \@all, "$name - limit=100: all");
    ok(!$p->{has_more}, "$name - limit=100: no more");

    $p = list($KEY{LIST}, 'limit=26');
    is(scalar @{ $p->{data} }, 26, "$name - limit=26: 26");
    ok($p->{has_more}, "$name - limit=26: has_more");
    $p = list($KEY{LIST}, "limit=26&cursor=$p->{next_cursor}");
    is_deeply(ids($p), [$all[26]], "$name - limit=26: then the last one");
    envelope_ok($p, "$name - the last page");

    # status, alone and with a cursor
    my ($ids) = all_pages($KEY{LIST}, 'status=open&limit=5');
    is_deeply($ids, \@open, "$name - status=open, pages of 5: the 22 open");

    ($ids) = all_pages($KEY{LIST}, 'status=completed');
    is_deeply($ids, \@done, "$name - status=completed: the 3 completed");

    ($ids) = all_pages($KEY{LIST}, 'limit=1&status=expired');
    is_deeply($ids, \@expired, "$name - status=expired: the 2 expired");

    $p = list($KEY{LIST}, 'status=expired');
    is_deeply([map { $_->{status} } @{ $p->{data} }], ['expired', 'expired'],
              "$name - status=expired: their status");

    # another project of the account, another account
    ($ids) = all_pages($KEY{LIST2});
    is_deeply($ids, [reverse map { $_->{id} } @foreign[0, 1, 3, 4]],
              "$name - the other project sees its 4 only");

    # a cursor that was tampered with, or made for another project
    $p = list($KEY{LIST}, 'limit=2');
    my $c = $p->{next_cursor};
    # one character of the position changed (the CRC no longer matches)
    my $t = $c;
    substr($t, 12, 1) = substr($t, 12, 1) eq 'A' ? 'B' : 'A';
    my $r = api('GET', "/api/v1/sessions?cursor=$t", $KEY{LIST});
    is($r->{status}, 400, "$name - a changed cursor - 400");
    is($r->{content}, bad('cursor is invalid'), "$name - a changed cursor");

    $r = api('GET', '/api/v1/sessions?cursor=' . substr($c, 0, -1),
             $KEY{LIST});
    is($r->{content}, bad('cursor is invalid'), "$name - a cut cursor");

    $r = api('GET', "/api/v1/sessions?cursor=$c", $KEY{LIST2});
    is($r->{status}, 200, "$name - LIST's cursor with LIST2's key - 200");
    ok(!(grep { !$foreign{$_} } @{ ids($r->{json} // { data => [] }) }),
       "$name - LIST's cursor with LIST2's key - nothing of LIST");
};

# An empty list, many times over: every answer is exactly the empty
# envelope.  (The request pool is laid out differently each time: longer
# query strings and headers move what is allocated after the body.)
$checks{empty_list} = sub {
    my ($name) = @_;

    my @bad;

    for my $i (1 .. 100) {
        my $q = "limit=$i" . ($i % 3 ? '&status=open' : '')
                . ($i % 2 ? '' : '&status=expired');

        my $r = api('GET', "/api/v1/sessions?$q", $KEY{Q0},
                    undef, { 'X-Pad' => 'p' x ($i * 7) });

        push @bad, "?$q: $r->{status} $r->{content}"
            unless $r->{status} == 200
                   && ($r->{content} // '')
                      =~ /\A\{"data": ?\[\], ?"has_more": ?false, ?"next_cursor": ?null\}\z/;
    }

    is_deeply(\@bad, [], "$name - 100 empty lists, each exactly the envelope");
};

# Pages of 2 through 5 sessions; then, 3 new sessions made between two
# pages do not show after the old cursor: no duplicate, no gap.
$checks{pagination} = sub {
    my ($name) = @_;

    my @five = map { create($KEY{PAGE})->{id} } 1 .. 5;
    my @want = reverse @five;

    my ($ids, $pages) = all_pages($KEY{PAGE}, 'limit=2');
    is_deeply($ids, \@want, "$name - all 5 once, newest first");
    is_deeply([map { scalar @{ $_->{data} } } @$pages], [2, 2, 1],
              "$name - pages of 2, 2, 1");
    is_deeply([map { $_->{has_more} ? 1 : 0 } @$pages], [1, 1, 0],
              "$name - has_more on all but the last page");
    envelope_ok($pages->[$_], "$name - page " . ($_ + 1)) for 0 .. 2;

    my $p1 = list($KEY{PAGE}, 'limit=2');
    is_deeply(ids($p1), [@want[0, 1]], "$name - page 1 again");

    my @three = map { create($KEY{PAGE})->{id} } 1 .. 3;

    my $p2 = list($KEY{PAGE}, "limit=2&cursor=$p1->{next_cursor}");
    is_deeply(ids($p2), [@want[2, 3]], "$name - page 2 after 3 creates");
    ok($p2->{has_more}, "$name - page 2 - has_more");

    my $p3 = list($KEY{PAGE}, "cursor=$p2->{next_cursor}&limit=2");
    is_deeply(ids($p3), [$want[4]], "$name - page 3 after 3 creates");
    ok(!$p3->{has_more}, "$name - page 3 - no more");

    my $seen = [@{ ids($p1) }, @{ ids($p2) }, @{ ids($p3) }];
    is_deeply($seen, \@want, "$name - no duplicate, no gap");

    # the same cursor twice gives the same page
    my $again = list($KEY{PAGE}, "limit=2&cursor=$p1->{next_cursor}");
    is_deeply(ids($again), ids($p2), "$name - a cursor can be reused");

    ($ids) = all_pages($KEY{PAGE}, 'limit=3');
    is_deeply($ids, [reverse(@three), @want],
              "$name - a new listing: the 3 new ones first");
};

# Equal created_at (and 1 us apart): id breaks the tie, and cursors hold
# the exact position, at every page size.
$checks{ties} = sub {
    my ($name) = @_;

    for my $limit (1, 2, 3, 7) {
        my ($ids) = all_pages($KEY{TIES}, "limit=$limit");
        is_deeply($ids, \@TIES,
                  "$name - limit=$limit: created_at, then id, descending");
    }

    my ($ids, $pages) = all_pages($KEY{BULK});
    is(scalar @{ $pages->[0]{data} }, 20, "$name - BULK: the default is 20");
    is_deeply($ids, \@BULK, "$name - BULK: 120 in pages of 20");

    ($ids, $pages) = all_pages($KEY{BULK}, 'limit=100');
    is_deeply([map { scalar @{ $_->{data} } } @$pages], [100, 20],
              "$name - BULK: limit=100: pages of 100 and 20");
    is_deeply($ids, \@BULK, "$name - BULK: limit=100: all, in order");
};

# a complete that waits on another's: psql completes the session in an
# open transaction; the request's complete waits for the row, and when
# the other commits it answers 200 with the session as that one left it
# (the newest row: status completed, the other's completed_at), not the
# row as it was when its statement began
$checks{complete_race} = sub {
    my ($name) = @_;

    my $sid = create($KEY{PRO})->{id};
    my $other = psql_begin("UPDATE sessions SET status = 'completed',"
                           . " completed_at = now() - interval '1 minute'"
                           . " WHERE id = '$sid'",
                           q{SELECT count(*) FROM pg_stat_activity}
                           . q{ WHERE state = 'idle in transaction'}
                           . q{ AND query LIKE 'UPDATE sessions SET status%'}
                           . qq{ AND query LIKE '%$sid%'});
    ok($other, "$name - another transaction completes the session, open");

    my $sock = IO::Socket::INET->new(
                   PeerAddr => '127.0.0.1',
                   PeerPort => $Test::Nginx::Util::ServerPort,
                   Proto => 'tcp') or die "connect: $!";
    print $sock "POST /api/v1/sessions/$sid/complete HTTP/1.1\r\n"
                . "Host: localhost\r\nAuthorization: Bearer $KEY{PRO}\r\n"
                . "Content-Length: 0\r\nConnection: close\r\n\r\n";
    my $p = { sock => $sock, t0 => Time::HiRes::time() };

    ok(!SessionTest::answered($p, 0.5), "$name - the complete waits");

    psql_end($other);

    my $r = SessionTest::answer($p, 10);
    is($r->{status}, 200, "$name - then 200");
    is($r->{json}{status}, 'completed', "$name - status completed");
    is($r->{json}{completed_at},
       psql(q{SELECT to_char(completed_at AT TIME ZONE 'UTC',}
            . q{ 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM sessions}
            . " WHERE id = '$sid'"),
       "$name - with the other's completed_at, a minute ago");
};

# GET and complete: 200, idempotent complete, another project's session,
# unknown ids, upper-case ids.
$checks{get_complete} = sub {
    my ($name) = @_;

    my $s = create($KEY{PRO}, { delivery_mode => 'long_poll',
                                expires_in => 600 });
    my $id = $s->{id};

    my $r = api('GET', "/api/v1/sessions/$id", $KEY{PRO});
    is($r->{status}, 200, "$name - GET - 200");
    is($r->{headers}{'content-type'}, 'application/json',
       "$name - GET - Content-Type");
    is_deeply($r->{json}, $s, "$name - GET - the session as created");

    $r = api('GET', '/api/v1/sessions/' . uc $id, $KEY{PRO});
    is($r->{status}, 200, "$name - GET, upper-case id - 200");
    is($r->{json}{id}, $id, "$name - GET, upper-case id - the session");

    $r = api('HEAD', "/api/v1/sessions/$id", $KEY{PRO});
    is($r->{status}, 200, "$name - HEAD - 200");
    is($r->{content} // '', '', "$name - HEAD - no body");

    # another project of the same account
    for my $m (['GET', ''], ['POST', '/complete']) {
        $r = api($m->[0], "/api/v1/sessions/$id$m->[1]", $KEY{OTHER});
        is($r->{status}, 403, "$name - $m->[0] by another project - 403");
        is($r->{content}, $FORBIDDEN, "$name - $m->[0] by another project");
    }

    # unknown, but well-formed
    my $unknown;
    do { $unknown = lc psql('SELECT gen_random_uuid()') } while $unknown eq $id;

    for my $m (['GET', ''], ['POST', '/complete']) {
        $r = api($m->[0], "/api/v1/sessions/$unknown$m->[1]", $KEY{PRO});
        is($r->{status}, 404, "$name - $m->[0] an unknown id - 404");
        is($r->{content}, $NOT_FOUND, "$name - $m->[0] an unknown id");
    }

    $r = api('GET', "/api/v1/sessions/$id", $KEY{PRO});
    is_deeply($r->{json}, $s, "$name - none of that changed the session");

    # complete, twice
    my $c1 = api('POST', "/api/v1/sessions/$id/complete", $KEY{PRO});
    is($c1->{status}, 200, "$name - complete - 200");
    is(session_shape($c1->{content}),
       session(status => 'completed', completed => 1, ttl => 600),
       "$name - complete - the completed session");
    is($c1->{json}{id}, $id, "$name - complete - its id");
    is($c1->{json}{created_at}, $s->{created_at},
       "$name - complete - created_at unchanged");
    is($c1->{json}{expires_at}, $s->{expires_at},
       "$name - complete - expires_at unchanged");
    ok(abs((ts_epoch($c1->{json}{completed_at}) // 0) - time) <= 5,
       "$name - complete - completed_at is now");

    # a second later, so that a new completed_at would differ
    Time::HiRes::sleep(1.1);

    my $c2 = api('POST', "/api/v1/sessions/$id/complete", $KEY{PRO});
    is($c2->{status}, 200, "$name - complete again - 200");
    is_deeply($c2->{json}, $c1->{json},
              "$name - complete again - the same session, same completed_at");

    $r = api('GET', "/api/v1/sessions/$id", $KEY{PRO});
    is_deeply($r->{json}, $c1->{json}, "$name - GET - completed");

    $r = api('POST', "/api/v1/sessions/$id/complete", $KEY{OTHER});
    is($r->{content}, $FORBIDDEN,
       "$name - complete a completed one by another project - 403");

    # a webhook session completes too; the upper-case id works there too
    my $w = create($KEY{PRO}, { delivery_mode => 'webhook',
                                webhook_url => 'https://example.com/w' });
    $r = api('POST', '/api/v1/sessions/' . uc($w->{id}) . '/complete',
             $KEY{PRO});
    is($r->{status}, 200, "$name - complete a webhook session - 200");
    is(session_shape($r->{content}),
       session(mode => 'webhook', url => 'https://example.com/w',
               status => 'completed', completed => 1),
       "$name - complete a webhook session - the session");
};

# expires_in 1: 200 at first, then 410 for GET and complete; the list
# shows it as expired, completed or not.
$checks{expiry} = sub {
    my ($name) = @_;

    my $t0 = Time::HiRes::time();
    my $s = create($KEY{EXP}, { delivery_mode => 'long_poll',
                                expires_in => 1 });
    my $done = create($KEY{EXP}, { delivery_mode => 'long_poll',
                                   expires_in => 1 });
    my $live = create($KEY{EXP});

    is(session_shape($s), session(project => 'EXP', ttl => 1),
       "$name - created with expires_in 1");

    my $r = api('POST', "/api/v1/sessions/$done->{id}/complete", $KEY{EXP});
    my $fresh = Time::HiRes::time() - $t0 < 0.8;

    SKIP: {
        skip "$name - the machine is too slow to see the open session", 1
            unless $fresh;
        is($r->{status}, 200, "$name - completed before it expires");
    }

    # $done was created after $s: wait until its second is up too
    my ($got) = wait_until(3, 0.1, sub {
        my $g = api('GET', "/api/v1/sessions/$s->{id}", $KEY{EXP});
        return undef unless $g->{status} == 410;
        return api('GET', "/api/v1/sessions/$done->{id}", $KEY{EXP})
                   ->{status} == 410 ? $g : undef;
    });

    ok($got, "$name - GET is 410 within 3 s");
    is($got && $got->{content}, $EXPIRED, "$name - GET - the body");
    ok(Time::HiRes::time() - $t0 >= 0.9 - 0.2,
       "$name - not before the second is up");

    for my $c ([GET => "/api/v1/sessions/$done->{id}"],
               [POST => "/api/v1/sessions/$s->{id}/complete"],
               [POST => "/api/v1/sessions/$done->{id}/complete"])
    {
        $r = api($c->[0], $c->[1], $KEY{EXP});
        is($r->{status}, 410, "$name - $c->[0] $c->[1] - 410");
        is($r->{content}, $EXPIRED, "$name - $c->[0] $c->[1] - body");
    }

    # the one that never expired
    $r = api('GET', "/api/v1/sessions/$live->{id}", $KEY{EXP});
    is($r->{status}, 200, "$name - a session with the default ttl - 200");

    my $p = list($KEY{EXP});
    my %st = map { $_->{id} => $_->{status} } @{ $p->{data} };
    is_deeply(\%st, { $s->{id} => 'expired', $done->{id} => 'expired',
                      $live->{id} => 'open' },
              "$name - the list: expired, expired (completed), open");

    my ($ids) = all_pages($KEY{EXP}, 'status=expired');
    is_deeply($ids, [$done->{id}, $s->{id}],
              "$name - status=expired: both, newest first");
    ($ids) = all_pages($KEY{EXP}, 'status=open');
    is_deeply($ids, [$live->{id}], "$name - status=open: the live one");
    ($ids) = all_pages($KEY{EXP}, 'status=completed');
    is_deeply($ids, [], "$name - status=completed: none (it has expired)");
};

# session_ttl 30s: the default lifetime is 30 s, exactly, in the database
# too: expires_at and created_at must come from one instant, else the
# shown values are a second apart from expires_in whenever a second
# boundary falls between the two (often under lock contention, as in the
# quota race).
$checks{ttl} = sub {
    my ($name) = @_;

    my $s = create($KEY{PRO});
    is(session_shape($s), session(ttl => 30), "$name - 30 s");

    is(psql('SELECT extract(epoch FROM expires_at - created_at) '
            . 'FROM sessions WHERE id = ' . sql_quote($s->{id})),
       '30.000000', "$name - exactly 30 s in the database");
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
EOF

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block);

    $block->set_value('config', $CONFIG) unless defined $block->config;

    # the key of the fixture named by --- api_key (PRO unless said), and
    # Content-Type: application/json unless --- content_type says another
    # (or "none")
    key_headers($block, \%KEY, 'PRO', 'application/json');

    # run from --- init: nginx is up, the block's request comes after
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: create long_poll: 201, Location, the session (default ttl 1 h)
--- check: created
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_headers
Content-Type: application/json
--- response_headers_like
Location: ^/api/v1/sessions/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$
--- raw_response_headers_like: ^HTTP/1\.1 201 Created\r\n
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session()
--- no_error_log
[error]



=== TEST 2: create webhook with expires_in (pro plan)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://hooks.example.com/in?x=1", "expires_in": 600}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'https://hooks.example.com/in?x=1', ttl => 600)
--- no_error_log
[error]



=== TEST 3: expires_in at the maximum (24 h by default)
--- request
POST /api/v1/sessions
{"expires_in": 86400, "delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(ttl => 86400)
--- no_error_log
[error]



=== TEST 4: expires_in 1 is the minimum; null fields are absent
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "webhook_url": null, "expires_in": 1}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(ttl => 1)
--- no_error_log
[error]



=== TEST 5: expires_in null is the default
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": null}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session()
--- no_error_log
[error]



=== TEST 6: Content-Type with parameters
--- content_type: application/json; charset=utf-8
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session()
--- no_error_log
[error]



=== TEST 7: the media type in another case
--- content_type: Application/JSON
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session()
--- no_error_log
[error]



=== TEST 8: no Content-Type: 415
--- content_type: none
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 415
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 415 Unsupported Media Type\r\n
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 9: text/plain: 415
--- content_type: text/plain
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 415
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 10: application/jsonx: 415
--- content_type: application/jsonx
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 415
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 11: application/json-seq: 415
--- content_type: application/json-seq
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 415
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 12: the media type comes before the body: text/plain, not JSON
--- content_type: text/plain
--- request
POST /api/v1/sessions
hello
--- error_code: 415
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 13: body size: 65536 bytes are accepted, 65537 are 413, with Content-Length or chunked
--- check: body_size
--- request eval
"POST /api/v1/sessions\n" . ::big_unknown(65537)
--- error_code: 413
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 413 Payload Too Large\r\n
--- response_body eval
$::TOO_LARGE
--- no_error_log
[error]



=== TEST 14: not JSON
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 400 Bad Request\r\n
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 15: an empty body
--- request eval
"POST /api/v1/sessions\n"
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 16: an array
--- request
POST /api/v1/sessions
[{"delivery_mode": "long_poll"}]
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 17: a string
--- request
POST /api/v1/sessions
"long_poll"
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 18: null
--- request
POST /api/v1/sessions
null
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 19: a number
--- request
POST /api/v1/sessions
42
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 20: a byte-order mark before the object
--- request eval
"POST /api/v1/sessions\n\xef\xbb\xbf{\"delivery_mode\": \"long_poll\"}"
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 21: duplicate keys
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "delivery_mode": "long_poll"}
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 22: an unpaired surrogate escape
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "note": "\ud800"}
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 23: invalid UTF-8 in a string
--- request eval
"POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\xff\"}"
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 24: invalid UTF-8 (an overlong form) in a key
--- request eval
"POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\", \"\xc0\xaf\": 1}"
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 25: trailing bytes after the object
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"} {}
--- error_code: 400
--- response_body eval
$::NOT_OBJECT
--- no_error_log
[error]



=== TEST 26: delivery_mode missing
--- request
POST /api/v1/sessions
{}
--- error_code: 400
--- response_body eval
::bad('delivery_mode is required')
--- no_error_log
[error]



=== TEST 27: delivery_mode null
--- request
POST /api/v1/sessions
{"delivery_mode": null}
--- error_code: 400
--- response_body eval
::bad('delivery_mode is required')
--- no_error_log
[error]



=== TEST 28: delivery_mode a number
--- request
POST /api/v1/sessions
{"delivery_mode": 1}
--- error_code: 400
--- response_body eval
::bad('delivery_mode must be a string')
--- no_error_log
[error]



=== TEST 29: delivery_mode an array
--- request
POST /api/v1/sessions
{"delivery_mode": ["long_poll"]}
--- error_code: 400
--- response_body eval
::bad('delivery_mode must be a string')
--- no_error_log
[error]



=== TEST 30: delivery_mode another value
--- request
POST /api/v1/sessions
{"delivery_mode": "poll"}
--- error_code: 400
--- response_body eval
::bad('delivery_mode must be one of: webhook, long_poll')
--- no_error_log
[error]



=== TEST 31: delivery_mode in another case
--- request
POST /api/v1/sessions
{"delivery_mode": "Long_Poll"}
--- error_code: 400
--- response_body eval
::bad('delivery_mode must be one of: webhook, long_poll')
--- no_error_log
[error]



=== TEST 32: delivery_mode with a NUL byte after the value
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook\u0000"}
--- error_code: 400
--- response_body eval
::bad('delivery_mode must be one of: webhook, long_poll')
--- no_error_log
[error]



=== TEST 33: webhook without webhook_url
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook"}
--- error_code: 400
--- response_body eval
::bad('webhook_url is required when delivery_mode is webhook')
--- no_error_log
[error]



=== TEST 34: webhook with webhook_url null
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": null}
--- error_code: 400
--- response_body eval
::bad('webhook_url is required when delivery_mode is webhook')
--- no_error_log
[error]



=== TEST 35: long_poll with a webhook_url
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "webhook_url": "https://example.com/h"}
--- error_code: 400
--- response_body eval
::bad('webhook_url is only allowed when delivery_mode is webhook')
--- no_error_log
[error]



=== TEST 36: long_poll with an empty webhook_url (present, not null)
--- request
POST /api/v1/sessions
{"webhook_url": "", "delivery_mode": "long_poll"}
--- error_code: 400
--- response_body eval
::bad('webhook_url is only allowed when delivery_mode is webhook')
--- no_error_log
[error]



=== TEST 37: long_poll with webhook_url false
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "webhook_url": false}
--- error_code: 400
--- response_body eval
::bad('webhook_url is only allowed when delivery_mode is webhook')
--- no_error_log
[error]



=== TEST 38: webhook_url a number
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": 42}
--- error_code: 400
--- response_body eval
::bad('webhook_url must be a string')
--- no_error_log
[error]



=== TEST 39: webhook_url an object
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": {"url": "https://example.com/"}}
--- error_code: 400
--- response_body eval
::bad('webhook_url must be a string')
--- no_error_log
[error]



=== TEST 40: webhook_url relative
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "/hooks/in"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 41: webhook_url empty
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": ""}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 42: webhook_url scheme-relative
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "//example.com/h"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 43: webhook_url ftp
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "ftp://example.com/h"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 44: webhook_url without a host
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https:///h"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 45: webhook_url with user info
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://user:pw@example.com/h"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 46: webhook_url with a fragment
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h#top"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 47: webhook_url of 2049 bytes
--- request eval
"POST /api/v1/sessions\n{\"delivery_mode\": \"webhook\", \"webhook_url\": \"$::LONG_URL" . "a\"}"
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 48: webhook_url of 2048 bytes is accepted
--- request eval
"POST /api/v1/sessions\n{\"delivery_mode\": \"webhook\", \"webhook_url\": \"$::LONG_URL\"}"
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => $::LONG_URL)
--- no_error_log
[error]



=== TEST 49: webhook_url with an integer host (http://2130706433/)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://2130706433/"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 50: webhook_url with a hex host (http://0x7f.1/)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://0x7f.1/"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 51: webhook_url 127.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://127.0.0.1/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 52: webhook_url 10.x with a port
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://10.20.30.40:8443/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 53: webhook_url 192.168.x
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://192.168.1.1/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 54: webhook_url 172.16.x
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://172.31.255.255/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 55: webhook_url link-local (cloud metadata)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://169.254.169.254/latest/meta-data/"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 56: webhook_url 0.0.0.0
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://0.0.0.0/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 57: webhook_url multicast
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://224.0.0.1/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 58: webhook_url IPv6 loopback
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 59: webhook_url IPv6 unique local
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[fd12:3456::1]:8080/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 60: webhook_url IPv6 link-local
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[fe80::1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 61: webhook_url IPv4-mapped IPv6, dotted (::ffff:127.0.0.1)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::ffff:127.0.0.1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62: webhook_url IPv4-mapped IPv6, hex (::ffff:7f00:1)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::ffff:7f00:1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62b: webhook_url in NAT64's well-known prefix, of 127.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[64:ff9b::7f00:1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62c: webhook_url IPv4-translated, of 127.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::ffff:0:7f00:1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62d: webhook_url site-local (fec0::/10)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[fec0::1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62e: webhook_url IPv4-compatible (deprecated ::/96), of 127.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::127.0.0.1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62f: webhook_url 6to4 (2002::/16), of 127.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[2002:7f00:1::]/hook"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 62g: webhook_url Teredo (2001::/32), client 10.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 63: webhook_url IPv4-mapped IPv6 of 10.0.0.1
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::FFFF:a00:1]/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 64: webhook_url localhost
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://localhost:8080/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 65: webhook_url x.localhost, in another case
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://x.LocalHost/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 66: public IP literals are accepted (8.8.8.8)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://8.8.8.8:8080/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'http://8.8.8.8:8080/h')
--- no_error_log
[error]



=== TEST 67: public IP literals are accepted (IPv6)
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://[2606:4700:4700::1111]/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'https://[2606:4700:4700::1111]/h')
--- no_error_log
[error]



=== TEST 68: a name that merely contains "localhost" is not private
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://mylocalhost.example.com/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'https://mylocalhost.example.com/h')
--- no_error_log
[error]



=== TEST 69: session_webhook_allow_private on: a private webhook_url is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://127.0.0.1:9/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'http://127.0.0.1:9/h')
--- no_error_log
[error]



=== TEST 70: session_webhook_allow_private on: localhost and IPv6 too
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://[::1]:8080/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(mode => 'webhook', url => 'http://[::1]:8080/h')
--- no_error_log
[error]



=== TEST 71: session_webhook_allow_private on does not allow what is not a URL
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://2130706433/"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 72: session_webhook_allow_private off (explicit) refuses
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private off;
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "http://127.0.0.1:9/h"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 73: expires_in 0
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 0}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 74: expires_in -1
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": -1}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 75: expires_in 1.0
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 1.0}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 76: expires_in 1e2
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 1e2}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 77: expires_in "10"
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": "10"}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 78: expires_in true
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": true}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 79: expires_in the maximum + 1
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 86401}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 80: expires_in past 64 bits
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 99999999999999999999999}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 81: session_max_ttl 2m: the message names 120
--- config
    location /api/ {
        session_api;
        session_ttl 30s;
        session_max_ttl 2m;
    }
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 121}
--- error_code: 400
--- response_body eval
::expires_msg(120)
--- no_error_log
[error]



=== TEST 82: session_max_ttl 2m: expires_in 120 is accepted
--- config
    location /api/ {
        session_api;
        session_ttl 30s;
        session_max_ttl 2m;
    }
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 120}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(ttl => 120)
--- no_error_log
[error]



=== TEST 83: session_max_ttl at the server level, 2 days
--- config
    session_max_ttl 2d;

    location /api/ {
        session_api;
    }
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 172801}
--- error_code: 400
--- response_body eval
::expires_msg(172800)
--- no_error_log
[error]



=== TEST 84: session_ttl 30s: expires_at - created_at is 30 s
--- config
    location /api/ {
        session_api;
        session_ttl 30s;
    }
--- check: ttl
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(ttl => 30)
--- no_error_log
[error]



=== TEST 85: session_ttl at the http level is inherited
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_ttl 45s;
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(ttl => 45)
--- no_error_log
[error]



=== TEST 86: an unknown field
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "metadata": {"a": 1}}
--- error_code: 400
--- response_body eval
::bad('unknown field: metadata')
--- no_error_log
[error]



=== TEST 87: an unknown field whose value is null
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "foo": null}
--- error_code: 400
--- response_body eval
::bad('unknown field: foo')
--- no_error_log
[error]



=== TEST 88: a field name in another case is unknown
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "Expires_In": 10}
--- error_code: 400
--- response_body eval
::bad('unknown field: Expires_In')
--- no_error_log
[error]



=== TEST 89: several unknown fields: the first in document order
--- request
POST /api/v1/sessions
{"zeta": 1, "delivery_mode": "long_poll", "alpha": 2, "mid": 3}
--- error_code: 400
--- response_body eval
::bad('unknown field: zeta')
--- no_error_log
[error]



=== TEST 90: order: delivery_mode missing and an unknown field
--- request
POST /api/v1/sessions
{"foo": 1}
--- error_code: 400
--- response_body eval
::bad('delivery_mode is required')
--- no_error_log
[error]



=== TEST 91: order: a bad webhook_url and a bad expires_in
--- request
POST /api/v1/sessions
{"expires_in": 0, "delivery_mode": "webhook", "webhook_url": "ftp://example.com/"}
--- error_code: 400
--- response_body eval
$::ABSOLUTE
--- no_error_log
[error]



=== TEST 92: order: a private webhook_url and a bad expires_in
--- request
POST /api/v1/sessions
{"expires_in": -5, "delivery_mode": "webhook", "webhook_url": "http://127.0.0.1/"}
--- error_code: 400
--- response_body eval
$::PRIVATE
--- no_error_log
[error]



=== TEST 93: order: an unknown field first, then a bad expires_in
--- request
POST /api/v1/sessions
{"foo": 1, "delivery_mode": "long_poll", "expires_in": 0}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 94: order: valid fields and an unknown one
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h", "expires_in": 60, "extra": true}
--- error_code: 400
--- response_body eval
::bad('unknown field: extra')
--- no_error_log
[error]



=== TEST 95: order: an unknown query parameter before the body
--- request
POST /api/v1/sessions?dry_run=1
{"delivery_mode": "long_poll"}
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: dry_run')
--- no_error_log
[error]



=== TEST 96: order: Content-Type before the query string
--- content_type: text/plain
--- request
POST /api/v1/sessions?dry_run=1
{"delivery_mode": "long_poll"}
--- error_code: 415
--- response_body eval
$::MEDIA
--- no_error_log
[error]



=== TEST 97: an unknown field's whole name, however long, in the message
--- request eval
"POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\", \"" . ('k' x 600) . "\": 1}"
--- error_code: 400
--- response_body eval
::bad('unknown field: ' . ('k' x 600))
--- no_error_log
[error]



=== TEST 98: plan free has no webhook: 403
--- api_key: FREE
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h"}
--- error_code: 403
--- response_headers
Content-Type: application/json
--- response_body eval
$::NO_WEBHOOK
--- no_error_log
[error]



=== TEST 99: plan free: long_poll is fine
--- api_key: FREE
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(project => 'FREE')
--- no_error_log
[error]



=== TEST 100: order: validation before the plan (free, webhook, bad expires_in)
--- api_key: FREE
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h", "expires_in": 0}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 101: a plan without long_poll: 403
--- api_key: NOLP
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 403
--- response_body eval
$::NO_LONG_POLL
--- no_error_log
[error]



=== TEST 102: a plan without long_poll: webhook is fine
--- api_key: NOLP
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h"}
--- error_code: 201
--- response_body_filters eval
\&::session_shape
--- response_body eval
::session(project => 'NOLP', mode => 'webhook', url => 'https://example.com/h')
--- no_error_log
[error]



=== TEST 103: quota 0: the first create is 429
--- api_key: Q0
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 429
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 429 Too Many Requests\r\n
--- response_body eval
$::QUOTA
--- no_error_log
[error]



=== TEST 104: quota 0, a feature not in the plan: the plan's 403 comes first
--- api_key: Q0
--- request
POST /api/v1/sessions
{"delivery_mode": "webhook", "webhook_url": "https://example.com/h"}
--- error_code: 403
--- response_body eval
$::NO_WEBHOOK
--- no_error_log
[error]



=== TEST 105: quota 0, a bad body: 400 comes first
--- api_key: Q0
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll", "expires_in": 0}
--- error_code: 400
--- response_body eval
::expires_msg(86400)
--- no_error_log
[error]



=== TEST 106: quota 10, 50 creates at once on 4 workers: 10 created, 40 refused
--- workers: 4
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 60s;
--- check: quota_race
--- api_key: Q10
--- request
POST /api/v1/sessions
{"delivery_mode": "long_poll"}
--- error_code: 429
--- response_body eval
$::QUOTA
--- no_error_log
[error]
[alert]



=== TEST 107: get and complete: 200, idempotent, 403 for another project, 404
--- check: get_complete
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 107a: a complete that waits on another's answers the newest row
--- check: complete_race
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 108: GET a malformed id (nope): 404
--- request
GET /api/v1/sessions/nope
--- error_code: 404
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 404 Not Found\r\n
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 109: GET a malformed id (35 characters): 404
--- request
GET /api/v1/sessions/0e5a1b7c-3c2d-4e8f-9a6b-1c2d3e4f5a6
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 110: GET a malformed id (37 characters): 404
--- request
GET /api/v1/sessions/0e5a1b7c-3c2d-4e8f-9a6b-1c2d3e4f5a6b7
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 111: GET a malformed id (36 characters, not hex): 404
--- request
GET /api/v1/sessions/0e5a1b7c-3c2d-4e8f-9a6b-1c2d3e4f5a6g
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 112: complete a malformed id: 404
--- request
POST /api/v1/sessions/nope/complete
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 113: GET an unknown id: 404
--- request
GET /api/v1/sessions/00000000-0000-4000-8000-000000000000
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 114: complete an unknown id: 404
--- request
POST /api/v1/sessions/00000000-0000-4000-8000-000000000000/complete
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 115: GET with an unknown query parameter: 400 (before the id is looked at)
--- request
GET /api/v1/sessions/nope?verbose=1
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: verbose')
--- no_error_log
[error]



=== TEST 116: complete with an unknown query parameter: 400
--- request
POST /api/v1/sessions/00000000-0000-4000-8000-000000000000/complete?force
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: force')
--- no_error_log
[error]



=== TEST 117: expiry: 410 for GET and complete, "expired" in the list
--- check: expiry
--- api_key: EXP
--- request
GET /api/v1/sessions?status=expired&limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 118: list: the project's sessions only, order, limit, status, cursor
--- check: list
--- api_key: LIST
--- request
GET /api/v1/sessions?limit=2&status=completed
--- error_code: 200
--- response_headers
Content-Type: application/json
--- no_error_log
[error]



=== TEST 119: list: pagination while sessions are created
--- check: pagination
--- api_key: PAGE
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]



=== TEST 120: list: equal created_at, and pages of 20 and 100
--- check: ties
--- api_key: TIES
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]



=== TEST 121: list: an empty project
--- check: empty_list
--- api_key: Q0
--- request
GET /api/v1/sessions
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body_filters eval
sub { my $j = eval { ::decode_json($_[0]) }; $j ? ::encode_json($j) : $_[0] }
--- response_body chomp
{"data":[],"has_more":false,"next_cursor":null}
--- no_error_log
[error]



=== TEST 122: HEAD /api/v1/sessions: 200 without a body
--- request
HEAD /api/v1/sessions
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body
--- no_error_log
[error]



=== TEST 123: list: limit=0
--- request
GET /api/v1/sessions?limit=0
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 124: list: limit=101
--- request
GET /api/v1/sessions?limit=101
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 125: list: limit=abc
--- request
GET /api/v1/sessions?limit=abc
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 126: list: limit=-1
--- request
GET /api/v1/sessions?limit=-1
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 127: list: limit= (empty)
--- request
GET /api/v1/sessions?limit=
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 128: list: limit without a value
--- request
GET /api/v1/sessions?limit
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 129: list: limit=1.5
--- request
GET /api/v1/sessions?limit=1.5
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 130: list: limit far past 64 bits
--- request
GET /api/v1/sessions?limit=99999999999999999999999
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 131: list: status=bad
--- request
GET /api/v1/sessions?status=bad
--- error_code: 400
--- response_body eval
::bad('status must be one of: open, completed, expired')
--- no_error_log
[error]



=== TEST 132: list: status in another case
--- request
GET /api/v1/sessions?status=OPEN
--- error_code: 400
--- response_body eval
::bad('status must be one of: open, completed, expired')
--- no_error_log
[error]



=== TEST 133: list: status= (empty)
--- request
GET /api/v1/sessions?status=
--- error_code: 400
--- response_body eval
::bad('status must be one of: open, completed, expired')
--- no_error_log
[error]



=== TEST 134: list: cursor=garbage
--- request
GET /api/v1/sessions?cursor=garbage
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 135: list: cursor= (empty)
--- request
GET /api/v1/sessions?cursor=
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 136: list: an unknown query parameter
--- request
GET /api/v1/sessions?limit=5&page=2
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: page')
--- no_error_log
[error]



=== TEST 137: list: an unknown query parameter without a value
--- request
GET /api/v1/sessions?offset
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: offset')
--- no_error_log
[error]



=== TEST 138: list: parameter names are case-sensitive
--- request
GET /api/v1/sessions?Limit=5
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: Limit')
--- no_error_log
[error]



=== TEST 139: list: a percent-encoded value is decoded (status=op%65n)
--- api_key: Q0
--- request
GET /api/v1/sessions?status=op%65n&limit=%35
--- error_code: 200
--- response_body_filters eval
sub { my $j = eval { ::decode_json($_[0]) }; $j ? ::encode_json($j) : $_[0] }
--- response_body chomp
{"data":[],"has_more":false,"next_cursor":null}
--- no_error_log
[error]
