//! How cuquota finds functions in a real library, and how a program's lookups of them get
//! our hooks. One module for every library cuquota sits in front of: a library is a table
//! (its soname and one line per function, see `library!`), the machinery is here.
//!
//! The three ways a program reaches a function:
//! - by the exported symbol: the dynamic linker binds it to our export of the same name;
//! - by `dlsym` on the library's handle: [`hook_for_symbol`];
//! - by `cuGetProcAddress(_v2)` (CUDA only): [`hook_for_lookup`], using each function's
//!   version facts (the name callers ask for, the version that introduced the variant,
//!   whether it is the per-thread default stream `_ptsz` variant).
//!
//! A hook is handed out only where the answer is the real library's own function for a name
//! we hook, so every other name, library and handle passes through untouched. This module
//! does not know the hooks: each library's hooks come in as a [`Hooks`] table, built where
//! the hooks are.

use crate::cuda_abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

// ---- libraries and their functions ---------------------------------------------------------

/// A real library cuquota resolves functions in. It is never loaded by us (RTLD_NOLOAD):
/// every hook is reached only after the program loaded the library, so none of its start-up
/// code ever runs inside one of our calls. Matched by soname, so a program's
/// `dlopen("libcuda.so")` counts too.
pub struct Library {
    soname: &'static CStr,
    /// What every function name of the library starts with: a cheap "not ours" for `dlsym`.
    pub prefix: &'static str,
    handle: AtomicUsize,
}

impl Library {
    pub const fn new(soname: &'static CStr, prefix: &'static str) -> Library {
        Library {
            soname,
            prefix,
            handle: AtomicUsize::new(0),
        }
    }

    /// The library's handle, if the process has loaded it.
    fn handle(&self) -> Option<*mut c_void> {
        let handle = self.handle.load(Relaxed);
        if handle != 0 {
            return Some(handle as *mut c_void);
        }
        // SAFETY: a NUL-terminated soname; with RTLD_NOLOAD nothing is loaded or initialised.
        let handle = unsafe {
            libc::dlopen(
                self.soname.as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD,
            )
        };
        if handle.is_null() {
            return None;
        }
        self.handle.store(handle as usize, Relaxed);
        Some(handle)
    }
}

/// Which default stream a variant was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The plain symbol (legacy default stream), or a function without a stream.
    Plain,
    /// `_ptsz`: the per-thread default stream.
    PerThread,
}

/// One function of a library, without its type: its name, its version facts, and the real
/// address once resolved.
pub struct Symbol {
    library: &'static Library,
    /// The exported name followed by a NUL.
    name_nul: &'static str,
    name: &'static str,
    /// The name callers give `cuGetProcAddress`, e.g. `cuMemAlloc` for `cuMemAlloc_v2`.
    pub base: &'static str,
    /// The CUDA version (1000·major + 10·minor) that introduced this variant.
    pub since: u32,
    pub stream: Stream,
    address: AtomicUsize,
}

impl Symbol {
    /// The exported symbol, e.g. `cuMemAlloc_v2`.
    #[inline]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The real library's address of this function, or None if the library (or the
    /// function) is not there.
    #[inline]
    pub fn address(&self) -> Option<usize> {
        match self.address.load(Relaxed) {
            0 => self.resolve(),
            cached => Some(cached),
        }
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        let handle = self.library.handle()?;
        let found = dlsym(handle, self.name_nul.as_ptr().cast()) as usize;
        if found == 0 {
            return None;
        }
        self.address.store(found, Relaxed);
        Some(found)
    }
}

/// A C function pointer type: what a [`Real`] slot may hold. Sealed: only `unsafe extern
/// "C" fn` types implement it, so a slot can hold nothing else.
pub trait CFunction: Copy + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! c_function_types {
    ($($arg:ident)*) => {
        impl<R, $($arg),*> sealed::Sealed for unsafe extern "C" fn($($arg),*) -> R {}
        impl<R, $($arg),*> CFunction for unsafe extern "C" fn($($arg),*) -> R {}
    };
}
c_function_types!();
c_function_types!(A);
c_function_types!(A B);
c_function_types!(A B C);
c_function_types!(A B C D);
c_function_types!(A B C D E);
c_function_types!(A B C D E F);
// cuLibraryLoadData / cuLibraryLoadFromFile (context memory)
c_function_types!(A B C D E F G H);

