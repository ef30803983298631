#!/usr/bin/perl
# The zone-capacity part of util/bench.sh: sends one request per key, in
# the order of KEYS_FILE, to 127.0.0.1:PORT, and after every round of
# requests looks into ERROR_LOG for the first
#
#     session_limit_zone "NAME" is full: evicted the counters of ...
#
# ALERT.  Prints one line of JSON:
#
#     {"sent": N, "alert_after": M, "round": R, "statuses": {...},
#      "seconds": S, "start": T0, "end": T1}
#
# alert_after is the number of keys sent when the ALERT was first seen
# (null if never); it is exact to within one round (R keys): the ALERT is
# written by the worker before it answers, so it is in the log once every
# answer of the round has been read.  start and end are epoch seconds:
# counters of a minute that is over are dropped as new ones come, so a
# fill that crosses a minute boundary overstates the capacity.
#
#     perl bench/fill-keys.pl PORT KEYS_FILE ERROR_LOG [CONNS] [DEPTH]
#
# CONNS keep-alive connections (default 16) each get DEPTH pipelined
# requests (default 16) per round.  Loopback only; every read has a 10 s
# deadline and the whole run stops after 120 s.

use strict;
use warnings;

use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes ();

my ($port, $keys_file, $log_file, $nconns, $depth) = @ARGV;

die "usage: $0 PORT KEYS_FILE ERROR_LOG [CONNS] [DEPTH]\n"
    unless defined $log_file && $port =~ /^\d+$/;

$nconns ||= 16;
$depth ||= 16;

my $round_size = $nconns * $depth;
my $deadline = Time::HiRes::time() + 120;
my $t0 = Time::HiRes::time();

open my $kf, '<', $keys_file or die "$keys_file: $!";
chomp(my @keys = <$kf>);
close $kf;
@keys = grep { length } @keys;

my @conns = map { connect_one() } 1 .. $nconns;

my (%statuses, $sent, $alert_after, $log_pos);

$sent = 0;
$log_pos = 0;

KEYS: while ($sent < @keys) {

    die "fill-keys: out of time after $sent keys\n"
        if Time::HiRes::time() > $deadline;

    # one round: DEPTH requests on each connection, then every answer
    my %pending;

    for my $c (@conns) {
        my $req = '';
        my $n = 0;

        while ($n < $depth && $sent < @keys) {
            $req .= "GET /api/v1/nope HTTP/1.1\r\nHost: bench\r\n"
                    . "Authorization: Bearer $keys[$sent]\r\n\r\n";
            $sent++;
            $n++;
        }

        last unless $n;

        write_all($c->{sock}, $req);
        $pending{$c} = [$c, $n];
    }

    my $sel = IO::Select->new(map { $_->[0]{sock} } values %pending);
    my %by_sock = map { $_->[0]{sock} => $_ } values %pending;

    while ($sel->count) {
        my @ready = $sel->can_read(10)
            or die "fill-keys: no answer within 10 s after $sent keys\n";

        for my $s (@ready) {
            my $p = $by_sock{$s};
            my $c = $p->[0];

            my $got = sysread $s, my $chunk, 262144;
            die "fill-keys: read: $!\n" unless defined $got;
            die "fill-keys: connection closed by nginx\n" unless $got;

            $c->{buf} .= $chunk;

            while ($p->[1] > 0 && (my $st = take_response($c))) {
                $statuses{$st}++;
                $p->[1]--;
            }

            $sel->remove($s) if $p->[1] == 0;
        }
    }

    # the log is only appended to: read what is new
    if (open my $lf, '<', $log_file) {
        seek $lf, $log_pos, 0;
        local $/;
        my $new = <$lf> // '';
        $log_pos += length $new;
        close $lf;

        # the counters' ALERT only: "forgot N keys found valid" comes
        # once a quarter of the zone holds keys seen valid
        if ($new =~ /session_limit_zone "[^"]*" is full: evicted the counters/)
        {
            $alert_after = $sent;
            last KEYS;
        }
    }
}

my $t1 = Time::HiRes::time();

printf qq({"sent": %d, "alert_after": %s, "round": %d, "statuses": {%s},)
       . qq( "seconds": %.2f, "start": %.3f, "end": %.3f}\n),
       $sent, defined $alert_after ? $alert_after : 'null', $round_size,
       join(', ', map { qq("$_": $statuses{$_}) } sort keys %statuses),
       $t1 - $t0, $t0, $t1;


sub connect_one {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or die "fill-keys: connect 127.0.0.1:$port: $!\n";
    $s->autoflush(1);
    return { sock => $s, buf => '' };
}


sub write_all {
    my ($s, $data) = @_;

    while (length $data) {
        my $n = syswrite $s, $data;
        die "fill-keys: write: $!\n" unless defined $n;
        substr($data, 0, $n) = '';
    }
}


# One whole response off the front of the buffer: its status, or undef
# when more bytes are needed.  Bodies have a Content-Length.
sub take_response {
    my ($c) = @_;

    my $end = index $c->{buf}, "\r\n\r\n";
    return undef if $end < 0;

    my $head = substr $c->{buf}, 0, $end;
    my ($status) = $head =~ m{^HTTP/1\.[01] (\d{3})}
        or die "fill-keys: not an HTTP response: "
               . substr($head, 0, 80) . "\n";
    my ($len) = $head =~ /\r\nContent-Length:\s*(\d+)/i;
    die "fill-keys: a response without Content-Length\n" unless defined $len;

    return undef if length($c->{buf}) < $end + 4 + $len;

    substr($c->{buf}, 0, $end + 4 + $len) = '';

    return $status;
}
