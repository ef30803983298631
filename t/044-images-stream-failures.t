# Streamed images when things go wrong (docs/api.md §5.5 and 5.8,
# docs/decisions.md "Images"): uploads over session_image_chunk_size go
# to PostgreSQL with COPY on an upload connection, downloads a slice at a
# time.  Here, with 4k chunks and the database behind a relay that a
# block can cut:
#
#   - the largest allowed image is stored, one byte more is 413 (with
#     Content-Length before the body, chunked as it arrives), and nothing
#     is stored;
#   - a client that goes away in the middle of its upload leaves nothing
#     behind, and the next upload goes through;
#   - a client that goes away in the middle of a download, or reads
#     slowly, or stops reading, holds no database connection: with one
#     pool connection, other requests are answered meanwhile; one that
#     stops is closed after send_timeout;
#   - the database going away during an upload's transaction: 503, no
#     image, and uploads work again once it is back; during a download:
#     the response is cut (fewer bytes than Content-Length, connection
#     closed), and logged;
#   - one key's burst of uploads waiting for the upload connections takes
#     turns with another key's upload, which does not wait for the whole
#     burst; uploads into one session hold a connection one at a time,
#     and let uploads into other sessions pass;
#   - session_image_chunk_size and session_image_upload_connections
#     refuse values out of their bounds.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use IO::Socket::INET ();
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Images qw(png_bytes image_rows read_some);
use SessionTest qw(:DEFAULT error_body api_request raw_http check_init
                    relay_db relay_start relay_stop wait_until key_headers
                    send_request answer status_json);

our (%KEY, $RELAY_PORT, $RELAY_PID);

our $TAG = sprintf 't044-%d-%d', $$, time;

# the database through a relay: cut and started again on the same port
($RELAY_PORT, $RELAY_PID) = relay_db();

for my $k (qw(MAIN OTHER)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$k");
    $KEY{$k} = $f->{key};
}


# --- helpers ------------------------------------------------------------

# the server of http_config: sndbuf=8k, send_timeout 1s
sub port {
    return $Test::Nginx::Util::RandPorts->{TEST_NGINX_RAND_PORT_1}
        // die "no TEST_NGINX_RAND_PORT_1\n";
}

sub api {
    return api_request(@_[0 .. 4],
                       { timeout => 30, raw => 1, json_type => 1,
                         port => port() });
}

sub create_session {
    my ($key) = @_;
    my $r = api('POST', '/api/v1/sessions', $KEY{$key // 'MAIN'},
                encode_json({ delivery_mode => 'long_poll' }),
                { 'Content-Type' => 'application/json' });
    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    return $r->{json};
}

sub upload {
    my ($sid, $bytes) = @_;
    return api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN}, $bytes,
               { 'Content-Type' => 'image/png' });
}

sub image_count {
    my ($sid) = @_;
    return psql('SELECT image_count FROM sessions WHERE id = '
                . sql_quote($sid));
}

# a connection with a small receive buffer, so that nginx cannot hand the
# kernel the whole answer at once: the request written, nothing read
sub slow_get {
    my ($path) = @_;

    my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096))
        or die "setsockopt: $!";
    $s->connect(Socket::pack_sockaddr_in(port(),
                                         Socket::inet_aton('127.0.0.1')))
        or die "connect: $!";

    print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n"
             . "Authorization: Bearer $KEY{MAIN}\r\n"
             . "Connection: close\r\n\r\n";

    return $s;
}

