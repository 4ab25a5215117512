//! File to device memory and back, 4 GiB (target from the GDS issue: gpurt ≥ 95 % of
//! the better of raw cuFile and a plain pipeline, reads and writes). In one run, on
//! the same file and device buffer, medians of alternating runs:
//! - gpurt: `gpurt_gds_read` / `gpurt_gds_write` (the mode it chose, printed);
//! - raw cuFile: `cuFileRead` / `cuFileWrite` of the whole buffer, registered;
//! - the plain pipeline: one thread, `pread` into two pinned 8 MiB buffers in turn,
//!   each followed by `cuMemcpyHtoDAsync` (writes: `cuMemcpyDtoHAsync`, `pwrite`).
//!
//! Reads warm (the file in the page cache) and, where the file system allows it,
//! cold with `O_DIRECT`. The file lies in `$GDS_BENCH_DIR` (default: the current
//! directory, on disk rather than a tmpfs).

use std::ffi::{c_char, c_int, c_void, CString};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, H};

const SIZE: usize = 4 << 30;
const CHUNK: usize = 8 << 20;
const RUNS: usize = 3;

#[repr(C)]
#[derive(Clone, Copy)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}
#[repr(C)]
struct Descr {
    kind: c_int,
    fd: u64, // the union's fd (as a pointer-sized member)
    fs_ops: *const c_void,
}

struct CuFile {
    _lib: libloading::Library,
    handle_register: unsafe extern "C" fn(*mut *mut c_void, *mut Descr) -> CuFileError,
    handle_deregister: unsafe extern "C" fn(*mut c_void),
    read: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize,
    write: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i64, i64) -> isize,
}

fn load_cufile(dev: u64) -> Option<CuFile> {
    let lib = unsafe { libloading::Library::new("libcufile.so.0") }.map_err(|e| println!("raw cuFile: not measured ({e})")).ok()?;
    unsafe {
        let open: unsafe extern "C" fn() -> CuFileError = *lib.get(b"cuFileDriverOpen").ok()?;
        let buf_register: unsafe extern "C" fn(*const c_void, usize, c_int) -> CuFileError = *lib.get(b"cuFileBufRegister").ok()?;
        let e = open();
        if e.err != 0 {
            println!("raw cuFile: not measured (cuFileDriverOpen: {})", e.err);
            return None;
        }
        let e = buf_register(dev as *const c_void, SIZE, 0);
        println!("raw cuFile: driver open; buffer registration {}", if e.err == 0 { "ok".to_string() } else { format!("refused ({})", e.err) });
        Some(CuFile {
            handle_register: *lib.get(b"cuFileHandleRegister").ok()?,
            handle_deregister: *lib.get(b"cuFileHandleDeregister").ok()?,
            read: *lib.get(b"cuFileRead").ok()?,
            write: *lib.get(b"cuFileWrite").ok()?,
            _lib: lib,
        })
    }
}

fn open_file(path: &str, direct: bool, write: bool) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(write).custom_flags(if direct { libc::O_DIRECT } else { 0 }).open(path)
}

/// The plain pipeline: one thread, two pinned buffers.
struct Pipeline {
    buffers: [*mut c_void; 2],
    events: [sys::CUevent; 2],
    stream: sys::CUstream,
}

impl Pipeline {
    fn new(stream: sys::CUstream) -> Pipeline {
        let mut buffers = [std::ptr::null_mut(); 2];
        let mut events = [std::ptr::null_mut(); 2];
        for k in 0..2 {
            ok(unsafe { sys::cuMemHostAlloc(&mut buffers[k], CHUNK, 0) });
            ok(unsafe { sys::cuEventCreate(&mut events[k], sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) });
        }
        Pipeline { buffers, events, stream }
    }

    fn read(&self, file: &std::fs::File, dev: u64) {
        for (k, at) in (0..SIZE).step_by(CHUNK).enumerate() {
            let b = k % 2;
            ok(unsafe { sys::cuEventSynchronize(self.events[b]) });
            let n = unsafe { libc::pread(file.as_raw_fd(), self.buffers[b], CHUNK, at as libc::off_t) };
            assert_eq!(n as usize, CHUNK, "pread");
            ok(unsafe { sys::cuMemcpyHtoDAsync_v2(dev + at as u64, self.buffers[b], CHUNK, self.stream) });
            ok(unsafe { sys::cuEventRecord(self.events[b], self.stream) });
        }
        ok(unsafe { sys::cuStreamSynchronize(self.stream) });
    }

    fn write(&self, file: &std::fs::File, dev: u64) {
        ok(unsafe { sys::cuMemcpyDtoHAsync_v2(self.buffers[0], dev, CHUNK, self.stream) });
        ok(unsafe { sys::cuEventRecord(self.events[0], self.stream) });
        for (k, at) in (0..SIZE).step_by(CHUNK).enumerate() {
            let b = k % 2;
            if at + CHUNK < SIZE {
                ok(unsafe { sys::cuMemcpyDtoHAsync_v2(self.buffers[1 - b], dev + (at + CHUNK) as u64, CHUNK, self.stream) });
                ok(unsafe { sys::cuEventRecord(self.events[1 - b], self.stream) });
            }
            ok(unsafe { sys::cuEventSynchronize(self.events[b]) });
            let n = unsafe { libc::pwrite(file.as_raw_fd(), self.buffers[b], CHUNK, at as libc::off_t) };
            assert_eq!(n as usize, CHUNK, "pwrite");
            // The next copy into this buffer is queued only after this pwrite.
        }
        ok(unsafe { sys::cuStreamSynchronize(self.stream) });
    }
}

