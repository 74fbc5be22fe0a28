//! The census: every function NVIDIA's header declares, read from `cuda.h` and
//! `cudaTypedefs.h` as text, held to the catalogue.
//!
//! What `cuda.h` says about a function's symbol:
//! - `CUresult CUDAAPI cuX(` declares it; before the header's internal section a
//!   declaration's name goes through the `#define`s at its top (`#define cuMemAlloc
//!   cuMemAlloc_v2`; `__CUDA_API_PTSZ(cuMemAllocAsync)` is the plain name outside per-thread
//!   builds), and in the internal section (`#if defined(__CUDA_API_VERSION_INTERNAL)`, the
//!   legacy and per-thread symbols the driver still exports) it is the symbol as written;
//! - each `#define cuX __CUDA_API_PTSZ(cuY)` (or `_PTDS`) makes `cuY_ptsz` (`cuY_ptds`), the
//!   per-thread default stream form.
//!
//! `cudaTypedefs.h` gives each symbol's `cuGetProcAddress` facts: one `PFN_base_vNNNN` typedef
//! (`_ptsz`/`_ptds` for the per-thread forms) per variant. The variants of one base and stream
//! are paired with its typedefs in order (`cuX` < `cuX_v2` < `cuX_v3` with the versions
//! ascending); a base whose counts differ is reported, never guessed.
//!
//! `cuda.h`'s `typedef enum cudaError_enum { … } CUresult;` gives every result code: each
//! `NAME = value` of its body, its doc comments left out. The error-name table
//! ([`crate::results`]) must have each, under the same name.

use crate::catalogue::Alias;
use crate::results::Code;
use crate::{Class, Function, Stream};
use std::collections::{BTreeMap, BTreeSet};

/// One function as the header declares it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Declared {
    pub symbol: String,
    pub base: String,
    pub since: u32,
    pub stream: Stream,
}

impl Declared {
    /// The catalogue row a person would add for it (the class left to choose).
    pub fn row(&self) -> String {
        format!(
            "f(\"{}\", \"{}\", {}, {:?}, CLASS),",
            self.symbol, self.base, self.since, self.stream
        )
    }
}

/// What the header declares: its functions, and the variant each versioned `#define` of the
/// header's top names (`cuMemAlloc` → `cuMemAlloc_v2`), which a build gets by default.
#[derive(Debug, Default)]
pub struct Header {
    pub functions: Vec<Declared>,
    pub defaults: Vec<String>,
    /// `#define cuX cuY` where `cuY` is not a variant of `cuX`: (`cuX`, `cuY`).
    pub aliases: Vec<(String, String)>,
    /// The `CUresult` enum: (name, value), in the header's order.
    pub results: Vec<(String, u32)>,
}

const INTERNAL_SECTION: &str = "#if defined(__CUDA_API_VERSION_INTERNAL)";

/// Reads `cuda.h` and `cudaTypedefs.h`. An error says what the text lacks (a header whose
/// layout changed must fail the census, not shrink it).
pub fn read(cuda_h: &str, typedefs_h: &str) -> Result<Header, String> {
    let internal = cuda_h
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .filter(|(_, line)| line.trim_end() == INTERNAL_SECTION)
        .map(|(at, _)| at)
        .last()
        .ok_or("cuda.h has no internal section (#if defined(__CUDA_API_VERSION_INTERNAL))")?;
    let (public, internal) = cuda_h.split_at(internal);
    let defines = defines(public);
    let mut symbols = BTreeSet::new();
    for name in declared(public) {
        let symbol = match defines.get(name) {
            Some(Define::Rename(to) | Define::PerThread(to, _)) => to,
            None => name,
        };
        symbols.insert(symbol.to_string());
    }
    symbols.extend(declared(internal).map(str::to_string));
    for define in defines.values() {
        if let Define::PerThread(to, stream) = define {
            symbols.insert(format!("{to}{}", stream.suffix()));
        }
    }
    if symbols.is_empty() {
        return Err("cuda.h declares no `CUresult CUDAAPI cu…(` function".into());
    }
    let typedefs = typedefs(typedefs_h);
    if typedefs.is_empty() {
        return Err("cudaTypedefs.h has no `PFN_cu…_vNNNN` typedef".into());
    }
    let functions = pair(&symbols, &typedefs)?;
    let mut defaults: Vec<String> = defines
        .values()
        .map(|d| match d {
            Define::Rename(to) | Define::PerThread(to, _) => to.to_string(),
        })
        .collect();
    defaults.sort();
    defaults.dedup();
    let aliases = defines
        .iter()
        .filter_map(|(name, d)| match d {
            Define::Rename(to) if variant(to).0 != *name => {
                Some((name.to_string(), to.to_string()))
            }
            _ => None,
        })
        .collect();
    Ok(Header {
        functions,
        defaults,
        aliases,
        results: results(cuda_h)?,
    })
}