/// The real function of one symbol, typed with its C prototype. Made only by `library!`,
/// where the symbol and its prototype are written on one line.
pub struct Real<F: CFunction> {
    symbol: Symbol,
    prototype: PhantomData<F>,
}

impl<F: CFunction> Real<F> {
    /// Use `library!`, which writes the name once.
    #[doc(hidden)]
    pub const fn new(
        library: &'static Library,
        name_nul: &'static str,
        base: &'static str,
        since: u32,
        stream: Stream,
    ) -> Real<F> {
        let bytes = name_nul.as_bytes();
        assert!(!bytes.is_empty() && bytes[bytes.len() - 1] == 0);
        let (name, _) = name_nul.split_at(bytes.len() - 1);
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
        Real {
            symbol: Symbol {
                library,
                name_nul,
                name,
                base,
                since,
                stream,
                address: AtomicUsize::new(0),
            },
            prototype: PhantomData,
        }
    }

    #[inline]
    pub const fn symbol(&'static self) -> &'static Symbol {
        &self.symbol
    }

    /// The exported symbol, e.g. `cuMemAlloc_v2`.
    #[inline]
    pub fn name(&self) -> &'static str {
        self.symbol.name
    }

    /// The real function, or None if the library lacks it.
    #[inline]
    pub fn get(&self) -> Option<F> {
        // SAFETY: the address is the library's own function of this name, and F is the
        // prototype `library!` declared for that name (a C function pointer, pointer-sized).
        self.symbol
            .address()
            .map(|a| unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }
}

/// Declares a library and every function cuquota resolves in it, one line each:
///
/// ```text
/// library! {
///     LIBCUDA = c"libcuda.so.1", names "cu", facts crate::lookup::driver_facts;
///     // symbol: prototype
///     cuMemAlloc_v2: fn(*mut CuDevicePtr, usize) -> CuResult;
/// }
/// ```
///
/// The version facts are for `cuGetProcAddress`: with `facts F`, `F(symbol)` gives each
/// line's (a `const fn`, so a symbol without facts fails the build); a line may also write its
/// own (`cuX_v2: "cuX" @ 3020, Plain: fn(…) -> …;`). A library without such a lookup leaves
/// them out (`nvmlInit_v2: fn() -> NvmlReturn;`: its own name, version 0, plain).
///
/// Each line becomes a `pub static` [`Real`] slot named as the symbol, and the prototype a
/// `pub type` of the same name (types and values have separate namespaces), so that
/// `Real<real_driver::cuMemAlloc_v2>` is the type of `real_driver::cuMemAlloc_v2`.
macro_rules! library {
    (
        $(#[$doc:meta])* $library:ident = $soname:literal, names $prefix:literal
            $(, facts $facts:path)?;
        $($lines:tt)*
    ) => {
        $crate::lookup::library!(@table [$(#[$doc])*] $library $soname $prefix [$($facts)?] $($lines)*);
    };
    (
        @table [$($doc:tt)*] $library:ident $soname:literal $prefix:literal $facts:tt
        $( $symbol:ident: $($base:literal @ $since:literal, $stream:ident:)?
            fn($($arg:ty),* $(,)?) -> $ret:ty; )*
    ) => {
        $($doc)*
        pub static $library: $crate::lookup::Library =
            $crate::lookup::Library::new($soname, $prefix);
        $(
            #[allow(non_camel_case_types)]
            pub type $symbol = unsafe extern "C" fn($($arg),*) -> $ret;
            #[allow(non_upper_case_globals)]
            pub static $symbol: $crate::lookup::Real<$symbol> =
                $crate::lookup::Real::new(
                    &$library,
                    concat!(stringify!($symbol), "\0"),
                    $crate::lookup::library!(@base $symbol $facts $($base)?),
                    $crate::lookup::library!(@since $symbol $facts $($since)?),
                    $crate::lookup::library!(@stream $symbol $facts $($stream)?),
                );
        )*
        /// Every function of the table, in table order.
        #[allow(dead_code)]
        pub static FUNCTIONS: &[&$crate::lookup::Symbol] = &[$($symbol.symbol(),)*];
    };
    (@base $symbol:ident [$facts:path]) => { $facts(stringify!($symbol)).0 };
    (@base $symbol:ident []) => { stringify!($symbol) };
    (@base $symbol:ident [$($facts:path)?] $base:literal) => { $base };
    (@since $symbol:ident [$facts:path]) => { $facts(stringify!($symbol)).1 };
    (@since $symbol:ident []) => { 0 };
    (@since $symbol:ident [$($facts:path)?] $since:literal) => { $since };
    (@stream $symbol:ident [$facts:path]) => { $facts(stringify!($symbol)).2 };
    (@stream $symbol:ident []) => { $crate::lookup::Stream::Plain };
    (@stream $symbol:ident [$($facts:path)?] $stream:ident) => { $crate::lookup::Stream::$stream };
}
pub(crate) use library;

/// A CUDA driver function's `cuGetProcAddress` facts (base name, version, stream), from the
/// driver catalogue (cuda.h's); a symbol cuda.h does not declare fails the build.
pub const fn driver_facts(symbol: &str) -> (&'static str, u32, Stream) {
    match cuquota_driver::catalogue::function(symbol) {
        Some(f) => {
            let stream = match f.stream {
                cuquota_driver::Stream::Plain => Stream::Plain,
                cuquota_driver::Stream::Ptsz | cuquota_driver::Stream::Ptds => Stream::PerThread,
            };
            (f.base, f.since, stream)
        }
        None => panic!("a driver function the catalogue (cuda.h) does not have"),
    }
}

// ---- hooks: what the routing hands out -------------------------------------------------------

/// One of our hooks and the real function it stands in for.
#[derive(Clone, Copy)]
pub struct Hook {
    pub real: &'static Symbol,
    address: HookAddress,
}

/// The address of one of our hooks.
#[derive(Clone, Copy)]
struct HookAddress(*const ());

// SAFETY: the address of code in this library; never written through, valid for the life of
// the process, so sharing it between threads is harmless.
unsafe impl Sync for HookAddress {}

impl Hook {
    /// Use `hook_slice!`, which checks that the hook has the real function's prototype.
    #[doc(hidden)]
    pub const fn new(real: &'static Symbol, address: *const ()) -> Hook {
        Hook {
            real,
            address: HookAddress(address),
        }
    }

    pub fn address(&self) -> usize {
        self.address.0 as usize
    }
}

/// Compiles only if `hook` has the prototype of `real`.
#[doc(hidden)]
pub const fn same_prototype<F: CFunction>(_real: &Real<F>, _hook: F) {}

/// The hooks of one library.
pub struct Hooks {
    pub library: &'static Library,
    pub hooks: &'static [Hook],
}

/// `hook_slice!(in path::to::table: hook, hook, …)`: a `&[Hook]` of a library's hooks. Each
/// hook is a function named as the symbol it stands in for, and the compiler checks that
/// it has the prototype of that symbol's slot in the table.
macro_rules! hook_slice {
    (in $table:path: $($hook:ident),* $(,)?) => {{
        use $table as table;
        &[$({
            const _: () = $crate::lookup::same_prototype(&table::$hook, $hook);
            $crate::lookup::Hook::new(table::$hook.symbol(), $hook as *const ())
        },)*]
    }};
}
pub(crate) use hook_slice;

/// The hooks of `slices`, in order, as one array of exactly `N` (at compile time: a table
/// declared in parts is walked as one).
pub const fn joined<const N: usize>(slices: &[&[Hook]]) -> [Hook; N] {
    let mut first = 0;
    while slices[first].is_empty() {
        first += 1;
    }
    let mut joined = [slices[first][0]; N];
    let (mut slice, mut n) = (0, 0);
    while slice < slices.len() {
        let mut i = 0;
        while i < slices[slice].len() {
            joined[n] = slices[slice][i];
            (n, i) = (n + 1, i + 1);
        }
        slice += 1;
    }
    assert!(n == N, "the slices do not hold N hooks");
    joined
}

/// Whether `name` is one of `names` (at compile time).
pub const fn listed(names: &[&str], name: &str) -> bool {
    let mut i = 0;
    while i < names.len() {
        if cuquota_driver::catalogue::same_name(names[i], name) {
            return true;
        }
        i += 1;
    }
    false
}

// ---- the three lookup paths ----------------------------------------------------------------

/// `dlsym(handle, name)` returned `found`: the hook to hand out instead, if `found` is the
/// real library's function `name` and we hook it.
pub fn hook_for_symbol(name: &[u8], found: usize, libraries: &[&Hooks]) -> Option<usize> {
    let hook = libraries.iter().find_map(|l| hooked_symbol(name, l))?;
    (hook.real.address() == Some(found)).then(|| handed_out(hook))
}

/// Whether a lookup ever got one of our hooks: with the engine, what says at exit that the
/// program's calls reached us.
static HANDED_OUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn handed_out(hook: &Hook) -> usize {
    HANDED_OUT.store(true, Relaxed);
    hook.address()
}

pub fn any_hook_handed_out() -> bool {
    HANDED_OUT.load(Relaxed)
}

/// The hook for the exported name `name`, if we hook it. Cheap for the names of other
/// libraries: they rarely start with the library's prefix.
pub fn hooked_symbol<'a>(name: &[u8], hooks: &'a Hooks) -> Option<&'a Hook> {
    if !name.starts_with(hooks.library.prefix.as_bytes()) {
        return None;
    }
    hooks
        .hooks
        .iter()
        .find(|h| h.real.name().as_bytes() == name)
}

/// The hooked variants a `cuGetProcAddress` query for `base` may return.
fn hooked_variants<'a>(base: &'a [u8], hooks: &'a Hooks) -> impl Iterator<Item = &'a Hook> {
    let candidate = base.starts_with(hooks.library.prefix.as_bytes());
    hooks
        .hooks
        .iter()
        .filter(move |h| candidate && h.real.base.as_bytes() == base)
}

/// What a `cuGetProcAddress` answer becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    /// Our hook for the variant the driver gave.
    Hook(usize),
    /// The answer as the driver gave it (a name we do not hook).
    Untouched,
    /// A variant of a hooked function that this build does not know (a newer driver's):
    /// its exported name (or `base@version` when it has none) and the hooked base.
    Unknown { symbol: Vec<u8>, base: &'static str },
}

/// After a successful `cuGetProcAddress(base, version, flags)` that returned `found`: the hook
/// for exactly the variant the driver gave, the answer left alone, or a variant of a hooked
/// function that this build does not know.
pub fn hook_for_lookup(
    base: &[u8],
    found: usize,
    version: i32,
    flags: u64,
    hooks: &Hooks,
) -> Routed {
    let mut known = None;
    for hook in hooked_variants(base, hooks) {
        known = Some(hook.real.base);
        if hook.real.address() == Some(found) {
            return Routed::Hook(handed_out(hook));
        }
    }
    let Some(hooked_base) = known else {
        return Routed::Untouched;
    };
    // A name the driver answers with another function we hook: from CUDA 12.0
    // `cuGraphInstantiate` means `cuGraphInstantiateWithFlags` (cuda.h's #define, the
    // PFN_cuGraphInstantiate typedef), and the caller expects that prototype.
    if let Some(alias) = hooks.hooks.iter().find(|h| h.real.address() == Some(found)) {
        return Routed::Hook(handed_out(alias));
    }
    // The driver may hand out an address that is none of its exports. Then the documented
    // rules name the variant — unless the address is another exported function: a variant
    // newer than this build knows, which no hook of ours fits.
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let by_rules = u32::try_from(version)
        .ok()
        .and_then(|v| variant_by_rules(base, v, per_thread, hooks));
    let exported = exported_name_at(found);
    match (by_rules, exported) {
        (Some(hook), None) => Routed::Hook(handed_out(hook)),
        (Some(hook), Some(name)) if name == hook.real.name().as_bytes() => {
            Routed::Hook(handed_out(hook))
        }
        (_, name) => Routed::Unknown {
            symbol: name.unwrap_or_else(|| {
                format!("{}@{version}", String::from_utf8_lossy(base)).into_bytes()
            }),
            base: hooked_base,
        },
    }
}

/// `dlsym(handle, name)` found `found`, which we do not hook: the hooked base, when `name` is
/// a variant of a hooked function that this build does not know (`cuMemAlloc_v3`: a base we
/// hook, a `_vN`, `_ptsz` or `_ptds` form none of our hooks has) and `found` lies in the
/// hooks' library.
pub fn unknown_variant_symbol(name: &[u8], found: usize, hooks: &Hooks) -> Option<&'static str> {
    if !name.starts_with(hooks.library.prefix.as_bytes()) || hooked_symbol(name, hooks).is_some() {
        return None;
    }
    let base = variant_base(name)?;
    let hook = hooks
        .hooks
        .iter()
        .find(|h| h.real.base.as_bytes() == base)?;
    in_library(found, hooks.library).then_some(hook.real.base)
}

/// The base of a variant's name by the driver's naming (`cuX_v3_ptsz` → `cuX`), when it has
/// a variant suffix.
fn variant_base(name: &[u8]) -> Option<&[u8]> {
    let name = name
        .strip_suffix(b"_ptsz")
        .or_else(|| name.strip_suffix(b"_ptds"))
        .unwrap_or(name);
    let at = name.windows(2).rposition(|w| w == b"_v")?;
    let digits = &name[at + 2..];
    (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit)).then_some(&name[..at])
}

/// Whether `addr` lies in an object loaded under `library`'s soname (its file name starts as
/// the soname does, up to `.so`: `libcuda.so.1`, `libcuda.so.580.65.06`).
fn in_library(addr: usize, library: &Library) -> bool {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    if !ok || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr returned a NUL-terminated file name owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let soname = library.soname.to_bytes();
    let stem = soname
        .windows(3)
        .position(|w| w == b".so")
        .map_or(soname, |at| &soname[..at + 3]);
    file_name(file).starts_with(stem)
}

/// The variant the driver's documented rules give for (base, version, flags): the newest one
/// introduced at or before `version`, the `_ptsz` one when flags ask for the per-thread
/// default stream. Used only when the driver hands out an address that is none of its
/// exports, to know which hook fits.
pub fn variant_by_rules<'a>(
    base: &'a [u8],
    version: u32,
    per_thread: bool,
    hooks: &'a Hooks,
) -> Option<&'a Hook> {
    let wanted = if per_thread {
        Stream::PerThread
    } else {
        Stream::Plain
    };
    let eligible = || hooked_variants(base, hooks).filter(|h| h.real.since <= version);
    let with_stream = eligible()
        .filter(|h| h.real.stream == wanted)
        .max_by_key(|h| h.real.since);
    with_stream.or_else(|| {
        eligible()
            .filter(|h| h.real.stream == Stream::Plain)
            .max_by_key(|h| h.real.since)
    })
}

