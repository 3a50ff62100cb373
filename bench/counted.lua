-- wrk script for bench/process.py: POST the JSON body in $BENCH_BODY (with the bench's client
-- key, $BENCH_KEY) until $BENCH_COUNT answers, shared out over $BENCH_THREADS threads.
-- Each "@N@" in the body becomes "<thread>-<request>", unique in the run: no two prompts alike
-- (the gateway's answer cache is keyed by the prompt). A body without it is sent as it is.
-- A thread that has its share stops and appends a line to the file $BENCH_DONE: wrk itself
-- only ends after -d, so the script ends it (SIGINT: wrk then prints its figures) once every
-- thread has written its line.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")

local next_id = 0

function setup(thread)
   local count = tonumber(os.getenv("BENCH_COUNT"))
   local threads = tonumber(os.getenv("BENCH_THREADS"))
   local share = math.floor(count / threads)
   if next_id < count % threads then
      share = share + 1
   end
   thread:set("id", next_id)
   thread:set("share", share)
   next_id = next_id + 1
end

local head, tail
local sent, answered = 0, 0

function init(args)
   local body = os.getenv("BENCH_BODY")
   head, tail = body:match("^(.-)@N@(.*)$")
   if head == nil then
      wrk.body = body
   end
end

function request()
   if head == nil then
      return wrk.format()
   end
   sent = sent + 1
   return wrk.format(nil, nil, nil, head .. id .. "-" .. sent .. tail)
end

function response(status, headers, body)
   answered = answered + 1
   if answered == share then
      local done = io.open(os.getenv("BENCH_DONE"), "a")
      done:write(id, "\n")
      done:close()
      wrk.thread:stop()
   end
end