/// The `NAME = value` entries of `typedef enum cudaError_enum { … } CUresult;`.
fn results(cuda_h: &str) -> Result<Vec<(String, u32)>, String> {
    const OPEN: &str = "typedef enum cudaError_enum";
    const CLOSE: &str = "} CUresult;";
    let body = cuda_h
        .find(OPEN)
        .map(|at| &cuda_h[at + OPEN.len()..])
        .and_then(|rest| Some(&rest[rest.find('{')? + 1..rest.find(CLOSE)?]))
        .ok_or("cuda.h has no `typedef enum cudaError_enum { … } CUresult;`")?;
    let mut found = Vec::new();
    for entry in without_comments(body).split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let parsed = entry.split_once('=').and_then(|(name, value)| {
            let name = name.trim();
            let value = value.trim().parse().ok()?;
            (name.starts_with("CUDA_") && is_identifier(name)).then(|| (name.to_string(), value))
        });
        found.push(parsed.ok_or_else(|| format!("cannot read the CUresult entry `{entry}`"))?);
    }
    if found.is_empty() {
        return Err("cuda.h's CUresult enum has no entry".into());
    }
    Ok(found)
}

/// `text` with its `/* … */` and `// …` comments left out.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let (block, line) = (rest.find("/*"), rest.find("//"));
        match (block, line) {
            (Some(b), Some(l)) if l < b => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (Some(b), _) => {
                out.push_str(&rest[..b]);
                rest = rest[b + 2..]
                    .find("*/")
                    .map_or("", |end| &rest[b + 2 + end + 2..]);
            }
            (None, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Define<'a> {
    /// `#define cuX cuX_v2`.
    Rename(&'a str),
    /// `#define cuX __CUDA_API_PTSZ(cuX_v2)`: `cuX_v2`, and the per-thread form `cuX_v2_ptsz`.
    PerThread(&'a str, Stream),
}

/// The `#define cu… …` lines of the header's public part whose value is a driver symbol.
fn defines(text: &str) -> BTreeMap<&str, Define<'_>> {
    let mut found = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#define") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if !name.starts_with("cu") || !is_identifier(name) {
            continue;
        }
        let define = if let Some(inner) = macro_argument(value, "__CUDA_API_PTSZ") {
            Define::PerThread(inner, Stream::Ptsz)
        } else if let Some(inner) = macro_argument(value, "__CUDA_API_PTDS") {
            Define::PerThread(inner, Stream::Ptds)
        } else if value.starts_with("cu") && is_identifier(value) {
            Define::Rename(value)
        } else {
            continue;
        };
        found.insert(name, define);
    }
    found
}

fn macro_argument<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    let inner = value
        .strip_prefix(name)?
        .strip_prefix('(')?
        .strip_suffix(')')?;
    (inner.starts_with("cu") && is_identifier(inner)).then_some(inner)
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The name of each `CUresult CUDAAPI cu…(` declaration (the name may be on the next line).
fn declared(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("CUDAAPI").filter_map(move |(at, _)| {
        if !text[..at].trim_end().ends_with("CUresult") {
            return None;
        }
        let rest = text[at + "CUDAAPI".len()..].trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(end);
        (name.starts_with("cu") && after.trim_start().starts_with('(')).then_some(name)
    })
}

/// Each `PFN_base_vNNNN[_ptsz|_ptds]` typedef of a function returning `CUresult`.
fn typedefs(text: &str) -> BTreeSet<(String, u32, Stream)> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let Some(at) = line.find("(CUDAAPI *PFN_") else {
            continue;
        };
        if !line.trim_start().starts_with("typedef CUresult") {
            continue;
        }
        let rest = &line[at + "(CUDAAPI *PFN_".len()..];
        let Some(name) = rest.split(')').next() else {
            continue;
        };
        if let Some(fact) = pfn_facts(name) {
            found.insert(fact);
        }
    }
    found
}

