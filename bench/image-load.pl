#!/usr/bin/perl
# The concurrent part of the image benchmark (util/bench-images.sh): N
# transfers at once, every connection opened and its request written
# together, in one process with non-blocking sockets (a curl per
# transfer would weigh more than the server it measures).
#
#   image-load.pl up   PORT KEY N FILE SID,SID,...
#       N POSTs of FILE (image/png), the i-th into the i-th session (round
#       robin); the body is written as the socket takes it
#   image-load.pl down PORT KEY N - PATH,PATH,...
#       N GETs of .../images/{iid}/content paths (round robin), the bodies
#       read and thrown away
#
# Prints one line: "<ok> <failed> <seconds> <body bytes> <median time to
# the first byte of the answer, ms>", where ok counts 201 (up) or 200
# with every byte (down).  127.0.0.1 only; gives up after 300 s.

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

my ($mode, $port, $key, $n, $file, $targets) = @ARGV;

die "usage: image-load.pl up|down PORT KEY N FILE|- TARGETS\n"
    unless defined $targets && $mode =~ /^(up|down)$/ && $n > 0;

my @targets = split /,/, $targets;
my $body = '';

if ($mode eq 'up') {
    open my $fh, '<:raw', $file or die "image-load: $file: $!\n";
    local $/;
    $body = <$fh>;
    close $fh;
}

my (@conns, %by_fd);
my $t0 = time;

for my $i (0 .. $n - 1) {
    my $t = $targets[$i % @targets];
    my $req;

    if ($mode eq 'up') {
        $req = "POST /api/v1/sessions/$t/images HTTP/1.1\r\n"
               . "Host: localhost\r\nAuthorization: Bearer $key\r\n"
               . "Content-Type: image/png\r\n"
               . 'Content-Length: ' . length($body) . "\r\n"
               . "Connection: close\r\n\r\n";
    } else {
        $req = "GET $t HTTP/1.1\r\nHost: localhost\r\n"
               . "Authorization: Bearer $key\r\nConnection: close\r\n\r\n";
    }

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp')
        or die "image-load: connect: $!\n";
    $s->blocking(0);

    my $c = { sock => $s, head => $req, off => 0, in => '', got => 0,
              first => undef, done => 0 };
    push @conns, $c;
    $by_fd{fileno $s} = $c;
}

my $rsel = IO::Select->new(map { $_->{sock} } @conns);
my $wsel = IO::Select->new(map { $_->{sock} } @conns);
my $left = $n;
my $deadline = $t0 + 300;

while ($left > 0 && time < $deadline) {
    my ($r, $w) = IO::Select->select($rsel, $wsel->count ? $wsel : undef,
                                     undef, 1);

    for my $s (@{ $w || [] }) {
        my $c = $by_fd{fileno $s};
        my $total = length($c->{head}) + length($body);

        while ($c->{off} < $total) {
            my ($buf, $o);

            if ($c->{off} < length $c->{head}) {
                ($buf, $o) = ($c->{head}, $c->{off});
            } else {
                ($buf, $o) = ($body, $c->{off} - length $c->{head});
            }

            my $len = length($buf) - $o;
            $len = 65536 if $len > 65536;

            my $k = syswrite $s, $buf, $len, $o;
            last unless $k;
            $c->{off} += $k;
        }

        $wsel->remove($s) if $c->{off} >= $total;
    }

    for my $s (@{ $r || [] }) {
        my $c = $by_fd{fileno $s};
        my $k = sysread $s, my $buf, 65536;

        next if !defined $k && $!{EAGAIN};

        if ($k) {
            $c->{first} //= time;
            $c->{got} += $k;
            # the head, and what the check of a whole answer needs
            $c->{in} .= $buf if length $c->{in} < 4096;
            next;
        }

        $rsel->remove($s);
        $wsel->remove($s);
        close $s;
        $c->{done} = time;
        $left--;
    }
}

my $t1 = time;
my ($ok, $failed, $bytes, @ttfb) = (0, 0, 0);

for my $c (@conns) {
    my ($status) = $c->{in} =~ m{^HTTP/1\.1 (\d{3})};
    my ($head) = $c->{in} =~ /\A(.*?\r\n\r\n)/s;
    my ($len) = ($head // '') =~ /\r\nContent-Length: (\d+)/i;
    my $blen = $c->{got} - length($head // '');

    my $good = $mode eq 'up'
               ? ($status // 0) == 201
               : ($status // 0) == 200 && defined $len && $blen == $len;

    if ($good && $c->{done}) {
        $ok++;
        $bytes += $mode eq 'up' ? length $body : $blen;
    } else {
        $failed++;
        print STDERR "image-load: $mode: " . ($status // 'no answer')
                     . ($mode eq 'down' && defined $len
                        ? " ($blen of $len bytes)" : '') . "\n"
            if $failed <= 3;
    }

    push @ttfb, ($c->{first} - $t0) * 1000 if defined $c->{first};
}

@ttfb = sort { $a <=> $b } @ttfb;
my $median = @ttfb ? $ttfb[int(@ttfb / 2)] : 0;

printf "%d %d %.3f %d %.1f\n", $ok, $failed, $t1 - $t0, $bytes, $median;
