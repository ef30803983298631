# Stage 2 of the request pipeline (docs/api.md §1, §8 and §10): per key,
# per class, fixed one-minute windows aligned to the UTC minute, kept in
# session_limit_zone.
#
# Blocks whose checks need Perl (counting down, the clock, many requests,
# a reload) say "--- check: NAME": the check runs against the nginx that
# Test::Nginx started for the block (from --- init, after the start and
# before the block's own request), and the block's request then checks the
# state the check left behind.  Every check first makes sure that enough
# of the current minute is left for all its requests (waiting for the next
# minute if not), and computes X-RateLimit-Reset from the clock read
# before and after each request, so a block that straddles a minute
# boundary still passes or fails for the right reason.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).  The keys come from
# sessionctl; the many keys of the zone-full block are inserted with SQL.

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use POSIX ();
use Time::HiRes ();
use Session;
use SessionTest qw(:DEFAULT error_body burst check_init db_http_config
                    add_no_error_log reset_of fresh_window);

our ($PROJECT, @KEYS, $SUSPENDED);

{
    my $f = fixture(plan => 'pro');

    $PROJECT = $f->{project_id};
    @KEYS = ($f->{key});

    # every stateful block uses keys of its own: a block never sees the
    # counters another left behind, whether or not nginx was restarted
    push @KEYS, sessionctl_ok('key', 'create', $PROJECT)->{key} for 1 .. 16;

    # a key of another account, to show keys are independent across
    # accounts too
    push @KEYS, fixture(plan => 'free')->{key};

    my $s = fixture(plan => 'pro');
    sessionctl_ok('account', 'suspend', $s->{account_id});
    $SUSPENDED = $s->{key};
}

# the secret part (32 hex) of every key above
our @SECRETS = map { /_([0-9a-f]{32})$/ ? $1 : () } @KEYS, $SUSPENDED;

sub body { return error_body(@_) }

our $LIMITED = body(429, 'Too Many Requests', 'rate limit exceeded');
our $NOT_FOUND = body(404, 'Not Found', 'route not found');
our $INVALID = body(401, 'Unauthorized', 'API key is invalid');

my @RL = qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset);


# --- helpers for the checks ---------------------------------------------

# One request on a new connection; adds t0 and t1 (the clock before and
# after) to HTTP::Tiny's answer.
sub req {
    my ($method, $path, $key, $headers) = @_;

    my %h = %{ $headers || {} };
    $h{Authorization} = "Bearer $key" if defined $key;

    my $t0 = Time::HiRes::time();
    my $res = http_request($method, $path, \%h, 10);
    $res->{t0} = $t0;
    $res->{t1} = Time::HiRes::time();
    $res->{method} = $method;

    return $res;
}

