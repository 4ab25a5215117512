//! Runs a suite that needs (or needs the absence of) a GPU, deciding at run time:
//! tests that cannot run here are reported as ignored, with the reason printed
//! first; `GPURT_REQUIRE_GPU=1` turns a missing GPU into a failure instead.

use libtest_mimic::{Arguments, Trial};

pub type Test = (&'static str, fn());

/// Why there is no usable GPU here, or None when there is one.
pub fn no_gpu_reason() -> Option<String> {
    let mut count = 0;
    let status = gpurt::device::ffi::gpurt_device_count(&mut count);
    if status != gpurt::Status::GPURT_SUCCESS {
        return Some(format!("gpurt_device_count failed: {}", last_message()));
    }
    if count > 0 {
        return None;
    }
    let mut version = 0;
    match gpurt::device::ffi::gpurt_driver_version(&mut version) {
        gpurt::Status::GPURT_ERROR_NO_DRIVER => Some(format!("no CUDA driver ({})", last_message())),
        _ => Some("the CUDA driver reports no device".to_string()),
    }
}

pub fn last_message() -> String {
    unsafe { std::ffi::CStr::from_ptr(gpurt::error::ffi::gpurt_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

#[allow(dead_code)] // each suite uses one variant
pub enum Needs {
    Gpu,
    NoGpu,
}

/// Why this machine cannot run the tests that need two GPUs, or None when it can.
fn fewer_than_two_gpus() -> Option<String> {
    let mut count = 0;
    match gpurt::device::ffi::gpurt_device_count(&mut count) {
        gpurt::Status::GPURT_SUCCESS if count >= 2 => None,
        gpurt::Status::GPURT_SUCCESS => Some(format!("they need two GPUs, and this machine has {count}")),
        _ => Some(format!("they need two GPUs: {}", last_message())),
    }
}

/// Runs `tests`, and `two_gpu_tests` where there are two GPUs (reported as ignored,
/// with the reason, where there are fewer).
pub fn run(suite: &str, needs: Needs, tests: &[Test], two_gpu_tests: &[Test]) -> ! {
    let args = Arguments::from_args();
    let reason = no_gpu_reason();
    let skip_reason = match (&needs, &reason) {
        (Needs::Gpu, Some(why)) => {
            if std::env::var("GPURT_REQUIRE_GPU").as_deref() == Ok("1") {
                eprintln!("{suite}: GPURT_REQUIRE_GPU=1 but no GPU is usable: {why}");
                std::process::exit(1);
            }
            Some(format!("needs a GPU: {why}; set GPURT_REQUIRE_GPU=1 to fail instead"))
        }
        (Needs::NoGpu, None) => Some("checks the no-driver behaviour, and a GPU is present".to_string()),
        _ => None,
    };
    if let Some(why) = &skip_reason {
        println!("{suite}: {} tests SKIPPED: {why}", tests.len() + two_gpu_tests.len());
    }
    let two_gpu_skip = skip_reason.clone().or_else(|| two_gpu_tests.first().and_then(|_| fewer_than_two_gpus()));
    if let (None, Some(why)) = (&skip_reason, &two_gpu_skip) {
        println!("{suite}: {} tests SKIPPED: {why}", two_gpu_tests.len());
    }
    let skipped = |two_gpu: bool| if two_gpu { two_gpu_skip.is_some() } else { skip_reason.is_some() };
    let trials = tests
        .iter()
        .map(|test| (test, false))
        .chain(two_gpu_tests.iter().map(|test| (test, true)))
        .map(|(&(name, body), two_gpu)| {
            Trial::test(name, move || {
                // Tests share process-wide state (current device, sync debug mode): one at a time.
                static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
                let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
                std::panic::catch_unwind(body).map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                        .into()
                })
            })
            .with_ignored_flag(skipped(two_gpu))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// Asserts a status, showing the last error message when it differs.
#[macro_export]
macro_rules! expect_status {
    ($call:expr, $status:ident) => {{
        let got = $call;
        assert_eq!(got, gpurt::Status::$status, "{} -> {:?}: {}", stringify!($call), got, $crate::support::last_message());
    }};
}
