// Re-embed the SQL migrations (sqlx::migrate!) whenever one is added or changed.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
