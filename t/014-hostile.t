# Hostile input: forged list cursors, floods of unknown keys
# (session_auth_fail_limit, docs/api.md §8 and §10, "Authentication
# failures"), and the access-log variables.
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
use Compress::Zlib ();
use HTTP::Tiny ();
use IO::Select ();
use IO::Socket::INET ();
use MIME::Base64 ();
use Session qw(:DEFAULT decode_json);
use Time::HiRes ();
use SessionTest qw(:DEFAULT error_body status_json listening check_init
                    db_http_config);

our $TAG = sprintf 't014-%d-%d', $$, time;

our (%KEY, %PROJECT, %ACCOUNT, %KEY_ID, $SID);

# a loopback port where nothing listens: the database is unreachable
our $DEAD_PORT = do {
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1) or die "listen: $!";
    my $p = $l->sockport;
    close $l;
    $p;
};

{
    for my $name (qw(MAIN LIMIT VARS)) {
        my $f = fixture(plan => 'pro', name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $ACCOUNT{$name} = $f->{account_id};
        $KEY_ID{$name} = $f->{key_id};
    }

    my $s = fixture(plan => 'pro', name => "$TAG-SUSP");
    sessionctl_ok('account', 'suspend', $s->{account_id});
    $KEY{SUSP} = $s->{key};
    $PROJECT{SUSP} = $s->{project_id};
    $ACCOUNT{SUSP} = $s->{account_id};
    $KEY_ID{SUSP} = $s->{key_id};

    ($SID) = psql('INSERT INTO sessions (project_id, delivery_mode, '
                  . 'expires_at) VALUES (' . sql_quote($PROJECT{MAIN})
                  . q{, 'long_poll', now() + interval '1 day') RETURNING id});
}

master_on();
no_shuffle();
no_long_string();

sub body { return error_body(@_) }

sub bad { body(400, 'Bad Request', $_[0]) }

our $INVALID = body(401, 'Unauthorized', 'API key is invalid');
our $TOO_MANY = body(429, 'Too Many Requests',
                     'too many failed authentication attempts');

# A cursor as the server would write it (the codec of
# src/core/ngx_http_session_cursor.c, written independently here): the
# checksum is public, so anyone can make one with any position.
sub cursor {
    my ($kind, $pos, $uuid) = @_;
    my $bin = "\x01$kind" . pack('q>', $pos);
    $bin .= pack('H*', $uuid =~ tr/-//dr) if defined $uuid;
    $bin .= pack('N', Compress::Zlib::crc32($bin));
    (my $c = MIME::Base64::encode_base64($bin, '')) =~ tr{+/}{-_};
    $c =~ s/=+$//;
    return $c;
}

sub api {
    my ($method, $path, $key) = @_;
    my %h;
    $h{Authorization} = "Bearer $key" if defined $key;
    return http_request($method, $path, \%h, 10);
}

# Each worker empties the auth cache once its LISTEN connection is up:
# the checks wait for that (SessionTest's listening), so that what a check
# puts in the cache stays there.

# An ACCESS EXCLUSIVE lock on api_keys, held by a psql of its own until
# unlock_keys(): every key lookup blocks behind it, so a lookup that was
# started shows in pg_stat_activity and its request gets no answer.
sub lock_keys {
    return psql_begin('LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE',
                      q{SELECT count(*) FROM pg_locks l JOIN pg_class c }
                      . q{ON c.oid = l.relation WHERE c.relname = 'api_keys' }
                      . q{AND l.mode = 'AccessExclusiveLock' AND l.granted});
}

sub unlock_keys { psql_end($_[0]) }

# key lookups that wait behind lock_keys()
sub blocked_lookups {
    return psql(q{SELECT count(*) FROM pg_stat_activity }
                . q{WHERE wait_event_type = 'Lock' }
                . q{AND query LIKE '%FROM api_keys k%'});
}

# a request written on a new connection, its answer read later (read_answer)
sub send_request {
    my ($path, $key, $local) = @_;
    my $port = $Test::Nginx::Util::ServerPort;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  ($local ? (LocalAddr => $local) : ()),
                                  Proto => 'tcp', Timeout => 5)
        or die "connect: $!";
    print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n"
             . ($key ? "Authorization: Bearer $key\r\n" : '') . "\r\n";
    return $s;
}

