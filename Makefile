# ngx_http_session_module: build, local stack, tests, benchmarks.
#
#   make            build/ngx_http_session_module.so and build/sessionctl
#   make run        local PostgreSQL + nginx on 127.0.0.1:8080, demo key
#                   (make run RUN_ADDR=127.0.0.1:8090 listens there)
#   make stop       stop them
#   make test       deps, build, Check unit tests, Test::Nginx suite
#   make bench      wrk benchmarks on loopback (bounded)
#   make bench-page bench/*.md (kept by hand) into docs/benchmarks.md,
#                   no run
#   make bench-poll the long-poll fan-out beside nchan and its floor
#   make bench-cost CPU time per request at a fixed rate beside pgbench -R
#   make bench-cluster three nodes of each session_limit_scope (in bench)
#   make lint       80 columns, no tabs, cppcheck; shellcheck of the scripts
#   make openapi    validate docs/openapi.yaml (part of make test too)
#   make deb        build/deb/libnginx-mod-http-session_*.deb for this
#                   machine's Debian release (+ that release's lintian)
#   make deb-test   that package installed into a clean root of this
#                   machine's release (debootstrap, build/roots/): nginx -t,
#                   a create and a long poll against its PostgreSQL
#   make test-debian13  make test in a Debian 13 root (its nginx 1.26.3,
#                   PostgreSQL 17, OpenSSL 3.5), then its package
#                   (build/deb-trixie/) tested as by make deb-test in a
#                   clean Debian 13 root (needs root; util/debroot.sh)
#   make fuzz       libFuzzer harnesses of src/core, ASan + UBSan, bounded
#                   (FUZZ_SECONDS=60 each); not part of make test
#   make fuzz-http  whole HTTP requests mutated from valid ones against
#                   nginx (2 workers, the ASan build when build/asan/ has
#                   one) and a throw-away PostgreSQL on loopback
#                   (util/fuzz-http.sh): FUZZ_HTTP_SECONDS=180,
#                   FUZZ_HTTP_SEED=N repeats a run; not part of make test
#   make asan       unit tests, nginx and the module under ASan + UBSan +
#                   LeakSanitizer, every Test::Nginx script (~15 min)
#   make sweep      raw-socket bad-input sweep (util/sweep.pl) against an
#                   nginx of t/025-sweep.t: SWEEP_COUNT=5000 requests at
#                   most, SWEEP_SECONDS=300, SWEEP_SEED=N repeats a run
#   make test-upstream UPSTREAM_SRC=/path/to/nginx-1.x
#                   nginx and the module built from upstream nginx's
#                   source (--with-debug, HTTP/2, HTTP/3), the whole suite
#                   against it (util/test-upstream.sh; not in CI)
#   make test-level-events
#                   nginx built with its poll and select modules, then
#                   t/057-level-events.t and the scripts of the long poll,
#                   uploads and webhooks under each of those methods
#                   (util/test-level-events.sh; not in CI)
#   make bench-poll-proto
#                   memory of a waiting long poll over HTTP/1.1, TLS,
#                   HTTP/2 and HTTP/3 (util/bench-poll-proto.sh)
#   make failover   a primary and a pg_basebackup standby on loopback
#                   (ports 2420-2422), load, two failovers: the module
#                   follows the new primary (~25 s; not part of make test)
#   make upgrade-test  the module before the newest migration and this
#                   one as two nodes on one database, migrate and a
#                   rolling upgrade under traffic; a reload and a binary
#                   upgrade (USR2) under load with 1,000 long polls
#                   (ports 2430-2434, ~2 min; not part of make test)
#
# NGINX_SRC=/path/to/nginx-1.x builds against another nginx source tree.

# Recipes use bash: Debian's conf_flags is a bash array, which dash (the
# default /bin/sh) cannot source.
SHELL       := /bin/bash

NGINX_SRC   ?= /usr/share/nginx/src
BUILD       := build
NGX_BUILD   := $(BUILD)/nginx
CC          ?= cc

WARN        := -Wall -Wextra -Werror -Wno-unused-parameter
# dpkg-buildflags' hardening flags when debian/rules exports them; empty
# otherwise
HARDEN_CC   := $(strip $(CPPFLAGS) $(CFLAGS))
HARDEN_LD   := $(strip $(LDFLAGS))
PQ_INC      := $(shell pg_config --includedir 2>/dev/null || \
                       echo /usr/include/postgresql)
CORE_SRCS   := $(wildcard src/core/*.c)
CORE_HDRS   := $(wildcard src/core/*.h)
CLI_SRCS    := $(wildcard src/cli/*.c)
CLI_HDRS    := $(wildcard src/cli/*.h)
SQL_FILES   := $(sort $(wildcard src/sql/*.sql))
# the module: every folder of src/ but the admin tool's (and src/sql/)
MOD_SRCS    := ngx_http_session_module.c \
               $(filter-out src/cli/%,$(wildcard src/*/*.c))
