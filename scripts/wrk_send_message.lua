-- wrk script: JSON-RPC SendMessage with a fresh messageId per request (the unsigned load of
-- scripts/bench_a2a.sh and scripts/bench_a2a_compare.sh).
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/a2a+json"
wrk.headers["A2A-Version"] = "1.0"
-- BEARER: an access token the node gave a verified caller (scripts/bench_a2a_compare.sh, node-token)
local bearer = os.getenv("BEARER")
if bearer and bearer ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. bearer
end
-- RECEIPT=1: each message asks for a signed receipt (docs/PROTOCOL.md, "Receipts"), as
-- `agentnet call` does; an agent signs one only for a caller who asks.
local ask = ""
if os.getenv("RECEIPT") == "1" then
  ask = ',"extensions":["urn:agentnet:a2a:signed-receipts:v1"]'
end
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"m-' .. n .. '-' .. math.random(1e9) .. '"' .. ask .. '}}}'
  return wrk.format(nil, nil, nil, body)
end
-- Every answer must be a completed task: an HTTP 200 carrying a JSON-RPC error is a failure too
-- (scripts/lib/wrk.sh fails a run whose done() line counts any).
failed = 0
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"TASK_STATE_COMPLETED"', 1, true) then
    failed = failed + 1
  end
end
function done(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + (t:get("failed") or 0) end
  io.write(string.format("answers failed: %d\n", n))
end
