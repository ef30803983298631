package Transport;

# The API over TLS, HTTP/2 and HTTP/3, for t/030-http2.t and
# t/031-http3.t:
#
#     use Transport qw(tls_server https_request https_parallel);
#
# tls_server() is the http_config text of a second server of the block's
# nginx, on 127.0.0.1, port TEST_NGINX_SERVER_PORT + 3 (inside the ten
# ports util/test.sh gives each lane): TLS with a certificate made once
# per script, HTTP/2, and HTTP/3 on the same port over UDP where asked.
# The requests go through clients from Debian's packages: curl (HTTP/1.1
# and HTTP/2 over TLS; Debian 12's curl has no HTTP/3) and ngtcp2's
# gtlsclient (HTTP/3), which sends no header of ours by itself: the small
# preload t/lib/h3-headers.c adds them (H3_HEADERS).

use strict;
use warnings;

use Exporter qw(import);
use Session ();
use File::Temp ();
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes ();

our @EXPORT_OK = qw(tls_port tls_server https_request https_parallel
                    https_collect
                    http3_nginx http3_client h3_request h3_parallel
                    h3_collect canon_version);

my $Dir = File::Temp->newdir('t-transport-XXXXXX', TMPDIR => 1);


sub tls_port {
    my $port = $Test::Nginx::Util::ServerPort || $ENV{TEST_NGINX_PORT}
               || 1984;

    return $port + 3;
}


# canon_version(1, 25, 1): nginx's version as Test::Nginx writes it in
# $Test::Nginx::Util::NginxVersion ("1.025001")
sub canon_version {
    return sprintf '%d.%03d%03d', @_;
}


# the certificate and key of localhost, made once
my $Cert;

sub cert {
    return $Cert if $Cert;

    my ($crt, $key) = ("$Dir/localhost.crt", "$Dir/localhost.key");

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', '/dev/null';
        exec('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
             'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
             '-subj', '/CN=localhost', '-keyout', $key, '-out', $crt)
            or POSIX::_exit(127);
    }

    waitpid $pid, 0;
    die "openssl req failed\n" if $? != 0;

    $Cert = [$crt, $key];

    return $Cert;
}


# http3_nginx(): whether the nginx under test has HTTP/3 (nginx -V)
my $NginxV;

sub nginx_v {
    if (!defined $NginxV) {
        my $nginx = $Test::Nginx::Util::NginxBinary || 'nginx';
        $NginxV = `$nginx -V 2>&1`;
    }

    return $NginxV;
}

sub http3_nginx {
    return nginx_v() =~ /--with-http_v3_module/ ? 1 : 0;
}


