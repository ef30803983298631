# The README's layout table against the tree and config: every folder of
# src/ is in the table, every file the table names exists, every source
# and header that config builds (SESSION_SRCS, SESSION_DEPS) and every
# C file of the module's folders is named in its folder's row, so that
# the table cannot drift from the code again.  Starts no nginx.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Find ();
use Test::More;

my $root = dirname(dirname(__FILE__));
$root = '.' if $root eq '';

sub slurp {
    my ($f) = @_;
    open my $fh, '<', "$root/$f" or die "$f: $!";
    local $/;
    return scalar <$fh>;
}

# the rows of the table under "## Layout": folder => [names]
my $readme = slurp('README.md');
my ($section) = $readme =~ /^## Layout\n(.*?)(?=^## )/ms;
ok(defined $section, 'README has a Layout section');

my %rows;
for my $line (split /\n/, $section // '') {
    next unless $line =~ /^\|\s*`([^`]+)`[^|]*\|\s*([^|]*)\|/;
    my ($folder, $files) = ($1, $2);
    next if $folder eq 'folder';
    $files =~ s/`//g;
    $rows{$folder} = [grep { length } map { s/^\s+|\s+$//gr } split /,/, $files];
}

ok(scalar keys %rows >= 8, 'the table has its rows (' . (scalar keys %rows) . ')');

# the file a name in a row stands for: "name" is .c (and its .h if any),
# "name.h" a header alone
sub files_of {
    my ($folder, $name) = @_;
    return ("$folder$name") if $name =~ /\.c$/ && $folder eq './';
    return () if $name =~ /[*<>]/ || $name =~ /^NNN/;
    return ("${folder}ngx_http_session_$name") if $name =~ /\.h$/;
    return ("${folder}$name") if $name =~ /\.c$/;
    return ("${folder}ngx_http_session_$name.c");
}

my %named;
for my $folder (sort keys %rows) {
    next unless $folder =~ m{^(?:src/|\./)};
    for my $name (@{ $rows{$folder} }) {
        for my $f (files_of($folder, $name)) {
            (my $path = $f) =~ s{^\./}{};
            ok(-f "$root/$path", "$path, named in the table, exists");
            $named{$path} = 1;
            (my $h = $path) =~ s/\.c$/.h/;
            $named{$h} = 1 if $path =~ /\.c$/;
        }
    }
}

# every folder of src/ has a row
opendir my $dh, "$root/src" or die "src: $!";
for my $d (sort grep { !/^\./ && -d "$root/src/$_" } readdir $dh) {
    ok(exists $rows{"src/$d/"}, "src/$d/ has a row in the table");
}
closedir $dh;

# every row's folder exists
for my $folder (sort keys %rows) {
    for my $f (split /,\s*/, $folder =~ s/`//gr) {
        next if $f eq './';
        ok(-d "$root/$f", "the table's $f exists");
    }
}

# config's sources and headers are all named
my $config = slurp('config');
for my $var (qw(SESSION_SRCS SESSION_DEPS)) {
    my ($list) = $config =~ /^$var="(.*?)"/ms;
    ok(defined $list, "config has $var");
    for my $f ($list =~ m{\$ngx_addon_dir/(\S+\.[ch])}g) {
        ok($named{$f}, "$f (config's $var) is named in the table");
    }
}

# every C file of the module's folders is built and named
my @module;
File::Find::find(sub {
    return unless /\.[ch]$/;
    my $p = $File::Find::name =~ s{^\Q$root\E/}{}r;
    return if $p =~ m{^src/(?:cli|sql)/};
    push @module, $p;
}, "$root/src");

for my $f (sort @module) {
    ok($named{$f}, "$f is named in the table");
    ok($config =~ /\Q$f\E/, "$f is in config") if $f =~ /\.c$/;
}

done_testing();
