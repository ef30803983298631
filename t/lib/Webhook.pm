package Webhook;

# Webhook receivers and a DNS responder on 127.0.0.1, for t/015-webhooks.t
# and t/055-directive-defaults.t:
#
#   receiver_start(LOG [, tls => {cert => FILE, key => FILE}] [, port => N]
#                  [, conn_log => FILE])
#       an HTTP (or HTTPS) server in a child process; returns (port, pid).
#       Every request it reads is appended to LOG as one JSON line:
#       {"t": epoch seconds (float), "method", "path", "headers": {lower-case
#       name: value}, "body", "conn": the connection's number, "nth": the
#       request's number on it}.  The path decides the answer:
#           /ok/...                 204
#           /status/CODE/...        CODE, always
#           /status/CODExN/...      CODE for the first N requests to that
#                                   exact path, then 204
#           /hold/...               no answer; the connection stays open
#           /holdxN/...             no answer for the first N requests to
#                                   that exact path, then 204
#           /keep/...               204, and the connection stays open for
#                                   more requests (the others close it)
#           /keepdrop/...           as /keep/ for the first request on a
#                                   connection; a later one on it is
#                                   not answered, the connection closed
#       A 3xx carries "Location: /ok/redirected".
#       With conn_log (plain HTTP only), each connection's accept and
#       close are appended to FILE as JSON lines {"t", "conn", "event":
#       "accept" or "close", "by": "peer" or "receiver" (a close)}.
#   receiver_requests(LOG [, PATH_PREFIX]): the logged requests, in order.
#   receiver_connections(FILE, CONN): the accept and close lines of the
#       connection CONN (a request's "conn") in conn_log FILE, as a hash
#       {accept => t, close => t, by => who}; a missing one is undef.
#   due_now(WHERE): the scheduled retries of the webhook_outbox rows that
#       WHERE selects (an SQL condition) made due now, and the senders
#       told (NOTIFY session_webhooks): what the schedule would do in a
#       second or more, for tests that need a retry, not its spacing.
#   dns_start(ZONE [, PORT]): a UDP DNS responder that answers A queries
#       for ZONE and its subdomains with 127.0.0.1, AAAA with no address,
#       and anything else NXDOMAIN; returns (port, pid).
#   free_port(): a TCP port on 127.0.0.1 nobody listens on (at the time).
#   stop(PID): kills a child.
#
# Every child dies with the test script (END, and a check of its parent).

use strict;
use warnings;

use Exporter qw(import);
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();
use Session ();
use Time::HiRes ();

our @EXPORT = qw(receiver_start receiver_requests receiver_connections
                 due_now dns_start free_port stop);

my @Children;
my $Json = JSON::PP->new->canonical;


sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1, ReuseAddr => 1)
        or die "free_port: $!";
    my $port = $s->sockport;
    close $s;
    return $port;
}


sub _child {
    my ($code) = @_;

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        local $SIG{TERM} = sub { POSIX::_exit(0) };
        # a peer that goes away mid-answer must not end the child
        local $SIG{PIPE} = 'IGNORE';
        eval { $code->(); 1 } or warn "webhook test child: $@";
        # no END block of Test::Nginx in here: leave with _exit
        POSIX::_exit(0);
    }

    push @Children, $pid;

    return $pid;
}


sub stop {
    my ($pid) = @_;

    local $?;

    kill 'KILL', $pid;
    waitpid $pid, 0;
    @Children = grep { $_ != $pid } @Children;
}


END {
    # waitpid sets $?, which is the script's exit status here
    local $?;

    for my $pid (@Children) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}


# the answer for a request to PATH; undef: hold the connection
sub _answer {
    my ($path, $seen) = @_;

    my $n = ++$seen->{$path};
    my $code = 204;

    # answers whose head is not one plain status line
    return _answer_head($1) if $path =~ m{^/head/(\w+)/};

    if ($path =~ m{^/hold/}) {
        return undef;

    } elsif ($path =~ m{^/holdx(\d+)/}) {
        return undef if $n <= $1;

    } elsif ($path =~ m{^/status/(\d{3})x(\d+)/}) {
        $code = $1 if $n <= $2;

    } elsif ($path =~ m{^/status/(\d{3})/}) {
        $code = $1;
    }

    my $extra = $code =~ /^3/ ? "Location: /ok/redirected\r\n" : '';

    return "HTTP/1.1 $code Test\r\n${extra}Content-Length: 5\r\n"
           . "Connection: close\r\n\r\nhello";
}


