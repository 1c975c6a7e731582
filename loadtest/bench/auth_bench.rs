//! `auth_bench`: what authenticating a request costs, through `Authenticator::authenticate`
//! with a `HeaderMap` as the proxy hands it over (the per-caller rate-limit check included).
//!
//! - gateway key (`x-api-key`), verified-key cache hit: the usual case;
//! - gateway key, cache miss: a fresh authenticator each time, so the key is read from the store
//!   (a temporary SQLite file);
//! - JWT (`Authorization: Bearer`) with HS256, and RS256 (2048-bit), ES256 (P-256) and EdDSA
//!   (Ed25519) when the `openssl` command is there to make the key pairs at start (the crate adds
//!   no key-generation dependency); `iss`, `aud`, `exp` and claim mapping all checked. Each twice:
//!   a token seen for the first time (every call a different token: the signature is checked),
//!   and the same token again (the verified-token cache answers).
//!
//! Run: `cargo run --release --example auth_bench -- [--seconds 2] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Summary, TempDir};
use http::{HeaderMap, HeaderValue};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use memgate::identity::AuthMode;
use memgate::identity::jwt::JwtConfig;
use memgate::identity::keys::NewKey;
use memgate::identity::{Authenticator, ClaimMapping, IdentityConfig};
use memgate::store::Store;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const HMAC_SECRET: &str = "bench-secret-that-is-long-enough-for-hs256-0123456789";
const ISSUER: &str = "https://idp.example.com";
const AUDIENCE: &str = "memgate";
/// High enough never to refuse a benchmark request, so the check itself is what is measured.
const RATE_LIMIT: u32 = 1_000_000_000;

