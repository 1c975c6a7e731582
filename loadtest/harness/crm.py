#!/usr/bin/env python3
"""The CRM workload: one tenant on PostgreSQL holding a company's memory at the size of a real
CRM, built deterministically, imported with its vectors, and queried with the real model.

    python3 loadtest/harness/crm.py                      # the full size: 1,000,000 customers
    python3 loadtest/harness/crm.py --customers 20000    # a quick run (same KB and teams)

(`loadtest/crm.sh` builds the release binaries first and runs this.)

The tenant (`crm`):
- `--customers` (1,000,000) `customer_profile` records, customer k scoped to its own `user:u-k`
  with the key `customer:u-k:profile`: name, email, language, time zone, channel, last order
  date, a standing request and a note on the last order (product, colour, order number, issue);
- `--kb` (100,000) public knowledge-base records: 40 % `product_spec` (a unique `SKU-nnnnnn`,
  a product, a description, price, warranty), 20 % `internal_sop` (`SOP-nnnnn`, a process for a
  product line, numbered steps), 40 % `fact` (a handbook note quoting a turn of the public LoCoMo
  corpus, /work/shared/benchmarks/locomo, CC BY-NC 4.0);
- `--team` (10,000) `fact` records scoped to one of 20 teams (`team:t-0` … `team:t-19`).

Vectors. Embedding 1.11M texts on 2 cores takes ~3 hours, so a pool of `--pool` (20,000) real
embeddings is made once by the running model: the first records of each kind (customers 30 %,
product specs 28 %, SOPs 14 %, facts and team notes 28 %) are imported into a scratch memgate on
SQLite *without* vectors, embedded there in the background, and exported with
`?embeddings=true`. The pool is cached in loadtest/.cache/crm-pool-<size>.jsonl with the model
id (rebuilt when the running model's id differs). Record k of a kind whose pool holds P entries
is generated from *template* t = k mod P (the product, colour, issue, city, process … come from
t; the name, ids and numbers from k), so its text says what template t's text says with other
names and numbers; its vector is normalize(pool[t] + 0.1 · pool[h(k) mod P]) with h a hash of the
record id: within 0.996-0.997 cosine of its template's real embedding (measured on the pool), never two alike. Records
k < P carry their own real embedding unchanged. The generated JSON Lines (with vectors) are
cached in loadtest/.cache/crm-<sizes>/ and imported through POST /admin/v1/import,
`--chunk` (5,000) lines a request, `--import-requests` (2) requests in flight at once; then
the database is VACUUMed (ANALYZE) and CHECKPOINTed, as after any bulk load (timed, reported).

Queries use the real model (warm: each distinct question is asked once before the measured run):
- subject: a customer (`X-Memory-Subject: u-k`, via loadgen --line-header) asking about their own
  last order by product and order number; their profile must be injected;
- kb: a question about one product spec's SKU or one SOP's code; that record must be injected.
The injection rate is measured with POST /admin/v1/explain for every distinct question (the
ids it injects), and the load at `--rate` req/s for `--duration` s through the mock upstream,
with the direct run to the mock as the floor ("added" latency = memgate − direct).

Results: loadtest/results/crm/crm-<customers>.json and a table on stdout. A run reuses the
PostgreSQL database of an earlier one with the same sizes (`memgate_crm_<sizes>`) unless
`--reimport`; `--drop` removes it at the end.
"""

import argparse
import base64
import concurrent.futures
import hashlib
import json
import math
import os
import re
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import procs as P  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOADTEST = os.path.join(REPO, "loadtest")
CACHE = os.path.join(LOADTEST, ".cache")
TENANT = "crm"
LOCOMO = "/work/shared/benchmarks/locomo/locomo10.json"
MIX = 0.1

FIRST = ["Ana", "Ben", "Chloe", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jun", "Kofi",
         "Lena", "Mateo", "Nora", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tomoko", "Umar",
         "Vera", "Wei", "Ximena", "Yusuf", "Zoe"]
LAST = ["Almeida", "Becker", "Chen", "Dubois", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova",
        "Jensen", "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt",
        "Tanaka", "Usman", "Varga", "Wang", "Yilmaz", "Zhou"]
LANGS = [("en", "Europe/London"), ("de", "Europe/Berlin"), ("fr", "Europe/Paris"), ("es", "Europe/Madrid"),
         ("pt-BR", "America/Sao_Paulo"), ("zh-CN", "Asia/Shanghai"), ("ja", "Asia/Tokyo"),
         ("en", "America/New_York")]
CHANNELS = ["email", "phone", "chat", "sms"]
REQUESTS = ["call after 18:00", "no calls before 10:00", "send invoices to accounts payable",
            "prefers written confirmation", "leave parcels with the neighbour", "speak slowly, hard of hearing",
            "always ship in one parcel", "no marketing emails"]
PROCESSES = ["Refund process", "Replacement process", "Warranty claim", "Lost parcel investigation",
             "Double charge reversal", "Address change after dispatch", "Invoice correction",
             "Order cancellation", "Damaged delivery claim", "Technician visit booking"]