# /head/KIND/...: interim answers before the final one (RFC 9110 15.2),
# a long reason phrase, endless interim answers, a 101 nobody asked for
sub _answer_head {
    my ($kind) = @_;

    my $final = "Content-Length: 5\r\nConnection: close\r\n\r\nhello";
    my $hints = "HTTP/1.1 103 Early Hints\r\n"
                . "Link: </style.css>; rel=preload; as=style\r\n\r\n";

    return "HTTP/1.1 100 Continue\r\n\r\n$hints"
           . "HTTP/1.1 200 OK\r\n$final" if $kind eq 'interim';
    return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 Oops\r\n$final"
        if $kind eq 'interim500';
    return 'HTTP/1.1 200 ' . ('O' x 3000) . "\r\n$final"
        if $kind eq 'longreason';
    return $hints x 2000 if $kind eq 'endless';
    return "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"
        if $kind eq 'upgrade';

    die "receiver: no such answer head: $kind";
}


# a whole request in $buf: (method, path, headers, body), else ()
sub _parse {
    my ($buf) = @_;

    my $end = index $buf, "\r\n\r\n";
    return () if $end < 0;

    my ($line, @lines) = split /\r\n/, substr($buf, 0, $end);
    my ($method, $path) = split / /, $line;
    my %h;

    for (@lines) {
        my ($k, $v) = split /:\s*/, $_, 2;
        $h{lc $k} = $v;
    }

    my $len = $h{'content-length'} // 0;
    return () if length($buf) < $end + 4 + $len;

    return ($method, $path, \%h, substr($buf, $end + 4, $len),
            $end + 4 + $len);
}


sub _log {
    my ($log, $method, $path, $h, $body, $extra) = @_;

    open my $fh, '>>', $log or die "receiver: $log: $!";
    print $fh $Json->encode({ t => Time::HiRes::time(), method => $method,
                              path => $path, headers => $h,
                              body => $body, %{ $extra || {} } }), "\n";
    close $fh;
}


sub _conn_log {
    my ($file, $conn, $event, $by) = @_;

    return unless defined $file;

    open my $fh, '>>', $file or die "receiver: $file: $!";
    print $fh $Json->encode({ t => Time::HiRes::time(), conn => $conn,
                              event => $event,
                              (defined $by ? (by => $by) : ()) }), "\n";
    close $fh;
}


sub receiver_start {
    my ($log, %opt) = @_;

    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $opt{port} // 0,
                                   Listen => 128, ReuseAddr => 1)
        or die "receiver: listen: $!";
    my $port = $ls->sockport;

    my $pid = _child(sub {
        my $parent = getppid;

        return _tls_loop($ls, $log, $opt{tls}, $parent) if $opt{tls};

        my $sel = IO::Select->new($ls);
        my (%buf, %held, %seen, %cid, %nreq);
        my $conns = 0;

        # a connection's end: the conn_log line, then the close
        my $end = sub {
            my ($fh, $by) = @_;

            _conn_log($opt{conn_log}, $cid{$fh}, 'close', $by);
            $sel->remove($fh);
            delete $buf{$fh};
            delete $held{$fh};
            delete $cid{$fh};
            close $fh;
        };

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;

            for my $fh ($sel->can_read(0.5)) {
                if ($fh == $ls) {
                    my $c = $ls->accept or next;
                    $c->blocking(0);
                    $buf{$c} = '';
                    $cid{$c} = ++$conns;
                    $nreq{$c} = 0;
                    $sel->add($c);
                    _conn_log($opt{conn_log}, $conns, 'accept');
                    next;
                }

                my $n = sysread $fh, my $chunk, 65536;

                if (!$n) {
                    $end->($fh, 'peer');
                    next;
                }

                next if $held{$fh};

                $buf{$fh} .= $chunk;

                my ($method, $path, $h, $body, $used) = _parse($buf{$fh});
                next unless defined $method;

                my $nth = ++$nreq{$fh};
                _log($log, $method, $path, $h, $body,
                     { conn => $cid{$fh}, nth => $nth });

                if ($path =~ m{^/keep(drop)?/}) {
                    if ($1 && $nth > 1) {
                        $end->($fh, 'receiver');
                        next;
                    }

                    substr($buf{$fh}, 0, $used) = '';
                    $fh->blocking(1);
                    print $fh "HTTP/1.1 204 Test\r\n\r\n";
                    $fh->blocking(0);
                    next;
                }

                my $answer = _answer($path, \%seen);

                if (!defined $answer) {
                    $held{$fh} = 1;
                    next;
                }

                $fh->blocking(1);
                print $fh $answer;
                $end->($fh, 'receiver');
            }
        }
    });

    close $ls;

    return ($port, $pid);
}