# The three X-RateLimit headers of an admitted or refused request:
# the class's limit, what is left after this request, and the end of the
# window the request was counted in.
sub rl_ok {
    my ($res, $limit, $remaining, $what) = @_;

    my $h = $res->{headers};

    is($h->{'x-ratelimit-limit'}, $limit, "$what - X-RateLimit-Limit");
    is($h->{'x-ratelimit-remaining'}, $remaining,
       "$what - X-RateLimit-Remaining");

    my @ok = (reset_of($res->{t0}), reset_of($res->{t1}));
    my $reset = $h->{'x-ratelimit-reset'};

    ok(defined $reset && ($reset eq $ok[0] || $reset eq $ok[1]),
       "$what - X-RateLimit-Reset is the next minute boundary")
        or diag("X-RateLimit-Reset: " . ($reset // 'none')
                . ", expected $ok[0] or $ok[1]");
}

sub no_rl_ok {
    my ($res, $what) = @_;

    ok(!(grep { exists $res->{headers}{$_} } @RL, 'retry-after'),
       "$what - no X-RateLimit headers, no Retry-After")
        or diag(Test::More::explain($res->{headers}));
}

# An admitted request: any answer of a later stage (404, 405, 501, ...),
# never 429, with the headers.
sub admitted_ok {
    my ($res, $status, $limit, $remaining, $what) = @_;

    if (defined $status) {
        is($res->{status}, $status, "$what - $status");
    } else {
        # 501: a route whose endpoint is not there yet
        ok($res->{status} != 429
           && ($res->{status} < 500 || $res->{status} == 501),
           "$what - admitted (status $res->{status})");
    }

    rl_ok($res, $limit, $remaining, $what);
}

# A refused request: the exact 429 and its headers, Retry-After
# consistent with X-RateLimit-Reset.
sub limited_ok {
    my ($res, $limit, $what) = @_;

    is($res->{status}, 429, "$what - 429");
    is($res->{headers}{'content-type'}, 'application/json',
       "$what - Content-Type");
    is($res->{content} // '', $res->{method} eq 'HEAD' ? '' : $::LIMITED,
       "$what - body");

    rl_ok($res, $limit, 0, $what);

    my $ra = $res->{headers}{'retry-after'};
    my $reset = $res->{headers}{'x-ratelimit-reset'} // 0;

    ok(defined $ra && $ra =~ /^\d+$/ && $ra >= 1 && $ra <= 60,
       "$what - Retry-After in 1 ... 60")
        or diag('Retry-After: ' . ($ra // 'none'));

    # whole seconds to the window's end, rounded up, from the server's
    # clock, which read a time between t0 and t1
    my $lo = $reset - POSIX::floor($res->{t1});
    my $hi = $reset - POSIX::floor($res->{t0});
    $lo = 1 if $lo < 1;

    ok(defined $ra && $ra >= $lo && $ra <= $hi,
       "$what - Retry-After is the seconds to X-RateLimit-Reset")
        or diag("Retry-After " . ($ra // 'none')
                . ", expected $lo ... $hi (Reset $reset)");
}

sub pid_of_worker {
    my $r = http_request('GET', '/pid', {}, 5);
    return $r->{status} == 200 ? $r->{content} : undef;
}

sub error_log_text {
    open my $fh, '<', $Test::Nginx::Util::ErrLogFile or return '';
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s // '';
}

sub edit_conf {
    my ($from, $to) = @_;

    my $file = $Test::Nginx::Util::ConfFile;

    open my $fh, '<', $file or die "open $file: $!";
    my $conf = do { local $/; <$fh> };
    close $fh;

    my $n = ($conf =~ s/\Q$from\E/$to/g);
    die "\"$from\" is not in $file" unless $n;

    open $fh, '>', $file or die "open $file: $!";
    print $fh $conf;
    close $fh;
}


# --- the checks ---------------------------------------------------------

my %checks;

# other=3: every stage-2 answer carries the headers, Remaining counts down
# by one per request whatever the answer (404, 405, 501), 429 at 4.
$checks{countdown} = sub {
    my ($name) = @_;
    my $k = $KEYS[0];

    fresh_window(10);

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 3, 2,
                "$name - 1st, unknown route");

    my $r = req('DELETE', '/api/v1/sessions', $k);
    admitted_ok($r, 405, 3, 1, "$name - 2nd, known route, wrong method");
    is($r->{headers}{allow}, 'GET, HEAD, POST', "$name - 2nd - Allow");

    admitted_ok(req('PUT', '/api/v1/sessions/abc/images', $k), 405, 3, 0,
                "$name - 3rd, known route, wrong method");

    # a refused request is not counted: Remaining stays 0, the body and
    # Retry-After are those of the window, every time
    for my $i (4 .. 9) {
        my $m = $i % 2 ? 'GET' : 'POST';
        limited_ok(req($m, '/api/v1/nope', $k), 3, "$name - ${i}th ($m)");
    }
};

# other=2: refused requests in one window leave nothing behind for the
# next: its first request has Remaining limit - 1.  Waits for the next
# minute (at most 61 s).
$checks{next_window} = sub {
    my ($name) = @_;
    my $k = $KEYS[1];

    fresh_window(5);

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 2, 1, "$name - 1st");
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 2, 0, "$name - 2nd");

    my $last;
    for my $i (1 .. 20) {
        $last = req('GET', '/api/v1/nope', $k);
        last unless $last->{status} == 429;
    }
    limited_ok($last, 2, "$name - 20 refused");

    my $reset = $last->{headers}{'x-ratelimit-reset'};
    my $wait = $reset - Time::HiRes::time() + 0.05;

    Test::More::note(sprintf '%s: waiting %.1f s for the next window',
                             $name, $wait);
    Time::HiRes::sleep($wait) if $wait > 0;

    my $r = req('GET', '/api/v1/nope', $k);
    admitted_ok($r, 404, 2, 1, "$name - next window, 1st");
    is($r->{headers}{'x-ratelimit-reset'}, $reset + 60,
       "$name - next window - Reset one minute later");
};

# A 401 (or the 403 of a suspended account) is answered in stage 1: no
# headers, nothing counted for any key.
$checks{unauthenticated} = sub {
    my ($name) = @_;
    my $k = $KEYS[2];

    fresh_window(10);

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 3, 2,
                "$name - the key, 1st");

    for my $i (1 .. 5) {
        my $r = req('GET', '/api/v1/nope', random_key('sess'));
        is($r->{status}, 401, "$name - unknown key $i - 401");
        is($r->{content}, $::INVALID, "$name - unknown key $i - body");
        no_rl_ok($r, "$name - unknown key $i");
    }

    # the key with one hex digit too many: malformed
    my $r = req('GET', '/api/v1/nope', undef,
                { Authorization => "Bearer ${k}0" });
    is($r->{status}, 401, "$name - malformed key - 401");
    no_rl_ok($r, "$name - malformed key");

    $r = req('GET', '/api/v1/nope', undef, { Authorization => 'Basic x' });
    is($r->{status}, 401, "$name - Basic - 401");
    no_rl_ok($r, "$name - Basic");

    $r = req('GET', '/api/v1/nope');
    is($r->{status}, 401, "$name - no key - 401");
    no_rl_ok($r, "$name - no key");

    $r = req('GET', '/api/v1/nope', $SUSPENDED);
    is($r->{status}, 403, "$name - suspended account - 403");
    no_rl_ok($r, "$name - suspended account");

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 3, 1,
                "$name - the key, 2nd: none of the above was counted");

    # hex digits in either case are the same key: the same counters
    (my $upper = $k) =~ s/_(.*)$/'_' . uc $1/e;
    admitted_ok(req('GET', '/api/v1/nope', $upper), 404, 3, 0,
                "$name - the key in upper case is the same key");
};

