# A streamed upload whose first statement the server does not have
# (SQLSTATE 26000: a pooler that stopped keeping the prepared statements,
# docs/decisions.md (pg) and (zi)) goes again once, its statements as
# text, and by the deadline of its first try.  The database is behind a
# relay that renames every Bind of an upload statement (ngx_upload_<n>
# becomes ngx_uplost_<n>, the same length), so that the server answers
# 26000 to each one sent by name, on every connection, after every
# reconnect, as a pooler that keeps losing them would:
#
#   - the upload is stored (201): one second try, sent as text, and no
#     more (the debug log says so once per upload), the next upload the
#     same;
#   - with the relay holding each renamed Bind 2 s (of a 3 s
#     session_db_timeout) and the session's row locked, so that the
#     second try waits: 503 JSON when the first try's 3 s are over, not
#     3 s after the second try began, and nothing stored.
#
# Before (zi) the upload went again after each 26000, its timeout armed
# again each time: the first check got no answer (the client gave up
# after 10 s, a reconnect every lap meanwhile), the second none either.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session qw(:DEFAULT decode_json encode_json);
use Images qw(png_bytes image_rows);
use SessionTest qw(:DEFAULT error_body api_request check_init
                    relay_db key_headers);

our (%KEY, $LOST_PORT, $SLOW_PORT);

our $TAG = sprintf 't056-%d-%d', $$, time;

# a Bind (type, length, the unnamed portal) of an upload statement by name
my $BIND = qr/(B[\s\S]{4}\0)ngx_upload_/;

# the relays: one renames the upload statements' Binds, the other also
# holds them 2 s
{
    my ($port, undef, $conninfo) = relay_db(sub {
        my ($buf) = @_;
        $buf =~ s/$BIND/${1}ngx_uplost_/g;
        return ($buf, 0);
    });
    $LOST_PORT = $port;
    $ENV{TEST_NGINX_LOST_DB_CONF} = nginx_quote($conninfo);

    ($port, undef, $conninfo) = relay_db(sub {
        my ($buf) = @_;
        my $n = ($buf =~ s/$BIND/${1}ngx_uplost_/g);
        return ($buf, $n ? 2 : 0);
    });
    $SLOW_PORT = $port;
    $ENV{TEST_NGINX_SLOW_DB_CONF} = nginx_quote($conninfo);
}

{
    my $f = fixture(plan => 'pro', name => "$TAG-MAIN");
    $KEY{MAIN} = $f->{key};
}

# over session_body_buffer_size (128k, under which a body is gathered in
# memory and sent whole) and the chunk: streamed on an upload connection
my $IMG = png_bytes(200 * 1024);

my $WAITS_AGAIN = qr/session db: an upload whose first statement the server did not have waits again/;


# --- helpers ------------------------------------------------------------

sub api {
    return api_request(@_[0 .. 4], { timeout => 10, raw => 1 });
}

sub create_session {
    my $r = api('POST', '/api/v1/sessions', $KEY{MAIN},
                encode_json({ delivery_mode => 'long_poll' }),
                { 'Content-Type' => 'application/json' });
    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}

sub upload {
    my ($sid) = @_;
    return api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN}, $IMG,
               { 'Content-Type' => 'image/png' });
}

sub image_count {
    my ($sid) = @_;
    return psql('SELECT image_count FROM sessions WHERE id = '
                . sql_quote($sid));
}


# --- the checks ---------------------------------------------------------

my %checks;

# every Bind by name meets 26000: each upload goes again once, as text
$checks{lost_once} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $LOST_PORT;

        my $sid = create_session();

        for my $i (1, 2) {
            my $before = error_log_count($WAITS_AGAIN);

            my $r = upload($sid);
            is($r->{status}, 201, "$name - upload $i: 201")
                or diag("$r->{status} $r->{content}");
            is($r->{json}{sequence}, $i, "$name - upload $i: sequence $i");
            ok($r->{elapsed} < 3, "$name - upload $i: within"
                                  . " session_db_timeout ($r->{elapsed} s)");

            if (need_debug_log('the "waits again" lines')) {
                is(error_log_count($WAITS_AGAIN) - $before, 1,
                   "$name - upload $i: went again once");
            }
        }

        is(image_count($sid), 2, "$name - image_count 2");
        is(image_rows($sid), 2, "$name - two images stored");
    }
};

# the same with the answer of the first try late (2 s of 3) and the
# session's row locked: the second try waits for the lock until the
# first try's deadline
$checks{lost_deadline} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'the database cannot be relayed', 1 unless $SLOW_PORT;

        my $sid = create_session();

        my $lock = psql_begin("SET application_name = '$TAG-hold';"
                              . ' UPDATE sessions SET image_count ='
                              . " image_count WHERE id = '$sid'",
                              q{SELECT count(*) FROM pg_stat_activity}
                              . qq{ WHERE application_name = '$TAG-hold'}
                              . q{ AND state = 'idle in transaction'});

        my $before = error_log_count($WAITS_AGAIN);
        my $r = upload($sid);

        psql_end($lock, 'ROLLBACK');

        is($r->{status}, 503, "$name - 503");
        is($r->{content}, error_body(503, 'Service Unavailable',
                                     'database unavailable'),
           "$name - the JSON error");
        ok($r->{elapsed} >= 2.5 && $r->{elapsed} < 4,
           "$name - at the first try's deadline, 3 s ($r->{elapsed} s)");

        if (need_debug_log('the "waits again" lines')) {
            is(error_log_count($WAITS_AGAIN) - $before, 1,
               "$name - went again once");
        }

        is(image_count($sid), 0, "$name - image_count 0");
        is(image_rows($sid), 0, "$name - nothing stored");
    }
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    my $db = ($block->relay // '') =~ /slow/ ? '$TEST_NGINX_SLOW_DB_CONF'
                                             : '$TEST_NGINX_LOST_DB_CONF';

    $block->set_value('http_config', <<"EOF") unless defined $block->http_config;
    session_db $db;
    session_db_connections 1;
    session_db_timeout 3s;
    session_image_chunk_size 4k;
    session_image_upload_connections 1;
EOF

    $block->set_value('config', <<'EOF') unless defined $block->config;
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
EOF

    key_headers($block, \%KEY, 'MAIN', 'image/png');

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: an upload's first statement meets 26000 every time: once again, as text, 201
--- check: lost_once
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
session db: the server does not have the statements this connection prepared
--- no_error_log
[alert]
upload timed out



=== TEST 2: a second try keeps the first one's deadline: 503 at 3 s, not 3 s later
--- relay: slow
--- check: lost_deadline
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
session db: the server does not have the statements this connection prepared
upload timed out waiting for the database
--- no_error_log
[alert]
