#!/usr/bin/env perl
# The request generator of make fuzz-http (util/fuzz-http.sh): whole HTTP
# requests against a running nginx with the module, over raw sockets on
# 127.0.0.1, each one a valid request of docs/api.md mutated.
#
#   perl util/fuzz-http.pl --port N --key K --key2 K2 --gone-key K3
#                          [--seed N] [--seconds S] [--error-log FILE]
#                          --findings DIR [--clients N] [--outage FILE]
#                          [--port2 N] [--verbose]
#   perl util/fuzz-http.pl --port N --key K --replay FILE
#
# Every iteration takes the valid request of one endpoint (create in
# both modes, list, get, complete, upload, list images, get image,
# content, ack, poll), built from the ids the earlier answers gave, and
# applies 0 to 3 mutations: method; path (malformed ids, extra slashes,
# percent-encoding, dot segments, very long); query (duplicates, empty
# values, huge numbers, bad cursors, unknown names); headers
# (Authorization, Content-Type, Content-Length wrong, duplicated or with
# chunked, Idempotency-Key, Expect, HTTP/1.0 without Host, versions);
# body (truncated JSON, deep nesting, huge numbers, wrong types, UTF-8
# cut in the middle, over the limits).  Then it sends it whole, slowly,
# pipelined with others, with Expect: 100-continue, cut short and closed,
# or whole and closed before the answer.  Every choice comes from one
# PRNG seeded with --seed: a seed repeats the same mutations (the ids
# differ from run to run; a finding's bytes are kept in --findings).
# --clients (2) processes do this at once, client k with the seed + k,
# all from the same first ids, so that they race on the same sessions.
#
# Checked on every answer: a status line comes unless the request was
# cut short (or is one nginx closes on by design: HTTP/0.9); no 5xx but
# nginx's documented 501 and 505; every error is JSON {statusCode, error,
# message} with statusCode the status and error its reason phrase;
# Content-Length is the body's length; 2xx API answers are JSON (201 with
# a Location); a HEAD answer has no body.  At the end a create, an
# upload and a poll must work, each within a second, and the error log
# must show no [alert], [crit], [emerg] nor "exited on signal".  Prints
# a summary; exits 1 on any finding.
#
# --outage FILE: while FILE exists the database is stopped or has come
# back within the last seconds (util/fuzz-http.sh stops and starts it
# while the clients run).  A request sent or answered then may get a 503,
# which must be the JSON error like any other, may go unanswered within
# the wait (a query waits up to session_db_timeout), and a replay may be
# a 503 instead of the first answer; everything else is checked as ever.
#
# --port2 N: a server with small limits (the same key's counters): one
# request in ten goes there, and gets 429 once the window's count is
# past them.  Every error's headers are checked by its message: 503 with
# Retry-After: 1; 429 "rate limit exceeded" with Retry-After (1 to 60)
# and X-RateLimit-* (Remaining 0); the failed-authentication 429 with
# Retry-After and no X-RateLimit-*; the quota's 429 without Retry-After.

package FuzzHttp;

use strict;
use warnings;

use Getopt::Long ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use Socket qw(SHUT_WR);
use Time::HiRes ();

my $Json = JSON::PP->new->utf8;

my %Reason = (
    100 => 'Continue', 200 => 'OK', 201 => 'Created', 204 => 'No Content',
    304 => 'Not Modified', 400 => 'Bad Request', 401 => 'Unauthorized',
    403 => 'Forbidden', 404 => 'Not Found', 405 => 'Method Not Allowed',
    408 => 'Request Timeout', 409 => 'Conflict', 410 => 'Gone',
    411 => 'Length Required', 413 => 'Payload Too Large',
    414 => 'URI Too Long', 415 => 'Unsupported Media Type',
    416 => 'Range Not Satisfiable', 417 => 'Expectation Failed',
    422 => 'Unprocessable Entity', 429 => 'Too Many Requests',
    500 => 'Internal Server Error', 501 => 'Not Implemented',
    503 => 'Service Unavailable', 505 => 'HTTP Version Not Supported',
);

my $NIL = '00000000-0000-0000-0000-000000000000';
my $API = '/api/v1/sessions';

# the state: ids and cursors the answers gave
my %S = (open => [], done => [], images => [], scur => [], icur => [],
         idem => [], other => undef, hook => undef);
# long polls left waiting on their connection while the rest runs: an
# upload or a completion into their session wakes them
my @Parked;
my %O;

# --- the PRNG: srand once, then only these

sub rnd { int rand $_[0] }
sub pick { $_[rnd(scalar @_)] }
sub chance { rand() < $_[0] }
sub rbytes { join '', map { chr rnd(256) } 1 .. $_[0] }

sub rtoken {
    my ($n, $set) = @_;
    $set //= join '', 'a' .. 'z', 'A' .. 'Z', 0 .. 9, '-_';
    return join '', map { substr $set, rnd(length $set), 1 } 1 .. $n;
}

sub rhex { rtoken($_[0], '0123456789abcdef') }
sub ruuid { join '-', rhex(8), rhex(4), '4' . rhex(3), '8' . rhex(3),
                      rhex(12) }

# an element of a state list; draws one number whatever the list holds,
# so that a seed makes the same choices when the ids differ
sub from {
    my ($list, $default) = @_;
    my $i = rnd(1 << 30);
    return @$list ? $list->[$i % @$list] : $default;
}

# --- the valid requests

my $PNG = "\x89PNG\r\n\x1a\n";
my %Sig = (
    'image/png' => $PNG, 'image/jpeg' => "\xff\xd8\xff\xe0",
    'image/gif' => 'GIF89a', 'image/webp' => "RIFF\x10\0\0\0WEBPVP8 ",
    'image/tiff' => "II*\0", 'image/heic' => "\0\0\0\x18ftypheic\0\0\0\0",
);

sub hdr { [ $_[0], $_[1] ] }