# other=2: each key has counters of its own, same project or not.
$checks{two_keys} = sub {
    my ($name) = @_;
    my ($ka, $kb, $kc) = @KEYS[3, 4, 17];

    fresh_window(10);

    admitted_ok(req('GET', '/api/v1/nope', $ka), 404, 2, 1, "$name - A 1st");
    admitted_ok(req('GET', '/api/v1/nope', $ka), 404, 2, 0, "$name - A 2nd");
    limited_ok(req('GET', '/api/v1/nope', $ka), 2, "$name - A 3rd");

    admitted_ok(req('GET', '/api/v1/nope', $kb), 404, 2, 1,
                "$name - B (same project) 1st");
    limited_ok(req('GET', '/api/v1/nope', $ka), 2, "$name - A 4th");
    admitted_ok(req('GET', '/api/v1/nope', $kb), 404, 2, 0, "$name - B 2nd");
    limited_ok(req('GET', '/api/v1/nope', $kb), 2, "$name - B 3rd");

    admitted_ok(req('GET', '/api/v1/nope', $kc), 404, 2, 1,
                "$name - C (another account) 1st");
};

# create=2 list=3 other=4: three counters per key; HEAD is list.
$checks{classes} = sub {
    my ($name) = @_;
    my $k = $KEYS[5];

    fresh_window(10);

    # create: POST /api/v1/sessions (no body: whatever stage 4 says)
    admitted_ok(req('POST', '/api/v1/sessions', $k), undef, 2, 1,
                "$name - create 1st");
    admitted_ok(req('POST', '/api/v1/sessions', $k), undef, 2, 0,
                "$name - create 2nd");
    limited_ok(req('POST', '/api/v1/sessions', $k), 2, "$name - create 3rd");

    # list: GET and HEAD /api/v1/sessions, untouched by create
    admitted_ok(req('GET', '/api/v1/sessions', $k), undef, 3, 2,
                "$name - list GET");
    admitted_ok(req('HEAD', '/api/v1/sessions', $k), undef, 3, 1,
                "$name - list HEAD counts as list");
    admitted_ok(req('GET', '/api/v1/sessions?limit=1', $k), undef, 3, 0,
                "$name - list GET with a query string");
    limited_ok(req('HEAD', '/api/v1/sessions', $k), 3,
               "$name - list HEAD 4th");
    limited_ok(req('GET', '/api/v1/sessions', $k), 3, "$name - list GET 5th");
    limited_ok(req('POST', '/api/v1/sessions', $k), 2, "$name - create 4th");

    # other: everything else, untouched by both, whatever the method
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 4, 3,
                "$name - other: unknown route");
    admitted_ok(req('DELETE', '/api/v1/sessions', $k), 405, 4, 2,
                "$name - other: DELETE /api/v1/sessions");
    admitted_ok(req('POST', '/api/v1/sessions/', $k), 404, 4, 1,
                "$name - other: POST /api/v1/sessions/ (trailing slash)");
    admitted_ok(req('HEAD', '/api/v1/sessions/x/poll', $k), undef, 4, 0,
                "$name - other: HEAD of another route");
    limited_ok(req('GET', '/api/v1/nope', $k), 4, "$name - other 5th");
};