MOD_HDRS    := $(wildcard src/*.h) $(filter-out src/cli/%,$(wildcard src/*/*.h))
UNIT_SRCS   := $(wildcard t/unit/*.c)

.PHONY: all build deps run stop test unit integration bench bench-poll bench-cost bench-cluster chaos lint \
        clean distclean openapi deb deb-test fuzz asan sanitizer-deps \
        failover sweep upgrade-test test-debian13 test-upstream \
        test-level-events \
        bench-poll-proto bench-notify bench-page

all: build

build: $(BUILD)/ngx_http_session_module.so $(BUILD)/sessionctl

deps:
	@bash util/install-deps.sh

# Configure a private copy of the nginx tree once, with the flags of the
# nginx binary the module will load into (Debian's conf_flags).
$(NGX_BUILD)/objs/Makefile: config
	@rm -rf $(NGX_BUILD) && mkdir -p $(BUILD)
	cp -r $(NGINX_SRC) $(NGX_BUILD)
	cd $(NGX_BUILD) && \
	    flags=""; \
	    if [ -f conf_flags ]; then \
	        . ./conf_flags; flags="$${NGX_CONF_FLAGS[*]}"; \
	    elif [ -x /usr/sbin/nginx ] && [ "$(NGINX_SRC)" = /usr/share/nginx/src ]; then \
	        flags="--with-compat"; \
	    else \
	        flags="--with-compat --with-http_ssl_module"; \
	    fi; \
	    eval ./configure $$flags \
	        --with-cc-opt="'-g -O2 -fPIC $(WARN) $(HARDEN_CC)'" \
	        --with-ld-opt="'-fPIC $(HARDEN_LD)'" \
	        --add-dynamic-module=$(CURDIR) >$(abspath $(BUILD))/configure.log 2>&1 \
	    || { tail -30 $(BUILD)/configure.log; exit 1; }

$(BUILD)/ngx_http_session_module.so: $(NGX_BUILD)/objs/Makefile $(MOD_SRCS) \
                                     $(MOD_HDRS)
	$(MAKE) -C $(NGX_BUILD) -f objs/Makefile modules
	# a new file, not an overwrite: a running nginx maps the old one
	cp $(NGX_BUILD)/objs/ngx_http_session_module.so $@.tmp && mv -f $@.tmp $@

# the list of migrations as a file that changes only when the list does:
# a migration removed (or a branch switched) rebuilds the header too
$(BUILD)/sql-files: FORCE
	@mkdir -p $(BUILD)
	@echo '$(SQL_FILES)' | cmp -s - $@ || echo '$(SQL_FILES)' > $@

FORCE:

$(BUILD)/ngx_http_session_migrations.h: $(SQL_FILES) $(BUILD)/sql-files \
                                        util/embed-sql.sh
	@mkdir -p $(BUILD)
	bash util/embed-sql.sh $(SQL_FILES) > $@.tmp && mv $@.tmp $@

$(BUILD)/sessionctl: $(CLI_SRCS) $(CLI_HDRS) $(CORE_SRCS) $(CORE_HDRS) \
                     $(BUILD)/ngx_http_session_migrations.h
	$(CC) -g -O2 $(WARN) $(HARDEN_CC) -Isrc/core -Isrc/cli -I$(BUILD) \
	    -I$(PQ_INC) -o $@ $(CLI_SRCS) $(CORE_SRCS) $(HARDEN_LD) \
	    -lpq -ljansson -lcrypto

$(BUILD)/unit_tests: $(UNIT_SRCS) $(wildcard t/unit/*.h) $(CORE_SRCS) \
                      $(CORE_HDRS)
	@mkdir -p $(BUILD)
	$(CC) -g -O0 $(WARN) -Isrc/core -It/unit -o $@ $(UNIT_SRCS) \
	    $(CORE_SRCS) $$(pkg-config --cflags --libs check) -ljansson -lcrypto

run: deps build
	@bash util/run.sh start

stop:
	@bash util/run.sh stop

unit: $(BUILD)/unit_tests
	$(BUILD)/unit_tests

integration: build
	@bash util/test.sh

test: deps
	@$(MAKE) --no-print-directory build $(BUILD)/unit_tests
	@$(MAKE) --no-print-directory unit
	@bash util/test.sh

bench: deps build
	@bash util/bench.sh

bench-page:
	@bash util/bench.sh --page

bench-poll: deps build
	@bash util/bench-poll.sh

bench-cost: deps build
	@BENCH_DB_MODE=cost bash util/bench-db.sh

bench-notify: deps
	@bash util/bench-notify.sh

bench-poll-proto: deps build
	@bash util/bench-poll-proto.sh

test-upstream: deps
	@test -n "$(UPSTREAM_SRC)" \
	    || { echo "make test-upstream UPSTREAM_SRC=/path/to/nginx-1.x"; exit 1; }
	@bash util/test-upstream.sh $(UPSTREAM_SRC)

test-level-events: deps
	@bash util/test-level-events.sh

bench-cluster: deps build
	@bash util/bench-cluster.sh

chaos: deps build
	@bash util/chaos.sh

failover: deps build
	@bash util/failover.sh

upgrade-test: deps build
	@bash util/upgrade.sh

lint:
	@bash util/lint.sh

openapi: deps
	@prove t/019-openapi.t

deb:
	@bash util/install-deps.sh --deb
	@bash util/deb.sh build

deb-test: deb
	@bash util/debroot.sh deb-test

test-debian13:
	@bash util/debroot.sh test-debian13

sanitizer-deps:
	@bash util/install-sanitizer-deps.sh

fuzz: sanitizer-deps
	@bash fuzz/run.sh

.PHONY: fuzz-http
fuzz-http: deps build
	@bash util/fuzz-http.sh

asan: deps sanitizer-deps
	@$(MAKE) --no-print-directory $(BUILD)/sessionctl
	@bash util/asan.sh

sweep: deps build
	@SWEEP_COUNT=$${SWEEP_COUNT:-5000} SWEEP_SECONDS=$${SWEEP_SECONDS:-300} \
	    SWEEP_STALLS=$${SWEEP_STALLS:-8} bash util/test.sh t/025-sweep.t

clean:
	rm -rf $(BUILD)

distclean: stop clean
	rm -rf .run
