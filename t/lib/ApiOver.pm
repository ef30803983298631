package ApiOver;

# The same checks of the API over any transport, for t/030-http2.t
# (HTTP/2, and HTTP/1.1 over TLS) and t/031-http3.t (HTTP/3):
#
#     use ApiOver qw(endpoints upload fanout gone);
#
#     my $t = {
#         version => '2',                       # every answer's version
#         request => sub { ... },               # (METHOD, PATH, KEY, BODY,
#                                               #  HEADERS) -> answer
#         key     => $KEY,
#     };
#
#     my $waiters = {
#         version     => '2',       # the polls' answers' version
#         parallel    => sub { },   # (N, PATH, KEY) -> handle
#         collect     => sub { },   # (handle) -> (answers, connections
#                                   #              or undef)
#         parked      => 0,         # how many of N nginx parks
#         connections => 1,         # the client's connections for N
#         stop        => 'KILL',    # the signal that makes it go away
#     };
#
#     endpoints($t, $name);          # returns the session's id
#     upload($t, $name);
#     fanout($t, $waiters, $name);
#     gone($t, $waiters, $name);
#
# An answer is as t/lib/Transport.pm's https_request() returns it:
# status, version, headers (lower-case names), content, json.

use strict;
use warnings;

use Exporter qw(import);
use Digest::SHA ();
use JSON::PP ();
use Test::More ();
use Session ();
use SessionTest ();

our @EXPORT_OK = qw(endpoints upload fanout gone);

my $N = 100;


# a PNG signature and filler
sub png { "\x89PNG\r\n\x1a\n" . ('p' x ($_[0] - 8)) }

# what nginx logs when a body goes to its temporary file
my $TEMP_FILE = qr/a client request body is buffered to a temporary file/;

sub long_poll { SessionTest::status_json()->{long_poll} }

# one request with the key
sub call {
    my ($t, @req) = @_;

    return $t->{request}->($req[0], $req[1], $t->{key}, @req[2, 3]);
}

sub create {
    my ($t) = @_;

    return call($t, 'POST', '/api/v1/sessions',
                '{"delivery_mode": "long_poll"}',
                { 'Content-Type' => 'application/json' });
}

# is(), with the answer's status and message when it is not right, and
# the answer's version
sub answer_is {
    my ($t, $r, $status, $name) = @_;

    Test::More::is($r->{status}, $status, $name)
        or Test::More::diag("got $r->{status} $r->{content}");
    Test::More::is($r->{version}, $t->{version},
                   "$name: over HTTP/$t->{version}");
}


