# The image endpoints (docs/api.md §1, §4, §5 and §10):
#
#     POST /api/v1/sessions/{sid}/images              upload: 415, 400 query,
#                                                     400 empty, 413, 400
#                                                     signature, then 404,
#                                                     403, 410, 409; 201
#     GET  /api/v1/sessions/{sid}/images              list: order, limit,
#                                                     cursor, acknowledged
#     GET  /api/v1/sessions/{sid}/images/{iid}        get
#     GET  .../images/{iid}/content                   bytes, ETag, 304, HEAD
#     POST .../images/{iid}/ack                       200, then 409
#
# The images are real small files made here (a PNG with its CRCs and a
# zlib stream, a JFIF JPEG, a GIF89a, a lossless WebP, a little-endian
# TIFF, an ISO BMFF HEIC header), plus bytes of any size for the limits.
#
# Blocks whose checks need Perl say "--- check: NAME" and run it against
# the nginx of the block (from --- init), as t/007-sessions.t does.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Compress::Zlib ();
use Digest::SHA ();
use IO::Select ();
use MIME::Base64 ();
use POSIX ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Images qw(png_bytes);
use SessionTest qw(:DEFAULT error_body api_request raw_http burst check_init
                    db_http_config key_headers error_log);

our (%KEY, %PROJECT, %SID, %IMG);

our $TAG = sprintf 't008-%d-%d', $$, time;

