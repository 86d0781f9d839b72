-- wrk script: POST the body in $BENCH_BODY_FILE with the headers in $BENCH_HEADERS (one
-- "Name: value" a line), and print a machine-readable summary line (BENCH_JSON {...}) when done.
-- No response() callback: defining one makes wrk hand every body to Lua, which costs the
-- load generator CPU; non-2xx answers are counted by wrk itself (errors.status).

local file = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
for line in (os.getenv("BENCH_HEADERS") or ""):gmatch("[^\n]+") do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  if name ~= nil then
    wrk.headers[name] = value
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
