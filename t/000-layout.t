# The README's layout table against the tree and config: every folder of
# src/ is in the table, every file the table names exists, every source
# and header that config builds (SESSION_SRCS, SESSION_DEPS) and every
# C file of the module's folders is named in its folder's row, so that
# the table cannot drift from the code again.  And docs/benchmarks.md
# against the sources that write it, so that "make bench" loses nothing
# of it (below).  Starts no nginx.

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


# docs/benchmarks.md is written by util/bench.sh from its run (its own
# text and what util/bench-*.sh print) and from bench/*.md, kept by
# hand, which it puts between two marks.  Every "## " and "### " heading
# of the page comes from those sources, every bench/*.md is placed by
# util/bench.sh, in the page's order, and each part kept by hand is in
# the page as its file is: a part added to or edited in the page alone
# would be lost at the next "make bench" (edit the file, then
# "make bench-page", which is "bash util/bench.sh --page").
my $page = slurp('docs/benchmarks.md');
my $bench_sh = slurp('util/bench.sh');

opendir my $ud, "$root/util" or die "util: $!";
my @scripts = sort grep { /^bench.*\.sh$/ } readdir $ud;
closedir $ud;
opendir my $bd, "$root/bench" or die "bench: $!";
my @hand = sort map { s/\.md$//r } grep { /\.md$/ } readdir $bd;
closedir $bd;

my $scripts = join '', map { slurp("util/$_") } @scripts;
$scripts =~ s/\\([`\$])/$1/g;    # as a here-document writes them
my %hand_text = map { $_ => slurp("bench/$_.md") } @hand;

my @headings = $page =~ /^(#{2,3} .+)$/mg;
ok(@headings >= 20, 'benchmarks.md has its headings (' . @headings . ')');
for my $h (@headings) {
    my $written = $scripts =~ /(?:^|")\Q$h\E(?:"|$)/m
        || grep { $hand_text{$_} =~ /^\Q$h\E$/m } @hand;
    (my $name = $h) =~ s/^#+ //;
    ok($written, "benchmarks.md's heading \"$name\" is written by"
                 . " util/bench*.sh or kept in bench/*.md");
}

# the page's parts kept by hand, in order
my (@placed, %block);
my $begin = qr{^<!-- kept by hand: bench/([\w.-]+)\.md -->\n}m;
while ($page =~ m{$begin(.*?)^<!-- end of bench/\1\.md -->$}msg) {
    push @placed, $1;
    $block{$1} = $2;
}

# util/bench.sh's calls that place them, in order
my @calls;
for my $line (split /\n/, $bench_sh) {
    next if $line =~ /^\s*#/;
    for my $name ($line =~ /(?:^\s*|\$\()(?:hand|part) ([a-z][\w-]*)/g) {
        push @calls, $name unless grep { $_ eq $name } @calls;
    }
}

for my $name (@hand) {
    ok((grep { $_ eq $name } @calls),
       "bench/$name.md is placed by util/bench.sh");
    ok(exists $block{$name}, "bench/$name.md is in benchmarks.md");
    next unless exists $block{$name};
    my $same = $block{$name} eq $hand_text{$name};
    ok($same, "benchmarks.md holds bench/$name.md as it is");
    next if $same;
    my @a = split /\n/, $block{$name}, -1;
    my @b = split /\n/, $hand_text{$name}, -1;
    my $i = 0;
    $i++ while $i < @a && $i < @b && $a[$i] eq $b[$i];
    diag("first difference at line " . ($i + 1) . " of bench/$name.md:\n"
         . "  page: " . ($a[$i] // '(end)') . "\n"
         . "  file: " . ($b[$i] // '(end)') . "\n"
         . "edit bench/$name.md, then: make bench-page");
}
is_deeply(\@placed, \@calls,
          'benchmarks.md has the parts kept by hand in util/bench.sh\'s order');


# Every citation points at a file a clone has: none names the shared
# contract or design notes the project was started from, which are not
# in the repository (docs/api.md and docs/decisions.md hold what they
# say), nor an issue by its number.  Read: every file under the repository's own
# folders that is text, but util/openapi's installed packages.
my @cited;

File::Find::find({ no_chdir => 1, wanted => sub {
    if (-d $_) {
        $File::Find::prune = 1
            if m{/(?:\.git|node_modules|build|servroot)$};
        return;
    }
    return unless -f $_ && -T $_;
    my $rel = substr $_, length($root) + 1;
    open my $fh, '<', $_ or return;
    while (my $line = <$fh>) {
        push @cited, "$rel:$.: $line"
            if $line =~ /\b(?:API|DESIGN)\.md\b|\b[Ii]ssues? #?\d+\b/;
    }
} }, map { "$root/$_" } grep { -e "$root/$_" }
     qw(src t util docs bench debian README.md Makefile config .ci));

is(scalar @cited, 0, 'no citation of a file or issue a clone does not have')
    or diag(join '', @cited[0 .. (@cited < 20 ? $#cited : 19)]);


# A C file of over 1,000 lines says why at its top (in its first
# comment: how long it is, and the reason it is not split)
File::Find::find({ no_chdir => 1, wanted => sub {
    return unless /\.c$/ && -f $_;
    my $rel = substr $_, length($root) + 1;
    open my $fh, '<', $_ or return;
    my @lines = <$fh>;
    return if @lines <= 1000;
    my $top = join '', @lines[0 .. 79];
    ok($top =~ /\b(?:[\d,]+|a thousand) lines\b/i,
       "$rel (" . @lines . " lines) says at its top why it is that long");
} }, "$root/src");

done_testing();
