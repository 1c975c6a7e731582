//! memgate: a gateway in front of the Anthropic Messages API that gives every request memory.
//!
//! `http` holds the route table and draws a request's path through the layers; start there.

pub mod allowed_hosts;
pub mod assets;
pub mod body;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod console;
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
pub mod query;
pub mod recall;
pub mod record;
pub mod rollout;
pub mod slots;
pub mod state;
pub mod store;
pub mod tools;
pub mod triggers;
pub mod turn;
pub mod upstream;
pub mod vector;

pub use http::build_app;
pub use state::AppState;

#[cfg(test)]
mod fuzz;
