/*
 * ngx_http_session_module: the Session Service API inside nginx.
 *
 * Directives, configuration, and the process hooks that open the
 * per-worker PostgreSQL connections.
 *
 * A little over a thousand lines: the module's definition, in nginx's
 * order (the command table, the configuration's create and merge, the
 * process hooks) and the checks of the directives that belong to no
 * folder; the database's directives are db/db_conf.c's.
 */

#include "ngx_http_session_common.h"

#if (NGX_LINUX && defined __GLIBC__)
#include <malloc.h>
#endif

#include "ngx_http_session_auth.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_db_conf.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_handler.h"
#include "ngx_http_session_handover.h"
#include "ngx_http_session_lease.h"
#include "ngx_http_session_lease_sample.h"
#include "ngx_http_session_status.h"
#include "ngx_http_session_limit.h"
#include "ngx_http_session_db_listen.h"
#include "ngx_http_session_db_relay.h"
#include "ngx_http_session_log.h"
#include "ngx_http_session_poll.h"
#include "ngx_http_session_zone.h"
#include "ngx_http_session_sweep.h"
#include "ngx_http_session_webhook.h"
#include "ngx_http_session_variables.h"


#define NGX_HTTP_SESSION_DEFAULT_ZONE       "session_limits"
#define NGX_HTTP_SESSION_DEFAULT_ZONE_SIZE  (10 * 1024 * 1024)
#define NGX_HTTP_SESSION_DEFAULT_PREFIX     "sess"
#define NGX_HTTP_SESSION_DEFAULT_IMAGE_MAX  (10 * 1024 * 1024)
/*
 * Allocations from this size on are mmap()ed and returned to the system
 * when freed (see ngx_http_session_init_process())
 */
#define NGX_HTTP_SESSION_MMAP_THRESHOLD     (512 * 1024)
/* the longest long poll: past it proxies and clients give up anyway */
#define NGX_HTTP_SESSION_POLL_MAX_LIMIT     3600
/* PostgreSQL holds at most 1 GB in a field, protocol overhead included */
#define NGX_HTTP_SESSION_IMAGE_MAX_LIMIT    (512 * 1024 * 1024)

/*
 * session_image_chunk_size: the piece of an image that a worker holds
 * per upload or download in flight (see docs/decisions.md, "Images")
 */
#define NGX_HTTP_SESSION_IMAGE_CHUNK        (64 * 1024)
/* below a few kilobytes only a test wants it: a query per slice */
#define NGX_HTTP_SESSION_IMAGE_CHUNK_MIN    16
#define NGX_HTTP_SESSION_IMAGE_CHUNK_MAX    (1024 * 1024)

/*
 * session_body_buffer_size: a body up to it is gathered in memory, and an
 * image that size goes to PostgreSQL whole (docs/decisions.md, (zh))
 */
#define NGX_HTTP_SESSION_BODY_BUFFER        (128 * 1024)
#define NGX_HTTP_SESSION_BODY_BUFFER_MAX    (16 * 1024 * 1024)

/* session_image_upload_connections: streamed uploads at once per worker */
#define NGX_HTTP_SESSION_IMAGE_UPLOADS      2


static ngx_int_t ngx_http_session_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_session_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_session_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_session_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_session_create_srv_conf(ngx_conf_t *cf);
static char *ngx_http_session_merge_srv_conf(ngx_conf_t *cf, void *parent,
    void *child);