# tls_server(LOCATIONS, HTTP3): a server block for --- http_config:
# TLS and HTTP/2 on tls_port() (the directives of nginx 1.22 or of
# 1.25.1 and later), with HTTP/3 too when HTTP3 is true; LOCATIONS is
# its content.
sub tls_server {
    my ($locations, $http3) = @_;

    my ($crt, $key) = @{ cert() };
    my $port = tls_port();
    my $new = ($Test::Nginx::Util::NginxVersion // 0)
              >= canon_version(1, 25, 1);

    my $listen = $new ? "listen 127.0.0.1:$port ssl;\n        http2 on;\n"
                      : "listen 127.0.0.1:$port ssl http2;\n";

    $listen .= "        listen 127.0.0.1:$port quic reuseport;\n"
               . "        http3 on;\n"
        if $http3;

    return <<EOF;
    server {
        $listen
        server_name localhost;
        ssl_certificate $crt;
        ssl_certificate_key $key;
        ssl_protocols TLSv1.2 TLSv1.3;

$locations
    }
EOF
}


# The answer of a curl run: its -D file and its -o file.
sub read_answer {
    my ($hfile, $bfile, $w) = @_;

    my %res = (status => 0, version => '', headers => {}, content => '');

    (undef, undef, $res{connects}, $res{downloaded}) = split ' ', $w
        if defined $w;

    if (open my $fh, '<', $hfile) {
        local $/;
        my $head = <$fh> // '';

        # the last block: the final answer
        my @blocks = grep { /\S/ } split /\r?\n\r?\n/, $head;
        my ($line, @lines) = split /\r?\n/, $blocks[-1] // '';

        @res{qw(version status)} = ($1, $2)
            if ($line // '') =~ m{^HTTP/([\d.]+) (\d{3})};

        for (@lines) {
            $res{headers}{lc $1} = $2 if /^([^:\s]+):\s*(.*)$/;
        }
    }

    if (open my $fh, '<', $bfile) {
        binmode $fh;
        local $/;
        $res{content} = <$fh> // '';
    }

    $res{json} = eval { Session::decode_json($res{content}) }
        if length $res{content};

    return \%res;
}


my $Seq = 0;

# curl's arguments for one request: METHOD, PATH, KEY, BODY (a string),
# HEADERS (a hash reference), in $dir
sub curl_args {
    my ($proto, $method, $path, $key, $body, $headers, $n) = @_;

    my $tag = $Seq++;
    my @a = ('-D', "$Dir/h$tag", '-o', "$Dir/b$tag");

    if ($method eq 'HEAD') {
        push @a, '-I';

    } elsif (defined $body) {
        my $f = "$Dir/in$tag";
        open my $fh, '>', $f or die "$f: $!";
        binmode $fh;
        print $fh $body;
        close $fh;
        push @a, '-X', $method, '--data-binary', "\@$f";

    } else {
        push @a, '-X', $method;
    }

    push @a, '-H', "Authorization: Bearer $key" if defined $key;
    push @a, '-H', "$_: $headers->{$_}" for sort keys %{ $headers || {} };

    push @a, 'https://127.0.0.1:' . tls_port() . $path;

    return (\@a, "$Dir/h$tag", "$Dir/b$tag");
}


# https_request(PROTO, METHOD, PATH, KEY, BODY, HEADERS): one request to
# tls_server() through curl; PROTO '--http2' or '--http1.1'.  Returns
# the answer: status, version ("2", "1.1"), headers (lower-case names),
# content, json, connects (curl's num_connects).
sub https_request {
    my ($proto, $method, $path, $key, $body, $headers) = @_;

    my ($args, $h, $b) = curl_args($proto, $method, $path, $key, $body,
                                   $headers);

    open my $fh, '-|', 'curl', '-sS', '-k', $proto, '--max-time', '30',
                       '-w', '%{http_version} %{http_code} %{num_connects}'
                             . ' %{size_download}',
                       @$args
        or die "curl: $!";
    local $/;
    my $w = <$fh>;
    close $fh;

    return read_answer($h, $b, $w);
}


# https_parallel(PROTO, N, PATH, KEY): N GET PATH at once on as few
# connections as curl can (one, over HTTP/2: curl waits for the first
# connection's protocol to multiplex the others on it), not waiting for
# them.  Returns a handle for https_collect().
sub https_parallel {
    my ($proto, $n, $path, $key) = @_;

    my (@args, @files);

    # each transfer its own options (--next): -H and -D would otherwise
    # be the same for all, every header sent N times
    for (1 .. $n) {
        my ($a, $h, $b) = curl_args($proto, 'GET', $path, $key);
        push @args, '--next' if @args;
        push @args, '-k', $proto, '-w', '%{http_version} %{http_code}'
                                        . ' %{num_connects}\n', @$a;
        push @files, [$h, $b];
    }

    my $pid = open my $fh, '-|', 'curl', '-sS', '--no-progress-meter',
                                 '--max-time', '60', '-Z',
                                 '--parallel-max', $n, @args
        or die "curl: $!";

    return { fh => $fh, pid => $pid, files => \@files };
}


# https_collect(HANDLE): the answers of https_parallel() (as of
# https_request()), once curl is over, and the connections it made
sub https_collect {
    my ($p) = @_;

    my $fh = $p->{fh};
    my @w = <$fh>;
    close $fh;

    my $connects = 0;
    $connects += (split ' ', $_)[2] // 0 for @w;

    return ([map { read_answer(@$_, undef) } @{ $p->{files} }], $connects);
}


# --- HTTP/3 ---------------------------------------------------------------

# http3_client(): '' when gtlsclient and the preload can be used, else
# why not (the preload is built once, with cc and libnghttp3-dev)
my $H3Preload;

sub http3_client {
    return '' if $H3Preload;

    return 'no gtlsclient (package ngtcp2-client; make deps)'
        unless grep { -x "$_/gtlsclient" } split /:/, $ENV{PATH} // '';

    my $src = Session::repo_root() . '/t/lib/h3-headers.c';
    my $so = "$Dir/h3-headers.so";

    system('cc', '-O2', '-Wall', '-Wextra', '-shared', '-fPIC', '-o', $so,
           $src, '-ldl') == 0
        or return "cannot build t/lib/h3-headers.c (libnghttp3-dev;"
                  . " make deps)";

    $H3Preload = $so;

    return '';
}


# gtlsclient's arguments and environment for N requests of METHOD PATH
# (BODY a string), KEY and HEADERS as headers
sub h3_command {
    my ($n, $method, $path, $key, $body, $headers) = @_;

    my %h = %{ $headers || {} };
    $h{authorization} = "Bearer $key" if defined $key;

    my @a = ('gtlsclient', '--no-quic-dump', '--timeout=60s',
             '--exit-on-all-streams-close', '-n', $n, '-m', $method);

    if (defined $body) {
        my $f = "$Dir/in" . $Seq++;
        open my $fh, '>', $f or die "$f: $!";
        binmode $fh;
        print $fh $body;
        close $fh;
        push @a, '-d', $f;
    }

    push @a, '127.0.0.1', tls_port(), 'https://127.0.0.1:' . tls_port() . $path;

    my $env = join "\n", map { lc($_) . ": $h{$_}" } sort keys %h;

    return (\@a, $env);
}

# the answers in gtlsclient's output: by stream, status, headers, content
# (its dump of the body), json; in the order of the streams
sub h3_answers {
    my ($out) = @_;

    my (%st, $cur, $base, $last);

    # each piece of a body is dumped as "hexdump -C" does: offsets from
    # the piece's start, "*" for lines like the one before
    my $fill = sub {
        my ($off) = @_;

        while (length($cur->{content}) < $base + $off) {
            $cur->{content} .= $last;
        }
        substr($cur->{content}, $base + $off) = '';
    };

    for (split /\n/, $out) {
        if (/^http: stream 0x([0-9a-f]+) \[(:?[^:\]]+): (.*)\]$/) {
            my $s = $st{hex $1} //= { headers => {}, content => '' };
            if ($2 eq ':status') {
                $s->{status} = $3;
            } else {
                $s->{headers}{lc $2} = $3;
            }
            undef $cur;

        } elsif (/^http: stream 0x([0-9a-f]+) body \d+ bytes/) {
            $cur = $st{hex $1} //= { headers => {}, content => '' };
            $base = length $cur->{content};

        } elsif ($cur && /^([0-9a-f]{8})  ([0-9a-f ]+)\|/) {
            $fill->(hex $1);
            $last = pack 'H*', join '', split ' ', $2;
            $cur->{content} .= $last;

        } elsif ($cur && /^([0-9a-f]{8})$/) {
            $fill->(hex $1);
            undef $cur;

        } elsif (!($cur && /^\*$/)) {
            undef $cur;
        }
    }

    my @r = map { $st{$_} } sort { $a <=> $b } keys %st;

    for my $r (@r) {
        $r->{status} //= 0;
        $r->{version} = '3';
        $r->{json} = eval { Session::decode_json($r->{content}) }
            if length $r->{content};
    }

    return \@r;
}

# h3_request(METHOD, PATH, KEY, BODY, HEADERS): one request over HTTP/3,
# on a connection of its own; the answer as https_request()'s
sub h3_request {
    my ($r) = @{ h3_run(1, @_) };

    return $r // { status => 0, version => '', headers => {},
                   content => '' };
}

