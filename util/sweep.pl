#!/usr/bin/env perl
# A raw-socket bad-input sweep against a running nginx
# with the module, on 127.0.0.1 only, bounded in count and time.
#
#   perl util/sweep.pl --port 8080 [--seed N] [--count N] [--seconds S]
#                      [--key sess_...] [--sid UUID] [--error-log FILE]
#                      [--only I] [--verbose]
#
# Random and malformed request lines, methods, paths, query strings,
# headers, bodies and chunked encodings; truncated and oversized requests;
# slow clients (each piece a few milliseconds apart, bounded) and stalled
# ones (opened first, answered by nginx's client timeouts while the rest
# runs).  Every request is made from one seeded PRNG (srand): the same
# seed gives the same requests, and --only I sends request I alone.
#
# Every answer must be a JSON error of docs/api.md §2, the status line's
# status and reason in statusCode and error, Content-Type
# application/json, or a closed connection, or a success (2xx/304) where
# the random request happened to be valid.  With --error-log the log must
# show no [alert] (a worker that exits on a signal is one), no [crit]
# and no "exited on signal".  Exits 1 on any bad answer or log line.
#
# make sweep runs it through t/025-sweep.t (nginx, PostgreSQL, a key);
# t/025-sweep.t runs a short version in make test.  Also usable as a
# library: require it and call SessionSweep::run(%options).

package SessionSweep;

use strict;
use warnings;

use Getopt::Long ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use Socket qw(SHUT_WR);
use Time::HiRes ();

my $Json = JSON::PP->new;

# the reason phrases of the statuses an answer may carry
my %Reason = (
    400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden',
    404 => 'Not Found', 405 => 'Method Not Allowed',
    408 => 'Request Timeout', 409 => 'Conflict', 410 => 'Gone',
    411 => 'Length Required', 412 => 'Precondition Failed',
    413 => 'Payload Too Large', 414 => 'URI Too Long',
    415 => 'Unsupported Media Type', 416 => 'Range Not Satisfiable',
    417 => 'Expectation Failed', 422 => 'Unprocessable Entity',
    429 => 'Too Many Requests', 500 => 'Internal Server Error',
    501 => 'Not Implemented', 502 => 'Bad Gateway',
    503 => 'Service Unavailable', 504 => 'Gateway Timeout',
    505 => 'HTTP Version Not Supported', 507 => 'Insufficient Storage',
);

my $NIL_UUID = '00000000-0000-0000-0000-000000000000';

# --- the PRNG: srand once, then only these

sub rnd { int rand $_[0] }
sub pick { $_[rnd(scalar @_)] }
sub chance { rand() < $_[0] }

sub rbytes {
    my ($n) = @_;
    return join '', map { chr rnd(256) } 1 .. $n;
}

sub rtoken {
    my ($n, $set) = @_;
    $set //= join '', 'a' .. 'z', 'A' .. 'Z', 0 .. 9, '-_.';
    return join '', map { substr $set, rnd(length $set), 1 } 1 .. $n;
}

sub rhex { rtoken($_[0], '0123456789abcdef') }

sub ruuid {
    return join '-', rhex(8), rhex(4), rhex(4), rhex(4), rhex(12);
}

# --- requests

sub method {
    return pick(qw(GET GET GET POST POST HEAD PUT DELETE PATCH OPTIONS
                   TRACE CONNECT PROPFIND MKCOL LOCK),
                'get', 'Post', rtoken(1 + rnd(12), join '', 'A' .. 'Z'),
                'G ET', '', "GET\x00", 'GE' . chr(128 + rnd(128)) . 'T',
                'X' x (10 + rnd(40)), rtoken(1 + rnd(8)),
                rbytes(1 + rnd(6)));
}

sub api_path {
    my ($o) = @_;
    my $sid = pick($o->{sid}, $o->{sid}, ruuid(), $NIL_UUID, 'x', rhex(31),
                   uc($o->{sid}), '');
    my $iid = pick(ruuid(), $NIL_UUID, '1', rhex(36));
    return pick('/api/v1/sessions', '/api/v1/sessions',
                "/api/v1/sessions/$sid", "/api/v1/sessions/$sid/complete",
                "/api/v1/sessions/$sid/images",
                "/api/v1/sessions/$sid/images/$iid",
                "/api/v1/sessions/$sid/images/$iid/content",
                "/api/v1/sessions/$sid/images/$iid/ack",
                "/api/v1/sessions/$sid/poll", '/api/v1/', '/api/',
                '/api/v2/sessions', '/status', '/',
                '/api/v1/' . rtoken(1 + rnd(20)));
}

