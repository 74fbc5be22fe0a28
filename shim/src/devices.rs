//! The simulated devices: their memory accounting and the properties they report.

use crate::abi::*;

/// Granularity of the virtual memory management API (`cuMemGetAllocationGranularity`).
pub const VMM_GRANULARITY: usize = 2 << 20;

/// The simulated machine beyond the devices the driver sees.
pub struct Machine {
    /// Whether the devices exist (made by `cuInit` or `nvmlInit`, whichever comes first).
    pub created: bool,
    /// Every device's memory by physical index, visible to the driver or not: what NVML
    /// sees. `State::devices` holds the visible ones, by ordinal.
    pub totals: Vec<u64>,
    /// Memory of simulated other processes: (physical index, pid, bytes), bytes > 0.
    pub other_processes: Vec<(usize, u32, u64)>,
    /// What each context takes from its creation (`CUDA_SHIM_CONTEXT_MEMORY`).
    pub context_cost: u64,
    /// What each green context takes itself (`CUDA_SHIM_GREEN_CONTEXT_MEMORY`).
    pub green_context_cost: u64,
}

impl Machine {
    pub const fn new() -> Self {
        Machine {
            created: false,
            totals: Vec::new(),
            other_processes: Vec::new(),
            context_cost: 0,
            green_context_cost: 0,
        }
    }
}

pub struct Device {
    pub total: u64,
    /// Bytes charged by live allocations (requested sizes, exactly).
    pub in_use: u64,
    /// The largest `in_use` ever reached.
    pub peak: u64,
    /// Number of live allocations charged to this device.
    pub live: u64,
    pub default_pool: usize,
    pub current_pool: usize,
    /// The primary context's handle once it has been retained for the first time.
    pub primary_context: Option<usize>,
    pub primary_refs: u32,
    pub primary_flags: u32,
    /// Bytes this device's memory pools reserve beyond their live allocations (see `pools`).
    pub pool_cache: u64,
    /// The device's graph memory pool reservation (see `graphs`).
    pub graph_reserved: u64,
    /// Bytes its contexts take: `CUDA_SHIM_CONTEXT_MEMORY` per live context, plus what
    /// `cuCtxSetLimit` grew beyond the defaults (see `context`, `limits`).
    pub context_memory: u64,
    /// Its index among all simulated devices: NVML's index, which its UUID and PCI bus id
    /// follow. It differs from the ordinal when `CUDA_VISIBLE_DEVICES` renumbers devices.
    pub physical: usize,
    /// Bytes simulated other processes hold on it (`cuShimOtherProcess`): not this
    /// process's footprint, but not free either.
    pub other_processes: u64,
}

impl Device {
    pub fn new(total: u64, default_pool: usize) -> Self {
        Device {
            total,
            in_use: 0,
            peak: 0,
            live: 0,
            default_pool,
            current_pool: default_pool,
            primary_context: None,
            primary_refs: 0,
            primary_flags: 0,
            context_memory: 0,
            pool_cache: 0,
            graph_reserved: 0,
            physical: 0,
            other_processes: 0,
        }
    }

    /// Everything the process holds on the device: live allocations, pool reservations
    /// beyond them, graph memory and context memory. Capacity checks and `cuMemGetInfo`
    /// go by this; `in_use` (and `cuShimStats`) count live allocations only.
    pub fn footprint(&self) -> u64 {
        self.in_use + self.pool_cache + self.graph_reserved + self.context_memory
    }

    /// Whether `bytes` more fit on the device.
    pub fn fits(&self, bytes: u64) -> bool {
        bytes <= self.free()
    }

    /// What is left for anyone: the total less this process's footprint and the memory of
    /// other (simulated) processes. Every capacity check and `cuMemGetInfo` use it.
    pub fn free(&self) -> u64 {
        self.total
            .saturating_sub(self.footprint())
            .saturating_sub(self.other_processes)
    }

    /// Charges `bytes` of context memory, or fails with out-of-memory if they do not fit.
    pub fn charge_context(&mut self, bytes: u64) -> Result<(), CUresult> {
        if bytes > self.free() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        self.context_memory += bytes;
        Ok(())
    }

    /// Returns context memory that a context's end or a smaller limit gave back.
    pub fn uncharge_context(&mut self, bytes: u64) {
        self.context_memory -= bytes;
    }

