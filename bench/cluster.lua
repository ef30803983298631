-- wrk script of util/bench-cluster.sh: the threads are spread over the
-- nodes, thread i connecting to the i-th port of BENCH_NODE_PORTS ("p1
-- p2 p3", in turn), so that every node gets the same share of the load,
-- as behind a round-robin balancer.  With BENCH_KEYS_FILE (one key a
-- line) each request takes the next key of the file, each thread
-- starting at a key of its own; without it the requests are the
-- command line's (-H "Authorization: ..."), built once.

local ports = {}

for p in string.gmatch(os.getenv("BENCH_NODE_PORTS") or "", "%d+") do
    ports[#ports + 1] = p
end

local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("nth", threads)

    local port = ports[(threads - 1) % #ports + 1]
    thread.addr = wrk.lookup("127.0.0.1", port)[1]
end

local file = os.getenv("BENCH_KEYS_FILE")

if file and file ~= "" then
    local keys = {}
    local k = 0

    function init(args)
        for line in io.lines(file) do
            keys[#keys + 1] = "Bearer " .. line
        end

        k = ((nth or 1) * 7919) % #keys
    end

    function request()
        k = k % #keys + 1
        wrk.headers["Authorization"] = keys[k]
        return wrk.format()
    end
end
