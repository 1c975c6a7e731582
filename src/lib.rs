//! memgate: a gateway in front of the Anthropic Messages API that gives every request memory.
//!
//! `app` holds the route table and draws a request's path through the layers; start there.

pub mod admin;
pub mod app;
pub mod assets;
pub mod client_addr;
pub mod clock;
pub mod config;
pub mod embed;
pub mod error;
pub mod fanout;
pub mod funnel;
pub mod hash;
pub mod health;
pub mod identity;
pub mod index;
pub mod inject;
pub mod lexical;
pub mod memory;
pub mod mock_upstream;
pub mod observability;
pub mod proxy;
pub mod query;
pub mod recall;
pub mod record;
pub mod rollout;
pub mod server;
pub mod store;
pub mod vector;

pub use app::{AppState, build_app};

#[cfg(test)]
mod fuzz;