# t/042 runs these blocks again with pieces of a few bytes: megabytes in
# such pieces are for t/008 itself (64k) and t/043
our $SMALL_CHUNK = ($ENV{TEST_NGINX_SESSION_IMAGE_CHUNK} // 65536) < 4096;

our $UUID = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
our $TS = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;


# --- the files ----------------------------------------------------------

sub png_chunk {
    my ($type, $data) = @_;
    return pack('N', length $data) . $type . $data
           . pack('N', Compress::Zlib::crc32($type . $data));
}

# a valid PNG of w x h grey pixels
sub png {
    my ($w, $h) = @_;
    $w //= 1;
    $h //= 1;
    my $raw = join '', map { "\0" . ("\x80" x $w) } 1 .. $h;
    return "\x89PNG\r\n\x1a\n"
           . png_chunk('IHDR', pack('NNCCCCC', $w, $h, 8, 0, 0, 0, 0))
           . png_chunk('IDAT', Compress::Zlib::compress($raw))
           . png_chunk('IEND', '');
}

# JFIF APP0, a comment, end of image
sub jpeg {
    return "\xff\xd8\xff\xe0" . pack('n', 16) . "JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
           . "\xff\xfe" . pack('n', 2 + 9) . "t008 jpeg" . "\xff\xd9";
}

# a 1 x 1 GIF89a
sub gif {
    return 'GIF89a' . pack('vv', 1, 1) . "\x80\0\0" . "\xff\xff\xff\0\0\0"
           . ',' . pack('vvvv', 0, 0, 1, 1) . "\0" . "\x02\x02\x44\x01\0"
           . ';';
}

# a 1 x 1 lossless WebP
sub webp {
    my $vp8l = "\x2f\0\0\0\x10\x07\x10\x11\x11\x88\x88\xfe\x07\0";
    my $chunk = 'VP8L' . pack('V', 13) . substr($vp8l, 0, 13) . "\0";
    return 'RIFF' . pack('V', 4 + length $chunk) . 'WEBP' . $chunk;
}

# a little-endian TIFF header and an IFD of one entry (ImageWidth 1)
sub tiff {
    return "II*\0" . pack('V', 8) . pack('v', 1)
           . pack('vvVV', 256, 4, 1, 1) . pack('V', 0);
}

# an ISO BMFF file: ftyp (heic; mif1, heic) and an empty meta box
sub heic {
    my $ftyp = 'ftyp' . 'heic' . pack('N', 0) . 'mif1heic';
    my $meta = 'meta' . pack('N', 0);
    return pack('N', 4 + length $ftyp) . $ftyp
           . pack('N', 4 + length $meta) . $meta;
}

our %FILES = (
    'image/png'  => png(3, 2),
    'image/jpeg' => jpeg(),
    'image/gif'  => gif(),
    'image/webp' => webp(),
    'image/tiff' => tiff(),
    'image/heic' => heic(),
);

# a PNG of exactly $n bytes (>= 57): a valid one with a text chunk of
# padding before IEND
sub png_of {
    my ($n) = @_;
    my $p = png();
    my $pad = $n - length($p) - 12 - 4;
    die "png_of($n): too small\n" if $pad < 0;
    my $iend = png_chunk('IEND', '');
    substr($p, -length $iend) = png_chunk('tEXt', "pad\0" . ('x' x $pad))
                                . $iend;
    die "png_of($n): " . length($p) . "\n" unless length $p == $n;
    return $p;
}


# the cursor of an image list page that ended at $seq (the codec of
# src/core/ngx_http_session_cursor.c, written independently here)
sub image_cursor {
    my ($seq) = @_;
    my $bin = "\x01I" . pack('q>', $seq);
    $bin .= pack('N', Compress::Zlib::crc32($bin));
    (my $c = MIME::Base64::encode_base64($bin, '')) =~ tr{+/}{-_};
    $c =~ s/=+$//;
    return $c;
}


# --- fixtures -----------------------------------------------------------

{
    for my $name (qw(MAIN OTHER_ACCOUNT)) {
        my $f = fixture(plan => 'pro', name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $PROJECT{"$name.account"} = $f->{account_id};
    }

    # another project of the same account
    my $p = sessionctl_ok('project', 'create', $PROJECT{'MAIN.account'},
                          "$TAG-OTHER");
    $PROJECT{OTHER} = $p->{project_id};
    $KEY{OTHER} = sessionctl_ok('key', 'create', $p->{project_id})->{key};

    # sessions for the plain blocks: open, completed, expired
    for my $s (['OPEN', 'open', "now() + interval '1 day'", 'NULL'],
               ['DONE', 'completed', "now() + interval '1 day'", 'now()'],
               ['GONE', 'open', "now() - interval '1 second'", 'NULL'])
    {
        my ($name, $status, $expires, $completed) = @$s;
        $SID{$name} = psql('INSERT INTO sessions (project_id, delivery_mode,'
                           . ' status, expires_at, completed_at) VALUES ('
                           . sql_quote($PROJECT{MAIN}) . ", 'long_poll', '"
                           . "$status', $expires, $completed) RETURNING id");
    }

    # one image in each, inserted with SQL
    for my $name (qw(OPEN DONE GONE)) {
        $IMG{$name} = psql('WITH s AS (UPDATE sessions SET image_count = 1'
                           . ' WHERE id = ' . sql_quote($SID{$name})
                           . ' RETURNING id) INSERT INTO images (session_id,'
                           . ' sequence, content_type, size, sha256,'
                           . ' content) SELECT id, 1, \'image/gif\', '
                           . length(gif()) . ", sha256(content), content"
                           . ' FROM s, (SELECT decode('
                           . sql_quote(unpack('H*', gif()))
                           . ", 'hex') AS content) c RETURNING id");
    }
}


# --- expected answers ---------------------------------------------------

sub bad { error_body(400, 'Bad Request', $_[0]) }

our $NOT_FOUND = error_body(404, 'Not Found', 'session not found');
our $IMAGE_NOT_FOUND = error_body(404, 'Not Found', 'image not found');
our $FORBIDDEN = error_body(403, 'Forbidden',
                            'session belongs to another project');
our $EXPIRED = error_body(410, 'Gone', 'session has expired');
our $COMPLETED = error_body(409, 'Conflict', 'session is completed');
our $ACKED = error_body(409, 'Conflict', 'image is already acknowledged');
our $EMPTY = bad('image body is empty');

sub unsupported {
    error_body(415, 'Unsupported Media Type', "unsupported image type: $_[0]");
}

sub too_large { error_body(413, 'Payload Too Large', "image exceeds $_[0] bytes") }

sub not_valid { bad("body is not a valid $_[0]") }


# --- helpers for the checks ---------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS): SessionTest's api_request, 30 s;
# the body goes as it is, the answer is JSON only when it says so
sub api {
    return api_request(@_[0 .. 4],
                       { timeout => 30, raw => 1, json_type => 1 });
}

sub create_session {
    my ($key, $body) = @_;

    my $r = api('POST', '/api/v1/sessions', $key || $KEY{MAIN},
                encode_json($body || { delivery_mode => 'long_poll' }),
                { 'Content-Type' => 'application/json' });

    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json};
}

sub upload {
    my ($sid, $type, $bytes, $key) = @_;

    return api('POST', "/api/v1/sessions/$sid/images", $key || $KEY{MAIN},
               $bytes, { 'Content-Type' => $type });
}

# uploads; returns the image, or dies
sub upload_ok {
    my $r = upload(@_);
    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;
    return $r->{json};
}

# The image object exactly: its fields, the types of their values.
sub image_ok {
    my ($img, $want, $what) = @_;

    is(join(',', sort keys %{ $img || {} }),
       'acknowledged,acknowledged_at,content_type,created_at,id,sequence,'
       . 'session_id,sha256,size', "$what - the fields of an image");

    like($img->{id} // '', $UUID, "$what - id");
    like($img->{created_at} // '', $TS, "$what - created_at");
    ok(JSON::PP::is_bool($img->{acknowledged}),
       "$what - acknowledged is a boolean");

    for my $k (sort keys %$want) {
        if (ref $want->{$k} eq 'Regexp') {
            like($img->{$k} // '', $want->{$k}, "$what - $k");
        } else {
            is($img->{$k}, $want->{$k}, "$what - $k");
        }
    }
}

sub session_of {
    my ($sid, $key) = @_;
    my $r = api('GET', "/api/v1/sessions/$sid", $key || $KEY{MAIN});
    return $r->{json};
}

sub chunked_upload {
    my ($sid, $type, $body) = @_;

    my $req = "POST /api/v1/sessions/$sid/images HTTP/1.1\r\n"
              . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
              . "Content-Type: $type\r\n"
              . "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

    for (my $i = 0; $i < length $body; $i += 8000) {
        my $chunk = substr $body, $i, 8000;
        $req .= sprintf("%x\r\n", length $chunk) . $chunk . "\r\n";
    }

    return raw_http($req . "0\r\n\r\n", 20);
}


# --- the checks ---------------------------------------------------------

my %checks;

# Every allowed type: 201, Location, the image, the bytes back, the
# session's image_count.
$checks{types} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $seq = 0;

    for my $type (sort keys %FILES) {
        my $bytes = $FILES{$type};
        my $r = upload($s->{id}, $type, $bytes);

        $seq++;
        is($r->{status}, 201, "$name - $type - 201");
        is($r->{headers}{'content-type'}, 'application/json',
           "$name - $type - Content-Type");
        image_ok($r->{json}, {
                     session_id => $s->{id}, sequence => $seq,
                     content_type => $type, size => length $bytes,
                     sha256 => Digest::SHA::sha256_hex($bytes),
                     acknowledged_at => undef,
                 }, "$name - $type");
        ok(!$r->{json}{acknowledged}, "$name - $type - not acknowledged");

        my $id = $r->{json}{id} // 'none';
        is($r->{headers}{location}, "/api/v1/sessions/$s->{id}/images/$id",
           "$name - $type - Location");

        my $g = api('GET', $r->{headers}{location} // '/none', $KEY{MAIN});
        is($g->{status}, 200, "$name - $type - GET Location - 200");
        is_deeply($g->{json}, $r->{json}, "$name - $type - GET - the image");

        my $c = api('GET', "/api/v1/sessions/$s->{id}/images/$id/content",
                    $KEY{MAIN});
        is($c->{status}, 200, "$name - $type - content - 200");
        is($c->{headers}{'content-type'}, $type,
           "$name - $type - content - Content-Type");
        is($c->{headers}{'content-length'}, length $bytes,
           "$name - $type - content - Content-Length");
        is($c->{headers}{etag}, '"' . Digest::SHA::sha256_hex($bytes) . '"',
           "$name - $type - content - ETag");
        ok($c->{content} eq $bytes, "$name - $type - the same bytes");
    }

    my $after = session_of($s->{id});
    is($after->{image_count}, 6, "$name - the session's image_count");
    is($after->{acknowledged_count}, 0, "$name - acknowledged_count");

    # parameters and case: the type is stored as its media type
    my $r = upload($s->{id}, 'IMAGE/PNG; charset=binary', png());
    is($r->{status}, 201, "$name - IMAGE/PNG; charset=binary - 201");
    is($r->{json}{content_type}, 'image/png',
       "$name - stored as image/png");
};

# The limits: exactly at the limit 201, one byte more 413, announced or
# chunked; nginx's own limit does not answer first.
$checks{limit} = sub {
    my ($name) = @_;

    my $s = create_session();

    for my $c ([2048, 201], [2049, 413]) {
        my ($n, $want) = @$c;
        my $bytes = png_of($n);

        my $r = upload($s->{id}, 'image/png', $bytes);
        is($r->{status}, $want, "$name - Content-Length $n - $want");
        if ($want == 201) {
            is($r->{json}{size}, $n, "$name - $n bytes stored");
        } else {
            is($r->{content}, too_large(2048), "$name - $n - the message");
            ok(defined $r->{headers}{'x-ratelimit-limit'},
               "$name - $n - answered by the module after the rate limit");
        }

        $r = chunked_upload($s->{id}, 'image/png', $bytes);
        is($r->{status}, $want, "$name - chunked $n - $want");
        is($r->{content}, too_large(2048), "$name - chunked $n - message")
            if $want == 413;
    }

    my $r = chunked_upload($s->{id}, 'image/png', png_of(100000));
    is($r->{status}, 413, "$name - chunked 100000 - 413");
    is($r->{content}, too_large(2048), "$name - chunked 100000 - message");

    # Content-Length of 1 GiB, of which nothing is sent
    $r = raw_http("POST /api/v1/sessions/$s->{id}/images HTTP/1.1\r\n"
                  . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
                  . "Content-Type: image/png\r\nConnection: close\r\n"
                  . "Content-Length: 1073741824\r\n\r\n", 5);
    is($r->{status}, 413, "$name - Content-Length 1 GiB unsent - 413");
    is($r->{content}, too_large(2048), "$name - 1 GiB - the message");

    # sessions keep their own limit in the same location
    $r = raw_http("POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
                  . "Authorization: Bearer $KEY{MAIN}\r\n"
                  . "Content-Type: application/json\r\nConnection: close\r\n"
                  . "Transfer-Encoding: chunked\r\n\r\n"
                  . sprintf("%x\r\n", 70000) . ('x' x 70000) . "\r\n0\r\n\r\n",
                  10);
    is($r->{status}, 413, "$name - a chunked sessions body of 70000 - 413");
    is($r->{content}, error_body(413, 'Payload Too Large',
                                 'request body exceeds 65536 bytes'),
       "$name - the sessions message");

    is(session_of($s->{id})->{image_count}, 2,
       "$name - two images stored (those at the limit)");
};

# The default limit, 10m: 10485760 bytes are accepted, 10485761 are not.
$checks{default_limit} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $n = 10 * 1024 * 1024;

    my $r = upload($s->{id}, 'image/png', png_bytes($n + 1));
    is($r->{status}, 413, "$name - 10485761 bytes - 413");
    is($r->{content}, too_large($n), "$name - the message");

    $r = upload($s->{id}, 'image/png', png_bytes($n));
    is($r->{status}, 201, "$name - 10485760 bytes - 201");
    is($r->{json}{size}, $n, "$name - size");
};

# 5 MB: up and down byte for byte; HEAD; ETag and If-None-Match
$checks{big} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $bytes = png_bytes(5 * 1024 * 1024 + 3);
    my $sha = Digest::SHA::sha256_hex($bytes);

    my $img = upload_ok($s->{id}, 'image/png', $bytes);
    is($img->{sha256}, $sha, "$name - sha256");
    is(psql('SELECT encode(sha256(content), \'hex\') = encode(sha256, '
            . '\'hex\') FROM images WHERE id = ' . sql_quote($img->{id})),
       't', "$name - the stored bytes have the stored SHA-256");

    my $path = "/api/v1/sessions/$s->{id}/images/$img->{id}/content";

    for (1 .. 2) {
        my $c = api('GET', $path, $KEY{MAIN});
        is($c->{status}, 200, "$name - download $_ - 200");
        is($c->{headers}{'content-length'}, length $bytes,
           "$name - download $_ - Content-Length");
        ok($c->{content} eq $bytes, "$name - download $_ - byte for byte");
    }

    my $h = api('HEAD', $path, $KEY{MAIN});
    is($h->{status}, 200, "$name - HEAD - 200");
    is($h->{headers}{'content-length'}, length $bytes,
       "$name - HEAD - Content-Length");
    is($h->{headers}{etag}, "\"$sha\"", "$name - HEAD - ETag");
    is($h->{content} // '', '', "$name - HEAD - no body");

    for my $inm ("\"$sha\"", '*', "W/\"$sha\"", "\"x\", \"$sha\"",
                 "\"abc\" , W/\"$sha\" ")
    {
        my $c = api('GET', $path, $KEY{MAIN}, undef,
                    { 'If-None-Match' => $inm });
        is($c->{status}, 304, "$name - If-None-Match: $inm - 304");
        is($c->{content} // '', '', "$name - If-None-Match: $inm - no body");
        is($c->{headers}{etag}, "\"$sha\"",
           "$name - If-None-Match: $inm - ETag");
    }

    for my $inm ('"' . ('0' x 64) . '"', '"' . uc($sha) . '"', $sha, '"')
    {
        my $c = api('GET', $path, $KEY{MAIN}, undef,
                    { 'If-None-Match' => $inm });
        is($c->{status}, 200, "$name - If-None-Match: $inm - 200");
        ok(($c->{content} // '') eq $bytes,
           "$name - If-None-Match: $inm - the bytes");
    }

    # around the first slice (16k with the answer's headers), the chunk
    # (64k: uploads over it are streamed, unless gathered whole in memory
    # up to session_body_buffer_size, 128k, as by default; TEST 76 turns
    # that off) and the next slices (twice the chunk less 16k, 112k;
    # docs/decisions.md (zg)): byte for byte
    my $slice = 2 * 65536 - 16384;
    my $spooled = () = error_log() =~ /a client request body is buffered/g;

    for my $n (16383, 16384, 16385, 65536, 65537, 16384 + 65536,
               16384 + $slice, 16384 + $slice + 1, 16384 + 2 * $slice,
               16384 + 2 * $slice + 1)
    {
        my $b = png_bytes($n);
        my $i = upload_ok($s->{id}, 'image/png', $b);
        my $c = api('GET', "/api/v1/sessions/$s->{id}/images/$i->{id}"
                           . '/content', $KEY{MAIN});
        is($c->{status}, 200, "$name - $n bytes - 200");
        ok(($c->{content} // '') eq $b, "$name - $n bytes - byte for byte");
    }

    # where gathering is off (TEST 76) every body went through nginx's
    # temporary file (ten here; five of them at most where the five from
    # 16k + 1 to 128k are gathered), and those over 64k were streamed
    if ($::NO_GATHER) {
        my $now = () = error_log() =~ /a client request body is buffered/g;
        cmp_ok($now - $spooled, '>=', 8,
               "$name - the bodies went through the temporary file");
    }
};

# an image of the first slice, a next one and one byte: the next slices
# are of twice the chunk less 16k (docs/decisions.md (zg)), as the debug
# log says; the error_log of the block checks the two slices asked for
$checks{slices} = sub {
    my ($name) = @_;

    my $s = create_session();
    my $b = png_bytes(16384 + 114688 + 1);
    my $i = upload_ok($s->{id}, 'image/png', $b);
    my $c = api('GET', "/api/v1/sessions/$s->{id}/images/$i->{id}/content",
                $KEY{MAIN});
    is($c->{status}, 200, "$name - 200");
    ok(($c->{content} // '') eq $b, "$name - byte for byte");
};

# 50 uploads at once into one session (4 workers): sequences 1 .. 50
$checks{concurrent} = sub {
    my ($name) = @_;
    my $n = 50;

    my $s = create_session();
    my $body = png(4, 4);

    my $req = "POST /api/v1/sessions/$s->{id}/images HTTP/1.1\r\n"
              . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n"
              . "Content-Type: image/png\r\n"
              . "Content-Length: " . length($body) . "\r\n"
              . "Connection: close\r\n\r\n$body";

    my ($raws) = burst($n, $req);

    my (%status, @seq);

    for my $raw (@$raws) {
        my ($st) = $raw =~ m{^HTTP/1\.1 (\d{3}) };
        my ($content) = $raw =~ /\r\n\r\n(.*)\z/s;
        $status{$st // 'none'}++;
        my $j = eval { decode_json($content) };
        push @seq, $j->{sequence} if ref $j eq 'HASH';
    }

    is(join(' ', map { "$_: $status{$_}" } sort keys %status), "201: $n",
       "$name - $n times 201");
    is_deeply([sort { $a <=> $b } @seq], [1 .. $n],
              "$name - the answers hold sequences 1 .. $n");
    is(join(',', psql('SELECT sequence FROM images WHERE session_id = '
                      . sql_quote($s->{id}) . ' ORDER BY sequence')),
       join(',', 1 .. $n), "$name - so does the database");
    is(session_of($s->{id})->{image_count}, $n, "$name - image_count $n");

    # ascending sequence, pages of 20 with the cursor
    my (@ids, @seen, $cursor, $pages);
    for (1 .. 10) {
        my $q = 'limit=20' . (defined $cursor ? "&cursor=$cursor" : '');
        my $r = api('GET', "/api/v1/sessions/$s->{id}/images?$q", $KEY{MAIN});
        die "list: $r->{status}\n" unless $r->{status} == 200;
        $pages++;
        push @seen, map { $_->{sequence} } @{ $r->{json}{data} };
        last unless $r->{json}{has_more};
        $cursor = $r->{json}{next_cursor};
    }
    is($pages, 3, "$name - 3 pages of 20");
    is_deeply(\@seen, [1 .. $n], "$name - the pages in ascending sequence");
};

# acknowledge: 200, then 409; the list filter; acknowledged_count; works
# on a completed session
$checks{ack} = sub {
    my ($name) = @_;

    my $s = create_session();
    my @img = map { upload_ok($s->{id}, 'image/gif', gif()) } 1 .. 3;

    my $r = api('POST', "/api/v1/sessions/$s->{id}/images/$img[1]{id}/ack",
                $KEY{MAIN});
    is($r->{status}, 200, "$name - ack - 200");
    ok($r->{json}{acknowledged}, "$name - ack - acknowledged true");
    like($r->{json}{acknowledged_at} // '', $TS, "$name - acknowledged_at");
    is($r->{json}{id}, $img[1]{id}, "$name - ack - the image");

    my $r2 = api('POST', "/api/v1/sessions/$s->{id}/images/$img[1]{id}/ack",
                 $KEY{MAIN});
    is($r2->{status}, 409, "$name - ack again - 409");
    is($r2->{content}, $ACKED, "$name - ack again - the message");

    my $g = api('GET', "/api/v1/sessions/$s->{id}/images/$img[1]{id}",
                $KEY{MAIN});
    is_deeply($g->{json}, $r->{json}, "$name - GET - acknowledged");

    my $sess = session_of($s->{id});
    is($sess->{image_count}, 3, "$name - image_count 3");
    is($sess->{acknowledged_count}, 1, "$name - acknowledged_count 1");

    my $l = api('GET', "/api/v1/sessions/$s->{id}/images?acknowledged=true",
                $KEY{MAIN});
    is_deeply([map { $_->{id} } @{ $l->{json}{data} }], [$img[1]{id}],
              "$name - acknowledged=true");
    $l = api('GET', "/api/v1/sessions/$s->{id}/images?acknowledged=false",
             $KEY{MAIN});
    is_deeply([map { $_->{id} } @{ $l->{json}{data} }],
              [$img[0]{id}, $img[2]{id}], "$name - acknowledged=false");
    $l = api('GET', "/api/v1/sessions/$s->{id}/images", $KEY{MAIN});
    is_deeply([map { $_->{sequence} } @{ $l->{json}{data} }], [1, 2, 3],
              "$name - all, ascending");
    is($l->{json}{has_more}, JSON::PP::false, "$name - has_more false");
    ok(!defined $l->{json}{next_cursor}, "$name - next_cursor null");

    # completed: no more uploads, acks still work
    my $c = api('POST', "/api/v1/sessions/$s->{id}/complete", $KEY{MAIN});
    is($c->{status}, 200, "$name - complete");
    is($c->{json}{image_count}, 3, "$name - completed session's image_count");

    $r = upload($s->{id}, 'image/gif', gif());
    is($r->{status}, 409, "$name - upload after complete - 409");
    is($r->{content}, $COMPLETED, "$name - upload after complete - message");

    $r = api('POST', "/api/v1/sessions/$s->{id}/images/$img[0]{id}/ack",
             $KEY{MAIN});
    is($r->{status}, 200, "$name - ack on a completed session - 200");
    is(session_of($s->{id})->{acknowledged_count}, 2,
       "$name - acknowledged_count 2");
    is(session_of($s->{id})->{image_count}, 3,
       "$name - the refused upload took no sequence");
};

# another session's image, an unknown image, another project's session
$checks{ownership} = sub {
    my ($name) = @_;

    my $a = create_session();
    my $b = create_session();
    my $img = upload_ok($a->{id}, 'image/gif', gif());
    my $unknown = lc psql('SELECT gen_random_uuid()');

    for my $sfx ('', '/content', '/ack') {
        my $m = $sfx eq '/ack' ? 'POST' : 'GET';

        my $r = api($m, "/api/v1/sessions/$b->{id}/images/$img->{id}$sfx",
                    $KEY{MAIN});
        is($r->{status}, 404, "$name - $m image of another session$sfx");
        is($r->{content}, $IMAGE_NOT_FOUND,
           "$name - $m image of another session$sfx - message");

        $r = api($m, "/api/v1/sessions/$a->{id}/images/$unknown$sfx",
                 $KEY{MAIN});
        is($r->{status}, 404, "$name - $m unknown image$sfx");
        is($r->{content}, $IMAGE_NOT_FOUND,
           "$name - $m unknown image$sfx - message");

        $r = api($m, "/api/v1/sessions/$a->{id}/images/nope$sfx", $KEY{MAIN});
        is($r->{content}, $IMAGE_NOT_FOUND,
           "$name - $m malformed image id$sfx");

        $r = api($m, "/api/v1/sessions/$a->{id}/images/$img->{id}$sfx",
                 $KEY{OTHER});
        is($r->{content}, $FORBIDDEN, "$name - $m by another project$sfx");

        $r = api($m, "/api/v1/sessions/$a->{id}/images/nope$sfx",
                 $KEY{OTHER});
        is($r->{content}, $FORBIDDEN,
           "$name - $m by another project, malformed image id$sfx");

        $r = api($m, "/api/v1/sessions/$unknown/images/$img->{id}$sfx",
                 $KEY{MAIN});
        is($r->{content}, $NOT_FOUND, "$name - $m unknown session$sfx");
    }

    my $r = upload($a->{id}, 'image/gif', gif(), $KEY{OTHER});
    is($r->{content}, $FORBIDDEN, "$name - upload by another project");
    $r = upload($a->{id}, 'image/gif', gif(), $KEY{OTHER_ACCOUNT});
    is($r->{content}, $FORBIDDEN, "$name - upload by another account");
    $r = api('GET', "/api/v1/sessions/$a->{id}/images", $KEY{OTHER});
    is($r->{content}, $FORBIDDEN, "$name - list by another project");

    is(session_of($a->{id})->{image_count}, 1, "$name - nothing changed");
};

# a webhook session queues image.uploaded with the image as data
$checks{webhook} = sub {
    my ($name) = @_;

    my $s = create_session(undef, { delivery_mode => 'webhook',
                                    webhook_url => 'https://example.com/h' });
    my $img = upload_ok($s->{id}, 'image/png', png());

    my @rows = psql('SELECT event_type || \' \' || url || \' \' || payload'
                    . ' FROM webhook_outbox WHERE session_id = '
                    . sql_quote($s->{id}));
    is(scalar @rows, 1, "$name - one outbox row");

    my ($type, $url, $payload) = split / /, $rows[0] // '', 3;
    is($type, 'image.uploaded', "$name - event_type");
    is($url, 'https://example.com/h', "$name - url");

    my $p = eval { decode_json($payload) } || {};
    is(join(',', sort keys %$p), 'created_at,data,id,type',
       "$name - payload fields");
    is($p->{type}, 'image.uploaded', "$name - payload type");
    like($p->{id} // '', $UUID, "$name - payload id");
    is_deeply($p->{data}, $img, "$name - payload data is the image");

    my $l = create_session();
    upload_ok($l->{id}, 'image/png', png());
    is(psql('SELECT count(*) FROM webhook_outbox WHERE session_id = '
            . sql_quote($l->{id})), 0, "$name - none for long_poll");
};

# the expired session refuses every image endpoint with 410
$checks{expired} = sub {
    my ($name) = @_;

    my $base = "/api/v1/sessions/$SID{GONE}/images";

    for my $c (['POST', $base, gif()], ['GET', $base],
               ['GET', "$base/$IMG{GONE}"],
               ['GET', "$base/$IMG{GONE}/content"],
               ['HEAD', "$base/$IMG{GONE}/content"],
               ['POST', "$base/$IMG{GONE}/ack"])
    {
        my ($m, $path, $body) = @$c;
        my $r = api($m, $path, $KEY{MAIN}, $body,
                    { 'Content-Type' => 'image/gif' });
        is($r->{status}, 410, "$name - $m $path - 410");
        is($r->{content}, $EXPIRED, "$name - $m $path - message")
            unless $m eq 'HEAD';
    }
};

# Long poll's wake-up: the upload's notification on session_events, only
# into a session a poll armed, or into any with "sessionctl wakeups all"
# (docs/decisions.md (yf)).  The armed session's notification is awaited
# last: it commits after the others, so theirs would be there by then.
$checks{notify} = sub {
    my ($name) = @_;

    my ($quiet, $armed, $all) = map { create_session() } 1 .. 3;

    psql("UPDATE sessions SET polled_until = now() + interval '1 minute'"
         . " WHERE id = '$armed->{id}'");

    my $out = notifications('session_events', sub {
        upload_ok($quiet->{id}, 'image/gif', gif());
        sessionctl_ok('wakeups', 'all');
        upload_ok($all->{id}, 'image/gif', gif());
        sessionctl_ok('wakeups', 'polled');
        upload_ok($armed->{id}, 'image/gif', gif());
    }, qr/uploaded:\Q$armed->{id}\E/);

    like($out, qr/"uploaded:\Q$armed->{id}\E"/,
         "$name - uploaded:<session id> of the armed session");
    like($out, qr/"uploaded:\Q$all->{id}\E"/,
         "$name - uploaded:<session id> of any session with wakeups all");
    unlike($out, qr/\Q$quiet->{id}\E/,
           "$name - none of the session no poll armed");
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

    # bodies are not gathered whole in memory (TEST 76)
    $::NO_GATHER = ($block->http_config // '')
                   =~ /session_body_buffer_size\s+0\s*;/ ? 1 : 0;

    db_http_config($block);

    $block->set_value('config', $CONFIG) unless defined $block->config;

    key_headers($block, \%KEY, 'MAIN', 'image/png');

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: every allowed type: 201, Location, the image, the bytes back
--- check: types
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}"
--- error_code: 200
--- response_headers
Content-Type: application/json
--- no_error_log
[error]



=== TEST 2: session_image_max_size 2k: 2048 bytes 201, 2049 bytes 413 (length or chunked)
--- config
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        session_image_max_size 2k;
    }
--- check: limit
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: the default limit is 10m, whatever client_max_body_size says
--- skip_eval: 1: $::SMALL_CHUNK
--- config
    location /api/ {
        client_max_body_size 1k;
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
--- check: default_limit
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: 5 MB up and down byte for byte, HEAD, ETag, If-None-Match
--- skip_eval: 1: $::SMALL_CHUNK
--- check: big
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: 50 concurrent uploads into one session: sequences 1 .. 50
--- workers: 4
--- check: concurrent
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 6: ack twice: 200, 409; filter; counts; completed sessions
--- check: ack
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: unknown image, another session's image, another project: 404 / 403
--- check: ownership
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: webhook session: an image.uploaded outbox row
--- check: webhook
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: expired session: 410 on every image endpoint
--- check: expired
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: an upload notifies session_events with uploaded:<sid> when a poll armed the session
--- check: notify
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]



=== TEST 11: a PNG labelled image/jpeg: 400
--- content_type: image/jpeg
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png()]
--- error_code: 400
--- response_body eval
::not_valid('image/jpeg')
--- no_error_log
[error]



=== TEST 12: a JPEG labelled image/png: 400
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::jpeg()]
--- error_code: 400
--- response_body eval
::not_valid('image/png')
--- no_error_log
[error]



=== TEST 13: a GIF labelled image/webp: 400
--- content_type: image/webp
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::gif()]
--- error_code: 400
--- response_body eval
::not_valid('image/webp')
--- no_error_log
[error]



=== TEST 14: a WebP labelled image/gif: 400
--- content_type: image/gif
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::webp()]
--- error_code: 400
--- response_body eval
::not_valid('image/gif')
--- no_error_log
[error]



=== TEST 15: a HEIC labelled image/tiff: 400
--- content_type: image/tiff
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::heic()]
--- error_code: 400
--- response_body eval
::not_valid('image/tiff')
--- no_error_log
[error]



=== TEST 16: a TIFF labelled image/heic: 400
--- content_type: image/heic
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::tiff()]
--- error_code: 400
--- response_body eval
::not_valid('image/heic')
--- no_error_log
[error]



=== TEST 17: an AVIF (ftyp avif, compatible mif1) labelled image/heic: 400
--- content_type: image/heic
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . pack('N', 28) . "ftypavif\0\0\0\0avifmif1miaf" . pack('N', 8) . "meta"]
--- error_code: 400
--- response_body eval
::not_valid('image/heic')
--- no_error_log
[error]



=== TEST 18: the signature names the type in lower case, without parameters
--- content_type: Image/GIF; x=1
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png()]
--- error_code: 400
--- response_body eval
::not_valid('image/gif')
--- no_error_log
[error]



=== TEST 19: a signature cut short (7 bytes of PNG)
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . substr(::png(), 0, 7)]
--- error_code: 400
--- response_body eval
::not_valid('image/png')
--- no_error_log
[error]



=== TEST 20: no Content-Type: 415 none
--- content_type: none
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png()]
--- error_code: 415
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 415 Unsupported Media Type\r\n
--- response_body eval
::unsupported('none')
--- no_error_log
[error]



=== TEST 21: Content-Type text/plain: 415
--- content_type: text/plain
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png()]
--- error_code: 415
--- response_body eval
::unsupported('text/plain')
--- no_error_log
[error]



=== TEST 22: Content-Type in another case, with parameters: named lower-case
--- content_type: Image/SVG+XML; charset=utf-8
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n<svg/>"]
--- error_code: 415
--- response_body eval
::unsupported('image/svg+xml')
--- no_error_log
[error]



=== TEST 23: Content-Type image/jpg (not an allowed name): 415
--- content_type: image/jpg
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::jpeg()]
--- error_code: 415
--- response_body eval
::unsupported('image/jpg')
--- no_error_log
[error]



