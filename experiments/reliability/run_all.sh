#!/usr/bin/env bash
# The attack families on this checkout (about 40 minutes on a loaded 2-core machine), raw logs under
# results/TAG-*.log. JAXCSE_DATA_DIR: a data root with SentEval and corpora/wiki_offline.txt (setup_probe.py copies a
# little of it); run as root for the full-disk and read-only cases (tmpfs mounts).
set -u
cd "$(dirname "$0")"
TAG=${1:-rerun}
PY=${PYTHON:-python}
OUT=results
export PROBE_DIR=${PROBE_DIR:-$($PY -c 'import tempfile, os; print(os.path.join(tempfile.gettempdir(), "jaxcse-probe"))')}
$PY setup_probe.py
export JAXCSE_DATA_DIR=$PROBE_DIR/data
{ uptime; $PY kill9_probe.py 6 7 0 0; uptime; } > "$OUT/$TAG-kill9.log" 2>&1
{
  uptime
  $PY sigint_probe.py 8 0 4 early --entry script
  $PY sigint_probe.py 4 0 4 early-m
  $PY sigint_probe.py 6 0 30 random --entry script
  $PY sigint_probe.py 6 8 20 twice --entry script --second 0.5 2
  uptime
} > "$OUT/$TAG-sigint.log" 2>&1
{ uptime; $PY attack_probe.py; uptime; } > "$OUT/$TAG-attacks.log" 2>&1
grep -h "tries" "$OUT/$TAG-sigint.log" "$OUT/$TAG-attacks.log"
tail -5 "$OUT/$TAG-kill9.log"
