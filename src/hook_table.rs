//! The one table of driver functions cuquota deals with: which hook each gets (or none,
//! for functions we only call), and the facts `cuGetProcAddress` needs about them (base
//! name, the version that introduced the variant, per-thread-stream variants). Written from
//! the `PFN_*_vNNNN` typedefs of NVIDIA's `cudaTypedefs.h`.

macro_rules! driver_functions {
    ($( $id:ident: $symbol:literal, $base:literal @ $since:literal, $stream:ident, hook $hook:tt; )*) => {
        /// A driver function cuquota resolves in the real driver.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Func { $($id,)* }

        /// Every function, in `Func` order.
        pub const ALL: &[Func] = &[$(Func::$id,)*];

        pub const COUNT: usize = ALL.len();

        impl Func {
            /// The exported symbol, e.g. `cuMemAlloc_v2`.
            pub fn symbol(self) -> &'static str {
                match self { $(Func::$id => $symbol,)* }
            }
            /// The name callers give `cuGetProcAddress`, e.g. `cuMemAlloc`.
            pub fn base(self) -> &'static str {
                match self { $(Func::$id => $base,)* }
            }
            /// The CUDA version (1000·major + 10·minor) that introduced this variant.
            pub fn since(self) -> u32 {
                match self { $(Func::$id => $since,)* }
            }
            /// Whether this is the per-thread default stream (`_ptsz`) variant.
            pub fn per_thread(self) -> bool {
                match self { $(Func::$id => driver_functions!(@stream $stream),)* }
            }
            /// The address of our hook for this variant; `None` for functions we only call.
            pub fn hook(self) -> Option<usize> {
                match self { $(Func::$id => driver_functions!(@hook $hook),)* }
            }
        }
    };
    (@stream ptsz) => { true };
    (@stream plain) => { false };
    (@hook none) => { None };
    (@hook $f:ident) => { Some(crate::exports::$f as *const () as usize) };
}

driver_functions! {
    Init:                    "cuInit", "cuInit" @ 2000, plain, hook cuInit;
    MemAlloc:                "cuMemAlloc_v2", "cuMemAlloc" @ 3020, plain, hook cuMemAlloc_v2;
    MemAllocLegacy:          "cuMemAlloc", "cuMemAlloc" @ 2000, plain, hook cuMemAlloc;
    MemAllocPitch:           "cuMemAllocPitch_v2", "cuMemAllocPitch" @ 3020, plain, hook cuMemAllocPitch_v2;
    MemAllocPitchLegacy:     "cuMemAllocPitch", "cuMemAllocPitch" @ 2000, plain, hook cuMemAllocPitch;
    MemAllocManaged:         "cuMemAllocManaged", "cuMemAllocManaged" @ 6000, plain, hook cuMemAllocManaged;
    MemAllocAsync:           "cuMemAllocAsync", "cuMemAllocAsync" @ 11020, plain, hook cuMemAllocAsync;
    MemAllocAsyncPtsz:       "cuMemAllocAsync_ptsz", "cuMemAllocAsync" @ 11020, ptsz, hook cuMemAllocAsync_ptsz;
    MemAllocFromPool:        "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync" @ 11020, plain, hook cuMemAllocFromPoolAsync;
    MemAllocFromPoolPtsz:    "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync" @ 11020, ptsz, hook cuMemAllocFromPoolAsync_ptsz;
    MemFree:                 "cuMemFree_v2", "cuMemFree" @ 3020, plain, hook cuMemFree_v2;
    MemFreeLegacy:           "cuMemFree", "cuMemFree" @ 2000, plain, hook cuMemFree;
    MemFreeAsync:            "cuMemFreeAsync", "cuMemFreeAsync" @ 11020, plain, hook cuMemFreeAsync;
    MemFreeAsyncPtsz:        "cuMemFreeAsync_ptsz", "cuMemFreeAsync" @ 11020, ptsz, hook cuMemFreeAsync_ptsz;
    MemCreate:               "cuMemCreate", "cuMemCreate" @ 10020, plain, hook cuMemCreate;
    MemRelease:              "cuMemRelease", "cuMemRelease" @ 10020, plain, hook cuMemRelease;
    MemPoolCreate:           "cuMemPoolCreate", "cuMemPoolCreate" @ 11020, plain, hook cuMemPoolCreate;
    MemGetInfo:              "cuMemGetInfo_v2", "cuMemGetInfo" @ 3020, plain, hook cuMemGetInfo_v2;
    MemGetInfoLegacy:        "cuMemGetInfo", "cuMemGetInfo" @ 2000, plain, hook cuMemGetInfo;
    DeviceTotalMem:          "cuDeviceTotalMem_v2", "cuDeviceTotalMem" @ 3020, plain, hook cuDeviceTotalMem_v2;
    DeviceTotalMemLegacy:    "cuDeviceTotalMem", "cuDeviceTotalMem" @ 2000, plain, hook cuDeviceTotalMem;
    GetProcAddress:          "cuGetProcAddress", "cuGetProcAddress" @ 11030, plain, hook cuGetProcAddress;
    GetProcAddressV2:        "cuGetProcAddress_v2", "cuGetProcAddress" @ 12000, plain, hook cuGetProcAddress_v2;
    // Called, never hooked.
    CtxGetDevice:            "cuCtxGetDevice", "cuCtxGetDevice" @ 2000, plain, hook none;
    DeviceGetCount:          "cuDeviceGetCount", "cuDeviceGetCount" @ 2000, plain, hook none;
    DeviceGetName:           "cuDeviceGetName", "cuDeviceGetName" @ 2000, plain, hook none;
}

