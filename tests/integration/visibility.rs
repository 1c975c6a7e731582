//! Tenant and scope isolation as a property: for randomly generated tenants, scopes, records and
//! callers (real gateway keys, authenticated by the real `Authenticator`, some asserting a
//! subject), the funnel's visible set never holds a record of another tenant or of a scope the
//! caller lacks — and holds every record it should.

use crate::support::TestDb;
use axum::http::{HeaderMap, HeaderValue};
use memgate::funnel::trace::Trace;
use memgate::identity::AuthMode;
use memgate::identity::jwt::JwtConfig;
use memgate::identity::keys::NewKey;
use memgate::identity::{Authenticator, ClaimMapping, IdentityConfig};
use memgate::memory::MemoryService;
use memgate::memory::checks::schemas::SchemaSet;
use memgate::store::Store;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn subset<'a>(&mut self, pool: &[&'a str], max: usize) -> Vec<&'a str> {
        let mut picked: Vec<&str> = (0..1 + self.next(max)).map(|_| pool[self.next(pool.len())]).collect();
        picked.sort();
        picked.dedup();
        picked
    }
}

#[tokio::test]
async fn no_caller_ever_sees_another_tenants_or_another_scopes_records() {
    let db = TestDb::sqlite();
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let memories = MemoryService::new(
        store.clone(),
        Arc::new(SchemaSet::load(None).unwrap()),
        64 * 1024,
        crate::support::embedder(),
        0.99,
    );
    let identity = Authenticator::new(
        IdentityConfig {
            mode: AuthMode::Managed,
            upstream_key: Some("sk-ant-upstream".to_owned().into()),
            jwt: JwtConfig {
                hmac_secret: None,
                public_key_file: None,
                jwks_file: None,
                issuer: None,
                audience: None,
                leeway_secs: 0,
            },
            claims: ClaimMapping::default(),
            default_rate_limit_per_minute: 1_000_000,
            passthrough_rate_limit_per_minute: 0,
            preauth_rate_limit_per_minute: 0,
            stale_key_grace: memgate::identity::keys::DEFAULT_STALE_GRACE,
        },
        store,
    )
    .unwrap();

    let tenants = ["acme", "globex", "initech"];
    let scopes =
        ["public", "user:u1", "user:u2", "user:u3", "team:sales", "team:ops", "role:admin", "agent:bot"];
    // Records accumulate across seeds: later callers see a store that earlier rounds filled too.
    let mut records = Vec::new();
    for seed in [7u64, 1234, 99_991] {
        let mut rng = Rng(seed);
        for i in 0..40 {
            let tenant = tenants[rng.next(tenants.len())];
            let scope = rng.subset(&scopes, 2);
            let id = format!("s{seed}-r{i}");
            let body = json!({"id": id, "type": "fact", "scope": scope, "content": {"statement": format!("note {i} of {tenant} in round {seed}")}});
            memories.create(tenant, &body, "test").await.unwrap();
            records.push((tenant, scope.iter().map(|s| s.to_string()).collect::<Vec<_>>(), id));
        }
        for c in 0..25 {
            let tenant = tenants[rng.next(tenants.len())];
            let key_scopes: Vec<String> =
                rng.subset(&scopes[1..], 2).into_iter().map(str::to_owned).collect();
            let asserts = rng.next(2) == 0;
            let new = NewKey {
                tenant: tenant.to_owned(),
                name: format!("caller-{c}"),
                scopes: key_scopes,
                permissions: if asserts { vec!["assert_subject".into()] } else { Vec::new() },
                rate_limit_per_minute: None,
            };
            let (_, secret) = identity.keys().issue(&new).await.unwrap();
            let mut headers = HeaderMap::new();
            headers.insert("x-api-key", HeaderValue::from_str(&secret).unwrap());
            if asserts {
                let subject = ["u1", "u2", "u3"][rng.next(3)];
                headers.insert("x-memory-subject", HeaderValue::from_static(subject));
            }
            let caller = identity
                .authenticate(memgate::http::headers::credentials(&headers), "unknown")
                .await
                .unwrap();
            assert!(caller.scopes.contains("public"));

            let visible: BTreeSet<String> = match memories.index().tenant(&caller.tenant) {
                None => BTreeSet::new(),
                Some(index) => {
                    let index = index.read().unwrap();
                    memgate::funnel::scope::visible(
                        &index,
                        &caller,
                        memgate::funnel::trace::Detail::Full,
                        &mut Trace::default(),
                    )
                    .into_iter()
                    .map(|slot| index.slots[slot as usize].as_ref().unwrap().head.id().to_string())
                    .collect()
                }
            };
            let expected: BTreeSet<String> = records
                .iter()
                .filter(|(t, s, _)| {
                    *t == caller.tenant && s.iter().any(|scope| caller.scopes.contains(scope))
                })
                .map(|(_, _, id)| id.clone())
                .collect();
            for id in &visible {
                let (t, s, _) = records.iter().find(|(_, _, rid)| rid == id).unwrap();
                assert_eq!(
                    *t, caller.tenant,
                    "seed {seed}: {id} of tenant {t} visible to a caller of {}",
                    caller.tenant
                );
                assert!(
                    s.iter().any(|scope| caller.scopes.contains(scope)),
                    "seed {seed}: {id} {s:?} visible to {:?}",
                    caller.scopes
                );
            }
            assert_eq!(visible, expected, "seed {seed}: the visible set misses records the caller may see");
        }
    }
}
