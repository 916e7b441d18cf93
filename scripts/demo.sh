#!/bin/sh
# The demo run by scripts/setup.sh: airlock run on a data-science script and
# on a few escape attempts, then an agent-like session over the HTTP API
# with curl: create a session, upload a CSV, load it with pandas, plot it,
# download the PNG, a session on the code-interpreter template, delete the
# session.
set -eu
cd "$(dirname "$0")/.."
A=${AIRLOCK:-bin/airlock}
OUT=${DEMO_OUT:-/tmp/airlock-demo}
mkdir -p "$OUT"

# The configured isolation (AIRLOCK_ISOLATION=gvisor runs the whole demo
# on gVisor): gVisor runs go through a server, so it starts first then.
ISO=$($A config print | python3 -c 'import json,sys; print(json.load(sys.stdin)["isolation"])')

examples() {
	echo
	echo "== airlock run examples/demo.py: numpy, pandas, scikit-learn and a matplotlib PNG in a fresh jail ($ISO)"
	$A run --json examples/demo.py
	echo
	echo "== the same under a 64 MB memory limit: the sandbox is killed, out of memory"
	$A run --memory 64M --timeout 10s examples/demo.py || echo "(exit status $?)"
	echo
	echo "== escape attempts, all contained"
	$A run --timeout 5s examples/escape.py
}
[ "$ISO" = native ] && examples

echo
echo "== airlock serve, and a session driven with curl"
PORT=${DEMO_PORT:-18080}
# The demo's own data directory (API keys, audit log), not /var/lib/airlock.
CFG="$OUT/config.json"
# Templates from the host's store (setup.sh built code-interpreter there),
# with a warm Python pool of their own.
TEMPLATES=$($A config print | python3 -c 'import json,sys; c=json.load(sys.stdin); print(c["templates"]["dir"] or c["data_dir"] + "/templates")')
printf '{"version": 1, "data_dir": "%s/data", "audit": {"enabled": true, "code": "full"},
  "templates": {"dir": "%s", "pool": {"code-interpreter": {"python": 1}}}}\n' "$OUT" "$TEMPLATES" >"$CFG"
export AIRLOCK_CONFIG="$CFG"
echo "-- an API key for the tenant demo (printed once, stored hashed)"
KEY=$($A keys create --tenant demo --max-sessions 4 --executions-per-minute 120)
echo "key ${KEY%"${KEY#????????????}"}... ; keys now:"
$A keys list
$A serve --listen 127.0.0.1:$PORT 2>"$OUT/server.log" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
API=http://127.0.0.1:$PORT
for _ in $(seq 1 100); do curl -fs $API/healthz >/dev/null 2>&1 && break; sleep 0.1; done
[ "$ISO" = native ] || examples

curl() { command curl -H "Authorization: Bearer $KEY" "$@"; }
echo "-- without the key: $(command curl -s -o /dev/null -w '%{http_code}' $API/v1/sessions)"
json() { curl -fsS -H 'Content-Type: application/json' "$@"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "-- create a Python session"
SESSION=$(json -X POST $API/v1/sessions -d '{"language": "python", "limits": {"memory": "1G"}}' | field "['id']")
echo "session $SESSION"

echo "-- upload sales.csv"
printf 'month,revenue\nJan,120\nFeb,135\nMar,160\nApr,150\nMay,190\nJun,230\n' >"$OUT/sales.csv"
curl -fsS -X PUT --data-binary @"$OUT/sales.csv" $API/v1/sessions/$SESSION/files/sales.csv; echo

echo "-- load it with pandas (the DataFrame comes back as text and HTML)"
json -X POST $API/v1/sessions/$SESSION/execute \
	-d '{"code": "import pandas as pd\ndf = pd.read_csv(\"sales.csv\")\ndf.describe()"}' |
	python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["results"][0]["data"]["text/plain"]); print("mime types:", sorted(r["results"][0]["data"]))'

echo "-- state persists: plot the DataFrame loaded by the previous call"
json -X POST $API/v1/sessions/$SESSION/execute \
	-d '{"code": "ax = df.plot(x=\"month\", y=\"revenue\", marker=\"o\", title=\"Revenue\")\nax.figure.savefig(\"revenue.png\")\nprint(\"growth:\", round(df.revenue.iloc[-1] / df.revenue.iloc[0], 2))"}' |
	python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["stdout"], end=""); print("results:", [sorted(o["data"]) for o in r["results"]]); print("files changed:", r["files_changed"])'

echo "-- download the PNG"
curl -fsS $API/v1/sessions/$SESSION/files/revenue.png -o "$OUT/revenue.png"
python3 -c "import sys; d=open(sys.argv[1],'rb').read(); assert d[:8]==b'\x89PNG\r\n\x1a\n'; print(sys.argv[1], len(d), 'bytes, a PNG')" "$OUT/revenue.png"

echo "-- an exception, then the session keeps going"
json -X POST $API/v1/sessions/$SESSION/execute -d '{"code": "df.no_such_column"}' | field "['error']['name']"
json -X POST $API/v1/sessions/$SESSION/execute -d '{"code": "len(df)"}' | field "['results'][0]['data']['text/plain']"

echo "-- a session on the code-interpreter template: what agent code reaches for (seaborn, requests, bs4, openpyxl...),"
echo "   and IPython's own display() gives rich output"
TSESSION=$(json -X POST $API/v1/sessions -d '{"template": "code-interpreter"}' | field "['id']")
json -X POST $API/v1/sessions/$TSESSION/execute \
	-d '{"code": "import seaborn, requests, bs4, openpyxl, scipy, statsmodels, sympy\nfrom IPython.display import display, HTML\nprint(\"seaborn\", seaborn.__version__, \"requests\", requests.__version__)\ndisplay(HTML(\"<b>rich</b>\"))"}' |
	python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["stdout"], end=""); print("rich output:", [sorted(o["data"]) for o in r["results"]])'
curl -fsS -X DELETE $API/v1/sessions/$TSESSION -o /dev/null

echo "-- delete the session"
curl -fsS -X DELETE $API/v1/sessions/$SESSION -o /dev/null -w "%{http_code}\n"
curl -sS $API/v1/sessions/$SESSION -o /dev/null -w "%{http_code} (the session is gone)\n"

echo "-- the audit log of it all (airlock audit, from the database)"
sleep 0.2 # the audit's writer commits every 50 ms (audit.flush_interval)
$A audit --since 10m

echo
echo "== airlock run while the server runs: the program gets one of its pre-started jails"
printf 'import sys\nprint("hello from", sys.argv[1:])\n' >"$OUT/hello.py"
modes='--cold ""'
[ "$ISO" = native ] || modes='""' # --cold builds native jails only
eval "set -- $modes"
for mode in "$@"; do
	start=$(date +%s%N)
	$A run $mode "$OUT/hello.py" a b
	echo "   airlock run ${mode:-(through the server)}: $((($(date +%s%N) - start) / 1000000)) ms"
done
echo
echo "demo done; the plot is in $OUT/revenue.png"
