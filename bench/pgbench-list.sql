-- pgbench script for util/bench.sh: the statement the module sends for
-- GET /api/v1/sessions?limit=20 (NGX_HTTP_SESSION_SQL_SESSION_LIST in
-- src/ngx_http_session_sql.h): no status, no cursor, limit + 1 rows.
SELECT body, created_us, id::text FROM session_list(:project, NULL, NULL, NULL, :rows);
