-- Replays a request plan written by bench/load.py: exactly one pass, no more.
--
-- Run with one connection per thread (-t N -c N): requests on a connection are strictly
-- sequential, so every response belongs to the last request the thread sent, and the thread
-- stops itself after the response to its last planned request. wrk itself keeps sleeping for
-- its -d duration; bench/load.py interrupts it (SIGINT) once every thread has written its
-- report, and takes throughput from the threads' own monotonic timestamps.
--
-- Environment: BENCH_PLAN_DIR holds plan-<thread>.txt with one request per line,
-- "<id>\t<path>\t<headers>\t<json body>", headers being "Name: value" pairs separated by
-- \x1f (e.g. Authorization, A2A-Version, X-Agent-Id); reports are written next to them.
-- BENCH_EXPECT is a substring every successful response body contains.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]]
local timespec = ffi.new("bench_timespec")
local function monotonic()
  ffi.C.clock_gettime(1, timespec) -- CLOCK_MONOTONIC, the same clock as Python's
  return tonumber(timespec.tv_sec) + tonumber(timespec.tv_nsec) * 1e-9
end

local plan_dir = os.getenv("BENCH_PLAN_DIR")
local expect = os.getenv("BENCH_EXPECT") or ""
local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

local requests, ids = {}, {}
local calls, responses, ok = 0, 0, 0
local failures = {}
local started, finished

function init(args)
  for line in io.lines(plan_dir .. "/plan-" .. tid .. ".txt") do
    local id, path, extra, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
    local headers = { ["Content-Type"] = "application/json" }
    for name, value in extra:gmatch("([^\31:]+): ([^\31]*)") do
      headers[name] = value
    end
    requests[#requests + 1] = wrk.format("POST", path, headers, body)
    ids[#ids + 1] = id
  end
end

-- Always the first unanswered request of the plan: wrk calls request() once on thread 0 to
-- verify the script before any connection exists, and again after a socket error, when
-- resending is right (sends are idempotent by messageId; wrk counts the error).
function request()
  calls = calls + 1
  if started == nil and not (tid == 0 and calls == 1) then
    started = monotonic()
  end
  return requests[responses + 1] or requests[#requests]
end

local function clean(text)
  return (text:sub(1, 300):gsub("[\t\r\n]", " "))
end

local function report()
  local out = io.open(plan_dir .. "/report-" .. tid .. ".txt", "w")
  out:write("responses\t", responses, "\n", "ok\t", ok, "\n")
  out:write(string.format("started\t%.6f\nfinished\t%.6f\n", started, finished))
  for _, failure in ipairs(failures) do
    out:write("failed\t", failure, "\n")
  end
  out:close()
end

function response(status, headers, body)
  if responses >= #requests then
    return
  end
  responses = responses + 1
  if status == 200 and body:find(expect, 1, true) then
    ok = ok + 1
  else
    failures[#failures + 1] = ids[responses] .. "\t" .. status .. "\t" .. clean(body or "")
  end
  if responses == #requests then
    finished = monotonic()
    report()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local out = io.open(plan_dir .. "/summary.txt", "w")
  out:write("requests\t", summary.requests, "\n", "duration_us\t", summary.duration, "\n")
  for _, kind in ipairs({ "connect", "read", "write", "status", "timeout" }) do
    out:write("errors_", kind, "\t", summary.errors[kind], "\n")
  end
  out:write("latency_mean_us\t", latency.mean, "\n", "latency_max_us\t", latency.max, "\n")
  for _, p in ipairs({ 50, 75, 90, 99, 99.9 }) do
    out:write("latency_p", p, "_us\t", latency:percentile(p), "\n")
  end
  out:close()
end
