//! Builds the C test clients (tests/clients) with gcc, each only when a source, or for
//! the linked one the shim, is newer than the binary.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

/// One client binary: its sources (in tests/clients), whether it runs ops (then it is built
/// with `OPS_SOURCES` too) and extra gcc arguments.
struct ClientBuild {
    name: &'static str,
    sources: &'static [&'static str],
    ops: bool,
    flags: &'static [&'static str],
    link_cuda: bool,
}

/// The op interpreter (ops.c), its ops by group (ops_table.h lists them) and the soak.
const OPS_SOURCES: &[&str] = &[
    "ops.c",
    "ops_memory.c",
    "ops_process.c",
    "ops_arrays.c",
    "ops_contexts.c",
    "ops_nvml.c",
    "ops_pools_graphs.c",
    "soak.c",
];

const CLIENT_BUILDS: &[ClientBuild] = &[
    ClientBuild {
        name: "linked",
        sources: &["linked.c"],
        ops: true,
        flags: &[],
        link_cuda: true,
    },
    ClientBuild {
        name: "dlsym",
        sources: &["dlsym_client.c"],
        ops: true,
        flags: &[],
        link_cuda: false,
    },
    ClientBuild {
        name: "dlsym_old",
        sources: &["dlsym_client.c"],
        ops: true,
        flags: &["-DOLD_DLSYM"],
        link_cuda: false,
    },
    ClientBuild {
        name: "runtime",
        sources: &["runtime_client.c"],
        ops: true,
        flags: &[],
        link_cuda: false,
    },
    ClientBuild {
        name: "bfc_growth",
        sources: &["bfc_growth.c"],
        ops: false,
        flags: &[],
        link_cuda: false,
    },
    ClientBuild {
        name: "array_sizes",
        sources: &["array_sizes.c"],
        ops: false,
        flags: &[],
        link_cuda: false,
    },
    // -- interposition: foreign wrappers, layered dlsym, deep binding --
    ClientBuild {
        name: "wrapper_client",
        sources: &["wrapper_client.c"],
        ops: false,
        flags: &["-rdynamic"],
        link_cuda: false,
    },
    ClientBuild {
        name: "dlsym_layer.so",
        sources: &["dlsym_layer.c"],
        ops: false,
        flags: &["-shared", "-fPIC"],
        link_cuda: false,
    },
    ClientBuild {
        name: "deep_plugin.so",
        sources: &["deep_plugin.c"],
        ops: false,
        flags: &["-shared", "-fPIC"],
        link_cuda: true,
    },
    // -- call stacks: the same allocations with and without frame pointers and debug info --
    ClientBuild {
        name: "stacks_fp",
        sources: &["stacks_client.c"],
        ops: false,
        flags: &["-O2", "-g", "-fno-omit-frame-pointer"],
        link_cuda: true,
    },
    ClientBuild {
        name: "stacks_nofp",
        sources: &["stacks_client.c"],
        ops: false,
        flags: &["-O2", "-g", "-fomit-frame-pointer"],
        link_cuda: true,
    },
    ClientBuild {
        name: "stacks_nodebug",
        sources: &["stacks_client.c"],
        ops: false,
        flags: &["-O2", "-fomit-frame-pointer"],
        link_cuda: true,
    },
    ClientBuild {
        name: "deep_host",
        sources: &["deep_host.c"],
        ops: false,
        flags: &[],
        link_cuda: false,
    },
];

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

pub(super) fn build_clients(src_dir: &Path, shim_dir: &Path, out_dir: &Path) {
    fs::create_dir_all(out_dir).unwrap();
    // Every client is rebuilt when any C file or header changed (they share the op files
    // and cuda_min.h), and the linked one also when the shim changed.
    let newest_source = fs::read_dir(src_dir)
        .unwrap()
        .filter_map(|e| mtime(&e.unwrap().path()))
        .max()
        .unwrap();
    let driver = mtime(&shim_dir.join("libcuda.so.1")).unwrap();
    for client in CLIENT_BUILDS {
        let out = out_dir.join(client.name);
        let newest = if client.link_cuda {
            newest_source.max(driver)
        } else {
            newest_source
        };
        if mtime(&out).is_some_and(|t| t > newest) {
            continue;
        }
        let tmp = out_dir.join(format!(".{}.{}", client.name, std::process::id()));
        let mut cmd = Command::new("gcc");
        cmd.args(["-O1", "-Wall", "-Werror", "-pthread", "-I"])
            .arg(src_dir)
            .args(client.flags)
            .args(client.sources.iter().map(|s| src_dir.join(s)))
            .args(
                OPS_SOURCES
                    .iter()
                    .filter(|_| client.ops)
                    .map(|s| src_dir.join(s)),
            )
            .arg("-o")
            .arg(&tmp);
        if client.link_cuda {
            cmd.arg("-L")
                .arg(shim_dir)
                .args(["-Wl,--no-as-needed", "-lcuda"]);
        }
        cmd.arg("-ldl");
        let res = cmd.output().expect("run gcc");
        assert!(
            res.status.success(),
            "gcc failed for the {} client:\n{}",
            client.name,
            String::from_utf8_lossy(&res.stderr)
        );
        fs::rename(&tmp, &out).unwrap();
    }
}