sub read_answer {
    my ($s, $timeout) = @_;
    my $sel = IO::Select->new($s);
    my $buf = '';
    my $deadline = time + ($timeout // 10);
    while (time < $deadline) {
        last unless $sel->can_read(1);
        my $n = sysread $s, $buf, 65536, length $buf;
        last unless $n;
    }
    close $s;
    my ($head, $body) = split /\r\n\r\n/, $buf, 2;
    my ($status) = ($head // '') =~ m{^HTTP/1\.\d (\d+)};
    return { status => $status // 0, head => $head // '',
             content => $body // '' };
}

# GET path with the key, from the address $local (e.g. 127.0.0.2)
sub api_from {
    my ($local, $path, $key) = @_;
    my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10,
                               local_address => $local);
    my $port = $Test::Nginx::Util::ServerPort;
    return $http->request('GET', "http://127.0.0.1:$port$path",
                          { headers => { Authorization => "Bearer $key" } });
}

# Failures count per UTC minute: a check that counts some must not see
# the minute change under it.  Late in a minute, wait for the next one.
sub fresh_minute {
    my $s = Time::HiRes::time() - 60 * int(time / 60);
    Time::HiRes::sleep(60.2 - $s) if $s > 45;
}

my %checks;

# The access-log variables: the ids once the key is known, the class and
# what is left once the limiter counted the request, "-" (empty)
# otherwise; the key itself never.
$checks{variables} = sub {
    my ($name) = @_;

    fresh_minute();

    my $log = "$Test::Nginx::Util::ServRoot/logs/vars.log";
    my $unknown = random_key('sess');
    my @sent = (
        ['/api/v1/nope', $KEY{VARS}],        # database lookup
        ['/api/v1/nope', $KEY{VARS}],        # cache hit
        ['/api/v1/sessions', $KEY{VARS}],    # class list
        ['/api/v1/nope', $KEY{VARS}],        # over other=2
        ['/api/v1/nope', undef],
        ['/api/v1/nope', 'sess_nothex'],
        ['/api/v1/nope', $unknown],
        ['/api/v1/nope', $KEY{SUSP}],
    );

    my @st = map { api('GET', $_->[0], $_->[1])->{status} } @sent;
    is("@st", '404 404 200 429 401 401 401 403', "$name - the answers");

    my @lines;
    my ($ok) = wait_until(10, 0.05, sub {
        open my $fh, '<', $log or return 0;
        @lines = <$fh>;
        chomp @lines;
        return @lines >= @sent;
    });
    ok($ok, "$name - every request logged");

    my $ids = "k=$KEY_ID{VARS} p=$PROJECT{VARS} a=$ACCOUNT{VARS}";
    my $none = 'k=- p=- a=-';
    is_deeply(\@lines, [
        "404 $ids c=other r=1",
        "404 $ids c=other r=0",
        "200 $ids c=list r=299",
        "429 $ids c=other r=0",
        "401 $none c=- r=-",
        "401 $none c=- r=-",
        "401 $none c=- r=-",
        "403 k=$KEY_ID{SUSP} p=$PROJECT{SUSP} a=$ACCOUNT{SUSP} c=- r=-",
    ], "$name - the variables");

    my $all = join "\n", @lines;
    for my $k ($KEY{VARS}, $unknown, $KEY{SUSP}) {
        my ($hex) = $k =~ /_([0-9a-f]{32})$/;
        unlike($all, qr/\Q$hex\E/i, "$name - no key in the log");
    }
};

# session_auth_fail_limit 5: five unknown keys answer 401, then a sixth
# unknown key, or a valid key the node has neither cached nor seen valid
# within the hour (t/035 has those), answers 429 with
# Retry-After and no X-RateLimit-*, without asking the database; keys
# the cache knows (valid or not) answer as usual; another address is not
# affected.
$checks{fail_limit} = sub {
    my ($name) = @_;

    fresh_minute();

    listening();

    # the MAIN key in the cache before the failures
    is(api('GET', '/api/v1/nope', $KEY{MAIN})->{status}, 404,
       "$name - a valid key first");

    my @unknown = map { random_key('sess') } 1 .. 5;
    my @st = map { api('GET', '/api/v1/nope', $_)->{status} } @unknown;
    is("@st", '401 401 401 401 401', "$name - five unknown keys: 401");

    my $lock = lock_keys();

    my $r = eval {
        my $t0 = time;
        my $r = api('GET', '/api/v1/nope', random_key('sess'));
        is($r->{status}, 429, "$name - the sixth unknown key: 429");
        is($r->{content}, $TOO_MANY, "$name - the message");
        is($r->{headers}{'content-type'}, 'application/json',
           "$name - JSON");
        my $ra = $r->{headers}{'retry-after'} // '';
        my $left = 60 - $t0 % 60;
        ok($ra =~ /^\d+$/ && $ra >= 1 && $ra <= 60
           && abs($ra - $left) <= 2,
           "$name - Retry-After $ra: the seconds to the minute's end");
        ok(!grep({ /^x-ratelimit/ } keys %{ $r->{headers} }),
           "$name - no X-RateLimit-* headers");

        # a valid key the cache does not know is refused the same way
        my $v = api('GET', '/api/v1/nope', $KEY{LIMIT});
        is($v->{status}, 429, "$name - an uncached valid key: 429");

        # the lock is held: any lookup would have blocked
        is(blocked_lookups(), 0, "$name - no lookup reached the database");

        # keys the cache knows answer as usual
        my $m = api('GET', '/api/v1/nope', $KEY{MAIN});
        is($m->{status}, 404, "$name - the cached valid key: 404");
        is($m->{headers}{'x-ratelimit-limit'}, 200,
           "$name - the cached valid key is rate limited as usual");

        # only a key found valid is served past the limit: one the cache
        # knows unknown is refused too (docs/api.md §10.12)
        my $u = api('GET', '/api/v1/nope', $unknown[0]);
        is($u->{status}, 429, "$name - a cached unknown key: 429");
        is($u->{content}, $TOO_MANY, "$name - a cached unknown key: the message");
        ok(($u->{headers}{'retry-after'} // '') =~ /^\d+$/,
           "$name - a cached unknown key: Retry-After");
        1;
    };
    unlock_keys($lock);
    die $@ unless $r;

    # another address has its own count
    my $o = api_from('127.0.0.2', '/api/v1/nope', random_key('sess'));
    is($o->{status}, 401, "$name - another address: 401");
    is(api_from('127.0.0.2', '/api/v1/nope', $KEY{LIMIT})->{status}, 404,
       "$name - another address with an uncached valid key: 404");

    # one unknown key sent again and again: its answers from the cache
    # count as failures too, up to the limit (5), then 429
    my $again = random_key('sess');
    my @seq = map { api_from('127.0.0.3', '/api/v1/nope', $again)->{status} }
              1 .. 7;
    is("@seq", '401 401 401 401 401 429 429',
       "$name - one unknown key seven times: five 401, then 429");
};

# session_auth_fail_limit off: nothing is counted
$checks{fail_off} = sub {
    my ($name) = @_;

    fresh_minute();

    my @st = map { api('GET', '/api/v1/nope', random_key('sess'))->{status} }
             1 .. 12;
    is("@st", join(' ', ('401') x 12), "$name - twelve unknown keys: 401");
};

# A known key's lookup is not a failure: looking up a valid key over and
# over (the cache holds nothing: session_auth_cache_ttl 0) never reaches
# the limit.
$checks{fail_valid} = sub {
    my ($name) = @_;

    fresh_minute();

    my @st = map { api('GET', '/api/v1/nope', $KEY{LIMIT})->{status} }
             1 .. 6;
    is("@st", '404 404 404 404 404 404', "$name - six lookups of a valid key");
    my @u = map { api('GET', '/api/v1/nope', random_key('sess'))->{status} }
            1 .. 3;
    is("@u", '401 401 429',
       "$name - then two unknown keys are looked up, the third is over");
};

# Concurrent requests from many clients could start many lookups before
# the first one fails: the lookup counts in advance, so with a limit of 3,
# eight unknown keys at once start three lookups and five get 429.
$checks{fail_concurrent} = sub {
    my ($name) = @_;

    fresh_minute();

    listening();

    my $lock = lock_keys();
    my (@socks, $ok);
    my $r = eval {
        @socks = map { send_request('/api/v1/nope', random_key('sess')) }
                 1 .. 8;
        ($ok) = wait_until(10, 0.05, sub { blocked_lookups() >= 3 });
        ok($ok, "$name - three lookups wait for the database");
        1;
    };
    unlock_keys($lock);
    die $@ unless $r;

    my @st = sort map { read_answer($_)->{status} } @socks;
    is("@st", '401 401 401 429 429 429 429 429',
       "$name - three 401, five 429");
};

# Negative results have a budget of their own: 300 unknown keys in a
# 32 KB zone do not push the valid key out of the cache.
$checks{negative_budget} = sub {
    my ($name) = @_;

    listening();

    is(api('GET', '/api/v1/nope', $KEY{MAIN})->{status}, 404,
       "$name - the valid key, looked up");

    my %st;
    $st{ api('GET', '/api/v1/nope', random_key('sess'))->{status} }++
        for 1 .. 300;
    is_deeply(\%st, { 401 => 300 }, "$name - 300 unknown keys: 401");

    my $s0 = status_json();
    is(api('GET', '/api/v1/nope', $KEY{MAIN})->{status}, 404,
       "$name - the valid key again");
    my $s1 = status_json();

    is($s1->{auth_cache}{misses} - $s0->{auth_cache}{misses}, 0,
       "$name - no miss: the valid key is still cached");
    is($s1->{auth_cache}{hits} - $s0->{auth_cache}{hits}, 1,
       "$name - a hit");
    ok($s1->{auth_cache}{entries} <= 40,
       "$name - at most the budget of unknown keys is kept "
       . "($s1->{auth_cache}{entries} entries)");
};

# A lookup the database could not answer is no failure: with the
# database unreachable, unknown keys get 503 however many there are,
# never 429.
$checks{fail_db_down} = sub {
    my ($name) = @_;

    fresh_minute();

    my @st = map { api('GET', '/api/v1/nope', random_key('sess'))->{status} }
             1 .. 5;
    is("@st", '503 503 503 503 503', "$name - five unknown keys: 503");
};

# Concurrent lookups of one key in one worker share one query.
$checks{single_flight} = sub {
    my ($name) = @_;

    listening();

    my $key = random_key('sess');
    my $s0 = status_json();
    my $lock = lock_keys();
    my (@socks, $r);

    $r = eval {
        @socks = map { send_request('/api/v1/nope', $key) } 1 .. 8;

        my ($all) = wait_until(10, 0.05, sub {
            status_json()->{auth_cache}{misses}
                - $s0->{auth_cache}{misses} >= 8
        });
        ok($all, "$name - eight requests missed the cache");

        my ($one) = wait_until(10, 0.05, sub { blocked_lookups() >= 1 });
        ok($one, "$name - a lookup waits for the database");
        is(blocked_lookups(), 1, "$name - only one");
        1;
    };
    unlock_keys($lock);
    die $@ unless $r;

    my @a = map { read_answer($_) } @socks;
    is(join(' ', map { $_->{status} } @a), join(' ', ('401') x 8),
       "$name - every request: 401");
    is(scalar(grep { $_->{content} eq $INVALID } @a), 8,
       "$name - every body: API key is invalid");

    # the same with a valid key: all admitted
    my $lock2 = lock_keys();
    $r = eval {
        @socks = map { send_request('/api/v1/nope', $KEY{VARS}) } 1 .. 5;
        my ($one) = wait_until(10, 0.05, sub { blocked_lookups() >= 1 });
        ok($one, "$name - the valid key's lookup waits");
        1;
    };
    unlock_keys($lock2);
    die $@ unless $r;

    @a = map { read_answer($_) } @socks;
    is(join(' ', map { $_->{status} } @a), '404 404 404 404 404',
       "$name - the valid key: every request admitted");
    is(scalar(grep { $_->{head} =~ /^X-RateLimit-Remaining: \d+\r?$/mi } @a),
       5, "$name - every answer counted by the limiter");
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

    # run from --- init: nginx is up, the block's request comes after
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a forged session cursor with created_us = 2^63-1: 400
--- request eval
"GET /api/v1/sessions?cursor="
. ::cursor('S', 9223372036854775807, '00000000-0000-0000-0000-000000000000')
--- more_headers eval
"Authorization: Bearer $::KEY{MAIN}"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]
interval out of range



=== TEST 2: a forged session cursor past the year 9999: 400
--- request eval
"GET /api/v1/sessions?cursor="
. ::cursor('S', 253402300800000000, '00000000-0000-0000-0000-000000000000')
--- more_headers eval
"Authorization: Bearer $::KEY{MAIN}"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 3: a forged session cursor before 1970: 400
--- request eval
"GET /api/v1/sessions?cursor="
. ::cursor('S', -1, '00000000-0000-0000-0000-000000000000')
--- more_headers eval
"Authorization: Bearer $::KEY{MAIN}"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 4: the last microsecond of 9999 is a position: 200, the list
--- request eval
"GET /api/v1/sessions?cursor="
. ::cursor('S', 253402300799999999, 'ffffffff-ffff-ffff-ffff-ffffffffffff')
--- more_headers eval
"Authorization: Bearer $::KEY{MAIN}"
--- error_code: 200
--- response_body_like eval
qr/^\{"data": ?\[\{"id" ?: ?"$::SID"/
--- no_error_log
[error]



=== TEST 5: a forged image cursor with sequence 2^63-1: 400
--- request eval
"GET /api/v1/sessions/$::SID/images?cursor="
. ::cursor('I', 9223372036854775807)
--- more_headers eval
"Authorization: Bearer $::KEY{MAIN}"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 6: session_auth_fail_limit: 429 beyond the limit, no lookup
--- debug_log: the "session listen: listening" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 5;
    session_auth_cache_ttl 60s;
--- check: fail_limit
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: session_auth_fail_limit off
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit off;
--- check: fail_off
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: a valid key's lookup is no failure
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 2;
    session_auth_cache_ttl 0;
--- check: fail_valid
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: concurrent unknown keys: the limit holds
--- debug_log: the "session listen: listening" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 3;
--- check: fail_concurrent
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: unknown keys do not evict known ones
--- debug_log: the "session listen: listening" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone small:32k;
    session_auth_fail_limit off;
    session_auth_cache_ttl 60s;
--- check: negative_budget
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 11: concurrent lookups of one key share one query
--- debug_log: the "session listen: listening" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 60s;
--- check: single_flight
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 12: session_auth_fail_limit 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 0;
--- must_die
--- error_log
invalid value "0" in "session_auth_fail_limit", it must be "off" or an integer between 1 and 1000000000



=== TEST 13: session_auth_fail_limit not a number
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit many;
--- must_die
--- error_log
invalid value "many" in "session_auth_fail_limit"



=== TEST 14: session_auth_fail_limit too large
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 1000000001;
--- must_die
--- error_log
invalid value "1000000001" in "session_auth_fail_limit"



=== TEST 15: session_auth_fail_limit twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit 5;
    session_auth_fail_limit 6;
--- must_die
--- error_log
"session_auth_fail_limit" directive is duplicate



=== TEST 16: session_auth_fail_limit in a server
--- config
    session_auth_fail_limit 5;

    location /api/ {
        session_api;
    }
--- must_die
--- error_log
"session_auth_fail_limit" directive is not allowed here



=== TEST 17: session_auth_fail_limit without a value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_fail_limit;
--- must_die
--- error_log
invalid number of arguments in "session_auth_fail_limit" directive



=== TEST 18: access-log variables
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    log_format vars '$status k=$session_key_id p=$session_project_id '
                    'a=$session_account_id c=$session_rate_class '
                    'r=$session_rate_remaining';
--- config
    location /api/ {
        session_api;
        session_limits other=2;
        access_log logs/vars.log vars;
    }

    location = /status {
        session_status;
    }
--- check: variables
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]



=== TEST 19: the variables are empty outside session_api
--- config
    location /api/ {
        session_api;
    }

    location = /t {
        return 200 "k=$session_key_id p=$session_project_id a=$session_account_id c=$session_rate_class r=$session_rate_remaining\n";
    }
--- request
GET /t
--- more_headers eval
"Authorization: Bearer $::KEY{VARS}"
--- error_code: 200
--- response_body
k= p= a= c= r=
--- no_error_log
[error]



=== TEST 20: no failure counted when the database cannot answer
--- http_config eval
"session_db \"host=127.0.0.1 port=$::DEAD_PORT dbname=x user=x\";
    session_auth_fail_limit 2;"
--- check: fail_db_down
--- request
GET /status
--- error_code: 200
