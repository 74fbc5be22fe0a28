//! Call stacks of a trace (`stack` and `module` lines, written with `CUQUOTA_STACKS`) and
//! their symbols: where in the program an allocation was made.
//!
//! Symbolisation happens here, never in the traced process. It uses `addr2line` (gimli's
//! DWARF reader, the one Rust's own backtraces use) through its `Loader`, which also falls
//! back on the ELF symbol table when a module has no debug info, demangles C++ and Rust
//! names, and follows split DWARF. A module is looked up by its path; when that file is gone
//! or is another build (its GNU build id differs), by build id: `<dir>/.build-id/xx/rest.debug`
//! in each `--debug-dir` and in /usr/lib/debug, or a file of the same name in a
//! `--debug-dir`.

use cuquota_format::schema::{kind, parse_ptr, EventLine};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A module loaded in the traced process.
#[derive(Clone, Debug)]
struct Module {
    path: String,
    bias: u64,
    lo: u64,
    hi: u64,
    build_id: String,
}

impl Module {
    fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// cuquota itself, the driver (or its stand-in) and the CUDA runtime: their frames are
    /// how the program reached the driver, not where it allocated.
    fn is_cuda_layer(&self) -> bool {
        let name = self.name();
        ["libcuquota", "libcuda.so", "libcudart"]
            .iter()
            .any(|p| name.starts_with(p))
    }
}

/// The stacks and modules of one process's trace.
#[derive(Default)]
pub struct Stacks {
    modules: Vec<Module>,
    stacks: HashMap<u64, Vec<u64>>,
}

impl Stacks {
    /// Takes a `stack` or `module` line (returns false for any other).
    pub fn line(&mut self, e: &EventLine) -> bool {
        match e.kind.as_ref() {
            kind::STACK => {
                let frames = e.frames.iter().flatten().filter_map(|f| parse_ptr(f));
                self.stacks.insert(e.id, frames.collect());
                true
            }
            kind::MODULE => {
                let hex = |v: &Option<std::borrow::Cow<str>>| v.as_deref().and_then(parse_ptr);
                if let (Some(path), Some(bias), Some(lo), Some(hi)) =
                    (e.path.as_deref(), hex(&e.base), hex(&e.lo), hex(&e.hi))
                {
                    self.modules.push(Module {
                        path: path.to_string(),
                        bias,
                        lo,
                        hi,
                        build_id: e.build_id.as_deref().unwrap_or("").to_string(),
                    });
                }
                true
            }
            _ => false,
        }
    }

    /// Any stack was recorded.
    pub fn any(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Distinct stacks recorded.
    pub fn count(&self) -> u64 {
        self.stacks.len() as u64
    }

    /// The module `ip` lies in (the latest loaded there).
    fn module_of(&self, ip: u64) -> Option<usize> {
        self.modules.iter().rposition(|m| m.lo <= ip && ip < m.hi)
    }
}

/// Where an allocation was made: the frame nearest the program, symbolised.
#[derive(Serialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Site {
    /// The function (demangled), when the module has symbols.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The source file and line of the call, when the module has debug info.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The module's path, as the process saw it.
    pub module: String,
    /// The frame's address in the module's file (hex).
    pub offset: String,
}

impl Site {
    /// `load_weights (model.c:42)`, `load_weights (libfoo.so+0x1234)`, or
    /// `libfoo.so+0x1234`. Without a line, the offset tells two calls in one function apart.
    pub fn words(&self) -> String {
        let module = self.module.rsplit('/').next().unwrap_or(&self.module);
        let place = match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{}:{l}", f.rsplit('/').next().unwrap_or(f)),
            (Some(f), None) => f.rsplit('/').next().unwrap_or(f).to_string(),
            _ => format!("{module}+{}", self.offset),
        };
        match &self.function {
            Some(f) => format!("{f} ({place})"),
            None => format!("{module}+{}", self.offset),
        }
    }
}

/// A module's file: its DWARF, and its function symbols with their sizes.
struct Opened {
    dwarf: addr2line::Loader,
    /// (address, size, name), by address: functions of the symbol table and the dynamic one.
    symbols: Vec<(u64, u64, String)>,
}

impl Opened {
    /// The function symbol whose extent holds `probe`. Only within its size: a stripped
    /// library keeps its exported symbols only, and the one before an address of a local
    /// function is not that function.
    fn symbol(&self, probe: u64) -> Option<&str> {
        let at = self
            .symbols
            .partition_point(|s| s.0 <= probe)
            .checked_sub(1)?;
        let (addr, size, name) = &self.symbols[at];
        (probe < addr + size).then_some(name.as_str())
    }
}

