package Images;

# What the image scripts (t/008-images.t, t/044-images-stream-failures.t,
# t/051-body-memory.t) share:
#
#     use Images qw(png_bytes image_rows read_some);
#
#     png_bytes(N)           N bytes: a PNG signature, then filler that
#                            differs from one call to the next and repeats
#                            only every 64 KiB (a slice sent at another
#                            offset than a multiple of that shows)
#     image_rows(SID)        the rows of images of the session SID
#     read_some(S, N, SECS)  reads from the socket S until N bytes came,
#                            it closed, or SECS seconds (default 10)
#                            passed; returns what came

use strict;
use warnings;

use Exporter qw(import);
use IO::Select ();
use Time::HiRes ();
use Session ();

our @EXPORT_OK = qw(png_bytes image_rows read_some);

my $Serial = 0;

sub png_bytes {
    my ($n) = @_;
    my $seed = ++$Serial * 7919;
    my $s = "\x89PNG\r\n\x1a\n";
    my $block = join '', map { $seed = ($seed * 1103515245 + 12345) % 2**31;
                               pack 'N', $seed } 1 .. 16384;
    $s .= $block while length $s < $n;
    return substr $s, 0, $n;
}

sub image_rows {
    my ($sid) = @_;
    return Session::psql('SELECT count(*) FROM images WHERE session_id = '
                         . Session::sql_quote($sid));
}

sub read_some {
    my ($s, $want, $secs) = @_;

    my $sel = IO::Select->new($s);
    my $deadline = Time::HiRes::time() + ($secs // 10);
    my $buf = '';

    while (length $buf < $want) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0 || !$sel->can_read($left);
        my $n = sysread $s, my $chunk,
                        $want - length $buf < 65536 ? $want - length $buf
                                                    : 65536;
        last unless $n;
        $buf .= $chunk;
    }

    return $buf;
}

1;
