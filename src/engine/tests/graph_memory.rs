use super::*;
use crate::config::Config;
use crate::engine::{Kind, Place};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn growth_is_the_shortfall_in_granules() {
    // An empty pool: all of it, rounded up.
    assert_eq!(growth(3 * MIB, 0, 0, 0, 0), 4 * MIB);
    assert_eq!(growth(4 * MIB, 0, 0, 0, 0), 4 * MIB);
    // Unused reservation is used first.
    assert_eq!(growth(4 * MIB, 6 * MIB, 4 * MIB, 0, 0), 2 * MIB);
    assert_eq!(growth(4 * MIB, 8 * MIB, 2 * MIB, 0, 0), 0);
    // Unless another call in flight counts on it.
    assert_eq!(growth(4 * MIB, 8 * MIB, 2 * MIB, 4 * MIB, 0), 2 * MIB);
    // An auto-free relaunch frees its own live allocations first.
    assert_eq!(growth(4 * MIB, 4 * MIB, 4 * MIB, 0, 4 * MIB), 0);
    assert_eq!(growth(0, 0, 0, 0, 0), 0);
}

#[test]
fn per_device_sums() {
    let mut v = PerDevice::new();
    add_to(&mut v, 1, 5);
    add_to(&mut v, 0, 2);
    add_to(&mut v, 1, u64::MAX);
    assert_eq!(v, vec![(1, u64::MAX), (0, 2)]);
    assert_eq!((on(&v, 0), on(&v, 3)), (2, 0));
}

/// A pretend driver with graphs and a graph memory pool per device (the documented
/// rules: a launch maps what its unused reservation lacks, in granules; in-graph frees
/// go back to the pool; a trim releases what no live allocation uses).
#[derive(Default)]
struct Driver {
    graphs: Mutex<HashMap<usize, Vec<GraphNode>>>,
    /// (reserved, used) per device.
    pools: Mutex<[(u64, u64); 2]>,
    /// Driver calls the engine made besides the hooked ones.
    queries: AtomicU64,
}

impl Queries for Arc<Driver> {
    fn current_device(&self) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn current_context(&self) -> usize {
        0x1000
    }
    fn context_device(&self, _context: usize) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn stream_context(&self, _stream: usize) -> Result<usize, CuResult> {
        Ok(0x1000)
    }
    fn total_memory(&self, _device: u32) -> Result<u64, CuResult> {
        Ok(8 * GIB)
    }
    fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        Ok((8 * GIB, 8 * GIB))
    }
    fn graph_nodes(&self, graph: usize) -> Option<Vec<GraphNode>> {
        self.queries.fetch_add(1, Relaxed);
        self.graphs.lock().unwrap().get(&graph).cloned()
    }
    fn graph_memory(&self, device: u32) -> Option<(u64, u64)> {
        self.queries.fetch_add(1, Relaxed);
        self.pools.lock().unwrap().get(device as usize).copied()
    }
    fn graph_memory_trim(&self, device: u32) -> bool {
        self.queries.fetch_add(1, Relaxed);
        let mut pools = self.pools.lock().unwrap();
        let (reserved, used) = &mut pools[device as usize];
        *reserved = used.div_ceil(GRAPH_GRANULE) * GRAPH_GRANULE;
        true
    }
}

impl Driver {
    /// A launch that maps `need` on `device`, of which `kept` stays live after.
    fn launch(&self, device: usize, need: u64, kept: u64) -> CuResult {
        let mut pools = self.pools.lock().unwrap();
        let (reserved, used) = &mut pools[device];
        *reserved += growth(need, *reserved, *used, 0, 0);
        *used += kept;
        CuResult::SUCCESS
    }
}

fn engine(vars: &[(&str, &str)]) -> (Engine, Arc<Driver>) {
    crate::log::configure(&crate::config::LogTarget::Off);
    let driver = Arc::new(Driver::default());
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::from_vars(|k| {
        vars.iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
    });
    (Engine::new(config, Box::new(driver.clone())), driver)
}

fn alloc(device: u32, bytes: u64, address: u64) -> GraphNode {
    GraphNode::Alloc {
        device: Some(device),
        bytes,
        address,
    }
}

/// Graph 1: 256 MiB on device 0, not freed in the graph.
fn one_graph(driver: &Driver, bytes: u64, freed: bool) {
    let mut nodes = vec![alloc(0, bytes, 0xa000)];
    if freed {
        nodes.push(GraphNode::Free(0xa000));
    }
    driver.graphs.lock().unwrap().insert(1, nodes);
}

const EXEC: usize = 0x77;

fn instantiate(e: &Engine, flags: u64) -> CuResult {
    e.graph_instantiate("cuGraphInstantiateWithFlags", 1, flags, || {
        (CuResult::SUCCESS, EXEC)
    })
}