/// Cost of authentication per request.
#[derive(Parser, Debug)]
#[command(name = "auth_bench")]
struct Args {
    /// Seconds per measurement (at least `--min-ops` operations).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    #[arg(long, default_value_t = 2000)]
    min_ops: usize,
    /// Cache-miss measurements (each builds a fresh authenticator and reads the key from SQLite).
    #[arg(long, default_value_t = 500)]
    misses: usize,
    /// Distinct tokens per JWT algorithm for the first-sight measurement.
    #[arg(long, default_value_t = 500)]
    first_sight: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

fn identity(jwt: JwtConfig) -> IdentityConfig {
    IdentityConfig {
        mode: AuthMode::Managed,
        upstream_key: Some(SecretString::from("sk-ant-bench-upstream")),
        jwt,
        claims: ClaimMapping::default(),
        default_rate_limit_per_minute: RATE_LIMIT,
        passthrough_rate_limit_per_minute: 0,
        preauth_rate_limit_per_minute: 0,
        stale_key_grace: memgate::identity::keys::DEFAULT_STALE_GRACE,
    }
}

fn jwt_config(hmac: bool, public_key_file: Option<PathBuf>) -> JwtConfig {
    JwtConfig {
        hmac_secret: hmac.then(|| SecretString::from(HMAC_SECRET)),
        public_key_file,
        jwks_file: None,
        issuer: Some(ISSUER.into()),
        audience: Some(AUDIENCE.into()),
        leeway_secs: 30,
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let machine_before = common::machine();
    let dir = TempDir::new("memgate-auth-bench")?;
    let url = format!("sqlite://{}", dir.path().join("auth.db").display());
    let store = Store::connect(&url).await?;
    store.migrate().await?;
    let budget = Duration::from_secs_f64(args.seconds);
    let mut rows = Vec::new();

    // Gateway key.
    let auth = Authenticator::new(identity(jwt_config(true, None)), store.clone())?;
    let (_, secret) = auth
        .keys()
        .issue(&NewKey {
            tenant: "default".into(),
            name: "bench".into(),
            scopes: vec!["team:sales".into(), "role:agent".into()],
            permissions: vec!["assert_subject".into()],
            rate_limit_per_minute: Some(RATE_LIMIT),
        })
        .await?;
    let mut headers = base_headers();
    headers.insert("x-api-key", HeaderValue::from_str(&secret)?);
    auth.authenticate(memgate::http::headers::credentials(&headers), "unknown").await?; // fills the cache
    rows.push(measure("gateway key, cache hit", &auth, &headers, budget, args.min_ops).await?);

    let mut misses = Vec::with_capacity(args.misses);
    for _ in 0..args.misses {
        let fresh = Authenticator::new(identity(jwt_config(false, None)), store.clone())?;
        let started = Instant::now();
        fresh.authenticate(memgate::http::headers::credentials(&headers), "unknown").await?;
        misses.push(started.elapsed());
    }
    rows.push(row("gateway key, cache miss (SQLite read)", &misses, None));

    // JWTs.
    let claims = json!({
        "sub": "u-789",
        "team": "sales",
        "tenant": "default",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": jsonwebtoken::get_current_timestamp() + 3600,
        "iat": jsonwebtoken::get_current_timestamp(),
    });
    let hmac = EncodingKey::from_secret(HMAC_SECRET.as_bytes())?;
    let hs = sign_many(Algorithm::HS256, &claims, &hmac, args.first_sight)?;
    rows.extend(measure_jwt("JWT HS256", &auth, &hs, budget, args.min_ops).await?);

    let mut notes = Vec::new();
    match openssl_keys(dir.path()) {
        Ok(keys) => {
            for (label, alg, private, public) in keys {
                let encoding = match alg {
                    Algorithm::RS256 => EncodingKey::from_rsa_pem(&std::fs::read(&private)?)?,
                    Algorithm::ES256 => EncodingKey::from_ec_pem(&std::fs::read(&private)?)?,
                    _ => EncodingKey::from_ed_pem(&std::fs::read(&private)?)?,
                };
                let tokens = sign_many(alg, &claims, &encoding, args.first_sight)?;
                let auth = Authenticator::new(identity(jwt_config(false, Some(public))), store.clone())?;
                rows.extend(measure_jwt(label, &auth, &tokens, budget, args.min_ops).await?);
            }
        }
        Err(err) => notes.push(format!("asymmetric JWTs not measured: {err}")),
    }

    let report = json!({
        "bench": "auth_bench",
        "store": "SQLite (temporary file)",
        "rows": rows,
        "notes": notes,
        "machine_before": machine_before,
        "machine_after": common::machine(),
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "authentication per request, through Authenticator::authenticate (rate-limit check included)"
        );
        println!(
            "{:<40} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "case", "ops", "mean µs", "p50 µs", "p99 µs", "max µs", "ops/s"
        );
        for r in report["rows"].as_array().into_iter().flatten() {
            println!(
                "{:<40} {:>9} {:>10.2} {:>10.2} {:>10.2} {:>10.1} {:>10.0}",
                r["case"].as_str().unwrap_or(""),
                common::text(&r["latency"]["count"]),
                r["latency"]["mean_us"].as_f64().unwrap_or(0.0),
                r["latency"]["p50_us"].as_f64().unwrap_or(0.0),
                r["latency"]["p99_us"].as_f64().unwrap_or(0.0),
                r["latency"]["max_us"].as_f64().unwrap_or(0.0),
                r["ops_per_s"].as_f64().unwrap_or(0.0),
            );
        }
        for note in &notes {
            println!("note: {note}");
        }
        println!();
        println!("machine before: {}", report["machine_before"]);
        println!("machine after:  {}", report["machine_after"]);
    }
    Ok(())
}

fn base_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    headers.insert("user-agent", HeaderValue::from_static("Anthropic/Python 0.40.0"));
    headers
}

/// `count` tokens with the same claims but each its own `jti`, so each is a different token.
fn sign_many(
    alg: Algorithm,
    claims: &Value,
    key: &EncodingKey,
    count: usize,
) -> Result<Vec<String>, BoxError> {
    (0..count.max(1))
        .map(|i| {
            let mut claims = claims.clone();
            claims["jti"] = json!(format!("bench-{i}"));
            Ok(jsonwebtoken::encode(&Header::new(alg), &claims, key)?)
        })
        .collect()
}

/// Two rows: every token once (signature checked), then the first one over and over (cached).
async fn measure_jwt(
    label: &str,
    auth: &Authenticator,
    tokens: &[String],
    budget: Duration,
    min_ops: usize,
) -> Result<Vec<Value>, BoxError> {
    let with_token = |token: &str| -> Result<HeaderMap, BoxError> {
        let mut headers = base_headers();
        headers.insert("authorization", HeaderValue::from_str(&format!("Bearer {token}"))?);
        Ok(headers)
    };
    let mut first_sight = Vec::with_capacity(tokens.len());
    for token in tokens {
        let headers = with_token(token)?;
        let t = Instant::now();
        let caller = auth.authenticate(memgate::http::headers::credentials(&headers), "unknown").await?;
        first_sight.push(t.elapsed());
        if !caller.scopes.contains("team:sales") {
            return Err(format!("{label}: claims were not mapped").into());
        }
    }
    let cold = row(&format!("{label}, first sight"), &first_sight, None);
    let warm =
        measure(&format!("{label}, seen before"), auth, &with_token(&tokens[0])?, budget, min_ops).await?;
    Ok(vec![cold, warm])
}

/// Times `authenticate` one call at a time until `budget` has passed (and `min_ops` calls).
async fn measure(
    label: &str,
    auth: &Authenticator,
    headers: &HeaderMap,
    budget: Duration,
    min_ops: usize,
) -> Result<Value, BoxError> {
    for _ in 0..min_ops.min(1000) {
        auth.authenticate(memgate::http::headers::credentials(headers), "unknown").await?;
    }
    let mut times = Vec::with_capacity(min_ops);
    let started = Instant::now();
    while times.len() < min_ops || started.elapsed() < budget {
        let t = Instant::now();
        let caller = auth.authenticate(memgate::http::headers::credentials(headers), "unknown").await?;
        times.push(t.elapsed());
        std::hint::black_box(caller);
    }
    let wall = started.elapsed();
    Ok(row(label, &times, Some(times.len() as f64 / wall.as_secs_f64())))
}

fn row(label: &str, times: &[Duration], ops_per_s: Option<f64>) -> Value {
    let summary = Summary::of(times);
    json!({
        "case": label,
        "latency": summary.json_us(),
        "ops_per_s": ops_per_s.unwrap_or(1.0 / summary.mean.as_secs_f64().max(1e-12)),
    })
}

/// Key pairs made with the `openssl` command: (label, algorithm, private PEM, public PEM).
fn openssl_keys(dir: &Path) -> Result<Vec<(&'static str, Algorithm, PathBuf, PathBuf)>, String> {
    let specs: [(&str, Algorithm, &str, &[&str]); 3] = [
        (
            "JWT RS256 (RSA 2048)",
            Algorithm::RS256,
            "rsa",
            &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        ),
        (
            "JWT ES256 (P-256)",
            Algorithm::ES256,
            "ec",
            &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        ),
        ("JWT EdDSA (Ed25519)", Algorithm::EdDSA, "ed", &["-algorithm", "ED25519"]),
    ];
    let mut out = Vec::new();
    for (label, alg, name, genpkey) in specs {
        let private = dir.join(format!("{name}.pem"));
        let public = dir.join(format!("{name}.pub.pem"));
        let mut gen_args: Vec<&str> = vec!["genpkey"];
        gen_args.extend_from_slice(genpkey);
        let private_text = private.display().to_string();
        let public_text = public.display().to_string();
        gen_args.extend_from_slice(&["-out", &private_text]);
        openssl(&gen_args)?;
        openssl(&["pkey", "-in", &private_text, "-pubout", "-out", &public_text])?;
        out.push((label, alg, private, public));
    }
    Ok(out)
}

fn openssl(args: &[&str]) -> Result<(), String> {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .map_err(|err| format!("the openssl command could not run ({err})"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("openssl {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}
