-- pgbench script for util/bench.sh: the statement the module sends for
-- POST /api/v1/sessions (NGX_HTTP_SESSION_SQL_SESSION_CREATE in
-- src/ngx_http_session_sql.h), with the parameters of a long_poll session
-- of session_ttl 1h; -M extended sends :project, :mode and :ttl as $n
-- parameters, as PQsendQueryParams does.  The module's $3 (webhook_url)
-- is a NULL parameter; pgbench has no NULL variable, so it is a literal.
SELECT outcome, body, id::text FROM session_create(:project, :mode, NULL, :ttl);
