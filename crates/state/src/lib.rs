//! cuquota-state: what governed processes on one machine share, and what the CLI, the views
//! and the Slurm plugin read of it. Unlike the trace format (`cuquota-format`), this is
//! state in files that several processes map and lock at once, so it does I/O and FFI
//! (`open`, `mmap`, open-file-description locks, `fstat`, `getgroups`).
//!
//! - [`shared`]: a file under the state directory, mapped by several processes, and its
//!   byte locks (the kernel drops them at death);
//! - [`group`]: a group's file: one quota per GPU shared by its members, their slots, the
//!   living and the dead, who may trust it;
//! - [`registry`]: one file per governed process, its live counters, for the views;
//! - [`holders`]: who holds a group's quota on a GPU, named from both;
//! - [`identity`]: who a process is as the host sees it (PID namespaces, cgroups);
//! - [`policy`]: the root-owned site and job policy and the trust it needs;
//! - [`trusted`]: the one trust rule for every path under the state directory.

pub mod group;
pub mod holders;
pub mod identity;
pub mod policy;
pub mod registry;
pub mod shared;
pub mod trusted;