/// The exported symbol that starts exactly at `addr`, if any.
fn exported_name_at(addr: usize) -> Option<Vec<u8>> {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    if !ok || info.dli_sname.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated symbol name owned by the loader.
    Some(
        unsafe { CStr::from_ptr(info.dli_sname) }
            .to_bytes()
            .to_vec(),
    )
}

// ---- where a library is loaded -------------------------------------------------------------

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *const LinkMap,
    l_prev: *const LinkMap,
}

/// glibc's `struct r_debug_extended` (<link.h>; `r_next` since glibc 2.35, version 2).
#[repr(C)]
struct RDebug {
    r_version: i32,
    r_map: *const LinkMap,
    r_brk: usize,
    r_state: i32,
    r_ldbase: usize,
    r_next: *const RDebug,
}

/// Whether an object named `library*` (e.g. `libcuda.so`) is loaded in the main namespace,
/// and whether in another (`dlmopen`) one, from the dynamic linker's debugger interface
/// (`_r_debug`; other namespaces are listed only from glibc 2.35).
pub fn loaded_in_namespaces(library: &[u8]) -> (bool, bool) {
    let r_debug = dlsym(std::ptr::null_mut(), c"_r_debug".as_ptr()) as *const RDebug;
    let (mut main, mut other) = (false, false);
    let mut namespace = r_debug;
    let mut index = 0;
    while !namespace.is_null() && index < 64 {
        // SAFETY: `_r_debug` is the dynamic linker's, each r_next another namespace's, and
        // their link maps stay valid while the process runs (read at exit, nothing unloads).
        let (version, mut map, next) = unsafe {
            (
                (*namespace).r_version,
                (*namespace).r_map,
                (*namespace).r_next,
            )
        };
        while !map.is_null() {
            // SAFETY: as above; l_name is a C string or null.
            let (name, next_map) = unsafe { ((*map).l_name, (*map).l_next) };
            // SAFETY: as above.
            let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_bytes());
            if name.is_some_and(|n| file_name(n).starts_with(library)) {
                if index == 0 {
                    main = true;
                } else {
                    other = true;
                }
            }
            map = next_map;
        }
        namespace = if version >= 2 { next } else { std::ptr::null() };
        index += 1;
    }
    (main, other)
}

fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|b| *b == b'/').next().unwrap_or(path)
}

// ---- the real dlsym ------------------------------------------------------------------------

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The real `dlsym`, as a plain address: the `dlsym` trampoline reads it too. Our own
/// lookups never go through our `dlsym`: this is the next `dlsym` after this library.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// The real `dlsym`, resolved on first use: the next definition after this library in the
/// lookup order, whatever its version, so a `dlsym` interposer loaded after us is not
/// skipped. glibc's own (found by version) answers that question, with us as the caller.
fn real_dlsym() -> Option<DlsymFn> {
    let mut addr = REAL_DLSYM.load(Relaxed);
    if addr == 0 {
        let glibc = glibc_dlsym()?;
        // SAFETY: glibc's dlsym with RTLD_NEXT and a C string; RTLD_NEXT searches after the
        // caller, this library (a plain call: the return address is ours).
        let next = unsafe { glibc(libc::RTLD_NEXT, c"dlsym".as_ptr()) } as usize;
        addr = if next != 0 { next } else { glibc as usize };
        REAL_DLSYM.store(addr, Relaxed);
    }
    // SAFETY: a non-zero address came from the dynamic linker for `dlsym` itself.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(addr) })
}

/// A `dlsym` of glibc's own versions after this library (glibc's, or a versioned interposer).
fn glibc_dlsym() -> Option<DlsymFn> {
    [c"GLIBC_2.34", c"GLIBC_2.2.5"]
        .into_iter()
        .find_map(|version| {
            // SAFETY: dlvsym with RTLD_NEXT and valid C strings; it is not hooked by us.
            let addr = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            // SAFETY: a non-zero address came from the dynamic linker for `dlsym` itself.
            (addr != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(addr) })
        })
}

