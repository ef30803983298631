-- wrk script for util/bench-images.sh and util/bench-images-ab.sh: POST
-- one image file into sessions in turn, read from the environment.
--
--   BENCH_FILE     the image's bytes (sent as image/png)
--   BENCH_SIDS     the sessions' ids, comma-separated
--   BENCH_KEY      the API key
--   BENCH_SPLIT    N, wrk's thread count: each thread takes its own share
--                  of the sessions (the k-th to thread k mod N); unset,
--                  every thread goes through all of them

local reqs = {}
local threads = 0

setup = function(thread)
    thread:set("tid", threads)
    threads = threads + 1
end

init = function(args)
    local f = assert(io.open(os.getenv("BENCH_FILE"), "rb"))
    local body = f:read("*a")
    local split = tonumber(os.getenv("BENCH_SPLIT") or "")
    local k = 0
    f:close()

    for sid in string.gmatch(os.getenv("BENCH_SIDS"), "[^,]+") do
        if not split or k % split == tid then
            reqs[#reqs + 1] = wrk.format("POST",
                "/api/v1/sessions/" .. sid .. "/images",
                { ["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY"),
                  ["Content-Type"] = "image/png" }, body)
        end
        k = k + 1
    end
end

local i = 0

request = function()
    i = i + 1
    return reqs[(i % #reqs) + 1]
end