fn gbps(seconds: f64) -> f64 {
    SIZE as f64 / seconds / 1e9
}

fn main() {
    let (lib, basics) = common::open("gds");
    type FileT = *mut c_void;
    let gds_open: unsafe extern "C" fn(*const c_char, c_int, *mut FileT) -> i32 = unsafe { sym!(lib, "gpurt_gds_file_open") };
    let gds_close: unsafe extern "C" fn(FileT) -> i32 = unsafe { sym!(lib, "gpurt_gds_file_close") };
    let gds_read: unsafe extern "C" fn(FileT, H, usize, i64, *mut usize) -> i32 = unsafe { sym!(lib, "gpurt_gds_read") };
    let gds_write: unsafe extern "C" fn(FileT, H, usize, i64, *mut usize) -> i32 = unsafe { sym!(lib, "gpurt_gds_write") };
    let gds_mode: unsafe extern "C" fn(*mut c_int) -> i32 = unsafe { sym!(lib, "gpurt_gds_mode") };
    let mut mode = 0;
    unsafe { st(gds_mode(&mut mode)) };
    println!("gpurt GDS mode: {}", ["?", "GDS", "cuFile compatibility", "staged"][mode as usize]);

    let (stream, native) = basics.stream();
    let mut dev: H = std::ptr::null_mut();
    unsafe { st((basics.malloc)(SIZE, stream, &mut dev)) };
    let dev = dev as u64;
    let dir = std::env::var("GDS_BENCH_DIR").unwrap_or_else(|_| ".".into());
    let path = format!("{dir}/gpurt_gds_bench_{}.bin", std::process::id());
    {
        // 4 GiB of random-looking bytes, written once (and so in the page cache).
        let mut chunk = vec![0u8; CHUNK];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let file = std::fs::File::create(&path).expect("create the benchmark file");
        for at in (0..SIZE).step_by(CHUNK) {
            for word in chunk.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                word.copy_from_slice(&x.to_le_bytes());
            }
            let n = unsafe { libc::pwrite(file.as_raw_fd(), chunk.as_ptr().cast(), CHUNK, at as libc::off_t) };
            assert_eq!(n as usize, CHUNK);
        }
        file.sync_all().unwrap();
    }
    let cufile = load_cufile(dev);
    let pipeline = Pipeline::new(native as sys::CUstream);
    let c_path = CString::new(path.clone()).unwrap();
    let time = |f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };

    for (what, direct, write) in [("read, warm page cache", false, false), ("read, cold (O_DIRECT)", true, false), ("write", false, true)] {
        if direct && open_file(&path, true, false).is_err() {
            println!("{what}: not measured (the file system refuses O_DIRECT)");
            continue;
        }
        let flags = if write { libc::O_RDWR } else { libc::O_RDONLY } | if direct { libc::O_DIRECT } else { 0 };
        let mut g = Vec::new();
        let mut c = Vec::new();
        let mut p = Vec::new();
        for _ in 0..RUNS {
            let mut file: FileT = std::ptr::null_mut();
            unsafe { st(gds_open(c_path.as_ptr(), flags, &mut file)) };
            g.push(time(&mut || unsafe {
                let mut done = 0usize;
                match write {
                    false => st(gds_read(file, dev as H, SIZE, 0, &mut done)),
                    true => st(gds_write(file, dev as H, SIZE, 0, &mut done)),
                }
                assert_eq!(done, SIZE);
            }));
            unsafe { st(gds_close(file)) };
            if let Some(cf) = &cufile {
                let f = open_file(&path, direct, write).unwrap();
                let mut descr = Descr { kind: 1, fd: f.as_raw_fd() as u64, fs_ops: std::ptr::null() };
                let mut handle = std::ptr::null_mut();
                let e = unsafe { (cf.handle_register)(&mut handle, &mut descr) };
                if e.err == 0 {
                    c.push(time(&mut || unsafe {
                        let n = match write {
                            false => (cf.read)(handle, dev as *mut c_void, SIZE, 0, 0),
                            true => (cf.write)(handle, dev as *const c_void, SIZE, 0, 0),
                        };
                        assert_eq!(n as usize, SIZE, "cuFile transferred {n}");
                    }));
                    unsafe { (cf.handle_deregister)(handle) };
                } else {
                    println!("raw cuFile: cuFileHandleRegister refused ({}, CUresult {})", e.err, e.cu_err);
                }
            }
            let f = open_file(&path, direct, write).unwrap();
            p.push(time(&mut || if write { pipeline.write(&f, dev) } else { pipeline.read(&f, dev) }));
        }
        let (g, p) = (gbps(median(g)), gbps(median(p)));
        let c = (!c.is_empty()).then(|| gbps(median(c)));
        let better = p.max(c.unwrap_or(0.0));
        println!(
            "{what}, {} GiB: gpurt {g:.2} GB/s, raw cuFile {}, plain pipeline {p:.2} GB/s",
            SIZE >> 30,
            c.map_or("not measured".to_string(), |c| format!("{c:.2} GB/s"))
        );
        println!(
            "TARGET {what}: gpurt >= 95 % of the better raw path: {} ({:.1} %)",
            if g >= 0.95 * better { "PASS" } else { "MISS" },
            100.0 * g / better
        );
    }
    let _ = std::fs::remove_file(&path);
    unsafe { st((basics.free)(dev as H)) };
}
