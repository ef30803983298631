#!/usr/bin/perl
# Sends exactly N GET requests for PATH to 127.0.0.1:PORT over one
# keep-alive connection, DEPTH pipelined at a time, and reads every
# answer.  Used by util/bench-ir.sh, which counts the instructions an
# nginx worker spends on them; prints the statuses as one line of JSON:
#
#     {"sent": N, "statuses": {"429": N}}
#
#     perl bench/send-requests.pl PORT PATH N [AUTHORIZATION] [DEPTH]
#
# With SEND_BODY in the environment the requests are POSTs of that body
# (Content-Type: SEND_TYPE, application/json by default), and with
# SEND_IDEM too each carries a new Idempotency-Key, SEND_IDEM-1,
# SEND_IDEM-2 and so on.
#
# Loopback only; the whole run stops after 300 s.

use strict;
use warnings;

use IO::Socket::INET ();

my ($port, $path, $n, $auth, $depth) = @ARGV;

die "usage: $0 PORT PATH N [AUTHORIZATION] [DEPTH]\n"
    unless defined $n && $port =~ /^\d+$/ && $n =~ /^\d+$/;

$depth ||= 16;

my $body = $ENV{SEND_BODY};
my $idem = $ENV{SEND_IDEM};

my $req = (defined $body ? 'POST' : 'GET') . " $path HTTP/1.1\r\n"
          . "Host: 127.0.0.1\r\n"
          . (defined $auth && length $auth ? "Authorization: $auth\r\n" : '');

if (defined $body) {
    $req .= 'Content-Type: ' . ($ENV{SEND_TYPE} // 'application/json')
            . "\r\nContent-Length: " . length($body) . "\r\n";
}

# the request of number I (from 1)
sub request {
    my ($i) = @_;
    return $req . (defined $idem && defined $body
                   ? "Idempotency-Key: $idem-$i\r\n" : '')
           . "\r\n" . ($body // '');
}

my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                              Proto => 'tcp', Timeout => 10)
    or die "send-requests: connect: $!\n";
binmode $s;

local $SIG{ALRM} = sub { die "send-requests: out of time\n" };
alarm 300;

my (%statuses, $buf);
my $sent = 0;
$buf = '';

while ($sent < $n) {
    my $k = $n - $sent < $depth ? $n - $sent : $depth;

    print {$s} map { request($sent + $_) } 1 .. $k
        or die "send-requests: write: $!\n";
    $sent += $k;

    for (1 .. $k) {
        my ($status, $len);

        while (1) {
            if ($buf =~ /\A(HTTP\/1\.1 (\d{3})[^\r]*\r\n(.*?)\r\n\r\n)/s) {
                my ($head, $code, $hdrs) = ($1, $2, $3);
                $len = $hdrs =~ /^content-length:\s*(\d+)/mi ? $1 : 0;
                if (length($buf) >= length($head) + $len) {
                    substr($buf, 0, length($head) + $len) = '';
                    $status = $code;
                    last;
                }
            }
            my $r = sysread($s, $buf, 65536, length $buf);
            die "send-requests: read: " . ($r // $!) . "\n" unless $r;
        }

        $statuses{$status}++;
    }
}

alarm 0;
close $s;

print '{"sent": ', $sent, ', "statuses": {',
      join(', ', map { "\"$_\": $statuses{$_}" } sort keys %statuses),
      "}}\n";