=== TEST 24: Content-Type empty: 415 none
--- more_headers
Content-Type:
--- content_type: none
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png()]
--- error_code: 415
--- response_body eval
::unsupported('none')
--- no_error_log
[error]



=== TEST 25: Content-Type application/json (the sessions type): 415
--- content_type: application/json
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n{}"]
--- error_code: 415
--- response_body eval
::unsupported('application/json')
--- no_error_log
[error]



=== TEST 26: empty body: 400
--- request eval
"POST /api/v1/sessions/$::SID{OPEN}/images\n"
--- error_code: 400
--- response_body eval
$::EMPTY
--- no_error_log
[error]



=== TEST 27: empty chunked body: 400
--- raw_request eval
"POST /api/v1/sessions/$::SID{OPEN}/images HTTP/1.1\r
Host: localhost\r
Authorization: Bearer $::KEY{MAIN}\r
Content-Type: image/png\r
Transfer-Encoding: chunked\r
Connection: close\r
\r
0\r
\r
"
--- error_code: 400
--- response_body eval
$::EMPTY
--- no_error_log
[error]



=== TEST 28: no body and no Content-Length (HTTP/1.0): 400
--- raw_request eval
"POST /api/v1/sessions/$::SID{OPEN}/images HTTP/1.0\r
Host: localhost\r
Authorization: Bearer $::KEY{MAIN}\r
Content-Type: image/png\r
\r
"
--- error_code: 400
--- response_body eval
$::EMPTY
--- no_error_log
[error]