# every endpoint, GET and HEAD; the same answers as over HTTP/1.1 (the
# other scripts' subject)
sub endpoints {
    my ($t, $name) = @_;

    my $r = create($t);
    answer_is($t, $r, 201, "$name - create");
    my $sid = $r->{json}{id} // 'none';
    Test::More::is($r->{headers}{location}, "/api/v1/sessions/$sid",
                   "$name - create: Location");

    $r = call($t, 'GET', '/api/v1/sessions?limit=100');
    answer_is($t, $r, 200, "$name - list");
    Test::More::ok((grep { $_->{id} eq $sid } @{ $r->{json}{data} // [] }),
                   "$name - list: the session");

    $r = call($t, 'HEAD', '/api/v1/sessions?limit=100');
    answer_is($t, $r, 200, "$name - HEAD list");
    if (defined $r->{downloaded}) {
        Test::More::is($r->{downloaded}, 0, "$name - HEAD list: no body");
    } else {
        Test::More::is($r->{content}, '', "$name - HEAD list: no body");
    }

    $r = call($t, 'GET', "/api/v1/sessions/$sid");
    answer_is($t, $r, 200, "$name - one session");
    Test::More::is($r->{json}{id}, $sid, "$name - one session: its id");

    $r = call($t, 'HEAD', "/api/v1/sessions/$sid");
    answer_is($t, $r, 200, "$name - HEAD one session");

    $r = call($t, 'GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($t, $r, 200, "$name - poll, nothing yet");
    Test::More::is_deeply($r->{json}{images}, [], "$name - poll: no image");

    my $png = png(1000);
    $r = call($t, 'POST', "/api/v1/sessions/$sid/images", $png,
              { 'Content-Type' => 'image/png' });
    answer_is($t, $r, 201, "$name - upload");
    my $iid = $r->{json}{id} // 'none';

    $r = call($t, 'GET', "/api/v1/sessions/$sid/images");
    answer_is($t, $r, 200, "$name - list images");
    Test::More::is(scalar @{ $r->{json}{data} // [] }, 1,
                   "$name - list images: one");

    $r = call($t, 'HEAD', "/api/v1/sessions/$sid/images");
    answer_is($t, $r, 200, "$name - HEAD list images");

    $r = call($t, 'GET', "/api/v1/sessions/$sid/images/$iid");
    answer_is($t, $r, 200, "$name - one image");
    Test::More::is($r->{json}{size_bytes} // length $png, length $png,
                   "$name - one image: its size");

    $r = call($t, 'HEAD', "/api/v1/sessions/$sid/images/$iid");
    answer_is($t, $r, 200, "$name - HEAD one image");

    my $etag = '"' . Digest::SHA::sha256_hex($png) . '"';

    $r = call($t, 'GET', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($t, $r, 200, "$name - content");
    Test::More::ok($r->{content} eq $png, "$name - content: the bytes");
    Test::More::is($r->{headers}{etag}, $etag, "$name - content: ETag");
    Test::More::is($r->{headers}{'content-type'}, 'image/png',
                   "$name - content: Content-Type");

    $r = call($t, 'HEAD', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($t, $r, 200, "$name - HEAD content");
    Test::More::is($r->{headers}{'content-length'}, length $png,
                   "$name - HEAD content: Content-Length");

    $r = call($t, 'GET', "/api/v1/sessions/$sid/images/$iid/content", undef,
              { 'If-None-Match' => $etag });
    answer_is($t, $r, 304, "$name - content, If-None-Match");

    $r = call($t, 'GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($t, $r, 200, "$name - poll: at once");
    Test::More::is($r->{json}{images}[0]{id}, $iid, "$name - poll: the image");

    $r = call($t, 'POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($t, $r, 200, "$name - ack");
    Test::More::is($r->{json}{acknowledged}, JSON::PP::true,
                   "$name - ack: acknowledged");

    $r = call($t, 'POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($t, $r, 409, "$name - ack again");

    $r = call($t, 'POST', "/api/v1/sessions/$sid/complete");
    answer_is($t, $r, 200, "$name - complete");

    $r = call($t, 'GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($t, $r, 410, "$name - poll after complete");
    Test::More::is($r->{json}{message}, 'all images are acknowledged',
                   "$name - poll after complete: message");

    $r = call($t, 'GET', '/api/v1/nope');
    answer_is($t, $r, 404, "$name - an unknown route");

    $r = $t->{request}->('GET', '/api/v1/sessions', undef);
    answer_is($t, $r, 401, "$name - no key");

    return $sid;
}


# images of 100 kB (gathered in memory, session_body_buffer_size) and of
# 300 kB (through nginx's temporary file, streamed): many frames or
# packets, more than the body buffer; each goes up and comes back byte
# for byte
sub upload {
    my ($t, $name) = @_;

    my $sid = create($t)->{json}{id};

    for my $kb (100, 300) {
        my $png = png($kb * 1024);
        substr($png, 100 + $_ * 97 * $kb / 100, 1) = chr($_ % 256)
            for 0 .. 300;

        my $files = SessionTest::error_log_count($TEMP_FILE);

        my $r = call($t, 'POST', "/api/v1/sessions/$sid/images", $png,
                     { 'Content-Type' => 'image/png' });
        answer_is($t, $r, 201, "$name - upload of $kb kB");
        Test::More::is(SessionTest::error_log_count($TEMP_FILE) - $files,
                       $kb == 100 ? 0 : 1,
                       "$name - $kb kB: "
                       . ($kb == 100 ? 'gathered in memory'
                                     : 'the temporary file'));

        $r = call($t, 'GET',
                  "/api/v1/sessions/$sid/images/$r->{json}{id}/content");
        answer_is($t, $r, 200, "$name - content of $kb kB");
        Test::More::is(length $r->{content}, length $png,
                       "$name - its length ($kb kB)");
        Test::More::ok($r->{content} eq $png,
                       "$name - the same bytes ($kb kB)");
    }
}


# N polls of one session, sent by the waiters' client, until nginx says
# they all wait and as many are parked as the transport parks
sub wait_polls {
    my ($t, $w, $name) = @_;

    my $sid = create($t)->{json}{id};

    my $p = $w->{parallel}->($N, "/api/v1/sessions/$sid/poll?timeout=30",
                             $t->{key});

    my ($lp) = SessionTest::wait_until(20, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $N && $s->{parked} == $w->{parked} ? $s : undef;
    });
    Test::More::ok($lp, "$name - $N polls wait, $w->{parked} parked")
        or Test::More::diag(Session::encode_json(long_poll()));

    return ($sid, $p);
}


# N polls wait; one upload wakes them all with the image
sub fanout {
    my ($t, $w, $name) = @_;

    my ($sid, $p) = wait_polls($t, $w, $name);

    my $up = call($t, 'POST', "/api/v1/sessions/$sid/images", png(100),
                  { 'Content-Type' => 'image/png' });
    answer_is($t, $up, 201, "$name - the upload");

    my ($r, $connects) = $w->{collect}->($p);

    Test::More::is($connects, $w->{connections},
                   "$name - $w->{connections} connections")
        if defined $connects;
    Test::More::is(scalar(grep { $_->{version} eq $w->{version} } @$r), $N,
                   "$name - $N over HTTP/$w->{version}");
    Test::More::is(scalar(grep { $_->{status} == 200 } @$r), $N,
                   "$name - $N x 200");
    Test::More::is(scalar(grep { ($_->{json}{images}[0]{id} // '')
                                 eq $up->{json}{id} } @$r),
                   $N, "$name - each with the image");

    my $after = long_poll();
    Test::More::is($after->{waiting}, 0, "$name - nobody waits after");
    Test::More::is($after->{parked}, 0, "$name - nobody parked after");
}


# N polls wait; their client goes away: they all leave
sub gone {
    my ($t, $w, $name) = @_;

    my ($sid, $p) = wait_polls($t, $w, $name);

    kill $w->{stop}, $p->{pid};
    $w->{collect}->($p);

    my ($gone) = SessionTest::wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0;
    });
    Test::More::ok($gone, "$name - nobody waits once the client is gone");

    my $r = call($t, 'GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($t, $r, 200, "$name - the session still answers");
}


1;
