//! The shape of a CUDA array (`cuArrayCreate_v2`, `cuArray3DCreate_v2`,
//! `cuMipmappedArrayCreate`), what cuquota reserves for it before the driver lays it out,
//! and the key under which the true size the driver gave that shape is remembered.

use crate::cuda_abi::{
    CuArray3DDescriptor, CuArray3DDescriptorV1, CuArrayDescriptor, CuArrayDescriptorV1,
    CUDA_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_LAYERED, CUDA_ARRAY3D_SPARSE,
};

/// Everything of an array's creation that decides its layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub format: u32,
    pub channels: u32,
    pub flags: u32,
    /// Mipmap levels; 1 for a plain array.
    pub levels: u32,
}

impl ArrayShape {
    /// `cuArrayCreate_v2`: a 1D or 2D array, as a 3D one with no depth and no flags.
    pub fn from_2d(d: &CuArrayDescriptor) -> ArrayShape {
        ArrayShape {
            width: d.width as u64,
            height: d.height as u64,
            depth: 0,
            format: d.format,
            channels: d.num_channels,
            flags: 0,
            levels: 1,
        }
    }

    /// The legacy `cuArrayCreate`.
    pub fn from_2d_v1(d: &CuArrayDescriptorV1) -> ArrayShape {
        ArrayShape::from_2d(&CuArrayDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            format: d.format,
            num_channels: d.num_channels,
        })
    }

    /// The legacy `cuArray3DCreate`.
    pub fn from_3d_v1(d: &CuArray3DDescriptorV1) -> ArrayShape {
        let d = CuArray3DDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            depth: d.depth as usize,
            format: d.format,
            num_channels: d.num_channels,
            flags: d.flags,
        };
        ArrayShape::from_3d(&d, 1)
    }

    /// `cuArray3DCreate_v2` (`levels` 1) or `cuMipmappedArrayCreate`.
    pub fn from_3d(d: &CuArray3DDescriptor, levels: u32) -> ArrayShape {
        ArrayShape {
            width: d.width as u64,
            height: d.height as u64,
            depth: d.depth as u64,
            format: d.format,
            channels: d.num_channels,
            flags: d.flags,
            levels,
        }
    }

    /// Whether the array has memory of its own. Sparse and deferred-mapping arrays get theirs
    /// from `cuMemCreate` allocations mapped into them, which are charged there.
    pub fn is_backed(&self) -> bool {
        self.flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING) == 0
    }

    /// The same shape as a deferred-mapping array: one the driver answers the memory
    /// requirements of.
    pub fn deferred(&self) -> CuArray3DDescriptor {
        CuArray3DDescriptor {
            width: self.width as usize,
            height: self.height as usize,
            depth: self.depth as usize,
            format: self.format,
            num_channels: self.channels,
            flags: self.flags | CUDA_ARRAY3D_DEFERRED_MAPPING,
        }
    }

    /// What the array holds, unpadded: elements × element size, over every mipmap level (0
    /// for a format whose element size is not a whole number of bytes: block-compressed and
    /// video formats). The driver's layout takes at least this much.
    pub fn estimate(&self) -> u64 {
        let Some(element) = element_bytes(self.format, self.channels) else {
            return 0;
        };
        // Layers and cube faces (the depth of a layered or cubemap array) do not shrink.
        let layered = self.flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
        let shrink = |n: u64, level: u32| if n == 0 { 0 } else { (n >> level).max(1) };
        (0..self.levels.min(64)).fold(0u64, |sum, level| {
            let depth = if layered {
                self.depth
            } else {
                shrink(self.depth, level)
            };
            let elements = shrink(self.width, level)
                .saturating_mul(shrink(self.height, level).max(1))
                .saturating_mul(depth.max(1));
            sum.saturating_add(elements.saturating_mul(element))
        })
    }
}

/// Bytes of one element of a `CUarray_format` with `channels` channels, where whole.
fn element_bytes(format: u32, channels: u32) -> Option<u64> {
    let per_channel = match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        // The normalized formats name their channels: the element size is the format's.
        0xc0 | 0xc6 => return Some(1),
        0xc1 | 0xc3 | 0xc7 | 0xc9 => return Some(2),
        0xc2 | 0xc4 | 0xc8 | 0xca | 0x50 => return Some(4),
        0xc5 | 0xcb => return Some(8),
        _ => return None,
    };
    Some(per_channel * u64::from(channels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(w: u64, h: u64, d: u64, format: u32, channels: u32, flags: u32) -> ArrayShape {
        ArrayShape {
            width: w,
            height: h,
            depth: d,
            format,
            channels,
            flags,
            levels: 1,
        }
    }

    #[test]
    fn estimates_count_elements() {
        assert_eq!(shape(1000, 1000, 0, 0x01, 1, 0).estimate(), 1_000_000);
        assert_eq!(shape(100, 0, 0, 0x20, 4, 0).estimate(), 1600, "1D float4");
        assert_eq!(shape(64, 64, 16, 0x10, 2, 0).estimate(), 64 * 64 * 16 * 4);
        assert_eq!(
            shape(64, 64, 6, 0xc2, 4, CUDA_ARRAY3D_CUBEMAP).estimate(),
            64 * 64 * 6 * 4
        );
        assert_eq!(shape(64, 64, 0, 0x91, 4, 0).estimate(), 0, "BC1: unknown");
    }

    #[test]
    fn mip_levels_are_summed() {
        let mut s = shape(256, 256, 0, 0x01, 4, 0);
        s.levels = 9;
        let levels: u64 = (0..9).map(|l| (256u64 >> l).pow(2) * 4).sum();
        assert_eq!(s.estimate(), levels);
        // a 3D mipmap shrinks in depth; a layered one keeps its layers
        let mut s = shape(8, 8, 8, 0x01, 1, 0);
        s.levels = 4;
        assert_eq!(s.estimate(), 512 + 64 + 8 + 1);
        s.flags = CUDA_ARRAY3D_LAYERED;
        assert_eq!(s.estimate(), (64 + 16 + 4 + 1) * 8);
    }

    #[test]
    fn sparse_and_deferred_arrays_are_not_backed() {
        assert!(shape(1, 1, 0, 1, 1, 0).is_backed());
        assert!(shape(1, 1, 0, 1, 1, CUDA_ARRAY3D_LAYERED).is_backed());
        assert!(!shape(1, 1, 0, 1, 1, CUDA_ARRAY3D_SPARSE).is_backed());
        assert!(!shape(1, 1, 0, 1, 1, CUDA_ARRAY3D_DEFERRED_MAPPING).is_backed());
        let d = shape(4, 5, 6, 0x20, 2, CUDA_ARRAY3D_LAYERED).deferred();
        assert_eq!((d.width, d.height, d.depth, d.num_channels), (4, 5, 6, 2));
        assert_eq!(
            d.flags,
            CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_DEFERRED_MAPPING
        );
    }
}
