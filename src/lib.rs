//! memgate: a gateway in front of the Anthropic Messages API that gives every request memory.
//!
//! `http` holds the route table and draws a request's path through the layers; start there.
//!
//! # The map
//!
//! Modules form layers. A module uses modules of its own layer and of the layers below it, never
//! one above, and no two modules use each other (nor two files inside one folder);
//! `scripts/check-layers` checks all of it on every test run, and the crates each layer may
//! name. Top to bottom:
//!
//! | layer | modules | what it is |
//! | --- | --- | --- |
//! | edge | `http` | the only place that speaks HTTP (axum, hyper, tower): routes, the proxy's and the admin API's handlers, the console's endpoints and files, reading bodies, `X-Memory-*` headers, errors as answers |
//! | state | `state` | what one running memgate holds, built from the config; handed to the edge |
//! | turn | `turn` | one Messages turn, without HTTP: begin (route the release, recall, shadows) and settle (rollout outcome, access counts, triggers, console history, observation), returning a report the edge renders |
//! | services | `recall`, `rollout`, `console`, `tools`, `observer` | the memory step of a request; releases and the canary; the console's history and data; the memory tools agents call; learning from finished exchanges |
//! | domain | `memory`, `identity`, `triggers`, `upstream`, `funnel`, `inject`, `query`, `lexical`, `index`, `embed`, `body`, `fanout`, `observability`, `slots`, `texts`, `vector` | records and their checks, callers, trigger actions, the upstream client (which also knows `http`), the four layers, the block and its placement, the person's words, the indexes, texts by id, the model, body checks, replicas' fan-out, metrics |
//! | store | `store` | SQLite and PostgreSQL, the only place that knows SQL (sqlx) |
//! | base | `record`, `config`, `error`, `clock`, `hash`, `assets`, `client_addr`, `allowed_hosts`, `cpu`, `tasks`, `workers`, `allocator` | plain values and rules everything above shares: the record, the settled configuration, error codes, time, digests, the bundled files, client addresses, hosts, CPU slots, task starts, the threads that serve connections, the allocator |
//!
//! Words, one meaning each: a **record** is one stored item (`record::Record`: a fact, a profile,
//! an SOP), and the store's calls say so (`create_record`, `list_records`); **memory** is what a
//! caller has, every record it may see, and the service that keeps them (`memory::MemoryService`).
//! The wire keeps its published names: `/admin/v1/memories`, `<MEMORY_CONTEXT>`, the tables.

pub mod allocator;
pub mod allowed_hosts;
pub mod assets;
pub mod body;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod console;
pub mod cpu;
pub mod embed;
pub mod error;
pub mod fanout;
pub mod funnel;
pub mod hash;
pub mod http;
pub mod identity;
pub mod index;
pub mod inject;
pub mod lexical;
pub mod memory;
pub mod observability;
pub mod observer;
pub mod query;
pub mod recall;
pub mod record;
pub mod rollout;
pub mod slots;
pub mod state;
pub mod store;
pub mod tasks;
pub mod texts;
pub mod tools;
pub mod triggers;
pub mod turn;
pub mod upstream;
pub mod vector;
pub mod workers;

pub use http::build_app;
pub use state::AppState;