# the head and body of a raw answer
sub split_answer {
    my ($raw) = @_;
    my ($head, $body) = split /\r\n\r\n/, $raw, 2;
    my ($len) = ($head // '') =~ /\r\nContent-Length: (\d+)/i;
    my ($status) = ($head // '') =~ m{^HTTP/1\.1 (\d{3})};
    return ($status // 0, $len, $body // '');
}

# "GET session" answered within a second
sub other_request_ok {
    my ($sid, $what) = @_;
    my $r = api('GET', "/api/v1/sessions/$sid", $KEY{MAIN});
    is($r->{status}, 200, "$what - another request answered");
    ok($r->{elapsed} < 2, "$what - at once ($r->{elapsed} s)");
}


# --- the checks ---------------------------------------------------------

my %checks;

# exactly session_image_max_size (1m): streamed, stored, byte for byte;
# one more: 413, announced or chunked (on the main server), nothing stored
$checks{limit} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $max = png_bytes(1024 * 1024);

    my $r = upload($s->{id}, $max);
    is($r->{status}, 201, "$name - the largest image: 201");
    is($r->{json}{size}, length $max, "$name - its size");
    is($r->{json}{sha256}, Digest::SHA::sha256_hex($max),
       "$name - its SHA-256, computed as it streamed");

    my $c = api('GET', "/api/v1/sessions/$s->{id}/images/$r->{json}{id}"
                       . '/content', $KEY{MAIN});
    is($c->{status}, 200, "$name - content 200");
    ok($c->{content} eq $max, "$name - the same bytes, in 256 slices");

    my $over = $max . 'x';
    $r = upload($s->{id}, $over);
    is($r->{status}, 413, "$name - one byte more: 413");
    is($r->{content}, error_body(413, 'Payload Too Large',
                                 'image exceeds 1048576 bytes'),
       "$name - the message");

    my $req = "POST /api/v1/sessions/$s->{id}/images HTTP/1.1\r\n"
              . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
              . "Content-Type: image/png\r\n"
              . "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    for (my $i = 0; $i < length $over; $i += 4000) {
        my $chunk = substr $over, $i, 4000;
        $req .= sprintf("%x\r\n", length $chunk) . $chunk . "\r\n";
    }
    $r = raw_http($req . "0\r\n\r\n", 20);
    is($r->{status}, 413, "$name - one byte more, chunked: 413");

    is(image_rows($s->{id}), 1, "$name - one image stored");
    is(image_count($s->{id}), 1, "$name - image_count 1");
};

# the client sends 100k of 300k and goes away
$checks{upload_gone} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(300 * 1024);

    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => port(),
                                  Proto => 'tcp')
        or die "connect: $!";
    print $c "POST /api/v1/sessions/$s->{id}/images HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
             . "Content-Type: image/png\r\nContent-Length: "
             . length($img) . "\r\n\r\n" . substr($img, 0, 100 * 1024);
    close $c;

    my ($seen) = wait_until(10, 0.05, sub {
        SessionTest::error_log_count(qr/client prematurely closed/) > 0
    });
    ok($seen, "$name - nginx saw the client go");

    is(image_rows($s->{id}), 0, "$name - nothing stored");
    is(image_count($s->{id}), 0, "$name - image_count 0");

    my $r = upload($s->{id}, $img);
    is($r->{status}, 201, "$name - the next upload: 201");
    is($r->{json}{sequence}, 1, "$name - sequence 1");
};

# one pool connection: a download whose client goes away, one that reads
# slowly, one that stops; other requests are answered meanwhile
$checks{readers} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(1024 * 1024);
    my $r = upload($s->{id}, $img);
    die "upload: $r->{status}\n" unless $r->{status} == 201;

    my $path = "/api/v1/sessions/$s->{id}/images/$r->{json}{id}/content";

    # gone after 20k
    my $g = slow_get($path);
    my $got = read_some($g, 20 * 1024);
    ok(length $got >= 20 * 1024, "$name - the first bytes of one");
    close $g;

    other_request_ok($s->{id}, "$name - after a reader went away");

    # slow: pauses after 50k while other requests run, then reads on
    my $w = slow_get($path);
    $got = read_some($w, 50 * 1024);

    other_request_ok($s->{id}, "$name - while a reader pauses")
        for 1 .. 3;

    $got .= read_some($w, 2 * 1024 * 1024, 20);
    close $w;

    my ($status, $len, $body) = split_answer($got);
    is($status, 200, "$name - the slow reader's 200");
    is($len, length $img, "$name - Content-Length");
    ok($body eq $img, "$name - the slow reader has every byte");

    # stops after 50k: closed after send_timeout (1s)
    my $t = slow_get($path);
    read_some($t, 50 * 1024);
    my $t0 = Time::HiRes::time();

    my ($closed) = wait_until(10, 0.1, sub {
        SessionTest::error_log_count(qr/client timed out/) > 0
    });
    ok($closed, "$name - a reader that stopped is dropped");
    ok(Time::HiRes::time() - $t0 < 5,
       "$name - after send_timeout, not later");
    close $t;

    other_request_ok($s->{id}, "$name - after a reader stopped");

    $r = api('GET', $path, $KEY{MAIN});
    ok($r->{status} == 200 && $r->{content} eq $img,
       "$name - a whole download afterwards");
};