sub mutate_path {
    my ($p) = @_;
    my $how = rnd(24);

    return $p if $how < 8;
    return "$p/" if $how == 8;
    return $p =~ s{/}{//}gr if $how == 9;
    return $p =~ s{/v1/}{/v1/../v1/./}r if $how == 10;
    return $p =~ s{/sessions}{/%73essions}r if $how == 11;
    return $p =~ s{/sessions/}{/sessions%2F}r if $how == 12;
    return "$p%00" . rtoken(3) if $how == 13;
    return "$p%" . pick('', 'z', 'zz', '4', 'G0') if $how == 14;
    return "$p/" . ('../' x (1 + rnd(6))) . 'etc/passwd' if $how == 15;
    return $p . '/' . ('a' x (5000 + rnd(12000))) if $how == 16;
    return 'http://localhost' . $p if $how == 17;
    return pick('*', 'api/v1/sessions', '', '//', '/%', '/..', '/../',
                'http://', 'http://[::1', 'https://x:99999/') if $how == 18;
    return $p . rbytes(1 + rnd(4)) if $how == 19;
    return $p . chr(128 + rnd(128)) . chr(128 + rnd(128)) if $how == 20;
    return "$p#" . rtoken(5) if $how == 21;
    return $p . ' ' . rtoken(3) if $how == 22;
    return "$p\t";
}

sub query {
    my ($o) = @_;
    return '' if chance(0.5);

    my @names = qw(limit cursor status acknowledged timeout format);
    my @q;
    for (1 .. 1 + rnd(4)) {
        my $name = chance(0.8) ? pick(@names) : rtoken(1 + rnd(10));
        my $value = pick(rnd(200) - 50, '0', '1', '100', '101', '-1',
                         '1.5', '1e3', '99999999999999999999999', '',
                         'true', 'false', 'open', 'expired', 'json',
                         'prometheus', rtoken(rnd(40)), '%' . rhex(2),
                         '%zz', '%', '%00', rtoken(20) . '=',
                         'A' x (100 + rnd(3000)));
        push @q, pick("$name=$value", $name, "$name=", "=$value", '',
                      "$name=$value", "$name=$value&$name=$value");
    }

    my $q = join pick('&', '&', '&&', ';'), @q;
    $q = "$q&timeout=" . pick(0, 1) if !chance(0.2);
    return "?$q";
}

sub version {
    return pick(('HTTP/1.1') x 12, ('HTTP/1.0') x 3, '', 'HTTP/2.0',
                'HTTP/1.2', 'HTTP/9.9', 'HTTP/1.1x', 'http/1.1',
                'HTTP/1.', 'HTTP/01.1', 'HTTP/1.1 x', 'HTTX/1.1',
                'HTTP/1.1' . chr(rnd(32)));
}

sub auth {
    my ($o) = @_;
    my $key = $o->{key} // ('sess_' . rhex(32));
    return pick(("Bearer $key") x 6, 'Bearer sess_' . rhex(32),
                "bearer    $key", 'Bearer', 'Bearer ', '', 'Basic eDp5',
                'Bearer sess_' . rhex(31), "Bearer $key x",
                "Bearer \x00$key", 'Bearer ' . rbytes(20),
                'Bearer sess_' . ('f' x (200 + rnd(9000))));
}

sub header_line {
    my ($o) = @_;
    my $how = rnd(20);

    return 'X-' . rtoken(1 + rnd(20)) . ': ' . rtoken(rnd(60))
        if $how < 6;
    return rtoken(1 + rnd(10)) . rbytes(1 + rnd(4)) . ': x' if $how == 6;
    return 'NoColonHere' if $how == 7;
    return ' folded: continuation' if $how == 8;
    return 'X Space: 1' if $how == 9;
    return 'X_Under_Score: 1' if $how == 10;
    return 'X-Long: ' . ('v' x (2000 + rnd(14000))) if $how == 11;
    return 'X-Nul: a' . "\x00" . 'b' if $how == 12;
    return 'X-High: ' . rbytes(10) if $how == 13;
    return 'Host: ' . pick('', 'a b', '[::1', 'x' x 300, '..', "h\x00",
                           'localhost:99999', rbytes(8)) if $how == 14;
    return 'Authorization: ' . auth($o) if $how == 15;
    return 'Content-Length: ' . pick('-1', 'abc', '1 2', '',
                                     '99999999999999999999', '0x10', '+5',
                                     '5, 5') if $how == 16;
    return 'Transfer-Encoding: ' . pick('gzip', 'chunked, chunked',
                                        'identity', 'Chunked', 'chunke',
                                        'gzip, chunked', '') if $how == 17;
    return 'Expect: ' . pick('100-continue', 'nonsense') if $how == 18;
    return ': empty-name';
}

sub json_body {
    my ($o) = @_;
    my %f;
    $f{delivery_mode} = pick('long_poll', 'webhook', 'x', 1, undef, [],
                             {}, '') if chance(0.8);
    $f{webhook_url} = pick('https://example.com/h', 'http://127.0.0.1/',
                           'ftp://x', 'http://[::1]/', 'http://0x7f.1/',
                           'https://' . ('a' x 3000) . '.com/',
                           'http://user@host/', rtoken(20), 5, undef)
        if chance(0.3);
    $f{expires_in} = pick(1, 0, -1, 60, 1.0, '60', 86401, 9**40, undef)
        if chance(0.3);
    $f{rtoken(1 + rnd(8))} = rtoken(4) if chance(0.15);

    my $j = $Json->canonical(chance(0.5))->encode(\%f);
    my $how = rnd(14);

    return $j if $how < 6;
    return substr($j, 0, rnd(length $j)) if $how == 6;
    return "\xEF\xBB\xBF$j" if $how == 7;
    return '{"delivery_mode":"long_poll","delivery_mode":"long_poll"}'
        if $how == 8;
    return '{"delivery_mode":"\ud800"}' if $how == 9;
    return '[' x (1 + rnd(5000)) if $how == 10;
    return '{"a":' . ('[' x 300) . ('1' x 3) . (']' x 300) . '}'
        if $how == 11;
    return '{"delivery_mode":"' . rbytes(40) . '"}' if $how == 12;
    return rbytes(rnd(300));
}

sub body {
    my ($o) = @_;
    my $how = rnd(10);

    return ('', undef) if $how < 3;
    return (json_body($o), 'application/json') if $how < 6;
    return ("\x89PNG\r\n\x1a\n" . rbytes(rnd(200)), 'image/png')
        if $how == 6;
    return ("\xff\xd8\xff" . rbytes(rnd(100)), pick('image/jpeg',
            'IMAGE/JPEG; q=1', 'image/', 'image/png')) if $how == 7;
    return ('x' x (65536 + rnd(100000)), pick('application/json',
            'image/gif')) if $how == 8;
    return (rbytes(rnd(2000)), pick(undef, 'text/plain', '', rbytes(6),
                                    'application/json; charset=utf-8'));
}

sub chunked {
    my ($b) = @_;
    my $out = '';
    my $how = rnd(14);

    while (length $b) {
        my $n = 1 + rnd(length $b);
        my $c = substr $b, 0, $n, '';
        my $size = sprintf '%x', $n;
        $size = pick('zz', '-1', 'ffffffffffffffffff', '', ' 1', '0x1',
                     sprintf('%x', $n + 1 + rnd(100)),
                     sprintf('%X;ext=1', $n), "$size;" . rtoken(300),
                     '7fffffffffffffff') if $how == 0 && chance(0.5);
        $out .= "$size\r\n$c" . ($how == 1 ? '' : "\r\n");
    }

    return $out if $how == 2;                      # no last chunk
    return $out . "0\r\n" if $how == 3;            # no final CRLF
    return $out . "0\r\nX-Trailer: 1\r\n\r\n" if $how == 4;
    return $out . "0\r\n" . ('T: ' . ('t' x 5000) . "\r\n") x 10 . "\r\n"
        if $how == 5;
    return $out . "0\r\n\r\n" . 'GET / HTTP/1.1' . "\r\n\r\n" if $how == 6;
    return $out . "0;x=y\r\n\r\n" if $how == 7;
    return $out . ('0' x 40) . "\r\n\r\n" if $how == 8;
    return $out . "0\r\n\r\n";
}

# A request with one fault (or none): { bytes, pieces (slow client),
# truncated, head }.  The faults: the request line, method, path, query
# string, HTTP version, headers, the key, the body, chunked encoding,
# framing (length and body disagree), oversized parts, a truncated or a
# slow request, or garbage.
my @Faults = qw(none line method path path query query version header
                header auth body body chunked framing oversized truncated
                slow garbage);

sub clean_query {
    my ($path) = @_;
    return '?timeout=' . pick(0, 1) if $path =~ m{/poll$};
    return pick('', '', '?limit=' . (1 + rnd(100)), '?status=open',
                '?acknowledged=' . pick('true', 'false'));
}

sub request {
    my ($o) = @_;
    my $fault = pick(@Faults);

    if ($fault eq 'garbage') {
        my $g = pick(rbytes(1 + rnd(200)), rtoken(1 + rnd(100)) . "\r\n\r\n",
                     "\r\n" x (1 + rnd(20)), "\x16\x03\x01\x00\xa5\x01",
                     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                     "GET\r\n\r\n", "\r\n\r\nGET / HTTP/1.1\r\n\r\n",
                     (rbytes(100) . "\n") x 3 . "\n");
        return { bytes => $g, fault => $fault };
    }

    my $path = api_path($o);
    my $m = pick('GET', 'GET', 'POST', 'POST', 'HEAD');
    $m = method() if $fault eq 'method';
    my $q = $fault eq 'query' ? query($o) : clean_query($path);
    $path = mutate_path($path) if $fault eq 'path';
    $path .= $q;
    $path .= '/' . ('p' x (8192 + rnd(8000)))
        if $fault eq 'oversized' && chance(0.3);
    my $v = $fault eq 'version' ? version() : pick('HTTP/1.1', 'HTTP/1.1',
                                                   'HTTP/1.0');
    my $line = $v eq '' ? "$m $path" : "$m $path $v";
    $line = pick("$m  $path $v", "$m $path\t$v", " $line", "$line ",
                 $line =~ s/ /\t/gr, "$line\x00", "$m $path $v $v")
        if $fault eq 'line';
    my $eol = $fault eq 'line' && chance(0.5) ? pick("\n", "\r", "\n\r")
                                             : "\r\n";

    my @h;
    push @h, 'Host: ' . pick('localhost', '127.0.0.1', 'x')
        if $v ne 'HTTP/1.1' || $fault ne 'header' || chance(0.8);
    if ($fault eq 'auth') {
        push @h, 'Authorization: ' . auth($o) if chance(0.9);
        push @h, 'Authorization: ' . auth($o) if chance(0.2);
    } else {
        push @h, "Authorization: Bearer $o->{key}" if defined $o->{key};
    }
    push @h, 'Idempotency-Key: ' . pick(ruuid(), rtoken(rnd(300)), '',
                                        rbytes(8)) if chance(0.05);
    push @h, 'Connection: ' . pick('close', 'keep-alive') if chance(0.3);
    if ($fault eq 'header') {
        push @h, header_line($o) for 1 .. 1 + rnd(4);
        push @h, map { "X-Many-$_: 1" } 1 .. 200 + rnd(600) if chance(0.1);
        @h = reverse @h if chance(0.1);
    }
    push @h, 'X-Big: ' . ('b' x (8192 + rnd(30000)))
        if $fault eq 'oversized' && chance(0.3);

    my ($b, $ct) = ('', undef);
    if ($fault eq 'body' || $fault eq 'chunked' || $fault eq 'framing') {
        ($b, $ct) = body($o);
    } elsif ($fault eq 'oversized') {
        ($b, $ct) = ('x' x (65536 + rnd(1200000)),
                     pick('application/json', 'image/png', 'image/gif'));
    } elsif ($m eq 'POST' && $path =~ m{/images\b}) {
        ($b, $ct) = ("\x89PNG\r\n\x1a\n" . rbytes(rnd(200)), 'image/png');
    } elsif ($m eq 'POST' && $path =~ m{/sessions\b}) {
        ($b, $ct) = ('{"delivery_mode":"long_poll"}', 'application/json');
    }
    push @h, "Content-Type: $ct" if defined $ct;

    if ($fault eq 'chunked') {
        push @h, 'Transfer-Encoding: chunked';
        $b = chunked($b);
    } elsif ($fault eq 'framing') {
        push @h, pick('Content-Length: ' . (length($b) + 1 + rnd(50)),
                      'Content-Length: ' . rnd(length($b) + 1),
                      'Content-Length: 0',
                      'Content-Length: ' . length($b) . "\r\n"
                      . 'Content-Length: ' . (1 + length $b),
                      "Transfer-Encoding: chunked\r\nContent-Length: "
                      . length $b);
        $b = chunked($b) if $h[-1] =~ /chunked/;
    } elsif (length $b || $m eq 'POST') {
        if (chance(0.75)) {
            push @h, 'Content-Length: ' . length $b;
        } else {
            push @h, 'Transfer-Encoding: chunked';
            $b = join '', map { sprintf("%x\r\n", length) . "$_\r\n" }
                          grep { length } split /(.{1,700})/s, $b;
            $b .= "0\r\n\r\n";
        }
    }

    my $bytes = join('', map { "$_$eol" } $line, @h) . $eol . $b;
    my $req = { bytes => $bytes, head => $m eq 'HEAD', fault => $fault,
                v09 => $v eq '' };

    if ($fault eq 'truncated') {                    # then EOF
        $req->{bytes} = substr $bytes, 0, rnd(length $bytes);
        $req->{truncated} = 1;
    } elsif ($fault eq 'slow' && length $bytes < 4000) {
        $req->{pieces} = 2 + rnd(20);
    }

    return $req;
}

# --- answers

# Parses the answers in $buf: a list of { status, reason, headers, body }
# and whether the data ends inside an answer.
sub parse_answers {
    my ($buf, $head_only, $closed, $v09) = @_;
    my @a;

    # HTTP/0.9 (a GET without a version): the body alone, until close
    if ($v09 && length $buf && $buf !~ m{^HTTP/}) {
        return (\@a, 'partial') unless $closed;
        my $j = eval { $Json->decode($buf) };
        my $status = ref $j ne 'HASH' ? 0 : $j->{statusCode} // 200;
        my $ok = $status =~ /^\d{3}$/ ? $status : 0;
        push @a, { status => $ok, reason => $Reason{$ok} // '',
                   headers => { 'content-type' => 'application/json' },
                   body => $buf };
        return (\@a, undef);
    }

    while (length $buf) {
        my $end = index $buf, "\r\n\r\n";
        return (\@a, 'partial') if $end < 0;

        my $head = substr $buf, 0, $end + 4, '';
        my ($line, @hl) = split /\r\n/, $head;
        my ($status, $reason) = $line =~ m{^HTTP/1\.[01] (\d{3}) ?(.*)$}
            or return (\@a, "bad status line: $line");

        my %h;
        for (@hl) {
            my ($n, $v) = /^([^:]+):\s*(.*)$/ or return (\@a, "bad header");
            $h{lc $n} = $v;
        }

        my $body = '';
        if ($head_only || $status == 304 || $status < 200) {
            # no body
        } elsif (($h{'transfer-encoding'} // '') =~ /chunked/i) {
            while (1) {
                my $e = index $buf, "\r\n";
                return (\@a, 'partial') if $e < 0;
                my $n = hex substr $buf, 0, $e;
                return (\@a, 'partial') if length $buf < $e + 2 + $n + 2;
                $body .= substr $buf, $e + 2, $n;
                substr $buf, 0, $e + 2 + $n + 2, '';
                last if $n == 0;
            }
        } elsif (defined $h{'content-length'}) {
            my $n = $h{'content-length'};
            return (\@a, 'partial') if length $buf < $n;
            $body = substr $buf, 0, $n, '';
        } else {
            return (\@a, 'partial') unless $closed;
            $body = $buf;
            $buf = '';
        }

        push @a, { status => $status, reason => $reason, headers => \%h,
                   body => $body };
        $head_only = 0;
    }

    return (\@a, undef);
}

# undef when the answer is one the contract allows, else why not
sub judge {
    my ($a, $head) = @_;
    my $s = $a->{status};

    return 'an HTTP/0.9 answer that is no JSON document' if $s == 0;
    return undef if $s == 100;
    return undef if $s =~ /^2/ || $s == 304;
    return "status $s" if $s < 400;

    my $ct = $a->{headers}{'content-type'} // '';
    return "status $s: Content-Type '$ct'" if $ct ne 'application/json';
    return "status $s: reason '$a->{reason}'"
        if $Reason{$s} && $a->{reason} ne $Reason{$s};
    return undef if $head;

    my $j = eval { $Json->decode($a->{body}) };
    return "status $s: body is not JSON: " . substr($a->{body}, 0, 60)
        unless ref $j eq 'HASH';
    my @k = sort keys %$j;
    return "status $s: keys @k" if "@k" ne 'error message statusCode';
    return "status $s: statusCode $j->{statusCode}"
        if $j->{statusCode} ne $s
           || $a->{body} !~ /"statusCode": ?$s[,}]/;
    return "status $s: error '$j->{error}'" if $j->{error} ne $a->{reason};
    return "status $s: empty message" if !length($j->{message} // '');
    return undef;
}

# --- the sweep

sub send_all {
    my ($s, $bytes, $pieces) = @_;
    local $SIG{PIPE} = 'IGNORE';

    if (!$pieces) {
        return defined syswrite($s, $bytes);
    }

    # the pauses take nothing from the PRNG: --only I must draw the same
    # numbers as a whole run
    my $n = int(length($bytes) / $pieces) || 1;
    my $k = 0;
    while (length $bytes) {
        defined syswrite($s, substr($bytes, 0, $n, '')) or return 0;
        Time::HiRes::sleep(0.001 * (1 + ($k++ * 7) % 15));
    }
    return 1;
}

# Reads until the answers are complete (and 20 ms of quiet after, for
# more answers to pipelined bytes), the server closes, or $deadline.  A
# request nginx still waits on after $patience seconds gets end of input.
sub read_answers {
    my ($s, $deadline, $head, $eof, $patience, $v09) = @_;
    my $sel = IO::Select->new($s);
    $patience //= 1;
    my ($buf, $closed, $answers, $state) = ('', 0, [], 'partial');

    while (1) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0;
        my $wait = $state ? $left : ($left < 0.02 ? $left : 0.02);
        $wait = $patience if $state && !$eof && $wait > $patience;
        if (!$sel->can_read($wait)) {
            last unless $state;
            # no answer yet: perhaps nginx waits for more of the request;
            # end it (nginx then answers or closes)
            if (!$eof) {
                shutdown($s, SHUT_WR);
                $eof = 1;
            }
            next;
        }
        my $n = sysread $s, $buf, 65536, length $buf;
        if (!$n) {
            $closed = 1;
            last;
        }
        ($answers, $state) = parse_answers($buf, $head, 0, $v09);
        return ($answers, $state, $closed) if $state && $state ne 'partial';
    }

    ($answers, $state) = parse_answers($buf, $head, $closed, $v09);
    $state = undef if $state && $state eq 'partial' && !length $buf;
    return ($answers, $state, $closed, length $buf);
}

sub connect_to {
    my ($o) = @_;
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                 PeerPort => $o->{port}, Proto => 'tcp',
                                 Timeout => 5);
}

