# t/011-idempotency.t again, every block and check as it is, with
# session_image_chunk_size 16 at the http level (the blocks with an
# http_config of their own too): a keyed upload of an image over 16
# bytes goes through the streamed path (db_copy.c), whose first
# statement takes the key's lock and reads its row and whose last one
# keeps the answer with the image, in the same transaction
# (docs/decisions.md (zd)).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

BEGIN { $ENV{TEST_NGINX_SESSION_IMAGE_CHUNK} = '16'; }

my $script = './t/011-idempotency.t';

unless (defined do $script) {
    die "$script: $@" if $@;
    die "$script: $!" if $!;
}