=== TEST 29: an unknown query parameter: 400
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images?name=x\n" . ::png()]
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: name')
--- no_error_log
[error]



=== TEST 30: order: Content-Type (415) before the query string
--- content_type: text/plain
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images?name=x\n" . ::png()]
--- error_code: 415
--- response_body eval
::unsupported('text/plain')
--- no_error_log
[error]



=== TEST 31: order: the query string before the empty body
--- request eval
"POST /api/v1/sessions/$::SID{OPEN}/images?x\n"
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: x')
--- no_error_log
[error]



=== TEST 32: order: an empty body before the session (unknown session)
--- request
POST /api/v1/sessions/00000000-0000-4000-8000-000000000000/images
--- error_code: 400
--- response_body eval
$::EMPTY
--- no_error_log
[error]



=== TEST 33: order: the signature before the session (completed session)
--- content_type: image/jpeg
--- request eval
["POST /api/v1/sessions/$::SID{DONE}/images\n" . ::png()]
--- error_code: 400
--- response_body eval
::not_valid('image/jpeg')
--- no_error_log
[error]



=== TEST 34: order: the size before the session (malformed session id)
--- config
    location /api/ {
        session_api;
        session_image_max_size 10;
    }
--- request eval
["POST /api/v1/sessions/nope/images\n" . ::png()]
--- error_code: 413
--- response_body eval
::too_large(10)
--- no_error_log
[error]



