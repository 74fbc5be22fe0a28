//! The integration tests, one test binary with one module per area. Each test starts real
//! processes (the C clients in tests/clients, Python clients, the `cuquota` CLI) under
//! `LD_PRELOAD` against the shim (shim/, a stand-in libcuda.so.1). `common` is the harness:
//! it finds or builds the libraries, builds the clients, and runs them.
//!
//! One area: `cargo test --test integration limits::`. `scripts/test.sh` builds the
//! workspace first and tells the harness where (`CUQUOTA_TEST_BUILD`), so nothing is built
//! twice.

mod common;
mod reliability_util;

mod arrays;
// every form of stream capture records allocations as graph nodes
mod captures;
mod cli;
// slips caught by `cuquota run` and `set` before the command starts; `run --group`
mod cli_slips;
mod concurrency;
// The BFC client run many times over, core dumps kept, backtraces printed on a crash.
mod config;
// `cuquota cdi`'s spec under podman and runc: containers in one group, on the host's views
mod containers;
mod crash_hunt;
mod episodes;
mod faults;
// A newcomer's first runs: the configuration line, plot titles, SIGTERM, observe reports.
mod first_runs;
mod golden;
mod graph_memory;
// green contexts are context memory
mod green_contexts;
// process groups: one quota shared by processes (CUQUOTA_GROUP)
mod groups;
// another user plants links, FIFOs, forged and truncated files in the state directory
mod hostile_state;
mod imports;
mod interposition;
// the CDI spec and the Pod example, validated offline
mod kubernetes;
mod limits;
mod loaders;
mod log_lines;
mod paths;
mod placement;
// the pool cache: what pools keep beyond their allocations
mod pool_cache;
// the root-owned policy and /etc/ld.so.preload, on a test build of the library
mod policy;
// a setuid program under /etc/ld.so.preload, run by another user who sets the variables
mod privileged;
mod real_clients;
mod reliability_faults;
mod reliability_files;
mod reliability_hostile_input;
mod reliability_lifecycle;
mod reliability_odd_calls;
mod reliability_soak;
// the shim's footprint model
mod shim_footprint;
// a signal handler that allocates while its thread is inside a hook
mod signals;
// cuquota top and cuquota metrics: the live views, Prometheus.
mod top;
// the SPANK plugin on a real Slurm (slurmctld and slurmd on loopback)
mod slurm;
mod stacks;
mod trace;
// context memory no call announces, reconciled with NVML's figure
mod unannounced_growth;
// a driver's variant of a hooked function that this build does not know
mod unknown_variants;
mod vmm;
// The shim's context memory, NVML and other processes, as clients see them.
mod shim_nvml;
// NVML under a quota: memory info, process lists, monitoring processes, groups.
mod nvml_quota;
// pynvml, nvitop and gpustat (real clients) under a quota.
mod nvml_clients;
// Context memory charged to the quota.
mod context_memory;
