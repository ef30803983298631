# Hostile input (issue 14): forged list cursors, floods of unknown keys
# (session_auth_fail_limit, API.md sections 8 and 10, "Authentication
# failures"), and the access-log variables of issue 15.
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
use MIME::Base64 ();
use Session qw(:DEFAULT decode_json);
use SessionTest;

our $TAG = sprintf 't014-%d-%d', $$, time;

our (%KEY, %PROJECT, %ACCOUNT, %KEY_ID, $SID);

{
    for my $name (qw(MAIN LIMIT VARS)) {
        my $f = fixture(plan => 'pro', name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $ACCOUNT{$name} = $f->{account_id};
        $KEY_ID{$name} = $f->{key_id};
    }

    ($SID) = psql('INSERT INTO sessions (project_id, delivery_mode, '
                  . 'expires_at) VALUES (' . sql_quote($PROJECT{MAIN})
                  . q{, 'long_poll', now() + interval '1 day') RETURNING id});
}

master_on();
no_shuffle();
no_long_string();

sub body {
    my ($status, $reason, $message) = @_;
    return sprintf '{"statusCode": %d, "error": "%s", "message": "%s"}',
                   $status, $reason, $message;
}

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

sub status_json {
    my $r = http_request('GET', '/status', {}, 10);
    die "GET /status: $r->{status} $r->{content}" unless $r->{status} == 200;
    return decode_json($r->{content});
}

# Each worker empties the auth cache once its LISTEN connection is up:
# wait for that, so that what a check puts in the cache stays there.
sub listening {
    my ($workers) = @_;

    my ($ok) = wait_until(10, 0.05, sub {
        open my $fh, '<', $Test::Nginx::Util::ErrLogFile or return 0;
        local $/;
        my $log = <$fh> // '';
        my $n = () = $log =~ /session listen: listening/g;
        return $n >= $workers;
    });

    ok($ok, "every worker listens (the auth cache was emptied)");
}

my %checks;

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    if (!defined $block->http_config) {
        $block->set_value('http_config',
                          "session_db \$TEST_NGINX_SESSION_DB_CONF;\n");
    }

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

    if (defined $block->check) {
        (my $check = $block->check) =~ s/\s+//g;
        die "no check $check" unless $checks{$check};
        $block->set_value('init', "main::run_check('$check', \$block->name)");
    }
});

sub run_check {
    my ($check, $name) = @_;

    eval { $checks{$check}->($name); 1 }
        or fail("$name - check $check died: $@");
}

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