/// Function symbols of an ELF file, with sizes, by address.
fn function_symbols(path: &Path) -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let cache = object::ReadCache::new(file);
    let Ok(obj) = object::File::parse(&cache) else {
        return Vec::new();
    };
    let mut v: Vec<(u64, u64, String)> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.is_definition())
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .collect();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

/// Symbolises frames, opening each module's file once.
pub struct Symbolizer {
    debug_dirs: Vec<PathBuf>,
    /// By module path and build id: its file opened, or none (not found, or unreadable).
    loaders: HashMap<(String, String), Option<Opened>>,
    /// Modules already warned about (once each).
    warned: Vec<String>,
}

impl Symbolizer {
    pub fn new(debug_dirs: &[PathBuf]) -> Symbolizer {
        let mut dirs = debug_dirs.to_vec();
        dirs.push(PathBuf::from("/usr/lib/debug"));
        Symbolizer {
            debug_dirs: dirs,
            loaders: HashMap::new(),
            warned: Vec::new(),
        }
    }

    /// The allocating frame of stack `id` nearest the program: the first (innermost) frame
    /// outside cuquota, the driver and the CUDA runtime (a statically linked runtime's
    /// `cuda…` functions included). None when the stack is unknown or all of it is theirs.
    pub fn site(&mut self, stacks: &Stacks, id: u64) -> Option<Site> {
        let frames = stacks.stacks.get(&id)?;
        for &ip in frames {
            let Some(m) = stacks.module_of(ip) else {
                continue; // no module: a JIT's code, or the vdso
            };
            let module = &stacks.modules[m];
            if module.is_cuda_layer() {
                continue;
            }
            // A return address: the call is the instruction before it.
            let probe = ip.wrapping_sub(1).wrapping_sub(module.bias);
            let site = self.symbolise(module, probe);
            if site.function.as_deref().is_some_and(is_runtime_function) {
                continue;
            }
            return Some(site);
        }
        None
    }

    fn symbolise(&mut self, module: &Module, probe: u64) -> Site {
        let mut site = Site {
            function: None,
            file: None,
            line: None,
            module: module.path.clone(),
            offset: format!("{probe:#x}"),
        };
        let key = (module.path.clone(), module.build_id.clone());
        if !self.loaders.contains_key(&key) {
            let loader = self.open(module);
            self.loaders.insert(key.clone(), loader);
        }
        let Some(opened) = self.loaders.get(&key).and_then(Option::as_ref) else {
            return site;
        };
        if let Ok(mut frames) = opened.dwarf.find_frames(probe) {
            // The innermost frame: the function (inlined or not) that holds the call.
            if let Ok(Some(frame)) = frames.next() {
                site.function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.demangle().ok())
                    .map(|f| f.into_owned());
                if let Some(loc) = frame.location {
                    site.file = loc.file.map(str::to_string);
                    site.line = loc.line;
                }
            }
        }
        if site.function.is_none() {
            site.function = opened
                .symbol(probe)
                .map(|s| addr2line::demangle_auto(s.into(), None).into_owned());
        }
        site
    }

    /// The module's file, or its debug file found by build id.
    fn open(&mut self, module: &Module) -> Option<Opened> {
        let path = Path::new(&module.path);
        let same = |p: &Path| {
            module.build_id.is_empty() || build_id(p).as_deref() == Some(&module.build_id)
        };
        let mut candidates: Vec<PathBuf> = Vec::new();
        if path.is_file() && same(path) {
            candidates.push(path.to_path_buf());
        }
        if module.build_id.len() > 2 {
            let (head, rest) = module.build_id.split_at(2);
            for dir in &self.debug_dirs {
                for p in [
                    dir.join(".build-id")
                        .join(head)
                        .join(format!("{rest}.debug")),
                    dir.join(head).join(format!("{rest}.debug")),
                    dir.join(module.name()),
                ] {
                    if p.is_file() && same(&p) {
                        candidates.push(p);
                    }
                }
            }
        }
        for c in candidates {
            if let Ok(dwarf) = addr2line::Loader::new(&c) {
                let symbols = function_symbols(&c);
                return Some(Opened { dwarf, symbols });
            }
        }
        if !self.warned.contains(&module.path) {
            self.warned.push(module.path.clone());
            let why = if path.is_file() {
                "it is another build (its build id differs)"
            } else {
                "it is not there"
            };
            eprintln!(
                "cuquota: warning: cannot symbolise frames in {}: {why}, and no file with its \
                 build id {} was found (give its directory with --debug-dir)",
                module.path,
                if module.build_id.is_empty() {
                    "(none)"
                } else {
                    &module.build_id
                }
            );
        }
        None
    }
}