/// `extern "C"` entry used by the trampoline when `REAL_DLSYM` is not resolved yet.
pub extern "C" fn resolve_real_dlsym() -> usize {
    real_dlsym().map_or(0, |f| f as usize)
}

/// Calls the real `dlsym`.
pub fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: the real dlsym accepts any handle and name a caller may pass ours; they
        // are passed on as they came.
        Some(f) => unsafe { f(handle, name) },
        None => std::ptr::null_mut(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second library is one more table: here a made-up slice of NVML.
    mod nvml {
        crate::lookup::library! {
            LIBNVML = c"libnvidia-ml.so.1", names "nvml";
            nvmlInit_v2: fn() -> u32;
            nvmlDeviceGetCount_v2: fn(*mut u32) -> u32;
        }
    }

    #[allow(non_snake_case)]
    unsafe extern "C" fn nvmlInit_v2() -> u32 {
        0
    }

    static NVML_HOOKS: Hooks = Hooks {
        library: &nvml::LIBNVML,
        hooks: hook_slice!(in self::nvml: nvmlInit_v2),
    };

    #[test]
    fn a_library_is_known_by_its_file_name() {
        assert_eq!(file_name(b"/usr/lib/libcuda.so.1"), b"libcuda.so.1");
        assert_eq!(file_name(b"libcuda.so"), b"libcuda.so");
        // This test binary is linked against libc, in the main namespace only.
        assert_eq!(loaded_in_namespaces(b"libc.so"), (true, false));
        assert_eq!(loaded_in_namespaces(b"libcuda.so"), (false, false));
    }

    #[test]
    fn a_table_without_version_facts() {
        let f = nvml::nvmlDeviceGetCount_v2.symbol();
        assert_eq!(f.name(), "nvmlDeviceGetCount_v2");
        assert_eq!((f.base, f.since, f.stream), (f.name(), 0, Stream::Plain));
        assert_eq!(nvml::FUNCTIONS.len(), 2);
    }

    #[test]
    fn only_hooked_names_of_the_library_are_routed() {
        let hook = hooked_symbol(b"nvmlInit_v2", &NVML_HOOKS).expect("hooked");
        assert_eq!(hook.address(), nvmlInit_v2 as *const () as usize);
        assert!(hooked_symbol(b"nvmlDeviceGetCount_v2", &NVML_HOOKS).is_none());
        assert!(hooked_symbol(b"cuInit", &NVML_HOOKS).is_none());
        // The library is not loaded in a unit test, so no address is the real function.
        assert_eq!(hook_for_symbol(b"nvmlInit_v2", 1, &[&NVML_HOOKS]), None);
        assert!(nvml::nvmlInit_v2.get().is_none());
    }

    #[test]
    fn variant_names_by_the_drivers_naming() {
        assert_eq!(variant_base(b"cuMemAlloc_v3"), Some(&b"cuMemAlloc"[..]));
        assert_eq!(variant_base(b"cuMemcpy_v2_ptds"), Some(&b"cuMemcpy"[..]));
        assert_eq!(
            variant_base(b"cuStreamBeginCapture_v12_ptsz"),
            Some(&b"cuStreamBeginCapture"[..])
        );
        assert_eq!(variant_base(b"cuMemAlloc"), None);
        assert_eq!(variant_base(b"cuMemAlloc_v"), None);
        assert_eq!(variant_base(b"cuMemAlloc_vx"), None);
        assert_eq!(variant_base(b"cuMemAllocAsync_ptsz"), None);
        // Not in the library (this test binary has no libcuda): never a variant of it.
        assert_eq!(
            unknown_variant_symbol(
                b"nvmlInit_v3",
                nvmlInit_v2 as *const () as usize,
                &NVML_HOOKS
            ),
            None
        );
    }

    #[test]
    fn slices_join_into_one_table() {
        static ONE: &[Hook] = hook_slice!(in self::nvml: nvmlInit_v2);
        static JOINED: [Hook; 2] = joined(&[&[], ONE, ONE]);
        assert!(JOINED.iter().all(|h| h.real.name() == "nvmlInit_v2"));
        assert!(listed(&["cuMemAlloc", "cuMemAlloc_v2"], "cuMemAlloc_v2"));
        assert!(!listed(&["cuMemAlloc", "cuMemAlloc_v2"], "cuMemAlloc_v"));
        assert!(!listed(&[], "cuMemAlloc"));
    }
}