/// `cuMemAlloc_v3020` → (`cuMemAlloc`, 3020, Plain); `cuMemcpy_v7000_ptds` → (…, Ptds).
fn pfn_facts(name: &str) -> Option<(String, u32, Stream)> {
    let (name, stream) = strip_stream(name);
    let (base, version) = name.rsplit_once("_v")?;
    let version = version.parse().ok()?;
    (base.starts_with("cu") && is_identifier(base)).then(|| (base.to_string(), version, stream))
}

fn strip_stream(symbol: &str) -> (&str, Stream) {
    if let Some(s) = symbol.strip_suffix("_ptsz") {
        (s, Stream::Ptsz)
    } else if let Some(s) = symbol.strip_suffix("_ptds") {
        (s, Stream::Ptds)
    } else {
        (symbol, Stream::Plain)
    }
}

/// A symbol's base, its variant number (1 for none) and stream: `cuMemAlloc_v2_ptds` →
/// (`cuMemAlloc`, 2, Ptds).
fn variant(symbol: &str) -> (&str, u32, Stream) {
    let (name, stream) = strip_stream(symbol);
    match name.rsplit_once("_v") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (base, n.parse().unwrap_or(u32::MAX), stream)
        }
        _ => (name, 1, stream),
    }
}

/// Pairs the symbols of each (base, stream) with its typedefs' versions, in order.
fn pair(
    symbols: &BTreeSet<String>,
    typedefs: &BTreeSet<(String, u32, Stream)>,
) -> Result<Vec<Declared>, String> {
    let mut variants: BTreeMap<(&str, Stream), Vec<(u32, &str)>> = BTreeMap::new();
    for symbol in symbols {
        let (base, n, stream) = variant(symbol);
        variants
            .entry((base, stream))
            .or_default()
            .push((n, symbol));
    }
    let mut versions: BTreeMap<(&str, Stream), Vec<u32>> = BTreeMap::new();
    for (base, version, stream) in typedefs {
        versions.entry((base, *stream)).or_default().push(*version);
    }
    let keys: BTreeSet<_> = variants.keys().chain(versions.keys()).copied().collect();
    let (mut functions, mut unpaired) = (Vec::new(), Vec::new());
    for key in keys {
        let mut symbols = variants.get(&key).cloned().unwrap_or_default();
        let mut since = versions.get(&key).cloned().unwrap_or_default();
        symbols.sort();
        since.sort();
        if symbols.len() != since.len() {
            unpaired.push(format!(
                "{}{}: symbols {:?}, typedef versions {:?}",
                key.0,
                key.1.suffix(),
                symbols.iter().map(|s| s.1).collect::<Vec<_>>(),
                since
            ));
            continue;
        }
        for ((_, symbol), since) in symbols.into_iter().zip(since) {
            functions.push(Declared {
                symbol: symbol.to_string(),
                base: key.0.to_string(),
                since,
                stream: key.1,
            });
        }
    }
    if !unpaired.is_empty() {
        return Err(format!(
            "the header's symbols and cudaTypedefs.h's versions do not pair up:\n  {}",
            unpaired.join("\n  ")
        ));
    }
    functions.sort_by(|a, b| a.symbol.cmp(&b.symbol));
    Ok(functions)
}

/// The census of a header against a catalogue.
#[derive(Debug, Default)]
pub struct Census {
    pub hooked: usize,
    pub passes_through: usize,
    pub not_governed: usize,
    /// Classified as hooked, not hooked yet (counted in `hooked`).
    pub not_yet: Vec<&'static str>,
    /// The header's functions the catalogue has no row for.
    pub unclassified: Vec<Declared>,
    /// Rows whose lookup facts differ from the header's: (the header's, the row).
    pub facts_differ: Vec<(Declared, &'static Function)>,
    /// Rows of functions the header does not declare.
    pub gone: Vec<&'static Function>,
    /// The header's aliases (`#define cuX cuY`) the catalogue's `ALIASES` lacks.
    pub unknown_aliases: Vec<(String, String)>,
    /// The newest variant of a hooked base (per stream), or the variant a versioned
    /// `#define` names, that is not hooked.
    pub unhooked_newest: Vec<String>,
    /// Where the error-name table is not the header's `CUresult` enum: a value it lacks or
    /// names differently, or a code the header does not have.
    pub results_differ: Vec<String>,
}

impl Census {
    /// Whether the catalogue is exactly the header's, with every newest variant of a hooked
    /// base hooked.
    pub fn passes(&self) -> bool {
        self.unclassified.is_empty()
            && self.facts_differ.is_empty()
            && self.gone.is_empty()
            && self.unhooked_newest.is_empty()
            && self.unknown_aliases.is_empty()
            && self.results_differ.is_empty()
    }

