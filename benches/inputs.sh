#!/usr/bin/env bash
# What serving a fan-in step's inputs costs the processor (the book:
# Performance, Fan-in inputs). Enqueues N items of 1 KiB at gate 0 and one
# at gate 1, drains gate 0 through a handler that answers every batch
# "done", and at gate 1 reads every input through Feed-Inputs (following
# Link from page to page, the default limit) in a second processor,
# timing the read and taking that processor's peak RSS (VmHWM) before and
# after it.
#
#   benches/inputs.sh [processor binary] [database URL]
#
# Defaults: target/release/processor and a new SQLite file in a temporary
# folder; N=100000 and LIMIT (a page's lines; empty = the default) from
# the environment. A PostgreSQL or MariaDB URL must name an empty database.
# Last, `processor export` of the same items, timed, for comparison.
set -euo pipefail
BIN=$(realpath "${1:-target/release/processor}")
DIR=$(mktemp -d)
DB=${2:-sqlite://$DIR/feed.db?mode=rwc}
N=${N:-100000}
LIMIT=${LIMIT:-}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
HANDLER_PORT=$(port)
LISTEN_PORT=$(port)
cd "$DIR"
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$DIR"' EXIT

cat > handler.py <<'EOF'
import json, re, sys, time, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

def hwm():
    pid = open("processor.pid").read().strip()
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

def read(url, limit):
    """Lines, bytes and pages of every input, following Link."""
    lines = size = pages = 0
    url = url + (f"&limit={limit}" if limit else "")
    while url:
        with urllib.request.urlopen(url) as page:
            while chunk := page.read(1 << 20):
                lines += chunk.count(b"\n")
                size += len(chunk)
            pages += 1
            nxt = re.search(r'<([^>]*)>; rel="next"', page.headers.get("Link", ""))
            url = nxt and nxt.group(1)
    return lines, size, pages

class H(BaseHTTPRequestHandler):
    def do_POST(self):
        items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        for item in items:
            if "inputs" in item:
                before, started = hwm(), time.monotonic()
                lines, size, pages = read(item["inputs"], sys.argv[2])
                took = time.monotonic() - started
                with open("result.txt", "w") as out:
                    print(f"{lines} inputs, {size / 2**20:.1f} MiB of lines in {pages} page(s): "
                          f"{took:.2f} s ({size / 2**20 / took:.0f} MiB/s); processor peak RSS "
                          f"{before:.1f} MiB before the read, {hwm():.1f} MiB after", file=out)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
python3 handler.py "$HANDLER_PORT" "$LIMIT" &

export FEED_DATABASE_URL=$DB
run() {
  "$BIN" run --handler-url "http://127.0.0.1:$HANDLER_PORT/" --listen "127.0.0.1:$LISTEN_PORT" \
    --batch-size 100 --request-timeout 5m 2>> processor.log &
  echo $! > processor.pid
  "$BIN" wait --partition big --timeout 30m
  kill "$(cat processor.pid)" && wait "$(cat processor.pid)" || true
}
# Gate 0 drains in one processor; the read happens in a fresh one, whose
# peak before it is its start's alone.
python3 -c "
data = '\"' + 'x' * 1022 + '\"'
for k in range($N):
    print('{\"id\": \"in-%06d\", \"data\": %s}' % (k, data))
" | "$BIN" enqueue --partition big > /dev/null
run
echo '{"id": "rank", "gate": 1, "data": {}}' | "$BIN" enqueue --partition big > /dev/null
run
cat result.txt
# For comparison: the same items through `processor export`.
started=$(date +%s.%N)
"$BIN" export --partition big --gate 0 2> /dev/null | wc -c > /dev/null
echo "processor export of the same items: $(python3 -c "import time; print(f'{time.time() - $started:.2f}')") s"
