# A good key is never locked out by another client's bad keys (docs/api.md §10, "Authentication failures"): once a client address
# has session_auth_fail_limit failures in the minute, a key the node found
# valid within the last hour is still looked up when its cached answer is
# stale (and served), a valid key never seen gets 429, and a key deleted
# since counts as a failure again.  The memory of keys seen valid has a
# budget in session_limit_zone: the oldest is forgotten, with an ALERT.
#
# Blocks that say "--- check: NAME" run NAME from --- init against the
# nginx Test::Nginx started for the block; the block's own request then
# looks at what the check left behind.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session;
use Time::HiRes ();
use SessionTest qw(:DEFAULT error_body status_json listening check_init
                    db_http_config error_log send_get answer);

our $TAG = sprintf 't035-%d-%d', $$, time;

our (%KEY, %KEY_ID, @MANY);

# the fixtures' keys, by role
{
    my $f = fixture(plan => 'pro', name => "$TAG-a");

    for my $name (qw(SEEN UNSEEN DEL SILENT OFF)) {
        my $k = sessionctl_ok('key', 'create', $f->{project_id});
        $KEY{$name} = $k->{key};
        $KEY_ID{$name} = $k->{key_id};
    }

    # 100 more keys of the project, written here: the hash is the SHA-256
    # of the lower-case key (src/core/ngx_http_session_key.c)
    @MANY = psql(
        q{WITH k AS (SELECT 'sess_' || md5(} . sql_quote($TAG)
        . q{ || i::text) AS key, i FROM generate_series(1, 100) i) }
        . q{, ins AS (INSERT INTO api_keys (project_id, key_hash, prefix, }
        . q{hint) SELECT } . sql_quote($f->{project_id})
        . q{, sha256(convert_to(key, 'UTF8')), 'sess', right(key, 4) }
        . q{FROM k) SELECT key FROM k ORDER BY i});
    die "expected 100 keys" unless @MANY == 100;
}

master_on();
no_shuffle();
no_long_string();

our $INVALID = error_body(401, 'Unauthorized', 'API key is invalid');
our $TOO_MANY = error_body(429, 'Too Many Requests',
                           'too many failed authentication attempts');

sub api {
    my ($key) = @_;
    return http_request('GET', '/api/v1/nope',
                        { Authorization => "Bearer $key" }, 10);
}

sub status { api($_[0])->{status} }

# Failures count per UTC minute: a check that counts some must not see
# the minute change under it.  Late in a minute, wait for the next one.
sub fresh_minute {
    my $s = Time::HiRes::time() - 60 * int(time / 60);
    Time::HiRes::sleep(60.2 - $s) if $s > 40;
}

# the address at its limit: unknown keys until one gets 429
sub over_limit {
    my ($name, $limit) = @_;

    my @st = map { status(random_key('sess')) } 1 .. $limit + 1;
    is("@st", join(' ', ('401') x $limit, '429'),
       "$name - $limit unknown keys: 401, then 429");
}

# Asks with the key until one of its requests was a database lookup (its
# cached answer had gone stale): the answers until then, and whether one
# was a lookup.
sub until_looked_up {
    my ($key) = @_;

    my @st;
    my ($ok) = wait_until(10, 0.1, sub {
        my $m0 = status_json()->{auth_cache}{misses};
        push @st, status($key);
        return status_json()->{auth_cache}{misses} > $m0;
    });

    return ($ok, @st);
}

# N valid keys of a project of their own, written as @MANY's are
sub valid_keys {
    my ($tag, $n) = @_;

    my $f = fixture(plan => 'pro', name => "$TAG-$tag");

    return psql(
        q{WITH k AS (SELECT 'sess_' || md5(} . sql_quote("$TAG-$tag")
        . q{ || i::text) AS key, i FROM generate_series(1, } . $n
        . q{) i), ins AS (INSERT INTO api_keys (project_id, key_hash, }
        . q{prefix, hint) SELECT } . sql_quote($f->{project_id})
        . q{, sha256(convert_to(key, 'UTF8')), 'sess', right(key, 4) }
        . q{FROM k) SELECT key FROM k ORDER BY i});
}

# a psql of its own holding api_keys locked (every key lookup waits),
# once the lock is granted; psql_end() lets it go
sub lock_keys {
    return psql_begin('LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE',
                      q{SELECT count(*) FROM pg_locks WHERE relation = }
                      . q{'api_keys'::regclass AND granted AND mode = }
                      . q{'AccessExclusiveLock'});
}

