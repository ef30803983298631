-- wrk script for util/bench-db.sh: one request shape, read from the
-- environment, so that one script serves every database scenario.
--
--   BENCH_METHOD   GET or POST (default GET)
--   BENCH_PATH     the path; "%s" in it takes an id of BENCH_IDS
--   BENCH_IDS      a file of ids, one a line
--   BENCH_PICK     "random": any id each time; "once": every id at most
--                  once (each thread takes its own stride), for requests
--                  that change a row for good (complete, ack)
--   BENCH_KEYS     a file of API keys, one a line: each request takes one
--                  at random (one key: every request the same)
--   BENCH_BODY     a file whose bytes are the body
--   BENCH_CTYPE    its Content-Type
--   BENCH_THREADS  wrk's -t, for the strides of "once"
--   BENCH_IDEM     set: each request carries a new Idempotency-Key

local threads = 0

function setup(thread)
    thread:set("tid", threads)
    threads = threads + 1
end

local function lines(file)
    local t = {}

    if file == nil or file == "" then
        return t
    end

    for line in io.lines(file) do
        if line ~= "" then
            t[#t + 1] = line
        end
    end

    return t
end


-- one formatted request of the id, key and Idempotency-Key given (id and
-- Idempotency-Key may be nil)
local function format(id, key, idem_key)
    local p = path
    local headers = {}

    if id then
        p = string.format(path, id)
    end

    headers["Authorization"] = "Bearer " .. key

    if ctype then
        headers["Content-Type"] = ctype
    end

    if idem_key then
        headers["Idempotency-Key"] = idem_key
    end

    return wrk.format(method, p, headers, body)
end

-- the requests of "random" without Idempotency-Key are formatted once, in
-- init(), one for each id (its key drawn at random then), so that wrk's
-- thread spends its time on the network and not on building requests:
-- the load generator shares the machine's two cores with nginx and
-- PostgreSQL, as pgbench's client does in the anchor runs
local function prepare()
    if pick == "once" or (idem and idem ~= "") then
        return
    end

    ready = {}

    if #ids == 0 then
        for i = 1, #keys do
            ready[i] = format(nil, keys[i])
        end
        return
    end

    for i = 1, #ids do
        ready[i] = format(ids[i], keys[math.random(#keys)])
    end
end

function init(args)
    method = os.getenv("BENCH_METHOD") or "GET"
    path = os.getenv("BENCH_PATH")
    pick = os.getenv("BENCH_PICK") or "random"
    stride = tonumber(os.getenv("BENCH_THREADS") or "1")
    ctype = os.getenv("BENCH_CTYPE")
    ids = lines(os.getenv("BENCH_IDS"))
    keys = lines(os.getenv("BENCH_KEYS"))
    pos = tid or 0
    body = nil
    idem = os.getenv("BENCH_IDEM")
    sent = 0

    local file = os.getenv("BENCH_BODY")
    if file and file ~= "" then
        local f = assert(io.open(file, "rb"))
        body = f:read("*a")
        f:close()
    end

    math.randomseed(os.time() + pos * 7919)
    run = math.random(1000000000)
    prepare()
end

function request()
    if ready then
        return ready[math.random(#ready)]
    end

    local id

    if #ids > 0 then
        if pick == "once" then
            -- past the end the ids repeat and the answers are 409s: the
            -- bench gives more ids than a run can use, and checks
            id = ids[(pos % #ids) + 1]
            pos = pos + stride
        else
            id = ids[math.random(#ids)]
        end
    end

    local idem_key

    if idem and idem ~= "" then
        sent = sent + 1
        idem_key = string.format("bench-%d-%d-%d", run, tid or 0, sent)
    end

    return format(id, keys[math.random(#keys)], idem_key)
end