=== TEST 35: upload into a completed session: 409
--- content_type: image/gif
--- request eval
["POST /api/v1/sessions/$::SID{DONE}/images\n" . ::gif()]
--- error_code: 409
--- raw_response_headers_like: ^HTTP/1\.1 409 Conflict\r\n
--- response_body eval
$::COMPLETED
--- no_error_log
[error]



=== TEST 36: upload into an expired session: 410
--- content_type: image/gif
--- request eval
["POST /api/v1/sessions/$::SID{GONE}/images\n" . ::gif()]
--- error_code: 410
--- response_body eval
$::EXPIRED
--- no_error_log
[error]



=== TEST 37: upload into a malformed session id: 404
--- content_type: image/gif
--- request eval
["POST /api/v1/sessions/nope/images\n" . ::gif()]
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 38: upload into another project's session: 403
--- api_key: OTHER
--- content_type: image/gif
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::gif()]
--- error_code: 403
--- response_body eval
$::FORBIDDEN
--- no_error_log
[error]



=== TEST 39: list: limit=0
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?limit=0"
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 40: list: limit=101
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?limit=101"
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 41: list: limit=abc
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?limit=abc"
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 42: list: acknowledged=yes
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?acknowledged=yes"
--- error_code: 400
--- response_body eval
::bad('acknowledged must be true or false')
--- no_error_log
[error]



