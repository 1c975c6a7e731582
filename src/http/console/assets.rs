//! The console's files (`console/dist/`), embedded in the binary at compile time and served under
//! `/console/` with the rules of `console/API.md` §1.
//!
//! Why `rust-embed` rather than a hand-kept `include_bytes!` list: the front end's asset names
//! carry a content hash (`assets/index-Dh0sX_ru.js`), so every `npm run build` renames them, and a
//! list in Rust would have to be edited after every front-end change (a missed new file would only
//! show as a 404 in the browser). The derive walks the folder at compile time and expands to
//! `include_bytes!` of each file, so cargo rebuilds when a file changes (`index.html` changes
//! whenever an asset is renamed). It adds three small crates (plus `mime_guess` inside the
//! proc-macro, compile time only); `walkdir` and `sha2` were in the tree already. The
//! `debug-embed` feature makes debug builds embed too: without it a debug binary would read
//! the files from the source tree at run time, and tests would not test what ships.
//!
//! The rules: `GET /console` answers 308 to `/console/` (query kept); `/console/` and
//! `/console/index.html` are `index.html`, `no-cache` with an `ETag` (304 on `If-None-Match`) so a
//! new memgate's asset names are picked up at once; `assets/*` are immutable for a year (their names
//! change with their content); any other path is a 404 in the API's error shape (the app routes
//! with the URL fragment, so there is no fallback to `index.html`). Every answer under `/console`
//! carries the CSP and the other security headers (`security_headers`).

use crate::error::ApiError;
use axum::Router;
use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

#[derive(rust_embed::Embed)]
#[folder = "console/dist/"]
struct Dist;

/// The console's Content-Security-Policy: nothing from another origin, no inline script or style.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// The headers every answer under `/console` carries (API.md §1).
const SECURITY_HEADERS: [(&str, &str); 6] = [
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
];

const INDEX_CACHE: &str = "no-cache";
const ASSET_CACHE: &str = "public, max-age=31536000, immutable";

/// Adds the console's security headers to `headers` (replacing any of the same name).
pub fn security_headers(headers: &mut HeaderMap) {
    for (name, value) in SECURITY_HEADERS {
        headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
}

/// `axum::middleware::map_response` over a console router: the security headers on every answer,
/// the router's own 404s and 405s included.
pub async fn with_security_headers(mut response: Response) -> Response {
    security_headers(response.headers_mut());
    response
}

/// `Content-Type` by extension, as API.md §1 lists them.
pub fn content_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map_or("", |(_, ext)| ext);
    match extension.to_ascii_lowercase().as_str() {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "json" | "map" => "application/json",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

struct Asset {
    bytes: Bytes,
    content_type: &'static str,
    /// `"<first 32 hex digits of the bytes' SHA-256>"`, quoted as an ETag is.
    etag: HeaderValue,
    cache_control: &'static str,
}

/// The console's files by their path under `/console/` (`index.html`, `assets/…`). Cheap to clone.
#[derive(Clone)]
pub struct ConsoleAssets {
    files: Arc<HashMap<String, Asset>>,
}

static EMBEDDED: LazyLock<ConsoleAssets> = LazyLock::new(|| {
    ConsoleAssets::from_files(Dist::iter().filter_map(|path| {
        let file = Dist::get(&path)?;
        let bytes = match file.data {
            std::borrow::Cow::Borrowed(bytes) => Bytes::from_static(bytes),
            std::borrow::Cow::Owned(bytes) => Bytes::from(bytes),
        };
        Some((path.into_owned(), bytes))
    }))
});

impl ConsoleAssets {
    /// The files of `console/dist/` as they were when this binary was built.
    pub fn embedded() -> ConsoleAssets {
        EMBEDDED.clone()
    }

    /// Files given by path (`index.html`, `assets/app-1234.js`): for tests, or another build.
    pub fn from_files(files: impl IntoIterator<Item = (String, Bytes)>) -> ConsoleAssets {
        let files = files
            .into_iter()
            .map(|(path, bytes)| {
                let digest = crate::hash::sha256_hex(&bytes);
                let etag = HeaderValue::from_str(&format!("\"{}\"", &digest[..32]))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"\""));
                let cache_control = if path.starts_with("assets/") { ASSET_CACHE } else { INDEX_CACHE };
                let asset = Asset { content_type: content_type(&path), bytes, etag, cache_control };
                (path, asset)
            })
            .collect();
        ConsoleAssets { files: Arc::new(files) }
    }

    /// Every file's path, sorted.
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = self.files.keys().map(String::as_str).collect();
        paths.sort_unstable();
        paths
    }

    /// The answer for `GET /console/<path>`: the file (or 304 when `If-None-Match` names its
    /// ETag), else a 404. `""` is `index.html`. Carries the security headers.
    pub fn answer(&self, path: &str, request_headers: &HeaderMap) -> Response {
        let path = if path.is_empty() { "index.html" } else { path };
        // Only `index.html` and one level of `assets/`: nothing else is the app's.
        let servable = path == "index.html"
            || path.strip_prefix("assets/").is_some_and(|name| !name.is_empty() && !name.contains('/'));
        let Some(asset) = self.files.get(path).filter(|_| servable) else {
            return not_found_answer(path);
        };
        let fresh = request_headers
            .get_all(IF_NONE_MATCH)
            .iter()
            .any(|value| etag_matches(value.to_str().unwrap_or(""), &asset.etag));
        let mut response = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            let mut response = asset.bytes.clone().into_response();
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
            response
        };
        let headers = response.headers_mut();
        headers.insert(ETAG, asset.etag.clone());
        headers.insert(CACHE_CONTROL, HeaderValue::from_static(asset.cache_control));
        security_headers(headers);
        response
    }

    /// A router serving these files under `/console` (no session routes): `GET /console` → 308,
    /// `/console/`, `/console/index.html`, `/console/assets/{file}`, and 404 for any other path.
    pub fn routes<S: Clone + Send + Sync + 'static>(self) -> Router<S> {
        let index = self.clone();
        let index_html = self.clone();
        let assets = self;
        Router::new()
            .route("/console", get(redirect))
            .route("/console/", get(move |headers: HeaderMap| async move { index.answer("", &headers) }))
            .route(
                "/console/index.html",
                get(move |headers: HeaderMap| async move { index_html.answer("index.html", &headers) }),
            )
            .route(
                "/console/assets/{file}",
                get(move |Path(file): Path<String>, headers: HeaderMap| async move {
                    assets.answer(&format!("assets/{file}"), &headers)
                }),
            )
            .route("/console/{*rest}", any(not_found))
            .layer(axum::middleware::map_response(with_security_headers))
    }
}

