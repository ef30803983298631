# t/040-idempotency-commit.t again, every block and check as it is, with
# session_image_chunk_size 16 (the blocks with an http_config of their
# own too): a keyed upload of an image over 16 bytes goes through the
# streamed path (db_copy.c), whose first statement takes the key's lock
# and reads its row and whose last keeps the answer with the image, in
# one transaction (docs/decisions.md (zd)).  The answers must be those of
# the one statement of a smaller image, byte for byte.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

BEGIN { $ENV{TEST_NGINX_SESSION_IMAGE_CHUNK} = '16'; }

my $script = './t/040-idempotency-commit.t';

unless (defined do $script) {
    die "$script: $@" if $@;
    die "$script: $!" if $!;
}
