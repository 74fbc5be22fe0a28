//! Devices: enumeration, properties, and each device's memory pools.

use std::ffi::{c_char, c_int, c_uint};

use super::{h, handle_ptr};
use crate::abi::*;
use crate::ffi::{self, Out};
use crate::{devices, pools, state};

exports! {
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) as cuDeviceGet since 2000 {
        let out = Out::new(device)?;
        state::device_index(ordinal)?;
        out.write(ordinal);
        Ok(())
    }

    fn cuDeviceGetCount(count: *mut c_int) as cuDeviceGetCount since 2000 {
        Out::new(count)?.write(state::lock().devices.len() as c_int);
        Ok(())
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) as cuDeviceGetName since 2000 {
        let physical = state::physical_index(dev)?;
        ffi::write_c_string(name, len, &devices::name(physical))
    }

    fn cuDeviceGetUuid(uuid: *mut Uuid, dev: CUdevice) as cuDeviceGetUuid since 9020 {
        let out = Out::new(uuid)?;
        let bytes = devices::uuid(state::physical_index(dev)?);
        out.write(Uuid { bytes });
        Ok(())
    }

    fn cuDeviceGetUuid_v2(uuid: *mut Uuid, dev: CUdevice) as cuDeviceGetUuid since 11040 {
        let out = Out::new(uuid)?;
        let bytes = devices::uuid(state::physical_index(dev)?);
        out.write(Uuid { bytes });
        Ok(())
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) as cuDeviceTotalMem since 3020 {
        let out = Out::new(bytes)?;
        out.write(state::lock().device(dev)?.total as usize);
        Ok(())
    }

    /// Legacy: the total clamped to 32 bits.
    fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) as cuDeviceTotalMem since 2000 {
        let out = Out::new(bytes)?;
        let total = state::lock().device(dev)?.total;
        out.write(total.min(u32::MAX as u64) as c_uint);
        Ok(())
    }

    fn cuDeviceGetAttribute(
        value: *mut c_int,
        attribute: c_int,
        dev: CUdevice,
    ) as cuDeviceGetAttribute since 2000 {
        let out = Out::new(value)?;
        out.write(devices::attribute(attribute, state::physical_index(dev)?)?);
        Ok(())
    }

    fn cuDeviceComputeCapability(
        major: *mut c_int,
        minor: *mut c_int,
        dev: CUdevice,
    ) as cuDeviceComputeCapability since 2000 {
        let (major, minor) = (Out::new(major)?, Out::new(minor)?);
        let physical = state::physical_index(dev)?;
        major.write(devices::attribute(75, physical)?);
        minor.write(devices::attribute(76, physical)?);
        Ok(())
    }

    fn cuDeviceGetPCIBusId(
        bus_id: *mut c_char,
        len: c_int,
        dev: CUdevice,
    ) as cuDeviceGetPCIBusId since 4010 {
        let physical = state::physical_index(dev)?;
        ffi::write_c_string(bus_id, len, &devices::pci_bus_id(physical))
    }

    fn cuDeviceGetByPCIBusId(
        dev: *mut CUdevice,
        bus_id: *const c_char,
    ) as cuDeviceGetByPCIBusId since 4010 {
        let out = Out::new(dev)?;
        let physical = devices::parse_pci_bus_id(ffi::c_str(bus_id)?);
        let ordinal = physical
            .and_then(|p| state::ordinal_of_physical(&state::lock(), p))
            .ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        out.write(ordinal as c_int);
        Ok(())
    }

    /// Peer access is never possible between simulated devices.
    fn cuDeviceCanAccessPeer(
        can_access: *mut c_int,
        dev: CUdevice,
        peer: CUdevice,
    ) as cuDeviceCanAccessPeer since 4000 {
        let out = Out::new(can_access)?;
        state::device_index(dev)?;
        state::device_index(peer)?;
        out.write(0);
        Ok(())
    }

    fn cuDeviceGetDefaultMemPool(
        pool: *mut Handle,
        dev: CUdevice,
    ) as cuDeviceGetDefaultMemPool since 11020 {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::default_pool(dev)?));
        Ok(())
    }

    fn cuDeviceGetMemPool(pool: *mut Handle, dev: CUdevice) as cuDeviceGetMemPool since 11020 {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::current_pool(dev)?));
        Ok(())
    }

    fn cuDeviceSetMemPool(dev: CUdevice, pool: Handle) as cuDeviceSetMemPool since 11020 {
        pools::set_current_pool(dev, h(pool))
    }
}
