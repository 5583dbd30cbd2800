#!/usr/bin/env bash
# Time to the first page of `make run` on a fresh SQLite database (docs/benchmarks.md): the two
# steps the former `make run` took before starting any server, then `manage.py demo` until it
# says `Serving`, then `manage.py demo` again on the database it made (a later start).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-8767}
old=$(mktemp -d) new=$(mktemp -d)
trap 'rm -rf "$old" "$new"' EXIT

s=$(date +%s.%N)
EBCLOUD_VAR_DIR=$old .venv/bin/python manage.py migrate --noinput >/dev/null
EBCLOUD_VAR_DIR=$old .venv/bin/python manage.py seed_demo >/dev/null
echo "before: migrate + seed_demo (no server yet): $(echo "$(date +%s.%N) - $s" | bc) s; load $(cut -d' ' -f1 /proc/loadavg)"

serve() {  # $1: label; runs manage.py demo on $new until it serves, then Ctrl-C
    s=$(date +%s.%N)
    EBCLOUD_VAR_DIR=$new .venv/bin/python manage.py demo --port "$PORT" --no-fleet >"$new/out.log" 2>&1 &
    pid=$!
    until grep -q "^Serving" "$new/out.log"; do kill -0 $pid; sleep 0.2; done
    echo "$1: manage.py demo to Serving: $(echo "$(date +%s.%N) - $s" | bc) s ($(grep -o 'data ready in [0-9.]* s' "$new/out.log")); load $(cut -d' ' -f1 /proc/loadavg)"
    kill -INT $pid
    wait $pid
}
serve "now, first start"
serve "now, later start"
# Beside the seconds, what does not move with the machine (issue 23): instructions of a first start's
# preparation, counted by callgrind (~5 minutes; NO_INSTRUCTIONS=1 skips it).
[ "${NO_INSTRUCTIONS:-}" = 1 ] || .venv/bin/python bench/instructions.py --demo
