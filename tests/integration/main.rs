//! One integration-test binary (links once): in-process router tests and end-to-end tests that
//! start the real `memgate` binary on port 0 in front of the real mock-upstream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::disallowed_methods)]

mod support;

mod bodies;
mod console;
mod console_store;
mod e2e_admin;
mod e2e_anywhere;
mod e2e_console;
mod e2e_console_sessions;
mod e2e_dormancy;
mod e2e_fleet;
mod e2e_identity;
mod e2e_mcp;
mod e2e_memory;
mod e2e_observer;
mod e2e_panic;
mod e2e_proxy;
mod e2e_replicas;
mod e2e_review;
mod e2e_rollout;
mod e2e_security;
mod e2e_shutdown;
mod e2e_tools;
mod e2e_triggers;
mod e2e_trust;
mod fuzz;
mod import_vectors;
mod linear;
mod memory_tools;
mod observer_store;
mod outbox;
mod router;
mod store;
mod store_status;
mod triggers;
mod trusted_writes;
mod visibility;
