# The documents of docs/api.md §4 and §5 are written by the worker
# (src/core/ngx_http_session_doc.c) from rows; the webhook payloads that
# the outbox keeps are still written by PostgreSQL (session_json(),
# image_json()).  These checks hold the two writers to one shape, and
# the worker's timestamps to PostgreSQL's own clock:
#
#   - the 201 of a create, GET, the list, the poll and the webhook
#     payloads all carry the same session object;
#   - an upload's 201, GET of the image, the image list, the poll and the
#     image.uploaded payload all carry the same image object;
#   - every timestamp equals PostgreSQL's to_char() of the stored value,
#     so truncation to the second (not rounding) and UTC hold;
#   - a session whose expires_at has passed reads "expired" everywhere.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request check_init);

our $TAG = sprintf 't020-%d-%d', $$, time;
our $HOOK = 'https://example.com/hook?x="1"&y=\\';
our $GIF = 'GIF89a' . ("\x01" x 26);

our $F = fixture(plan => 'unlimited', name => "$TAG-main");


# api(METHOD, PATH, BODY, TYPE): SessionTest's api_request with the key
# of $F; the body's Content-Type is TYPE (default application/json)
sub api {
    my ($method, $path, $body, $type) = @_;

    return api_request($method, $path, $F->{key}, $body,
                       defined $type ? { 'Content-Type' => $type } : undef);
}

sub payload {
    my ($sid, $type) = @_;

    my $p = psql('SELECT payload FROM webhook_outbox WHERE session_id = '
                 . sql_quote($sid) . ' AND event_type = ' . sql_quote($type));

    return decode_json($p);
}

# PostgreSQL's own rendering of a stored timestamp
sub pg_time {
    my ($table, $column, $id) = @_;

    return scalar psql("SELECT coalesce(to_char($column AT TIME ZONE 'UTC',"
                       . " 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), 'null')"
                       . " FROM $table WHERE id = " . sql_quote($id));
}

sub same {
    my ($got, $want, $name) = @_;

    is_deeply($got, $want, $name)
        or diag(encode_json($got) . "\n" . encode_json($want));
}


our %checks;

$checks{documents} = sub {
    my ($name) = @_;

    my $c = api('POST', '/api/v1/sessions',
                { delivery_mode => 'webhook', webhook_url => $HOOK,
                  expires_in => 3600 });
    is($c->{status}, 201, "$name - created");

    my $s = $c->{json};
    my $sid = $s->{id};

    is($c->{headers}{location}, "/api/v1/sessions/$sid",
       "$name - Location");
    is($s->{webhook_url}, $HOOK, "$name - the URL comes back as sent");

    same(api('GET', "/api/v1/sessions/$sid")->{json}, $s,
         "$name - GET equals the 201 of the create");

    for my $col (qw(created_at expires_at)) {
        is($s->{$col}, pg_time('sessions', $col, $sid),
           "$name - $col as PostgreSQL writes it");
    }

    my $u = api('POST', "/api/v1/sessions/$sid/images", $GIF, 'image/gif');
    is($u->{status}, 201, "$name - uploaded");

    my $im = $u->{json};
    my $iid = $im->{id};

    is($u->{headers}{location}, "/api/v1/sessions/$sid/images/$iid",
       "$name - image Location");
    is($im->{size}, length $GIF, "$name - size");
    is($im->{created_at}, pg_time('images', 'created_at', $iid),
       "$name - image created_at as PostgreSQL writes it");

    same(api('GET', "/api/v1/sessions/$sid/images/$iid")->{json}, $im,
         "$name - image GET equals the upload's 201");
    same(api('GET', "/api/v1/sessions/$sid/images")->{json}{data}, [$im],
         "$name - the image list holds the same object");
    same(payload($sid, 'image.uploaded')->{data}, $im,
         "$name - the image.uploaded payload holds the same object");

    my $poll = api('GET', "/api/v1/sessions/$sid/poll?timeout=0")->{json};
    same($poll->{images}, [$im], "$name - the poll's images");

    my $g = api('GET', "/api/v1/sessions/$sid")->{json};
    same($poll->{session}, $g, "$name - the poll's session is GET's");
    is($g->{image_count}, 1, "$name - image_count");

    my $done = api('POST', "/api/v1/sessions/$sid/complete");
    is($done->{status}, 200, "$name - completed");
    is($done->{json}{status}, 'completed', "$name - status completed");
    is($done->{json}{completed_at}, pg_time('sessions', 'completed_at', $sid),
       "$name - completed_at as PostgreSQL writes it");

    same(api('GET', "/api/v1/sessions/$sid")->{json}, $done->{json},
         "$name - GET equals the completion's answer");
    same(payload($sid, 'session.completed')->{data}, $done->{json},
         "$name - the session.completed payload holds the same object");

    my $list = api('GET', '/api/v1/sessions?limit=100')->{json}{data};
    my ($in_list) = grep { $_->{id} eq $sid } @$list;
    same($in_list, $done->{json}, "$name - the list holds the same object");

    my $ack = api('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    is($ack->{status}, 200, "$name - acknowledged");
    is($ack->{json}{acknowledged}, JSON::PP::true(), "$name - acknowledged");
    is($ack->{json}{acknowledged_at},
       pg_time('images', 'acknowledged_at', $iid),
       "$name - acknowledged_at as PostgreSQL writes it");
    same(api('GET', "/api/v1/sessions/$sid/images/$iid")->{json},
         $ack->{json}, "$name - image GET equals the ack's answer");
    is(api('GET', "/api/v1/sessions/$sid")->{json}{acknowledged_count}, 1,
       "$name - acknowledged_count");
};

$checks{expired} = sub {
    my ($name) = @_;

    # stored as open, but past its expires_at: every reader says expired

    my $sid = psql('INSERT INTO sessions (project_id, delivery_mode,'
                   . ' expires_at) VALUES (' . sql_quote($F->{project_id})
                   . ", 'long_poll', now() - interval '1 second')"
                   . ' RETURNING id');

    my $g = api('GET', "/api/v1/sessions/$sid");
    is($g->{status}, 410, "$name - GET 410");

    my $list = api('GET', '/api/v1/sessions?status=expired&limit=100');
    my ($s) = grep { $_->{id} eq $sid } @{ $list->{json}{data} };
    ok($s, "$name - listed under status=expired");
    is($s && $s->{status}, 'expired', "$name - status expired");
    is(psql('SELECT status FROM sessions WHERE id = ' . sql_quote($sid)),
       'open', "$name - the row itself still says open");
};


# --- blocks -------------------------------------------------------------

no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config',
                      "session_db \$TEST_NGINX_SESSION_DB_CONF;\n"
                      . "session_expiry_sweep_interval 30s;\n");
    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /ping {
        return 200 "pong\n";
    }
EOF

    check_init($block, \%checks);
    $block->set_value('request', "GET /ping\n");
    $block->set_value('response_body', "pong\n");
});


run_tests();

__DATA__

=== TEST 1: one shape everywhere, timestamps as PostgreSQL writes them
--- check: documents
--- no_error_log
[error]



=== TEST 2: past expires_at reads expired in every document
--- check: expired
--- no_error_log
[error]