/// `If-None-Match` against an ETag: a list of tags (weak ones compare by their opaque part, as
/// RFC 9110 asks for this header), or `*`.
fn etag_matches(header: &str, etag: &HeaderValue) -> bool {
    let etag = etag.to_str().unwrap_or("");
    header.split(',').map(str::trim).any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

fn not_found_answer(path: &str) -> Response {
    let shown: String = path.chars().take(200).collect();
    let mut response = ApiError::not_found(format!(
        "no console file `{shown}`; the console is at /console/ and routes with the URL fragment (/console/#/records)"
    ))
    .into_response();
    security_headers(response.headers_mut());
    response
}

/// `GET /console` → `308 Location: /console/` with the query string kept.
pub async fn redirect(uri: Uri) -> Response {
    let location = match uri.query() {
        Some(query) => format!("/console/?{query}"),
        None => "/console/".to_owned(),
    };
    let mut response = StatusCode::PERMANENT_REDIRECT.into_response();
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(LOCATION, value);
    }
    security_headers(response.headers_mut());
    response
}

/// `GET /console/` and `GET /console/index.html`, from the embedded files.
pub async fn index(headers: HeaderMap) -> Response {
    EMBEDDED.answer("index.html", &headers)
}

/// `GET /console/assets/{file}`, from the embedded files.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    EMBEDDED.answer(&format!("assets/{file}"), &headers)
}

/// Any other path under `/console/`: 404.
pub async fn not_found(uri: Uri) -> Response {
    not_found_answer(uri.path().strip_prefix("/console/").unwrap_or(uri.path()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_files_are_the_dist_folder() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console/dist");
        let mut on_disk = Vec::new();
        for entry in walk(&root) {
            let relative = entry.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            on_disk.push(relative);
        }
        on_disk.sort();
        let assets = ConsoleAssets::embedded();
        assert_eq!(assets.paths(), on_disk.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(assets.paths().contains(&"index.html"));
        // Every asset index.html names is embedded (a stale dist would 404 in the browser).
        let index = std::fs::read_to_string(root.join("index.html")).unwrap();
        for part in index.split("./assets/").skip(1) {
            let name = part.split('"').next().unwrap();
            assert!(assets.paths().contains(&format!("assets/{name}").as_str()), "{name} is not embedded");
        }
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
        }
        out
    }

    #[test]
    fn content_types_follow_the_table() {
        let cases = [
            ("index.html", "text/html; charset=utf-8"),
            ("assets/a-1.js", "text/javascript; charset=utf-8"),
            ("assets/a-1.css", "text/css; charset=utf-8"),
            ("assets/logo.svg", "image/svg+xml"),
            ("assets/a.json", "application/json"),
            ("assets/a.js.map", "application/json"),
            ("assets/a.png", "image/png"),
            ("favicon.ico", "image/x-icon"),
            ("assets/f.woff2", "font/woff2"),
            ("assets/blob.wasm", "application/octet-stream"),
            ("README", "application/octet-stream"),
        ];
        for (path, expected) in cases {
            assert_eq!(content_type(path), expected, "{path}");
        }
    }

    #[test]
    fn if_none_match_takes_lists_weak_tags_and_star() {
        let etag = HeaderValue::from_static("\"abc\"");
        assert!(etag_matches("\"abc\"", &etag));
        assert!(etag_matches("\"x\", W/\"abc\"", &etag));
        assert!(etag_matches("*", &etag));
        assert!(!etag_matches("\"abd\"", &etag));
        assert!(!etag_matches("abc", &etag));
    }

    #[test]
    fn only_index_and_flat_assets_are_served() {
        let assets = ConsoleAssets::from_files([
            ("index.html".to_owned(), Bytes::from_static(b"<html>")),
            ("assets/a.js".to_owned(), Bytes::from_static(b"js")),
            ("assets/deep/b.js".to_owned(), Bytes::from_static(b"js")),
            ("robots.txt".to_owned(), Bytes::from_static(b"no")),
        ]);
        let headers = HeaderMap::new();
        assert_eq!(assets.answer("", &headers).status(), StatusCode::OK);
        assert_eq!(assets.answer("assets/a.js", &headers).status(), StatusCode::OK);
        assert_eq!(assets.answer("assets/deep/b.js", &headers).status(), StatusCode::NOT_FOUND);
        assert_eq!(assets.answer("robots.txt", &headers).status(), StatusCode::NOT_FOUND);
        assert_eq!(assets.answer("assets/", &headers).status(), StatusCode::NOT_FOUND);
        let index = assets.answer("index.html", &headers);
        assert_eq!(index.headers()[CACHE_CONTROL], INDEX_CACHE);
        assert_eq!(assets.answer("assets/a.js", &headers).headers()[CACHE_CONTROL], ASSET_CACHE);
        assert_eq!(index.headers()["content-security-policy"], CSP);
    }
}