# http: other=2; location /api/: create=1 only.  Each class is inherited
# on its own, list keeps the default (300).
$checks{inherit} = sub {
    my ($name) = @_;
    my $k = $KEYS[6];

    fresh_window(10);

    admitted_ok(req('POST', '/api/v1/sessions', $k), undef, 1, 0,
                "$name - create from the location");
    limited_ok(req('POST', '/api/v1/sessions', $k), 1, "$name - create 2nd");

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 2, 1,
                "$name - other from http");
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 2, 0,
                "$name - other 2nd");
    limited_ok(req('GET', '/api/v1/nope', $k), 2, "$name - other 3rd");

    admitted_ok(req('GET', '/api/v1/sessions', $k), undef, 300, 299,
                "$name - list default");
};

# http: other=2 create=9; server: list=5; /api/: other=7;
# /api/v1/sessions: nothing of its own.  One counter per key and class,
# compared with the limit of the location that answers.
$checks{override} = sub {
    my ($name) = @_;
    my $k = $KEYS[7];

    fresh_window(10);

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 7, 6,
                "$name - /api/: other from the location");
    admitted_ok(req('POST', '/api/v1/sessions', $k), undef, 9, 8,
                "$name - /api/v1/sessions: create from http");
    admitted_ok(req('GET', '/api/v1/sessions', $k), undef, 5, 4,
                "$name - /api/v1/sessions: list from the server");
    admitted_ok(req('DELETE', '/api/v1/sessions', $k), 405, 2, 0,
                "$name - /api/v1/sessions: other from http, same counter");
    limited_ok(req('DELETE', '/api/v1/sessions', $k), 2,
               "$name - /api/v1/sessions: other over its limit");
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 7, 4,
                "$name - /api/: the same counter under the higher limit");
};