/// A statically linked CUDA runtime's entry points (`cudaMalloc`, `__cudaRegisterFatBinary`,
/// `cudart::…`): not the program's call site.
fn is_runtime_function(name: &str) -> bool {
    let upper_after = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    };
    upper_after("cuda") || name.starts_with("__cuda") || name.starts_with("cudart::")
}

/// A file's GNU build id in hex, read from its ELF notes (None: not ELF, or none).
fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let obj = object::File::parse(&cache).ok()?;
    let id = obj.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_functions_are_recognised() {
        for name in [
            "cudaMalloc",
            "cudaMallocAsync",
            "__cudaRegisterFatBinary",
            "cudart::x",
        ] {
            assert!(is_runtime_function(name), "{name}");
        }
        for name in ["cuda_alloc_weights", "main", "cudax", "load"] {
            assert!(!is_runtime_function(name), "{name}");
        }
    }

    /// A symbol is a function's only within its size.
    #[test]
    fn symbols_hold_only_their_extent() {
        let dwarf = addr2line::Loader::new(std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        let opened = Opened {
            dwarf,
            symbols: vec![(0x100, 0x10, "a".into()), (0x200, 0x8, "b".into())],
        };
        assert_eq!(opened.symbol(0x100), Some("a"));
        assert_eq!(opened.symbol(0x10f), Some("a"));
        assert_eq!(opened.symbol(0x110), None);
        assert_eq!(opened.symbol(0x1ff), None);
        assert_eq!(opened.symbol(0x207), Some("b"));
        assert_eq!(opened.symbol(0xff), None);
        assert_eq!(opened.symbol(0x208), None);
    }

    #[test]
    fn sites_in_words() {
        let site = Site {
            function: Some("load".into()),
            file: Some("/src/a/model.c".into()),
            line: Some(42),
            module: "/opt/bin/train".into(),
            offset: "0x1234".into(),
        };
        assert_eq!(site.words(), "load (model.c:42)");
        let bare = Site {
            file: None,
            line: None,
            ..site.clone()
        };
        assert_eq!(bare.words(), "load (train+0x1234)");
        let unknown = Site {
            function: None,
            ..bare
        };
        assert_eq!(unknown.words(), "train+0x1234");
    }

    /// This test binary's own frames symbolise to this function, by path and by build id.
    #[test]
    fn a_frame_of_this_binary_symbolises() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let id = build_id(&exe).expect("rustc links with a build id");
        let here = a_frame_of_this_binary_symbolises as *const () as u64;
        // A PIE: find the bias from /proc/self/maps's first mapping of the executable.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_text = exe.to_string_lossy();
        let first = maps
            .lines()
            .find(|l| l.ends_with(exe_text.as_ref()))
            .unwrap();
        let (range, rest) = first.split_once(' ').unwrap();
        let start = u64::from_str_radix(range.split('-').next().unwrap(), 16).unwrap();
        let offset = u64::from_str_radix(rest.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(offset, 0, "{first}");
        let module = |path: &str| Module {
            path: path.into(),
            bias: start,
            lo: start,
            hi: u64::MAX,
            build_id: id.clone(),
        };
        let mut sym = Symbolizer::new(&[]);
        let site = sym.symbolise(&module(&exe_text), here + 4 - start);
        let f = site.function.unwrap_or_default();
        assert!(f.ends_with("a_frame_of_this_binary_symbolises"), "{f}");
        assert!(site.file.unwrap_or_default().ends_with("symbols.rs"));

        // Gone from its path: found in a --debug-dir by name, only with the same build id.
        let dir = std::env::temp_dir().join(format!("cuquota-symbols-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&exe, dir.join("moved")).unwrap();
        let mut sym = Symbolizer::new(std::slice::from_ref(&dir));
        let site = sym.symbolise(&module("/nonexistent/moved"), here + 4 - start);
        assert!(site
            .function
            .is_some_and(|f| f.ends_with("a_frame_of_this_binary_symbolises")));
        let other = Module {
            build_id: "00".repeat(20),
            ..module("/nonexistent/moved")
        };
        assert_eq!(sym.symbolise(&other, here + 4 - start).function, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
