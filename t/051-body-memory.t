# Bodies gathered in memory (session_body_buffer_size, docs/directives.md;
# docs/decisions.md (zh)): a body whose Content-Length is over nginx's
# client_body_buffer_size and at most session_body_buffer_size (128k by
# default) is read unbuffered into one buffer of its length, never into
# nginx's temporary file, and an image that size goes to PostgreSQL whole
# in one statement (no upload connection).  Here:
#
#   - a 100 KB image: 201, the same bytes back, no temporary file, no
#     upload connection; the same with session_body_buffer_size 0 (and
#     with a body over the size) goes through the temporary file and
#     is streamed, as before, so that the checks can fail;
#   - a body that comes slowly, in pieces: whole and right;
#   - a client gone in the middle of its body, and one that stops
#     sending (client_body_timeout): nothing stored, the next upload
#     goes through;
#   - a keyed upload of 100 KB: replayed byte for byte, another body
#     under the key 422;
#   - a session's JSON body over client_body_buffer_size;
#   - session_body_buffer_size out of its bounds is refused.
#
# HTTP/2 and HTTP/3 uploads of 100 KB and 300 KB: t/lib/ApiOver.pm.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use IO::Socket::INET ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Images qw(png_bytes image_rows read_some);
use SessionTest qw(:DEFAULT error_body api_request raw_http check_init
                    key_headers);

our %KEY;

our $TAG = sprintf 't051-%d-%d', $$, time;

{
    my $f = fixture(plan => 'pro', name => "$TAG-MAIN");
    $KEY{MAIN} = $f->{key};
}

my $TEMP_FILE = qr/a client request body is buffered to a temporary file/;


# --- helpers ------------------------------------------------------------

# the servers of http_config: 1 without gathering, 2 with a short
# client_body_timeout
sub port {
    my ($n) = @_;
    return $Test::Nginx::Util::RandPorts->{"TEST_NGINX_RAND_PORT_$n"}
        // die "no TEST_NGINX_RAND_PORT_$n\n";
}

sub api {
    my ($method, $path, $body, $headers, $port) = @_;
    return api_request($method, $path, $KEY{MAIN}, $body, $headers,
                       { timeout => 30, raw => 1, json_type => 1,
                         ($port ? (port => $port) : ()) });
}

sub create_session {
    my $r = api('POST', '/api/v1/sessions',
                encode_json({ delivery_mode => 'long_poll' }),
                { 'Content-Type' => 'application/json' });
    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    return $r->{json};
}

sub upload {
    my ($sid, $bytes, $port, $more) = @_;
    return api('POST', "/api/v1/sessions/$sid/images", $bytes,
               { 'Content-Type' => 'image/png', %{ $more // {} } }, $port);
}

sub content {
    my ($sid, $iid) = @_;
    return api('GET', "/api/v1/sessions/$sid/images/$iid/content");
}

# backends of the workers' upload connections (opened by the first
# streamed upload a worker has)
sub upload_backends {
    return psql("SELECT count(*) FROM pg_stat_activity"
                . " WHERE application_name = 'nginx session upload'");
}

# none left of an earlier block's nginx
sub no_upload_backends {
    my ($name) = @_;
    my ($none) = wait_until(10, 0.05, sub { upload_backends() == 0 });
    die "$name: upload connections of an earlier nginx stay\n" unless $none;
}

# a raw connection to PORT with the head of an upload of $img written
sub upload_head {
    my ($sid, $img, $port) = @_;

    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $port,
                                  Proto => 'tcp')
        or die "connect: $!";
    $c->autoflush(1);
    print $c "POST /api/v1/sessions/$sid/images HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
             . "Content-Type: image/png\r\nConnection: close\r\n"
             . 'Content-Length: ' . length($img) . "\r\n\r\n";
    return $c;
}

# --- the checks ---------------------------------------------------------

my %checks;

# 100 KB: gathered, sent whole; with session_body_buffer_size 0 and over
# the size: through the temporary file, streamed
$checks{gathered} = sub {
    my ($name) = @_;

    no_upload_backends($name);

    my $s = create_session();

    # each: the size, the server, how many temporary files nginx has
    # written by then, whether an upload connection may have opened
    my @cases = (
        [ '100 KB', 100 * 1024, undef, 0, 0 ],
        [ 'session_body_buffer_size 0', 100 * 1024, port(1), 1, 1 ],
        [ '128k + 1', 128 * 1024 + 1, undef, 2, 1 ],
        [ '128k', 128 * 1024, undef, 2, 1 ],
    );

    for my $case (@cases) {
        my ($what, $size, $port, $files, $streamed) = @$case;
        my $img = png_bytes($size);

        my $r = upload($s->{id}, $img, $port);
        is($r->{status}, 201, "$name - $what: 201");
        is($r->{json}{size}, $size, "$name - $what: its size");
        is($r->{json}{sha256}, Digest::SHA::sha256_hex($img),
           "$name - $what: its SHA-256");

        my $c = content($s->{id}, $r->{json}{id});
        ok($c->{status} == 200 && $c->{content} eq $img,
           "$name - $what: the same bytes back");

        is(SessionTest::error_log_count($TEMP_FILE), $files,
           "$name - $what: $files temporary files so far");
        is(upload_backends() > 0 ? 1 : 0, $streamed,
           "$name - $what: "
           . ($streamed ? 'streamed on an upload connection'
                        : 'sent whole, no upload connection'));
    }

    is(image_rows($s->{id}), 4, "$name - four images stored");
};

# the body in 25 pieces, 20 ms apart
$checks{slow} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(100 * 1024);

    my $c = upload_head($s->{id}, $img, $Test::Nginx::Util::ServerPort);
    my $piece = 4096;

    for (my $i = 0; $i < length $img; $i += $piece) {
        print $c substr($img, $i, $piece);
        Time::HiRes::sleep(0.02);
    }

    my $a = read_some($c, 1 << 30, 10);
    close $c;

    my ($status) = $a =~ m{^HTTP/1\.1 (\d{3})};
    my ($json) = $a =~ /\r\n\r\n(.*)\z/s;
    is($status, 201, "$name - 201");
    my $j = eval { decode_json($json) } // {};
    is($j->{sha256}, Digest::SHA::sha256_hex($img), "$name - its SHA-256");
    is($j->{size}, length $img, "$name - its size");
    is(SessionTest::error_log_count($TEMP_FILE), 0,
       "$name - no temporary file");
};

# 40 KB of 100 KB, and the client goes; then one that stops sending
# (client_body_timeout 1s on server 2)
$checks{gone} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(100 * 1024);

    my $c = upload_head($s->{id}, $img, $Test::Nginx::Util::ServerPort);
    print $c substr($img, 0, 40 * 1024);
    close $c;

    my ($seen) = wait_until(10, 0.05, sub {
        SessionTest::error_log_count(qr/client prematurely closed/) > 0
    });
    ok($seen, "$name - nginx saw the client go");
    is(image_rows($s->{id}), 0, "$name - nothing stored");

    $c = upload_head($s->{id}, $img, port(2));
    print $c substr($img, 0, 40 * 1024);
    my $t0 = Time::HiRes::time();

    my $a = read_some($c, 1 << 30, 10);
    close $c;
    my $took = Time::HiRes::time() - $t0;

    # as nginx ends any body that stops coming: 408 in the access log,
    # the connection closed without an answer
    is($a, '', "$name - a client that stops: closed, no answer");
    ok($took > 0.8 && $took < 5, "$name - after client_body_timeout ("
                                 . sprintf('%.1f', $took) . ' s)');
    my ($logged) = wait_until(5, 0.05, sub {
        SessionTest::access_log() =~ m{"POST /api/v1/sessions/\S+/images HTTP/1\.1" 408 }
    });
    ok($logged, "$name - logged as 408");
    is(image_rows($s->{id}), 0, "$name - still nothing stored");

    my $r = upload($s->{id}, $img);
    is($r->{status}, 201, "$name - the next upload: 201");
    is($r->{json}{sequence}, 1, "$name - sequence 1");
};