# 4 workers, other=50, 200 requests of one key at once: exactly 50
# admitted, each Remaining from 49 to 0 exactly once, 150 refused.  The
# burst goes to a "reuseport" listener, on which the kernel spreads the
# connections over all the workers, so that they do contend for the
# counter; three bursts, each with a key of its own.
$checks{concurrency} = sub {
    my ($name) = @_;
    my $n = 200;
    my $port = $Test::Nginx::Util::RandPorts->{TEST_NGINX_RAND_PORT_1}
        or die "no TEST_NGINX_RAND_PORT_1";

    fresh_window(30);

    my %workers;

    for my $burst (1 .. 3) {
        my $k = $KEYS[[8, 13, 14]->[$burst - 1]];
        my $what = "$name - burst $burst";

        # authenticate once (class list), so that the burst finds the key
        # in the shared auth cache
        admitted_ok(req('GET', '/api/v1/sessions', $k), undef, 300, 299,
                    "$what - warm-up (list)");

        my $req = "GET /api/v1/nope HTTP/1.1\r\nHost: localhost\r\n"
                  . "Authorization: Bearer $k\r\nConnection: close\r\n\r\n";

        # every connection is open before the first request is sent
        my ($raws, $left) = burst($n, $req, $port);
        is($left, 0, "$what - every answer within 30 s");

        my (%status, @remaining, @bad);

        for my $raw (@$raws) {
            my ($st) = $raw =~ m{^HTTP/1\.1 (\d{3}) };
            my ($rem) = $raw =~ m{\r\nX-RateLimit-Remaining: (\d+)\r\n}i;
            my ($pid) = $raw =~ m{\r\nX-Worker: (\d+)\r\n}i;

            $st //= 'none';
            $status{$st}++;
            $workers{$pid}++ if defined $pid;

            if ($st eq '404') {
                push @remaining, $rem // -1;

            } elsif ($st eq '429') {
                push @bad, "429 with Remaining " . ($rem // 'none')
                    if !defined $rem || $rem != 0;
                push @bad, '429 without Retry-After'
                    unless $raw =~ /\r\nRetry-After: \d+\r\n/i;
            }
        }

        is($status{404} // 0, 50, "$what - exactly 50 admitted (404)");
        is($status{429} // 0, 150, "$what - 150 refused (429)");
        is(join(' ', map { "$_: $status{$_}" } sort keys %status),
           '404: 50 429: 150', "$what - no other answer");
        is_deeply([sort { $a <=> $b } @remaining], [0 .. 49],
                  "$what - Remaining 49 ... 0, each once");
        is_deeply(\@bad, [], "$what - every 429 has Remaining 0, Retry-After");
    }

    cmp_ok(scalar keys %workers, '>=', 2,
           "$name - the bursts were answered by several workers")
        or diag(Test::More::explain(\%workers));
    Test::More::note("$name: answers per worker: "
                     . join(', ', map { "$_: $workers{$_}" }
                                  sort keys %workers));
};

# other=10: part of the limit used, a reload (SIGHUP) that also raises the
# limit to 20: the new workers find the counter where it was.
$checks{reload} = sub {
    my ($name) = @_;
    my $k = $KEYS[9];

    fresh_window(20);

    for my $i (1 .. 4) {
        admitted_ok(req('GET', '/api/v1/nope', $k), 404, 10, 10 - $i,
                    "$name - before the reload, $i");
    }

    my $old = pid_of_worker();
    ok($old, "$name - the worker's pid");

    edit_conf('session_limits other=10;', 'session_limits other=20;');
    kill 'HUP', master_pid() or die "kill HUP: $!";

    my ($new) = wait_until(10, 0.1, sub {
        my $p = pid_of_worker();
        return defined $p && $p ne $old ? $p : undef;
    });
    ok($new, "$name - a new worker answers after the reload");

    # the old worker accepts until it has handled its QUIT: wait for it to
    # be gone, so that the next request surely meets the new one
    my ($gone) = wait_until(10, 0.05, sub { !kill 0, $old });
    ok($gone, "$name - the old worker has exited");

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 20, 15,
                "$name - after the reload: 5 used of the new limit 20");

    unlike(error_log_text(), qr/\[(?:emerg|alert|crit)\]/,
           "$name - no [emerg], [alert] or [crit] in the log");
};

# z:1m, then the conf says z:2m and nginx gets SIGHUP: the reload is
# refused with the message, the old workers keep serving, counters intact.
$checks{resize} = sub {
    my ($name) = @_;
    my $k = $KEYS[10];

    fresh_window(20);

    for my $i (1 .. 3) {
        admitted_ok(req('GET', '/api/v1/nope', $k), 404, 10, 10 - $i,
                    "$name - before the reload, $i");
    }

    my $old = pid_of_worker();
    ok($old, "$name - the worker's pid");

    edit_conf('session_limit_zone z:1m;', 'session_limit_zone z:2m;');
    kill 'HUP', master_pid() or die "kill HUP: $!";

    my $text = 'session_limit_zone "z" cannot change size from 1048576'
               . ' to 2097152 on reload, restart nginx to resize it';
    my $msg = qr/\[emerg\] .*\Q$text\E/;

    my ($seen) = wait_until(10, 0.1, sub { error_log_text() =~ $msg });
    ok($seen, "$name - the reload is refused with the message")
        or diag(error_log_text() =~ /(\[emerg\].*)/ ? $1 : 'no [emerg]');

    # give a (wrongly) accepted reload the time to start its workers
    Time::HiRes::sleep(0.5);

    is(pid_of_worker(), $old, "$name - the old worker keeps serving");

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 10, 6,
                "$name - the counter is intact");
};

# Stages 1 and 2 run after nginx's own access checks (allow/deny,
# "satisfy"): a request they refuse is answered by them and not counted,
# even when the auth cache knows the key (the fast path in the access
# phase).  Where "satisfy any" grants access before the module's access
# handler runs, the content handler does stages 1 and 2 itself; a location
# nested in a session_api one that serves something else is left alone.
$checks{access} = sub {
    my ($name) = @_;
    my $k = $KEYS[15];
    my $forbidden = body(403, 'Forbidden', 'forbidden');

    fresh_window(10);

    # the key is now in the auth cache
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 4, 3,
                "$name - 1st, admitted");

    for my $p ('/denied/v1/nope', '/any-deny/v1/nope') {
        for my $i (1 .. 3) {
            my $r = req('GET', $p, $k);
            is($r->{status}, 403, "$name - $p $i - 403");
            is($r->{content}, $forbidden, "$name - $p $i - body");
            no_rl_ok($r, "$name - $p $i");
        }
    }

    my $r = req('GET', '/any-allow/v1/nope');
    is($r->{status}, 401, "$name - satisfy any, allowed, no key - 401");
    no_rl_ok($r, "$name - satisfy any, allowed, no key");

    admitted_ok(req('GET', '/any-allow/v1/nope', $k), 404, 4, 2,
                "$name - satisfy any, allowed: counted by the content handler");

    $r = req('GET', '/api/nested/pixel.gif');
    is($r->{status}, 200, "$name - nested location, no key - 200");
    is($r->{headers}{'content-type'}, 'image/gif',
       "$name - nested location - its own answer");
    no_rl_ok($r, "$name - nested location");

    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 4, 1,
                "$name - the 403s were not counted");
    admitted_ok(req('GET', '/api/v1/nope', $k), 404, 4, 0,
                "$name - the last one admitted");
};