REGIONS = ["EU", "UK", "US", "LATAM", "APAC"]
BRANDS = ["Nordlys", "Kestrel", "Aurora", "Basalt", "Cobalt", "Fjord", "Juniper", "Lumen", "Marlow", "Onyx"]


def h(text):
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def pick(seq, *parts):
    return seq[h("/".join(str(p) for p in parts)) % len(seq)]


def locomo_turns():
    with open(LOCOMO) as f:
        convs = json.load(f)
    turns = []
    for conv in convs:
        c = conv["conversation"]
        for key in sorted(k for k in c if re.fullmatch(r"session_\d+", k)):
            for turn in c[key]:
                text = turn.get("text", "").strip()
                if len(text) > 30:
                    turns.append(text)
    return turns


# ----- the records --------------------------------------------------------------------------------

def customer(k, t):
    """Customer k, from template t (what they bought and what went wrong)."""
    product, colour, issue = pick(data.PRODUCTS, "p", t), pick(data.COLOURS, "c", t), pick(data.ISSUES, "i", t)
    lang, tz = pick(LANGS, "l", t)
    name = f"{pick(FIRST, 'f', k)} {pick(LAST, 'n', k)}"
    order = 4_000_000 + k
    record = {
        "id": f"cust-{k:07d}", "type": "customer_profile", "scope": [f"user:u-{k}"],
        "key": f"customer:u-{k}:profile",
        "content": {
            "name": name, "contact_email": f"u{k}@example.com", "preferred_language": lang, "timezone": tz,
            "preferred_channel": pick(CHANNELS, "ch", t),
            "last_order_date": f"2026-{1 + t % 12:02d}-{1 + t % 28:02d}",
            "special_requests": [pick(REQUESTS, "r", t)],
            "notes": f"Last order #{order}: the {colour} {product} {issue}.",
        },
    }
    question = f"Hi, it's about my order #{order}, the {colour} {product}. What is happening with it?"
    return record, question


def product_spec(j, t):
    product, colour = pick(data.PRODUCTS, "p", t), pick(data.COLOURS, "c", t)
    brand = pick(BRANDS, "b", t)
    sku = f"SKU-{j:06d}"
    record = {
        "id": f"spec-{j:06d}", "type": "product_spec", "scope": ["public"],
        "content": {
            "sku": sku, "name": f"{brand} {product}, {colour} (model {j})", "category": product,
            "status": "active",
            "description": f"The {brand} {product} in {colour}: {pick(data.RESOLUTIONS, 'd', t)} is the usual "
                           f"remedy when it {pick(data.ISSUES, 'i', t)}.",
            "price": {"amount": 20 + (t % 400), "currency": "EUR"},
            "warranty_months": 6 * (1 + t % 6),
        },
    }
    return record, f"What is the warranty on {sku}, and what does it cost?"


def sop(j, t):
    process, region, product = pick(PROCESSES, "s", t), pick(REGIONS, "g", t), pick(data.PRODUCTS, "p", t)
    code = f"SOP-{j:05d}"
    record = {
        "id": f"sop-{j:05d}", "type": "internal_sop", "scope": ["public"],
        "content": {
            "title": f"{code} {process} for {product} orders ({region})",
            "steps": f"1. Confirm the order and the {product}.\n2. Check the courier's record.\n"
                     f"3. {pick(data.RESOLUTIONS, 'r', t).capitalize()}.\n4. Write it in the customer's profile.",
            "owner_team": f"support-{region.lower()}",
        },
    }
    return record, f"Which steps does {code} give for this case?"


def note(j, t, turns, scope, prefix):
    record = {
        "id": f"{prefix}-{j:06d}", "type": "fact", "scope": [scope],
        "content": {"statement": f"Handbook note {prefix.upper()}-{j:06d}: {turns[t % len(turns)]}",
                    "source": "locomo"},
    }
    return record, None


