package gpurt

/*
#include <gpurt.h>
*/
import "C"

// DeviceCount is the number of devices; 0 where there is no driver.
func DeviceCount() (int, error) {
	var n C.int
	err := call(func() C.gpurt_status_t { return C.gpurt_device_count(&n) })
	return int(n), err
}

// DeviceProperties are a device's main properties.
type DeviceProperties struct {
	Name                string
	Major, Minor        int
	TotalMemory         uint64
	MultiprocessorCount int
}

// GetDeviceProperties reads device's properties.
func GetDeviceProperties(device int) (DeviceProperties, error) {
	var p C.gpurt_device_properties_t
	p.struct_size = C.size_t(C.sizeof_gpurt_device_properties_t)
	err := call(func() C.gpurt_status_t { return C.gpurt_device_get_properties(C.int(device), &p) })
	return DeviceProperties{
		Name:                C.GoString(&p.name[0]),
		Major:               int(p.major),
		Minor:               int(p.minor),
		TotalMemory:         uint64(p.total_memory),
		MultiprocessorCount: int(p.multiprocessor_count),
	}, err
}

// MemGetInfo is the device's free and total memory in bytes.
func MemGetInfo(device int) (free, total uint64, err error) {
	var f, t C.size_t
	err = call(func() C.gpurt_status_t { return C.gpurt_mem_get_info(C.int(device), &f, &t) })
	return uint64(f), uint64(t), err
}

// Synchronize waits for all work on device.
func Synchronize(device int) error {
	return call(func() C.gpurt_status_t { return C.gpurt_device_synchronize(C.int(device)) })
}
