//! The simulated devices: their memory accounting and the properties they report.

use crate::abi::*;

/// Granularity of the virtual memory management API (`cuMemGetAllocationGranularity`).
pub const VMM_GRANULARITY: usize = 2 << 20;

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
    /// Bytes the device's context(s) take (charged by `context`; 0 unless configured).
    pub context_memory: u64,
    /// Bytes this device's memory pools reserve beyond their live allocations (see `pools`).
    pub pool_cache: u64,
    /// The device's graph memory pool reservation (see `graphs`).
    pub graph_reserved: u64,
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
        }
    }

    /// Everything the process holds on the device: live allocations, pool reservations
    /// beyond them, graph memory and context memory. Capacity checks and `cuMemGetInfo`
    /// go by this; `in_use` (and `cuShimStats`) count live allocations only.
    pub fn footprint(&self) -> u64 {
        self.in_use + self.pool_cache + self.graph_reserved + self.context_memory
    }

    pub fn free(&self) -> u64 {
        self.total.saturating_sub(self.footprint())
    }

    /// Whether `bytes` more fit on the device.
    pub fn fits(&self, bytes: u64) -> bool {
        bytes <= self.free()
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

/// What `cuDeviceGetName` reports. The wording predates the name "the shim" and stays:
/// programs and tests may compare it.
pub fn name(ordinal: usize) -> String {
    format!("cuquota stand-in GPU {ordinal}")
}

/// A fixed UUID per ordinal, shaped like a version-4 UUID.
pub fn uuid(ordinal: usize) -> [u8; 16] {
    let mut bytes = *b"cuquota-shim-gpu";
    bytes[6] = 0x40 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    bytes[12..].copy_from_slice(&(ordinal as u32).to_be_bytes());
    bytes
}

/// The PCI address `domain:bus:device.function`; the bus number is the ordinal.
pub fn pci_bus_id(ordinal: usize) -> String {
    format!("0000:{ordinal:02x}:00.0")
}

/// The bus number in a PCI address of the form `[domain:]bus:device.function` (hex), if it
/// names one of our devices' slots (device 0, function 0, domain 0).
pub fn parse_pci_bus_id(text: &str) -> Option<usize> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    let (domain, bus, slot) = match parts.as_slice() {
        [domain, bus, slot] => (*domain, *bus, *slot),
        [bus, slot] => ("0", *bus, *slot),
        _ => return None,
    };
    let (device, function) = slot.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    if hex(domain)? != 0 || hex(device)? != 0 || hex(function)? != 0 {
        return None;
    }
    usize::try_from(hex(bus)?).ok()
}

/// One past the highest `CUdevice_attribute` value in the headers we follow.
const ATTRIBUTE_END: i32 = 144;

/// `cuDeviceGetAttribute`: plausible values of a Hopper-class device. Attributes without an
/// entry report 0; numbers outside the enum are invalid.
pub fn attribute(attribute: i32, ordinal: usize) -> Result<i32, CUresult> {
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
        33 => ordinal as i32, // PCI_BUS_ID
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
        assert_eq!(attribute(0, 0), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(attribute(ATTRIBUTE_END, 0), Err(CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn uuids_differ_per_device() {
        assert_ne!(uuid(0), uuid(1));
        assert_eq!(uuid(2), uuid(2));
    }
}
