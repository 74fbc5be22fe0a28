//! `cuquota-census CUDA_H CUDATYPEDEFS_H`: holds the driver catalogue to NVIDIA's header and
//! prints one line (how many of its functions are hooked, pass through, are not governed);
//! exits 1, listing what differs, when the catalogue is not the header's, or the error-name
//! table not its `CUresult` enum. `scripts/census.sh`
//! gets the header from the pinned wheel and runs this.

use cuquota_driver::{catalogue, census, results};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cuda_h, typedefs_h] = args.as_slice() else {
        eprintln!("usage: cuquota-census CUDA_H CUDATYPEDEFS_H");
        return ExitCode::from(2);
    };
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let header = read(cuda_h)
        .and_then(|c| Ok((c, read(typedefs_h)?)))
        .and_then(|(c, t)| census::read(&c, &t));
    let header = match header {
        Ok(header) => header,
        Err(e) => {
            eprintln!("census: {e}");
            return ExitCode::FAILURE;
        }
    };
    let census = census::take(
        &header,
        catalogue::FUNCTIONS,
        catalogue::ALIASES,
        results::CODES,
    );
    println!("{}", census.line(header.functions.len()));
    if !census.not_yet.is_empty() {
        println!(
            "census: classified as hooked, not hooked yet: {}",
            census.not_yet.join(" ")
        );
    }
    if census.passes() {
        return ExitCode::SUCCESS;
    }
    if !census.unclassified.is_empty() {
        println!(
            "census: {} functions of the header have no row in crates/driver/src/catalogue.rs \
             (add each with its class):",
            census.unclassified.len()
        );
        for f in &census.unclassified {
            println!("    {}", f.row());
        }
    }
    for (declared, row) in &census.facts_differ {
        println!(
            "census: {}: the header says {} @ {} {:?}, the catalogue {} @ {} {:?}",
            row.symbol,
            declared.base,
            declared.since,
            declared.stream,
            row.base,
            row.since,
            row.stream
        );
    }
    for row in &census.gone {
        println!(
            "census: {}: in the catalogue, not in the header",
            row.symbol
        );
    }
    for symbol in &census.unhooked_newest {
        println!(
            "census: {symbol}: the newest variant of a hooked function, not hooked (a program \
             built against this header gets it unhooked)"
        );
    }
    for (base, symbol) in &census.unknown_aliases {
        println!("census: #define {base} {symbol}: an alias the catalogue's ALIASES lacks");
    }
    for line in &census.results_differ {
        println!("census: CUresult {line}");
    }
    ExitCode::FAILURE
}