# the database goes away while an upload waits in its transaction (its
# COPY behind a lock), and while a download is under way
$checks{db_gone} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $img = png_bytes(200 * 1024);

    my $r = upload($s->{id}, $img);
    die "upload: $r->{status}\n" unless $r->{status} == 201;
    my $path = "/api/v1/sessions/$s->{id}/images/$r->{json}{id}/content";

    # a download that has its headers and a few slices
    my $d = slow_get($path);
    my $head = read_some($d, 16 * 1024);

    # an upload whose COPY waits for a lock
    my $lock = psql_begin('LOCK TABLE images IN SHARE MODE',
                          "SELECT count(*) FROM pg_locks l JOIN pg_class c"
                          . " ON c.oid = l.relation WHERE c.relname ="
                          . " 'images' AND l.mode = 'ShareLock'"
                          . ' AND l.granted');

    my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => port(),
                                  Proto => 'tcp')
        or die "connect: $!";
    print $u "POST /api/v1/sessions/$s->{id}/images HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
             . "Content-Type: image/png\r\nConnection: close\r\n"
             . 'Content-Length: ' . length($img) . "\r\n\r\n" . $img;

    my ($waiting) = wait_until(10, 0.05, sub {
        psql("SELECT count(*) FROM pg_stat_activity WHERE application_name"
             . " = 'nginx session upload' AND query LIKE 'COPY%'"
             . " AND wait_event_type = 'Lock'") > 0
    });
    ok($waiting, "$name - the upload's COPY waits");

    relay_stop($RELAY_PID);

    my $a = read_some($u, 4096, 10);
    close $u;
    my ($status) = split_answer($a);
    is($status, 503, "$name - the upload: 503");
    like($a, qr/database unavailable/, "$name - its message");

    psql_end($lock, 'ROLLBACK');

    my $rest = read_some($d, 2 * 1024 * 1024, 10);
    close $d;
    my ($dstatus, $len, $body) = split_answer($head . $rest);
    is($dstatus, 200, "$name - the download had begun");
    ok(length $body < $len, "$name - and is cut ("
                            . length($body) . " of $len bytes)");

    is(image_rows($s->{id}), 1, "$name - no second image");
    is(image_count($s->{id}), 1, "$name - image_count 1");

    ($RELAY_PORT, $RELAY_PID) = relay_start($RELAY_PORT);

    my ($ok) = wait_until(10, 0.2, sub {
        upload($s->{id}, $img)->{status} == 201
    });
    ok($ok, "$name - uploads work again once the database is back");
    is(image_count($s->{id}), 2, "$name - image_count 2");
};


# a psql holding the session's row locked (until psql_end)
sub hold_session {
    my ($sid) = @_;
    return psql_begin('SELECT 1 FROM sessions WHERE id = ' . sql_quote($sid)
                      . ' FOR UPDATE',
                      q{SELECT count(*) FROM pg_stat_activity}
                      . q{ WHERE query LIKE '%FOR UPDATE%'}
                      . q{ AND state = 'idle in transaction'});
}

# waits (bounded) until n statements wait for a lock
sub lock_waiters {
    my ($n) = @_;
    return (wait_until(10, 0.02, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE wait_event_type = 'Lock'}) >= $n
    }))[0];
}

# waits (bounded) until session_status shows n uploads waiting
sub uploads_waiting {
    my ($n) = @_;
    return (wait_until(10, 0.02, sub {
        status_json()->{database}{uploads_waiting} == $n
    }))[0];
}

# an upload sent on a connection of its own, answered later (answer())
sub upload_send {
    my ($key, $sid, $bytes) = @_;
    return send_request('POST', "/api/v1/sessions/$sid/images", $KEY{$key},
                        { 'Content-Type' => 'image/png' }, $bytes, port());
}

# one upload connection, held by one key's upload (its session's row
# locked), three more of that key's waiting, then another key's: once the
# row is free, the other key's upload is the third to commit, not the
# last (docs/decisions.md (yk))
$checks{turns} = sub {
    my ($name) = @_;

    my $a = create_session('MAIN');
    my $b = create_session('OTHER');
    my $img = png_bytes(8 * 1024);

    my $lock = hold_session($a->{id});

    my @sent = (upload_send('MAIN', $a->{id}, $img));
    ok(lock_waiters(1),
       "$name - the first upload holds the connection, waiting");

    push @sent, upload_send('MAIN', $a->{id}, $img) for 1 .. 3;
    ok(uploads_waiting(3), "$name - three more of the key's wait");

    push @sent, upload_send('OTHER', $b->{id}, $img);
    ok(uploads_waiting(4), "$name - then another key's");

    psql_end($lock, 'ROLLBACK');

    my @status = map { answer($_, 30)->{status} } @sent;
    is("@status", '201 201 201 201 201', "$name - every upload stored");

    my @order = psql('SELECT CASE session_id WHEN ' . sql_quote($a->{id})
                     . " THEN 'a' ELSE 'b' END FROM images"
                     . ' WHERE session_id IN (' . sql_quote($a->{id}) . ', '
                     . sql_quote($b->{id}) . ') ORDER BY created_at');
    is("@order", 'a a b a a',
       "$name - the other key's upload went after one of the burst's");

    is(status_json()->{database}{uploads_waiting}, 0,
       "$name - none waits any more");
};