=== TEST 43: list: acknowledged=TRUE (case matters)
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?acknowledged=TRUE"
--- error_code: 400
--- response_body eval
::bad('acknowledged must be true or false')
--- no_error_log
[error]



=== TEST 44: list: acknowledged without a value
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?acknowledged"
--- error_code: 400
--- response_body eval
::bad('acknowledged must be true or false')
--- no_error_log
[error]



=== TEST 45: list: cursor=garbage
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=garbage"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 46: list: a session cursor is not an image cursor
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=AVMABkQWM0DiQAEjRWeJq83vASNFZ4mrze_aIJDh"
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 47: list: a well-formed cursor past 32 bits
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=" . ::image_cursor(2**32)
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 48: list: an unknown query parameter
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?limit=5&offset=1"
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: offset')
--- no_error_log
[error]



=== TEST 49: list: the query is judged before the session (malformed id)
--- request
GET /api/v1/sessions/nope/images?limit=0
--- error_code: 400
--- response_body eval
::bad('limit must be an integer between 1 and 100')
--- no_error_log
[error]



=== TEST 50: list: a malformed session id: 404
--- request
GET /api/v1/sessions/nope/images
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 51: list: the envelope
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?limit=1&acknowledged=false"
--- error_code: 200
--- response_body_filters eval
sub { my $j = eval { ::decode_json($_[0]) } or return $_[0];
      $_->{created_at} = '<ts>' for @{ $j->{data} }; ::encode_json($j) }