#[test]
fn needs_follow_child_graphs_and_frees() {
    let (_, driver) = engine(&[]);
    driver.graphs.lock().unwrap().insert(
        1,
        vec![
            alloc(0, 10, 0x1),
            GraphNode::Child(2),
            GraphNode::Other,
            GraphNode::Alloc {
                device: None,
                bytes: 99,
                address: 0x9,
            },
        ],
    );
    driver.graphs.lock().unwrap().insert(
        2,
        vec![alloc(1, 20, 0x2), alloc(0, 5, 0x3), GraphNode::Free(0x1)],
    );
    let needs = needs_of(&driver, 1).unwrap();
    assert_eq!(needs.need, vec![(0, 15), (1, 20)]);
    assert_eq!(needs.unfreed, vec![(1, 20), (0, 5)]);
    assert_eq!(needs_of(&driver, 5), None, "the driver cannot list it");
    // A graph that contains itself ends at the depth limit.
    driver
        .graphs
        .lock()
        .unwrap()
        .insert(3, vec![alloc(0, 1, 0x4), GraphNode::Child(3)]);
    assert_eq!(
        needs_of(&driver, 3).unwrap().need,
        vec![(0, MAX_DEPTH as u64)]
    );
}

#[test]
fn a_launch_under_the_quota_is_charged_the_drivers_reservation() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 255 * MIB, false);
    assert_eq!(instantiate(&e, 0), CuResult::SUCCESS);
    assert_eq!(
        e.part_total(0, Part::Graph),
        0,
        "instantiation maps nothing"
    );
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || {
        driver.launch(0, 255 * MIB, 255 * MIB)
    });
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Graph), 256 * MIB, "granules");
    assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB), (768 * MIB, GIB));
    // The program trims: nothing is unused, nothing changes.
    driver.graph_memory_trim(0);
    e.graph_memory_trimmed("cuDeviceGraphMemTrim", 0);
    assert_eq!(e.part_total(0, Part::Graph), 256 * MIB);
}

#[test]
fn a_launch_over_the_quota_is_refused_before_the_driver_runs_it() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 256 * MIB, true);
    instantiate(&e, 0);
    let ok = || (CuResult::SUCCESS, 0x5000);
    assert_eq!(
        e.alloc(
            "cuMemAlloc_v2",
            Kind::Pointer,
            Place::Current,
            900 * MIB,
            ok
        ),
        CuResult::SUCCESS
    );
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || {
        unreachable!("refused first")
    });
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    let usage = e.quota(0).unwrap().usage();
    assert_eq!((usage.in_use, usage.refusals), (900 * MIB, 1));
    assert_eq!(e.part_total(0, Part::Graph), 0);
}

#[test]
fn unused_graph_memory_is_trimmed_to_make_room() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 512 * MIB, true);
    instantiate(&e, 0);
    e.graph_run("cuGraphLaunch", EXEC, true, || {
        driver.launch(0, 512 * MIB, 0)
    });
    assert_eq!(e.part_total(0, Part::Graph), 512 * MIB, "kept by the pool");
    // A second launch reuses the pool's unused memory: nothing more to reserve.
    e.graph_run("cuGraphLaunch", EXEC, true, || {
        driver.launch(0, 512 * MIB, 0)
    });
    assert_eq!(e.part_total(0, Part::Graph), 512 * MIB);
    let ok = || (CuResult::SUCCESS, 0x5000);
    assert_eq!(
        e.alloc(
            "cuMemAlloc_v2",
            Kind::Pointer,
            Place::Current,
            768 * MIB,
            ok
        ),
        CuResult::SUCCESS
    );
    let usage = e.quota(0).unwrap().usage();
    assert_eq!(e.part_total(0, Part::Graph), 0);
    assert_eq!((usage.in_use, usage.refusals), (768 * MIB, 0));
    assert_eq!((usage.trims, usage.trimmed), (1, 512 * MIB));
    // Now the launch needs all of it again, and it does not fit.
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || unreachable!());
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
}

#[test]
fn a_part_behind_the_driver_gives_its_room_back_when_room_is_wanted() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 512 * MIB, true);
    instantiate(&e, 0);
    e.graph_run("cuGraphLaunch", EXEC, true, || {
        driver.launch(0, 512 * MIB, 0)
    });
    // The driver released the pool behind cuquota's back (a context reset).
    driver.pools.lock().unwrap()[0] = (0, 0);
    let ok = || (CuResult::SUCCESS, 0x5000);
    assert_eq!(
        e.alloc(
            "cuMemAlloc_v2",
            Kind::Pointer,
            Place::Current,
            768 * MIB,
            ok
        ),
        CuResult::SUCCESS
    );
    let usage = e.quota(0).unwrap().usage();
    assert_eq!((usage.refusals, usage.trims), (0, 0), "not a trim of ours");
    assert_eq!(e.part_total(0, Part::Graph), 0);
}