# a keyed upload of 100 KB: kept, replayed byte for byte; another body
# under the key: 422
$checks{keyed} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(100 * 1024);
    my $key = { 'Idempotency-Key' => "$TAG-up" };

    my $r = upload($s->{id}, $img, undef, $key);
    is($r->{status}, 201, "$name - 201");

    my $again = upload($s->{id}, $img, undef, $key);
    is($again->{status}, 201, "$name - replay: 201");
    is($again->{content}, $r->{content}, "$name - replay: the same body");
    is(image_rows($s->{id}), 1, "$name - one image");

    my $other = png_bytes(100 * 1024);
    $r = upload($s->{id}, $other, undef, $key);
    is($r->{status}, 422, "$name - another body under the key: 422");
    is(image_rows($s->{id}), 1, "$name - still one image");
    is(SessionTest::error_log_count($TEMP_FILE), 0,
       "$name - no temporary file");
};

# a session's body of 40 KB (spaces around the JSON)
$checks{json} = sub {
    my ($name) = @_;

    my $body = encode_json({ delivery_mode => 'long_poll' })
               . (' ' x (40 * 1024));
    my $r = api('POST', '/api/v1/sessions', $body,
                { 'Content-Type' => 'application/json' });
    is($r->{status}, 201, "$name - 201");
    is($r->{json}{delivery_mode}, 'long_poll', "$name - read whole");
    is(SessionTest::error_log_count($TEMP_FILE), 0,
       "$name - no temporary file");
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    $block->set_value('http_config', <<'EOF') unless defined $block->http_config;
    session_db $TEST_NGINX_SESSION_DB_CONF;

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;

        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
            session_body_buffer_size 0;
        }
    }

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        client_body_timeout 1s;

        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
    }
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

=== TEST 1: 100 KB gathered and sent whole; size 0 and over it: the file
--- check: gathered
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: a body that comes slowly, in pieces
--- check: slow
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: a client gone mid-body, one that stops: nothing stored
--- check: gone
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 4: a keyed upload of 100 KB, replayed; another body 422
--- check: keyed
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 5: a session's JSON body over client_body_buffer_size
--- check: json
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 6: session_body_buffer_size 17m is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_body_buffer_size 17m;
--- config
    location /api/ { session_api; }
--- must_die
--- error_log
"session_body_buffer_size" directive must be between 0 and 16m



=== TEST 7: session_body_buffer_size 16m, at a location, is taken
--- config
    location /api/ {
        session_api;
        session_body_buffer_size 16m;
        session_limits create=1000 list=1000 other=1000;
    }
--- request
GET /api/v1/sessions
--- error_code: 200
