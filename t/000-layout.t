# The README's layout table against the tree and config: every folder of
# src/ is in the table, every file the table names exists, every source
# and header that config builds (SESSION_SRCS, SESSION_DEPS) and every
# C file of the module's folders is named in its folder's row, so that
# the table cannot drift from the code again.  And docs/benchmarks.md
# against the sources that write it, so that "make bench" loses nothing
# of it (below).  And the pages' relative links and the Content-Length
# of their examples (at the end).  Starts no nginx.

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Find ();
use File::Spec ();
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


# The pages' links and examples.  Every relative Markdown link of
# README.md and docs/*.md, outside fenced code blocks and code spans,
# points at a file or folder that exists (relative to the linking
# file's folder), and its #anchor, if any, is the slug of a heading of
# the page it names, as GitHub makes it: the heading's text in lower
# case, every character but letters, digits, spaces, '-' and '_'
# removed, each space made a '-'; a second heading of the same slug
# gets -1, a third -2, and so on.
my @pages = ('README.md', map { "docs/$_" } do {
    opendir my $pd, "$root/docs" or die "docs: $!";
    my @md = sort grep { /\.md$/ } readdir $pd;
    closedir $pd;
    @md;
});

# a page's lines, each with whether it is inside a fenced code block
# (the fence lines themselves count as inside)
sub page_lines {
    my ($f) = @_;
    my (@out, $fence);
    for my $line (split /\n/, slurp($f), -1) {
        if (defined $fence) {
            push @out, [$line, 1];
            undef $fence if $line =~ /^\s*\Q$fence\E+\s*$/;
        } elsif ($line =~ /^\s*(`{3,}|~{3,})/) {
            $fence = $1;
            push @out, [$line, 1];
        } else {
            push @out, [$line, 0];
        }
    }
    return @out;
}

sub slug {
    my ($text) = @_;
    utf8::decode($text);
    $text =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;    # a link: its text
    $text =~ s/<[^>]+>//g;                      # HTML tags
    $text = lc $text;
    $text =~ s/[^\p{L}\p{M}\p{N}_ -]//g;
    $text =~ s/ /-/g;
    utf8::encode($text);
    return $text;
}

my %anchors;    # page => { slug => 1 }
sub anchors_of {
    my ($f) = @_;
    return $anchors{$f} if $anchors{$f};
    my (%seen, %slugs);
    for (page_lines($f)) {
        my ($line, $code) = @$_;
        next if $code || $line !~ /^#{1,6}\s+(.*?)\s*#*\s*$/;
        my $s = slug($1);
        my $n = $seen{$s}++;
        $slugs{$n ? "$s-$n" : $s} = 1;
    }
    return $anchors{$f} = \%slugs;
}

my ($links, @bad_links) = (0);
for my $page (@pages) {
    my $dir = dirname($page);
    my $n = 0;
    for (page_lines($page)) {
        my ($line, $code) = @$_;
        $n++;
        next if $code;
        $line =~ s/(`+).*?\1//g;                     # code spans
        while ($line =~ /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g) {
            my $target = $1;
            next if $target =~ /^(?:https?|mailto):/i;
            $links++;
            my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
            my $file = $path eq '' ? $page
                     : File::Spec->canonpath("$dir/$path");
            1 while $file =~ s{(^|/)(?!\.\./)[^/]+/\.\./}{$1};
            if (!-e "$root/$file") {
                push @bad_links, "$page:$n: $target (no $file)";
            } elsif (defined $anchor && $file =~ /\.md$/
                     && !anchors_of($file)->{$anchor}) {
                push @bad_links, "$page:$n: $target (no heading"
                                 . " #$anchor in $file)";
            }
        }
    }
}
ok($links >= 100, "the pages have their links ($links)");
is(scalar @bad_links, 0, 'every relative link of README.md and docs/*.md'
                         . ' names a file and a heading that exist')
    or diag(join "\n", @bad_links);

# Every Content-Length of an example is the length of its body: in a
# fenced code block of those pages, a "Content-Length: N" whose header
# lines end in a blank line and a body of one line has N equal to that
# line's length in bytes; a request shown without its body (or with
# one cut short by an ellipsis: the webhook request of docs/api.md §7.2
# and docs/webhooks.md) has N equal to the length of the nearest
# ```json block before it in the page, its lines joined without their
# line ends (the body is one line, that block may wrap it).
my ($lengths, @bad_lengths) = (0);
for my $page (@pages) {
    my @lines = page_lines($page);
    my ($json, $in_json, $block_start);
    for my $i (0 .. $#lines) {
        my ($line, $code) = @{ $lines[$i] };
        if (!$code) {
            undef $block_start;
            next;
        }
        if ($line =~ /^\s*(`{3,}|~{3,})(\S*)/ && !defined $block_start) {
            $block_start = $i;
            $in_json = $2 eq 'json';
            $json = '' if $in_json;
            next;
        }
        if ($line =~ /^\s*(`{3,}|~{3,})\s*$/) {
            undef $block_start;
            $in_json = 0;
            next;
        }
        $json .= $line if $in_json;
        next unless $line =~ /^Content-Length:\s*(\d+)\s*$/;
        my $n = $1;
        # the header lines after it, up to the blank line or the end of
        # the block
        my $j = $i + 1;
        $j++ while $j <= $#lines && $lines[$j][1]
                   && $lines[$j][0] =~ /^(?:[A-Za-z0-9-]+:\s|\.\.\.$|…$)/;
        my $body;
        if ($j < $#lines && $lines[$j][0] eq '' && $lines[$j + 1][1]
            && $lines[$j + 1][0] !~ /^\s*(?:`{3,}|~{3,})/) {
            my $next = $lines[$j + 1][0];
            my $after = $j + 2 <= $#lines ? $lines[$j + 2] : undef;
            $body = $next
                if $next =~ /^[\[{]/ && $next !~ /…|\.\.\./
                   && (!$after || !$after->[1] || $after->[0] eq ''
                       || $after->[0] =~ /^\s*(?:`{3,}|~{3,})/);
        }
        # the first line of the shown message: a request line or a status
        my $k = $i;
        $k-- while $k > $block_start + 1
                   && $lines[$k][0] !~ m{^(?:HTTP/|[A-Z]+ \S+ HTTP/)};
        my $request = $lines[$k][0] =~ m{^[A-Z]+ \S+ HTTP/};
        my $where = "$page:" . ($i + 1);
        if (defined $body) {
            $lengths++;
            push @bad_lengths, "$where: Content-Length: $n, the body has "
                               . length($body) . ' bytes'
                if length($body) != $n;
        } elsif ($request) {
            $lengths++;
            if (!defined $json) {
                push @bad_lengths, "$where: no ```json block before it";
            } elsif (length($json) != $n) {
                push @bad_lengths, "$where: Content-Length: $n, the ```json"
                                   . ' block before it has '
                                   . length($json) . ' bytes';
            }
        }
    }
}
ok($lengths >= 5, "the examples have their Content-Length lines ($lengths)");
is(scalar @bad_lengths, 0, 'every Content-Length of an example is the'
                           . ' length of its body')
    or diag(join "\n", @bad_lengths);

done_testing();
