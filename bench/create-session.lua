-- wrk script for util/bench.sh: POST /api/v1/sessions with a long_poll
-- session body (the Authorization header comes from wrk -H).
wrk.method = "POST"
wrk.body = '{"delivery_mode": "long_poll"}'
wrk.headers["Content-Type"] = "application/json"