--- response_body eval
::encode_json({ data => [{ id => $::IMG{OPEN}, session_id => $::SID{OPEN},
    sequence => 1, content_type => 'image/gif', size => length(::gif()),
    sha256 => Digest::SHA::sha256_hex(::gif()), created_at => '<ts>',
    acknowledged => JSON::PP::false, acknowledged_at => undef }],
    has_more => JSON::PP::false, next_cursor => undef })
--- no_error_log
[error]



=== TEST 52: list: a cursor past the end: an empty page
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=" . ::image_cursor(42)
--- error_code: 200
--- response_body chomp
{"data": [], "has_more": false, "next_cursor": null}
--- no_error_log
[error]



=== TEST 52b: list: a negative cursor
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=" . ::image_cursor(-1)
--- error_code: 400
--- response_body eval
::bad('cursor is invalid')
--- no_error_log
[error]



=== TEST 52c: list: the cursor of the first page leads to the second
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images?cursor=" . ::image_cursor(0)
--- error_code: 200
--- response_body_like: "sequence": 1
--- no_error_log
[error]



=== TEST 53: list: a completed session still lists
--- request eval
"GET /api/v1/sessions/$::SID{DONE}/images"
--- error_code: 200
--- response_body_like: "sequence": 1
--- no_error_log
[error]



