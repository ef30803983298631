# t/008-images.t again, every block and check as it is, with
# session_image_chunk_size 16 at the http level (the blocks with an
# http_config of their own too): every image over 16 bytes is uploaded
# with COPY on an upload connection (db_copy.c) and downloaded in slices
# of 16 bytes, so that the streamed paths answer exactly what the
# whole-image paths answer (docs/api.md §5).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

BEGIN { $ENV{TEST_NGINX_SESSION_IMAGE_CHUNK} = '16'; }

my $script = './t/008-images.t';

unless (defined do $script) {
    die "$script: $@" if $@;
    die "$script: $!" if $!;
}
