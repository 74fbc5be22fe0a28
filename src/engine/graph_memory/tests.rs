use super::*;
use crate::engine::tests::fake::{engine, FakeDriver, GIB, MIB};
use crate::engine::{Kind, Place};
use std::sync::atomic::Ordering::Relaxed;

fn alloc(device: u32, bytes: u64, address: u64) -> GraphNode {
    GraphNode::Alloc {
        device: Some(device),
        bytes,
        address,
    }
}

/// Graph 1: 256 MiB on device 0, not freed in the graph.
fn one_graph(driver: &FakeDriver, bytes: u64, freed: bool) {
    let mut nodes = vec![alloc(0, bytes, 0xa000)];
    if freed {
        nodes.push(GraphNode::Free(0xa000));
    }
    driver.set_graph(1, nodes);
}

const EXEC: usize = 0x77;

/// A launch of the executable graph whose driver reserves `reserved` in all and uses `used`.
fn launch(e: &Engine, driver: &FakeDriver, reserved: u64, used: u64) -> CuResult {
    e.graph_run("cuGraphLaunch", EXEC, true, || {
        driver.graph_launch(0, reserved, used)
    })
}

/// A plain allocation of `bytes` at 0x5000 that the driver grants.
fn alloc_plain(e: &Engine, bytes: u64) -> CuResult {
    let ok = || (CuResult::SUCCESS, 0x5000);
    e.alloc("cuMemAlloc_v2", Kind::Pointer, Place::Current, bytes, ok)
}

fn instantiate(e: &Engine, flags: u64) -> CuResult {
    e.graph_instantiate("cuGraphInstantiateWithFlags", 1, flags, || {
        (CuResult::SUCCESS, EXEC)
    })
}

#[test]
fn needs_follow_child_graphs_and_frees() {
    let (_, driver) = engine(&[]);
    driver.set_graph(
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
    driver.set_graph(
        2,
        vec![alloc(1, 20, 0x2), alloc(0, 5, 0x3), GraphNode::Free(0x1)],
    );
    let needs = needs_of(&driver, 1).unwrap();
    assert_eq!(needs.need, vec![(0, 15), (1, 20)]);
    assert_eq!(needs.unfreed, vec![(1, 20), (0, 5)]);
    assert_eq!(needs_of(&driver, 5), None, "the driver cannot list it");
    // A graph that contains itself ends at the depth limit.
    driver.set_graph(3, vec![alloc(0, 1, 0x4), GraphNode::Child(3)]);
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
    let rc = launch(&e, &driver, 255 * MIB, 255 * MIB);
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
    assert_eq!(alloc_plain(&e, 900 * MIB), CuResult::SUCCESS);
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
    launch(&e, &driver, 512 * MIB, 0);
    assert_eq!(e.part_total(0, Part::Graph), 512 * MIB, "kept by the pool");
    // A second launch reuses the pool's unused memory: nothing more to reserve.
    launch(&e, &driver, 512 * MIB, 0);
    assert_eq!(e.part_total(0, Part::Graph), 512 * MIB);
    assert_eq!(alloc_plain(&e, 768 * MIB), CuResult::SUCCESS);
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
    launch(&e, &driver, 512 * MIB, 0);
    // The driver released the pool behind cuquota's back (a context reset).
    driver.graph_pool_released(0);
    assert_eq!(alloc_plain(&e, 768 * MIB), CuResult::SUCCESS);
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
        driver.graph_free(0, 600 * MIB); // the auto-free
        driver.graph_launch(0, 600 * MIB, 600 * MIB)
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
        driver.graph_launch(0, 100 * MIB, 0);
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
    let rc = launch(&e, &driver, 2 * GIB, 0);
    assert_eq!(rc, CuResult::SUCCESS);
    e.graph_memory_trimmed("cuDeviceGraphMemTrim", 0);
    assert_eq!(driver.graph_calls.load(Relaxed), 0);
    assert_eq!(e.part_total(0, Part::Graph), 0);
}

#[test]
fn graphs_without_memory_nodes_and_destroyed_execs_cost_one_walk() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    driver.set_graph(1, vec![GraphNode::Other]);
    instantiate(&e, 0);
    e.graph_run("cuGraphLaunch", EXEC, true, || CuResult::SUCCESS);
    assert_eq!(driver.graph_calls.load(Relaxed), 1, "the walk only");
    one_graph(&driver, 10 * MIB, false);
    instantiate(&e, 0);
    e.graph_exec_destroyed(EXEC);
    let before = driver.graph_calls.load(Relaxed);
    e.graph_run("cuGraphLaunch", EXEC, true, || CuResult::SUCCESS);
    assert_eq!(driver.graph_calls.load(Relaxed), before);
}

#[test]
fn a_driver_that_cannot_report_its_graph_pool_is_not_charged() {
    let (e, driver) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    driver.hide_graph_pool();
    driver.set_graph(1, vec![alloc(0, 2 * GIB, 0x1)]);
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
    driver.set_graph(1, vec![alloc(0, 200 * MIB, 0x1), alloc(1, 200 * MIB, 0x2)]);
    instantiate(&e, 0);
    let rc = e.graph_run("cuGraphLaunch", EXEC, true, || unreachable!());
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert_eq!(e.part_total(0, Part::Graph), 0);
    assert_eq!(e.quota(0).unwrap().in_use(), 0);
    assert_eq!(e.quota(1).unwrap().usage().refusals, 1);
}