    /// The one line: how many of the header's functions are hooked, pass through, or are not
    /// governed.
    pub fn line(&self, total: usize) -> String {
        format!(
            "census: {total} functions in cuda.h: {} hooked ({} of them not yet), {} pass \
             through, {} not governed, {} unclassified",
            self.hooked,
            self.not_yet.len(),
            self.passes_through,
            self.not_governed,
            self.unclassified.len()
        )
    }
}

/// Holds `catalogue` and the error-name table `results` to `header`.
pub fn take(
    header: &Header,
    catalogue: &'static [Function],
    aliases: &[Alias],
    results: &[Code],
) -> Census {
    let rows: BTreeMap<&str, &'static Function> = catalogue.iter().map(|f| (f.symbol, f)).collect();
    let mut census = Census::default();
    for declared in &header.functions {
        let Some(row) = rows.get(declared.symbol.as_str()) else {
            census.unclassified.push(declared.clone());
            continue;
        };
        if (row.base, row.since, row.stream)
            != (declared.base.as_str(), declared.since, declared.stream)
        {
            census.facts_differ.push((declared.clone(), row));
        }
        match row.class {
            Class::Hooked(hook) => {
                census.hooked += 1;
                if hook.not_yet {
                    census.not_yet.push(row.symbol);
                }
            }
            Class::PassesThrough(_) => census.passes_through += 1,
            Class::NotGoverned(_) => census.not_governed += 1,
        }
    }
    let declared: BTreeSet<&str> = header.functions.iter().map(|f| f.symbol.as_str()).collect();
    census.gone = catalogue
        .iter()
        .filter(|f| !declared.contains(f.symbol))
        .collect();
    census.unhooked_newest = unhooked_newest(header, &rows);
    census.unknown_aliases = header
        .aliases
        .iter()
        .filter(|(base, symbol)| !aliases.iter().any(|a| (a.base, a.symbol) == (base, symbol)))
        .cloned()
        .collect();
    census.results_differ = results_differ(&header.results, results);
    census
}

/// Each way the table differs from the header's `CUresult` enum, as a line.
fn results_differ(header: &[(String, u32)], table: &[Code]) -> Vec<String> {
    let mut differ = Vec::new();
    for (name, value) in header {
        match table.iter().find(|c| c.code == *value) {
            None => differ.push(format!(
                "{name} = {value}: not in the error-name table (crates/driver/src/results.rs)"
            )),
            Some(c) if c.name != name => differ.push(format!(
                "{value}: the header names it {name}, the error-name table {}",
                c.name
            )),
            Some(_) => {}
        }
    }
    for c in table {
        if !header.iter().any(|(_, value)| *value == c.code) {
            differ.push(format!(
                "{} = {}: in the error-name table, not in the header",
                c.name, c.code
            ));
        }
    }
    differ
}

/// The newest variant of each hooked base and stream, and each versioned `#define`'s
/// variant of a hooked base, that the catalogue does not class as hooked.
fn unhooked_newest(header: &Header, rows: &BTreeMap<&str, &'static Function>) -> Vec<String> {
    let hooked = |symbol: &str| rows.get(symbol).is_some_and(|f| f.class.is_hooked());
    let hooked_bases: BTreeSet<&str> = header
        .functions
        .iter()
        .filter(|f| hooked(&f.symbol))
        .map(|f| f.base.as_str())
        .collect();
    let mut newest: BTreeMap<(&str, Stream), &Declared> = BTreeMap::new();
    for f in &header.functions {
        let slot = newest.entry((f.base.as_str(), f.stream)).or_insert(f);
        if f.since > slot.since {
            *slot = f;
        }
    }
    let mut found: BTreeSet<String> = newest
        .into_iter()
        .filter(|((base, _), f)| hooked_bases.contains(base) && !hooked(&f.symbol))
        .map(|(_, f)| f.symbol.clone())
        .collect();
    for symbol in &header.defaults {
        let base = header.functions.iter().find(|f| &f.symbol == symbol);
        if base.is_some_and(|f| hooked_bases.contains(f.base.as_str())) && !hooked(symbol) {
            found.insert(symbol.clone());
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::{ALLOCATION, COPY};

    const CUDA_H: &str = "\
typedef enum cudaError_enum {
    /**
     * No error, unlike ::CUDA_ERROR_INVALID_VALUE = 9, which is one.
     */
    CUDA_SUCCESS                              = 0,
    // A line comment, with a comma, and CUDA_ERROR_X = 3.
    CUDA_ERROR_INVALID_VALUE                  = 1,
     CUDA_ERROR_OUT_OF_MEMORY = 2
} CUresult;
#define cuMemAlloc                          cuMemAlloc_v2
#define cuGraphInstantiate                  cuGraphInstantiateWithFlags
#define cuMemcpyHtoD                        __CUDA_API_PTDS(cuMemcpyHtoD_v2)
    #define cuMemAllocAsync                 __CUDA_API_PTSZ(cuMemAllocAsync)
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI
cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
__CUDA_DEPRECATED CUresult CUDAAPI cuMemAllocAsync (CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
#if defined(__CUDA_API_VERSION_INTERNAL)
    #undef cuMemAlloc
    CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
    CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
#endif
";
    const TYPEDEFS_H: &str = "\
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v7000_ptds)(CUdeviceptr_v2 dstDevice);
typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v3020)(CUdeviceptr_v2 dstDevice);
typedef CUresult (CUDAAPI *PFN_cuMemAllocAsync_v11020)(CUdeviceptr_v2 *dptr);
typedef CUresult (CUDAAPI *PFN_cuMemAllocAsync_v11020_ptsz)(CUdeviceptr_v2 *dptr);
    typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v2000)(CUdeviceptr_v1 *dptr, unsigned int bytesize);
";

    fn facts(h: &Header) -> Vec<(&str, &str, u32, Stream)> {
        h.functions
            .iter()
            .map(|f| (f.symbol.as_str(), f.base.as_str(), f.since, f.stream))
            .collect()
    }

    #[test]
    fn declarations_defines_and_typedefs_make_the_functions() {
        let header = read(CUDA_H, TYPEDEFS_H).unwrap();
        assert_eq!(
            facts(&header),
            [
                ("cuMemAlloc", "cuMemAlloc", 2000, Stream::Plain),
                ("cuMemAllocAsync", "cuMemAllocAsync", 11020, Stream::Plain),
                (
                    "cuMemAllocAsync_ptsz",
                    "cuMemAllocAsync",
                    11020,
                    Stream::Ptsz
                ),
                ("cuMemAlloc_v2", "cuMemAlloc", 3020, Stream::Plain),
                ("cuMemcpyHtoD_v2", "cuMemcpyHtoD", 3020, Stream::Plain),
                ("cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", 7000, Stream::Ptds),
            ]
        );
        assert_eq!(
            header.defaults,
            [
                "cuGraphInstantiateWithFlags",
                "cuMemAllocAsync",
                "cuMemAlloc_v2",
                "cuMemcpyHtoD_v2"
            ]
        );
    }

    #[test]
    fn a_variant_without_its_typedef_is_reported_not_guessed() {
        let typedefs = TYPEDEFS_H.replace("PFN_cuMemAlloc_v2000", "PFN_cuMemFree_v2000");
        let err = read(CUDA_H, &typedefs).unwrap_err();
        assert!(
            err.contains(
                "cuMemAlloc: symbols [\"cuMemAlloc\", \"cuMemAlloc_v2\"], typedef versions [3020]"
            ),
            "{err}"
        );
        assert!(read("no header", TYPEDEFS_H).is_err());
        let no_results = CUDA_H.replace("cudaError_enum", "cudaErrorEnum");
        let err = read(&no_results, TYPEDEFS_H).unwrap_err();
        assert!(err.contains("no `typedef enum cudaError_enum"), "{err}");
        let unreadable = CUDA_H.replace("= 2", "= CUDA_ERROR_INVALID_VALUE");
        let err = read(&unreadable, TYPEDEFS_H).unwrap_err();
        assert!(
            err.contains("CUDA_ERROR_OUT_OF_MEMORY = CUDA_ERROR_INVALID_VALUE"),
            "{err}"
        );
        assert!(read(CUDA_H, "").is_err());
    }

    #[test]
    fn the_census_finds_new_functions_changed_facts_and_unhooked_variants() {
        static CATALOGUE: &[Function] = &[
            Function {
                symbol: "cuMemAlloc",
                base: "cuMemAlloc",
                since: 2000,
                stream: Stream::Plain,
                class: ALLOCATION,
            },
            Function {
                symbol: "cuMemAlloc_v2",
                base: "cuMemAlloc",
                since: 3020,
                stream: Stream::Plain,
                class: COPY,
            },
            Function {
                symbol: "cuMemcpyHtoD_v2",
                base: "cuMemcpyHtoD",
                since: 3000,
                stream: Stream::Plain,
                class: COPY,
            },
            Function {
                symbol: "cuMemGone",
                base: "cuMemGone",
                since: 2000,
                stream: Stream::Plain,
                class: COPY,
            },
        ];
        let header = read(CUDA_H, TYPEDEFS_H).unwrap();
        assert_eq!(
            header.aliases,
            [(
                "cuGraphInstantiate".to_string(),
                "cuGraphInstantiateWithFlags".to_string()
            )]
        );
        let census = take(&header, CATALOGUE, &[], &[]);
        assert!(!census.passes());
        let new: Vec<_> = census
            .unclassified
            .iter()
            .map(|f| f.symbol.as_str())
            .collect();
        assert_eq!(
            new,
            [
                "cuMemAllocAsync",
                "cuMemAllocAsync_ptsz",
                "cuMemcpyHtoD_v2_ptds"
            ]
        );
        assert_eq!(census.facts_differ.len(), 1);
        assert_eq!(census.facts_differ[0].1.symbol, "cuMemcpyHtoD_v2");
        assert_eq!(census.gone.len(), 1);
        // cuMemAlloc is hooked, so its newest variant (the #define's) must be too.
        assert_eq!(census.unhooked_newest, ["cuMemAlloc_v2"]);
        assert_eq!(
            (census.hooked, census.passes_through, census.not_governed),
            (1, 2, 0)
        );
        assert_eq!(census.unknown_aliases.len(), 1);
        assert_eq!(
            census.unclassified[0].row(),
            "f(\"cuMemAllocAsync\", \"cuMemAllocAsync\", 11020, Plain, CLASS),"
        );
    }

    #[test]
    fn the_census_holds_the_error_name_table_to_the_cuda_result_enum() {
        let header = read(CUDA_H, TYPEDEFS_H).unwrap();
        assert_eq!(
            header.results,
            [
                ("CUDA_SUCCESS".to_string(), 0),
                ("CUDA_ERROR_INVALID_VALUE".to_string(), 1),
                ("CUDA_ERROR_OUT_OF_MEMORY".to_string(), 2),
            ]
        );
        let code = |code, name| Code {
            code,
            name,
            c_name: c"",
            description: c"",
        };
        let exact = [
            code(0, "CUDA_SUCCESS"),
            code(1, "CUDA_ERROR_INVALID_VALUE"),
            code(2, "CUDA_ERROR_OUT_OF_MEMORY"),
        ];
        assert_eq!(
            results_differ(&header.results, &exact),
            Vec::<String>::new()
        );
        // A value the table lacks, one it names differently, one the header lacks.
        let wrong = [
            code(0, "CUDA_SUCCESS"),
            code(1, "CUDA_ERROR_INVALID_ARGUMENT"),
            code(3, "CUDA_ERROR_NOT_INITIALIZED"),
        ];
        let census = take(&header, &[], &[], &wrong);
        assert_eq!(
            census.results_differ,
            [
                "1: the header names it CUDA_ERROR_INVALID_VALUE, the error-name table \
                 CUDA_ERROR_INVALID_ARGUMENT",
                "CUDA_ERROR_OUT_OF_MEMORY = 2: not in the error-name table \
                 (crates/driver/src/results.rs)",
                "CUDA_ERROR_NOT_INITIALIZED = 3: in the error-name table, not in the header",
            ]
        );
        assert!(!census.passes());
    }
}