# TLS: one connection at a time, each bounded by a short timeout
sub _tls_loop {
    my ($ls, $log, $tls, $parent) = @_;

    require IO::Socket::SSL;

    my %seen;
    my $sel = IO::Select->new($ls);

    for (;;) {
        POSIX::_exit(0) if getppid != $parent;
        next unless $sel->can_read(0.5);

        my $c = $ls->accept or next;

        my $ok = IO::Socket::SSL->start_SSL($c, SSL_server => 1,
                                            SSL_cert_file => $tls->{cert},
                                            SSL_key_file => $tls->{key},
                                            Timeout => 3);
        if (!$ok) {
            close $c;
            next;
        }

        my $buf = '';
        my @req;
        my $deadline = time + 3;

        while (time < $deadline) {
            my $n = sysread $c, my $chunk, 65536;
            last unless $n;
            $buf .= $chunk;
            @req = _parse($buf);
            last if @req;
        }

        if (@req) {
            _log($log, @req[0 .. 3]);
            my $answer = _answer($req[1], \%seen);
            print $c $answer if defined $answer;
        }

        $c->close(SSL_no_shutdown => 1);
    }
}


sub receiver_requests {
    my ($log, $prefix) = @_;

    open my $fh, '<', $log or return wantarray ? () : 0;
    my @r;

    while (my $line = <$fh>) {
        my $r = eval { $Json->decode($line) } or next;
        push @r, $r if !defined $prefix || index($r->{path}, $prefix) == 0;
    }

    close $fh;

    return @r;
}


sub receiver_connections {
    my ($file, $conn) = @_;

    my %c = (accept => undef, close => undef, by => undef);

    open my $fh, '<', $file or return \%c;

    while (my $line = <$fh>) {
        my $r = eval { $Json->decode($line) } or next;
        next unless ($r->{conn} // 0) == $conn;

        $c{ $r->{event} } = $r->{t};
        $c{by} = $r->{by} if defined $r->{by};
    }

    close $fh;

    return \%c;
}


sub due_now {
    my ($where) = @_;

    Session::psql('UPDATE webhook_outbox SET next_attempt_at = now()'
                  . " WHERE ($where) AND claimed_until IS NULL"
                  . ' AND delivered_at IS NULL AND failed_at IS NULL;'
                  . ' NOTIFY session_webhooks');
}


sub dns_start {
    my ($zone, $port) = @_;

    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                  LocalPort => $port // 0, Proto => 'udp')
        or die "dns: bind: $!";
    $port = $s->sockport;

    my $pid = _child(sub {
        my $parent = getppid;
        my $sel = IO::Select->new($s);

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;
            next unless $sel->can_read(0.5);

            my $peer = $s->recv(my $q, 512) // next;
            next if length $q < 17;

            my ($id, $flags, $qd) = unpack 'n n n', $q;

            # the question: labels, then type and class
            my ($pos, @labels) = (12);
            while ($pos < length $q) {
                my $l = ord substr $q, $pos, 1;
                $pos++;
                last if $l == 0;
                push @labels, substr $q, $pos, $l;
                $pos += $l;
            }

            next if $pos + 4 > length $q;

            my ($type) = unpack 'n', substr $q, $pos, 2;
            my $question = substr $q, 12, $pos + 4 - 12;
            my $name = lc join '.', @labels;
            my $ours = $name eq $zone || $name =~ /\.\Q$zone\E$/;

            my ($rcode, $answer) = (3, '');

            if ($ours) {
                $rcode = 0;
                $answer = pack('n n n N n C4', 0xc00c, 1, 1, 60, 4,
                               127, 0, 0, 1)
                    if $type == 1;
            }

            my $an = length $answer ? 1 : 0;
            my $r = pack('n n n n n n', $id, 0x8180 | $rcode, 1, $an, 0, 0)
                    . $question . $answer;

            $s->send($r, 0, $peer);
        }
    });

    close $s;

    return ($port, $pid);
}


1;