#[test]
fn an_auto_free_relaunch_counts_on_its_own_allocations() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 600 * MIB, false);
    instantiate(&e, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    let relaunch = || {
        let mut pools = driver.pools.lock().unwrap();
        let (reserved, used) = &mut pools[0];
        *used = used.saturating_sub(600 * MIB); // the auto-free
        *reserved += growth(600 * MIB, *reserved, *used, 0, 0);
        *used += 600 * MIB;
        CuResult::SUCCESS
    };
    assert_eq!(
        e.graph_run("cuGraphLaunch", EXEC, true, relaunch),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.graph_run("cuGraphLaunch", EXEC, true, relaunch),
        CuResult::SUCCESS
    );
    assert_eq!(e.part_total(0, Part::Graph), 600 * MIB);
}

#[test]
fn an_upload_at_instantiation_is_reserved_for() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    one_graph(&driver, 2 * GIB, true);
    let rc = e.graph_instantiate("cuGraphInstantiateWithParams", 1, 2, || unreachable!());
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    one_graph(&driver, 100 * MIB, true);
    let rc = e.graph_instantiate("cuGraphInstantiateWithParams", 1, 2, || {
        driver.launch(0, 100 * MIB, 0);
        (CuResult::SUCCESS, EXEC)
    });
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Graph), 100 * MIB);
}

#[test]
fn counting_allocations_asks_the_driver_nothing() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
    one_graph(&driver, 2 * GIB, false);
    instantiate(&e, 0);
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || driver.launch(0, 2 * GIB, 0));
    assert_eq!(rc, CuResult::SUCCESS);
    e.graph_memory_trimmed("cuDeviceGraphMemTrim", 0);
    assert_eq!(driver.queries.load(Relaxed), 0);
    assert_eq!(e.part_total(0, Part::Graph), 0);
}

#[test]
fn graphs_without_memory_nodes_and_destroyed_execs_cost_one_walk() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    driver
        .graphs
        .lock()
        .unwrap()
        .insert(1, vec![GraphNode::Other]);
    instantiate(&e, 0);
    e.graph_run("cuGraphLaunch", EXEC, true, || CuResult::SUCCESS);
    assert_eq!(driver.queries.load(Relaxed), 1, "the walk only");
    one_graph(&driver, 10 * MIB, false);
    instantiate(&e, 0);
    e.graph_exec_destroyed(EXEC);
    let before = driver.queries.load(Relaxed);
    e.graph_run("cuGraphLaunch", EXEC, true, || CuResult::SUCCESS);
    assert_eq!(driver.queries.load(Relaxed), before);
}

#[test]
fn a_driver_that_cannot_report_its_graph_pool_is_not_charged() {
    struct Mute;
    impl Queries for Mute {
        fn current_device(&self) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn current_context(&self) -> usize {
            0x1000
        }
        fn context_device(&self, _context: usize) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn stream_context(&self, _stream: usize) -> Result<usize, CuResult> {
            Ok(0x1000)
        }
        fn total_memory(&self, _device: u32) -> Result<u64, CuResult> {
            Ok(8 * GIB)
        }
        fn memory_info(&self) -> Result<(u64, u64), CuResult> {
            Ok((8 * GIB, 8 * GIB))
        }
        fn graph_nodes(&self, _graph: usize) -> Option<Vec<GraphNode>> {
            Some(vec![alloc(0, 2 * GIB, 0x1)])
        }
    }
    crate::log::configure(&crate::config::LogTarget::Off);
    let config = Config::from_vars(|k| (k == "CUQUOTA_LIMIT").then(|| "1GiB".into()));
    let e = Engine::new(config, Box::new(Mute));
    instantiate(&e, 0);
    for _ in 0..3 {
        let rc = e.graph_run("cuGraphLaunch", EXEC, true, || CuResult::SUCCESS);
        assert_eq!(rc, CuResult::SUCCESS);
    }
    assert_eq!(e.part_total(0, Part::Graph), 0);
}

#[test]
fn a_refusal_on_one_device_gives_back_what_the_other_staged() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "0:1GiB,1:100MiB")]);
    driver
        .graphs
        .lock()
        .unwrap()
        .insert(1, vec![alloc(0, 200 * MIB, 0x1), alloc(1, 200 * MIB, 0x2)]);
    instantiate(&e, 0);
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || unreachable!());
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert_eq!(e.part_total(0, Part::Graph), 0);
    assert_eq!(e.quota(0).unwrap().in_use(), 0);
    assert_eq!(e.quota(1).unwrap().usage().refusals, 1);
}