# The keys asked for at once while a psql holds api_keys locked, so that
# their lookups stay under way: the lock is let go once WAITING requests
# wait in nginx for the address's lookups (its debug lines); the answers'
# statuses, in the keys' order.
sub at_once_locked {
    my ($name, $waiting, @keys) = @_;

    my $tx = lock_keys();

    my $wait = qr/session auth: waiting for the address's lookups/;
    my $w0 = error_log_count($wait);
    my @req = map { send_get('/api/v1/nope', $_) } @keys;

    my ($ok) = wait_until(10, 0.02, sub {
        error_log_count($wait) - $w0 >= $waiting
    });
    ok($ok, "$name - $waiting wait for the address's lookups under way");

    psql_end($tx, 'ROLLBACK');

    return map { answer($_, 15)->{status} } @req;
}

my %checks;

# A lookup that waits for the address's others waits session_db_timeout
# (1 s here) at most: with the lookups held longer, both keys get 503,
# then, the lock gone, both are served
$checks{under_way_slow} = sub {
    my ($name) = @_;

    need_debug_log("the auth lookup's debug lines") or return;

    fresh_minute();
    listening();

    my @keys = valid_keys('slow', 2);

    my $tx = lock_keys();

    my @req = map { send_get('/api/v1/nope', $_) } @keys;
    my @ans = map { answer($_, 15) } @req;

    psql_end($tx, 'ROLLBACK');

    is(join(' ', map { $_->{status} } @ans), '503 503',
       "$name - lookups held past session_db_timeout: 503 for both");
    is($ans[$_]{json}{message}, 'database unavailable',
       "$name - answer $_: database unavailable") for 0 .. 1;
    cmp_ok($ans[$_]{elapsed}, '<', 3, "$name - answer $_ within the timeout")
        for 0 .. 1;
    cmp_ok(error_log_count(qr/waiting for the address's lookups/), '>', 0,
           "$name - one waited for the other's lookup");

    my @st = map { status($_) } @keys;
    is("@st", '404 404', "$name - then both served");
};

# Lookups under way are not failures: valid keys that the node has not
# seen, more at once than the address's limit, are all served; those
# past the limit wait for the others instead of getting 429
$checks{under_way} = sub {
    my ($name) = @_;

    need_debug_log("the auth lookup's debug lines") or return;

    fresh_minute();
    listening();

    # seven valid keys at once against a limit of 5, lookups held: five
    # under way, two waiting, all served
    my @st = at_once_locked($name, 2, valid_keys('seven', 7));
    is("@st", '404 404 404 404 404 404 404',
       "$name - 7 valid keys never seen, at once: all served");

    # no failure was counted: 5 unknown keys are 401, the sixth 429
    over_limit($name, 5);
};

# Four failures, then six valid keys at once: one lookup under way at a
# time (4 failures and 1 under way make 5), the others wait their turn
$checks{under_way_failed} = sub {
    my ($name) = @_;

    need_debug_log("the auth lookup's debug lines") or return;

    fresh_minute();
    listening();

    my @st = map { status(random_key('sess')) } 1 .. 4;
    is("@st", '401 401 401 401', "$name - 4 failures");

    @st = at_once_locked($name, 5, valid_keys('six', 6));
    is("@st", '404 404 404 404 404 404',
       "$name - 6 valid keys at once after 4 failures: all served");

    @st = map { status(random_key('sess')) } 1 .. 2;
    is("@st", '401 429', "$name - then one failure more, and the limit");
};

# Keys seen valid, then the address over its limit.
$checks{mixed} = sub {
    my ($name) = @_;

    fresh_minute();
    listening();

    my $s0 = status_json();

    my @st = map { status($KEY{$_}) } qw(SEEN DEL SILENT);
    is("@st", '404 404 404', "$name - three valid keys in use");
    is(status_json()->{auth_cache}{seen_valid}
       - $s0->{auth_cache}{seen_valid}, 3, "$name - three keys seen valid");

    over_limit($name, 3);
    is(status_json()->{auth_cache}{seen_valid}
       - $s0->{auth_cache}{seen_valid}, 3,
       "$name - no unknown key is seen valid");

    # a key seen valid: its answer, cached or not, is served
    my $r = api($KEY{SEEN});
    is($r->{status}, 404, "$name - the key seen valid: 404");
    ok(defined $r->{headers}{'x-ratelimit-limit'},
       "$name - counted by stage 2 as usual");

    my ($ok, @seen) = until_looked_up($KEY{SEEN});
    ok($ok, "$name - the key seen valid was looked up again, its cached "
            . "answer stale");
    is("@seen", join(' ', ('404') x @seen),
       "$name - and served every time (@seen)");

    # a valid key the node has not seen: refused, no lookup.  Judged by
    # the request's debug lines: the count of statements also counts the
    # expiry sweep's, every 5 s (one came in between, once in a CI lane)
    my $mark = length error_log();
    my $u = api($KEY{UNSEEN});
    is($u->{status}, 429, "$name - a valid key never seen: 429");
    is($u->{content}, $TOO_MANY, "$name - too many failed attempts");

    if (need_debug_log('the auth lookup\'s debug lines')) {
        my $log = substr(error_log(), $mark);
        like($log, qr/session auth: the client is at its failure limit/,
             "$name - refused at the address's failure limit");
        my $lookup = 'session auth: cache miss, '
                     . '(?:asking the database|joining a lookup)';
        unlike($log, qr/$lookup/, "$name - without a lookup");
    }

    # deleted, with its notice: forgotten at once, refused
    my $n0 = status_json()->{auth_cache}{seen_valid};
    sessionctl_ok('key', 'delete', $KEY_ID{DEL});
    ($ok) = wait_until(10, 0.05, sub {
        status_json()->{auth_cache}{seen_valid} == $n0 - 1
    });
    ok($ok, "$name - the deletion notice forgot the key");
    is(status($KEY{DEL}), 429, "$name - the deleted key: 429");

    # deleted without a notice: the next lookup finds it gone, counts a
    # failure and forgets it; then it is refused
    psql('UPDATE api_keys SET deleted_at = now() WHERE key_hash = '
         . q{sha256(convert_to('} . lc($KEY{SILENT}) . q{', 'UTF8'))});

    my (@silent, $done);
    ($done) = wait_until(10, 0.1, sub {
        push @silent, status($KEY{SILENT});
        return $silent[-1] == 429;
    });
    ok($done, "$name - the key deleted unannounced is refused at last");
    like("@silent", qr/^(?:404 )*401 (?:401 )*429$/,
         "$name - served while cached, then looked up: 401, then 429 "
         . "(@silent)");
    is(status_json()->{auth_cache}{seen_valid}, $n0 - 2,
       "$name - and forgotten");

    # the key seen valid is still served
    ($ok, @seen) = until_looked_up($KEY{SEEN});
    ok($ok && "@seen" eq join(' ', ('404') x @seen),
       "$name - the key seen valid, looked up again: 404 (@seen)");
};

# session_auth_cache_ttl 0: nothing is cached, every request is a lookup,
# and a key seen valid still is.
$checks{no_cache} = sub {
    my ($name) = @_;

    fresh_minute();

    is(status($KEY{OFF}), 404, "$name - a valid key");
    over_limit($name, 2);

    my @st = map { status($KEY{OFF}) } 1 .. 3;
    is("@st", '404 404 404', "$name - the key seen valid: 404, each a lookup");
    is(status($KEY{UNSEEN}), 429, "$name - a valid key never seen: 429");
};

# The budget of keys seen valid in a 48k zone: 96.  100 keys found valid:
# the 4 oldest are forgotten, with an ALERT, and refused behind an
# address over its limit; the newest is served.
$checks{budget} = sub {
    my ($name) = @_;

    fresh_minute();
    listening();

    my %st;
    $st{ status($_) }++ for @MANY;
    is_deeply(\%st, { 404 => 100 }, "$name - 100 valid keys: 404");

    my $a = status_json()->{auth_cache};
    is($a->{seen_valid}, 96, "$name - 96 kept");
    is($a->{seen_forgotten}, 4, "$name - 4 forgotten");

    my $alert = qr/\[alert\] .*session_limit_zone "small" is full: /
                . qr/forgot \d+ keys found valid within the last hour, /
                . qr/make the zone larger/;
    my ($logged) = wait_until(5, 0.1, sub { error_log() =~ $alert });
    ok($logged, "$name - an ALERT");

    over_limit($name, 1);

    my ($ok, @seen) = until_looked_up($MANY[-1]);
    ok($ok && "@seen" eq join(' ', ('404') x @seen),
       "$name - the newest key, looked up again: 404 (@seen)");
    is(status($MANY[0]), 429, "$name - the oldest, forgotten: 429");
};

# A 32k zone holds about a hundred keys' counters and 64 keys seen valid.
# 200 new valid keys, one request each: each new key forgets the oldest
# key seen valid and evicts the coldest counters.  One ALERT a second says
# both, whichever of the two finds the second free, and an admitted
# request in a later second says what is left: the ALERTs add up to the
# status counts.  (Before, each said only its own: when the same one came
# first in every second, the other was never said.)
$checks{both_full} = sub {
    my ($name) = @_;

    my @keys = map { random_key('sess') } 1 .. 200;

    psql('INSERT INTO api_keys (project_id, key_hash, prefix, hint) '
         . 'SELECT project_id, '
         . q{sha256(convert_to(k, 'UTF8')), 'sess', right(k, 4) }
         . 'FROM api_keys, unnest(ARRAY['
         . join(',', map { sql_quote($_) } @keys) . ']) AS k '
         . 'WHERE key_hash = ' . q{sha256(convert_to(}
         . sql_quote(lc $KEY{SEEN}) . q{, 'UTF8'))});

    fresh_minute();
    listening();

    my %st;
    $st{ status($_) }++ for @keys;
    is_deeply(\%st, { 404 => 200 }, "$name - 200 valid keys: 404");

    # the next second on the clock, then a request that changes nothing
    # in the zone (its key's answer and counter are there)
    my $next = int(Time::HiRes::time()) + 1;
    Time::HiRes::sleep($next - Time::HiRes::time() + 0.05);
    is(status($keys[-1]), 404, "$name - the newest key again: 404");

    my $z = status_json();
    my $evicted = $z->{zone}{evictions};
    my $forgotten = $z->{auth_cache}{seen_forgotten};
    ok($evicted > 0 && $forgotten > 0,
       "$name - counters evicted ($evicted), keys forgotten ($forgotten)");

    my @alerts = error_log() =~ /(\[alert\][^\n]*)/g;
    my ($e, $f) = (0, 0);
    for (@alerts) {
        $e += $1 if /evicted the counters of (\d+) least recently used keys/;
        $f += $1 if /forgot (\d+) keys found valid within the last hour/;
    }
    is("$e $f", "$evicted $forgotten",
       "$name - the ALERTs say every eviction and every key forgotten")
        or diag(join "\n", @alerts);
    ok(!(grep { !/session_limit_zone "tiny" is full: .*make the zone larger/ }
         @alerts), "$name - no other ALERT") or diag(join "\n", @alerts);

    my %per_sec;
    $per_sec{$_}++ for error_log()
        =~ m{^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[alert\] .*is full}mg;
    ok(!(grep { $_ > 1 } values %per_sec), "$name - one ALERT a second")
        or diag(Test::More::explain(\%per_sec));

    psql('DELETE FROM api_keys WHERE key_hash IN (SELECT '
         . q{sha256(convert_to(k, 'UTF8')) FROM unnest(ARRAY[}
         . join(',', map { sql_quote($_) } @keys) . ']) AS k)');
};

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block);

    if (!defined $block->config) {
        $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
    }

    location = /status {
        session_status;
    }
EOF
    }

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: keys seen valid behind an address over its limit
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 3;
    session_auth_cache_ttl 1s;
--- check: mixed
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: keys seen valid without the auth cache
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 2;
    session_auth_cache_ttl 0;
--- check: no_cache
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: a full budget forgets the oldest key seen valid
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone small:48k;
    session_auth_fail_limit 1;
    session_auth_cache_ttl 1s;
--- check: budget
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: a zone full of counters and of keys seen valid says both
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone tiny:32k;
--- check: both_full
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[crit]



=== TEST 5: lookups under way are not failures: valid keys past the limit wait
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 5;
--- check: under_way
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 6: after 4 failures of 5, valid keys take their turn
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 5;
--- check: under_way_failed
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 7: a lookup waits for the address's others session_db_timeout at most
--- workers: 1
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 1s;
    session_auth_fail_limit 1;
--- check: under_way_slow
--- request
GET /status
--- error_code: 200
--- no_error_log
[alert]
[crit]