=== TEST 54: get: an unknown query parameter
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}?x=1"
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: x')
--- no_error_log
[error]



=== TEST 55: get: a malformed image id: 404 image not found
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/nope"
--- error_code: 404
--- response_body eval
$::IMAGE_NOT_FOUND
--- no_error_log
[error]



=== TEST 56: get: an upper-case image id is the same image
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/" . uc $::IMG{OPEN}
--- error_code: 200
--- response_body_like eval
qr/"id": "$::IMG{OPEN}"/
--- no_error_log
[error]



=== TEST 57: get: HEAD answers the headers only
--- request eval
"HEAD /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}"
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body chomp
--- no_error_log
[error]



=== TEST 58: content: an unknown query parameter
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content?download=1"
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: download')
--- no_error_log
[error]



=== TEST 59: content: the bytes, Content-Type, ETag
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content"
--- error_code: 200
--- response_headers eval
"Content-Type: image/gif\nETag: \"" . Digest::SHA::sha256_hex(::gif()) . "\"\nContent-Length: " . length(::gif())
--- response_body eval
::gif()
--- no_error_log
[error]



=== TEST 60: content: If-None-Match with the tag: 304 without a body
--- more_headers eval
"If-None-Match: \"" . Digest::SHA::sha256_hex(::gif()) . "\"\n"
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content"
--- error_code: 304
--- response_headers eval
"ETag: \"" . Digest::SHA::sha256_hex(::gif()) . "\""
--- response_body chomp
--- no_error_log
[error]



=== TEST 61: content: If-None-Match * : 304
--- more_headers
If-None-Match: *
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content"
--- error_code: 304
--- no_error_log
[error]



=== TEST 62: content: If-None-Match * for an unknown image: 404
--- more_headers
If-None-Match: *
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/00000000-0000-4000-8000-000000000000/content"
--- error_code: 404
--- response_body eval
$::IMAGE_NOT_FOUND
--- no_error_log
[error]



=== TEST 63: content: another tag: 200
--- more_headers
If-None-Match: "0000000000000000000000000000000000000000000000000000000000000000", garbage
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content"
--- error_code: 200
--- response_body eval
::gif()
--- no_error_log
[error]



=== TEST 64: content: a completed session's image
--- request eval
"GET /api/v1/sessions/$::SID{DONE}/images/$::IMG{DONE}/content"
--- error_code: 200
--- response_body eval
::gif()
--- no_error_log
[error]



=== TEST 65: content: another project: 403
--- api_key: OTHER
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/content"
--- error_code: 403
--- response_body eval
$::FORBIDDEN
--- no_error_log
[error]



=== TEST 66: ack: an unknown query parameter
--- request eval
"POST /api/v1/sessions/$::SID{OPEN}/images/$::IMG{OPEN}/ack?x=1"
--- error_code: 400
--- response_body eval
::bad('unknown query parameter: x')
--- no_error_log
[error]



=== TEST 67: ack: a malformed image id: 404 image not found
--- request eval
"POST /api/v1/sessions/$::SID{OPEN}/images/nope/ack"
--- error_code: 404
--- response_body eval
$::IMAGE_NOT_FOUND
--- no_error_log
[error]



=== TEST 68: ack: a malformed session id: 404 session not found
--- request
POST /api/v1/sessions/nope/images/nope/ack
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 69: ack in an expired session: 410
--- request eval
"POST /api/v1/sessions/$::SID{GONE}/images/$::IMG{GONE}/ack"
--- error_code: 410
--- response_body eval
$::EXPIRED
--- no_error_log
[error]



=== TEST 70: the session's poll answers (t/012-poll.t tests it)
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/poll?timeout=0"
--- error_code: 200
--- response_body_like chomp
^\{"session": \{.*\}, "images": \[.*\]\}$
--- no_error_log
[error]



=== TEST 71: session_image_max_size 0 is refused
--- config
    location /api/ {
        session_api;
        session_image_max_size 0;
    }
--- must_die
--- error_log
"session_image_max_size" directive must be between 1 and 512m



=== TEST 72: session_image_max_size 513m is refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_image_max_size 513m;
--- must_die
--- error_log
"session_image_max_size" directive must be between 1 and 512m



=== TEST 73: session_image_max_size abc is refused
--- config
    location /api/ {
        session_api;
        session_image_max_size abc;
    }
--- must_die
--- error_log
"session_image_max_size" directive invalid value



=== TEST 74: session_image_max_size at the server level is inherited
--- config
    session_image_max_size 100;
    location /api/ {
        session_api;
    }
--- request eval
["POST /api/v1/sessions/$::SID{OPEN}/images\n" . ::png_of(101)]
--- error_code: 413
--- response_body eval
::too_large(100)
--- no_error_log
[error]



=== TEST 75: after the first 16k, a download's slices are 112k (64k chunks)
--- skip_eval: 1: $::SMALL_CHUNK
--- debug_log: the "session image: slice" lines
--- check: slices
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- error_log
session image: slice of 114688 bytes from byte 16384
session image: slice of 1 bytes from byte 131072
--- no_error_log
[error]



=== TEST 76: TEST 4 with no body gathered whole: over 64k streamed
--- skip_eval: 1: $::SMALL_CHUNK
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_body_buffer_size 0;
--- check: big
--- request eval
"GET /api/v1/sessions/$::SID{OPEN}/images"
--- error_code: 200
--- no_error_log
[error]