# two upload connections, one held by an upload into a session whose row
# is locked: a second upload into that session waits in the queue, not
# on the lock, and an upload into another session (the same key) takes
# the free connection and is stored meanwhile (docs/decisions.md (yl))
$checks{serial} = sub {
    my ($name) = @_;

    my $a = create_session('MAIN');
    my $b = create_session('MAIN');
    my $img = png_bytes(8 * 1024);

    my $lock = hold_session($a->{id});

    my @sent = (upload_send('MAIN', $a->{id}, $img));
    ok(lock_waiters(1), "$name - the first upload waits for the row");

    push @sent, upload_send('MAIN', $a->{id}, $img);
    ok(uploads_waiting(1),
       "$name - the session's second waits in the queue");
    is(psql(q{SELECT count(*) FROM pg_stat_activity}
            . q{ WHERE application_name = 'nginx session upload'}), 1,
       "$name - and opens no connection it could not use");

    my $other = answer(upload_send('MAIN', $b->{id}, $img), 10);
    is($other->{status}, 201,
       "$name - an upload into another session is stored meanwhile");
    is(psql(q{SELECT count(*) FROM pg_stat_activity}
            . q{ WHERE wait_event_type = 'Lock'}), 1,
       "$name - one upload waits for the row, not two");
    is(status_json()->{database}{uploads_waiting}, 1,
       "$name - the other still waits in the queue");

    psql_end($lock, 'ROLLBACK');

    my @status = map { answer($_, 30)->{status} } @sent;
    is("@status", '201 201', "$name - the session's uploads stored");
    is(image_count($a->{id}), 2, "$name - in turn: image_count 2");
    is(status_json()->{database}{uploads_waiting}, 0,
       "$name - none waits any more");
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

# the blocks of the upload queue (--- upload_connections: N): the
# database direct, N upload connections, session_status on the main server
sub queue_config {
    my ($block, $n) = @_;

    $block->set_value('http_config', <<"EOF");
    session_db \$TEST_NGINX_SESSION_DB_CONF;
    session_image_chunk_size 4k;
    session_image_upload_connections $n;

    server {
        listen 127.0.0.1:\$TEST_NGINX_RAND_PORT_1;

        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
    }
EOF

    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }

    location = /status {
        session_status;
    }
EOF
}

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    queue_config($block, $block->upload_connections)
        if defined $block->upload_connections;

    $block->set_value('http_config', <<'EOF') unless defined $block->http_config;
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_connections 1;
    session_image_chunk_size 4k;
    session_image_max_size 1m;

    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;
        send_timeout 1s;

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

=== TEST 1: the largest image streams; one byte more is 413, stored nothing
--- check: limit
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: a client gone in the middle of its upload: nothing stored
--- check: upload_gone
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: readers that go, pause, stop: no database connection held
--- check: readers
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 4: the database goes away mid-upload (503) and mid-download (cut)
--- check: db_gone
--- request
GET /api/v1/sessions
--- error_code: 200
--- error_log
download cut
--- no_error_log
[alert]



=== TEST 5: session_image_chunk_size 15 is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_image_chunk_size 15;
--- config
--- must_die
--- error_log
"session_image_chunk_size" directive must be between 16 and 1m



=== TEST 6: session_image_chunk_size 2m is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        session_image_chunk_size 2m;
    }
--- must_die
--- error_log
"session_image_chunk_size" directive must be between 16 and 1m



=== TEST 7: session_image_upload_connections 0 is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_image_upload_connections 0;
--- config
--- must_die
--- error_log
"session_image_upload_connections" directive must be between 1 and 1024



=== TEST 8: a key's burst of uploads takes turns with another key's upload
--- check: turns
--- upload_connections: 1
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 9: uploads into one session hold a connection one at a time
--- check: serial
--- upload_connections: 2
--- request
GET /api/v1/sessions
--- error_code: 200
--- no_error_log
[error]
[alert]
