"""A lean asyncio HTTP/1.1 load client for what wrk cannot measure: gaps between streamed chunks
and per-request latency at one connection.

Raw asyncio protocols on uvloop (no client library in the way): each connection keeps alive,
decodes chunked transfer encoding, splits the body into SSE events and timestamps every event
as its bytes arrive. A token event is one carrying the mock's content (`"content":"tok0"`,
`"content":" tok1"`, …), so gaps are measured between tokens only: a gateway's own extra
events (a role chunk of its own, a separate finish chunk) don't count as gaps, they show in the
tail instead.

    python -m bench loadgen slow --url URL --body-file F [--header "Name: value" …]
        --connections 1000 --ramp 3 --tokens 260 --duration 13
    python -m bench loadgen latency --url URL --body-file F [--header …] --duration 10

(from the repository's root). Prints one JSON object on stdout. Every loop is bounded by count
and by time.

- connection: the connection, the response parser and the request's bytes;
- slow: the slow streams; latency: one connection's requests one after another;
- loadgen_cli: the command line `python -m bench load` starts it with.
"""