# z:32k holds about a hundred keys: 300 keys, each twice in a row (other=1:
# 404 then 429).  The zone evicts the least recently used counters with an
# ALERT, never crashes, and never lets a key through unlimited.
$checks{zone_full} = sub {
    my ($name) = @_;
    my $n = 300;

    my @keys = map { random_key('sess') } 1 .. $n;

    psql('INSERT INTO api_keys (project_id, key_hash, prefix, hint) '
         . 'SELECT ' . sql_quote($PROJECT) . ', '
         . q{sha256(convert_to(k, 'UTF8')), 'sess', right(k, 4) }
         . 'FROM unnest(ARRAY['
         . join(',', map { sql_quote($_) } @keys) . ']) AS k');

    fresh_window(30);

    my @bad;
    my $t0 = Time::HiRes::time();

    for my $i (0 .. $#keys) {
        my $r1 = req('GET', '/api/v1/nope', $keys[$i]);
        my $r2 = req('GET', '/api/v1/nope', $keys[$i]);
        my $h1 = $r1->{headers};
        my $h2 = $r2->{headers};

        push @bad, "key $i: 1st $r1->{status}, Remaining "
                   . ($h1->{'x-ratelimit-remaining'} // 'none')
            unless $r1->{status} == 404
                   && ($h1->{'x-ratelimit-remaining'} // '') eq '0';

        # the counter made a moment ago is the most recently used one
        push @bad, "key $i: 2nd $r2->{status}"
            unless $r2->{status} == 429
                   && ($h2->{'x-ratelimit-remaining'} // '') eq '0';

        last if @bad > 10;
    }

    Test::More::note(sprintf '%s: %d requests in %.1f s', $name, 2 * $n,
                             Time::HiRes::time() - $t0);

    is_deeply(\@bad, [], "$name - each key: 404, then 429");

    # the first key's counter was the coldest: evicted, it starts again
    my $r = req('GET', '/api/v1/nope', $keys[0]);
    admitted_ok($r, 404, 1, 0, "$name - the first key, evicted, again");
    limited_ok(req('GET', '/api/v1/nope', $keys[0]), 1,
               "$name - the first key, then 429");

    my $log = error_log_text();
    my @alerts = $log =~ /(\[alert\] [^\n]*)/g;

    my $full = 'session_limit_zone "z" is full: evicted the counters of'
               . ' \d+ least recently used keys, make the zone larger';
    $full = qr/$full/;

    ok((grep { $_ =~ $full } @alerts),
       "$name - the zone-full ALERT") or diag(Test::More::explain(\@alerts));
    ok(!(grep { !/session_limit_zone "z" is full/ } @alerts),
       "$name - no other ALERT") or diag(Test::More::explain(\@alerts));

    # at most one ALERT per second
    my %per_sec;
    my $stamp = qr{^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[alert\] .*is full}m;
    $per_sec{$_}++ for $log =~ /$stamp/g;
    ok(!(grep { $_ > 1 } values %per_sec), "$name - at most one per second")
        or diag(Test::More::explain(\%per_sec));

    unlike($log, qr/signal \d+|ngx_slab_alloc\(\) failed|\[crit\]/,
           "$name - no crash, no slab allocation failure message");

    psql('DELETE FROM api_keys WHERE key_hash IN (SELECT '
         . q{sha256(convert_to(k, 'UTF8')) FROM unnest(ARRAY[}
         . join(',', map { sql_quote($_) } @keys) . ']) AS k)');
};


# --- blocks -------------------------------------------------------------

master_on();
# 200 connections at once in TEST 8 (Test::Nginx's default is 64)
worker_connections(1024);
no_shuffle();
no_long_string();

# the key check of every block reads the debug-level lines too
debug_log_note('no key in the error log');

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block);

    # no key of this script in the log (written at debug level), whatever
    # the block checks besides
    add_no_error_log($block, map { qr/\Q$_\E/i } @SECRETS);

    # run from --- init: nginx is up, the block's request comes after
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: countdown: headers on 404 and 405, Remaining down by one, 429 with exact JSON, refusals not counted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        session_limits other=3;
    }
--- check: countdown
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[0]\n"
--- error_code: 429
--- response_headers
Content-Type: application/json
X-RateLimit-Limit: 3
X-RateLimit-Remaining: 0
--- response_headers_like
X-RateLimit-Reset: \d{10}
Retry-After: (?:[1-9]|[1-5][0-9]|60)
--- raw_response_headers_like: ^HTTP/1\.1 429 Too Many Requests\r\n
--- response_body eval
$::LIMITED
--- no_error_log
[error]
[alert]



=== TEST 2: the window after one full of refusals starts afresh (waits for the next minute)
--- config
    location /api/ {
        session_api;
        session_limits other=2;
    }
--- check: next_window
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[1]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 2
X-RateLimit-Remaining: 0
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]
[alert]



=== TEST 3: 401 and 403 are not counted and carry no X-RateLimit headers
--- config
    location /api/ {
        session_api;
        session_limits other=3;
    }
--- check: unauthenticated
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer " . SessionTest::random_key('sess')
--- error_code: 401
--- response_headers
!X-RateLimit-Limit
!X-RateLimit-Remaining
!X-RateLimit-Reset
!Retry-After
--- response_body eval
$::INVALID
--- no_error_log
[error]
[alert]



=== TEST 4: two keys are independent
--- config
    location /api/ {
        session_api;
        session_limits other=2;
    }
--- check: two_keys
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[17]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 2
X-RateLimit-Remaining: 0
--- no_error_log
[error]
[alert]



=== TEST 5: the three classes are independent; HEAD /api/v1/sessions is list
--- config
    location /api/ {
        session_api;
        session_limits create=2 list=3 other=4;
    }
--- check: classes
--- request
HEAD /api/v1/sessions
--- more_headers eval
"Authorization: Bearer $::KEYS[5]\n"
--- error_code: 429
--- response_headers
X-RateLimit-Limit: 3
X-RateLimit-Remaining: 0
--- response_body
--- no_error_log
[error]
[alert]



=== TEST 6: each class is inherited on its own (http other=2, location create=1)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limits other=2;
--- config
    location /api/ {
        session_api;
        session_limits create=1;
    }
--- check: inherit
--- request
POST /api/v1/sessions
--- more_headers eval
"Authorization: Bearer $::KEYS[6]\n"
--- error_code: 429
--- response_headers
X-RateLimit-Limit: 1
X-RateLimit-Remaining: 0
--- response_body eval
$::LIMITED
--- no_error_log
[error]
[alert]



=== TEST 7: http, server and location levels; one counter per class across locations
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limits other=2 create=9;
--- config
    session_limits list=5;

    location /api/ {
        session_api;
        session_limits other=7;
    }

    location /api/v1/sessions {
        session_api;
    }
--- check: override
--- request
DELETE /api/v1/sessions
--- more_headers eval
"Authorization: Bearer $::KEYS[7]\n"
--- error_code: 429
--- response_headers
X-RateLimit-Limit: 2
X-RateLimit-Remaining: 0
--- response_body eval
$::LIMITED
--- no_error_log
[error]
[alert]



=== TEST 8: access checks first: allow/deny and satisfy refuse before stage 1, nothing counted; nested locations left alone
--- config
    session_limits other=4;

    location /api/ {
        session_api;

        location /api/nested/ {
            empty_gif;
        }
    }

    location /denied/ {
        session_api;
        deny all;
    }

    location /any-deny/ {
        session_api;
        satisfy any;
        deny all;
    }

    location /any-allow/ {
        session_api;
        satisfy any;
        allow 127.0.0.1;
        deny all;
    }
--- check: access
--- request
GET /denied/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[15]\n"
--- error_code: 403
--- response_headers
Content-Type: application/json
!X-RateLimit-Limit
--- response_body eval
main::body(403, 'Forbidden', 'forbidden')
--- no_error_log
[alert]



=== TEST 9: 4 workers, 200 requests at once, other=50: exactly 50 admitted
--- workers: 4
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 60s;
--- config
    listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 reuseport;

    location /api/ {
        session_api;
        session_limits other=50;
        add_header X-Worker $pid always;
    }
--- check: concurrency
--- log_level: warn
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[14]\n"
--- error_code: 429
--- response_headers
X-RateLimit-Limit: 50
X-RateLimit-Remaining: 0
--- no_error_log
[error]
[alert]
worker_connections are not enough



=== TEST 10: counters survive a reload (SIGHUP) that changes the limit
--- config
    location /api/ {
        session_api;
        session_limits other=10;
    }
    location = /pid {
        return 200 $pid;
    }
--- check: reload
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[9]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 20
X-RateLimit-Remaining: 14
--- no_error_log
[error]



=== TEST 11: a reload that resizes the zone is refused, the old configuration keeps serving
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone z:1m;
--- config
    location /api/ {
        session_api;
        session_limits other=10;
    }
    location = /pid {
        return 200 $pid;
    }
--- check: resize
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[10]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 10
X-RateLimit-Remaining: 5
--- error_log eval
qr/session_limit_zone "z" cannot change size from 1048576 to 2097152 on reload, restart nginx to resize it/
--- no_error_log
[error]



=== TEST 12: a full zone evicts least recently used counters with an ALERT, no crash
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone z:32k;
--- config
    location /api/ {
        session_api;
        session_limits other=1;
    }
--- check: zone_full
--- log_level: warn
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[11]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 1
X-RateLimit-Remaining: 0
--- error_log eval
qr/\[alert\] .*session_limit_zone "z" is full: evicted the counters of \d+ least recently used keys, make the zone larger/
--- no_error_log
[error]
[crit]
signal



=== TEST 13: limits at the extremes (1 and 1000000000) are accepted
--- config
    location /api/ {
        session_api;
        session_limits create=1 list=1000000000 other=1000000000;
    }
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[12]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 1000000000
X-RateLimit-Remaining: 999999999
--- no_error_log
[error]



=== TEST 14: session_limits without arguments
--- config
    location /api/ {
        session_api;
        session_limits;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid number of arguments in "session_limits" directive in \S+nginx\.conf:\d+/



=== TEST 15: session_limits with an unknown class
--- config
    location /api/ {
        session_api;
        session_limits foo=1;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid parameter "foo=1" in "session_limits".* in \S+nginx\.conf:\d+/



=== TEST 16: session_limits with a class in another case
--- config
    location /api/ {
        session_api;
        session_limits Create=1;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid parameter "Create=1" in "session_limits".* in \S+nginx\.conf:\d+/



=== TEST 17: session_limits without "="
--- config
    location /api/ {
        session_api;
        session_limits create;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid parameter "create" in "session_limits".* in \S+nginx\.conf:\d+/



=== TEST 18: session_limits create=0
--- config
    location /api/ {
        session_api;
        session_limits create=0;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"create=0".*"session_limits".*1 and 1000000000.* in \S+nginx\.conf:\d+/



=== TEST 19: session_limits create=abc
--- config
    location /api/ {
        session_api;
        session_limits create=abc;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"create=abc".*"session_limits".* in \S+nginx\.conf:\d+/



=== TEST 20: session_limits with an empty value
--- config
    location /api/ {
        session_api;
        session_limits other=;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"other=".*"session_limits".* in \S+nginx\.conf:\d+/



=== TEST 21: session_limits with a negative value
--- config
    location /api/ {
        session_api;
        session_limits list=-1;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"list=-1".*"session_limits".* in \S+nginx\.conf:\d+/



=== TEST 22: session_limits over 1000000000
--- config
    location /api/ {
        session_api;
        session_limits other=1000000001;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"other=1000000001".*"session_limits".*1 and 1000000000.* in \S+nginx\.conf:\d+/



=== TEST 23: session_limits with a value far past 64 bits
--- config
    location /api/ {
        session_api;
        session_limits other=99999999999999999999999;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"other=99999999999999999999999".*"session_limits".* in \S+nginx\.conf:\d+/



=== TEST 24: session_limits naming a class twice
--- config
    location /api/ {
        session_api;
        session_limits create=1 create=2;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid parameter "create=2" in "session_limits".* in \S+nginx\.conf:\d+/



=== TEST 25: session_limits twice in one block
--- config
    location /api/ {
        session_api;
        session_limits create=1;
        session_limits list=2;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_limits" directive is duplicate in \S+nginx\.conf:\d+/



=== TEST 26: session_limits twice at the http level
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limits other=5;
    session_limits other=5;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_limits" directive is duplicate in \S+nginx\.conf:\d+/



=== TEST 27: session_limit_zone too small
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone z:1k;
--- config
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"z:1k".*too small.*"session_limit_zone".* in \S+nginx\.conf:\d+/