sub base {
    my ($ep) = @_;
    my $sid = from($S{open}, $NIL);
    my $img = from($S{images}, [ $sid, $NIL ]);
    my $r = { ep => $ep, method => 'GET', version => 'HTTP/1.1',
              query => [], body => '', framing => 'cl', tags => [],
              headers => [ hdr('Host', 'localhost'),
                           hdr('Authorization', "Bearer $O{key}") ] };
    my $ik = 'fz-' . rhex(12);

    if ($ep eq 'create' || $ep eq 'create_hook') {
        my $ttl = chance(0.5) ? ', "expires_in": ' . (60 + rnd(3000)) : '';
        $r->{method} = 'POST';
        $r->{path} = $API;
        $r->{body} = $ep eq 'create'
            ? qq({"delivery_mode": "long_poll"$ttl})
            : qq({"delivery_mode": "webhook", "webhook_url": ")
              . "http://127.0.0.1:$O{port}/hook/" . rhex(4) . qq("$ttl});
        push @{ $r->{headers} }, hdr('Content-Type', 'application/json');
        push @{ $r->{headers} }, hdr('Idempotency-Key', $ik) if chance(0.3);
    } elsif ($ep eq 'list') {
        $r->{path} = $API;
        push @{ $r->{query} }, [ 'limit', 1 + rnd(5) ] if chance(0.7);
        push @{ $r->{query} }, [ 'status', pick(qw(open completed expired)) ]
            if chance(0.3);
        my $c = from($S{scur});
        my $use = chance(0.5);
        push @{ $r->{query} }, [ 'cursor', $c ] if defined $c && $use;
    } elsif ($ep eq 'get') {
        $r->{path} = "$API/" . pick($sid, $sid, from($S{done}, $sid));
    } elsif ($ep eq 'complete') {
        # a session of its own most times, so that open ones remain
        $r->{method} = 'POST';
        $r->{path} = "$API/" . (chance(0.5) ? from($S{done}, $sid) : $sid)
                     . '/complete';
        push @{ $r->{headers} }, hdr('Idempotency-Key', $ik) if chance(0.3);
    } elsif ($ep eq 'upload') {
        my $type = pick(sort keys %Sig);
        my $p = from([ grep { $_->{sid} } @Parked ]);
        my $use = chance(0.5);
        $sid = $p->{sid} if $p && $use;
        # over session_image_chunk_size at times: streamed with COPY
        my $size = pick(16, 200, 3000, 9000, 40000);
        $r->{method} = 'POST';
        $r->{path} = "$API/$sid/images";
        $r->{body} = $Sig{$type} . rbytes(rnd($size));
        push @{ $r->{headers} }, hdr('Content-Type', $type);
        push @{ $r->{headers} }, hdr('Idempotency-Key', $ik) if chance(0.3);
        $r->{framing} = 'chunked' if chance(0.2);
    } elsif ($ep eq 'images') {
        $r->{path} = "$API/$img->[0]/images";
        push @{ $r->{query} }, [ 'limit', 1 + rnd(5) ] if chance(0.6);
        push @{ $r->{query} }, [ 'acknowledged', pick('true', 'false') ]
            if chance(0.3);
        my $c = from($S{icur});
        my $use = chance(0.6);
        push @{ $r->{query} }, [ 'cursor', $c->[1] ]
            if defined $c && $c->[0] eq $img->[0] && $use;
    } elsif ($ep eq 'image') {
        $r->{path} = "$API/$img->[0]/images/$img->[1]";
    } elsif ($ep eq 'content') {
        $r->{path} = "$API/$img->[0]/images/$img->[1]/content";
    } elsif ($ep eq 'ack') {
        $r->{method} = 'POST';
        $r->{path} = "$API/$img->[0]/images/$img->[1]/ack";
        push @{ $r->{headers} }, hdr('Idempotency-Key', $ik) if chance(0.3);
    } else {
        $r->{path} = "$API/" . pick($img->[0], $sid) . '/poll';
        push @{ $r->{query} }, [ 'timeout', pick(0, 0, 0, 1) ]
            if chance(0.9);
    }

    $r->{method} = 'HEAD' if $r->{method} eq 'GET' && chance(0.05);
    return $r;
}

# --- mutations

sub path_ids {
    my ($p) = @_;
    return grep { /^[0-9a-fA-F-]{36}$/ } split m{/}, $p;
}

sub bad_id {
    my ($id) = @_;
    return pick(uc $id, "{$id}", $id =~ s/-//gr, substr($id, 1),
                "${id}0", substr($id, 0, 35) . 'g', $NIL, ruuid(),
                "urn:uuid:$id", $id =~ s/([0-9a-f])/sprintf '%%%02x', ord $1/er,
                $S{other} // $NIL, from($S{done}, $NIL),
                from($S{images}, [ $NIL, $NIL ])->[1], 'x' x (1 + rnd(3000)),
                '', ' ', '%00', "$id\x00", '..', '.', '%2e%2e', '-1',
                '9' x 40, $id . '%20');
}

my %Path = (
    id => sub {
        my ($r) = @_;
        my @ids = path_ids($r->{path});
        my $id = @ids ? $ids[rnd(scalar @ids)] : 'sessions';
        my $new = bad_id($id);
        $r->{path} =~ s/\Q$id\E/$new/;
    },
    slashes => sub {
        my ($r) = @_;
        my @p = split m{/}, $r->{path}, -1;
        my $i = 1 + rnd($#p || 1);
        $p[$i] = pick('/', '//', '///') . ($p[$i] // '');
        $r->{path} = join '/', @p;
        $r->{path} .= '/' if chance(0.3);
    },
    trailing => sub { $_[0]{path} .= pick('/', '/.', '/..', '/x', '?', '#') },
    percent => sub {
        my ($r) = @_;
        my $p = $r->{path};
        $p .= 'x' x (2 - length $p) if length $p < 2;
        my $i = 1 + rnd(length($p) - 1);
        my $c = substr $p, $i, 1;
        my $enc = pick(sprintf('%%%02X', ord $c), sprintf('%%%02x', ord $c),
                       '%2F', '%2f', '%zz', '%', '%0', '%00', '%2e', '%25',
                       '%C3%A9', '%C3', '%FF%FE', '%u0041');
        substr($p, $i, 1) = $enc if $enc =~ /^%[0-9A-Fa-f]{2}$/ && chance(0.6);
        substr($p, $i, 0) = $enc unless $enc =~ /^%[0-9A-Fa-f]{2}$/;
        $r->{path} = $p;
    },
    dots => sub {
        my ($r) = @_;
        $r->{path} =~ s{/v1/}{pick('/v1/./', '/v1/x/../', '/v2/../v1/',
                                   '/v1/%2e/', '/v1/%2E%2E/v1/')}e;
    },
    long => sub {
        my ($r) = @_;
        my $n = pick(300, 2000, 4000, 8000, 9000, 20000, 70000);
        $r->{path} .= pick('/', '') . ('a' x $n) if chance(0.5);
        $r->{path} =~ s{/sessions/[^/]+}{'/sessions/' . ('b' x $n)}e
            unless $r->{path} =~ /a{300}/;
    },
    case => sub { $_[0]{path} =~ s/(sessions|api|images|poll)/\u$1/ },
    bytes => sub {
        my ($r) = @_;
        my $at = rnd(length $r->{path}) || (length $r->{path} ? 1 : 0);
        substr($r->{path}, $at, 0) = pick(
            rbytes(1 + rnd(3)), "\x00", "\t", ' ', "\xc3", "\xe2\x82",
            "\x7f");
    },
    absolute => sub { $_[0]{path} = pick('http://localhost', 'HTTP://x:1',
                                         'https://[::1]')
                                    . $_[0]{path} },
    other => sub { $_[0]{path} = pick('*', '', '/', '/api', '/api/v1',
                                      '/api/v1/', "$API/", '/status',
                                      '/api/v1/sessions/' . ruuid()
                                      . '/images/' . ruuid() . '/x',
                                      "$API/a/poll/x") },
);

# the values of the numbers the endpoints take
sub bad_number {
    return pick('', '0', '-0', '-1', '+1', '1.0', '1e2', '0x10', ' 1', '1 ',
                '%201', '1%00', '00000000000000000000001', '2147483647',
                '2147483648', '4294967296', '9223372036854775807',
                '9223372036854775808', '18446744073709551616',
                '99999999999999999999999999999', '101', '100', '61',
                '3', '4', rtoken(3), "\xd9\xa1", '１', '1,2', 'NaN');
}

sub bad_cursor {
    my $c = from($S{scur}, 'AVMABmDEPtglZp_SmGFvPEy-nb5LKNvVQTBmTRst');
    my $i = rnd(length $c);
    my $flip = $c;
    substr($flip, $i, 1) = pick(grep { $_ ne substr($c, $i, 1) }
                                'A', 'z', '0', '_', '-');
    return pick($flip, substr($c, 0, rnd(length $c)), "${c}A", "$c=",
                $c =~ tr/-_/+\//r, '', 'A' x (1 + rnd(200)),
                rtoken(10 + rnd(60)), '%41' . $c, 'A' x 20000,
                from($S{icur}, [ 0, $c ])->[1], '%00', "$c%00",
                substr($c, 0, 4) . 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
                rbytes(20));
}

my %Query = (
    dup => sub {
        my ($r) = @_;
        my $q = $r->{query};
        push @$q, @$q ? [ @{ $q->[rnd(scalar @$q)] } ] : [ 'limit', 1 ];
        $q->[-1][1] = bad_number() if chance(0.5);
    },
    empty => sub {
        my ($r) = @_;
        my $q = $r->{query};
        push @$q, [ pick(qw(limit timeout cursor status acknowledged)), '' ]
            unless @$q;
        my $p = $q->[rnd(scalar @$q)];
        pick(sub { $p->[1] = '' }, sub { $p->[1] = undef },
             sub { $p->[0] = '' })->();
    },
    number => sub {
        my ($r) = @_;
        my ($p) = grep { $_->[0] =~ /^(limit|timeout)$/ } @{ $r->{query} };
        push @{ $r->{query} },
            $p = [ $r->{path} =~ /poll$/ ? 'timeout' : 'limit', 1 ]
            unless $p;
        $p->[1] = bad_number();
    },
    cursor => sub {
        my ($r) = @_;
        @{ $r->{query} } = grep { $_->[0] ne 'cursor' } @{ $r->{query} };
        push @{ $r->{query} }, [ 'cursor', bad_cursor() ];
    },
    value => sub {
        my ($r) = @_;
        push @{ $r->{query} }, [ pick('status', 'acknowledged'),
                                 pick('OPEN', 'True', '1', 'yes', 'open ',
                                      'expired', 'completed', '%6fpen',
                                      'open%00', rbytes(4)) ];
    },
    unknown => sub {
        my ($r) = @_;
        my $name = pick('Limit', 'foo', '%6Cimit', 'limit%00', 'a+b',
                        'x' x (1 + rnd(5000)), rbytes(1 + rnd(6)),
                        '%C3%28', '%FF', '"', '\\', '%22', '%5C', '%0A',
                        '%01', "\xc3", '%E2%80%A8', 'cursor[]', 'timeout');
        push @{ $r->{query} }, [ $name, pick('1', '', undef) ];
    },
    raw => sub {
        my ($r) = @_;
        $r->{rawq} = pick('&', '&&&', '=', '==', '&=&', ';limit=1', '?',
                          'limit=1;status=open', '%', '%%', '%zz=1',
                          'limit=1&' x (100 + rnd(2000)),
                          rtoken(1 + rnd(100), "=&%;+?/ab"), '#frag');
    },
);

sub set_header {
    my ($r, $name, $value) = @_;
    @{ $r->{headers} } = grep { lc $_->[0] ne lc $name } @{ $r->{headers} };
    push @{ $r->{headers} }, hdr($name, $value) if defined $value;
}

sub header_value {
    my ($r, $name) = @_;
    my ($h) = grep { lc $_->[0] eq lc $name } @{ $r->{headers} };
    return $h ? $h->[1] : undef;
}

my %Header = (
    auth => sub {
        my ($r) = @_;
        my $k = $O{key};
        my $hex = substr $k, 5;
        set_header($r, 'Authorization', pick(
            "bearer $k", "BEARER $k", "Bearer  $k", "Bearer\t$k",
            "Bearer $k ", "Bearer$k", 'Bearer sess_' . uc $hex,
            "Bearer $O{key2}", "Bearer $O{gone}", 'Bearer sess_' . rhex(32),
            'Bearer ' . substr($k, 0, -1), "Bearer ${k}0", "Bearer SESS_$hex",
            "Bearer x_$hex", '', 'Bearer', 'Bearer ', 'Basic eDp5',
            "Bearer $k, Bearer $k", "Bearer \x00$k", "Bearer $k\x00",
            'Bearer ' . ('f' x 9000), "Bearer sess_\xc3\xa9" . substr($hex, 2),
            undef));
        push @{ $r->{headers} }, hdr(pick('Authorization', 'authorization'),
                                     pick("Bearer $k", "Bearer $O{key2}", ''))
            if chance(0.2);
    },
    ctype => sub {
        my ($r) = @_;
        my $ct = header_value($r, 'Content-Type') // 'application/json';
        set_header($r, 'Content-Type', pick(
            undef, '', uc $ct, "$ct; charset=utf-8", "$ct;", " $ct ",
            "${ct}x", 'text/plain', 'application/x-www-form-urlencoded',
            'multipart/form-data; boundary=fz', 'image/jpg', 'image/svg+xml',
            'Image/PNG; q=1', 'image/png, image/jpeg', 'application/json',
            "$ct; " . ('p=' . 'v' x 5000), "\xc3\xa9", 'image/', '/',
            'image/heic', 'image/gif'));
        if (($r->{ct_multipart} = (header_value($r, 'Content-Type') // '')
             =~ /multipart/))
        {
            $r->{body} = "--fz\r\nContent-Disposition: form-data; name=\"f\";"
                         . " filename=\"a.png\"\r\nContent-Type: image/png"
                         . "\r\n\r\n$r->{body}\r\n--fz--\r\n";
        }
        push @{ $r->{headers} }, hdr('Content-Type', 'image/png')
            if chance(0.1);
    },
    length => sub {
        my ($r) = @_;
        my $n = length $r->{body};
        $r->{framing} = 'none';
        $r->{badframe} = 1;
        push @{ $r->{headers} }, map { hdr('Content-Length', $_) } pick(
            [ $n + 1 + rnd(10) ], [ $n > 0 ? rnd($n) : 0 ], [ 0 ],
            [ $n, $n ], [ $n, $n + 1 ], [ "$n, $n" ], [ -1 ], [ "+$n" ],
            [ "0$n" ], [ sprintf '0x%x', $n ], [ " $n" ], [ "$n " ],
            [ '99999999999999999999' ], [ '9223372036854775807' ], [ '' ],
            [ 'abc' ]);
        if (chance(0.2)) {
            push @{ $r->{headers} }, hdr('Transfer-Encoding', 'chunked');
            $r->{body} = chunk($r->{body});
        }
    },
    chunked => sub {
        my ($r) = @_;
        $r->{framing} = 'none';
        $r->{badframe} = 1;
        push @{ $r->{headers} }, hdr('Transfer-Encoding', pick(
            'chunked', 'chunked', 'Chunked', 'chunked, chunked',
            'gzip, chunked', 'identity', 'gzip', 'chunked ', ''));
        push @{ $r->{headers} }, hdr('Content-Length', length $r->{body})
            if chance(0.3);
        $r->{body} = chunk($r->{body}, 1);
    },
    idem => sub {
        my ($r) = @_;
        my $old = from($S{idem});
        set_header($r, 'Idempotency-Key', pick(
            '', ' ', 'k' x 255, 'k' x 256, 'k' x 5000, "a b", "a\tb",
            "\xc3\xa9", "k\x7f", "k\x00", '"quoted"', ruuid(),
            $old ? $old->{key} : 'fz-none'));
        push @{ $r->{headers} }, hdr('Idempotency-Key', pick('a', 'b'))
            if chance(0.2);
    },
    expect => sub {
        my ($r) = @_;
        set_header($r, 'Expect', pick('100-continue', '100-Continue',
                                      '100-continue, x', 'x'));
        $r->{expect} = 1 if $r->{headers}[-1][1] =~ /^100-continue$/i;
    },
    http10 => sub {
        my ($r) = @_;
        $r->{version} = 'HTTP/1.0';
        set_header($r, 'Host', undef) if chance(0.7);
        set_header($r, 'Connection', 'keep-alive') if chance(0.3);
    },
    nohost => sub { set_header($_[0], 'Host', undef) },
    host => sub { set_header($_[0], 'Host', pick(
        '', 'a b', '[::1', 'x' x 300, '..', "h\x00", 'localhost:99999',
        'localhost:', "h\xc3", '-', 'a..b', 'x:y:z')) },
    version => sub { $_[0]{version} = pick(
        'HTTP/1.2', 'HTTP/2.0', 'HTTP/3', 'HTTP/1.1x', 'http/1.1',
        'HTTP/1.', 'HTTP/01.1', 'HTTP/1.01', 'HTTP/9.9', 'HTTX/1.1',
        'HTTP/1.1 x', 'HTTP/0.9', '') },
    connection => sub { set_header($_[0], 'Connection', pick(
        'close', 'keep-alive', 'Upgrade', 'close, keep-alive', '')) },
    upgrade => sub {
        set_header($_[0], 'Upgrade', pick('h2c', 'websocket'));
        set_header($_[0], 'Connection', 'Upgrade');
    },
    inm => sub { set_header($_[0], 'If-None-Match', pick(
        '*', 'W/"x"', '"' . rhex(64) . '"', '"a", *', '', '"', 'W/',
        '"' . ('a' x 9000) . '"', ',,,', 'W/*')) },
    range => sub { set_header($_[0], 'Range', pick(
        'bytes=0-1', 'bytes=-1', 'bytes=5-2', 'bytes=0-0,1-1', 'x')) },
    odd => sub {
        my ($r) = @_;
        push @{ $r->{headers} }, pick(
            hdr('X-Long', 'v' x (1000 + rnd(20000))), hdr('X_Under', '1'),
            hdr('X-Nul', "a\x00b"), hdr('X-High', rbytes(8)),
            hdr('', 'empty-name'), hdr('NoColon', undef),
            hdr(' Folded', 'x'), hdr('Accept-Encoding', 'gzip'),
            hdr('Cookie', 'a=' . ('c' x 3000)),
            hdr('X-Forwarded-For', '10.0.0.1'));
        push @{ $r->{headers} }, map { hdr("X-Many-$_", $_) } 1 .. 300
            if chance(0.1);
    },
);

sub chunk {
    my ($b, $odd) = @_;
    my $out = '';
    my $how = $odd ? rnd(10) : 9;
    while (length $b) {
        my $n = 1 + rnd(length $b > 3000 ? 3000 : length $b);
        my $c = substr $b, 0, $n, '';
        my $size = sprintf '%x', $n;
        $size = pick('zz', '-1', 'ffffffffffffffffff', '', ' 1',
                     sprintf('%x', $n + 1 + rnd(100)), "$size;ext=1",
                     "$size;" . ('e' x 5000), sprintf('%X', $n))
            if $how == 0 && chance(0.5);
        $out .= "$size\r\n$c" . ($how == 1 ? '' : "\r\n");
    }
    return $out if $how == 2;
    return $out . "0\r\n" if $how == 3;
    return $out . "0\r\nX-Trailer: 1\r\n\r\n" if $how == 4;
    return $out . ('0' x 30) . "\r\n\r\n" if $how == 5;
    return $out . "0;x=y\r\n\r\n" if $how == 6;
    return $out . "0\r\n\r\n";
}

sub json_body {
    my ($r) = @_;
    my $v = pick('"long_poll"', '"webhook"', '1', 'true', 'null', '[]', '{}',
                 '""', '"LONG_POLL"', '"long_pol\xc3"', '"long_poll\x00"',
                 '"\u006cong_poll"', '"\ud800"', '"\udc00\ud800"',
                 '"long_poll\u0000"', '"' . ('l' x 70000) . '"');
    my $url = pick("\"http://127.0.0.1:$O{port}/hook\"",
                   '"http://hooks.invalid/x"', '"ftp://hooks.invalid/"',
                   '"http://user@hooks.invalid/"', '"http://hooks.invalid/#f"',
                   '"http://[::1]/x"', '"http://"', '""', '1', 'null',
                   '"https://' . ('a' x 3000) . '.invalid/"',
                   '"http://hooks.invalid:99999/"',
                   '"http://hooks.invalid/\xff"', '"HTTP://HOOKS.INVALID/"');
    my $ttl = pick('0', '1', '-1', '86400', '86401', '1.0', '6e2', '"600"',
                   'true', '99999999999999999999999999', '1e400',
                   '9223372036854775807', '9223372036854775808',
                   '-9223372036854775809', '-0', '0.5', 'null', '[600]');
    my $depth = pick(10, 100, 1000, 10000, 100000);
    return pick(
        sub { substr $r->{body}, 0, rnd(length $r->{body}) },
        sub { qq({"delivery_mode": $v}) },
        sub { qq({"delivery_mode": "webhook", "webhook_url": $url}) },
        sub { qq({"delivery_mode": "long_poll", "webhook_url": $url}) },
        sub { qq({"delivery_mode": "long_poll", "expires_in": $ttl}) },
        sub { qq({"delivery_mode": "long_poll", "x": ) . ('[' x $depth)
              . (']' x $depth) . '}' },
        sub { '[' x $depth },
        sub { '{"a":' x $depth },
        sub { qq({"delivery_mode": "long_poll", "delivery_mode": "webhook"}) },
        sub { qq(\xef\xbb\xbf{"delivery_mode": "long_poll"}) },
        sub { qq({"delivery_mode": "long_poll"}) . pick(' x', '{}', "\x00",
                                                        ' ' x 70000) },
        sub { qq({"delivery_mode": "long_poll", "\xc3": 1}) },
        sub { qq({"delivery_mode": "long_poll", "a\\"b": 1, "c": 2}) },
        sub { qq({"delivery_mode": "long_poll", "\\u0000": 1}) },
        sub { qq({"delivery_mode": "long_poll", ") . ('k' x 60000)
              . '": 1}' },
        sub { qq({"delivery_mode": "long_poll", "\xe2\x80": 1}) },
        sub { qq({"delivery_mode": "long_poll"}) . ' ' x (65536 - 30) },
        sub { '' }, sub { ' ' }, sub { 'null' }, sub { '"a"' },
        sub { rbytes(1 + rnd(100)) },
        sub { my $b = $r->{body}; substr($b, rnd(length $b), 0) = "\xc3";
              $b },
    )->();
}

my %Body = (
    json => sub {
        my ($r) = @_;
        $r->{body} = json_body($r);
    },
    image => sub {
        my ($r) = @_;
        my $ct = header_value($r, 'Content-Type') // 'image/png';
        my $sig = $Sig{$ct} // $PNG;
        $r->{body} = pick('', substr($sig, 0, rnd(length $sig)),
                          $Sig{ pick(sort keys %Sig) } . 'x', $sig,
                          "RIFF\0\0\0\0WEBX", "MM\0+", "\0\0\0\x08ftypavif",
                          $sig . ('i' x (262144 - length $sig)),
                          $sig . ('i' x (262145 - length $sig)),
                          $sig . rbytes(4096 + rnd(4096)), rbytes(50));
    },
    junk => sub {
        my ($r) = @_;
        $r->{body} = pick('x', rbytes(1 + rnd(500)), '{}', 'y' x 70000);
    },
);

my %Method = (
    method => sub { $_[0]{method} = pick(
        qw(GET POST HEAD PUT DELETE PATCH OPTIONS TRACE CONNECT PROPFIND),
        lc $_[0]{method}, 'X' x (1 + rnd(2000)), rtoken(1 + rnd(8)),
        "G\x00T", '', 'GET ') },
);

# the groups of mutations and how often each is chosen
my @Groups = ([ path => \%Path, 3 ], [ query => \%Query, 3 ],
              [ header => \%Header, 5 ], [ body => \%Body, 3 ],
              [ method => \%Method, 1 ]);

sub mutate {
    my ($r) = @_;
    my $n = pick(0, 1, 1, 1, 1, 2, 2, 3);
    my $weight = 0;
    $weight += $_->[2] for @Groups;
    for (1 .. $n) {
        my $w = rnd($weight);
        my $g = $Groups[0];
        for (@Groups) {
            $g = $_;
            last if ($w -= $_->[2]) < 0;
        }
        my ($gname, $table) = @$g;
        my @names = sort keys %$table;
        my $name = $names[rnd(scalar @names)];
        if ($gname eq 'body') {
            $name = $r->{ep} =~ /^create/ ? 'json'
                  : $r->{ep} eq 'upload' ? pick('image', 'image', 'junk')
                  : 'junk';
        }
        $table->{$name}->($r);
        push @{ $r->{tags} }, "$gname:$name";
        $r->{tags_v} = 1 if $name eq 'version';
    }
}

# --- bytes on the wire

sub qenc {
    my ($q) = @_;
    return join '&', map {
        defined $_->[1] ? "$_->[0]=$_->[1]" : $_->[0]
    } @$q;
}

sub bytes_of {
    my ($r) = @_;
    my $target = $r->{path};
    my $q = qenc($r->{query});
    $q = length $q ? "$q&$r->{rawq}" : $r->{rawq} if defined $r->{rawq};
    $target .= "?$q" if length $q;
    my $line = "$r->{method} $target";
    $line .= " $r->{version}" if length $r->{version};
    # no version before the first line feed (a raw one in a mutated path
    # ends the line): HTTP/0.9, whose answer is the body alone
    $r->{v09} = ($line =~ s/\n.*//sr) !~ m{ HTTP/1\.[01]\r?$}
                && ($line =~ s/\n.*//sr) !~ m{ HTTP/}i;

    my @h = @{ $r->{headers} };
    my $body = $r->{body};
    if ($r->{framing} eq 'cl'
        && (length $body || $r->{method} =~ /^(POST|PUT|PATCH)$/))
    {
        push @h, hdr('Content-Length', length $body);
    } elsif ($r->{framing} eq 'chunked') {
        push @h, hdr('Transfer-Encoding', 'chunked');
        $body = chunk($body);
    }
    my $head = join '', map {
        defined $_->[1] ? "$_->[0]: $_->[1]\r\n" : "$_->[0]\r\n"
    } @h;
    return ("$line\r\n$head\r\n", $body);
}

# --- answers

# The answers in $buf: a list of { status, reason, headers, body, extra }
# and the state: undef (complete), 'partial' or a reason why the bytes
# are no HTTP answer.
sub parse_answers {
    my ($buf, $heads, $closed, $v09) = @_;
    my @a;
    my $k = 0;

    while (length $buf) {
        # an HTTP/0.9 request (of those pipelined) is answered with the
        # body alone, up to the close
        if ($v09 && $buf !~ m{^H(T(T(P(/.*)?)?)?)?$}s && $buf !~ m{^HTTP/}) {
            return (\@a, 'partial') unless $closed;
            push @a, { status => 200, v09 => 1, body => $buf, headers => {} };
            return (\@a, undef);
        }
        my $end = index $buf, "\r\n\r\n";
        if ($end < 0) {
            return (\@a, 'partial') if !$closed;
            return (\@a, 'an answer head cut short: '
                         . printable(substr $buf, 0, 60))
                if $buf =~ m{^H(T(T(P(/.*)?)?)?)?$}s
                   || $buf =~ m{^HTTP/1\.[01] };
            return (\@a, 'bytes that are no status line: '
                         . printable(substr $buf, 0, 60));
        }
        my $head = substr $buf, 0, $end + 4, '';
        my ($line, @hl) = split /\r\n/, $head;
        my ($status, $reason) = $line =~ m{^HTTP/1\.[01] (\d{3}) ?(.*)$}
            or return (\@a, 'bad status line: ' . printable($line));
        my %h;
        for (@hl) {
            my ($n, $v) = /^([!-9;-~]+):[ \t]*(.*?)[ \t]*$/
                or return (\@a, 'bad header line: ' . printable($_));
            $n = lc $n;
            $h{$n} = exists $h{$n} ? "$h{$n}\n$v" : $v;
        }
        my $x = { status => $status, reason => $reason, headers => \%h,
                  body => '' };
        if ($status < 200) {
            push @a, $x;
            next;
        }
        my $head_only = $heads->[$k++];
        if ($head_only || $status == 304 || $status == 204) {
            # no body
        } elsif (($h{'transfer-encoding'} // '') =~ /chunked/i) {
            $x->{chunked} = 1;
            while (1) {
                my $e = index $buf, "\r\n";
                my $n = $e < 0 ? 0 : hex substr $buf, 0, $e;
                return (\@a, $closed ? 'a chunked answer cut short'
                                     : 'partial')
                    if $e < 0 || length $buf < $e + 2 + $n + 2;
                $x->{body} .= substr $buf, $e + 2, $n;
                substr $buf, 0, $e + 2 + $n + 2, '';
                last if $n == 0;
            }
        } elsif (defined $h{'content-length'}) {
            my $n = $h{'content-length'};
            return (\@a, "Content-Length '$n'") unless $n =~ /^\d+$/;
            if (length $buf < $n) {
                return (\@a, 'partial') unless $closed;
                return (\@a, sprintf 'status %d: Content-Length %d but %d'
                                     . ' bytes before the close', $status,
                                     $n, length $buf);
            }
            $x->{body} = substr $buf, 0, $n, '';
        } else {
            return (\@a, 'partial') unless $closed;
            $x->{body} = $buf;
            $x->{noframe} = 1;
            $buf = '';
        }
        push @a, $x;
    }
    return (\@a, undef);
}

sub printable {
    my ($s) = @_;
    $s = substr($s, 0, 200) . '...' if length $s > 200;
    return $s =~ s/([^ -~])/sprintf '\\x%02x', ord $1/ger;
}

# the database is stopped, or has been within the last seconds (the
# file --outage names exists: util/fuzz-http.sh makes it)
sub outage {
    return $O{outage} && -e $O{outage} ? 1 : 0;
}

# undef when the answer is one the contract allows, else why not
sub judge {
    my ($a, $r, $head, $loose) = @_;
    my $s = $a->{status};
    my $h = $a->{headers};

    return undef if $a->{v09};
    return undef if $s == 100;
    return "status $s with no body framing (no Content-Length)"
        if $a->{noframe} && $s != 101;
    return "HEAD answer with a body" if $head && length $a->{body};
    return "status $s: reason '$a->{reason}'"
        if $Reason{$s} && $a->{reason} ne $Reason{$s};

    if ($s =~ /^[23]/) {
        return undef if $head || $s == 304 || $s == 204;
        return undef if ($loose || $r->{path} =~ m{/content\b})
                        && ($h->{'content-type'} // '') =~ m{^image/};
        return undef if $r->{path} =~ m{^/hook/};
        my $j = eval { $Json->decode($a->{body}) };
        return "status $s: body is not JSON: " . printable($a->{body})
            unless ref $j eq 'HASH';
        return "status 201 without Location" if $s == 201 && !$h->{location};
        return undef;
    }
    return "status $s" if $s < 400;

    if ($s >= 500) {
        return "status $s" unless ($s == 501 && $r->{badframe})
                                  || ($s == 505 && $r->{tags_v})
                                  || ($s == 503 && $r->{outage});
    }
    my $ct = $h->{'content-type'} // '';
    return "status $s: Content-Type '$ct'" if $ct ne 'application/json';
    return undef if $head;
    my $j = eval { $Json->decode($a->{body}) };
    return "status $s: body is not JSON: " . printable($a->{body})
        unless ref $j eq 'HASH';
    my @k = sort keys %$j;
    return "status $s: keys @k" if "@k" ne 'error message statusCode';
    return "status $s: statusCode $j->{statusCode}"
        if !defined $j->{statusCode} || $j->{statusCode} ne $s
           || $a->{body} !~ /"statusCode": ?$s[,}]/;
    return "status $s: error '$j->{error}'"
        if $Reason{$s} && $j->{error} ne $Reason{$s};
    return "status $s: empty message" if !length($j->{message} // '');
    return headers_of_error($s, $j->{message}, $h);
}

# the headers an error carries, by its message (docs/api.md's table of
# statuses): Retry-After and X-RateLimit-*
sub headers_of_error {
    my ($s, $message, $h) = @_;
    my $ra = $h->{'retry-after'};
    my @rl = grep { defined $h->{"x-ratelimit-$_"} } qw(limit remaining reset);

    if ($s == 503) {
        return "503 '$message' with Retry-After '" . ($ra // '') . "'"
            unless ($ra // '') eq '1';
    } elsif ($s == 429 && $message eq 'rate limit exceeded') {
        return "429 '$message' with Retry-After '" . ($ra // '') . "'"
            unless ($ra // '') =~ /^[1-9]\d*$/ && $ra <= 60;
        return "429 '$message' without X-RateLimit-*" if @rl != 3;
        return "429 '$message' with X-RateLimit-Remaining"
               . " '$h->{'x-ratelimit-remaining'}'"
            if $h->{'x-ratelimit-remaining'} ne '0';
    } elsif ($s == 429 && $message eq 'too many failed authentication'
                                      . ' attempts') {
        return "429 '$message' without Retry-After"
            unless ($ra // '') =~ /^[1-9]\d*$/;
        return "429 '$message' with X-RateLimit-*" if @rl;
    } elsif ($s == 429 && $message eq 'monthly session quota exceeded') {
        return "429 '$message' with Retry-After" if defined $ra;
    }
    return undef;
}

# --- sending

sub connect_to {
    my ($port) = @_;
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                 PeerPort => $port // $O{port},
                                 Proto => 'tcp', Timeout => 5);
}

sub send_bytes {
    my ($s, $bytes, $pieces) = @_;
    local $SIG{PIPE} = 'IGNORE';
    if (!$pieces) {
        my $off = 0;
        while ($off < length $bytes) {
            my $n = syswrite $s, $bytes, 65536, $off;
            return 0 unless defined $n;
            $off += $n;
        }
        return 1;
    }
    my $n = int(length($bytes) / $pieces) || 1;
    my $k = 0;
    while (length $bytes) {
        defined syswrite($s, substr($bytes, 0, $n, '')) or return 0;
        Time::HiRes::sleep(0.001 * (1 + ($k++ * 7) % 10));
    }
    return 1;
}

# reads until $want answers came (then 30 ms of quiet for extra bytes),
# the server closes, or $deadline; a request nginx still waits on after
# $patience seconds gets end of input (nginx then answers or closes)
sub read_answers {
    my ($s, $want, $heads, $v09, $patience) = @_;
    my $deadline = Time::HiRes::time() + 10;
    my $sel = IO::Select->new($s);
    my ($buf, $closed, $eof) = ('', 0, 0);
    my ($answers, $state) = ([], 'partial');
    my $quiet = Time::HiRes::time() + $patience;

    while (1) {
        my $now = Time::HiRes::time();
        last if $now >= $deadline;
        my $done = !$state && grep({ $_->{status} >= 200 } @$answers)
                              >= $want;
        my $wait = $done ? 0.03 : ($quiet > $now ? $quiet - $now : 0.05);
        if (!$sel->can_read($wait)) {
            last if $done;
            if (!$eof && Time::HiRes::time() >= $quiet) {
                shutdown $s, SHUT_WR;
                $eof = 1;
            }
            next;
        }
        my $n = sysread $s, $buf, 65536, length $buf;
        if (!$n) {
            $closed = 1;
            last;
        }
        $quiet = Time::HiRes::time() + $patience;
        ($answers, $state) = parse_answers($buf, $heads, 0, $v09);
        last if $state && $state ne 'partial';
    }
    # what came is all there is: an answer cut short, or bytes after the
    # answers, is a finding even on a connection nginx keeps open
    ($answers, $state) = parse_answers($buf, $heads, 1, $v09);
    $state = "$state (connection still open)" if $state && !$closed;
    return ($answers, $state, $closed, length $buf, $eof);
}

# --- the run

my %St = (sent => 0, answers => 0, closed => 0, status => {}, tags => {},
          delivery => {}, findings => []);

sub finding {
    my ($i, $why, $r, $bytes, $answers) = @_;
    my $n = @{ $St{findings} } + 1;
    my $line = sprintf 'client %s request %d [%s %s %s]: %s',
                       $O{client} // '-', $i, $r->{ep},
                       $r->{delivery}, join(',', @{ $r->{tags} }), $why;
    push @{ $St{findings} }, $line;
    print STDERR "fuzz-http: FINDING $line\n";
    print STDERR '    request: ', printable($bytes), "\n";
    print STDERR '    answer:  ', printable(join ' | ', map {
        "$_->{status} $_->{body}" } @$answers), "\n" if @$answers;
    if ($O{findings} && $n <= 100) {
        open my $fh, '>', "$O{findings}/finding-"
                          . ($O{client} // 'main') . "-$n.req" or return;
        binmode $fh;
        print $fh $bytes;
        close $fh;
    }
}

# what an answer tells about the state
sub learn {
    my ($r, $a) = @_;
    return unless $a->{status} =~ /^2/ && length $a->{body};
    my $j = eval { $Json->decode($a->{body}) };
    return unless ref $j eq 'HASH';
    my $p = $r->{path};
    # ids of the other project's key are not ours
    return if (header_value($r, 'Authorization') // '') ne "Bearer $O{key}";
    if ($r->{ep} eq 'create' && $a->{status} == 201 && $j->{id}
        && ($j->{delivery_mode} // '') eq 'long_poll')
    {
        push @{ $S{open} }, $j->{id};
        shift @{ $S{open} } if @{ $S{open} } > 50;
    } elsif ($r->{ep} eq 'complete' && $j->{id}) {
        @{ $S{open} } = grep { $_ ne $j->{id} } @{ $S{open} };
        push @{ $S{done} }, $j->{id};
        shift @{ $S{done} } if @{ $S{done} } > 50;
    } elsif ($r->{ep} eq 'upload' && $a->{status} == 201 && $j->{id}) {
        push @{ $S{images} }, [ $j->{session_id}, $j->{id} ];
        shift @{ $S{images} } if @{ $S{images} } > 100;
    } elsif ($r->{ep} eq 'list' && $j->{next_cursor}) {
        push @{ $S{scur} }, $j->{next_cursor};
        shift @{ $S{scur} } if @{ $S{scur} } > 20;
    } elsif ($r->{ep} eq 'images' && $j->{next_cursor}
             && $p =~ m{/sessions/([^/]+)/images$})
    {
        push @{ $S{icur} }, [ $1, $j->{next_cursor} ];
        shift @{ $S{icur} } if @{ $S{icur} } > 20;
    }
    my $ik = header_value($r, 'Idempotency-Key');
    if (defined $ik && $r->{method} eq 'POST' && !@{ $r->{tags} }) {
        push @{ $S{idem} }, { key => $ik, status => $a->{status},
                              body => $a->{body}, bytes => $r->{bytes} };
        shift @{ $S{idem} } if @{ $S{idem} } > 20;
    }
}

my @Endpoints = qw(create create create_hook list list get complete upload
                   upload upload images image content ack poll poll);

# one request (with others on its connection when pipelined); returns
# its answers
sub one {
    my ($i, $r) = @_;
    my ($head, $body) = bytes_of($r);
    my $bytes = $r->{bytes} = $head . $body;
    my @reqs = ($r);
    my @wire = ($bytes);
    my $d = $r->{delivery};

    if ($d eq 'pipeline') {
        for (1 .. 1 + rnd(3)) {
            my $x = base(pick(@Endpoints));
            mutate($x) if chance(0.3);
            $x->{delivery} = 'pipelined';
            my ($h2, $b2) = bytes_of($x);
            $x->{bytes} = $h2 . $b2;
            push @reqs, $x;
            push @wire, $x->{bytes};
        }
    }
    my $all = join '', @wire;
    my $down = outage();
    # one request in ten to the server with small limits (--port2): the
    # key's counters are the same, its limits are soon reached there
    $r->{tight} = 1 if $O{port2} && !$r->{sure} && chance(0.1);
    my $s = connect_to($r->{tight} ? $O{port2} : undef)
        or die "connect: $!";
    $St{sent} += @reqs;
    $St{delivery}{$d}++;
    $St{tags}{$_}++ for @{ $r->{tags} };

    if ($d eq 'abort') {
        # part of the request, then gone
        send_bytes($s, substr $all, 0, rnd(length $all));
        close $s;
        return [];
    }
    if ($d eq 'gone') {
        # the whole request, gone before the answer
        send_bytes($s, $all);
        Time::HiRes::sleep(0.001 * rnd(20));
        close $s;
        return [];
    }
    my $cut = 0;
    if ($d eq 'half') {
        $all = substr $all, 0, rnd(length $all);
        $cut = 1;
    }
    if (($d eq 'expect' || $r->{expect}) && !$cut) {
        send_bytes($s, $head);
        # the body (and what is pipelined after it) after 100 Continue or
        # 0.3 s, as curl does
        IO::Select->new($s)->can_read(0.3);
        send_bytes($s, substr $all, length $head);
    } else {
        send_bytes($s, $all, $d eq 'slow' ? 2 + rnd(12) : 0);
    }
    shutdown $s, SHUT_WR if $cut;

    my @heads = map { $_->{method} =~ /^HEAD$/ ? 1 : 0 } @reqs;
    my $poll = grep { $_->{ep} eq 'poll' } @reqs;
    my ($answers, $state, $closed, $left, $eof) =
        read_answers($s, scalar @reqs, \@heads,
                     scalar grep({ $_->{v09} } @reqs),
                     $poll ? 4 : 1.5);
    close $s;

    # the database was stopped when the request went or when its answers
    # came: a 503 may be one, and answers may take longer than we wait
    if ($down ||= outage()) {
        $_->{outage} = 1 for @reqs;
        $St{outage}{sent} += @reqs;
    }

    my @final = grep { $_->{status} >= 200 } @$answers;
    $St{answers} += @final;
    $St{outage}{503} += grep { $_->{status} == 503 } @final;
    if (!@{ $r->{tags} } && @final && $d ne 'half') {
        my $st = $final[0]{status};
        $St{valid}{"$r->{ep} $st"}++;
        # a status the valid request should not get: worth a look
        printf STDERR "fuzz-http: note: request %d, unmutated %s: %s\n"
                      . "    request: %s\n", $i, $r->{ep},
                      printable("$st $final[0]{body}"), printable($bytes)
            unless $st =~ /^20[01]$/ || $st == 304
                   || $st == 429 && $r->{tight}
                   || $st == 409 && $r->{ep} =~ /^(upload|ack)$/
                   || $st == 410 && $r->{ep} eq 'poll'
                   || $final[0]{body} =~ /"session has expired"/;
    }
    # a HEAD of the content: the headers of the GET (§10.5)
    if (!@{ $r->{tags} } && $r->{method} eq 'HEAD' && $d eq 'whole'
        && $r->{ep} eq 'content' && @final && $final[0]{status} == 200
        && !$down)
    {
        my $g = connect_to() or die "connect: $!";
        send_bytes($g, $bytes =~ s/^HEAD /GET /r);
        my ($ga) = read_answers($g, 1, [0], 0, 1.5);
        close $g;
        $St{sent}++;
        my ($hh, $gh) = ($final[0]{headers}, $ga->[0] ? $ga->[0]{headers}
                                                         : {});
        for my $n ('content-length', 'content-type', 'etag') {
            next if ($hh->{$n} // '') eq ($gh->{$n} // '');
            finding($i, "HEAD and GET differ in $n: '" . ($hh->{$n} // '')
                        . "' and '" . ($gh->{$n} // '') . "'", $r, $bytes,
                    [ $final[0] ]);
        }
    }
    $St{status}{ $_->{status} }++ for @final;
    $St{closed}++ unless @final;

    finding($i, $state, $r, $all, $answers) if $state && $state ne 'partial';

    # framing gone wrong on purpose: any number of answers, each valid
    my $loose = $cut || grep { $_->{badframe} || $_->{v09} } @reqs;
    # (then the 501 and 505 that one of the requests may have earned)
    my $any = { %$r, badframe => 1, outage => $down,
                tags_v => scalar grep { $_->{tags_v} } @reqs };
    for my $k (0 .. $#final) {
        my $x = $loose ? $any : ($reqs[$k] // $r);
        my $why = judge($final[$k], $x, $heads[$k] // 0, $loose);
        finding($i, @reqs > 1 ? "answer $k: $why" : $why, $x, $all,
                [ $final[$k] ]) if $why;
        learn($x, $final[$k]) unless $loose;
    }
    return \@final if $loose;

    # every request sent whole gets its answer, unless the answer before
    # it said the connection ends (no "Connection: keep-alive": a refused
    # body nginx will not read, HTTP/1.0, Connection: close asked for)
    if (@final < @reqs) {
        my $prev = $final[-1];
        my $closes = $prev && ($prev->{headers}{connection} // '')
                              !~ /keep-alive/i;
        finding($i, sprintf('%d answers to %d requests%s', scalar @final,
                            scalar @reqs, $eof ? ' (after end of input)'
                                                : ''),
                $r, $all, $answers)
            unless $closes || $down;
    }
    return \@final;
}

# a poll whose answer is read later (park), or the answers of the parked
# polls whose time is up: each must be a 200 or a 410
sub parked {
    my ($i, $drain) = @_;
    my $now = $drain ? 1e12 : Time::HiRes::time();

    # (the PRNG drawn whatever is parked: a seed makes the same choices)
    my ($poll, $stall) = $drain ? (0, 0) : (chance(0.03), chance(0.005));
    if ($poll) {
        my $r = base('poll');
        my $t = pick(1, 2, 3);
        $r->{query} = [ [ 'timeout', $t ] ];
        $r->{path} =~ m{/sessions/([^/]+)/poll};
        my $sid = $1;
        my ($head) = bytes_of($r);
        if ((grep { !$_->{stall} } @Parked) < 4) {
            my $s = connect_to() or die "connect: $!";
            send_bytes($s, $head);
            $St{sent}++;
            $St{delivery}{parked}++;
            push @Parked, { s => $s, sid => $sid, r => $r, bytes => $head,
                            until => $now + $t + 2, down => outage() };
        }
    }
    # a request that stops halfway and stays open: nginx's client
    # timeouts (5 s here) end it, with a 408 or without an answer (or it
    # is answered: complete reads no body)
    if ($stall) {
        my $r = base(pick('create', 'upload', 'upload', 'complete', 'ack'));
        $r->{framing} = 'chunked' if chance(0.3);
        my ($head, $body) = bytes_of($r);
        my $part = chance(0.3) ? substr($head, 0, rnd(length $head))
                               : $head . substr($body, 0, rnd(length $body));
        if ((grep { $_->{stall} } @Parked) < 2) {
            my $s = connect_to() or die "connect: $!";
            send_bytes($s, $part);
            $St{sent}++;
            $St{delivery}{stalled}++;
            push @Parked, { s => $s, r => $r, bytes => $part, stall => 1,
                            until => $now + 8 };
        }
    }
    for my $p (grep { $_->{stall} && $_->{until} < $now } @Parked) {
        my $left = $p->{until} - Time::HiRes::time();
        Time::HiRes::sleep($left) if $left > 0;
        my $sel = IO::Select->new($p->{s});
        my ($buf, $closed) = ('', 0);
        while ($sel->can_read(0.5)) {
            sysread($p->{s}, $buf, 65536, length $buf) or do {
                $closed = 1;
                last;
            };
        }
        close $p->{s};
        my ($a, $state) = parse_answers($buf, [0], 1, 0);
        my $x = $a->[0];
        $St{status}{ $x->{status} }++ if $x;
        # (an endpoint that reads no body may answer at once)
        $p->{r}{outage} = outage();
        $St{outage}{503}++ if $p->{r}{outage} && $x && $x->{status} == 503;
        my $why = $state ? $state
                : !$x && !$closed ? 'still open 8 s after it stopped'
                : $x ? judge($x, $p->{r}, 0) : undef;
        $p->{r}{delivery} = 'stalled';
        finding($i, "stalled request: $why", $p->{r}, $p->{bytes}, $a)
            if $why;
    }
    @Parked = grep { !$_->{stall} || $_->{until} >= $now } @Parked;

    for my $p (grep { !$_->{stall} && $_->{until} < $now } @Parked) {
        my $head = $p->{r}{method} eq 'HEAD' ? 1 : 0;
        my $left = $p->{until} - Time::HiRes::time();
        my ($a, $state) = read_answers($p->{s}, 1, [$head], 0,
                                       $left > 0 ? $left : 1);
        close $p->{s};
        my $x = $a->[0];
        $St{answers}++ if $x;
        $St{status}{ $x->{status} }++ if $x;
        my $down = $p->{down} || outage();
        $p->{r}{outage} = $down;
        $St{outage}{503}++ if $down && $x && $x->{status} == 503;
        my $why = !$x ? ($down ? undef
                               : 'no answer' . ($state ? ": $state" : ''))
                : $x->{status} != 200 && $x->{status} != 410
                  && !($x->{status} == 503 && $down)
                  ? "status $x->{status}" : judge($x, $p->{r}, $head);
        $p->{r}{delivery} = 'parked';
        finding($i, "parked poll: $why", $p->{r}, $p->{bytes}, $a) if $why;
    }
    @Parked = grep { $_->{until} >= $now } @Parked;
}

sub request {
    my ($i) = @_;
    parked($i);
    my $r = base(pick(@Endpoints));
    mutate($r) if chance(0.9);
    $r->{delivery} = pick(('whole') x 14, 'slow', 'slow', 'pipeline',
                          'pipeline', 'pipeline', 'expect', 'abort', 'half',
                          'gone');

    # a repeat of a kept request with its Idempotency-Key: the same
    # answer, replayed
    my $again = chance(0.03);
    if (@{ $S{idem} } && $again) {
        my $old = from($S{idem});
        my $down = outage();
        my $s = connect_to() or die "connect: $!";
        send_bytes($s, $old->{bytes});
        my ($a, $state) = read_answers($s, 1, [0], 0, 1.5);
        close $s;
        $St{sent}++;
        $St{delivery}{replay}++;
        my $x = $a->[-1];
        $down ||= outage();
        $St{outage}{sent}++ if $down;
        if ($down && (!$x || $x->{status} == 503)) {
            # the database was stopped: no answer in time, or a 503
            return if !$x;
            my $why = judge($x, { ep => 'replay', outage => 1 }, 0);
            finding($i, "replay in an outage: $why",
                    { ep => 'replay', delivery => 'whole', tags => [] },
                    $old->{bytes}, $a) if $why;
            return;
        }
        if (!$x || $x->{status} != $old->{status} || $x->{body} ne $old->{body}
            || ($x->{headers}{'idempotent-replayed'} // '') ne 'true')
        {
            finding($i, 'replay differs: ' . ($x ? "$x->{status} "
                    . printable($x->{body}) : 'no answer'),
                    { ep => 'replay', delivery => 'whole', tags => [] },
                    $old->{bytes}, $a);
        }
        return;
    }
    my $a = one($i, $r);
    printf STDERR "fuzz-http: %d %s %s %s: %s\n", $i, $r->{ep}, $r->{delivery},
                  join(',', @{ $r->{tags} }) || '-',
                  join(',', map { $_->{status} } @$a) || 'none'
        if $O{verbose};
}

# a valid request, sent whole; dies on anything but $want
sub must {
    my ($r, $want, $what) = @_;
    $r->{delivery} = 'whole';
    $r->{sure} = 1;
    my $t0 = Time::HiRes::time();
    my $a = one(0, $r);
    my $t = Time::HiRes::time() - $t0;
    my $got = $a->[0] ? "$a->[0]{status} " . printable($a->[0]{body})
                      : 'no answer';
    die "fuzz-http: $what: $got\n" unless $a->[0]
                                          && $a->[0]{status} == $want;
    return ($a->[0], $t);
}

sub bootstrap {
    for (1 .. 4) {
        my $r = base('create');
        set_header($r, 'Idempotency-Key', undef);
        must($r, 201, 'bootstrap create');
    }
    my $sid = $S{open}[0];
    for (1 .. 3) {
        my $r = base('upload');
        $r->{path} = "$API/$sid/images";
        must($r, 201, 'bootstrap upload');
    }
    my $r = base('create_hook');
    must($r, 201, 'bootstrap webhook create');
    $r = base('list');
    $r->{query} = [ [ 'limit', 1 ] ];
    must($r, 200, 'bootstrap list');
    $r = base('images');
    $r->{path} = "$API/$sid/images";
    $r->{query} = [ [ 'limit', 1 ] ];
    must($r, 200, 'bootstrap image list');
    $r = base('create');
    set_header($r, 'Authorization', "Bearer $O{key2}");
    my ($a) = must($r, 201, 'bootstrap create of the other project');
    $S{other} = $Json->decode($a->{body})->{id};
    @{ $S{open} } = grep { $_ ne $S{other} } @{ $S{open} };
}

# at the end: a create, an upload and a poll, each within a second
sub still_works {
    my @t;
    my $r = base('create');
    set_header($r, 'Idempotency-Key', undef);
    my ($a, $t) = must($r, 201, 'final create');
    push @t, $t;
    my $sid = $Json->decode($a->{body})->{id};
    $r = base('upload');
    $r->{path} = "$API/$sid/images";
    $r->{framing} = 'cl';
    set_header($r, 'Idempotency-Key', undef);
    ($a, $t) = must($r, 201, 'final upload');
    push @t, $t;
    $r = base('poll');
    $r->{method} = 'GET';
    $r->{path} = "$API/$sid/poll";
    $r->{query} = [ [ 'timeout', 1 ] ];
    ($a, $t) = must($r, 200, 'final poll');
    push @t, $t;
    my $j = $Json->decode($a->{body});
    die "fuzz-http: final poll: no image\n" unless @{ $j->{images} } == 1;
    for (@t) {
        die sprintf("fuzz-http: a final request took %.2f s\n", $_) if $_ > 1;
    }
    return sprintf 'create %.3f s, upload %.3f s, poll %.3f s', @t;
}

# one client's run: requests until the time is up, then its figures as
# JSON into $out
sub client {
    my ($k, $out) = @_;
    srand $O{seed} + $k;
    %St = (sent => 0, answers => 0, closed => 0, status => {}, tags => {},
           delivery => {}, valid => {}, findings => []);
    my $t0 = Time::HiRes::time();
    my $i = 0;
    my $next = $t0 + 30;
    while (Time::HiRes::time() - $t0 < $O{seconds}) {
        # a fault of the generator itself is reported, and the run goes on
        eval { request(++$i); 1 } or do {
            push @{ $St{findings} }, "generator error at request $i: $@";
            print STDERR "fuzz-http: generator error at request $i: $@";
        };
        if (Time::HiRes::time() > $next) {
            printf STDERR "fuzz-http: client %d: %d iterations, %d requests,"
                          . " %.0f s, %d findings\n", $k, $i, $St{sent},
                          Time::HiRes::time() - $t0,
                          scalar @{ $St{findings} };
            $next += 30;
        }
    }
    parked($i, 1);
    $St{iterations} = $i;
    $St{seconds} = Time::HiRes::time() - $t0;
    open my $fh, '>', $out or die "$out: $!";
    print $fh JSON::PP->new->encode(\%St);
    close $fh;
}

sub add {
    my ($to, $from) = @_;
    for my $k (keys %$from) {
        if (ref $from->{$k} eq 'HASH') {
            add($to->{$k} //= {}, $from->{$k});
        } elsif (ref $from->{$k} eq 'ARRAY') {
            push @{ $to->{$k} }, @{ $from->{$k} };
        } elsif ($k eq 'seconds') {
            $to->{$k} = $from->{$k} if $from->{$k} > ($to->{$k} // 0);
        } else {
            $to->{$k} += $from->{$k};
        }
    }
}

# --replay FILE: the bytes of a finding, its key replaced by --key, sent
# on one connection; the answer printed as it came
sub replay {
    my ($file) = @_;
    open my $fh, '<:raw', $file or die "$file: $!";
    my $bytes = do { local $/; <$fh> };
    $bytes =~ s/\bsess_[0-9a-f]{32}\b/$O{key}/g;
    my $s = connect_to() or die "connect: $!";
    send_bytes($s, $bytes);
    my $sel = IO::Select->new($s);
    my $buf = '';
    while ($sel->can_read(3)) {
        sysread($s, $buf, 65536, length $buf) or last;
    }
    print printable($bytes), "\n=> ", length $buf, " bytes\n",
          $buf =~ s/([^\n -~])/sprintf '\\x%02x', ord $1/ger, "\n";
}

sub main {
    %O = (seconds => 180, clients => 2);
    Getopt::Long::GetOptions(\%O, 'port=i', 'seed=i', 'seconds=f', 'key=s',
                             'key2=s', 'gone=s', 'error-log=s',
                             'findings=s', 'clients=i', 'replay=s',
                             'outage=s', 'port2=i', 'verbose')
        or die "usage: perl util/fuzz-http.pl --port N --key K ...\n";
    return replay($O{replay}) if $O{replay};
    die "fuzz-http: --port, --key, --key2, --gone and --findings are"
        . " needed\n"
        unless $O{port} && $O{key} && $O{key2} && $O{gone} && $O{findings};
    $O{seed} //= (time ^ $$) % 1000000;
    print STDERR "fuzz-http: seed $O{seed} (FUZZ_HTTP_SEED=$O{seed} repeats"
                 . " it), $O{clients} clients for $O{seconds} s,"
                 . " 127.0.0.1:$O{port}\n";
    srand $O{seed};

    # the clients start from the same ids: they race on the same sessions
    bootstrap();
    my @pids;
    for my $k (0 .. $O{clients} - 1) {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            $O{client} = $k;
            client($k, "$O{findings}/client-$k.json");
            exit 0;
        }
        push @pids, $pid;
    }
    for my $k (0 .. $#pids) {
        waitpid $pids[$k], 0;
        my $f = "$O{findings}/client-$k.json";
        my $st = -s $f ? eval {
            open my $fh, '<', $f or die;
            local $/;
            JSON::PP->new->decode(<$fh>);
        } : undef;
        push @{ $St{findings} }, "client $k died (status $?)" unless $st;
        add(\%St, $st) if $st;
    }
    my $final = eval { still_works() };
    push @{ $St{findings} }, $@ =~ s/\n$//r unless defined $final;

    # a tenth of the requests, a minute or more: far past the small limits
    push @{ $St{findings} }, "the server with small limits (--port2) never"
                             . " answered 429 in $O{seconds} s"
        if $O{port2} && $O{seconds} >= 60 && !$St{status}{429};

    if ($O{'error-log'}) {
        open my $fh, '<', $O{'error-log'} or die "$O{'error-log'}: $!";
        my $n = 0;
        while (<$fh>) {
            next unless /\[(alert|crit|emerg)\]|exited on signal/;
            push @{ $St{findings} }, "error log: $_" =~ s/\n$//r
                if $n++ < 20;
        }
    }

    printf "fuzz-http: seed %d: %d requests in %d iterations of %d clients"
           . " in %.1f s\n", $O{seed}, $St{sent}, $St{iterations} // 0,
           $O{clients}, $St{seconds} // 0;
    printf "fuzz-http: answers %d (%s); %d connections without one\n",
           $St{answers}, join(', ', map { "$_: $St{status}{$_}" }
                                    sort keys %{ $St{status} }),
           $St{closed};
    printf "fuzz-http: unmutated requests: %s\n", join ', ', map {
        "$_: $St{valid}{$_}" } sort keys %{ $St{valid} };
    printf "fuzz-http: deliveries: %s\n", join ', ', map {
        "$_ $St{delivery}{$_}" } sort keys %{ $St{delivery} };
    my $applied = 0;
    $applied += $_ for values %{ $St{tags} };
    printf "fuzz-http: mutations: %d kinds, %d applied\n",
           scalar keys %{ $St{tags} }, $applied;
    printf "fuzz-http: while the database was stopped or coming back:"
           . " %d requests, %d answered 503\n", $St{outage}{sent} // 0,
           $St{outage}{503} // 0 if $O{outage};
    print "fuzz-http: at the end: $final\n" if defined $final;
    print "fuzz-http: $_\n" for @{ $St{findings} };
    printf "fuzz-http: %d findings\n", scalar @{ $St{findings} };
    exit(@{ $St{findings} } ? 1 : 0);
}

main() unless caller;

1;