static void *ngx_http_session_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_session_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_session_api(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_session_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_session_key_prefix(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_session_positive_msec(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_session_positive_sec(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_session_db_batch_check(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_session_db_connections_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_sweep_interval_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_image_uploads_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_image_chunk_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_body_buffer_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_image_max_size_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_poll_timeout_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_poll_max_check(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_session_webhook_attempts_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_webhook_concurrency_check(ngx_conf_t *cf,
    void *post, void *data);
static char *ngx_http_session_trusted_where(ngx_conf_t *cf, void *post,
    void *data);
static ngx_int_t ngx_http_session_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_session_init_process(ngx_cycle_t *cycle);
static void ngx_http_session_exit_process(ngx_cycle_t *cycle);


static ngx_conf_post_t  ngx_http_session_trusted_post = {
    ngx_http_session_trusted_where
};

static ngx_conf_post_t  ngx_http_session_db_connections_post = {
    ngx_http_session_db_connections_check
};

static ngx_conf_post_t  ngx_http_session_db_batch_post = {
    ngx_http_session_db_batch_check
};

static ngx_conf_post_t  ngx_http_session_image_uploads_post = {
    ngx_http_session_image_uploads_check
};

static ngx_conf_post_t  ngx_http_session_sweep_interval_post = {
    ngx_http_session_sweep_interval_check
};

static ngx_conf_post_t  ngx_http_session_positive_msec_post = {
    ngx_http_session_positive_msec
};

static ngx_conf_post_t  ngx_http_session_positive_sec_post = {
    ngx_http_session_positive_sec
};

static ngx_conf_post_t  ngx_http_session_image_chunk_post = {
    ngx_http_session_image_chunk_check
};

static ngx_conf_post_t  ngx_http_session_body_buffer_post = {
    ngx_http_session_body_buffer_check
};

static ngx_conf_post_t  ngx_http_session_image_max_size_post = {
    ngx_http_session_image_max_size_check
};

static ngx_conf_post_t  ngx_http_session_poll_timeout_post = {
    ngx_http_session_poll_timeout_check
};

static ngx_conf_post_t  ngx_http_session_poll_max_post = {
    ngx_http_session_poll_max_check
};

static ngx_conf_post_t  ngx_http_session_webhook_attempts_post = {
    ngx_http_session_webhook_attempts_check
};

static ngx_conf_post_t  ngx_http_session_webhook_concurrency_post = {
    ngx_http_session_webhook_concurrency_check
};

/* what the node's LISTEN connection wakes in each worker (db_relay.h) */
static const ngx_http_session_relay_handlers_t  ngx_http_session_wake = {
    ngx_http_session_poll_wake,
    ngx_http_session_poll_wake_all,
    ngx_http_session_webhook_wake
};


static ngx_command_t  ngx_http_session_commands[] = {

    { ngx_string("session_api"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_session_api,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_session_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_db"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_db,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_db_listen"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_db_listen,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_db_pooler"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_db_pooler,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_db_connections"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, db_connections),
      &ngx_http_session_db_connections_post },

    { ngx_string("session_db_batch"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, db_batch),
      &ngx_http_session_db_batch_post },

    { ngx_string("session_db_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, db_timeout),
      &ngx_http_session_positive_msec_post },

    { ngx_string("session_db_idle_check"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, db_idle_check),
      NULL },

    { ngx_string("session_limit_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_limit_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_limits"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_session_limits,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, ttl),
      &ngx_http_session_positive_sec_post },

    { ngx_string("session_max_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, max_ttl),
      &ngx_http_session_positive_sec_post },

    { ngx_string("session_image_max_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_off_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, image_max_size),
      &ngx_http_session_image_max_size_post },

    { ngx_string("session_image_chunk_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, image_chunk_size),
      &ngx_http_session_image_chunk_post },

    { ngx_string("session_body_buffer_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, body_buffer_size),
      &ngx_http_session_body_buffer_post },

    { ngx_string("session_image_upload_connections"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, image_upload_connections),
      &ngx_http_session_image_uploads_post },

    { ngx_string("session_poll_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, poll_timeout),
      &ngx_http_session_poll_timeout_post },

    { ngx_string("session_poll_max_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, poll_max_timeout),
      &ngx_http_session_poll_max_post },

    { ngx_string("session_poll_park"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_session_loc_conf_t, poll_park),
      NULL },

    { ngx_string("session_webhook_allow_private"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, webhook_allow_private),
      NULL },

    { ngx_string("session_webhook_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, webhook_timeout),
      &ngx_http_session_positive_msec_post },

    { ngx_string("session_webhook_max_attempts"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, webhook_max_attempts),
      &ngx_http_session_webhook_attempts_post },

    { ngx_string("session_webhook_concurrency"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, webhook_concurrency),
      &ngx_http_session_webhook_concurrency_post },

    { ngx_string("session_webhook_trusted_certificate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, webhook_trusted_certificate),
      &ngx_http_session_trusted_post },

    { ngx_string("session_key_prefix"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_key_prefix,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_auth_cache_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, auth_cache_ttl),
      NULL },

    { ngx_string("session_expiry_sweep_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, sweep_interval),
      &ngx_http_session_sweep_interval_post },

    { ngx_string("session_retention"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_retention,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("session_auth_fail_limit"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_auth_fail_limit,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, auth_fail_limit),
      NULL },

    { ngx_string("session_limit_scope"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_session_limit_scope,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_session_main_conf_t, limit_scope),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_session_module_ctx = {
    ngx_http_session_preconfiguration,     /* preconfiguration */
    ngx_http_session_postconfiguration,    /* postconfiguration */

    ngx_http_session_create_main_conf,     /* create main configuration */
    ngx_http_session_init_main_conf,       /* init main configuration */

    ngx_http_session_create_srv_conf,      /* create server configuration */
    ngx_http_session_merge_srv_conf,       /* merge server configuration */

    ngx_http_session_create_loc_conf,      /* create location configuration */
    ngx_http_session_merge_loc_conf        /* merge location configuration */
};


ngx_module_t  ngx_http_session_module = {
    NGX_MODULE_V1,
    &ngx_http_session_module_ctx,          /* module context */
    ngx_http_session_commands,             /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_session_init_module,          /* init module */
    ngx_http_session_init_process,         /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_session_exit_process,         /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* the access-log variables, before the configuration can name them */

static ngx_int_t
ngx_http_session_preconfiguration(ngx_conf_t *cf)
{
    return ngx_http_session_variables_add(cf);
}


static ngx_int_t
ngx_http_session_postconfiguration(ngx_conf_t *cf)
{
    ngx_array_t                   *a;
    ngx_http_handler_pt           *h;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_session_main_conf_t  *smcf;

    if (ngx_http_session_error_init(cf->log) != NGX_OK) {
        return NGX_ERROR;
    }

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_session_module);

    if (smcf->enabled) {
        cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
        a = &cmcf->phases[NGX_HTTP_ACCESS_PHASE].handlers;

        if (ngx_array_push(a) == NULL) {
            return NGX_ERROR;
        }

        /*
         * The phase engine runs a phase's handlers from the last pushed
         * to the first: put in front, stages 1 and 2 run after every
         * access check of nginx and of other modules.
         */

        h = a->elts;
        ngx_memmove(&h[1], &h[0], (a->nelts - 1) * sizeof(ngx_http_handler_pt));
        h[0] = ngx_http_session_access_handler;

        /* session_status counts the answers of session_api locations */

        h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        *h = ngx_http_session_status_log;
    }

    return ngx_http_session_error_filter_init(cf);
}


static void *
ngx_http_session_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_main_conf_t));
    if (smcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     smcf->db_conninfo = { 0, NULL };
     *     smcf->listen_conninfo = { 0, NULL };
     *     smcf->listen_hosts = NULL;
     *     smcf->shm_zone = NULL;
     *     smcf->key_prefix = { 0, NULL };
     *     smcf->api_file = { 0, NULL };
     *     smcf->status_file = { 0, NULL };
     *     smcf->webhook_trusted_certificate = { 0, NULL };
     *     smcf->webhook_ssl = NULL;
     *     smcf->enabled = 0;
     */

    smcf->db_connections = NGX_CONF_UNSET_UINT;
    smcf->image_upload_connections = NGX_CONF_UNSET_UINT;
    smcf->db_batch = NGX_CONF_UNSET_UINT;
    smcf->db_timeout = NGX_CONF_UNSET_MSEC;
    smcf->db_idle_check = NGX_CONF_UNSET_MSEC;
    smcf->db_pooler = NGX_CONF_UNSET_UINT;
    smcf->auth_cache_ttl = NGX_CONF_UNSET_MSEC;
    smcf->webhook_allow_private = NGX_CONF_UNSET;
    smcf->webhook_timeout = NGX_CONF_UNSET_MSEC;
    smcf->webhook_max_attempts = NGX_CONF_UNSET_UINT;
    smcf->webhook_concurrency = NGX_CONF_UNSET_UINT;
    smcf->sweep_interval = NGX_CONF_UNSET_MSEC;
    smcf->retention = NGX_CONF_UNSET;
    smcf->auth_fail_limit = NGX_CONF_UNSET_UINT;
    smcf->limit_scope = NGX_CONF_UNSET_UINT;

    return smcf;
}


static char *
ngx_http_session_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    ngx_str_t  name;

    ngx_conf_init_uint_value(smcf->db_connections, 4);
    ngx_conf_init_uint_value(smcf->image_upload_connections,
                             NGX_HTTP_SESSION_IMAGE_UPLOADS);
    ngx_conf_init_uint_value(smcf->db_batch, 16);
    ngx_conf_init_msec_value(smcf->db_timeout, 5000);
    ngx_conf_init_msec_value(smcf->db_idle_check, 5000);
    ngx_conf_init_msec_value(smcf->auth_cache_ttl, 5000);
    ngx_conf_init_value(smcf->webhook_allow_private, 0);
    ngx_conf_init_msec_value(smcf->webhook_timeout, 5000);
    ngx_conf_init_uint_value(smcf->webhook_max_attempts,
                             NGX_HTTP_SESSION_WEBHOOK_ATTEMPTS);
    ngx_conf_init_uint_value(smcf->webhook_concurrency,
                             NGX_HTTP_SESSION_WEBHOOK_CONCURRENCY);
    ngx_conf_init_msec_value(smcf->sweep_interval,
                             NGX_HTTP_SESSION_SWEEP_INTERVAL);
    ngx_conf_init_value(smcf->retention, NGX_HTTP_SESSION_RETENTION);
    ngx_conf_init_uint_value(smcf->auth_fail_limit,
                             NGX_HTTP_SESSION_AUTH_FAIL_LIMIT);
    ngx_conf_init_uint_value(smcf->limit_scope, NGX_HTTP_SESSION_SCOPE_NODE);

    if (smcf->key_prefix.data == NULL) {
        ngx_str_set(&smcf->key_prefix, NGX_HTTP_SESSION_DEFAULT_PREFIX);
    }

    if (!smcf->enabled) {
        if (smcf->status_file.data) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "\"session_status\" in %V:%ui needs a "
                          "\"session_api\" location in the same http block",
                          &smcf->status_file, smcf->status_line);
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    if (smcf->db_conninfo.data == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"session_db\" is required where \"session_api\" "
                      "is used in %V:%ui", &smcf->api_file, smcf->api_line);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_session_webhook_init_conf(cf, smcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_session_db_init_conf(cf, smcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (smcf->shm_zone == NULL) {
        ngx_str_set(&name, NGX_HTTP_SESSION_DEFAULT_ZONE);

        smcf->shm_zone = ngx_http_session_zone_add(cf, &name,
                                           NGX_HTTP_SESSION_DEFAULT_ZONE_SIZE);
        if (smcf->shm_zone == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_session_create_srv_conf(ngx_conf_t *cf)
{
    ngx_http_session_srv_conf_t  *sscf;

    sscf = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_srv_conf_t));
    if (sscf == NULL) {
        return NULL;
    }

    sscf->api = NGX_CONF_UNSET;

    return sscf;
}


static char *
ngx_http_session_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_session_srv_conf_t  *prev = parent;
    ngx_http_session_srv_conf_t  *conf = child;

    /* a server is an API server only through its own locations */
    (void) prev;
    ngx_conf_init_value(conf->api, 0);

    return NGX_CONF_OK;
}


static void *
ngx_http_session_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_session_loc_conf_t  *slcf;

    slcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_loc_conf_t));
    if (slcf == NULL) {
        return NULL;
    }

    slcf->api = NGX_CONF_UNSET;
    slcf->limits[NGX_HTTP_SESSION_CLASS_CREATE] = NGX_CONF_UNSET_UINT;
    slcf->limits[NGX_HTTP_SESSION_CLASS_LIST] = NGX_CONF_UNSET_UINT;
    slcf->limits[NGX_HTTP_SESSION_CLASS_OTHER] = NGX_CONF_UNSET_UINT;
    slcf->ttl = NGX_CONF_UNSET;
    slcf->max_ttl = NGX_CONF_UNSET;
    slcf->image_max_size = NGX_CONF_UNSET;
    slcf->image_chunk_size = NGX_CONF_UNSET_SIZE;
    slcf->body_buffer_size = NGX_CONF_UNSET_SIZE;
    slcf->poll_timeout = NGX_CONF_UNSET;
    slcf->poll_max_timeout = NGX_CONF_UNSET;
    slcf->poll_park = NGX_CONF_UNSET;

    return slcf;
}


static char *
ngx_http_session_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_session_loc_conf_t  *prev = parent;
    ngx_http_session_loc_conf_t  *conf = child;

    ngx_http_core_loc_conf_t  *clcf;

    ngx_conf_merge_value(conf->api, prev->api, 0);

    /* each class is inherited on its own */
    ngx_conf_merge_uint_value(conf->limits[NGX_HTTP_SESSION_CLASS_CREATE],
                              prev->limits[NGX_HTTP_SESSION_CLASS_CREATE],
                              100);
    ngx_conf_merge_uint_value(conf->limits[NGX_HTTP_SESSION_CLASS_LIST],
                              prev->limits[NGX_HTTP_SESSION_CLASS_LIST],
                              300);
    ngx_conf_merge_uint_value(conf->limits[NGX_HTTP_SESSION_CLASS_OTHER],
                              prev->limits[NGX_HTTP_SESSION_CLASS_OTHER],
                              200);

    if (ngx_http_session_limit_texts(cf, conf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_sec_value(conf->ttl, prev->ttl, 3600);
    ngx_conf_merge_sec_value(conf->max_ttl, prev->max_ttl, 86400);

    if (conf->ttl > conf->max_ttl) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"session_ttl\" %T must not be greater than "
                           "\"session_max_ttl\" %T",
                           conf->ttl, conf->max_ttl);
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_off_value(conf->image_max_size, prev->image_max_size,
                             NGX_HTTP_SESSION_DEFAULT_IMAGE_MAX);
    ngx_conf_merge_size_value(conf->image_chunk_size, prev->image_chunk_size,
                              NGX_HTTP_SESSION_IMAGE_CHUNK);
    ngx_conf_merge_size_value(conf->body_buffer_size, prev->body_buffer_size,
                              NGX_HTTP_SESSION_BODY_BUFFER);

    ngx_conf_merge_sec_value(conf->poll_timeout, prev->poll_timeout, 30);
    ngx_conf_merge_value(conf->poll_park, prev->poll_park, 1);
    ngx_conf_merge_sec_value(conf->poll_max_timeout, prev->poll_max_timeout,
                             60);

    if (conf->poll_timeout > conf->poll_max_timeout) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"session_poll_timeout\" %T must not be greater "
                           "than \"session_poll_max_timeout\" %T",
                           conf->poll_timeout, conf->poll_max_timeout);
        return NGX_CONF_ERROR;
    }

    if (conf->api) {
        /*
         * The module limits request bodies itself, per route, while they
         * are read (ngx_http_session_error.c): an upload up to
         * session_image_max_size, a sessions body up to 64 KiB, and
         * answers 413 with the route's message, after authentication.
         * nginx's own limit, checked before the handler runs, would
         * answer first; it is lifted here, whatever was inherited.
         */
        clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
        clcf->client_max_body_size = 0;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_api(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_loc_conf_t  *slcf = conf;

    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_session_srv_conf_t   *sscf;
    ngx_http_session_main_conf_t  *smcf;

    if (slcf->api != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    slcf->api = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_session_handler;

    sscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_session_module);
    sscf->api = 1;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_session_module);

    if (!smcf->enabled) {
        smcf->enabled = 1;
        smcf->api_file = cf->conf_file->file.name;
        smcf->api_line = cf->conf_file->line;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_limit_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    u_char     *p;
    ssize_t     size;
    ngx_str_t  *value, name, s;

    if (smcf->shm_zone) {
        return "is duplicate";
    }

    value = cf->args->elts;

    p = (u_char *) ngx_strchr(value[1].data, ':');

    if (p == NULL || p == value[1].data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone \"%V\" in \"%V\", "
                           "expected \"name:size\"", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    name.data = value[1].data;
    name.len = p - value[1].data;

    s.data = p + 1;
    s.len = value[1].data + value[1].len - s.data;

    size = ngx_parse_size(&s);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\" in \"%V\"",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) NGX_HTTP_SESSION_ZONE_MIN_SIZE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small in \"%V\", "
                           "the minimum is %uzk", &value[1], &cmd->name,
                           (size_t) NGX_HTTP_SESSION_ZONE_MIN_SIZE / 1024);
        return NGX_CONF_ERROR;
    }

    smcf->shm_zone = ngx_http_session_zone_add(cf, &name, size);
    if (smcf->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_key_prefix(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_session_main_conf_t  *smcf = conf;

    ngx_str_t  *value;

    if (smcf->key_prefix.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (!ngx_http_session_prefix_valid(value[1].data, value[1].len)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid key prefix \"%V\" in \"%V\", "
                           "expected four letters", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    smcf->key_prefix = value[1];

    return NGX_CONF_OK;
}


static char *
ngx_http_session_positive_msec(ngx_conf_t *cf, void *post, void *data)
{
    ngx_msec_t  *ms = data;

    /*
     * session_db_timeout is sent as statement_timeout, an int of
     * milliseconds for PostgreSQL: above it every connection is refused
     */

    if (*ms == 0 || *ms > NGX_MAX_INT32_VALUE) {
        return "must be between 1ms and 2147483647ms (24d)";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_db_connections_check(ngx_conf_t *cf, void *post, void *data)
{
    ngx_uint_t  *n = data;

    if (*n < 1 || *n > 1024) {
        return "must be between 1 and 1024";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_image_uploads_check(ngx_conf_t *cf, void *post, void *data)
{
    ngx_uint_t  *n = data;

    if (*n < 1 || *n > 1024) {
        return "must be between 1 and 1024";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_db_batch_check(ngx_conf_t *cf, void *post, void *data)
{
    ngx_uint_t  *n = data;

    if (*n < 1 || *n > NGX_HTTP_SESSION_DB_BATCH_MAX) {
        return "must be between 1 and 64";
    }

    return NGX_CONF_OK;
}


/*
 * At least a second, so that many workers and nodes do not keep the
 * database busy; at most 30 s, so that with the jitter a session still
 * expires "within 60 s" (docs/api.md §10) with room to spare.
 */

static char *
ngx_http_session_sweep_interval_check(ngx_conf_t *cf, void *post,
    void *data)
{
    ngx_msec_t  *ms = data;

    if (*ms < NGX_HTTP_SESSION_SWEEP_INTERVAL_MIN
        || *ms > NGX_HTTP_SESSION_SWEEP_INTERVAL_MAX)
    {
        return "must be between 1s and 30s";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_image_chunk_check(ngx_conf_t *cf, void *post, void *data)
{
    size_t  *size = data;

    if (*size < NGX_HTTP_SESSION_IMAGE_CHUNK_MIN
        || *size > NGX_HTTP_SESSION_IMAGE_CHUNK_MAX)
    {
        return "must be between 16 and 1m";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_body_buffer_check(ngx_conf_t *cf, void *post, void *data)
{
    size_t  *size = data;

    if (*size > NGX_HTTP_SESSION_BODY_BUFFER_MAX) {
        return "must be between 0 and 16m";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_image_max_size_check(ngx_conf_t *cf, void *post, void *data)
{
    off_t  *size = data;

    if (*size < 1 || *size > NGX_HTTP_SESSION_IMAGE_MAX_LIMIT) {
        return "must be between 1 and 512m";
    }

    return NGX_CONF_OK;
}


/*
 * A long poll waits 0 s (answers at once) up to an hour; the largest
 * wait allowed is at least a second.
 */

static char *
ngx_http_session_poll_timeout_check(ngx_conf_t *cf, void *post, void *data)
{
    time_t  *sec = data;

    if (*sec > NGX_HTTP_SESSION_POLL_MAX_LIMIT) {
        return "must not be greater than 3600s";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_poll_max_check(ngx_conf_t *cf, void *post, void *data)
{
    time_t  *sec = data;

    if (*sec == 0 || *sec > NGX_HTTP_SESSION_POLL_MAX_LIMIT) {
        return "must be between 1s and 3600s";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_positive_sec(ngx_conf_t *cf, void *post, void *data)
{
    time_t  *sec = data;

    /* lifetimes go to PostgreSQL as 32-bit integers */

    if (*sec == 0 || *sec > NGX_MAX_INT32_VALUE) {
        return "must be between 1s and 2147483647s (68y)";
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_session_webhook_attempts_check(ngx_conf_t *cf, void *post,
    void *data)
{
    ngx_uint_t  *n = data;

    if (*n < 1 || *n > NGX_HTTP_SESSION_WEBHOOK_ATTEMPTS_MAX) {
        return "must be between 1 and 100";
    }

    return NGX_CONF_OK;
}


/*
 * the file is loaded once the http block is read (webhook_client.c):
 * where the directive is, for its message
 */

static char *
ngx_http_session_trusted_where(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_session_module);

    smcf->webhook_trusted_file = cf->conf_file->file.name;
    smcf->webhook_trusted_line = cf->conf_file->line;

    return NGX_CONF_OK;
}


static char *
ngx_http_session_webhook_concurrency_check(ngx_conf_t *cf, void *post,
    void *data)
{
    ngx_uint_t  *n = data;

    if (*n < 1 || *n > NGX_HTTP_SESSION_WEBHOOK_CONCURRENCY_MAX) {
        return "must be between 1 and 4096";
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_session_init_module(ngx_cycle_t *cycle)
{
    ngx_http_session_main_conf_t  *smcf;

    ngx_http_session_handover_close_unused(cycle);

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);

    if (smcf && ngx_http_session_relay_init_module(cycle, smcf) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_session_log_init_module(cycle);
}


static ngx_int_t
ngx_http_session_init_process(ngx_cycle_t *cycle)
{
    ngx_http_session_main_conf_t  *smcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

#if (NGX_LINUX && defined __GLIBC__ && !defined __SANITIZE_ADDRESS__)

    /*
     * (Not under AddressSanitizer, whose allocator replaces glibc's and
     * has no such threshold: make asan.)
     *
     * Image bodies (read back from nginx's temporary file into the
     * request pool) and libpq's buffers for them are allocated and freed
     * with every upload and download.  glibc raises its mmap threshold to
     * the size of the last mmap()ed block freed, after which such blocks
     * come from the heap, whose freed middle is never returned: a worker
     * would keep tens of megabytes after a burst of 5 MB uploads.  A
     * fixed threshold keeps large blocks mmap()ed (docs/decisions.md).
     */

    if (mallopt(M_MMAP_THRESHOLD, NGX_HTTP_SESSION_MMAP_THRESHOLD) != 1) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "session: mallopt(M_MMAP_THRESHOLD) failed");
    }

#endif
    ngx_http_session_auth_init_process();
    ngx_http_session_lease_init_process();

    if (ngx_http_session_status_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the rest only where session_api is in use */

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);
    if (smcf == NULL || !smcf->enabled) {
        return NGX_OK;
    }

    if (ngx_http_session_db_init_process(cycle, smcf) != NGX_OK
        || ngx_http_session_db_copy_init_process(cycle, smcf) != NGX_OK
        || ngx_http_session_poll_init_process(cycle, smcf) != NGX_OK
        || ngx_http_session_relay_init_process(cycle, smcf,
                                               &ngx_http_session_wake)
           != NGX_OK
        || ngx_http_session_listen_init_process(cycle, smcf) != NGX_OK
        || ngx_http_session_sweep_init_process(cycle, smcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* how many nodes lease, for the first blocks of keys new to the node */
    ngx_http_session_lease_sample_init_process(smcf);

    return ngx_http_session_webhook_init_process(cycle, smcf);
}


static void
ngx_http_session_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_session_webhook_exit_process(cycle);
    ngx_http_session_sweep_exit_process(cycle);
    ngx_http_session_listen_exit_process(cycle);
    ngx_http_session_relay_exit_process(cycle);
    ngx_http_session_poll_exit_process(cycle);
    ngx_http_session_db_copy_exit_process(cycle);
    ngx_http_session_lease_sample_exit_process();
    ngx_http_session_db_exit_process(cycle);
    ngx_http_session_auth_exit_process();
}