sub h3_run {
    my ($n, @req) = @_;

    my $p = h3_parallel($n, @req);

    return h3_collect($p);
}

# h3_parallel(N, METHOD, PATH, KEY, BODY, HEADERS): N requests at once on
# one HTTP/3 connection, not waiting for them; a handle for h3_collect()
sub h3_parallel {
    my ($n, @req) = @_;

    my ($args, $env) = h3_command($n, @req);
    my $out = "$Dir/h3out" . $Seq++;

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        $ENV{H3_HEADERS} = $env;
        $ENV{LD_PRELOAD} = $H3Preload;
        open STDOUT, '>', $out or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT;
        exec(@$args) or POSIX::_exit(127);
    }

    return { pid => $pid, out => $out };
}

# h3_collect(HANDLE): the answers of h3_parallel(), once its client has
# ended (at most 60 s)
sub h3_collect {
    my ($p) = @_;

    my $deadline = Time::HiRes::time() + 60;

    while (waitpid($p->{pid}, POSIX::WNOHANG()) == 0) {
        if (Time::HiRes::time() > $deadline) {
            kill 'KILL', $p->{pid};
            waitpid $p->{pid}, 0;
            last;
        }
        Time::HiRes::sleep(0.05);
    }

    open my $fh, '<', $p->{out} or return [];
    local $/;

    return h3_answers(<$fh> // '');
}


1;
