-- wrk script: replay pre-signed requests from a file, one line per request, each sent once.
--   REQUESTS=reqs.tsv wrk -t2 -c16 -d10s --latency -s scripts/wrk_replay.lua URL
-- Line format (agentnet-sim --bin signed_requests): METHOD \t PATH \t "Name: value"... \t BODY.
-- wrk thread k of T takes lines k, k+T, k+2T, ... so no line is sent twice. Each thread reads
-- and formats its lines in init(), before wrk starts its clock: a request() that split a line
-- of a few kilobytes (a request with a delegation chain) cost the client as much CPU as the
-- server spent answering it, and the client shares the machine's cores with the server. A
-- thread that runs out of lines stops (wrk.thread:stop()); done() reports how many threads ran
-- out, since their last seconds were not under load.
local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

local requests, next_request
-- A global, so that done() can read it with thread:get().
out_of_lines = 0

local function split(line)
  local fields = {}
  for f in string.gmatch(line, "([^\t]*)\t?") do
    table.insert(fields, f)
  end
  -- gmatch yields one empty match at the end of the string.
  if fields[#fields] == "" then table.remove(fields) end
  return fields
end

function init(args)
  local path = os.getenv("REQUESTS")
  if not path then error("set REQUESTS to the requests file") end
  local nthreads = tonumber(os.getenv("WRK_THREADS") or "2")
  local file = assert(io.open(path, "r"))
  requests, next_request = {}, 1
  local lineno = -1
  for line in file:lines() do
    lineno = lineno + 1
    if lineno % nthreads == id then
      local f = split(line)
      local headers = {}
      for i = 3, #f - 1 do
        local name, value = string.match(f[i], "^([^:]+): (.*)$")
        headers[name] = value
      end
      table.insert(requests, wrk.format(f[1], f[2], headers, f[#f]))
    end
  end
  file:close()
  out_of_lines = 0
end

function request()
  local r = requests[next_request]
  if not r then
    out_of_lines = 1
    wrk.thread:stop()
    return wrk.format("GET", "/")
  end
  requests[next_request] = nil
  next_request = next_request + 1
  return r
end

-- Every answer must be a completed task: an HTTP 200 carrying a JSON-RPC error (a refused
-- signature or chain) is a failure too (scripts/lib/wrk.sh fails a run that counts any).
failed = 0
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"TASK_STATE_COMPLETED"', 1, true) then
    failed = failed + 1
  end
end

function done(summary, latency, requests)
  local ran_out, n = 0, 0
  for _, t in ipairs(threads) do
    ran_out = ran_out + (t:get("out_of_lines") or 0)
    n = n + (t:get("failed") or 0)
  end
  io.write(string.format("replay: %d of %d threads ran out of requests\n", ran_out, #threads))
  io.write(string.format("answers failed: %d\n", n))
end
