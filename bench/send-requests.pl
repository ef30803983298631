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
# Loopback only; the whole run stops after 300 s.

use strict;
use warnings;

use IO::Socket::INET ();

my ($port, $path, $n, $auth, $depth) = @ARGV;

die "usage: $0 PORT PATH N [AUTHORIZATION] [DEPTH]\n"
    unless defined $n && $port =~ /^\d+$/ && $n =~ /^\d+$/;

$depth ||= 16;

my $req = "GET $path HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          . (defined $auth && length $auth ? "Authorization: $auth\r\n" : '')
          . "\r\n";

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

    print {$s} $req x $k or die "send-requests: write: $!\n";
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
