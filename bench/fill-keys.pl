#!/usr/bin/perl
# The zone-capacity part of util/bench.sh: sends one request per key, in
# the order of KEYS_FILE, to 127.0.0.1:PORT, and after every round of
# requests reads the zone's evictions from /status (session_status) and
# looks into ERROR_LOG for the first
#
#     session_limit_zone "NAME" is full: evicted the counters of ...
#
# ALERT.  Stops at the round after which the zone has evicted a counter.
# Prints one line of JSON:
#
#     {"sent": N, "evicted_after": M, "alert_after": A, "round": R,
#      "statuses": {...}, "seconds": S, "start": T0, "end": T1}
#
# evicted_after is the number of keys sent when the zone had first
# evicted a counter (null if never), exact to within one round (R keys):
# the counter is evicted before the request is answered.  alert_after is
# the same for the ALERT, when it came by then (null if not): one ALERT a
# second per zone says the evictions and forgotten keys since the last,
# so with keys seen valid being forgotten it may come up to a second
# later, many rounds on.  start and end are epoch seconds:
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
use JSON::PP ();
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

my (%statuses, $sent, $alert_after, $evicted_after, $log_pos);

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
        if (!defined $alert_after
            && $new =~ /session_limit_zone "[^"]*" is full: evicted the counters/)
        {
            $alert_after = $sent;
        }
    }

    if (zone_evictions() > 0) {
        $evicted_after = $sent;
        last KEYS;
    }
}

my $t1 = Time::HiRes::time();

printf qq({"sent": %d, "evicted_after": %s, "alert_after": %s, "round": %d,)
       . qq( "statuses": {%s}, "seconds": %.2f, "start": %.3f, "end": %.3f}\n),
       $sent, defined $evicted_after ? $evicted_after : 'null',
       defined $alert_after ? $alert_after : 'null', $round_size,
       join(', ', map { qq("$_": $statuses{$_}) } sort keys %statuses),
       $t1 - $t0, $t0, $t1;


# the zone's evictions so far, from session_status's JSON
sub zone_evictions {
    my $s = connect_one()->{sock};
    write_all($s, "GET /status HTTP/1.0\r\nHost: bench\r\n\r\n");

    my $answer = '';
    my $sel = IO::Select->new($s);

    while ($sel->can_read(10)) {
        my $got = sysread $s, my $chunk, 65536;
        die "fill-keys: read /status: $!\n" unless defined $got;
        last unless $got;
        $answer .= $chunk;
    }

    close $s;

    $answer =~ m{\A HTTP/1\.\d \s 200 .*? \r\n\r\n (.*) \z}xs
        or die "fill-keys: /status did not answer 200\n";
    my $json = JSON::PP::decode_json($1);
    my $n = $json->{zone}{evictions};
    die "fill-keys: no zone.evictions in /status\n" unless defined $n;

    return $n;
}


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