    /// Charges a new allocation of `bytes`, or fails with out-of-memory if they do not fit.
    pub fn charge(&mut self, bytes: u64) -> Result<(), CUresult> {
        if !self.fits(bytes) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        self.in_use += bytes;
        self.peak = self.peak.max(self.in_use);
        self.live += 1;
        Ok(())
    }

    /// Returns the charge of an allocation that has been freed.
    pub fn uncharge(&mut self, bytes: u64) {
        self.in_use -= bytes;
        self.live -= 1;
    }
}

/// What `cuDeviceGetName` and `nvmlDeviceGetName` report for the device with this physical
/// index. The wording predates the name "the shim" and stays: programs and tests may compare
/// it.
pub fn name(physical: usize) -> String {
    format!("cuquota stand-in GPU {physical}")
}

/// A fixed UUID per physical device, shaped like a version-4 UUID.
pub fn uuid(physical: usize) -> [u8; 16] {
    let mut bytes = *b"cuquota-shim-gpu";
    bytes[6] = 0x40 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    bytes[12..].copy_from_slice(&(physical as u32).to_be_bytes());
    bytes
}

/// The UUID as NVML, `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES` spell it:
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase hex.
pub fn uuid_text(physical: usize) -> String {
    let hex: String = uuid(physical).iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The PCI address `domain:bus:device.function` (NVML's legacy format, `%04X:%02X:%02X.0`,
/// which `cuDeviceGetPCIBusId` also reports); the bus number is the physical index.
pub fn pci_bus_id(physical: usize) -> String {
    format!("0000:{physical:02X}:00.0")
}

/// The PCI bus id in NVML's current format, `%08X:%02X:%02X.0`.
pub fn pci_bus_id_long(physical: usize) -> String {
    format!("00000000:{physical:02X}:00.0")
}

/// Which physical devices `CUDA_VISIBLE_DEVICES` lets the driver see, in ordinal order, out
/// of `count`, by the rules the real driver follows (as PyTorch's `_parse_visible_devices`
/// documents and emulates them): unset, all of them. Otherwise a comma list, of UUIDs if it
/// starts with `GPU-` (each entry a `GPU-` UUID or an unambiguous prefix of one), else of
/// indices (read like `strtoul`: the leading digits, so `1gpu` is 1). The list stops at the
/// first entry that names no device (no digits, out of range, not `GPU-`, unknown or
/// ambiguous); a device named twice empties it. So an empty value hides every device, and
/// `MIG-` lists (the shim has no MIG devices) too.
pub fn visible(list: Option<&str>, count: usize) -> Vec<usize> {
    let Some(list) = list else {
        return (0..count).collect();
    };
    let by_uuid = list.starts_with("GPU-");
    let mut seen = Vec::new();
    for entry in list.split(',') {
        let entry = entry.trim();
        let found = if by_uuid {
            let matches: Vec<usize> = (0..count)
                .filter(|&p| entry.starts_with("GPU-") && uuid_text(p).starts_with(entry))
                .collect();
            match matches.as_slice() {
                [one] => Some(*one),
                _ => None,
            }
        } else {
            let digits = entry.len() - entry.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            entry[..digits].parse::<usize>().ok().filter(|&i| i < count)
        };
        match found {
            Some(p) if seen.contains(&p) => return Vec::new(),
            Some(p) => seen.push(p),
            None => break,
        }
    }
    seen
}

/// The bus number in a PCI address of the form `[domain:]bus:device.function` or
/// `domain:bus:device` (hex; the forms NVML accepts), if it names one of our devices' slots
/// (device 0, function 0, domain 0).
pub fn parse_pci_bus_id(text: &str) -> Option<usize> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    let (domain, bus, slot) = match parts.as_slice() {
        [domain, bus, slot] => (*domain, *bus, *slot),
        [bus, slot] => ("0", *bus, *slot),
        _ => return None,
    };
    let (device, function) = match slot.split_once('.') {
        Some(pair) => pair,
        None if parts.len() == 3 => (slot, "0"),
        None => return None,
    };
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    if hex(domain)? != 0 || hex(device)? != 0 || hex(function)? != 0 {
        return None;
    }
    usize::try_from(hex(bus)?).ok()
}

/// One past the highest `CUdevice_attribute` value in the headers we follow
/// (`CU_DEVICE_ATTRIBUTE_MAX` of CUDA 13.5). CIG is not supported: its attributes
/// (`D3D12_CIG_SUPPORTED` 135, `VULKAN_CIG_SUPPORTED` 138, `D3D12_CIG_STREAMS_SUPPORTED` 151,
/// `VULKAN_CIG_STREAMS_SUPPORTED` 159) are 0.
const ATTRIBUTE_END: i32 = 162;

/// `cuDeviceGetAttribute` of the device with this physical index (its PCI bus number):
/// plausible values of a Hopper-class device. Attributes without an
/// entry report 0; numbers outside the enum are invalid.
pub fn attribute(attribute: i32, pci_bus: usize) -> Result<i32, CUresult> {
    if !(1..ATTRIBUTE_END).contains(&attribute) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(match attribute {
        1 => 1024,            // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,        // MAX_BLOCK_DIM_X, _Y
        4 => 64,              // MAX_BLOCK_DIM_Z
        5 => i32::MAX,        // MAX_GRID_DIM_X
        6 | 7 => 65535,       // MAX_GRID_DIM_Y, _Z
        8 => 48 << 10,        // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 << 10,        // TOTAL_CONSTANT_MEMORY
        10 => 32,             // WARP_SIZE
        11 => i32::MAX,       // MAX_PITCH
        12 => 65536,          // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,      // CLOCK_RATE (kHz)
        14 => 512,            // TEXTURE_ALIGNMENT
        15 => 1,              // GPU_OVERLAP
        16 => 132,            // MULTIPROCESSOR_COUNT
        19 => 1,              // CAN_MAP_HOST_MEMORY
        31 => 1,              // CONCURRENT_KERNELS
        32 => 1,              // ECC_ENABLED
        33 => pci_bus as i32, // PCI_BUS_ID
        36 => 2_619_000,      // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,           // GLOBAL_MEMORY_BUS_WIDTH
        38 => 50 << 20,       // L2_CACHE_SIZE
        39 => 2048,           // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,              // ASYNC_ENGINE_COUNT
        41 => 1,              // UNIFIED_ADDRESSING
        51 => 32,             // TEXTURE_PITCH_ALIGNMENT
        75 => 9,              // COMPUTE_CAPABILITY_MAJOR
        76 => 0,              // COMPUTE_CAPABILITY_MINOR
        78 => 1,              // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,         // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
        81 => 228 << 10,      // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,          // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,              // MANAGED_MEMORY
        87 => 2,              // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        89 => 1,              // CONCURRENT_MANAGED_ACCESS
        90 | 91 => 1, // COMPUTE_PREEMPTION_SUPPORTED, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        95 => 1,      // COOPERATIVE_LAUNCH
        97 => 227 << 10, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        102 => 1,     // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1,     // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        106 => 32,    // MAX_BLOCKS_PER_MULTIPROCESSOR
        108 => 30 << 20, // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 1 << 27, // MAX_ACCESS_POLICY_WINDOW_SIZE
        111 => 1024,  // RESERVED_SHARED_MEMORY_PER_BLOCK
        115 => 1,     // MEMORY_POOLS_SUPPORTED
        119 => 1,     // MEMPOOL_SUPPORTED_HANDLE_TYPES (POSIX fd)
        _ => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_bus_ids_round_trip() {
        for ordinal in [0, 1, 15] {
            assert_eq!(parse_pci_bus_id(&pci_bus_id(ordinal)), Some(ordinal));
        }
        assert_eq!(parse_pci_bus_id("0A:00.0"), Some(10));
        assert_eq!(parse_pci_bus_id("00000000:03:00.0"), Some(3));
        assert_eq!(parse_pci_bus_id("0000:03:01.0"), None);
        assert_eq!(parse_pci_bus_id("nonsense"), None);
    }

    #[test]
    fn attributes() {
        assert_eq!(attribute(75, 0), Ok(9));
        assert_eq!(attribute(16, 0), Ok(132));
        assert_eq!(attribute(33, 3), Ok(3));
        assert_eq!(attribute(120, 0), Ok(0));
        for cig in [135, 138, 151, 159] {
            assert_eq!(attribute(cig, 0), Ok(0), "no CIG");
        }
        assert_eq!(attribute(0, 0), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(attribute(ATTRIBUTE_END, 0), Err(CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn capacity_goes_by_the_whole_footprint() {
        let mut d = Device::new(100, 0);
        d.pool_cache = 30;
        d.graph_reserved = 20;
        d.context_memory = 10;
        assert_eq!((d.footprint(), d.free()), (60, 40));
        assert_eq!(d.charge(41), Err(CUDA_ERROR_OUT_OF_MEMORY));
        d.charge(40).unwrap();
        assert_eq!((d.in_use, d.live, d.footprint(), d.free()), (40, 1, 100, 0));
        d.uncharge(40);
        assert_eq!((d.in_use, d.live, d.free()), (0, 0, 40));
    }

    #[test]
    fn uuids_differ_per_device() {
        assert_ne!(uuid(0), uuid(1));
        assert_eq!(uuid(2), uuid(2));
        assert_eq!(uuid_text(1), "GPU-63757175-6f74-412d-b368-696d00000001");
        assert_eq!(pci_bus_id(10), "0000:0A:00.0");
        assert_eq!(pci_bus_id_long(10), "00000000:0A:00.0");
        assert_eq!(parse_pci_bus_id("0:a:0"), Some(10));
        assert_eq!(parse_pci_bus_id("a:0"), None);
    }

    #[test]
    fn the_footprint_and_other_processes_bound_what_is_free() {
        let mut d = Device::new(1 << 30, 0);
        d.charge_context(512 << 20).unwrap();
        d.charge(256 << 20).unwrap();
        assert_eq!((d.footprint(), d.free()), (768 << 20, 256 << 20));
        d.other_processes = 200 << 20;
        assert_eq!(d.free(), 56 << 20);
        assert_eq!(d.charge_context(57 << 20), Err(CUDA_ERROR_OUT_OF_MEMORY));
        assert_eq!(d.charge(57 << 20), Err(CUDA_ERROR_OUT_OF_MEMORY));
        // Others may hold more than is left (set from the environment): nothing is free.
        d.other_processes = 1 << 30;
        assert_eq!(d.free(), 0);
        d.other_processes = 0;
        d.uncharge_context(512 << 20);
        assert_eq!(
            (d.footprint(), d.free(), d.in_use),
            (256 << 20, 768 << 20, 256 << 20)
        );
    }

    #[test]
    fn visible_devices_follow_the_drivers_rules() {
        let none = Vec::<usize>::new();
        assert_eq!(visible(None, 3), vec![0, 1, 2]);
        assert_eq!(visible(Some(""), 3), none);
        assert_eq!(visible(Some("2,0"), 3), vec![2, 0]);
        assert_eq!(visible(Some(" 1 , 2"), 3), vec![1, 2]);
        assert_eq!(visible(Some("1gpu,2ampere"), 3), vec![1, 2]);
        // The list stops at the first entry that names no device.
        assert_eq!(visible(Some("1,7,0"), 3), vec![1]);
        assert_eq!(visible(Some("1,x,0"), 3), vec![1]);
        assert_eq!(visible(Some("-1,0"), 3), none);
        assert_eq!(
            visible(Some("1,GPU-63757175-6f74-412d-b368-696d00000000"), 3),
            vec![1]
        );
        // A device named twice: none at all.
        assert_eq!(visible(Some("0,1,0"), 3), none);
        // UUIDs, whole or an unambiguous prefix.
        let one = uuid_text(1);
        assert_eq!(visible(Some(&one), 3), vec![1]);
        assert_eq!(
            visible(
                Some(&format!("{one},GPU-63757175-6f74-412d-b368-696d00000000")),
                3
            ),
            vec![1, 0]
        );
        assert_eq!(visible(Some(&format!("{one},0")), 3), vec![1]);
        assert_eq!(visible(Some(&format!("{one},{one}")), 3), none);
        assert_eq!(visible(Some(&one.to_uppercase()), 3), none);
        assert_eq!(visible(Some("GPU-6375"), 1), vec![0]);
        assert_eq!(visible(Some("GPU-6375,0"), 3), none);
        assert_eq!(visible(Some("GPU-00000000"), 3), none);
        assert_eq!(visible(Some("MIG-0"), 3), none);
    }
}
