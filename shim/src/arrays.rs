//! CUDA arrays: `cuArrayCreate`, `cuArray3DCreate`, `cuMipmappedArrayCreate` and their
//! levels. An array is opaque memory laid out by the driver for textures and surfaces; the
//! shim exports no copies to or from arrays, so it keeps no contents, only each array's
//! descriptor and the device memory its layout takes.
//!
//! The layout is one a real driver might use, so that what an array takes differs from its
//! element count: each row is padded to the texture alignment (512 bytes), and the whole
//! array (a mipmapped array: all its levels together) is rounded up to 64 KiB pages. That
//! size is charged to the current context's device from creation to destruction; sparse and
//! deferred-mapping arrays take none (their memory is mapped in from `cuMemCreate`), and
//! are the only ones `cu*GetMemoryRequirements` answers for, as documented.

use std::collections::BTreeMap;

use crate::abi::*;
use crate::context;
use crate::state::{self, State};

/// Row pitch alignment (the `TEXTURE_ALIGNMENT` the devices report).
const ROW_ALIGNMENT: u64 = 512;
/// Arrays take whole pages of this size; also the alignment their mappings need.
pub const PAGE: u64 = 64 << 10;

/// Bytes per channel of a `CUarray_format`; the shim simulates the plain formats only.
fn channel_bytes(format: u32) -> Result<u64, CUresult> {
    match format {
        0x01 | 0x08 => Ok(1),        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => Ok(2), // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => Ok(4), // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        // The packed, block-compressed and video formats have layouts of their own.
        f if f > 0x20 && f < 0x100 => Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Checks a 3D descriptor against `cuArray3DCreate`'s documented rules.
fn check(desc: &Array3DDescriptor) -> Result<(), CUresult> {
    channel_bytes(desc.format)?;
    let (w, h, d, flags) = (desc.width, desc.height, desc.depth, desc.flags);
    let ok = matches!(desc.num_channels, 1 | 2 | 4)
        && flags & !ARRAY3D_ALL_FLAGS == 0
        && w > 0
        // A 1D array has no height, so no depth either unless it is layered.
        && (h > 0 || d == 0 || flags & ARRAY3D_LAYERED != 0)
        && (flags & ARRAY3D_CUBEMAP == 0
            || (w == h
                && if flags & ARRAY3D_LAYERED != 0 {
                    d > 0 && d % 6 == 0
                } else {
                    d == 6
                }));
    if ok {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

/// The dimensions of mipmap level `level` (level 0 is the array itself); layers and cube
/// faces (the depth of a layered or cubemap array) do not shrink.
fn level_dims(desc: &Array3DDescriptor, level: u32) -> (usize, usize, usize) {
    let shrink = |n: usize| if n == 0 { 0 } else { (n >> level).max(1) };
    let layered = desc.flags & (ARRAY3D_LAYERED | ARRAY3D_CUBEMAP) != 0;
    let depth = if layered {
        desc.depth
    } else {
        shrink(desc.depth)
    };
    (shrink(desc.width), shrink(desc.height), depth)
}

/// Bytes of one level: padded rows × rows × slices.
fn level_bytes(desc: &Array3DDescriptor, level: u32) -> Option<u64> {
    let (w, h, d) = level_dims(desc, level);
    let element = channel_bytes(desc.format).ok()? * u64::from(desc.num_channels);
    let row = (w as u64)
        .checked_mul(element)?
        .checked_next_multiple_of(ROW_ALIGNMENT)?;
    row.checked_mul(h.max(1) as u64)?
        .checked_mul(d.max(1) as u64)
}

/// What an array of `levels` levels takes on the device.
pub fn layout_bytes(desc: &Array3DDescriptor, levels: u32) -> Result<u64, CUresult> {
    (0..levels)
        .try_fold(0u64, |sum, level| {
            sum.checked_add(level_bytes(desc, level)?)
        })
        .and_then(|sum| sum.checked_next_multiple_of(PAGE))
        .ok_or(CUDA_ERROR_OUT_OF_MEMORY)
}

/// The most mipmap levels an array of these dimensions can have.
fn max_levels(desc: &Array3DDescriptor) -> u32 {
    let largest = desc.width.max(desc.height).max(desc.depth).max(1);
    usize::BITS - largest.leading_zeros()
}

/// Whether the array's memory comes from elsewhere (`cuMemMapArrayAsync`).
fn is_unbacked(desc: &Array3DDescriptor) -> bool {
    desc.flags & (ARRAY3D_SPARSE | ARRAY3D_DEFERRED_MAPPING) != 0
}

struct Array {
    desc: Array3DDescriptor,
    device: usize,
    /// The context it was made in: it goes when that context is destroyed.
    context: usize,
    /// Device bytes charged for it (0 if unbacked, or a level of a mipmapped array).
    charged: u64,
    /// The mipmapped array it is a level of: it goes with that one, not by itself.
    parent: Option<usize>,
}

struct Mipmapped {
    desc: Array3DDescriptor,
    device: usize,
    context: usize,
    levels: u32,
    charged: u64,
    /// The handles `cuMipmappedArrayGetLevel` gave out, by level.
    level_arrays: BTreeMap<u32, usize>,
}

#[derive(Default)]
pub struct Arrays {
    arrays: BTreeMap<usize, Array>,
    mipmapped: BTreeMap<usize, Mipmapped>,
}

impl Arrays {
    pub const fn new() -> Self {
        Arrays {
            arrays: BTreeMap::new(),
            mipmapped: BTreeMap::new(),
        }
    }
}

/// Where a new array lives and what it is charged.
struct Owner {
    device: usize,
    context: usize,
    charged: u64,
}

/// Charges the current context's device for a new array.
fn charge_new(state: &mut State, desc: &Array3DDescriptor, levels: u32) -> Result<Owner, CUresult> {
    let (context, device) = context::current(state).map(|(h, c)| (h, c.device))?;
    check(desc)?;
    let bytes = layout_bytes(desc, levels)?;
    let charged = if is_unbacked(desc) { 0 } else { bytes };
    if charged > 0 {
        state.devices[device].charge(charged)?;
    }
    Ok(Owner {
        device,
        context,
        charged,
    })
}

/// `cuArrayCreate_v2`: a 1D or 2D array, as `cuArray3DCreate` with no depth and no flags.
pub fn create_2d(desc: &ArrayDescriptor) -> Result<usize, CUresult> {
    create(&Array3DDescriptor {
        width: desc.width,
        height: desc.height,
        depth: 0,
        format: desc.format,
        num_channels: desc.num_channels,
        flags: 0,
    })
}

/// `cuArray3DCreate_v2`.
pub fn create(desc: &Array3DDescriptor) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let owner = charge_new(&mut state, desc, 1)?;
    let handle = state::new_handle();
    let array = Array {
        desc: *desc,
        device: owner.device,
        context: owner.context,
        charged: owner.charged,
        parent: None,
    };
    state.arrays.arrays.insert(handle, array);
    Ok(handle)
}

/// `cuArrayDestroy`. A level of a mipmapped array is destroyed with it, not by itself.
pub fn destroy(handle: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    match state.arrays.arrays.get(&handle) {
        Some(a) if a.parent.is_none() => {}
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    }
    let array = state.arrays.arrays.remove(&handle).expect("checked above");
    if array.charged > 0 {
        state.devices[array.device].uncharge(array.charged);
    }
    Ok(())
}

/// `cuArrayGetDescriptor_v2`: the 2D view (`CUDA_ERROR_INVALID_VALUE` for a 3D array).
pub fn descriptor_2d(handle: usize) -> Result<ArrayDescriptor, CUresult> {
    let d = descriptor(handle)?;
    if d.depth != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(ArrayDescriptor {
        width: d.width,
        height: d.height,
        format: d.format,
        num_channels: d.num_channels,
    })
}

/// `cuArray3DGetDescriptor_v2`.
pub fn descriptor(handle: usize) -> Result<Array3DDescriptor, CUresult> {
    let state = state::lock();
    let array = state
        .arrays
        .arrays
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    Ok(array.desc)
}

fn requirements(
    desc: &Array3DDescriptor,
    levels: u32,
) -> Result<ArrayMemoryRequirements, CUresult> {
    Ok(ArrayMemoryRequirements {
        size: layout_bytes(desc, levels)? as usize,
        alignment: PAGE as usize,
        reserved: [0; 4],
    })
}

/// `cuArrayGetMemoryRequirements`: only for deferred-mapping arrays, as documented.
pub fn array_requirements(
    handle: usize,
    device: CUdevice,
) -> Result<ArrayMemoryRequirements, CUresult> {
    let state = state::lock();
    state.device(device)?;
    let array = state
        .arrays
        .arrays
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if array.desc.flags & ARRAY3D_DEFERRED_MAPPING == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    requirements(&array.desc, 1)
}

/// A resource `cuMemMapArrayAsync` may map into: a sparse or deferred-mapping array or
/// mipmapped array ("must have been allocated using ... ::CUDA_ARRAY3D_SPARSE or
/// ::CUDA_ARRAY3D_DEFERRED_MAPPING"). Returns (its device, whether it is deferred-mapping:
/// then "the contents of ::CUarrayMapInfo::subresource will be ignored").
pub fn mappable(
    state: &State,
    resource_type: i32,
    handle: usize,
) -> Result<(usize, bool), CUresult> {
    let (desc, device) = match resource_type {
        RESOURCE_TYPE_ARRAY => {
            let array = state
                .arrays
                .arrays
                .get(&handle)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            // A level of a mipmapped array: "::CUDA_ERROR_INVALID_VALUE will be returned".
            if array.parent.is_some() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            (array.desc, array.device)
        }
        RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            let m = (state.arrays.mipmapped.get(&handle)).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            (m.desc, m.device)
        }
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    if !is_unbacked(&desc) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok((device, desc.flags & ARRAY3D_DEFERRED_MAPPING != 0))
}

/// `cuMipmappedArrayCreate`.
pub fn create_mipmapped(desc: &Array3DDescriptor, levels: u32) -> Result<usize, CUresult> {
    if levels == 0 || levels > max_levels(desc) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let owner = charge_new(&mut state, desc, levels)?;
    let handle = state::new_handle();
    let mipmapped = Mipmapped {
        desc: *desc,
        device: owner.device,
        context: owner.context,
        levels,
        charged: owner.charged,
        level_arrays: BTreeMap::new(),
    };
    state.arrays.mipmapped.insert(handle, mipmapped);
    Ok(handle)
}

/// `cuMipmappedArrayGetLevel`: the array of one level, the same handle each time.
pub fn level(handle: usize, level: u32) -> Result<usize, CUresult> {
    let mut state = state::lock();
    let mipmapped = state
        .arrays
        .mipmapped
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if level >= mipmapped.levels {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if let Some(&array) = mipmapped.level_arrays.get(&level) {
        return Ok(array);
    }
    let (width, height, depth) = level_dims(&mipmapped.desc, level);
    let array = Array {
        desc: Array3DDescriptor {
            width,
            height,
            depth,
            ..mipmapped.desc
        },
        device: mipmapped.device,
        context: mipmapped.context,
        charged: 0,
        parent: Some(handle),
    };
    let array_handle = state::new_handle();
    state.arrays.arrays.insert(array_handle, array);
    let mipmapped = state
        .arrays
        .mipmapped
        .get_mut(&handle)
        .expect("found above");
    mipmapped.level_arrays.insert(level, array_handle);
    Ok(array_handle)
}

/// `cuMipmappedArrayDestroy`: with its levels.
pub fn destroy_mipmapped(handle: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let mipmapped = state
        .arrays
        .mipmapped
        .remove(&handle)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    for array in mipmapped.level_arrays.values() {
        state.arrays.arrays.remove(array);
    }
    if mipmapped.charged > 0 {
        state.devices[mipmapped.device].uncharge(mipmapped.charged);
    }
    Ok(())
}

/// `cuMipmappedArrayGetMemoryRequirements`: only for deferred-mapping ones, as documented.
pub fn mipmapped_requirements(
    handle: usize,
    device: CUdevice,
) -> Result<ArrayMemoryRequirements, CUresult> {
    let state = state::lock();
    state.device(device)?;
    let mipmapped = state
        .arrays
        .mipmapped
        .get(&handle)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if mipmapped.desc.flags & ARRAY3D_DEFERRED_MAPPING == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    requirements(&mipmapped.desc, mipmapped.levels)
}

/// A context was destroyed (or a primary context reset): its arrays go with it, as every
/// allocation of a context does.
pub fn context_ended(state: &mut State, context: usize) {
    let arrays = &mut state.arrays;
    let mut freed: Vec<(usize, u64)> = Vec::new();
    arrays.arrays.retain(|_, a| {
        let stays = a.context != context;
        if !stays && a.charged > 0 {
            freed.push((a.device, a.charged));
        }
        stays
    });
    arrays.mipmapped.retain(|_, m| {
        let stays = m.context != context;
        if !stays && m.charged > 0 {
            freed.push((m.device, m.charged));
        }
        stays
    });
    for (device, bytes) in freed {
        state.devices[device].uncharge(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(
        width: usize,
        height: usize,
        depth: usize,
        channels: u32,
        flags: u32,
    ) -> Array3DDescriptor {
        Array3DDescriptor {
            width,
            height,
            depth,
            format: 0x01,
            num_channels: channels,
            flags,
        }
    }

    #[test]
    fn rows_are_padded_and_arrays_take_whole_pages() {
        // 1000 bytes a row → 1024; 1000 rows → 1 024 000 → 16 pages of 64 KiB.
        assert_eq!(layout_bytes(&desc(1000, 1000, 0, 1, 0), 1), Ok(16 * PAGE));
        // 1040 → 1536 a row: 1 536 000 → 24 pages.
        assert_eq!(layout_bytes(&desc(1040, 1000, 0, 1, 0), 1), Ok(24 * PAGE));
        // A 1D array is one row; a float4 element is 16 bytes.
        let float4 = Array3DDescriptor {
            format: 0x20,
            ..desc(100, 0, 0, 4, 0)
        };
        assert_eq!(layout_bytes(&float4, 1), Ok(PAGE));
        // 3D: rows of 256 RGBA8 elements (1024 bytes) × 256 rows × 16 slices.
        assert_eq!(
            layout_bytes(&desc(256, 256, 16, 4, 0), 1),
            Ok(1024 * 256 * 16)
        );
    }

    #[test]
    fn mip_levels_shrink_but_layers_do_not() {
        // 256² RGBA8: rows of 1024, 512, 512 (256 padded), 512 ... bytes.
        let d = desc(256, 256, 0, 4, 0);
        let sum: u64 = (0..9).map(|l| level_bytes(&d, l).unwrap()).sum();
        assert_eq!(level_bytes(&d, 0), Some(1024 * 256));
        assert_eq!(level_bytes(&d, 1), Some(512 * 128));
        assert_eq!(level_bytes(&d, 8), Some(512));
        assert_eq!(layout_bytes(&d, 9), Ok(sum.next_multiple_of(PAGE)));
        assert_eq!(max_levels(&d), 9);
        let layered = desc(64, 64, 10, 1, ARRAY3D_LAYERED);
        assert_eq!(level_dims(&layered, 3), (8, 8, 10));
        assert_eq!(level_dims(&desc(64, 64, 32, 1, 0), 3), (8, 8, 4));
    }

    #[test]
    fn a_context_takes_its_arrays_with_it() {
        let mut state = State {
            devices: vec![crate::devices::Device::new(1 << 30, 0)],
            contexts: Default::default(),
            streams: Default::default(),
            events: Default::default(),
            allocations: Default::default(),
            host_allocations: Default::default(),
            pools: Default::default(),
            vmm: crate::vmm::Vmm::new(),
            arrays: Arrays::new(),
            registered: Default::default(),
            limits: Default::default(),
            graphs: Default::default(),
            greens: Default::default(),
            machine: crate::devices::Machine::new(),
        };
        let d = desc(1000, 1000, 0, 1, 0);
        for (handle, context) in [(1, 10), (2, 20), (3, 10)] {
            state.devices[0].charge(PAGE).unwrap();
            let array = Array {
                desc: d,
                device: 0,
                context,
                charged: PAGE,
                parent: None,
            };
            state.arrays.arrays.insert(handle, array);
        }
        state.devices[0].charge(2 * PAGE).unwrap();
        let mipmapped = Mipmapped {
            desc: d,
            device: 0,
            context: 10,
            levels: 2,
            charged: 2 * PAGE,
            level_arrays: BTreeMap::new(),
        };
        state.arrays.mipmapped.insert(4, mipmapped);
        context_ended(&mut state, 10);
        assert_eq!((state.devices[0].in_use, state.devices[0].live), (PAGE, 1));
        assert_eq!(state.arrays.arrays.keys().collect::<Vec<_>>(), [&2]);
        assert!(state.arrays.mipmapped.is_empty());
    }

    #[test]
    fn descriptors_are_checked() {
        assert_eq!(check(&desc(16, 16, 0, 4, 0)), Ok(()));
        assert_eq!(check(&desc(16, 16, 0, 3, 0)), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(check(&desc(0, 16, 0, 1, 0)), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(check(&desc(16, 0, 4, 1, 0)), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(check(&desc(16, 0, 4, 1, ARRAY3D_LAYERED)), Ok(()));
        assert_eq!(check(&desc(16, 16, 6, 1, ARRAY3D_CUBEMAP)), Ok(()));
        assert_eq!(
            check(&desc(16, 8, 6, 1, ARRAY3D_CUBEMAP)),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            check(&desc(16, 16, 12, 1, ARRAY3D_CUBEMAP | ARRAY3D_LAYERED)),
            Ok(())
        );
        assert_eq!(
            check(&desc(16, 16, 0, 1, 0x200)),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        let nv12 = Array3DDescriptor {
            format: 0xb0,
            ..desc(16, 16, 0, 1, 0)
        };
        assert_eq!(check(&nv12), Err(CUDA_ERROR_NOT_SUPPORTED));
    }
}