sub run {
    my (%o) = @_;
    my $seed = $o{seed} // (time ^ $$) % 1000000;
    my $count = $o{count} // 1000;
    my $seconds = $o{seconds} // 60;
    my $stalls = $o{stalls} // 4;
    my $timeout = $o{timeout} // 10;
    my $patience = $o{patience} // 1;
    my $log = $o{log} // sub { print STDERR "sweep: @_\n" };
    my %st = (seed => $seed, sent => 0, closed => 0, answers => 0,
              status => {}, bad => [], slow => 0, truncated => 0,
              stalled => 0);
    my $t0 = Time::HiRes::time();

    $log->("seed $seed, at most $count requests in ${seconds}s,"
           . " port $o{port}");
    srand $seed;

    my $note = sub {
        my ($i, $req, $answers, $state, $closed, $left) = @_;
        if (!@$answers) {
            $st{closed}++;
            $st{closed_by}{ $req->{fault} // 'stalled' }++;
            push @{ $st{bad} }, "request $i: $state" if $state
                && $state ne 'partial';
        }
        for my $a (@$answers) {
            $st{answers}++;
            $st{status}{ $a->{status} }++;
            my $why = judge($a, $req->{head});
            push @{ $st{bad} }, "request $i: $why" if $why;
        }
        push @{ $st{bad} }, "request $i: $state" if @$answers && $state
            && $state ne 'partial';
        $st{fault}{ $req->{fault} // 'stalled' }++;
        if ($o{verbose}) {
            my $first = substr($req->{bytes}, 0, 70) =~ s/[^ -~]/./gr;
            $log->(sprintf '%5d %-40s %s', $i,
                   join(',', map { $_->{status} } @$answers)
                   || 'closed', $first);
        }
    };

    # stalled clients first: part of a request line, of the headers, of a
    # body; nginx's client timeouts answer them while the rest runs
    my @stalled;
    for my $i (1 .. $stalls) {
        my $s = connect_to(\%o) or die "connect: $!";
        my $part = pick("GET /api/v1/sess",
                        "GET /api/v1/sessions HTTP/1.1\r\nHost: x\r\n",
                        "POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\n"
                        . "Authorization: Bearer "
                        . ($o{key} // 'sess_' . rhex(32)) . "\r\n"
                        . "Content-Type: application/json\r\n"
                        . "Content-Length: 100\r\n\r\n{\"a",
                        "POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\n"
                        . "Transfer-Encoding: chunked\r\n\r\n10\r\nab");
        send_all($s, $part);
        push @stalled, [ -$i, { bytes => $part }, $s ];
        $st{sent}++;
        $st{stalled}++;
    }

    my $i = 0;
    while ($i < $count && Time::HiRes::time() - $t0 < $seconds) {
        $i++;
        my $req = request(\%o);
        next if defined $o{only} && $i != $o{only};

        my $s = connect_to(\%o) or die "connect: $!";
        send_all($s, $req->{bytes}, $req->{pieces});
        shutdown($s, SHUT_WR) if $req->{truncated};
        $st{sent}++;
        $st{slow}++ if $req->{pieces};
        $st{truncated}++ if $req->{truncated};

        my @r = read_answers($s, Time::HiRes::time() + $timeout,
                             $req->{head}, $req->{truncated}, $patience,
                             $req->{v09});
        close $s;
        $note->($i, $req, @r);
    }

    for my $x (@stalled) {
        my ($n, $req, $s) = @$x;
        my @r = read_answers($s, Time::HiRes::time() + $timeout, 0, 1);
        close $s;
        $note->($n, $req, @r);
    }

    $st{seconds} = Time::HiRes::time() - $t0;

    if ($o{error_log}) {
        open my $fh, '<', $o{error_log} or die "$o{error_log}: $!";
        while (<$fh>) {
            push @{ $st{bad} }, "error log: $_"
                if /\[(alert|crit|emerg)\]|exited on signal/;
        }
    }

    return \%st;
}

sub summary {
    my ($st) = @_;
    my $by = join ', ', map { "$_: $st->{status}{$_}" }
                        sort keys %{ $st->{status} };
    my $cl = join ', ', map { "$_: $st->{closed_by}{$_}" }
                        sort keys %{ $st->{closed_by} };
    return sprintf "seed %d: %d requests (%d slow, %d truncated, %d stalled)"
                   . " in %.1fs; %d answers (%s); %d closed without an"
                   . " answer (%s); %d bad",
                   $st->{seed}, $st->{sent}, $st->{slow}, $st->{truncated},
                   $st->{stalled}, $st->{seconds}, $st->{answers}, $by,
                   $st->{closed}, $cl, scalar @{ $st->{bad} };
}

sub main {
    my %o = (port => 8080);
    Getopt::Long::GetOptions(\%o, 'port=i', 'seed=i', 'count=i',
                             'seconds=f', 'key=s', 'sid=s', 'stalls=i',
                             'timeout=f', 'error-log=s', 'only=i',
                             'verbose')
        or die "usage: perl util/sweep.pl --port N [--seed N] ...\n";
    $o{error_log} = delete $o{'error-log'};
    $o{sid} //= $NIL_UUID;

    my $st = run(%o);
    my @bad = @{ $st->{bad} };
    splice @bad, 50 if @bad > 50;
    print "sweep: $_\n" for @bad;
    print 'sweep: ', summary($st), "\n";
    exit(@{ $st->{bad} } ? 1 : 0);
}

main() unless caller;

1;