class Workload:
    def __init__(self, customers, kb, team, pool):
        self.customers, self.kb, self.team, self.pool_size = customers, kb, team, pool
        self.specs = kb * 40 // 100
        self.sops = kb * 20 // 100
        self.facts = kb - self.specs - self.sops
        self.turns = locomo_turns()
        # How many pool entries (templates) each kind has.
        self.sizes = {"cust": max(1, min(customers, pool * 30 // 100)),
                      "spec": max(1, min(self.specs, pool * 28 // 100)),
                      "sop": max(1, min(self.sops, pool * 14 // 100)),
                      "note": max(1, min(self.facts, len(self.turns), pool * 28 // 100))}

    def kinds(self):
        """(kind, count, make(k, t) -> (record, question)) of every kind, in import order."""
        return [
            ("spec", self.specs, product_spec),
            ("sop", self.sops, sop),
            ("note", self.facts, lambda j, t: note(j, t, self.turns, "public", "kb")),
            ("team", self.team, lambda j, t: note(j, t, self.turns, f"team:t-{j % 20}", "tm")),
            ("cust", self.customers, customer),
        ]

    def pool_kind(self, kind):
        return "note" if kind == "team" else kind

    def template(self, kind, k):
        return k % self.sizes[self.pool_kind(kind)]

    def pool_records(self):
        """The records whose real embeddings make the pool: the first of each kind."""
        out = []
        for kind, count, make in self.kinds():
            if kind == "team":
                continue
            for k in range(min(count, self.sizes[kind])):
                record, _ = make(k, k)
                out.append((kind, k, record))
        return out

    def tag(self):
        return f"c{self.customers}-k{self.kb}-t{self.team}-p{self.pool_size}"


def unit(vector):
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def b64(vector):
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def unb64(text):
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


# ----- the run --------------------------------------------------------------------------------------

def say(text):
    print(time.strftime("%H:%M:%S"), text, flush=True)


class Run:
    def __init__(self, args):
        self.a = args
        self.w = Workload(args.customers, args.kb, args.team, args.pool)
        self.work = tempfile.mkdtemp(prefix="memgate-crm.")
        self.procs = P.Procs(self.work)
        self.token = os.urandom(16).hex()
        self.bin = os.environ.get("MEMGATE_BIN", os.path.join(REPO, "target/release/memgate"))
        self.loadgen = os.environ.get("LOADGEN_BIN", os.path.join(REPO, "target/release/examples/loadgen"))
        self.db = f"memgate_crm_{self.w.tag().replace('-', '_')}"
        base = args.pg_url.rsplit("/", 1)[0]
        self.db_url = f"{base}/{self.db}"
        self.results = {"sizes": {"customers": args.customers, "kb": args.kb, "team": args.team,
                                  "pool": args.pool, "records": args.customers + args.kb + args.team},
                        "machine": machine(), "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}

    # -- processes
    def config(self, name):
        path = os.path.join(self.work, f"{name}.toml")
        with open(path, "w") as f:
            f.write('[auth]\nmode = "managed"\nrate_limit_per_minute = 1000000000\n\n'
                    "[admin]\nrate_limit_per_minute = 1000000\n")
        return path

    def start_mock(self):
        proc = self.procs.spawn("mock", [self.bin, "mock-upstream", "--listen", "127.0.0.1:0", "--no-record"])
        self.procs.wait_listening(proc, "mock-upstream", timeout=30)
        self.mock = proc
        return proc

    def start_memgate(self, name, db_url, ready_timeout=900, binary=None):
        env = dict(os.environ, MEMGATE_DATABASE_URL=db_url, MEMGATE_LOG_LEVEL="warn,memgate=info",
                   MEMGATE_ADMIN_TOKEN=self.token, ANTHROPIC_API_KEY="sk-ant-crm-upstream")
        env.pop("MEMGATE_REDIS_URL", None)
        started = time.monotonic()
        proc = self.procs.spawn(name, [binary or self.bin, "serve", "--config", self.config(name), "--listen", "127.0.0.1:0",
                                       "--upstream-url", self.mock.url, "--auth-mode", "managed"], env=env, cwd=REPO)
        self.procs.wait_listening(proc, "memgate", timeout=ready_timeout)
        listening = time.monotonic() - started
        P.poll(f"{name} /readyz", lambda: P.http("GET", proc.url + "/readyz", timeout=5)[0] == 200,
               ready_timeout, proc=proc)
        proc.ready_s = time.monotonic() - started
        proc.listening_s = listening
        with open(proc.err_path, errors="replace") as f:
            match = re.search(r"embedding model loaded model_id=(\S+)", re.sub(r"\x1b\[[0-9;]*m", "", f.read()))
        proc.model_id = match.group(1) if match else None
        say(f"{name} at {proc.url}: listening after {listening:.1f} s, ready after {proc.ready_s:.1f} s, "
            f"RSS {proc.rss_mb():.0f} MB")
        return proc

    def admin(self, proc, method, path, payload=None, body=None, timeout=1800):
        headers = {"authorization": f"Bearer {self.token}", "x-memory-tenant": TENANT}
        if body is not None:
            headers["content-type"] = "application/x-ndjson"
            status, raw = P.http(method, proc.url + "/admin/v1" + path, body, headers, timeout)
            try:
                return status, json.loads(raw)
            except ValueError:
                return status, {"raw": raw[:500].decode(errors="replace")}
        return P.http_json(method, proc.url + "/admin/v1" + path, payload, headers, timeout)

    def psql(self, sql, db="postgres"):
        base = self.a.pg_url.rsplit("/", 1)[0]
        out = subprocess.run(["psql", f"{base}/{db}", "-tAc", sql], capture_output=True, text=True)
        if out.returncode != 0:
            raise P.StartError(f"psql {sql!r}: {out.stderr.strip()}")
        return out.stdout.strip()

    # -- the pool
    def pool(self):
        """{(kind, t): base64 vector} and the model id: from the cache, or made now."""
        path = os.path.join(CACHE, f"crm-pool-{self.w.tag()}.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                entries = [json.loads(line) for line in f if line.strip()]
            models = {e["model"] for e in entries}
            if models == {self.model_id}:
                say(f"pool: {len(entries)} embeddings from {path}")
                return {(e["kind"], e["t"]): e["vector"] for e in entries}
            say(f"pool: {path} holds vectors of {models}, the running model is {self.model_id}: made again")
        os.makedirs(CACHE, exist_ok=True)
        records = self.w.pool_records()
        say(f"pool: embedding {len(records)} distinct texts with the running model (scratch memgate on SQLite)")
        t0 = time.monotonic()
        db_path = f"{self.work}/pool.db"
        scratch = self.start_memgate("memgate-pool", f"sqlite://{db_path}")
        by_id = {}
        chunk = 1000
        # Every chunk stored first (seconds); the one background embedding then works through
        # them all at the embedder's pace: the fresh-text ingest rate.
        for start in range(0, len(records), chunk):
            part = records[start:start + chunk]
            for kind, t, record in part:
                by_id[record["id"]] = (kind, t)
            body = "".join(json.dumps(r, separators=(",", ":")) + "\n" for _, _, r in part)
            status, answer = self.admin(scratch, "POST", "/import", body=body)
            if status != 201:
                raise P.StartError(f"pool import: {status} {json.dumps(answer)[:600]}")
        stored_s = time.monotonic() - t0

        def embedded():
            db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
            try:
                return db.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0]
            finally:
                db.close()

        ingest = {"stored_s": round(stored_s, 1)}
        if self.a.ingest_rate > 0:
            # Live queries during the import, each a new question (the model runs for every one).
            key = self.key(scratch)
            template = os.path.join(self.work, "unique.json")
            with open(template, "w") as f:
                f.write(data.unique_template())
            e0, l0 = embedded(), time.monotonic()
            argv = [self.loadgen, "--url", scratch.url + "/v1/messages", "--rate", str(self.a.ingest_rate),
                    "--duration", str(self.a.ingest_seconds), "--body-file", template, "--unique", "--json",
                    "--header", f"x-api-key: {key}", "--header", "anthropic-version: 2023-06-01",
                    "--header", "x-memory-subject: u-1", "--count-header", "x-memory-status"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=self.a.ingest_seconds + 120)
            e1, l1 = embedded(), time.monotonic()
            if out.returncode != 0:
                raise P.StartError(f"loadgen during the import: {out.stderr[-800:]}")
            live = json.loads(out.stdout)
            ingest.update({
                "with_live_queries": {"rate": self.a.ingest_rate, "seconds": round(l1 - l0, 1),
                                      "embedded": e1 - e0, "records_per_s": round((e1 - e0) / (l1 - l0), 1),
                                      "query_p50_ms": live["latency_ms"]["p50"],
                                      "query_p99_ms": live["latency_ms"]["p99"], "errors": live["errors"],
                                      "statuses": live.get("header_counts", {})}})
            w = ingest["with_live_queries"]
            say(f"  ingest with {self.a.ingest_rate} new queries/s: {w['records_per_s']} records/s; "
                f"query p50 {w['query_p50_ms']} ms, p99 {w['query_p99_ms']} ms, errors {w['errors']}")
        last = [time.monotonic(), 0]

        def all_embedded():
            n = embedded()
            if time.monotonic() - last[0] > 30:
                say(f"  pool: {n}/{len(records)} embedded ({n / (time.monotonic() - t0):.0f}/s)")
                last[0] = time.monotonic()
            return n >= len(records)

        P.poll("the pool embedded", all_embedded, 7200, interval=0.5, proc=scratch)
        status, raw = P.http("GET", scratch.url + "/admin/v1/export?embeddings=true",
                             headers={"authorization": f"Bearer {self.token}", "x-memory-tenant": TENANT},
                             timeout=600)
        if status != 200:
            raise P.StartError(f"pool export: {status}")
        entries = []
        for line in raw.decode().splitlines():
            row = json.loads(line)
            kind, t = by_id[row["id"]]
            entries.append({"kind": kind, "t": t, "model": row["embedding"]["model"],
                            "vector": row["embedding"]["vector"]})
        self.procs.stop(scratch)
        with open(path + ".tmp", "w") as f:
            for e in entries:
                f.write(json.dumps(e) + "\n")
        os.replace(path + ".tmp", path)
        took = time.monotonic() - t0
        self.results["pool"] = {"entries": len(entries), "built_s": round(took, 1),
                                "records_per_s": round(len(entries) / took, 1), "ingest": ingest}
        say(f"pool: {len(entries)} embeddings in {took:.0f} s ({len(entries) / took:.0f}/s), cached in {path}")
        return {(e["kind"], e["t"]): e["vector"] for e in entries}

    # -- the import files
    def files(self, pool):
        """The workload as JSON Lines with vectors, `--chunk` lines a file (cached)."""
        folder = os.path.join(CACHE, f"crm-{self.w.tag()}-chunk{self.a.chunk}")
        done_mark = os.path.join(folder, "DONE")
        if os.path.exists(done_mark):
            with open(done_mark) as f:
                if f.read().strip() == self.model_id:
                    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".jsonl"))
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        say(f"generating {self.results['sizes']['records']} records with vectors into {folder}")
        t0 = time.monotonic()
        decoded = {}

        def vec(kind, t):
            if (kind, t) not in decoded:
                decoded[(kind, t)] = unb64(pool[(kind, t)])
            return decoded[(kind, t)]

        paths, lines, n = [], [], 0
        for kind, count, make in self.w.kinds():
            pk = self.w.pool_kind(kind)
            size = self.w.sizes[pk]
            for k in range(count):
                t = self.w.template(kind, k)
                record, _ = make(k, t)
                if kind != "team" and k < size:
                    vector = pool[(pk, t)]  # its own real embedding, unchanged
                else:
                    a, b = vec(pk, t), vec(pk, h(record["id"]) % size)
                    vector = b64(unit([x + MIX * y for x, y in zip(a, b)]))
                record["embedding"] = {"model": self.model_id, "vector": vector}
                lines.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
                if len(lines) == self.a.chunk:
                    paths.append(self._write(folder, len(paths), lines))
                    lines = []
                n += 1
                if n % 100_000 == 0:
                    say(f"  {n} generated ({n / (time.monotonic() - t0):.0f}/s)")
        if lines:
            paths.append(self._write(folder, len(paths), lines))
        with open(done_mark, "w") as f:
            f.write(self.model_id)
        self.results["generate_s"] = round(time.monotonic() - t0, 1)
        return paths

    @staticmethod
    def _write(folder, index, lines):
        path = os.path.join(folder, f"part-{index:05d}.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def import_all(self, proc, paths):
        """POST every file, `--import-requests` at a time (each its own import and transaction)."""
        t0 = time.monotonic()
        stored = re_embedded = 0

        def send(path):
            with open(path, "rb") as f:
                body = f.read()
            status, answer = self.admin(proc, "POST", "/import", body=body)
            if status != 201:
                raise P.StartError(f"import of {path}: {status} {json.dumps(answer)[:800]}")
            return answer.get("embeddings") or {}

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.import_requests) as pool:
            for i, counts in enumerate(pool.map(send, paths)):
                stored += counts.get("stored", 0)
                re_embedded += counts.get("re_embedded", 0)
                if i % 20 == 19 or i == len(paths) - 1:
                    done = (i + 1) * self.a.chunk
                    el = time.monotonic() - t0
                    say(f"  imported {min(done, self.results['sizes']['records'])} in {el:.0f} s "
                        f"({done / el:.0f}/s), RSS {proc.rss_mb():.0f} MB")
        took = time.monotonic() - t0
        records = self.results["sizes"]["records"]
        self.results["import"] = {"records": records, "seconds": round(took, 1),
                                  "records_per_s": round(records / took, 1), "vectors_stored": stored,
                                  "re_embedded": re_embedded, "chunk": self.a.chunk,
                                  "requests_at_once": self.a.import_requests,
                                  "rss_after_mb": round(proc.rss_mb(), 1), "rss_peak_mb": round(P.hwm_kb(proc.pid) / 1024, 1)}
        say(f"import: {records} records with vectors in {took:.0f} s ({records / took:.0f}/s)")

    # -- the queries
    def questions(self):
        """(kind, subject, question, expected id): `--questions` of each kind, deterministic."""
        out = []
        n = self.a.questions
        for i in range(n):
            k = h(f"q-cust-{i}") % self.w.customers
            record, question = customer(k, self.w.template("cust", k))
            out.append(("subject", f"u-{k}", question, record["id"]))
        for i in range(n):
            subject = f"u-{h(f'q-kb-subject-{i}') % self.w.customers}"
            if i % 2 == 0 and self.w.specs:
                j = h(f"q-spec-{i}") % self.w.specs
                record, question = product_spec(j, self.w.template("spec", j))
            else:
                j = h(f"q-sop-{i}") % max(1, self.w.sops)
                record, question = sop(j, self.w.template("sop", j))
            out.append(("kb", subject, question, record["id"]))
        return out

    def settle(self):
        """VACUUM (ANALYZE) and CHECKPOINT the workload's database after the import, as a DBA does
        after a bulk load. Without it the first reader of each row sets its hint bits and so
        dirties every page the import wrote: the replica's startup load did, and PostgreSQL's
        write-back of ~8 GB then held commits for 2.5-3 s and connections for 5 s while the
        requests ran (measured: 529s and timeouts at 1,000/s right after a 1.11M import)."""
        t0 = time.monotonic()
        self.psql("VACUUM (ANALYZE)", self.db)
        self.psql("CHECKPOINT", self.db)
        took = time.monotonic() - t0
        self.results["import"]["vacuum_checkpoint_s"] = round(took, 1)
        say(f"VACUUM (ANALYZE) and CHECKPOINT after the import: {took:.0f} s")

    def key(self, proc):
        status, answer = self.admin(proc, "POST", "/keys", {
            "name": "crm-load", "scopes": ["team:t-3"], "permissions": ["assert_subject"],
            "rate_limit_per_minute": 1000000000})
        if status != 201:
            raise P.StartError(f"creating a gateway key: {status} {answer}")
        return answer["key"]

    def accuracy(self, proc, questions):
        """Per kind: of its distinct questions, how many injected the expected record (explain)."""
        hits = {"subject": [0, 0], "kb": [0, 0]}
        misses = []
        for kind, subject, question, expected in questions:
            payload = {"request": json.loads(data.body(question)),
                       "caller": {"scopes": ["team:t-3"], "subject": subject}}
            status, answer = self.admin(proc, "POST", "/explain", payload, timeout=60)
            if status != 200:
                raise P.StartError(f"explain: {status} {answer}")
            hit = expected in (answer.get("injected") or [])
            hits[kind][0] += hit
            hits[kind][1] += 1
            if not hit and len(misses) < 10:
                misses.append({"kind": kind, "question": question, "expected": expected,
                               "injected": answer.get("injected")})
        self.results["injected"] = {k: {"hit": v[0], "of": v[1], "percent": round(100 * v[0] / max(1, v[1]), 2)}
                                    for k, v in hits.items()}
        self.results["injected_misses"] = misses
        for k, v in self.results["injected"].items():
            say(f"injected ({k}): {v['hit']}/{v['of']} = {v['percent']} %")

    def loadgen_run(self, url, lines_path, key, label, duration):
        argv = [self.loadgen, "--url", url + "/v1/messages", "--rate", str(self.a.rate), "--duration", str(duration),
                "--body-lines", lines_path, "--line-header", "x-memory-subject", "--json", "--label", label,
                "--header", f"x-api-key: {key}", "--header", "anthropic-version: 2023-06-01",
                "--count-header", "x-memory-status"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
        if out.returncode != 0:
            raise P.StartError(f"loadgen {label}: {out.stderr[-800:]}")
        return json.loads(out.stdout)

    def lines(self, questions):
        """The loadgen body file of each kind: `subject<TAB>body` per question."""
        paths = {}
        for kind in ("subject", "kb"):
            paths[kind] = os.path.join(self.work, f"{kind}.lines")
            with open(paths[kind], "w") as f:
                for k, subject, question, _ in questions:
                    if k == kind:
                        f.write(f"{subject}\t{data.body(question)}\n")
        return paths

    def load(self, proc, key, questions):
        runs = {}
        paths = self.lines(questions)
        for kind in ("subject", "kb"):
            path = paths[kind]
            direct = self.loadgen_run(self.mock.url, path, "sk-ant-direct", f"direct-{kind}", self.a.duration)
            self.loadgen_run(proc.url, path, key, f"warmup-{kind}", 3)
            cpu0, busy0 = P.cpu_seconds(proc.pid), P.busy_cpu_seconds()
            via = self.loadgen_run(proc.url, path, key, f"memgate-{kind}", self.a.duration)
            cpu = P.cpu_seconds(proc.pid) - cpu0
            busy = P.busy_cpu_seconds() - busy0
            count = max(1, via["count"])
            runs[kind] = {
                "rate": self.a.rate, "duration_s": self.a.duration, "count": via["count"], "errors": via["errors"],
                "direct_ms": {k: direct["latency_ms"][k] for k in ("p50", "p99")},
                "memgate_ms": {k: via["latency_ms"][k] for k in ("p50", "p99")},
                "added_p50_ms": round(via["latency_ms"]["p50"] - direct["latency_ms"]["p50"], 3),
                "added_p99_ms": round(via["latency_ms"]["p99"] - direct["latency_ms"]["p99"], 3),
                "memgate_cpu_ms_per_request": round(1000 * cpu / count, 3),
                "machine_busy_cores": round(busy / self.a.duration, 2),
                "statuses": via.get("header_counts", {}),
            }
            r = runs[kind]
            say(f"{kind} at {self.a.rate}/s: added p50 {r['added_p50_ms']} ms, p99 {r['added_p99_ms']} ms, "
                f"{r['memgate_cpu_ms_per_request']} ms CPU/request, errors {r['errors']}")
        self.results["load"] = runs

    def main(self):
        try:
            os.makedirs(os.path.join(LOADTEST, "results", "crm"), exist_ok=True)
            self.start_mock()
            exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{self.db}'") == "1"
            if exists and self.a.reimport:
                self.psql(f"DROP DATABASE {self.db}")
                exists = False
            if not exists:
                self.psql(f"CREATE DATABASE {self.db}")
            first = self.start_memgate("memgate-import", self.db_url)
            self.model_id = first.model_id
            self.results["model_id"] = self.model_id
            self.results["rss_empty_mb"] = round(first.rss_mb(), 1)
            have = int(self.psql(f"SELECT count(*) FROM memories WHERE tenant = '{TENANT}'", self.db) or 0)
            if have != self.results["sizes"]["records"]:
                if have:
                    raise P.StartError(f"{self.db} holds {have} records, not the workload's "
                                       f"{self.results['sizes']['records']}: run with --reimport")
                self.procs.stop(first)
                pool = self.pool()
                paths = self.files(pool)
                first = self.start_memgate("memgate-import", self.db_url)
                self.import_all(first, paths)
                self.settle()
            else:
                say(f"{self.db} already holds the workload ({have} records): not imported again")
            self.procs.stop(first)
            if self.a.compare:
                self.compare(self.a.compare)
                return

            proc = self.start_memgate("memgate-serve", self.db_url)
            self.results["startup"] = {"listening_s": round(proc.listening_s, 1), "ready_s": round(proc.ready_s, 1),
                                       "rss_ready_mb": round(proc.rss_mb(), 1)}
            key = self.key(proc)
            questions = self.questions()
            t0 = time.monotonic()
            self.accuracy(proc, questions)
            self.results["accuracy_s"] = round(time.monotonic() - t0, 1)
            self.load(proc, key, questions)
            self.results["rss_after_load_mb"] = round(proc.rss_mb(), 1)
            self.results["rss_peak_mb"] = round(P.hwm_kb(proc.pid) / 1024, 1)
            self.results["loadavg_after"] = P.loadavg()
            out = os.path.join(LOADTEST, "results", "crm", f"crm-{self.a.customers}.json")
            with open(out, "w") as f:
                json.dump(self.results, f, indent=2)
            self.summary(out)
        finally:
            self.procs.stop_all()
            if self.a.drop:
                try:
                    self.psql(f"DROP DATABASE IF EXISTS {self.db}")
                except P.StartError as err:
                    say(str(err))

    # -- comparing builds
    def injected_ids(self, proc, key, questions):
        """Each question sent once, one at a time, through the proxy; the ids each request
        injected, read back from the admin API's recent requests (what the proxy path injects,
        bounded scan and all, unlike explain's detailed run)."""
        out = []
        for start in range(0, len(questions), 100):
            batch = questions[start:start + 100]
            for kind, subject, question, _ in batch:
                status, _ = P.http("POST", proc.url + "/v1/messages", data.body(question),
                                   {"x-api-key": key, "anthropic-version": "2023-06-01",
                                    "content-type": "application/json", "x-memory-subject": subject}, timeout=60)
                if status != 200:
                    raise P.StartError(f"a question through the proxy: {status}")
            status, recent = self.admin(proc, "GET", f"/requests/recent?limit={len(batch)}")
            if status != 200:
                raise P.StartError(f"recent requests: {status} {recent}")
            newest_first = recent["data"][:len(batch)]
            out.extend([r["injected_ids"], r["memory_status"]] for r in reversed(newest_first))
        return out

    def compare(self, binaries):
        """Builds against each other on the existing store: per round, each binary in turn is
        started, warmed up, asked every question once (the ids it injects), then driven at
        `--rate` for `--duration` s per kind with its CPU read from /proc."""
        questions = self.questions()
        paths = self.lines(questions)
        rows, ids = [], {}
        for round_ in range(1, self.a.rounds + 1):
            for label, binary in binaries:
                proc = self.start_memgate(f"memgate-{label}-{round_}", self.db_url, binary=binary)
                key = self.key(proc)
                # Warmed first (every question at least once), so that what is compared is the
                # ranking: a replica just started can answer its first questions `degraded` (no
                # query embedding within the budget), one build or the other.
                for kind in ("subject", "kb"):
                    asked = sum(1 for q in questions if q[0] == kind)
                    self.loadgen_run(proc.url, paths[kind], key, f"warmup-{kind}",
                                     max(3, math.ceil(asked / max(1, self.a.rate))))
                if label not in ids:
                    ids[label] = self.injected_ids(proc, key, questions)
                for kind in ("subject", "kb"):
                    cpu0 = P.cpu_seconds(proc.pid)
                    via = self.loadgen_run(proc.url, paths[kind], key, f"{label}-{kind}", self.a.duration)
                    cpu = P.cpu_seconds(proc.pid) - cpu0
                    row = {"round": round_, "build": label, "kind": kind, "count": via["count"],
                           "errors": via["errors"], "p50_ms": via["latency_ms"]["p50"],
                           "p99_ms": via["latency_ms"]["p99"],
                           "memgate_cpu_ms_per_request": round(1000 * cpu / max(1, via["count"]), 3),
                           "statuses": via.get("header_counts", {}).get("x-memory-status", {}),
                           "rss_ready_mb": round(proc.rss_mb(), 1), "ready_s": round(proc.ready_s, 1)}
                    rows.append(row)
                    say(f"round {round_} {label:10} {kind:7} CPU {row['memgate_cpu_ms_per_request']} ms/request, "
                        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, errors {row['errors']}, {row['statuses']}")
                self.procs.stop(proc)
        first = binaries[0][0]
        same = {label: ids[label] == ids[first] for label, _ in binaries}
        differing = {label: [{"question": i, "text": questions[i][2], first: a, label: b}
                             for i, (a, b) in enumerate(zip(ids[first], ids[label])) if a != b][:20]
                     for label, _ in binaries}
        self.results["compare"] = {"rate": self.a.rate, "duration_s": self.a.duration, "rows": rows,
                                   "binaries": dict(binaries), "injected_identical_to_first": same,
                                   "differing_questions": differing}
        stamp = time.strftime("%Y-%m-%dT%H%M")
        out = os.path.join(LOADTEST, "results", "crm", f"compare-{self.a.customers}-{stamp}.json")
        with open(out, "w") as f:
            json.dump(self.results, f, indent=2)
        for label, _ in binaries:
            print(f"  {label}: injected ids (and statuses) identical to {first}'s for all "
                  f"{len(questions)} questions: {same[label]}"
                  + ("" if same[label] else f" (questions {[d['question'] for d in differing[label]]})"))
        print(f"  results: {out}")

    def summary(self, out):
        r = self.results
        print(f"\nCRM workload, {r['sizes']['records']} records ({r['sizes']['customers']} customers), "
              f"model {r['model_id']}")
        if "import" in r:
            i = r["import"]
            print(f"  import with vectors   {i['seconds']} s ({i['records_per_s']}/s), peak RSS {i['rss_peak_mb']} MB")
            if "vacuum_checkpoint_s" in i:
                print(f"  then VACUUM, CHECKPOINT {i['vacuum_checkpoint_s']} s")
        s = r["startup"]
        print(f"  startup to ready      {s['ready_s']} s (listening after {s['listening_s']} s)")
        print(f"  RSS ready / after     {s['rss_ready_mb']} / {r['rss_after_load_mb']} MB (peak {r['rss_peak_mb']})")
        for kind, v in r["injected"].items():
            print(f"  injected ({kind:7})     {v['percent']} % of {v['of']}")
        for kind, v in r["load"].items():
            print(f"  {kind:7} at {v['rate']}/s   added p50 {v['added_p50_ms']} ms, p99 {v['added_p99_ms']} ms, "
                  f"{v['memgate_cpu_ms_per_request']} ms CPU/request, errors {v['errors']}")
        other = [n for n in os.listdir(os.path.dirname(out)) if n.startswith("crm-") and n.endswith(".json") and n != os.path.basename(out)]
        for name in sorted(other):
            with open(os.path.join(os.path.dirname(out), name)) as f:
                o = json.load(f)
            for kind in ("subject", "kb"):
                if kind in o.get("load", {}) and kind in r["load"]:
                    a, b = r["load"][kind]["memgate_cpu_ms_per_request"], o["load"][kind]["memgate_cpu_ms_per_request"]
                    print(f"  CPU/request {kind} vs {o['sizes']['customers']} customers: {a} / {b} = {a / b:.2f}x")
        print(f"  results: {out}")


def machine():
    info = {"cores": os.cpu_count(), "loadavg": P.loadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        info["commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
    except (OSError, StopIteration):
        pass
    return info


def builds(text):
    """`label=path,label=path` (a bare path is labelled by its file name)."""
    out = []
    for part in text.split(","):
        label, _, path = part.rpartition("=")
        path = os.path.abspath(path)
        if not os.access(path, os.X_OK):
            raise argparse.ArgumentTypeError(f"{path} is not an executable memgate build")
        out.append((label or os.path.basename(path), path))
    if len(out) < 2:
        raise argparse.ArgumentTypeError("name two builds or more")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=1_000_000)
    parser.add_argument("--kb", type=int, default=100_000)
    parser.add_argument("--team", type=int, default=10_000)
    parser.add_argument("--pool", type=int, default=20_000)
    parser.add_argument("--chunk", type=int, default=5000, help="JSON Lines per import request")
    parser.add_argument("--import-requests", type=int, default=2,
                        help="import requests in flight at once (each is its own import)")
    parser.add_argument("--questions", type=int, default=300, help="distinct questions of each kind")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--ingest-rate", type=int, default=20,
                        help="new-question queries per second while the pool is embedded (0: none)")
    parser.add_argument("--ingest-seconds", type=int, default=60)
    parser.add_argument("--pg-url", default=os.environ.get("MEMGATE_TEST_POSTGRES_URL",
                                                           "postgres://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--reimport", action="store_true", help="drop the workload's database and import again")
    parser.add_argument("--drop", action="store_true", help="drop the workload's database at the end")
    parser.add_argument("--compare", type=builds, metavar="LABEL=BIN,LABEL=BIN",
                        help="compare memgate builds on the store instead of the one run: each in turn, "
                             "--rounds times, at --rate for --duration s per kind; and whether they inject "
                             "the same ids for every question")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --compare")
    args = parser.parse_args()
    Run(args).main()


if __name__ == "__main__":
    main()
