//! `cuPointerGetAttribute(s)` and `cuMemAdvise`: what the shim knows about an address.
//! Device pointers are host addresses, so a device or host pointer's device and host
//! aliases are the address itself. Attributes the shim does not track (the allocating
//! context, P2P tokens, buffer ids, managed-ness, ...) are `CUDA_ERROR_NOT_SUPPORTED`.

use std::ffi::c_void;

use crate::abi::*;
use crate::host_register;
use crate::state::{self, State};
use crate::vmm;

const MEMORY_TYPE: u32 = 2;
const DEVICE_POINTER: u32 = 3;
const HOST_POINTER: u32 = 4;
const DEVICE_ORDINAL: u32 = 9;
const RANGE_START_ADDR: u32 = 11;
const RANGE_SIZE: u32 = 12;

const MEMORYTYPE_HOST: u32 = 1;
const MEMORYTYPE_DEVICE: u32 = 2;

/// The memory an address lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub base: u64,
    pub size: u64,
    pub memory_type: u32,
    /// The device it was allocated on, where the shim knows it.
    pub device: Option<usize>,
}

/// What an attribute reads back as, written in its documented C type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    U32(u32),
    I32(i32),
    Address(u64),
    Size(usize),
}

impl Value {
    /// Writes the value through the caller's `data`.
    ///
    /// # Safety
    /// `data` must be valid for a write of the attribute's documented type.
    pub unsafe fn write(self, data: *mut c_void) -> Result<(), CUresult> {
        // SAFETY: by this function's contract, for the type each attribute documents.
        unsafe {
            match self {
                Value::U32(v) => crate::ffi::Out::new(data.cast::<u32>())?.write(v),
                Value::I32(v) => crate::ffi::Out::new(data.cast::<i32>())?.write(v),
                Value::Address(v) => crate::ffi::Out::new(data.cast::<u64>())?.write(v),
                Value::Size(v) => crate::ffi::Out::new(data.cast::<usize>())?.write(v),
            }
        }
        Ok(())
    }
}

/// The allocation, host allocation, registration or mapping containing `address`.
pub fn find(state: &State, address: u64) -> Option<Found> {
    if let Some((&base, a)) = state.allocations.range(..=address).next_back() {
        if address < base + a.size {
            return Some(Found {
                base,
                size: a.size,
                // A host pool's allocation is host memory (no device).
                memory_type: if a.device.is_some() {
                    MEMORYTYPE_DEVICE
                } else {
                    MEMORYTYPE_HOST
                },
                device: a.device,
            });
        }
    }
    let host = |base: usize, size: usize| Found {
        base: base as u64,
        size: size as u64,
        memory_type: MEMORYTYPE_HOST,
        device: None,
    };
    let at = address as usize;
    if let Some((&base, h)) = state.host_allocations.range(..=at).next_back() {
        if at < base + h.size {
            return Some(host(base, h.size));
        }
    }
    if let Some((base, r)) = host_register::containing(state, at, 1) {
        return Some(host(base, r.size));
    }
    vmm::mapping_range(state, at).map(|(base, size)| Found {
        base: base as u64,
        size: size as u64,
        memory_type: MEMORYTYPE_DEVICE,
        device: None,
    })
}

/// One attribute of `address`, which lies in `found`.
pub fn attribute(found: Found, attribute: u32, address: u64) -> Result<Value, CUresult> {
    Ok(match attribute {
        MEMORY_TYPE => Value::U32(found.memory_type),
        DEVICE_POINTER => Value::Address(address),
        HOST_POINTER if found.memory_type == MEMORYTYPE_HOST => Value::Address(address),
        // Device memory has no host alias.
        HOST_POINTER => return Err(CUDA_ERROR_INVALID_VALUE),
        DEVICE_ORDINAL => {
            let device = found.device.ok_or(CUDA_ERROR_NOT_SUPPORTED)?;
            Value::I32(device as i32)
        }
        RANGE_START_ADDR => Value::Address(found.base),
        RANGE_SIZE => Value::Size(found.size as usize),
        1..=22 => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// What `cuPointerGetAttributes` reports for an address the driver does not know:
/// documented as "default NULL values" (and -2 for the device ordinal).
pub fn unknown_attribute(attribute: u32) -> Result<Value, CUresult> {
    Ok(match attribute {
        MEMORY_TYPE => Value::U32(0),
        DEVICE_POINTER | HOST_POINTER | RANGE_START_ADDR => Value::Address(0),
        RANGE_SIZE => Value::Size(0),
        DEVICE_ORDINAL => Value::I32(-2),
        1..=22 => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `cuPointerGetAttribute`: an unknown address is `CUDA_ERROR_INVALID_VALUE`.
pub fn get(attr: u32, address: u64) -> Result<Value, CUresult> {
    let found = find(&state::lock(), address).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    attribute(found, attr, address)
}

/// `cuPointerGetAttributes`: never an error for an address the driver does not know.
pub fn get_many(attrs: &[u32], address: u64) -> Result<Vec<Value>, CUresult> {
    let found = find(&state::lock(), address);
    attrs
        .iter()
        .map(|&a| match found {
            Some(found) => attribute(found, a, address),
            None => unknown_attribute(a),
        })
        .collect()
}

/// `cuMemAdvise`: advice is only a hint for where pages should live, and every page lives
/// in host memory here, so it is accepted for any range of known memory.
pub fn advise(address: u64, count: usize) -> Result<(), CUresult> {
    if count == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let state = state::lock();
    let found = find(&state, address).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let end = address.checked_add(count as u64);
    if end.is_none_or(|end| end > found.base + found.size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_of_device_and_host_memory() {
        let device = Found {
            base: 0x1000,
            size: 256,
            memory_type: MEMORYTYPE_DEVICE,
            device: Some(1),
        };
        assert_eq!(attribute(device, MEMORY_TYPE, 0x1010), Ok(Value::U32(2)));
        assert_eq!(attribute(device, DEVICE_ORDINAL, 0x1010), Ok(Value::I32(1)));
        assert_eq!(
            attribute(device, RANGE_START_ADDR, 0x1010),
            Ok(Value::Address(0x1000))
        );
        assert_eq!(attribute(device, RANGE_SIZE, 0x1010), Ok(Value::Size(256)));
        assert_eq!(
            attribute(device, HOST_POINTER, 0x1010),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(attribute(device, 1, 0x1010), Err(CUDA_ERROR_NOT_SUPPORTED));
        assert_eq!(attribute(device, 99, 0x1010), Err(CUDA_ERROR_INVALID_VALUE));
        let host = Found {
            memory_type: MEMORYTYPE_HOST,
            device: None,
            ..device
        };
        assert_eq!(
            attribute(host, HOST_POINTER, 0x1010),
            Ok(Value::Address(0x1010))
        );
        assert_eq!(
            attribute(host, DEVICE_ORDINAL, 0x1010),
            Err(CUDA_ERROR_NOT_SUPPORTED)
        );
        assert_eq!(unknown_attribute(DEVICE_ORDINAL), Ok(Value::I32(-2)));
    }
}
