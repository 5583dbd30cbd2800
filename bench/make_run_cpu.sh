#!/usr/bin/env bash
# CPU time of preparing the demo database: the former two processes (migrate, seed_demo) against
# the one process of `manage.py demo` (check, migrate, seed_demo); docs/benchmarks.md.
cd "$(dirname "$0")/.."
a=$(mktemp -d); b=$(mktemp -d)
TIMEFORMAT='%U %S %R'
{ time EBCLOUD_VAR_DIR=$a .venv/bin/python manage.py migrate --noinput >/dev/null; } 2>>$a/t
{ time EBCLOUD_VAR_DIR=$a .venv/bin/python manage.py seed_demo >/dev/null; } 2>>$a/t
awk '{u+=$1; s+=$2; r+=$3} END {printf "before (migrate, seed_demo): CPU %.1f s, wall %.1f s\n", u+s, r}' $a/t
{ time EBCLOUD_VAR_DIR=$b .venv/bin/python -c "
import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')
import django; django.setup()
from django.core.management import call_command
call_command('check'); call_command('migrate', interactive=False, verbosity=0); call_command('seed_demo', stdout=open(os.devnull, 'w'))"; } 2>>$b/t
awk '{printf "now (one process: check, migrate, seed_demo): CPU %.1f s, wall %.1f s\n", $1+$2, $3}' $b/t
echo "load $(cut -d' ' -f1 /proc/loadavg)"
rm -rf $a $b
# Beside the seconds, what does not move with the machine (issue 23): instructions of a first start's
# preparation, counted by callgrind (~5 minutes; NO_INSTRUCTIONS=1 skips it).
[ "${NO_INSTRUCTIONS:-}" = 1 ] || .venv/bin/python bench/instructions.py --demo