/// The hooked variant with this exact exported name (the `dlsym` path). Cheap for the
/// names of other libraries: they rarely start with "cu".
pub fn hooked_symbol(name: &[u8]) -> Option<Func> {
    if !name.starts_with(b"cu") {
        return None;
    }
    ALL.iter()
        .copied()
        .find(|f| f.hook().is_some() && f.symbol().as_bytes() == name)
}

/// The hooked variants a `cuGetProcAddress` query for `base` may return.
pub fn hooked_variants(base: &[u8]) -> impl Iterator<Item = Func> + '_ {
    let candidate = base.starts_with(b"cu");
    ALL.iter()
        .copied()
        .filter(move |f| candidate && f.hook().is_some() && f.base().as_bytes() == base)
}

/// The variant the driver's documented rules give for (base, version, flags): the newest one
/// introduced at or before `version`, the `_ptsz` one when flags ask for the per-thread
/// default stream. Used only when the driver hands out an address that is none of its
/// exports, to know which hook fits.
pub fn variant_by_rules(base: &[u8], version: u32, per_thread: bool) -> Option<Func> {
    let eligible = || hooked_variants(base).filter(|f| f.since() <= version);
    let with_stream = eligible()
        .filter(|f| f.per_thread() == per_thread)
        .max_by_key(|f| f.since());
    with_stream.or_else(|| {
        eligible()
            .filter(|f| !f.per_thread())
            .max_by_key(|f| f.since())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for (i, f) in ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
            assert!(f.symbol().starts_with(f.base()), "{f:?}");
            assert_eq!(f.per_thread(), f.symbol().ends_with("_ptsz"));
        }
        let mut names: Vec<_> = ALL.iter().map(|f| f.symbol()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), COUNT, "a symbol is listed twice");
    }

    #[test]
    fn exact_names() {
        assert_eq!(hooked_symbol(b"cuMemAlloc_v2"), Some(Func::MemAlloc));
        assert_eq!(hooked_symbol(b"cuMemAlloc"), Some(Func::MemAllocLegacy));
        assert_eq!(hooked_symbol(b"cuCtxGetDevice"), None, "called, not hooked");
        assert_eq!(hooked_symbol(b"malloc"), None);
        assert_eq!(hooked_symbol(b"cuGetExportTable"), None);
    }

    #[test]
    fn version_and_flag_rules() {
        assert_eq!(
            variant_by_rules(b"cuMemAlloc", 3020, false),
            Some(Func::MemAlloc)
        );
        assert_eq!(
            variant_by_rules(b"cuMemAlloc", 12000, true),
            Some(Func::MemAlloc)
        );
        assert_eq!(
            variant_by_rules(b"cuMemAlloc", 2000, false),
            Some(Func::MemAllocLegacy)
        );
        assert_eq!(
            variant_by_rules(b"cuMemAllocAsync", 11020, true),
            Some(Func::MemAllocAsyncPtsz)
        );
        assert_eq!(
            variant_by_rules(b"cuMemAllocAsync", 12000, false),
            Some(Func::MemAllocAsync)
        );
        assert_eq!(variant_by_rules(b"cuMemAllocAsync", 11000, false), None);
        assert_eq!(
            variant_by_rules(b"cuGetProcAddress", 11030, false),
            Some(Func::GetProcAddress)
        );
        assert_eq!(
            variant_by_rules(b"cuGetProcAddress", 12000, false),
            Some(Func::GetProcAddressV2)
        );
        assert_eq!(variant_by_rules(b"cuLaunchKernel", 12000, false), None);
    }
}
