//! The subcommands of the `cuquota` binary.

pub mod export;
mod fastline;
pub mod plot;
pub mod read;
pub mod report;
pub mod run;
pub mod timeline;
