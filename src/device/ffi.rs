use libc::c_int;

use super::gpurt_device_properties_t;
use crate::boundary::{self, write_sized, Out};
use crate::error::{gpurt_status_t, Error, Status};
use crate::handle::{Handle, Kind};

/// A device handle; the same for every call with the same ordinal.
pub struct gpurt_device_s {
    _opaque: [u8; 0],
}
/// The handle of a device: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_device_t = *mut gpurt_device_s;

/// Loads the CUDA driver and initialises it. Optional: every call initialises on
/// demand. Returns `GPURT_ERROR_NO_DRIVER` or `GPURT_ERROR_NO_DEVICE` where
/// there is no usable GPU.
///
/// @return GPURT_SUCCESS; GPURT_ERROR_NO_DRIVER where libcuda cannot be loaded; GPURT_ERROR_NO_DEVICE where it reports no device; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_init() -> gpurt_status_t {
    boundary::call("gpurt_init", crate::driver::init)
}

/// Sets `*initialized` to 1 if the driver has been loaded and initialised.
///
/// @param[out] initialized receives 1 if the driver is loaded and initialised, else 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_is_initialized(initialized: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_is_initialized", || {
        Out::new(initialized, "initialized")?.write(crate::driver::is_initialized() as c_int);
        Ok(())
    })
}

/// Sets `*available` to 1 if a CUDA driver and at least one device are present.
/// Never fails for lack of a driver.
///
/// @param[out] available receives 1 if a driver and at least one device are present, else 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_is_available(available: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_is_available", || {
        Out::new(available, "available")?.write(super::is_available() as c_int);
        Ok(())
    })
}

/// The driver's CUDA version, 1000 * major + 10 * minor (13000 for 13.0).
///
/// @param[out] version receives the driver's CUDA version, 1000 × major + 10 × minor; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NO_DRIVER where there is none; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param[out] count receives the number of devices (0 without a driver); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_count(count: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_count", || {
        let count = Out::new(count, "count")?;
        count.write(super::count()?);
        Ok(())
    })
}

/// This thread's current device, the same one `cudaGetDevice` reports.
///
/// @param[out] device receives this thread's current device ordinal; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_get_device(device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_get_device", || {
        let device = Out::new(device, "device")?;
        device.write(super::current()?);
        Ok(())
    })
}

/// Makes `device` current for this thread (its primary context, as `cudaSetDevice`).
///
/// @param device the device ordinal to make current
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_set_device(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_set_device", || super::set_current(device))
}

/// A handle for device `ordinal` (`GPURT_CURRENT_DEVICE` for the current one).
///
/// @param ordinal a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] device receives the device's handle; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param device a device handle
/// @param[out] ordinal receives its ordinal; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `device`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param[out] props receives a zeroed struct with this header's `struct_size`; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_properties_init(props: *mut gpurt_device_properties_t) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_device_properties_init", || {
        Out::new(props, "props")?.write(gpurt_device_properties_t::zeroed());
        Ok(())
    })
}

/// Fills `props` (whose `struct_size` the caller set) for `device`.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param props a struct initialised with GPURT_DEVICE_PROPERTIES_INIT; gpurt fills as many fields as its `struct_size` holds
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `props` is NULL or its `struct_size` is smaller than the first version's; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_get_properties(device: c_int, props: *mut gpurt_device_properties_t) -> gpurt_status_t {
    boundary::call("gpurt_device_get_properties", || {
        let value = super::properties(device)?;
        write_sized(props, &value, super::PROPERTIES_V1_SIZE, "props")
    })
}

/// Sets `*supported` to 1 if `device` computes in bfloat16 natively (compute
/// capability ≥ 8.0; torch.cuda.is_bf16_supported).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] supported receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_bf16_supported(device: c_int, supported: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_bf16_supported", || {
        let supported = Out::new(supported, "supported")?;
        supported.write(super::bf16_supported(device)? as c_int);
        Ok(())
    })
}

/// Sets `*supported` to 1 if `device` has TF32 tensor cores (compute capability ≥ 8.0).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] supported receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_tf32_supported(device: c_int, supported: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_tf32_supported", || {
        let supported = Out::new(supported, "supported")?;
        supported.write(super::tf32_supported(device)? as c_int);
        Ok(())
    })
}

/// Free and total device memory in bytes, as `cudaMemGetInfo`.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] free receives free device memory in bytes; must not be NULL
/// @param[out] total receives the device's memory in bytes; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param peer another device ordinal
/// @param[out] can_access receives 1 if `device` can access `peer`'s memory, else 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param peer the device whose memory `device` may then access
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; an error naming the reason where the devices cannot access each other (a failed call leaves access as it was); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_enable_peer_access(device: c_int, peer: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_enable_peer_access", || super::set_peer_access(device, peer, true))
}

/// Revokes `device`'s access to `peer` (expandable segments' mappings included).
/// Disabling twice succeeds.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param peer the device whose memory `device` may no longer access
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_disable_peer_access(device: c_int, peer: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_disable_peer_access", || super::set_peer_access(device, peer, false))
}

/// Blocks until all work on `device` has finished. A synchronising call (see
/// `gpurt_set_sync_debug_mode`).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; the first error of the device's finished work; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks the calling thread until all work on `device` has finished: a synchronising call for the sync debug mode (GPURT_ERROR_SYNCHRONIZING_CALL in its error mode). Not allowed while a stream of the device is being captured (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_device_synchronize(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_synchronize", || super::synchronize(device))
}
