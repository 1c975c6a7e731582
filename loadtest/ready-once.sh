#!/usr/bin/env bash
# ready.sh BIN DB : one start of memgate on DB; prints load ms, memgate CPU s, postgres CPU s
BIN=$1; DB=$2
source /work/main/.assets/env.sh
printf '[auth]\nmode = "managed"\n' > /tmp/ready.toml
pgcpu() { local t=0; for p in $(pgrep -u postgres); do s=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0); t=$((t+s)); done; echo $t; }
sync; pg0=$(pgcpu); t0=$(date +%s.%N)
cd /work/main
MEMGATE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB MEMGATE_LOG_LEVEL="warn,memgate=info" MEMGATE_ADMIN_TOKEN=tok-0123456789abcdef0123456789 ANTHROPIC_API_KEY=x NO_COLOR=1 \
  $BIN serve --config /tmp/ready.toml --listen 127.0.0.1:0 --upstream-url http://127.0.0.1:9 --auth-mode managed > /tmp/ready.out 2> /tmp/ready.err &
pid=$!
while ! grep -q 'memory index built' /tmp/ready.err; do
  if ! kill -0 $pid 2>/dev/null; then echo "died"; tail /tmp/ready.err; exit 1; fi
  sleep 0.5
done
t1=$(date +%s.%N)
mg=$(awk '{print $14+$15}' /proc/$pid/stat); pg1=$(pgcpu)
rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
kill $pid; wait $pid 2>/dev/null
ms=$(grep 'memory index built' /tmp/ready.err | sed 's/.*elapsed_ms=\([0-9]*\).*/\1/')
tk=$(getconf CLK_TCK)
echo "$(basename $BIN) $DB load_ms=$ms wall_s=$(echo "$t1-$t0"|bc) memgate_cpu_s=$(echo "scale=1;$mg/$tk"|bc) pg_cpu_s=$(echo "scale=1;($pg1-$pg0)/$tk"|bc) rss_mb=$((rss/1024))"
