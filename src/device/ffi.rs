use libc::c_int;

use super::gpurt_device_properties_t;
use crate::boundary::{self, write_sized, Out};
use crate::error::{gpurt_status_t, Error, Status};
use crate::handle::{Handle, Kind};

/// A device handle; the same for every call with the same ordinal.
pub struct gpurt_device_s {
    _opaque: [u8; 0],
}
pub type gpurt_device_t = *mut gpurt_device_s;

/// Loads the CUDA driver and initialises it. Optional: every call initialises on
/// demand. Returns `GPURT_ERROR_NO_DRIVER` or `GPURT_ERROR_NO_DEVICE` where
/// there is no usable GPU.
#[no_mangle]
pub extern "C" fn gpurt_init() -> gpurt_status_t {
    boundary::call("gpurt_init", crate::driver::init)
}

/// Sets `*initialized` to 1 if the driver has been loaded and initialised.
#[no_mangle]
pub extern "C" fn gpurt_is_initialized(initialized: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_is_initialized", || {
        Out::new(initialized, "initialized")?.write(crate::driver::is_initialized() as c_int);
        Ok(())
    })
}

/// Sets `*available` to 1 if a CUDA driver and at least one device are present.
/// Never fails for lack of a driver.
#[no_mangle]
pub extern "C" fn gpurt_is_available(available: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_is_available", || {
        Out::new(available, "available")?.write(super::is_available() as c_int);
        Ok(())
    })
}

/// The driver's CUDA version, 1000 * major + 10 * minor (13000 for 13.0).
#[no_mangle]
pub extern "C" fn gpurt_driver_version(version: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_driver_version", || {
        let version = Out::new(version, "version")?;
        crate::driver::init().or_else(|e| match e.status {
            Status::GPURT_ERROR_NO_DEVICE => Ok(()),
            _ => Err(e),
        })?;
        version.write(crate::driver::driver_version()?);
        Ok(())
    })
}

/// The number of CUDA devices: 0, with success, where there is no driver or device.
#[no_mangle]
pub extern "C" fn gpurt_device_count(count: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_count", || {
        let count = Out::new(count, "count")?;
        count.write(super::count()?);
        Ok(())
    })
}

/// This thread's current device, the same one `cudaGetDevice` reports.
#[no_mangle]
pub extern "C" fn gpurt_get_device(device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_get_device", || {
        let device = Out::new(device, "device")?;
        device.write(super::current()?);
        Ok(())
    })
}

/// Makes `device` current for this thread (its primary context, as `cudaSetDevice`).
#[no_mangle]
pub extern "C" fn gpurt_set_device(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_set_device", || super::set_current(device))
}

/// A handle for device `ordinal` (`GPURT_CURRENT_DEVICE` for the current one).
#[no_mangle]
pub extern "C" fn gpurt_device_get(ordinal: c_int, device: *mut gpurt_device_t) -> gpurt_status_t {
    boundary::call("gpurt_device_get", || {
        let device = Out::new(device, "device")?;
        let ordinal = super::resolve(ordinal)?;
        device.write(Handle::new(Kind::Device, 1, ordinal as u32).to_ptr());
        Ok(())
    })
}

/// The ordinal of a device handle.
#[no_mangle]
pub extern "C" fn gpurt_device_get_ordinal(device: gpurt_device_t, ordinal: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_get_ordinal", || {
        let ordinal = Out::new(ordinal, "ordinal")?;
        let handle = Handle::from_ptr(device).expect_kind(Kind::Device)?;
        let n = super::count()?;
        if handle.generation() != 1 || handle.index() as i64 >= n as i64 {
            return Err(Error::invalid_handle(format!("{:#x} is not a valid device handle", handle.0)));
        }
        ordinal.write(handle.index() as c_int);
        Ok(())
    })
}

/// Initialises `props` for this version of the header: sets `struct_size`, zeroes the rest.
#[no_mangle]
pub extern "C" fn gpurt_device_properties_init(props: *mut gpurt_device_properties_t) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_device_properties_init", || {
        Out::new(props, "props")?.write(gpurt_device_properties_t::zeroed());
        Ok(())
    })
}

/// Fills `props` (whose `struct_size` the caller set) for `device`.
#[no_mangle]
pub extern "C" fn gpurt_device_get_properties(device: c_int, props: *mut gpurt_device_properties_t) -> gpurt_status_t {
    boundary::call("gpurt_device_get_properties", || {
        let value = super::properties(device)?;
        write_sized(props, &value, super::PROPERTIES_V1_SIZE, "props")
    })
}

/// Sets `*supported` to 1 if `device` computes in bfloat16 natively (compute
/// capability ≥ 8.0; torch.cuda.is_bf16_supported).
#[no_mangle]
pub extern "C" fn gpurt_device_bf16_supported(device: c_int, supported: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_bf16_supported", || {
        let supported = Out::new(supported, "supported")?;
        supported.write(super::bf16_supported(device)? as c_int);
        Ok(())
    })
}

/// Sets `*supported` to 1 if `device` has TF32 tensor cores (compute capability ≥ 8.0).
#[no_mangle]
pub extern "C" fn gpurt_device_tf32_supported(device: c_int, supported: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_tf32_supported", || {
        let supported = Out::new(supported, "supported")?;
        supported.write(super::tf32_supported(device)? as c_int);
        Ok(())
    })
}

/// Free and total device memory in bytes, as `cudaMemGetInfo`.
#[no_mangle]
pub extern "C" fn gpurt_mem_get_info(device: c_int, free: *mut usize, total: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_mem_get_info", || {
        let (free, total) = (Out::new(free, "free")?, Out::new(total, "total")?);
        let (f, t) = super::mem_get_info(device)?;
        free.write(f);
        total.write(t);
        Ok(())
    })
}

/// Sets `*can_access` to 1 if `device` can access `peer`'s memory directly.
#[no_mangle]
pub extern "C" fn gpurt_device_can_access_peer(device: c_int, peer: c_int, can_access: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_can_access_peer", || {
        let can_access = Out::new(can_access, "can_access")?;
        can_access.write(super::can_access_peer(device, peer)? as c_int);
        Ok(())
    })
}

/// Lets `device` access `peer`'s memory: memory from `cuMemAlloc` and the mappings
/// of `peer`'s expandable segments, those made before and after (the driver opens
/// those only to the devices named on each). Enabling twice succeeds; a failed call
/// leaves access as it was.
#[no_mangle]
pub extern "C" fn gpurt_device_enable_peer_access(device: c_int, peer: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_enable_peer_access", || super::set_peer_access(device, peer, true))
}

/// Revokes `device`'s access to `peer` (expandable segments' mappings included).
/// Disabling twice succeeds.
#[no_mangle]
pub extern "C" fn gpurt_device_disable_peer_access(device: c_int, peer: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_disable_peer_access", || super::set_peer_access(device, peer, false))
}

/// Blocks until all work on `device` has finished. A synchronising call (see
/// `gpurt_set_sync_debug_mode`).
#[no_mangle]
pub extern "C" fn gpurt_device_synchronize(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_synchronize", || super::synchronize(device))
}
